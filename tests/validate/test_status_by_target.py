"""A status is judged for the runtime the model is written for: a model prepared for a runtime other
than onnxruntime (TensorRT, OpenVINO, a runtime at opset N) that onnxruntime's CPU provider cannot
run is PASSED in the engine that proved it (onnx.reference with our kernels), exit 0, with
onnxruntime's missing kernels as a note; where onnxruntime is the runtime (ort-cpu) or none is named
(to-scatternd), it stays UNRUNNABLE."""

from __future__ import annotations

import json
import os
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
    assert ("onnxruntime cannot run the written model (ScatterElements 'node_ScatterND_16_ScatterElements' "
            "(opset 18, main graph): no float16 reduction='add' in its CPU kernel") in result.stdout
    assert f"it is written for NVIDIA TensorRT {version}" in result.stdout
    (entry,) = json.loads(report.read_text())["models"]
    assert entry["status"] == PASSED and entry["validation"]["proven_in"] == "onnx.reference"
    assert entry["validation"]["onnxruntime_cannot_run"]  # (the note's reason, in the report)
    # what writes a form onnxruntime runs, as the command line says it
    assert entry["validation"]["to_run_it"] == "scatter-rewrite lower --opset 13"
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
    assert outcome.validation["to_run_it"] == "scatter_rewrite.lower(model, opset=13)"


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
    from scatter_rewrite.pipeline import meant_for_onnxruntime

    assert meant_for_onnxruntime(verb, options) is onnxruntime
    assert meant_for_onnxruntime("lower", {"opset": 13, "mode": "custom"})  # (custom ops)
    assert meant_for_onnxruntime("to_scatternd", {})


# Every target a model can be prepared for; whether its runtime is onnxruntime is the target's
# declared fact (Target.onnxruntime), read by the pipeline for the CLI, the API and check alike.
PREPARED_FOR = ["ort-cpu", "no-scatter", "qnn", "rknn", "mnn", "litert", "openvino", "tvm",
                "tensorrt-8.6", "tensorrt-10", "tensorrt-11", "opset-13", "opset-17"]


@pytest.fixture
def onnxruntime_lacks_a_kernel_for_what_is_written(monkeypatch):
    """onnxruntime made to lack a kernel for every model but the original (``ORIGINAL``): the
    kernel-less result each target might write, without depending on which one it does."""
    from scatter_rewrite.validate import engines

    real_run, real_lacks = engines.run_onnxruntime, engines.kernels_onnxruntime_lacks

    def original(model) -> bool:  # (a file by its name; a model validated in memory by its own)
        if isinstance(model, (str, os.PathLike)):
            return Path(model).name in (ORIGINAL, "unchanged.onnx")
        return str(model) != "the rewritten model"

    def run(model, inputs, threads=0):
        if not original(model):
            raise RuntimeError("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an "
                               "implementation for Faked(1) node with name 'faked'")
        return real_run(model, inputs, threads)

    def lacks(model):
        if original(model):
            return real_lacks(model)
        return [engines.Lack("Faked 'faked' (a kernel taken away)")]

    monkeypatch.setattr(engines, "run_onnxruntime", run)
    monkeypatch.setattr(engines, "kernels_onnxruntime_lacks", lacks)


ORIGINAL = "fp16_add.onnx"


@pytest.mark.parametrize("target", PREPARED_FOR)
def test_a_kernel_less_result_is_unrunnable_only_where_the_targets_runtime_is_onnxruntime(
        target, tmp_path, onnxruntime_lacks_a_kernel_for_what_is_written):
    from scatter_rewrite.targets import targets

    source = tmp_path / ORIGINAL
    onnx.save(scatter_model(reduction="add", data_type=TensorProto.FLOAT16), source)
    written, unvalidated = tmp_path / "out.onnx", tmp_path / "unvalidated.onnx"
    done = invoke("prepare", source, "--target", target, "-o", written)
    status = done.stdout.splitlines()[-1].split(" ")[0]
    if status == "UNCHANGED":  # (a target that runs the node as it is: nothing new to judge)
        assert done.exit_code == 0 and target in ("openvino", "tvm", "tensorrt-10", "tensorrt-11")
        return
    if targets()[target].onnxruntime:
        assert status == UNRUNNABLE and done.exit_code == 1, done.output
        assert "Faked 'faked' (a kernel taken away)" in done.stderr
    else:
        assert done.stdout.splitlines()[-1].startswith("PASSED in onnx.reference, "), done.output
        assert done.exit_code == 0 and "onnxruntime cannot run the written model (Faked" in done.stdout
    # the API says the same, and validation decides no byte of what is written
    _, outcome = sr.prepare(onnx.load(source), target=target, return_report=True)
    assert outcome.status == status
    assert invoke("prepare", source, "--target", target, "--no-validate", "-o",
                  unvalidated).exit_code == 0
    assert unvalidated.read_bytes() == written.read_bytes()
    # and check's dry run of the same passes agrees with the validated run, the default
    (report,) = json.loads(invoke("check", source, "--target", target, "--json").stdout)["models"]
    assert report["reachable"] is (done.exit_code == 0)
    if done.exit_code:
        assert report["status"] == "BLOCKED"
        assert report["dry_run"]["error"].startswith(
            "onnxruntime cannot run the model it writes (Faked 'faked' (a kernel taken away)), "
            "which is meant for onnxruntime; no scatter-rewrite command writes a form it runs")


@pytest.mark.parametrize("version", ["10", "11"])
def test_the_api_and_an_unvalidated_run_agree_on_the_float16_voxel_export(version, tmp_path):
    model, inputs, expected = load_export(TRT, VOXEL)
    prepared, outcome = sr.prepare(model, target=f"tensorrt-{version}", return_report=True)
    assert outcome.status == PASSED and outcome.validation["proven_in"] == "onnx.reference"
    unvalidated = sr.prepare_for_tensorrt(model, trt_version=version, validate=False)
    assert unvalidated.SerializeToString() == prepared.SerializeToString()
    (got,) = run_reference(prepared, inputs)
    np.testing.assert_allclose(got.astype(np.float32), expected["centroids"].astype(np.float32),
                               rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("verb, meant_for_onnxruntime", [
    (["to-scatternd"], True), (["lower", "--opset", "13", "--mode", "custom"], True),
    (["lower", "--opset", "13"], False)], ids=["to-scatternd", "lower-custom", "lower-standard"])
def test_a_verb_for_no_runtime_in_particular_keeps_unrunnable(
        verb, meant_for_onnxruntime, tmp_path, onnxruntime_lacks_a_kernel_for_what_is_written):
    source = tmp_path / ORIGINAL
    onnx.save(scatter_model(reduction="max", data_type=TensorProto.FLOAT16), source)
    done = invoke(*verb, source, "-o", tmp_path / "out.onnx")
    assert (tmp_path / "out.onnx").exists()  # (correct, so written either way)
    if meant_for_onnxruntime:
        assert done.exit_code == 1 and done.stdout.splitlines()[-1].startswith(f"{UNRUNNABLE} in ")
    else:
        assert done.exit_code == 0 and done.stdout.splitlines()[-1].startswith(
            "PASSED in onnx.reference, "), done.output
