"""opset.py: per-node conversion, and keeping the nodes onnx.version_converter refuses to downgrade
although the older schema accepts them unchanged."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto

from tests.helpers.models import function_called_at_two_ranks
from scatter_rewrite.errors import ConversionError
from scatter_rewrite.opset import convert_opset, fits_schema
from scatter_rewrite.validate import run_onnxruntime
from tests.helpers.runs import validation_ort_run
from tests.helpers.cli import invoke


def one_node(op, inputs, attrs=None, opset=18, dtype=TensorProto.FLOAT, shapes=None, initializers=(), out_dtype=None,
             out_shape=()):
    vi = oh.make_tensor_value_info
    shapes = shapes or {}
    graph = oh.make_graph(
        [oh.make_node(op, [i for i in inputs], ["y"], **(attrs or {}))], "g",
        [vi(i, dtype if i != "shape" else TensorProto.INT64, shapes.get(i)) for i in inputs
         if i not in {t.name for t in initializers}],
        [vi("y", out_dtype if out_dtype is not None else dtype, out_shape)], initializer=list(initializers))
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def converted(proto, target):
    model = ir.serde.deserialize_model(proto)
    convert_opset(model, target)
    out = ir.serde.serialize_model(model)
    onnx.checker.check_model(out, full_check=True)
    return out


@pytest.mark.parametrize("target", [11, 13])
def test_add_14_float_kept_at_older_opset(target):
    out = converted(one_node("Add", ["a", "b"], shapes={"a": [3], "b": [3]}, out_shape=[3]), target)
    assert out.opset_import[0].version == target and out.graph.node[0].op_type == "Add"
    feeds = {"a": np.arange(3, dtype=np.float32), "b": np.ones(3, np.float32)}
    np.testing.assert_array_equal(run_onnxruntime(out.SerializeToString(), feeds)[0], feeds["a"] + 1)


def test_add_14_int8_refused_below_14():
    """Add-13 has no int8: the node cannot be kept, and the error names it."""
    with pytest.raises(ConversionError, match=r"Add .*opset 13"):
        converted(one_node("Add", ["a", "b"], dtype=TensorProto.INT8, shapes={"a": [3], "b": [3]}), 13)


def test_reshape_allowzero_default_dropped_and_set_refused():
    shape = oh.make_tensor("shape", TensorProto.INT64, [2], [2, 3])
    plain = converted(one_node("Reshape", ["x", "shape"], {"allowzero": 0}, initializers=[shape], shapes={"x": [6]}, out_shape=[2, 3]), 13)
    assert [a.name for a in plain.graph.node[0].attribute] == []
    # allowzero=1 with a constant shape holding no 0: Reshape-13 computes the same
    kept = converted(one_node("Reshape", ["x", "shape"], {"allowzero": 1}, initializers=[shape], shapes={"x": [6]},
                              out_shape=[2, 3]), 11)
    assert [n.op_type for n in kept.graph.node] == ["Reshape"] and not kept.graph.node[0].attribute
    feeds = {"x": np.arange(6, dtype=np.float32)}
    np.testing.assert_array_equal(run_onnxruntime(kept.SerializeToString(), feeds)[0], feeds["x"].reshape(2, 3))
    zero = oh.make_tensor("shape", TensorProto.INT64, [2], [0, 3])
    with pytest.raises(ConversionError, match=r"Reshape.*holds a 0"):
        converted(one_node("Reshape", ["x", "shape"], {"allowzero": 1}, initializers=[zero], shapes={"x": [0, 3]}, out_shape=[0, 3]), 13)


def test_reshape_allowzero_computed_shape():
    """A computed shape: the same when the input's size is known non-zero (a 0 would leave no element);
    otherwise padded, reshaped and sliced so that a 0 stays a 0-size dimension."""
    vi = oh.make_tensor_value_info
    def model(x_shape, y_shape=(3, 2)):
        graph = oh.make_graph(
            [oh.make_node("Shape", ["y"], ["s"]), oh.make_node("Reshape", ["x", "s"], ["z"], allowzero=1)], "g",
            [vi("x", TensorProto.FLOAT, x_shape), vi("y", TensorProto.FLOAT, list(y_shape))],
            [vi("z", TensorProto.FLOAT, [None, None])])
        return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    out = converted(model([2, 3]), 13)
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "y": np.zeros((3, 2), np.float32)}
    np.testing.assert_array_equal(run_onnxruntime(out.SerializeToString(), feeds)[0], feeds["x"].reshape(3, 2))
    # A dynamic input: the shape may hold a 0, kept as a 0-size dimension (padded, reshaped, sliced).
    out = converted(model(["n", 3], ["a", "b"]), 13)
    assert "allowzero" not in {a.name for n in out.graph.node for a in n.attribute}
    np.testing.assert_array_equal(run_onnxruntime(out.SerializeToString(), feeds)[0], feeds["x"].reshape(3, 2))
    empty = {"x": np.zeros((0, 3), np.float32), "y": np.zeros((3, 0), np.float32)}
    assert run_onnxruntime(out.SerializeToString(), empty)[0].shape == (3, 0)


@pytest.mark.parametrize("start, end", [(1, None), (-1, None), (0, -1), (1, 2), (-5, 10)])
def test_shape_start_end_as_shape_then_slice(start, end):
    attrs = {"start": start} if end is None else {"start": start, "end": end}
    assert converted(one_node("Shape", ["x"], shapes={"x": [2, 3]}, out_dtype=TensorProto.INT64, out_shape=[2]), 13).graph.node[0].op_type == "Shape"
    out = converted(one_node("Shape", ["x"], attrs, shapes={"x": [2, 3, 4]}, out_dtype=TensorProto.INT64, out_shape=[None]), 11)
    assert "Slice" in [n.op_type for n in out.graph.node]
    got = run_onnxruntime(out.SerializeToString(), {"x": np.zeros((2, 3, 4), np.float32)})[0]
    np.testing.assert_array_equal(got, np.array([2, 3, 4])[slice(start, end)])


@pytest.mark.parametrize("attr,value,expected", [("value_ints", [1, 2], np.array([1, 2])), ("value_float", 2.5, np.float32(2.5)),
                                                 ("value_int", 7, np.int64(7))])
def test_constant_value_attributes_become_a_tensor_at_opset_11(attr, value, expected):
    graph = oh.make_graph([oh.make_node("Constant", [], ["y"], **{attr: value})], "g", [],
                          [oh.make_tensor_value_info("y", onnx.helper.np_dtype_to_tensor_dtype(expected.dtype),
                                                     expected.shape)])
    out = converted(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]), 11)
    (a,) = out.graph.node[0].attribute
    assert a.name == "value"
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(a.t), expected)
    np.testing.assert_array_equal(run_onnxruntime(out.SerializeToString(), {})[0], expected)


def test_softmax_is_never_kept_unchanged():
    """Softmax-13 changed what axis means: it is not on the same-semantics list."""
    node = ir.node("Softmax", [ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT))], {"axis": -1})
    assert fits_schema(node, 13, 11) is None
    relu = ir.node("Relu", [ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT))])
    relu.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
    assert fits_schema(relu, 14, 13) == []
    assert fits_schema(relu, 13, 14) is None  # only downgrades


def test_converter_leftover_default_attribute_dropped():
    """onnx.version_converter keeps ReduceSum-13's noop_with_empty_axes when going to 12."""
    out = converted(one_node("ReduceSum", ["x"], {"noop_with_empty_axes": 0, "keepdims": 0}, opset=13, shapes={"x": [2, 3]}), 12)
    assert {a.name for a in out.graph.node[0].attribute} <= {"keepdims", "axes"}
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    np.testing.assert_array_equal(run_onnxruntime(out.SerializeToString(), feeds)[0], np.float32(15))


def test_untyped_intermediates_get_inferred_types_for_the_downgrade():
    """TorchScript records no value_info: the dtypes fits_schema needs come from shape inference,
    and are given back afterwards (nothing added to the saved model)."""
    vi = oh.make_tensor_value_info
    graph = oh.make_graph(
        [oh.make_node("Add", ["i", "one"], ["t"]), oh.make_node("Mul", ["t", "t"], ["y"])], "g",
        [vi("i", TensorProto.INT64, [2])], [vi("y", TensorProto.INT64, [2])],
        initializer=[oh.make_tensor("one", TensorProto.INT64, [], [1])])
    out = converted(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 16)]), 13)
    assert [n.op_type for n in out.graph.node] == ["Add", "Mul"] and "t" not in {v.name for v in out.graph.value_info}
    feeds = {"i": np.array([2, -3], np.int64)}
    np.testing.assert_array_equal(run_onnxruntime(out.SerializeToString(), feeds)[0], (feeds["i"] + 1) ** 2)


def test_untyped_input_does_not_give_converted_outputs_a_guessed_dtype():
    """Unsqueeze-1 -> 11 with an untyped int64 input (no value_info, as exporters write it): the
    one-node conversion feeds it as float, which must not become the output's declared dtype
    (it did, and the Scatter's indices then failed onnx.checker as float)."""
    import scatter_rewrite as sr

    nodes = [oh.make_node("Cast", ["i"], ["ic"], to=TensorProto.INT64),
             oh.make_node("Unsqueeze", ["ic"], ["iu"], axes=[0]),
             oh.make_node("Scatter", ["x", "iu", "u"], ["y"], axis=1)]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5]),
                                       oh.make_tensor_value_info("i", TensorProto.INT32, [3]),
                                       oh.make_tensor_value_info("u", TensorProto.FLOAT, [1, 3])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 10)])
    model.ir_version = 5

    converted = ir.serde.deserialize_model(model)
    assert convert_opset(converted, 11).converted >= 1
    unsqueezed = next(n for n in converted.graph if n.op_type == "Unsqueeze").outputs[0]
    assert unsqueezed.dtype in (None, ir.DataType.INT64)

    upgraded = sr.upgrade(model, opset=11, validate=True)  # checker and onnxruntime, vs the original
    onnx.checker.check_model(upgraded, full_check=True)
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    feeds = {"x": x, "i": np.array([4, 0, 2], np.int32), "u": np.array([[7, 8, 9]], np.float32)}
    (y,) = run_onnxruntime(upgraded.SerializeToString(), feeds)
    expected = x.copy()
    expected[0, [4, 0, 2]] = [7, 8, 9]
    np.testing.assert_array_equal(y, expected)


def test_an_untyped_value_in_a_function_branch_is_kept_where_every_newer_type_fits():
    """A Reshape-14 inside an If branch of a function (its input untyped there, as in TorchScript's
    rank-0 wrapper) moves to 13: Reshape-13 takes every type Reshape-14 does, so the unknown dtype does not
    matter (onnx.version_converter has no 14 -> 13 adapter). An Add-14 there stays refused: Add-13
    lacks int8, which the value might be."""
    shape = oh.make_tensor("minus_one", TensorProto.INT64, [1], [-1])
    for op, inputs, ok in [("Reshape", ["d", "m"], True), ("Add", ["d", "d"], False)]:
        branch = oh.make_graph([oh.make_node("Constant", [], ["m"], value=shape), oh.make_node(op, inputs, ["r"])],
                               "b", [], [oh.make_tensor_value_info("r", TensorProto.FLOAT, [6])])
        other = oh.make_graph([oh.make_node("Constant", [], ["m2"], value=shape), oh.make_node("Reshape", ["d", "m2"], ["r2"])],
                              "o", [], [oh.make_tensor_value_info("r2", TensorProto.FLOAT, [6])])
        function = oh.make_function("local", "F", ["d", "c"], ["o"], [oh.make_node(
            "If", ["c"], ["o"], then_branch=branch, else_branch=other)], opset_imports=[oh.make_opsetid("", 18)])
        graph = oh.make_graph([oh.make_node("F", ["x", "c"], ["y"], domain="local")], "g",
                              [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                               oh.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [oh.make_tensor_value_info("y", TensorProto.FLOAT, [6])])
        model = oh.make_model(graph, functions=[function],
                              opset_imports=[oh.make_opsetid("", 18), oh.make_opsetid("local", 1)])
        if not ok:
            with pytest.raises(ConversionError, match="Add"):
                converted(model, 13)
            continue
        out = converted(model, 13)
        feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "c": np.array(True)}
        np.testing.assert_array_equal(run_onnxruntime(out.SerializeToString(), feeds)[0], np.arange(6, dtype=np.float32))


def _bf16_if_model() -> onnx.ModelProto:
    """An If whose branches give bfloat16 (a max scatter in one): If takes bfloat16 from opset 16."""
    vi = oh.make_tensor_value_info
    then = oh.make_graph([oh.make_node("ScatterElements", ["x", "i", "u"], ["t"], reduction="max")], "then", [],
                         [vi("t", TensorProto.BFLOAT16, [4, 3])])
    other = oh.make_graph([oh.make_node("Identity", ["x"], ["e"])], "else", [], [vi("e", TensorProto.BFLOAT16, [4, 3])])
    graph = oh.make_graph([oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "g",
                          [vi("c", TensorProto.BOOL, []), vi("x", TensorProto.BFLOAT16, [4, 3]),
                           vi("i", TensorProto.INT64, [2, 3]), vi("u", TensorProto.BFLOAT16, [2, 3])],
                          [vi("y", TensorProto.BFLOAT16, [4, 3])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


@pytest.mark.parametrize("target", [13, 15])
def test_an_if_of_a_type_the_older_schema_lacks_stops_the_move_with_the_reason(target):
    # (If/Loop/Scan keep their node: before, the move went through and onnx.checker failed the
    # rewritten model: "If ... outputs has unsupported type tensor(bfloat16)".)
    import scatter_rewrite as sr

    with pytest.raises(ConversionError, match=rf"If \(opset 18, main graph\) cannot move to opset {target}: "
                                              rf"If at opset {target} does not take BFLOAT16 \(output 0\)"):
        sr.lower(_bf16_if_model(), opset=target)


def test_an_if_of_a_type_the_older_schema_has_moves():
    import scatter_rewrite as sr

    result, outcome = sr.lower(_bf16_if_model(), opset=16, validate=True, return_report=True)
    assert outcome.validation["max_abs_diff"] == 0.0
    assert result.opset_import[0].version == 16


# --- Values after a Reshape/Unsqueeze/Range reading a small initializer get their inferred types ---------------

def _reshape_add_model() -> onnx.ModelProto:
    """A scatter reduction, a Reshape by an initializer, an Add-14 after it (no value_info)."""
    vi = oh.make_tensor_value_info
    nodes = [oh.make_node("ScatterElements", ["d", "i", "u"], ["s"], axis=0, reduction="add"),
             oh.make_node("Reshape", ["s", "shape"], ["r"]), oh.make_node("Add", ["r", "r"], ["y"])]
    graph = oh.make_graph(nodes, "g", [vi("d", TensorProto.FLOAT, [4, 3]), vi("i", TensorProto.INT64, [5, 3]),
                                       vi("u", TensorProto.FLOAT, [5, 3])], [vi("y", TensorProto.FLOAT, [2, 6])],
                          initializer=[onnx.numpy_helper.from_array(np.array([2, 6], np.int64), "shape")])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


def _dynamo_gnn_model() -> onnx.ModelProto:
    """The README's GNN pattern as torch's dynamo exporter writes it: Unsqueeze's axes an initializer,
    Expand-13 by Shape(x), ScatterElements max."""
    vi = oh.make_tensor_value_info
    nodes = [oh.make_node("Unsqueeze", ["dst", "ax"], ["dst2"]), oh.make_node("Shape", ["x"], ["xs"]),
             oh.make_node("Expand", ["dst2", "xs"], ["idx"]),
             oh.make_node("ScatterElements", ["d", "idx", "x"], ["y"], axis=0, reduction="max")]
    graph = oh.make_graph(nodes, "g", [vi("d", TensorProto.FLOAT, ["N", 4]), vi("dst", TensorProto.INT64, ["E"]),
                                       vi("x", TensorProto.FLOAT, ["E", 4])], [vi("y", TensorProto.FLOAT, ["N", 4])],
                          initializer=[onnx.numpy_helper.from_array(np.array([1], np.int64), "ax")])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


@pytest.mark.parametrize("target", [11, 13])
@pytest.mark.parametrize("make", [_reshape_add_model, _dynamo_gnn_model])
def test_a_node_after_a_shape_op_reading_an_initializer_moves_validated(make, target):
    # (Inference ran with every initializer's data cleared: Reshape/Unsqueeze failed it for the whole
    # graph, Add-14/Expand-13 after them stayed untyped and the converter refused them.)
    import scatter_rewrite as sr

    result, outcome = sr.lower(make(), opset=target, validate=True, return_report=True)
    onnx.checker.check_model(result, full_check=True)
    assert result.opset_import[0].version == target
    assert outcome.validation["max_abs_diff"] <= 1e-5


def test_the_gnn_model_lowers_to_11_through_the_cli(tmp_path):
    path, out = tmp_path / "gnn.onnx", tmp_path / "gnn.l11.onnx"
    onnx.save(_dynamo_gnn_model(), path)
    result = invoke("lower", path, "--opset", "11", "-o", out)
    assert result.exit_code == 0, result.output
    assert "PASSED" in result.stdout and onnx.load(out).opset_import[0].version == 11


def test_range_by_initializer_bounds_then_add_moves_to_11():
    vi = oh.make_tensor_value_info
    inits = [onnx.numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", 0), ("hi", 5), ("step", 1))]
    graph = oh.make_graph([oh.make_node("Range", ["lo", "hi", "step"], ["r"]), oh.make_node("Add", ["r", "x"], ["y"])],
                          "g", [vi("x", TensorProto.FLOAT, [5])], [vi("y", TensorProto.FLOAT, [5])], initializer=inits)
    out = converted(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]), 11)
    x = np.arange(5, dtype=np.float32) * 10
    np.testing.assert_array_equal(validation_ort_run(out, {"x": x})[0], x + np.arange(5, dtype=np.float32))


def test_inference_reads_small_initializers_and_gets_big_weights_as_typed_inputs(monkeypatch):
    """The small initializers shape inference reads go in with their values; a weight over
    SHAPE_ONLY_BYTES goes in as a graph input of its dtype and dims, never with its data."""
    from scatter_rewrite import type_inference as _inference

    vi = oh.make_tensor_value_info
    weight = np.ones((64, 32), np.float32)  # 8 KiB
    graph = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["m"]), oh.make_node("Reshape", ["m", "shape"], ["r"]),
                           oh.make_node("Add", ["r", "r"], ["y"])], "g", [vi("x", TensorProto.FLOAT, [2, 64])],
                          [vi("y", TensorProto.FLOAT, [4, 16])],
                          initializer=[onnx.numpy_helper.from_array(weight, "w"),
                                       onnx.numpy_helper.from_array(np.array([4, 16], np.int64), "shape")])
    model = ir.serde.deserialize_model(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]))
    seen = []
    real = onnx.shape_inference.infer_shapes
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", lambda proto, *a, **k: seen.append(proto) or real(proto, *a, **k))
    found = {v.name: t for v, t in _inference.inferred_tensor_types(model).items()}
    (proto,) = seen
    assert [i.name for i in proto.graph.initializer] == ["shape"]
    assert onnx.numpy_helper.to_array(proto.graph.initializer[0]).tolist() == [4, 16]
    w = next(i for i in proto.graph.input if i.name == "w")
    assert [d.dim_value for d in w.type.tensor_type.shape.dim] == [64, 32]
    assert [d.dim_value for d in found["r"].shape.dim] == [4, 16] and found["r"].elem_type == TensorProto.FLOAT
    assert model.graph.initializers["w"].const_value.nbytes == weight.nbytes  # the model keeps its weight


def test_inference_reads_a_small_initializer_kept_in_external_data(tmp_path):
    from scatter_rewrite.model_io import load_model
    from scatter_rewrite.type_inference import inferred_tensor_types

    path = tmp_path / "m.onnx"
    onnx.save(_reshape_add_model(), path, save_as_external_data=True, location="m.data", size_threshold=0)
    assert onnx.load(path, load_external_data=False).graph.initializer[0].data_location == TensorProto.EXTERNAL
    found = {v.name: t for v, t in inferred_tensor_types(load_model(path)).items()}
    assert [d.dim_value for d in found["r"].shape.dim] == [2, 6]


def _same_outputs(a: onnx.ModelProto, b: onnx.ModelProto, feeds: dict) -> None:
    for left, right in zip(validation_ort_run(a, feeds), validation_ort_run(b, feeds), strict=True):
        np.testing.assert_array_equal(left, right)


# --- Softmax, LogSoftmax, Hardmax: opset 13 changed what axis means -------------------------------------------

def _softmax_model(op: str, shape, axis: int | None, opset: int = 18, dtype=TensorProto.FLOAT) -> onnx.ModelProto:
    vi = oh.make_tensor_value_info
    attrs = {} if axis is None else {"axis": axis}
    graph = oh.make_graph([oh.make_node(op, ["x"], ["y"], **attrs)], "g", [vi("x", dtype, shape)],
                          [vi("y", dtype, shape)])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


@settings(max_examples=30, deadline=None)
@given(op=st.sampled_from(["Softmax", "LogSoftmax", "Hardmax"]), shape=st.lists(st.integers(1, 4), min_size=1, max_size=4),
       data=st.data(), target=st.sampled_from([11, 12]))
def test_softmax_family_keeps_its_meaning_below_13(op, shape, data, target):
    """Before 13 these ops flatten the input from ``axis`` on; from 13 they normalize over ``axis``
    alone. Every axis (and the default, -1 from 13 and 1 before) gives onnxruntime's opset-18 result
    bit for bit: the last axis as it is, another between two Transposes."""
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)), label="axis")
    model = _softmax_model(op, shape, axis)
    out = converted(model, target)
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    x.flat[0] = x.flat[-1]  # (a tie for Hardmax)
    np.testing.assert_array_equal(validation_ort_run(out, {"x": x})[0], validation_ort_run(model, {"x": x})[0])
    last = axis is None or axis in (-1, len(shape) - 1)
    assert [n.op_type for n in out.graph.node] == ([op] if last else ["Transpose", op, "Transpose"])
    (a,) = [a for n in out.graph.node if n.op_type == op for a in n.attribute if a.name == "axis"]
    assert a.i in (-1, len(shape) - 1)


def _softmax_in_branches_model(then_shape, else_shape) -> onnx.ModelProto:
    """Softmax(axis=1) of x reshaped to ``then_shape`` or ``else_shape``, each branch naming its
    reshaped value t (sibling graphs may reuse a name), nothing typed but the ends."""
    vi = oh.make_tensor_value_info

    def branch(name, shape):
        return oh.make_graph(
            [oh.make_node("Reshape", ["x", f"{name}_shape"], ["t"]),
             oh.make_node("Softmax", ["t"], ["u"], axis=1),
             oh.make_node("Reshape", ["u", "flat"], [f"{name}_out"])], name, [],
            [vi(f"{name}_out", TensorProto.FLOAT, None)],
            [onnx.numpy_helper.from_array(np.array(shape, np.int64), f"{name}_shape")])

    node = oh.make_node("If", ["c"], ["y"], then_branch=branch("then", then_shape),
                        else_branch=branch("else", else_shape))
    graph = oh.make_graph([node], "g", [vi("x", TensorProto.FLOAT, [24]), vi("c", TensorProto.BOOL, [])],
                          [vi("y", TensorProto.FLOAT, [24])],
                          [onnx.numpy_helper.from_array(np.array([-1], np.int64), "flat")])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])


@pytest.mark.parametrize("shapes", [([2, 3, 4], [6, 4]), ([6, 4], [2, 3, 4])])
def test_softmax_in_branches_reading_values_of_one_name_takes_each_branchs_own_rank(shapes):
    """Below 13 the form of Softmax(axis=1) depends on the input's rank (the last axis: kept; else
    between Transposes), which the move borrows from ONNX inference: each branch's t its own, never
    the other branch's t by name (which kept Softmax-11 flattening [2, 3, 4] from axis 1)."""
    model = _softmax_in_branches_model(*shapes)
    out = converted(model, 11)
    x = np.random.default_rng(0).standard_normal(24).astype(np.float32)
    for c in (True, False):
        _same_outputs(model, out, {"x": x, "c": np.array(c)})


def test_softmax_of_unknown_rank_on_the_last_axis_needs_no_rank():
    """(Off the last axis: tests/opset/test_forms.py.)"""
    model = function_called_at_two_ranks("LogSoftmax", -1)  # the last axis needs no rank
    out = converted(model, 11)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32), "z": rng.standard_normal((2, 3, 4)).astype(np.float32)}
    _same_outputs(out, model, feeds)


def test_softmax_of_a_type_opset_11_lacks_and_an_axis_from_a_function_attribute_are_refused():
    with pytest.raises(ConversionError, match="Softmax at opset 11 does not take BFLOAT16"):
        converted(_softmax_model("Softmax", [2, 3], -1, dtype=TensorProto.BFLOAT16), 11)
    softmax = oh.make_node("Softmax", ["a"], ["b"])
    softmax.attribute.append(oh.make_attribute_ref("axis", onnx.AttributeProto.INT))
    softmax.attribute[0].ref_attr_name = "ax"
    function = oh.make_function("local", "F", ["a"], ["b"], [softmax], opset_imports=[oh.make_opsetid("", 18)],
                                attributes=["ax"])
    graph = oh.make_graph([oh.make_node("F", ["x"], ["y"], domain="local", ax=0)], "g",
                          [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = oh.make_model(graph, functions=[function], opset_imports=[oh.make_opsetid("", 18), oh.make_opsetid("local", 1)])
    with pytest.raises(ConversionError, match=r"Softmax \(opset 18, function local::F\).*refers to the function's attribute 'ax'"):
        converted(model, 11)


def test_softmax_inside_a_function_moves_between_transposes():
    function = oh.make_function("local", "F", ["a"], ["b"], [oh.make_node("Softmax", ["a"], ["b"], axis=1)],
                                opset_imports=[oh.make_opsetid("", 18)])
    graph = oh.make_graph([oh.make_node("F", ["x"], ["y"], domain="local")], "g",
                          [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])])
    model = oh.make_model(graph, functions=[function], opset_imports=[oh.make_opsetid("", 18), oh.make_opsetid("local", 1)])
    out = converted(model, 11)
    assert [n.op_type for n in out.functions[0].node] == ["Transpose", "Softmax", "Transpose"]
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(validation_ort_run(out, {"x": x})[0], validation_ort_run(model, {"x": x})[0])


def test_softmax_off_the_last_axis_through_lower_is_validated_and_the_api_returns_it_right():
    # (lower --opset 11 --no-validate kept Softmax axis=1 at opset 11: another function, silently.)
    import scatter_rewrite as sr

    vi = oh.make_tensor_value_info
    nodes = [oh.make_node("ScatterElements", ["d", "i", "u"], ["s"], axis=1, reduction="max"),
             oh.make_node("Softmax", ["s"], ["y"], axis=1)]
    graph = oh.make_graph(nodes, "g", [vi("d", TensorProto.FLOAT, [2, 3, 4, 4]), vi("i", TensorProto.INT64, [2, 3, 4, 4]),
                                       vi("u", TensorProto.FLOAT, [2, 3, 4, 4])], [vi("y", TensorProto.FLOAT, [2, 3, 4, 4])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    unvalidated = sr.lower(model, opset=11)
    rng = np.random.default_rng(2)
    feeds = {"d": rng.standard_normal((2, 3, 4, 4)).astype(np.float32), "i": rng.integers(-3, 3, (2, 3, 4, 4)),
             "u": rng.standard_normal((2, 3, 4, 4)).astype(np.float32)}
    np.testing.assert_array_equal(validation_ort_run(unvalidated, feeds)[0], validation_ort_run(model, feeds)[0])
    _, outcome = sr.lower(model, opset=11, validate=True, return_report=True)
    assert outcome.validation["max_abs_diff"] == 0.0


# --- Reduce* with noop_with_empty_axes -------------------------------------------------------------------------

def _reduce_model(op: str, axes, noop: int | None, opset: int = 18, keepdims: int = 1, out_shape=None):
    vi = oh.make_tensor_value_info
    attrs = {"keepdims": keepdims} | ({} if noop is None else {"noop_with_empty_axes": noop})
    inputs, inits = ["x"], []
    if isinstance(axes, str):  # a graph input: computed at run time
        inputs.append(axes)
    elif axes is not None:
        inputs.append("axes")
        inits.append(onnx.numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    graph_inputs = [vi("x", TensorProto.FLOAT, [2, 3])] + ([vi(axes, TensorProto.INT64, [1])] if isinstance(axes, str) else [])
    graph = oh.make_graph([oh.make_node(op, inputs, ["y"], **attrs)], "g", graph_inputs,
                          [vi("y", TensorProto.FLOAT, out_shape)], initializer=inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


@pytest.mark.parametrize("op,opset,targets", [("ReduceSum", 18, [11, 12]), ("ReduceSum", 13, [11]),
                                              ("ReduceMax", 18, [11, 13, 17]), ("ReduceMean", 18, [13])])
@pytest.mark.parametrize("axes,noop,out_shape,ops", [
    ([], 1, [2, 3], ["Identity"]),  # empty axes, flag set: the input as it is
    (None, 1, [2, 3], ["Identity"]),  # no axes input, flag set: the same
    ([1], 1, [2, 1], None),  # non-empty axes: the flag changes nothing
    ([], 0, [1, 1], None),  # empty axes, flag clear: every axis (no attribute, not axes=[])
])
def test_reduce_with_noop_with_empty_axes_moves_exactly(op, opset, targets, axes, noop, out_shape, ops):
    # (ReduceSum-18 noop=1 moved to 11 kept the attribute, which onnx.checker rejects, with axes=[],
    # which at 11 means every axis instead of none.)
    model = _reduce_model(op, axes, noop, opset=opset, out_shape=out_shape)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    for target in targets:
        out = converted(model, target)
        assert [n.op_type for n in out.graph.node] == (ops or [op])
        assert not {a.name for n in out.graph.node for a in n.attribute} & {"noop_with_empty_axes"} or target >= 18
        assert [a.ints for n in out.graph.node for a in n.attribute if a.name == "axes"] in ([], [[1]])
        np.testing.assert_array_equal(validation_ort_run(out, {"x": x})[0], validation_ort_run(model, {"x": x})[0])


_REDUCE_ALL = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL1",
               "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"]


def _runtime_axes_model(op: str, keepdims: int, noop: int, x_shape=(2, 3, 4)):
    vi = oh.make_tensor_value_info
    graph = oh.make_graph([oh.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims, noop_with_empty_axes=noop)], "g",
                          [vi("x", TensorProto.FLOAT, None if x_shape is None else list(x_shape)), vi("axes", TensorProto.INT64, ["k"])],
                          [vi("y", TensorProto.FLOAT, None if x_shape is None else [None] * len(x_shape))])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


@pytest.mark.parametrize("op", _REDUCE_ALL)
@pytest.mark.parametrize("keepdims,noop,target", [(1, 0, 11), (0, 0, 11), (0, 1, 13), (1, 1, 17)])
def test_reduce_over_axes_known_at_run_time_axis_by_axis(op, keepdims, noop, target):
    """Axes a graph input: each axis reduced where it is in them. Max/Min bit for bit, the rest within
    float32 rounding of another summation order; LogSumExp shifted by the maximum as onnxruntime's is."""
    model = _runtime_axes_model(op, keepdims, noop)
    out = converted(model, target)
    assert {n.op_type for n in out.graph.node} & {op, "ReduceSum", "ReduceMax"}
    x = np.random.default_rng(0).uniform(0.5, 2.0, (2, 3, 4)).astype(np.float32)
    x[0, 0, 0] = 90.0  # (exp overflows float32 unshifted)
    for axes in ([0], [-1], [1, 2], [2, 0, -1], []):
        feeds = {"x": x, "axes": np.array(axes, np.int64)}
        want = run_onnxruntime(model.SerializeToString(), feeds)[0]
        got = run_onnxruntime(out.SerializeToString(), feeds)[0]
        assert got.shape == want.shape, (axes, got.shape, want.shape)
        if op in ("ReduceMax", "ReduceMin"):
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=0)


def test_reduce_over_run_time_axes_needs_the_rank():
    with pytest.raises(ConversionError, match=r"ReduceSum \(opset 18, main graph\) to opset 12: its axes 'axes' are a "
                                              r"graph input, known only at run time, .* rank"):
        convert_opset(ir.serde.deserialize_model(_runtime_axes_model("ReduceSum", 1, 0, None)), 12)
    assert converted(_runtime_axes_model("ReduceSum", 1, 0), 13).graph.node[0].op_type == "ReduceSum"  # 13 takes them


def test_reducesum_noop_through_lower_passes_the_checker_and_validation():
    import scatter_rewrite as sr

    vi = oh.make_tensor_value_info
    nodes = [oh.make_node("ScatterElements", ["d", "i", "u"], ["s"], axis=0, reduction="add"),
             oh.make_node("ReduceSum", ["s", "axes"], ["y"], noop_with_empty_axes=1)]
    graph = oh.make_graph(nodes, "g", [vi("d", TensorProto.FLOAT, [4, 3]), vi("i", TensorProto.INT64, [5, 3]),
                                       vi("u", TensorProto.FLOAT, [5, 3])], [vi("y", TensorProto.FLOAT, [4, 3])],
                          initializer=[onnx.numpy_helper.from_array(np.array([], np.int64), "axes")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    onnx.checker.check_model(sr.lower(model, opset=11), full_check=True)
    _, outcome = sr.lower(model, opset=11, validate=True, return_report=True)
    assert outcome.validation["max_abs_diff"] <= 1e-5


# --- Split-18 and Pad-18 in their older forms ------------------------------------------------------------------

def _split_model(shape, axis: int, n: int | None = None, split=None, opset: int = 18) -> onnx.ModelProto:
    vi = oh.make_tensor_value_info
    outs = [f"y{k}" for k in range(n if n is not None else len(split))]
    inputs, inits, attrs = ["x"], [], {"axis": axis}
    if split is not None:
        inputs.append("split")
        inits.append(onnx.numpy_helper.from_array(np.array(split, np.int64), "split"))
    else:
        attrs["num_outputs"] = n
    graph = oh.make_graph([oh.make_node("Split", inputs, outs, **attrs)], "g", [vi("x", TensorProto.FLOAT, shape)],
                          [vi(o, TensorProto.FLOAT, [None] * len(shape)) for o in outs], initializer=inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


@pytest.mark.parametrize("target", [11, 12, 13, 16, 17])
def test_split_18_with_split_sizes_is_split_13(target):
    # (No Adapter From Version $18 for Split: the converter has no 18 -> 17 adapter.)
    model = _split_model([4, 4], 1, split=[1, 3])
    out = converted(model, target)
    assert [n.op_type for n in out.graph.node] == ["Split"]
    assert [a.ints for a in out.graph.node[0].attribute if a.name == "split"] == ([[1, 3]] if target < 13 else [])
    _same_outputs(out, model, {"x": np.arange(16, dtype=np.float32).reshape(4, 4)})


@settings(max_examples=25, deadline=None)
@given(size=st.integers(0, 9), n=st.integers(1, 4), axis=st.sampled_from([0, 1, -1]), target=st.sampled_from([11, 13, 17]))
def test_split_18_num_outputs_of_a_static_dimension_gets_its_chunk_sizes(size, n, axis, target):
    shape = [size, 2] if axis == 0 else [2, size]
    model = _split_model(shape, axis, n=n)
    chunk = -(-size // n)
    if size - chunk * (n - 1) < 0:  # onnxruntime refuses the original too
        with pytest.raises(ConversionError, match=rf"num_outputs={n} on a dimension of {size}"):
            converted(model, target)
        return
    out = converted(model, target)
    assert [n.op_type for n in out.graph.node] == (["Split"] if target < 13 else ["Constant", "Split"])
    _same_outputs(out, model, {"x": np.arange(2 * size, dtype=np.float32).reshape(shape)})


def test_split_18_num_outputs_of_a_dynamic_dimension_computes_its_sizes_from_13_and_is_refused_before():
    model = _split_model(["N", 2], 0, n=3)
    out = converted(model, 13)
    for size in (4, 5, 7, 9):
        _same_outputs(out, model, {"x": np.arange(2 * size, dtype=np.float32).reshape(size, 2)})
    with pytest.raises(ConversionError, match=r"Split \(opset 18, main graph\) to opset 12: dimension 0 of its input is "
                                              r"not known before run time"):
        converted(model, 12)


def test_split_18_moves_for_tensorrt_8_6():
    # (tensorrt --trt-version 8.6 left the model at 18: the opset cap gave up on the Split.)
    import scatter_rewrite as sr

    vi = oh.make_tensor_value_info
    nodes = [oh.make_node("ScatterElements", ["d", "i", "u"], ["s"], axis=0, reduction="add"),
             oh.make_node("Split", ["s", "sp"], ["a", "b"], axis=1), oh.make_node("Concat", ["b", "a"], ["y"], axis=1)]
    graph = oh.make_graph(nodes, "g", [vi("d", TensorProto.FLOAT, [4, 4]), vi("i", TensorProto.INT64, [6, 4]),
                                       vi("u", TensorProto.FLOAT, [6, 4])], [vi("y", TensorProto.FLOAT, [4, 4])],
                          initializer=[onnx.numpy_helper.from_array(np.array([1, 3], np.int64), "sp")])
    result = sr.prepare_for_tensorrt(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]), trt_version="8.6",
                                     validate=True)
    assert {o.version for o in result.opset_import if o.domain == ""} == {17}


def _pad_model(mode: str | None, opset: int = 18, axes=None, value: bool = False, dtype=TensorProto.FLOAT):
    vi = oh.make_tensor_value_info
    pads = [0, 1, 1, 2] if axes is None else [1, 2]
    inits = [onnx.numpy_helper.from_array(np.array(pads, np.int64), "pads")]
    inputs = ["x", "pads"]
    if value:
        inits.append(onnx.numpy_helper.from_array(np.array(1.5, onnx.helper.tensor_dtype_to_np_dtype(dtype)), "v"))
        inputs.append("v")
    if axes is not None:
        inits.append(onnx.numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        inputs += [""] * (3 - len(inputs)) + ["axes"]
    attrs = {} if mode is None else {"mode": mode}
    out_shape = [3, 6] if axes is None else [3, 7]
    graph = oh.make_graph([oh.make_node("Pad", inputs, ["y"], **attrs)], "g", [vi("x", dtype, [2, 3])],
                          [vi("y", dtype, out_shape if axes is None else [2, 6])], initializer=inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


@pytest.mark.parametrize("target", [11, 13, 17])
@pytest.mark.parametrize("mode,value,opset", [(None, True, 18), ("constant", False, 18), ("reflect", False, 18),
                                              ("edge", False, 18), ("reflect", False, 24), (None, True, 21)])
def test_pad_without_axes_is_pad_11(mode, value, opset, target):
    # (No Adapter To Version $17 for Pad.)
    model = _pad_model(mode, opset=opset, value=value)
    out = converted(model, target)
    assert [n.op_type for n in out.graph.node] == ["Pad"] and len(out.graph.node[0].input) == (3 if value else 2)
    _same_outputs(out, model, {"x": np.arange(6, dtype=np.float32).reshape(2, 3)})


def test_pad_forms_older_opsets_lack_are_refused():
    # (The converter took wrap from 19 to 18 as it is, a mode Pad-18 lacks.)
    with pytest.raises(ConversionError, match=r"Pad \(opset 19, main graph\) to opset 18: Pad-19 -> Pad-18: Pad has mode 'wrap' from opset 19"):
        converted(_pad_model("wrap", opset=19), 18)
    # axes: from 18. Constant ones are written out as pads for every axis (tested below); a default that
    # callers may override is no constant.
    overridable = _pad_model(None, axes=[1])
    overridable.graph.input.append(oh.make_tensor_value_info("axes", TensorProto.INT64, [1]))
    with pytest.raises(ConversionError, match=r"Pad \(opset 18, main graph\) to opset 17: its axes 'axes' is a graph "
                                              r"input with an initializer, which callers may override"):
        converted(overridable, 17)
    with pytest.raises(ConversionError, match="Pad at opset 11 does not take BOOL"):
        converted(_pad_model(None, dtype=TensorProto.BOOL), 11)  # bool: from 13
    assert converted(_pad_model(None, dtype=TensorProto.BOOL), 13).graph.node[0].op_type == "Pad"
    wrap = _pad_model("wrap", opset=24)
    _same_outputs(converted(wrap, 19), wrap, {"x": np.arange(6, dtype=np.float32).reshape(2, 3)})


def test_a_scatter_reduction_newer_than_the_target_is_not_kept():
    # A ScatterElements-18 max at 16 would keep its attribute, with a value opset 16 lacks.
    node = ir.node("ScatterElements", [ir.Value(name=n, type=ir.TensorType(t)) for n, t in
                                       (("d", ir.DataType.FLOAT), ("i", ir.DataType.INT64), ("u", ir.DataType.FLOAT))],
                   {"reduction": "max"})
    node.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
    assert fits_schema(node, 18, 16) is None
    node.attributes["reduction"] = ir.AttrString("reduction", "add")
    assert fits_schema(node, 18, 16) == []
    node.attributes["reduction"] = ir.AttrString("reduction", "none")
    assert fits_schema(node, 18, 13) == ["reduction"]  # the default: dropped


# --- Reduce* with noop_with_empty_axes and an elementwise step: ReduceL2 of no axes is sqrt(x*x) -----------------

_STEPS = {"ReduceSumSquare": np.square, "ReduceL1": np.abs, "ReduceL2": lambda x: np.sqrt(np.square(x)),
          "ReduceLogSum": np.log, "ReduceLogSumExp": lambda x: np.log(np.exp(x))}


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


def _noop_inputs(dtype: int) -> np.ndarray:
    """Every float16; for the other types their edges (NaN payloads, inf, overflow, subnormals,
    the integer limits) and random bit patterns."""
    np_dtype = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    if dtype == TensorProto.FLOAT16:
        return np.arange(2**16, dtype=np.uint16).view(np.float16)
    rng = np.random.default_rng(dtype)
    unsigned = np.dtype(f"u{np_dtype.itemsize}")
    random = rng.integers(0, np.iinfo(unsigned).max, 4000, dtype=unsigned, endpoint=True).view(np_dtype)
    if np.issubdtype(np_dtype, np.integer):
        info = np.iinfo(np_dtype)
        edges = np.array([0, 1, -1, 3, -7, 46341, 65536, info.max, info.min, info.min + 1], np_dtype)
        return np.concatenate([edges, random, rng.integers(-100, 100, 200).astype(np_dtype)])
    info = np.finfo(np_dtype)
    edges = np.array([1.5, -2.0, 0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, info.max, -info.max, info.tiny,
                      info.smallest_subnormal, 88.5, 89.0, 709.5, 710.0, 1e19, 1e-20], np_dtype)
    payloads = np.array([0x7FC00001, 0xFFC00003, 0x7F800001] if np_dtype == np.float32 else
                        [0x7FF8000000000001, 0x7FF0000000000001], unsigned).view(np_dtype)
    return np.concatenate([edges, payloads, random, (rng.standard_normal(1000) * 100).astype(np_dtype)])


def _noop_model(op: str, dtype: int, axes) -> onnx.ModelProto:
    """``op`` with noop_with_empty_axes=1 and no axes input (``axes`` None) or an empty constant one."""
    vi = oh.make_tensor_value_info
    inputs = ["x"] if axes is None else ["x", "axes"]
    inits = [] if axes is None else [onnx.numpy_helper.from_array(np.array(axes, np.int64), "axes")]
    graph = oh.make_graph([oh.make_node(op, inputs, ["y"], noop_with_empty_axes=1)], "g", [vi("x", dtype, ["n"])],
                          [vi("y", dtype, ["n"])], initializer=inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT32,
                                   TensorProto.INT64])
@pytest.mark.parametrize("op", list(_STEPS))
def test_composite_reduce_of_no_axes_keeps_its_elementwise_step_bit_for_bit(op, dtype):
    # (It became Identity at opsets taking axes as an attribute: ReduceSumSquare gave x, not x*x.)
    x = _noop_inputs(dtype)
    for axes in (None, []):
        model = _noop_model(op, dtype, axes)
        (expected,) = validation_ort_run(model, {"x": x})
        if dtype != TensorProto.INT32 and dtype != TensorProto.INT64:  # the spec's step, not only onnxruntime's
            sample = np.array([0.5, 1.5, 3.0], x.dtype)
            np.testing.assert_allclose(validation_ort_run(model, {"x": sample})[0], _STEPS[op](sample.astype(np.float64)), rtol=1e-3)
        for target in (11, 13, 17):
            out = converted(model, target)
            ops = [n.op_type for n in out.graph.node if n.op_type != "Constant"]
            assert "Identity" not in ops and ("noop_with_empty_axes" not in
                                              {a.name for n in out.graph.node for a in n.attribute})
            if dtype != TensorProto.FLOAT16:  # the same reduction over an axis of size 1 put in front
                assert ops == ["Unsqueeze", op]
            np.testing.assert_array_equal(_bits(validation_ort_run(out, {"x": x})[0]), _bits(expected))


def test_composite_reduce_of_no_axes_of_a_type_without_a_proven_form_stops_the_move():
    model = _noop_model("ReduceL2", TensorProto.BFLOAT16, None)
    with pytest.raises(ConversionError, match=r"cannot convert ReduceL2 \(opset 18, main graph\) to opset 13: with "
                                              r"noop_with_empty_axes set and no axes it computes sqrt\(x\*x\) "
                                              r"elementwise.*\(BFLOAT16\)"):
        converted(model, 13)


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT32,
                                   TensorProto.INT64])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"])
def test_pure_reduce_of_no_axes_is_identity(op, dtype):
    x = _noop_inputs(dtype)
    model = _noop_model(op, dtype, None)
    out = converted(model, 13 if op != "ReduceSum" else 12)
    assert [n.op_type for n in out.graph.node] == ["Identity"]
    expected, got = validation_ort_run(model, {"x": x})[0], validation_ort_run(out, {"x": x})[0]
    if dtype == TensorProto.FLOAT16:  # onnxruntime's float16 kernels quiet a signaling NaN (0x7c01 -> 0x7e01)
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_array_equal(_bits(got), _bits(expected))


def test_composite_reduce_of_no_axes_through_lower_validates_exactly():
    import scatter_rewrite as sr

    vi = oh.make_tensor_value_info
    nodes = [oh.make_node("ScatterElements", ["d", "i", "u"], ["s"], axis=0, reduction="max"),
             oh.make_node("ReduceLogSum", ["s"], ["y"], noop_with_empty_axes=1)]
    graph = oh.make_graph(nodes, "g", [vi("d", TensorProto.FLOAT, [4, 3]), vi("i", TensorProto.INT64, [5, 3]),
                                       vi("u", TensorProto.FLOAT, [5, 3])], [vi("y", TensorProto.FLOAT, [4, 3])])
    result, outcome = sr.lower(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]), opset=13, validate=True,
                               return_report=True)
    assert "Identity" not in {n.op_type for n in result.graph.node}
    assert outcome.validation["max_abs_diff"] == 0.0


# --- Softmax, LogSoftmax, Hardmax moved up across 13 ---------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(op=st.sampled_from(["Softmax", "LogSoftmax", "Hardmax"]), shape=st.lists(st.integers(1, 4), min_size=1, max_size=4),
       data=st.data(), source=st.sampled_from([9, 11, 12]), target=st.sampled_from([13, 18]))
def test_softmax_family_keeps_its_meaning_from_below_13(op, shape, data, source, target):
    """Before 13 these ops flatten from ``axis`` (default 1) on; from 13 ``axis`` (default -1) alone.
    The converter keeps Hardmax's axis (another function: one 1 per row of the last axis instead of
    per flattened row). Every axis moves to onnxruntime's result bit for bit, and back down again."""
    lowest = 0 if source < 11 else -len(shape)  # (negative axes from 11)
    axis = data.draw(st.one_of(st.none(), st.integers(lowest, len(shape) - 1)), label="axis")
    model = _softmax_model(op, shape, axis, opset=source)
    if axis is None and len(shape) == 1:  # the default 1 is out of range: onnxruntime refuses the original
        with pytest.raises(ConversionError, match="axis 1 is out of range for its rank-1 input"):
            converted(model, target)
        return
    out = converted(model, target)
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    x.flat[0] = x.flat[-1]  # (a tie for Hardmax)
    np.testing.assert_array_equal(validation_ort_run(out, {"x": x})[0], validation_ort_run(model, {"x": x})[0])
    last = (1 if axis is None else axis) in (-1, len(shape) - 1)
    assert [n.op_type for n in out.graph.node] == ([op] if last else ["Flatten", "Shape", op, "Reshape"])
    (a,) = [a for n in out.graph.node if n.op_type == op for a in n.attribute if a.name == "axis"]
    assert a.i in (-1, len(shape) - 1)  # (not last: on the Flatten's 2-D output)
    back = converted(out, max(source, 11))
    np.testing.assert_array_equal(validation_ort_run(back, {"x": x})[0], validation_ort_run(model, {"x": x})[0])


def test_hardmax_11_through_upgrade_and_lower_to_13_validates_exactly():
    # (Both kept Hardmax axis=1 at 13: 8 ones for a [2, 3, 4] input instead of 2.)
    import scatter_rewrite as sr

    vi = oh.make_tensor_value_info
    nodes = [oh.make_node("Hardmax", ["x"], ["y"], axis=1), oh.make_node("ScatterElements", ["x", "i", "x"], ["s"], axis=1)]
    graph = oh.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [2, 3, 4]), vi("i", TensorProto.INT64, [2, 3, 4])],
                          [vi("y", TensorProto.FLOAT, [2, 3, 4]), vi("s", TensorProto.FLOAT, [2, 3, 4])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 11)])
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32),
             "i": np.zeros((2, 3, 4), np.int64)}
    for verb in (sr.upgrade, sr.lower):
        result, outcome = verb(model, opset=13, validate=True, return_report=True)
        assert outcome.validation["max_abs_diff"] == 0.0
        assert validation_ort_run(result, feeds)[0].sum() == 2
        np.testing.assert_array_equal(validation_ort_run(result, feeds)[0], validation_ort_run(model, feeds)[0])


def test_hardmax_of_unknown_rank_moves_up_and_an_axis_from_a_function_attribute_too():
    """Flatten needs no rank; an ``axis = @ax`` goes to Flatten, whose default (1) is the older op's."""
    model = function_called_at_two_ranks("Hardmax", 1)
    model.opset_import[0].version = model.functions[0].opset_import[0].version = 11
    out = converted(model, 13)
    assert [n.op_type for n in out.functions[0].node] == ["Flatten", "Shape", "Hardmax", "Reshape"]
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32), "z": rng.standard_normal((2, 3, 4)).astype(np.float32)}
    _same_outputs(out, model, feeds)

    softmax = oh.make_node("Softmax", ["a"], ["b"])
    softmax.attribute.append(onnx.AttributeProto(name="axis", ref_attr_name="ax", type=onnx.AttributeProto.INT))
    function = oh.make_function("local", "F", ["a"], ["b"], [softmax], opset_imports=[oh.make_opsetid("", 11)],
                                attributes=["ax"])
    graph = oh.make_graph([oh.make_node("F", ["x"], ["y"], domain="local", ax=0), oh.make_node("F", ["z"], ["w"], domain="local")],
                          "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                                oh.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3, 4])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
                           oh.make_tensor_value_info("w", TensorProto.FLOAT, [2, 3, 4])])
    model = oh.make_model(graph, functions=[function], opset_imports=[oh.make_opsetid("", 11), oh.make_opsetid("local", 1)])
    out = converted(model, 13)
    flatten = out.functions[0].node[0]
    assert flatten.op_type == "Flatten" and flatten.attribute[0].ref_attr_name == "ax"
    _same_outputs(out, model, feeds)


# --- Initializers that are also graph inputs are defaults callers may override, not constants ------------------

def _run_overriding(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    """onnxruntime on one thread, fed initializers it lets callers override too (run_onnxruntime feeds
    the session's inputs only)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    assert {i.name for i in session.get_overridable_initializers()} & set(feeds)
    return session.run(None, feeds)


def _same_overridden(a: onnx.ModelProto, b: onnx.ModelProto, feeds: dict) -> None:
    for left, right in zip(_run_overriding(a, feeds), _run_overriding(b, feeds), strict=True):
        np.testing.assert_array_equal(left, right)


def _with_overridable(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """``model`` with its initializer ``name`` listed as a graph input too."""
    init = next(i for i in model.graph.initializer if i.name == name)
    model.graph.input.append(oh.make_tensor_value_info(name, init.data_type, list(init.dims)))
    return model


def test_reduce_axes_callers_may_override_are_not_written_into_the_attribute():
    # (lower wrote the default axes [1] into ReduceMean-13's attribute: axes=[0] fed at run time gave [[1], [4]].)
    import scatter_rewrite as sr

    model = _with_overridable(_reduce_model("ReduceMean", [1], None, out_shape=[None, None]), "axes")
    out = sr.lower(model, opset=13)  # reduced axis by axis, reading the axes at run time
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(_run_overriding(out, {"x": x, "axes": np.array([0])})[0], [[1.5, 2.5, 3.5]])
    np.testing.assert_array_equal(_run_overriding(out, {"x": x, "axes": np.array([1])})[0], [[1.0], [4.0]])


@pytest.mark.parametrize("op", ["Squeeze", "Unsqueeze"])
def test_an_axes_input_callers_may_override_is_not_given_to_the_converter_as_a_constant(op):
    # (onnx.version_converter wrote the default axes into Squeeze-11's attribute.)
    vi = oh.make_tensor_value_info
    shape = [1, 3] if op == "Squeeze" else [3]
    graph = oh.make_graph([oh.make_node(op, ["x", "ax"], ["y"])], "g", [vi("x", TensorProto.FLOAT, shape)],
                          [vi("y", TensorProto.FLOAT, [3] if op == "Squeeze" else [1, 3])],
                          initializer=[onnx.numpy_helper.from_array(np.array([0]), "ax")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    assert len(converted(model, 11).graph.node[0].input) == 1  # a constant: the attribute
    with pytest.raises(ConversionError, match=rf"cannot convert {op} \(opset 13, main graph\) to opset 11: its axes 'ax' "
                                              rf"is a graph input with an initializer, which callers may override .*"
                                              rf"and opset 11's {op} takes it as a constant attribute"):
        converted(_with_overridable(model, "ax"), 11)


def _reshape_split_model() -> onnx.ModelProto:
    vi = oh.make_tensor_value_info
    nodes = [oh.make_node("Reshape", ["x", "shape"], ["b"]), oh.make_node("Split", ["b"], ["p", "q"], axis=1, num_outputs=2)]
    graph = oh.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [6])],
                          [vi("p", TensorProto.FLOAT, [None, None]), vi("q", TensorProto.FLOAT, [None, None])],
                          initializer=[onnx.numpy_helper.from_array(np.array([2, 3], np.int64), "shape")])
    return _with_overridable(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]), "shape")


def test_shapes_inferred_from_a_default_callers_may_override_are_not_used():
    # (Shape inference read the default [2, 3]: Split-18 num_outputs=2 became constant chunks [2, 1], which
    # onnxruntime refused for shape [3, 2] and miscut for [1, 6].)
    from scatter_rewrite.type_inference import inferred_tensor_types

    model = _reshape_split_model()
    found = {v.name: t for v, t in inferred_tensor_types(ir.serde.deserialize_model(model)).items()}
    assert len(found["b"].shape.dim) == 2 and not any(d.HasField("dim_value") for d in found["b"].shape.dim)
    out = converted(model, 13)
    for shape in ([2, 3], [3, 2], [1, 6]):
        feeds = {"x": np.arange(6, dtype=np.float32), "shape": np.array(shape, np.int64)}
        _same_overridden(out, model, feeds)
        assert [a.shape for a in _run_overriding(out, feeds)] == [(shape[0], -(-shape[1] // 2)), (shape[0], shape[1] // 2)]
    with pytest.raises(ConversionError, match=r"Split \(opset 18, main graph\) to opset 12: dimension 1 of its input is "
                                              r"not known before run time"):
        converted(model, 12)


# --- Pad-18 with an axes input as Pad-11/13 -------------------------------------------------------------------------

def _pad_axes_model(axes, pads, mode: str | None = None, value: bool = False, pads_input: bool = False,
                    shape=(3, 4), opset: int = 18) -> onnx.ModelProto:
    vi = oh.make_tensor_value_info
    inits = [onnx.numpy_helper.from_array(np.array(axes, np.int64).reshape(-1), "axes")]
    inputs = [vi("x", TensorProto.FLOAT, None if shape is None else list(shape))]
    if pads_input:
        inputs.append(vi("pads", TensorProto.INT64, [len(pads)]))
    else:
        inits.append(onnx.numpy_helper.from_array(np.array(pads, np.int64).reshape(-1), "pads"))
    if value:
        inits.append(onnx.numpy_helper.from_array(np.array(-1.5, np.float32), "v"))
    attrs = {} if mode is None else {"mode": mode}
    node = oh.make_node("Pad", ["x", "pads", "v" if value else "", "axes"], ["y"], **attrs)
    graph = oh.make_graph([node], "g", inputs, [vi("y", TensorProto.FLOAT, None if shape is None else [None] * len(shape))],
                          initializer=inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


@pytest.mark.parametrize("target", [11, 13, 17])
@pytest.mark.parametrize("mode,value", [(None, True), ("constant", False), ("reflect", False), ("edge", False)])
@pytest.mark.parametrize("axes,pads", [([1], [1, 2]), ([-1], [2, 0]), ([0, 1], [1, 0, 2, 1]), ([1, -2], [0, 1, 2, 1]),
                                       ([-2], [1, 1]), ([], []), ([1], [-1, 2])])
def test_pad_with_constant_axes_is_pad_11_with_pads_for_every_axis(axes, pads, mode, value, target):
    # (No Adapter To Version $17 for Pad: PyTorch's dynamo exporter writes F.pad as Pad-18 with axes.)
    model = _pad_axes_model(axes, pads, mode, value)
    out = converted(model, target)
    assert [n.op_type for n in out.graph.node if n.op_type != "Constant"] == ["Pad"]
    pad = next(n for n in out.graph.node if n.op_type == "Pad")
    assert len(pad.input) == (3 if value else 2) and [a.s.decode() for a in pad.attribute] == ([mode] if mode else [])
    _same_outputs(out, model, {"x": np.arange(12, dtype=np.float32).reshape(3, 4)})


def test_pad_with_constant_axes_and_pads_computed_at_run_time_gathers_them():
    model = _pad_axes_model([-1, 0], [0, 0, 0, 0], pads_input=True, value=True)
    out = converted(model, 11)
    assert [n.op_type for n in out.graph.node if n.op_type != "Constant"] == ["Concat", "Gather", "Pad"]
    for pads in ([1, 2, 3, 0], [0, 0, 0, 0], [2, 0, -1, 1]):
        _same_outputs(out, model, {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "pads": np.array(pads)})


def test_pad_axes_of_an_unknown_rank_or_out_of_range_stop_the_move_with_the_reason():
    with pytest.raises(ConversionError, match=r"Pad \(opset 18, main graph\) to opset 13: its input's rank is unknown, and "
                                              r"opset 13's Pad takes pads for every axis"):
        converted(_pad_axes_model([1], [1, 1], shape=None), 13)
    with pytest.raises(ConversionError, match=r"axes \[1, 1\] repeat an axis"):
        converted(_pad_axes_model([1, -1], [0, 0, 1, 1]), 13)


def test_pad_with_axes_moves_for_tensorrt_8_6():
    import scatter_rewrite as sr

    vi = oh.make_tensor_value_info
    nodes = [oh.make_node("ScatterElements", ["d", "i", "u"], ["s"], axis=0, reduction="add"),
             oh.make_node("Pad", ["s", "pads", "", "axes"], ["y"], mode="edge")]
    graph = oh.make_graph(nodes, "g", [vi("d", TensorProto.FLOAT, [4, 4]), vi("i", TensorProto.INT64, [6, 4]),
                                       vi("u", TensorProto.FLOAT, [6, 4])], [vi("y", TensorProto.FLOAT, [4, 7])],
                          initializer=[onnx.numpy_helper.from_array(np.array([1, 2], np.int64), "pads"),
                                       onnx.numpy_helper.from_array(np.array([-1], np.int64), "axes")])
    result = sr.prepare_for_tensorrt(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]), trt_version="8.6",
                                     validate=True)
    assert {o.version for o in result.opset_import if o.domain == ""} == {17}


# --- Where onnx.version_converter has no adapter: said in the model's terms ------------------------------------

def _no_adapter_model(case: str) -> onnx.ModelProto:
    vi = oh.make_tensor_value_info
    if case == "GridSample":
        nodes, opset = [oh.make_node("GridSample", ["x", "grid"], ["y"])], 20
        # (5-D: GridSample-16 takes 4-D input only; the 4-D one moves, test_grid_sample_modes_renamed)
        inits = [onnx.numpy_helper.from_array(np.zeros((1, 2, 2, 2, 3), np.float32), "grid")]
        x, y = [1, 1, 3, 3, 3], [1, 1, 2, 2, 2]
    elif case == "Resize":
        nodes, opset = [oh.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")], 19
        inits = [onnx.numpy_helper.from_array(np.array([1, 2, 2], np.float32), "scales")]
        x, y = [1, 2, 4], [1, 4, 8]
    else:
        nodes, opset, inits = [oh.make_node("DFT", ["x", ""], ["y"])], 20, []
        x, y = [1, 4, 1], [1, 4, 2]
    graph = oh.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, x)], [vi("y", TensorProto.FLOAT, y)], initializer=inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


@pytest.mark.parametrize("case,target,why", [
    ("GridSample", 17, r"GridSample-20 -> GridSample-16: its input's rank is 5, and GridSample-16 takes 4-D input "
                       r"only$"),
    ("DFT", 13, r"DFT-17 \(no older version\): no older op computes it and ONNX gives it no function body$"),
])
def test_a_move_the_converter_has_no_adapter_for_is_refused_in_the_models_terms(case, target, why):
    # (The message was the converter's C++ assertion: "BaseConverter.h:66: adapter_lookup: Assertion `false`
    # failed: No Adapter From Version $20 for GridSample".)
    with pytest.raises(ConversionError, match=rf"^cannot convert {case} \(opset \d+, main graph\) to opset {target}: {why}") as e:
        converted(_no_adapter_model(case), target)
    assert "Assertion" not in str(e.value) and "$" not in str(e.value)


@pytest.mark.parametrize("target", [11, 13, 17])
def test_resize_with_axes_and_without_roi_moves_down(target):
    """Resize-18's axes as scales for every axis; Resize-11's roi and scales inputs written empty."""
    vi = oh.make_tensor_value_info
    graph = oh.make_graph(
        [oh.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest", axes=[-2, -1]),
         oh.make_node("Resize", ["x", "", "", "sizes"], ["z"], mode="linear", axes=[2])], "g",
        [vi("x", TensorProto.FLOAT, [1, 2, 4]), vi("sizes", TensorProto.INT64, [1])],
        [vi("y", TensorProto.FLOAT, [1, 4, 8]), vi("z", TensorProto.FLOAT, [1, 2, None])],
        initializer=[onnx.numpy_helper.from_array(np.array([2, 2], np.float32), "scales")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 19)])
    out = converted(model, target)
    assert all(a.name != "axes" for n in out.graph.node for a in n.attribute)
    feeds = {"x": np.arange(8, dtype=np.float32).reshape(1, 2, 4), "sizes": np.array([7], np.int64)}
    for got, want in zip(run_onnxruntime(out.SerializeToString(), feeds), run_onnxruntime(model.SerializeToString(), feeds)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
def test_grid_sample_modes_renamed(mode):
    """GridSample-20's linear/cubic are GridSample-16's bilinear/bicubic on 4-D input."""
    vi = oh.make_tensor_value_info
    graph = oh.make_graph([oh.make_node("GridSample", ["x", "grid"], ["y"], mode=mode)], "g",
                          [vi("x", TensorProto.FLOAT, [1, 1, 3, 3]), vi("grid", TensorProto.FLOAT, [1, 2, 2, 2])],
                          [vi("y", TensorProto.FLOAT, [1, 1, 2, 2])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 20)])
    out = converted(model, 17)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((1, 1, 3, 3)).astype(np.float32),
             "grid": rng.uniform(-1, 1, (1, 2, 2, 2)).astype(np.float32)}
    np.testing.assert_array_equal(run_onnxruntime(out.SerializeToString(), feeds)[0],
                                  run_onnxruntime(model.SerializeToString(), feeds)[0])


def test_the_tensorrt_opset_cap_says_why_in_the_models_terms():
    import scatter_rewrite as sr

    model = _no_adapter_model("GridSample")
    vi = oh.make_tensor_value_info
    model.graph.node.append(oh.make_node("ScatterElements", ["d", "i", "u"], ["s"], axis=0))
    model.graph.input.extend([vi("d", TensorProto.FLOAT, [4, 3]), vi("i", TensorProto.INT64, [2, 3]),
                              vi("u", TensorProto.FLOAT, [2, 3])])
    model.graph.output.append(vi("s", TensorProto.FLOAT, [4, 3]))
    with pytest.raises(ConversionError) as refused:  # (nothing written: the target is not reached)
        sr.prepare_for_tensorrt(model, trt_version="8.6", validate=True)
    said = str(refused.value)
    assert ("the model is at opset 20 (TensorRT 8.6's parser documents opsets up to 17) and cannot move there: "
            "cannot convert GridSample (opset 20, main graph) to opset 17: GridSample-20 -> GridSample-16: its "
            "input's rank is 5" in said), said
    assert "Assertion" not in said


def test_check_opset_target_says_what_lower_will_do():
    """check --target opset-N gives `lower --opset N` as the fix only when the declared steps move
    the whole model: a BitwiseAnd-18 beside the scatter has no form at 13."""
    import scatter_rewrite as sr
    from scatter_rewrite.readiness import check

    vi = oh.make_tensor_value_info
    nodes = [oh.make_node("ScatterElements", ["d", "i", "u"], ["s"], axis=0, reduction="max")]
    inputs = [vi("d", TensorProto.FLOAT, [4, 3]), vi("i", TensorProto.INT64, [2, 3]), vi("u", TensorProto.FLOAT, [2, 3])]
    outputs = [vi("s", TensorProto.FLOAT, [4, 3])]
    movable = oh.make_model(oh.make_graph(nodes, "g", inputs, outputs), opset_imports=[oh.make_opsetid("", 18)])
    [ready] = check(ir.serde.deserialize_model(movable), "opset-13")
    assert ready.fix == "scatter-rewrite lower --opset 13"
    assert sr.check(movable, target="opset-13").status == "FIXABLE"  # (its dry run of lower succeeds)
    sr.lower(movable, opset=13, validate=True)  # (which does move it)
    bits = oh.make_graph(nodes + [oh.make_node("BitwiseAnd", ["a", "b"], ["c"])], "g",
                         inputs + [vi("a", TensorProto.INT32, [2]), vi("b", TensorProto.INT32, [2])],
                         outputs + [vi("c", TensorProto.INT32, [2])])
    stuck = oh.make_model(bits, opset_imports=[oh.make_opsetid("", 18)])
    report = sr.check(stuck, target="opset-13")
    assert report.status == "BLOCKED" and report.fix is None
    scatter, bitwise = report.findings
    assert scatter.fix is None and "scatter-rewrite lower --opset 13 stops at another node" in scatter.blockers
    assert bitwise.op == "BitwiseAnd"
    assert any("BitwiseAnd-18 (no older version): no older op works on the bits" in b for b in bitwise.blockers)
    with pytest.raises(ConversionError, match="BitwiseAnd") as refused:
        sr.lower(stuck, opset=13)
    assert str(refused.value) == report.dry_run.error


def test_a_function_body_for_a_node_leaving_optional_outputs_out_is_valid():
    """Attention-23 with present_key/present_value left out (outputs 'Y', '', '', 'qk') moved
    below 23 as its function body: the body's nodes computing the omitted outputs have nowhere to
    write, and must not become nodes without outputs (onnx.checker refuses those)."""
    import numpy as np
    import onnx.helper as oh
    import onnxruntime as ort

    import scatter_rewrite as sr

    shape = [2, 3, 4, 8]
    node = oh.make_node("Attention", ["Q", "K", "V"], ["Y", "", "", "qk"])
    graph = oh.make_graph(
        [node], "attention",
        [oh.make_tensor_value_info(n, onnx.TensorProto.FLOAT, shape) for n in "QKV"],
        [oh.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None),
         oh.make_tensor_value_info("qk", onnx.TensorProto.FLOAT, None)])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 23)])
    moved = sr.lower(model, opset=17, validate=False)
    onnx.checker.check_model(moved, full_check=True)
    assert "Attention" not in {n.op_type for n in moved.graph.node}
    rng = np.random.default_rng(0)
    feed = {n: rng.standard_normal(shape).astype(np.float32) for n in "QKV"}
    want = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    got = ort.InferenceSession(moved.SerializeToString()).run(None, feed)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-5)  # (the sweep's bound)
