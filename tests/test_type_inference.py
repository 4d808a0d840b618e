"""scatter_rewrite.type_inference: shape facts with data propagation kept to small values."""

from __future__ import annotations

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


def test_a_big_value_inside_a_loop_body_is_cut_out_too(data_prop_runs):
    shapes = infer_with_bounded_data_prop(onnx.parser.parse_model(LOOP_MODEL))
    assert shapes["r"] == (BIG,)
    (run,) = data_prop_runs
    body = run.graph.node[0].attribute[0].g
    assert "r" not in {o for node in body.node for o in node.output}
    assert "r" in {i.name for i in run.graph.input}  # read from the outer scope instead
