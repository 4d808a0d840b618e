"""ScatterND's index-tuple length (the last dimension of its indices) where shape inference does
not know it: derived from how torch builds ``index_put_((ys, xs), ...)``'s tuple (each vector
unsqueezed on the last axis, then concatenated there; ``stack`` is the same), so that an
accumulating ScatterND below opset 16 lowers exactly (``repair`` alone, or ``repair`` then
``lower``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import scatter_rewrite as sr
from scatter_rewrite.passes.lowering.segment_reduce import index_tuple_length
from tests.helpers.runs import ort_run
from tests.helpers.exports import export_arrays

DATA = Path(__file__).parents[1] / "data" / "torch_repair"


def tuple_model(pieces: str, opset: int = 13) -> ir.Model:
    """indices built from ys and xs (rank unknown: no shapes declared) as ``pieces`` says."""
    h = onnx.helper
    axes = [h.make_node("Constant", [], ["last"], value_ints=[-1])]
    nodes = {
        "concat": [h.make_node("Unsqueeze", ["ys", "last"], ["uy"]),
                   h.make_node("Unsqueeze", ["xs", "last"], ["ux"]),
                   h.make_node("Concat", ["uy", "ux"], ["idx"], axis=-1)],
        "concat-cast": [h.make_node("Unsqueeze", ["ys", "last"], ["uy"]),
                        h.make_node("Unsqueeze", ["xs", "last"], ["ux"]),
                        h.make_node("Concat", ["uy", "ux", "ux"], ["c"], axis=-1),
                        h.make_node("Cast", ["c"], ["idx"], to=onnx.TensorProto.INT64)],
        "concat-first-axis": [h.make_node("Concat", ["ys", "xs"], ["idx"], axis=0)],
        "unknown": [h.make_node("Identity", ["ys"], ["idx"])],
    }[pieces]
    graph = h.make_graph(axes + nodes + [h.make_node("Identity", ["idx"], ["out"])], "tuple", [
        h.make_tensor_value_info("ys", onnx.TensorProto.INT64, None),
        h.make_tensor_value_info("xs", onnx.TensorProto.INT64, None)],
        [h.make_tensor_value_info("out", onnx.TensorProto.INT64, None)])
    return ir.serde.deserialize_model(
        h.make_model(graph, opset_imports=[h.make_opsetid("", opset)]))


@pytest.mark.parametrize("pieces,length", [
    ("concat", 2), ("concat-cast", 3), ("concat-first-axis", None), ("unknown", None)])
def test_the_tuple_length_is_derived_from_the_graph(pieces, length):
    model = tuple_model(pieces)
    idx = next(v for n in model.graph for v in n.outputs if v.name == "idx")
    assert index_tuple_length(idx) == length


@pytest.mark.parametrize("opset", [11, 13])
def test_repair_lowers_the_2d_index_put_below_opset_16(opset):
    name = f"bev_index_put_ts{opset}"
    inputs, pytorchs = export_arrays(DATA, name)
    repaired, report = sr.repair(onnx.load(DATA / f"{name}.onnx"), validate=True,
                                 return_report=True)
    assert "lowered to" in str(report.passes[0]["rewritten"][0])
    assert not any(n.op_type == "ScatterND" and any(a.name == "reduction" for a in n.attribute)
                   for n in repaired.graph.node)
    np.testing.assert_allclose(ort_run(repaired, inputs)[0], pytorchs["y"], rtol=1e-5, atol=1e-5)


def test_repair_then_lower_moves_the_2d_index_put_to_opset_13():
    inputs, pytorchs = export_arrays(DATA, "bev_index_put_ts16")
    repaired = sr.repair(onnx.load(DATA / "bev_index_put_ts16.onnx"), validate=True)
    lowered, report = sr.lower(repaired, opset=13, validate=True, return_report=True)
    assert report.passes[0]["rewritten"] and not report.passes[0]["skipped"]
    assert lowered.opset_import[0].version == 13
    np.testing.assert_allclose(ort_run(lowered, inputs)[0], pytorchs["y"], rtol=1e-5, atol=1e-5)
