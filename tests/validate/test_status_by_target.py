"""A status is judged for the runtime the model is written for: a model prepared for a runtime other
than onnxruntime (TensorRT, OpenVINO, a runtime at opset N) that onnxruntime's CPU provider cannot
run is PASSED in the engine that proved it (onnx.reference with our kernels), exit 0, with
onnxruntime's missing kernels as a note; where onnxruntime is the runtime (ort-cpu) or none is named
(to-scatternd), it stays UNRUNNABLE."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

import scatter_rewrite as sr
from scatter_rewrite.pipeline import PASSED, UNRUNNABLE
from scatter_rewrite.testing import scatter_model
from scatter_rewrite.validate import run_reference
from tests.helpers.cli import invoke
from tests.helpers.exports import load_export

TRT = Path(__file__).parents[1] / "data" / "torch_trt"
VOXEL = "voxel_centroid_fp16_dynamo18"  # float16 ScatterND add: no onnxruntime kernel


@pytest.mark.parametrize("version", ["10", "11"])
def test_the_float16_voxel_export_prepared_for_tensorrt_passes_in_onnx_reference_with_the_note(
        version, tmp_path):
    written, report = tmp_path / "out.onnx", tmp_path / "r.json"
    result = invoke("tensorrt", TRT / f"{VOXEL}.onnx", "--trt-version", version, "-o", written,
                    "--report", report)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1].startswith("PASSED in onnx.reference, ")
    assert (f"onnxruntime cannot run the written model (ScatterElements 'node_ScatterND_16_ScatterElements' "
            f"(opset 18, main graph): no float16 reduction='add' in its CPU kernel") in result.stdout
    assert f"it is written for NVIDIA TensorRT {version}" in result.stdout
    (entry,) = json.loads(report.read_text())["models"]
    assert entry["status"] == PASSED and entry["validation"]["proven_in"] == "onnx.reference"
    assert entry["validation"]["onnxruntime_cannot_run"]  # (the note's reason, in the report)
    model, inputs, expected = load_export(TRT, VOXEL)
    # the plugin form: float16 ScatterElements add, which TensorRT's plugin takes
    nodes = [n for n in onnx.load(written).graph.node if n.op_type.startswith("Scatter")]
    assert [(n.op_type, onnx.helper.get_attribute_value(n.attribute[-1])) for n in nodes] \
        == [("ScatterElements", b"add")] * 2
    (got,) = run_reference(written, inputs)
    np.testing.assert_allclose(got.astype(np.float32), expected["centroids"].astype(np.float32),
                               rtol=1e-2, atol=1e-2)


def test_the_api_returns_passed_for_tensorrt_and_keeps_the_note():
    model, _, _ = load_export(TRT, VOXEL)
    _, outcome = sr.prepare_for_tensorrt(model, trt_version="10", return_report=True)
    assert outcome.status == PASSED and outcome.error is None
    assert "scatter_rewrite.lower(model, opset=13) writes a form it runs" in \
        outcome.validation["onnxruntime_note"]


def _float16_constant_add() -> onnx.ModelProto:
    model = scatter_model(reduction="add", data_type=TensorProto.FLOAT16, opset=18)
    data = onnx.numpy_helper.from_array(np.ones((4, 5), np.float16), "data")
    model.graph.initializer.append(data)
    del model.graph.input[0]
    return model


def test_lower_to_opset_17_passes_where_check_says_fixable(tmp_path):
    source = tmp_path / "m.onnx"
    onnx.save(_float16_constant_add(), source)
    checked = invoke("check", source, "--target", "opset-17", "--json")
    (report,) = json.loads(checked.stdout)["models"]
    assert report["status"] == "FIXABLE"
    done = invoke("lower", source, "--opset", "17", "-o", tmp_path / "out.onnx")
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines()[-1].startswith("PASSED in onnx.reference, ")
    assert "it is written for a runtime at default-domain opset 17" in done.stdout


def test_where_onnxruntime_is_the_runtime_it_stays_unrunnable(tmp_path):
    source = tmp_path / "m.onnx"
    onnx.save(scatter_model(reduction="max", data_type=TensorProto.FLOAT16), source)
    done = invoke("to-scatternd", source, "-o", tmp_path / "out.onnx")  # (no runtime named)
    assert done.exit_code == 1, done.output
    assert done.stdout.splitlines()[-1].startswith(f"{UNRUNNABLE} in ")


@pytest.mark.parametrize("verb, options, onnxruntime", [
    ("prepare", {"target": "ort-cpu"}, True), ("prepare", {"target": "openvino"}, False),
    ("tensorrt", {"trt_version": "8.6"}, False), ("lower", {"opset": 13, "mode": "standard"}, False)])
def test_the_target_a_run_writes_for_says_whether_onnxruntime_is_its_runtime(verb, options, onnxruntime):
    from scatter_rewrite.pipeline import _target

    assert _target(verb, options).onnxruntime is onnxruntime
    assert _target("lower", {"opset": 13, "mode": "custom"}) is None  # (onnxruntime, custom ops)
    assert _target("to_scatternd", {}) is None
