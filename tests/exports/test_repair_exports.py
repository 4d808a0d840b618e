"""The committed TorchScript exports of accumulating scatters (tests/data/torch_repair/make.py):
each holds the exporter's chain (zeros -> Scatter/ScatterElements/ScatterND without reduction ->
Add), onnxruntime on it differs from PyTorch where indices repeat, and after ``repair`` it gives
PyTorch's outputs (float32, within rtol = atol = 1e-5: the sums may be added in another order)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from scatter_rewrite.validate import run_reference
from scatter_rewrite.verbs import VERBS
from tests.helpers.runs import ort_run
from tests.helpers.exports import load_export

DATA = Path(__file__).parents[1] / "data" / "torch_repair"
EXPORTS = {  # name: the scatter op the exporter emitted
    "scatter_add_ts9": "Scatter",
    "scatter_add_ts11": "ScatterElements",
    "scatter_add_ts13": "ScatterElements",
    "index_add_ts13": "ScatterElements",
    "index_put_acc_ts11": "ScatterND",
    "index_put_acc_ts17": "ScatterND",
    "gnn_sum_ts13": "ScatterElements",
    "bev_pool_ts17": "ScatterND",
    "degree_count_ts13": "ScatterElements",  # int64, dynamic shapes
}
RTOL = ATOL = 1e-5


@pytest.mark.parametrize("name", EXPORTS)
def test_export_holds_the_accumulating_chain(name):
    model, _, _ = load_export(DATA, name)
    nodes = {n.output[0]: n for n in model.graph.node}
    scatter = next(n for n in model.graph.node if n.op_type == EXPORTS[name])
    assert all(a.name != "reduction" for a in scatter.attribute)
    assert nodes[scatter.input[0]].op_type in ("Constant", "ConstantOfShape")
    users = [n for n in model.graph.node if scatter.output[0] in n.input]
    assert [n.op_type for n in users] == ["Add"]


@pytest.mark.parametrize("name", EXPORTS)
def test_onnxruntime_on_the_export_differs_from_pytorch(name):
    model, inputs, pytorchs = load_export(DATA, name)
    if name == "scatter_add_ts9":  # onnxruntime rejects the deprecated Scatter: the evaluator can
        actual = run_reference(DATA / f"{name}.onnx", inputs)[0]
    else:
        actual = ort_run(model, inputs)[0]
    assert not np.allclose(actual, pytorchs["y"], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", EXPORTS)
def test_after_repair_onnxruntime_gives_pytorchs_outputs(name):
    model, inputs, pytorchs = load_export(DATA, name)
    working = ir.serde.deserialize_model(model)
    (steps,) = VERBS["repair"].make_passes()  # (an upgrade first below opset 11)
    result = steps(working)
    assert len([n for n in result.rewritten if "reduction='add'" in n.detail]) == 1
    assert not result.skipped
    repaired = ir.serde.serialize_model(working)
    onnx.checker.check_model(repaired, full_check=True)
    np.testing.assert_allclose(ort_run(repaired, inputs)[0], pytorchs["y"], rtol=RTOL, atol=ATOL)
