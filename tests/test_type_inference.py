"""scatter_rewrite.type_inference: shape facts with data propagation kept to small values."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from scatter_rewrite import type_inference
from scatter_rewrite.type_inference import (
    DATA_PROP_ELEMENTS, borrow_inferred_types, correct_contradicted_shapes,
    infer_with_bounded_data_prop, restore_types,
)

BIG = 4 * DATA_PROP_ELEMENTS

# A Reshape whose shape is computed from Shape ops (only data propagation infers its output) next
# to an integer chain computed from constants with BIG elements (a Range of positions, as in the
# TensorRT lowering's sorting network), which data propagation would otherwise carry as dims.
MODEL = f"""
<ir_version: 8, opset_import: ["" : 17]>
g (float[6, 6] x) => (float[6, 6] y, int32[{BIG}] p) {{
    s = Shape(x)
    zero = Constant<value = int64[1] {{0}}>()
    one = Constant<value = int64[1] {{1}}>()
    d0 = Gather<axis = 0>(s, zero)
    d1 = Gather<axis = 0>(s, one)
    n = Mul(d0, d1)
    flat = Reshape(x, n)
    y = Reshape(flat, s)
    start = Constant<value = int32 {{0}}>()
    limit = Constant<value = int32 {{{BIG}}}>()
    step = Constant<value = int32 {{1}}>()
    r = Range(start, limit, step)
    two = Constant<value = int32 {{2}}>()
    q = Mul(r, two)
    p = Add(q, r)
}}
"""


@pytest.fixture
def data_prop_runs(monkeypatch):
    """The models ONNX's data propagation is run on."""
    runs = []
    real = onnx.shape_inference.infer_shapes

    def spy(model, *args, **kwargs):
        if kwargs.get("data_prop"):
            runs.append(model)
        return real(model, *args, **kwargs)

    monkeypatch.setattr(type_inference.onnx.shape_inference, "infer_shapes", spy)
    return runs


def _static_sizes(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    sizes = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            size = 1
            for d in dims:
                size *= d.dim_value
            sizes[vi.name] = size
    return sizes


def test_data_propagation_sees_the_shape_chain_but_no_big_value(data_prop_runs):
    proto = onnx.parser.parse_model(MODEL)
    shapes = infer_with_bounded_data_prop(proto)
    assert shapes["flat"] == (36,)  # known only through data propagation of Shape -> Gather -> Mul
    assert shapes["p"] == shapes["q"] == (BIG,)  # the big values keep their (static) shapes
    assert data_prop_runs
    for run in data_prop_runs:
        produced = {o for node in run.graph.node for o in node.output}
        assert not {"r", "q"} & produced  # cut out: typed inputs instead (p, a graph output, stays)
        inputs = {i.name for i in run.graph.input}
        for node in run.graph.node:  # a big value left (a graph output) comes from inputs only
            big = [o for o in node.output if _static_sizes(run).get(o, 0) > DATA_PROP_ELEMENTS]
            assert not big or set(node.input) <= inputs, node
    assert [n.op_type for n in proto.graph.node].count("Range") == 1  # the caller's: unchanged


def test_a_shape_only_data_propagation_shows_false_is_still_corrected():
    model = ir.serde.deserialize_model(onnx.parser.parse_model(MODEL))
    flat = next(v for node in model.graph for v in node.outputs if v.name == "flat")
    flat.shape = ir.Shape([6, 6])  # a false claim: Reshape(x, [36]) is [36]
    flat.dtype = ir.DataType.FLOAT
    corrected = correct_contradicted_shapes(model)
    assert corrected == ["'flat' declared [6, 6], is [36]"]
    assert list(flat.shape) == [36]


def test_borrowing_sharpens_symbolic_dims_data_propagation_fixes_and_gives_them_back():
    model = ir.serde.deserialize_model(onnx.parser.parse_model(MODEL))
    flat = next(v for node in model.graph for v in node.outputs if v.name == "flat")
    flat.shape = ir.Shape(["If_output_dim_0"])  # a name, as TorchScript declares out of its If
    flat.dtype = ir.DataType.FLOAT
    borrowed = borrow_inferred_types(model)
    assert [str(d) for d in flat.shape] == ["If_output_dim_0"]  # without sharpen: declared stays
    restore_types(borrowed)
    borrowed = borrow_inferred_types(model, sharpen=True)
    assert list(flat.shape) == [36]
    restore_types(borrowed)
    assert [str(d) for d in flat.shape] == ["If_output_dim_0"] and flat.dtype == ir.DataType.FLOAT


LOOP_MODEL = f"""
<ir_version: 8, opset_import: ["" : 17]>
g (int64 trips, bool go, int32[{BIG}] acc) => (int32[{BIG}] out) {{
    out = Loop(trips, go, acc) <body = body (int64 i, bool c, int32[{BIG}] a)
                                     => (bool c_out, int32[{BIG}] a_out) {{
        start = Constant<value = int32 {{0}}>()
        limit = Constant<value = int32 {{{BIG}}}>()
        step = Constant<value = int32 {{1}}>()
        r = Range(start, limit, step)
        a_out = Add(a, r)
        c_out = Identity(c)
    }}>
}}
"""


def test_a_loop_never_reaches_data_propagation(data_prop_runs):
    """ONNX propagates no data through a Loop, and inferring its body with data propagation is what
    cost (0.16 s and 120 MiB for the TensorRT lowering's sorting Loop): the run reads the Loop's
    outputs as typed inputs instead, and the body keeps its plain inference."""
    shapes = infer_with_bounded_data_prop(onnx.parser.parse_model(LOOP_MODEL))
    assert shapes["r"] == (BIG,) and shapes["out"] == (BIG,)
    (run,) = data_prop_runs
    assert "Loop" not in [node.op_type for node in run.graph.node]
    (out,) = [i for i in run.graph.input if i.name == "out"]
    assert [d.dim_value for d in out.type.tensor_type.shape.dim] == [BIG]


def test_a_value_cut_in_one_round_keeps_its_type_in_the_next(data_prop_runs, monkeypatch):
    """A value cut in the first round is cut again in the next with the type it had when cut, even
    where the first round's data propagation left its shape unknown (that crashed the copy)."""
    from scatter_rewrite import type_inference

    real = type_inference._inferred_types
    calls = []

    def forgetful(graph):
        found = real(graph)
        calls.append(1)
        if len(calls) == 2:  # the first data-propagation round: it "forgets" q's shape
            found["q"] = (found["q"][0], None)
            found["late"] = (onnx.TensorProto.INT64, (BIG,))  # and makes another big value static
        return found

    monkeypatch.setattr(type_inference, "_inferred_types", forgetful)
    shapes = infer_with_bounded_data_prop(onnx.parser.parse_model(MODEL))
    assert len(data_prop_runs) == 2
    (q,) = [i for i in data_prop_runs[1].graph.input if i.name == "q"]
    assert [d.dim_value for d in q.type.tensor_type.shape.dim] == [BIG]
    assert shapes["flat"] == (36,)


def test_a_big_constant_reaches_inference_copies_as_dtype_and_dims_only():
    """TorchScript writes ``torch.zeros(N, F)`` as a Constant node: every copy for inference or
    for deciding held its bytes again (5 MiB each at N = 20,000, F = 64)."""
    from scatter_rewrite.type_inference import serialize_without_weights, weightless_copy

    zeros = onnx.numpy_helper.from_array(np.zeros((64, 64), np.float32), "z")
    model = ir.serde.deserialize_model(onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Constant", [], ["z"], value=zeros),
         onnx.helper.make_node("Add", ["z", "x"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [64, 64])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])))
    original = model.graph.node(0).attributes["value"]
    proto = serialize_without_weights(model)
    value = proto.graph.node[0].attribute[0].t
    assert value.data_location == onnx.TensorProto.EXTERNAL and not value.raw_data
    assert list(value.dims) == [64, 64] and value.data_type == onnx.TensorProto.FLOAT
    assert model.graph.node(0).attributes["value"] is original  # the model keeps its own
    assert original.value.numpy().shape == (64, 64)
    assert inferred_shape(onnx.shape_inference.infer_shapes(proto), "y") == [64, 64]
    assert weightless_copy(model).graph.node(0).op_type == "Constant"


def inferred_shape(model: onnx.ModelProto, name: str) -> list[int]:
    (vi,) = [v for v in list(model.graph.value_info) + list(model.graph.output) if v.name == name]
    return [d.dim_value for d in vi.type.tensor_type.shape.dim]


# An If whose branches each define a value named t, of rank 3 in one and rank 2 in the other (ONNX
# lets sibling graphs reuse a name): keyed by name, one t would take the other's type.
BRANCHES_MODEL = """
<ir_version: 8, opset_import: ["" : 13]>
g (float[24] x, bool c) => (float[24] y) {
    y = If(c) <then_branch = then_g () => (float[24] then_out) {
        then_shape = Constant<value = int64[3] {2, 3, 4}>()
        t = Reshape(x, then_shape)
        flat = Constant<value = int64[1] {-1}>()
        then_out = Reshape(t, flat)
    }, else_branch = else_g () => (float[24] else_out) {
        else_shape = Constant<value = int64[2] {6, 4}>()
        t = Reshape(x, else_shape)
        flat_e = Constant<value = int64[1] {-1}>()
        else_out = Reshape(t, flat_e)
    }>
}
"""


def _branch_values(model: ir.Model, name: str) -> list[ir.Value]:
    [if_node] = list(model.graph)
    return [v for branch in ("then_branch", "else_branch")
            for node in if_node.attributes[branch].value for v in node.outputs if v.name == name]


def test_values_of_one_name_in_sibling_branches_each_borrow_their_own_type():
    model = ir.serde.deserialize_model(onnx.parser.parse_model(BRANCHES_MODEL))
    then_t, else_t = _branch_values(model, "t")
    borrowed = borrow_inferred_types(model)
    assert (list(then_t.shape), list(else_t.shape)) == ([2, 3, 4], [6, 4])
    restore_types(borrowed)
    assert then_t.shape is None and else_t.shape is None


def test_a_name_sibling_branches_type_differently_is_not_said_by_name():
    shapes = infer_with_bounded_data_prop(onnx.parser.parse_model(BRANCHES_MODEL))
    assert "t" not in shapes and shapes["then_out"] == shapes["else_out"] == (24,)
    model = ir.serde.deserialize_model(onnx.parser.parse_model(BRANCHES_MODEL))
    then_t, else_t = _branch_values(model, "t")
    then_t.shape, else_t.shape = ir.Shape([2, 3, 4]), ir.Shape([6, 4])
    then_t.dtype = else_t.dtype = ir.DataType.FLOAT
    assert correct_contradicted_shapes(model) == []
    assert (list(then_t.shape), list(else_t.shape)) == ([2, 3, 4], [6, 4])


def test_a_loop_bodys_untyped_carried_input_is_borrowed_from_the_loops_input_and_given_back():
    body = onnx.helper.make_graph(
        [onnx.helper.make_node("Add", ["acc_in", "acc_in"], ["acc_out"]),
         onnx.helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [onnx.helper.make_tensor_value_info("i", onnx.TensorProto.INT64, []),
         onnx.helper.make_tensor_value_info("cond_in", onnx.TensorProto.BOOL, []),
         onnx.helper.make_value_info("acc_in", onnx.TypeProto())],
        [onnx.helper.make_tensor_value_info("cond_out", onnx.TensorProto.BOOL, []),
         onnx.helper.make_value_info("acc_out", onnx.TypeProto())])
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)], "g",
        [onnx.helper.make_tensor_value_info("n", onnx.TensorProto.INT64, []),
         onnx.helper.make_tensor_value_info("x", onnx.TensorProto.INT16, [3])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.INT16, [3])])
    model = ir.serde.deserialize_model(
        onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)]))
    carried = model.graph.node(0).attributes["body"].value.inputs[2]
    assert carried.dtype is None
    borrowed = borrow_inferred_types(model)
    assert carried.dtype == ir.DataType.INT16
    restore_types(borrowed)
    assert carried.type is None
