"""dynamo's export of ``scatter_reduce(reduce="mean")`` (torch 2.13, opset 18): a plain
ScatterElements (reduction "none" written out; with include_self=False after a scatter of zeros)
named ``node_scatter_reduce*``, which loses the mean. Only the name tells it from ``scatter``, so no
verb rewrites it (``repair`` neither); every verb and ``check`` note it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort

from scatter_rewrite.readiness import check
from scatter_rewrite.export_patterns import MEAN_NOTE_START, accumulate_export_notes
from scatter_rewrite.passes.repair import RepairPass

DATA = Path(__file__).parent / "data" / "torch_repair"
NAME = "scatter_reduce_mean_dynamo18"


def test_the_export_is_plain_scatters_that_lose_the_mean():
    model = onnx.load(DATA / f"{NAME}.onnx")
    scatters = [n for n in model.graph.node if n.op_type == "ScatterElements"]
    assert [onnx.helper.get_attribute_value(a) for n in scatters for a in n.attribute
            if a.name == "reduction"] == [b"none"] * 3
    arrays = np.load(DATA / f"{NAME}.npz")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    actual = session.run(None, {k[3:]: arrays[k] for k in arrays.files if k.startswith("in_")})
    for got, output in zip(actual, ("out_y", "out_y_without_self")):
        assert not np.allclose(got, arrays[output], rtol=1e-5, atol=1e-5)


def test_each_mean_scatter_is_noted_and_left_alone():
    model = ir.load(DATA / f"{NAME}.onnx")
    notes = accumulate_export_notes(model)
    assert len(notes) == 2 and all(MEAN_NOTE_START in n for n in notes)
    assert {n.split("'")[1] for n in notes} == {"node_scatter_reduce", "node_scatter_reduce_1"}
    noted = [f for f in check(model, "opset-18") if any(MEAN_NOTE_START in n for n in f.notes)]
    assert len(noted) == 2 and not any(f.blocked for f in noted)
    result = RepairPass()(model)
    assert not result.modified and not result.skipped


def test_a_plain_scatter_of_the_same_form_is_not_noted():
    model = ir.load(DATA / f"{NAME}.onnx")
    for node in model.graph:
        node.name = node.name.replace("scatter_reduce", "scatter")
    assert accumulate_export_notes(model) == []
