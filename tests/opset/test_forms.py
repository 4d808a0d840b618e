"""The exact forms of opset moves (scatter_rewrite/opset/forms/): how a new one is added (one file,
registered where it is defined), and the forms for gaps real exports hit. Positive: the form runs in
onnxruntime and matches the original there; negative: what it refuses, with the reason."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator

import scatter_rewrite.opset
from tests.helpers.models import function_called_at_two_ranks
from scatter_rewrite.errors import ConversionError
from scatter_rewrite.opset import convert_opset, registry
from tests.helpers.runs import ort_run

OPSET = Path(scatter_rewrite.opset.__file__).parent


def _moved(proto: onnx.ModelProto, target: int):
    model = ir.serde.deserialize_model(proto)
    move = convert_opset(model, target)
    out = ir.serde.serialize_model(model)
    onnx.checker.check_model(out, full_check=True)
    return out, move


# --- adding a form touches one file -------------------------------------------------------------

# (not Abs's meaning: a marker that shows the form ran, for a step the table declares SAME)
_DUMMY = '''
from scatter_rewrite.graph import NodeBuilder
from scatter_rewrite.opset.registry import Replaced, register_form
from scatter_rewrite.opset.rewriting import replace


@register_form("Abs", 13, 6)
def abs_marker_13_6(node, scope, target):
    b = NodeBuilder()
    y = b.add("Identity", [node.inputs[0]])
    replace(node, scope, b.nodes, [y])
    return Replaced(tuple(b.nodes))
'''


def test_a_new_form_is_one_file_that_the_engine_picks_up(tmp_path, monkeypatch):
    """A form written as one file in a forms package, registered by its decorator, is the one the
    engine runs for its step, with no edit anywhere else: its registration declares the step
    (steps.step), here one the table declares SAME."""
    from scatter_rewrite.opset import steps

    assert steps.STEPS[("Abs", 13)] == steps.SAME and steps.previous("Abs", 13) == 6
    package = tmp_path / "extra_forms"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "abs_marker_13_6.py").write_text(_DUMMY)
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = {k: list(v) for k, v in registry.load_forms().items()}  # (the package's own first)
    try:
        registry.load_forms("extra_forms")
        files = {Path(sys.modules[spec.function.__module__].__file__).name
                 for key, forms in registry.FORMS.items() for spec in forms
                 if spec not in saved.get(key, [])}
        assert files == {"abs_marker_13_6.py"}
        assert steps.step("Abs", 13) == steps.REWRITE
        graph = oh.make_graph([oh.make_node("Abs", ["x"], ["y"])], "g",
                              [oh.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
                              [oh.make_tensor_value_info("y", TensorProto.FLOAT, [3, 3])])
        model = ir.serde.deserialize_model(
            oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)]))
        convert_opset(model, 11)
        assert [n.op_type for n in model.graph] == ["Identity"]  # (the marker's: Abs is SAME)
    finally:
        registry.FORMS.clear()
        registry.FORMS.update(saved)
        registry._LOADED.discard("extra_forms")
    assert steps.step("Abs", 13) == steps.SAME
    assert (package / "abs_marker_13_6.py").exists()


# --- sizes: no module over 800 lines, no function over 80, in opset/ ---------------------------

def test_opset_modules_and_functions_are_small():
    big = []
    for path in sorted(OPSET.rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > 800:
            big.append(f"{path.name}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > 80:
                    big.append(f"{path.name}:{node.name}: {length} lines")
    assert not big, big


# --- Softmax, LogSoftmax, Hardmax-13 -> 11 on an input of unknown rank ---------------------------

# Softmax and LogSoftmax as ONNX's function body computes them, against onnxruntime's fused kernel:
# float32, within 4 ulps of 1 relatively (rtol 5e-7) plus atol 1e-7 near 0. Hardmax: bit for bit.
RTOL, ATOL = 5e-7, 1e-7


@pytest.mark.parametrize("opset", [13, 18])  # (ReduceMax takes its axes as an input from 18)
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [0, 1, -2])
def test_softmax_family_of_unknown_rank_moves_on_the_same_axis(op, axis, opset):
    model = function_called_at_two_ranks(op, axis, opset=opset)
    out, move = _moved(model, 11)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32) * 10,
             "z": rng.standard_normal((2, 3, 4)).astype(np.float32) * 10}
    feeds["z"][0, 0, :] = feeds["z"][0, 1, :]  # (ties for Hardmax on axis 1)
    feeds["x"][1, :] = 3.0
    function_ops = {n.op_type for n in out.functions[0].node}
    assert op not in function_ops
    for got, want in zip(ort_run(out, feeds), ort_run(model, feeds), strict=True):
        if op == "Hardmax":
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert move.rounding == ([] if op == "Hardmax" else [op])  # (validation's float tolerance)


def test_softmax_of_unknown_rank_of_a_type_opset_11_lacks_is_refused_with_the_reason():
    """bfloat16: Softmax-11 takes it not, nor ReduceMax-11 in the decomposition."""
    model = function_called_at_two_ranks("Softmax", 1, dtype=TensorProto.BFLOAT16)
    with pytest.raises(ConversionError, match=r"cannot convert .* to opset 11: .*BFLOAT16"):
        _moved(model, 11)


def test_softmax_of_unknown_rank_whose_axis_comes_from_a_function_attribute_is_refused():
    softmax = oh.make_node("Softmax", ["a"], ["b"])
    softmax.attribute.append(oh.make_attribute_ref("axis", onnx.AttributeProto.INT))
    function = oh.make_function("local", "F", ["a"], ["b"], [softmax],
                                opset_imports=[oh.make_opsetid("", 18)], attributes=["axis"])
    graph = oh.make_graph([oh.make_node("F", ["x"], ["y"], domain="local", axis=0)], "g",
                          [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = oh.make_model(graph, functions=[function],
                          opset_imports=[oh.make_opsetid("", 18), oh.make_opsetid("local", 1)])
    with pytest.raises(ConversionError, match="refers to the function's attribute 'axis'"):
        _moved(model, 11)


# --- GridSample-16 and -20 below 16: the gather-based decomposition -----------------------------

def _grid_sample_model(opset: int, mode: str, padding: str, align: int, x_shape=(2, 3, 5, 4),
                       grid_shape=(2, 6, 7, 2), dtype=TensorProto.FLOAT,
                       grid_dtype=None) -> onnx.ModelProto:
    vi = oh.make_tensor_value_info
    node = oh.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=padding,
                        align_corners=align)
    y_shape = [x_shape[0], x_shape[1], *grid_shape[1:-1]]
    graph = oh.make_graph([node], "g", [vi("x", dtype, x_shape),
                                        vi("g", grid_dtype or dtype, grid_shape)],
                          [vi("y", dtype, y_shape)])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def _grid(rng, shape) -> np.ndarray:
    """Points in and beyond [-1, 1] (padding), the corners and the borders exactly, and points
    several widths out (reflection's turns)."""
    grid = rng.uniform(-1.6, 1.6, shape).astype(np.float32)
    grid[0, 0, :, 0] = np.linspace(-1, 1, shape[2])
    grid[0, 1, :3, :] = [[-1, 1], [1, -1], [3.2, -4.1]]
    return grid


# bilinear: the kernel's arithmetic in the same order; onnxruntime's kernel differs by at most 2
# ulps where padding is zeros and align_corners 0 (bit for bit elsewhere here): rtol 1e-6.
@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("opset", [16, 20])
def test_grid_sample_moves_below_16_as_gathers(opset, mode, padding, align):
    if opset >= 20:
        mode = {"bilinear": "linear"}.get(mode, mode)
    model = _grid_sample_model(opset, mode, padding, align)
    out, move = _moved(model, 11)
    assert "GridSample" not in {n.op_type for n in out.graph.node}
    rng = np.random.default_rng(len(padding) + align)
    feeds = {"x": rng.standard_normal((2, 3, 5, 4)).astype(np.float32),
             "g": _grid(rng, (2, 6, 7, 2))}
    (want,), (got,) = ort_run(model, feeds), ort_run(out, feeds)
    if mode == "nearest":
        np.testing.assert_array_equal(got, want)
        assert move.rounding == []
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
        assert move.rounding == ["GridSample"]


def test_grid_sample_of_sizes_known_only_at_run_time_moves():
    """H, W and the grid's size read from the shapes at run time: one model for every size."""
    model = _grid_sample_model(16, "bilinear", "reflection", 0, x_shape=("n", 2, "h", "w"),
                               grid_shape=("n", "p", "q", 2))
    out, _ = _moved(model, 11)
    rng = np.random.default_rng(1)
    for h, w in ((1, 1), (3, 8)):
        feeds = {"x": rng.standard_normal((1, 2, h, w)).astype(np.float32),
                 "g": _grid(rng, (1, 3, 4, 2))}
        np.testing.assert_allclose(ort_run(out, feeds)[0], ort_run(model, feeds)[0], rtol=1e-6,
                                   atol=1e-7)


@pytest.mark.parametrize("model, why", [
    (_grid_sample_model(16, "bicubic", "zeros", 0), "mode 'bicubic' is not written here"),
    (_grid_sample_model(20, "cubic", "zeros", 0), "mode 'bicubic' is not written here"),
    (_grid_sample_model(20, "linear", "zeros", 0, x_shape=(1, 1, 2, 3, 4),
                        grid_shape=(1, 2, 2, 2, 3)), "its input's rank is 5"),
    (_grid_sample_model(16, "bilinear", "zeros", 0, dtype=TensorProto.FLOAT16),
     r"types \(FLOAT16\) are not both float or both double"),
    (_grid_sample_model(16, "bilinear", "zeros", 0, dtype=TensorProto.DOUBLE,
                        grid_dtype=TensorProto.FLOAT), "not both float or both double"),
], ids=["bicubic", "cubic-20", "5-D", "float16", "mixed types"])
def test_grid_sample_without_an_exact_form_below_16_is_refused_with_the_reason(model, why):
    with pytest.raises(ConversionError,
                       match=r"cannot convert GridSample .* to opset 11: .*" + why):
        _moved(model, 11)


# --- Resize with antialias=1 on static sizes below 18: a constant linear map per axis -----------

def _resize_model(x_shape, attrs, sizes=None, scales=None, opset=18, dynamic=False):
    vi = oh.make_tensor_value_info
    inputs, initializers, graph_inputs = ["x", ""], [], [vi("x", TensorProto.FLOAT, x_shape)]
    for name, values, dtype in (("scales", scales, np.float32), ("sizes", sizes, np.int64)):
        if values is None:
            inputs.append("")
            continue
        inputs.append(name)
        if dynamic:
            graph_inputs.append(vi(name, oh.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                   [len(values)]))
        else:
            initializers.append(onnx.numpy_helper.from_array(np.array(values, dtype), name))
    while inputs[-1] == "":
        inputs.pop()
    node = oh.make_node("Resize", inputs, ["y"], **attrs)
    y = vi("y", TensorProto.FLOAT, [f"y{i}" for i in range(len(x_shape))])
    graph = oh.make_graph([node], "g", graph_inputs, [y], initializer=initializers)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


# MatMul sums in another order than onnxruntime's kernel, with float32 weights either way.
RESIZE_RTOL = RESIZE_ATOL = 1e-5


@pytest.mark.parametrize("attrs, sizes, scales", [
    ({"mode": "linear", "antialias": 1}, [1, 2, 3, 4], None),
    ({"mode": "linear", "antialias": 1, "coordinate_transformation_mode": "align_corners"},
     [1, 2, 5, 3], None),
    ({"mode": "cubic", "antialias": 1}, None, [1.0, 1.0, 0.5, 0.4]),
    ({"mode": "cubic", "antialias": 1, "exclude_outside": 1, "cubic_coeff_a": -0.5},
     [1, 2, 4, 10], None),  # (one axis down, one up)
    ({"mode": "linear", "antialias": 1, "axes": [3]}, [6], None),
    ({"mode": "linear", "antialias": 1, "axes": [-2, 3]}, None, [0.6, 1.0]),
], ids=["linear-sizes", "align-corners", "cubic-scales", "cubic-exclude-up", "axes", "axes-scales"])
@pytest.mark.parametrize("opset", [18, 19])
def test_resize_with_antialias_moves_below_18_as_constant_weights(attrs, sizes, scales, opset):
    model = _resize_model([1, 2, 8, 10], attrs, sizes=sizes, scales=scales, opset=opset)
    out, move = _moved(model, 13)
    assert "Resize" not in {n.op_type for n in out.graph.node}
    x = np.random.default_rng(0).standard_normal((1, 2, 8, 10)).astype(np.float32)
    (want,), (got,) = ort_run(model, {"x": x}), ort_run(out, {"x": x})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=RESIZE_RTOL, atol=RESIZE_ATOL)
    assert move.rounding == ["Resize"]
    # onnx.reference, the spec's own, agrees as closely (it fails on negative axes itself)
    if any(a < 0 for a in attrs.get("axes", [])):
        return
    (reference,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(got, reference, rtol=RESIZE_RTOL, atol=RESIZE_ATOL)


@pytest.mark.parametrize("model, why", [
    (_resize_model([1, 2, 8, 10], {"mode": "linear", "antialias": 1}, sizes=[1, 2, 3, 4],
                   dynamic=True), "its sizes 'sizes' is a graph input"),
    (_resize_model(["n", 2, 8, 10], {"mode": "linear", "antialias": 1}, sizes=[1, 2, 3, 4]),
     "its input's shape is not static"),
    (_resize_model([1, 2, 8, 10], {"mode": "linear", "antialias": 1,
                                   "keep_aspect_ratio_policy": "not_larger"}, sizes=[1, 2, 3, 4]),
     "keep_aspect_ratio_policy is not stretch"),
    (_resize_model([1, 2, 8, 10], {"mode": "nearest", "antialias": 1}, sizes=[1, 2, 3, 4]),
     "with mode nearest, which onnxruntime and onnx.reference refuse too"),
], ids=["computed-sizes", "dynamic-shape", "aspect-policy", "nearest"])
def test_resize_with_antialias_without_a_constant_map_is_refused_with_the_reason(model, why):
    with pytest.raises(ConversionError, match=r"cannot convert Resize .* to opset 13: antialias=1"
                                              r":? .*" + why):
        _moved(model, 13)


def test_the_move_says_which_ops_it_computed_with_other_float_ops():
    model = _grid_sample_model(16, "bilinear", "zeros", 1)
    _, move = _moved(model, 11)
    assert move.decomposed == {"GridSample": 1} and move.expanded == {}
    assert move.note.endswith("; computed by other ops at opset 11: GridSample x1 (GridSample: "
                              "float results may round differently from a fused kernel)")


# --- Max-12/Min-12 on integers below 12 --------------------------------------------------------

@pytest.mark.parametrize("op", ["Max", "Min"])
@pytest.mark.parametrize("inputs", [1, 3])
def test_max_min_of_integers_move_below_12_bit_for_bit(op, inputs):
    vi = oh.make_tensor_value_info
    names = [f"x{i}" for i in range(inputs)]
    shapes = [[2, 3], [3], [1, 3]][:inputs]
    graph = oh.make_graph([oh.make_node(op, names, ["y"])], "g",
                          [vi(n, TensorProto.INT32, s) for n, s in zip(names, shapes)],
                          [vi("y", TensorProto.INT32, [2, 3])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    out, _ = _moved(model, 11)
    assert op not in {n.op_type for n in out.graph.node}
    rng = np.random.default_rng(inputs)
    feeds = {n: rng.integers(-5, 5, s).astype(np.int32) for n, s in zip(names, shapes)}
    np.testing.assert_array_equal(ort_run(out, feeds)[0], ort_run(model, feeds)[0])
