"""dynamo's export of ``scatter_reduce(reduce="mean")`` (torch 2.13, opset 18): a plain
ScatterElements (reduction "none" written out; with include_self=False after a scatter of zeros)
named ``node_scatter_reduce*``, which loses the mean. Every verb and ``check`` note it. The
include_self=False form is told by the graph (the clearing scatter at the same indices) and
``repair`` computes its mean; the include_self=True form only by its name, so ``repair`` rewrites it
only when asked (``assume="scatter-reduce-mean"``). The mean itself, on small models built here:
float and integer dtypes (PyTorch divides integers with floor), targets no update reaches,
float16 and opsets below 16 (the add scatters lowered)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort

import pytest

import scatter_rewrite as sr
from scatter_rewrite.readiness import check
from scatter_rewrite.repair_proof import scatter_mean
from scatter_rewrite.export_patterns import (
    CLEARED_MEAN_NOTE_START, MEAN_NOTE_START, accumulate_export_notes,
)
from scatter_rewrite.passes.repair import REPAIR_NOTE, RepairPass
from tests.helpers.exports import export_arrays

DATA = Path(__file__).parents[1] / "data" / "torch_repair"
NAME = "scatter_reduce_mean_dynamo18"


def test_the_export_is_plain_scatters_that_lose_the_mean():
    model = onnx.load(DATA / f"{NAME}.onnx")
    scatters = [n for n in model.graph.node if n.op_type == "ScatterElements"]
    assert [onnx.helper.get_attribute_value(a) for n in scatters for a in n.attribute
            if a.name == "reduction"] == [b"none"] * 3
    inputs, pytorchs = export_arrays(DATA, NAME)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    actual = session.run(None, inputs)
    for got, output in zip(actual, ("y", "y_without_self")):
        assert not np.allclose(got, pytorchs[output], rtol=1e-5, atol=1e-5)


def test_each_mean_scatter_is_noted_and_only_the_structural_one_repaired():
    model = ir.load(DATA / f"{NAME}.onnx")
    notes = accumulate_export_notes(model)
    assert [n.split("'")[1] for n in notes if MEAN_NOTE_START in n] == ["node_scatter_reduce"]
    assert [n.split("'")[1] for n in notes if CLEARED_MEAN_NOTE_START in n] == [
        "node_scatter_reduce_1"]
    noted = [f for f in check(model, "opset-18")
             if any(MEAN_NOTE_START in n or CLEARED_MEAN_NOTE_START in n for n in f.notes)]
    assert len(noted) == 2 and not any(f.blocked for f in noted)
    assert [f.fix for f in noted if REPAIR_NOTE in f.notes] == ["scatter-rewrite repair"]
    result = RepairPass()(model)
    assert [n.node.split("'")[1] for n in result.rewritten] == ["node_scatter_reduce_1"]
    assert not result.skipped
    assert "include_self=False" in result.rewritten[0].detail


@pytest.mark.parametrize("assume", [None, "scatter-reduce-mean"])
def test_repair_gives_pytorchs_means(assume):
    inputs, pytorchs = export_arrays(DATA, NAME)
    repaired, report = sr.repair(onnx.load(DATA / f"{NAME}.onnx"), assume=assume, validate=True,
                                 inputs=inputs, return_report=True)
    session = ort.InferenceSession(repaired.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    with_self, without_self = session.run(None, inputs)
    np.testing.assert_allclose(without_self, pytorchs["y_without_self"], rtol=1e-5, atol=1e-5)
    if assume is None:  # the name-only mean: left as exported, and still noted
        assert not np.allclose(with_self, pytorchs["y"], rtol=1e-5, atol=1e-5)
        assert any("node_scatter_reduce'" in note for note in report.notes)
    else:
        np.testing.assert_allclose(with_self, pytorchs["y"], rtol=1e-5, atol=1e-5)
        assert not any(MEAN_NOTE_START in n for n in report.notes)


def mean_model(dtype: int, include_self: bool, opset: int = 18, rows: int = 4) -> onnx.ModelProto:
    """dynamo's form of ``x.scatter_reduce(0, idx, src, "mean", include_self)``: x [rows, 2],
    idx/src [5, 2]."""
    h = onnx.helper
    nodes = []
    written = {"reduction": "none"} if opset >= 16 else {}  # as dynamo writes it, where it may
    if include_self:
        nodes.append(h.make_node("ScatterElements", ["x", "idx", "src"], ["y"], axis=0,
                                 name="node_scatter_reduce", **written))
    else:
        zero = onnx.numpy_helper.from_array(
            np.zeros(1, onnx.helper.tensor_dtype_to_np_dtype(dtype)))
        nodes += [h.make_node("Shape", ["src"], ["shape"]),
                  h.make_node("ConstantOfShape", ["shape"], ["zeros"], value=zero),
                  h.make_node("ScatterElements", ["x", "idx", "zeros"], ["cleared"], axis=0,
                              **written),
                  h.make_node("ScatterElements", ["cleared", "idx", "src"], ["y"], axis=0,
                              name="node_scatter_reduce", **written)]
    graph = h.make_graph(nodes, "mean", [
        h.make_tensor_value_info("x", dtype, [rows, 2]),
        h.make_tensor_value_info("idx", onnx.TensorProto.INT64, [5, 2]),
        h.make_tensor_value_info("src", dtype, [5, 2])],
        [h.make_tensor_value_info("y", dtype, [rows, 2])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


MEAN_CASE = {  # row 0 gets 1, 2, 2 (and -3, -4 in column 1), row 1: 7, row 2 and 3: nothing
    "idx": np.array([[0, 0], [0, 0], [0, 2], [1, 0], [0, 1]], np.int64),
    "src": np.array([[1, -3], [2, -4], [2, 5], [7, 6], [-9, 8]]),
    "x": np.array([[5, 7], [9, -2], [4, 4], [-6, 3]]),
}


@pytest.mark.parametrize("include_self", [False, True])
@pytest.mark.parametrize("dtype,opset", [
    (onnx.TensorProto.FLOAT, 18), (onnx.TensorProto.INT64, 18), (onnx.TensorProto.INT32, 18),
    (onnx.TensorProto.FLOAT16, 18), (onnx.TensorProto.FLOAT, 13), (onnx.TensorProto.INT64, 13),
])
def test_the_mean_is_pytorchs(dtype, opset, include_self):
    """PyTorch (torch 2.13) on MEAN_CASE: include_self=False gives column 0 of row 0
    (-9+1+2+2)/4 = -1, column 1 (-3-4+6)/3 -> floor -1 for integers, -1/3 for floats; rows no
    update reaches keep x."""
    np_dtype = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    inputs = {k: v.astype(np_dtype) if k != "idx" else v for k, v in MEAN_CASE.items()}
    proto = mean_model(dtype, include_self, opset)
    repaired = sr.repair(proto, assume="scatter-reduce-mean" if include_self else None,
                         validate=True, inputs=inputs)
    session = ort.InferenceSession(repaired.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    [actual] = session.run(None, inputs)
    expected = scatter_mean(inputs["x"], inputs["idx"], inputs["src"], 0, include_self)
    if np.issubdtype(np_dtype, np.integer):
        np.testing.assert_array_equal(actual, expected)
        # floor(-4 / 4), floor(-1 / 3); with x: floor(1 / 5), floor(6 / 4)
        np.testing.assert_array_equal(actual[0], [0, 1] if include_self else [-1, -1])
    else:
        np.testing.assert_allclose(actual, expected, rtol=1e-3, atol=1e-3)
    np.testing.assert_array_equal(actual[3], inputs["x"][3])  # no update: kept


def test_integer_division_is_floor_as_pytorchs():
    x = np.zeros(3, np.int64)
    idx, src = np.array([0, 0, 0, 1, 1]), np.array([1, 2, 2, -3, -4])
    # torch: x.scatter_reduce(0, idx, src, "mean", include_self=False) = [1, -4, 0]
    np.testing.assert_array_equal(scatter_mean(x, idx, src, 0, False), [1, -4, 0])
    np.testing.assert_array_equal(scatter_mean(x, idx, src, 0, True), [1, -3, 0])


def test_renamed_only_the_graph_tells_the_mean():
    """Renamed, the include_self=True export is a plain scatter; the include_self=False one still
    has its clearing scatter, which says what it is."""
    model = ir.load(DATA / f"{NAME}.onnx")
    for node in model.graph:
        node.name = node.name.replace("scatter_reduce", "scatter")
    notes = accumulate_export_notes(model)
    assert [n.split("'")[1] for n in notes] == ["node_scatter_1"]
    assert CLEARED_MEAN_NOTE_START in notes[0]
    assert [n.node.split("'")[1] for n in RepairPass("scatter-reduce-mean")(model).rewritten] == [
        "node_scatter_1"]


def test_a_mean_whose_sums_cannot_be_lowered_is_left_with_the_reason():
    """bfloat16 at opset 11: no reducing scatter, and no lowering of one (Cast-13 needed)."""
    model = ir.serde.deserialize_model(mean_model(onnx.TensorProto.BFLOAT16, False, opset=11))
    before = ir.serde.serialize_model(model).SerializeToString()
    result = RepairPass()(model)
    assert not result.modified and not result.rewritten
    [skipped] = result.skipped
    assert "include_self=False" in skipped.detail and "bfloat16 needs opset >= 13" in skipped.detail
    assert ir.serde.serialize_model(model).SerializeToString() == before
