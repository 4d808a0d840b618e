"""``prepare --target T`` proves the written model in T's own runtime too (scatter_rewrite/targets/
runtimes.py, validate/in_runtime.py): the status names both engines, a form the runtime computes
wrongly fails with nothing written, ``--no-runtime-proof`` turns it off, ``check`` never runs it.
The runtimes run in the venvs tests/runtimes/setup_venvs.sh builds (skipped without them); the
rest stands a fake runner in for the runtime."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto

import scatter_rewrite
from scatter_rewrite.errors import OptionError, OptionTypeError, ValidationError
from scatter_rewrite.targets import runtimes
from scatter_rewrite.testing import scatter_model
from scatter_rewrite.validate import run_onnxruntime
from scatter_rewrite.verbs import prepare_passes
from tests.helpers.cli import invoke, save, tree
from tests.helpers.runtimes import require


def _float_max() -> onnx.ModelProto:
    """A float ScatterElements max: mnn and qnn write it scatter-free (sort form, float Less)."""
    return scatter_model("ScatterElements", data_shape=(4, 5), indices_shape=(6, 5),
                         reduction="max")


def _kv_write_opset_24() -> onnx.ModelProto:
    """A TensorScatter (opset 24): openvino's prepare writes it as the ScatterElements it runs."""
    return oh.make_model(oh.make_graph(
        [oh.make_node("TensorScatter", ["past", "update", "write_indices"], ["present"])], "kv",
        [oh.make_tensor_value_info("past", TensorProto.FLOAT, [2, 6, 3]),
         oh.make_tensor_value_info("update", TensorProto.FLOAT, [2, 2, 3]),
         oh.make_tensor_value_info("write_indices", TensorProto.INT64, [2])],
        [oh.make_tensor_value_info("present", TensorProto.FLOAT, [2, 6, 3])]),
        opset_imports=[oh.make_opsetid("", 24)])


def _deprecated_scatter_at_11() -> onnx.ModelProto:
    """A deprecated Scatter at opset 11: openvino's and tvm's prepare upgrades it."""
    return scatter_model("Scatter", opset=11, data_shape=(4, 5), indices_shape=(2, 5), axis=0)


@pytest.mark.parametrize("target, model, proof", [
    ("litert", _float_max, "onnxruntime"),  # (onnx2tf converts in about 20 s)
    ("mnn", _float_max, "onnxruntime"),
    ("openvino", _kv_write_opset_24, "onnxruntime"),
    # (onnxruntime does not load the original: proven in onnx.reference, then in the runtime)
    ("openvino", _deprecated_scatter_at_11, "onnx.reference"),
    ("tvm", _deprecated_scatter_at_11, "onnx.reference"),
])
def test_prepare_names_the_targets_runtime_in_its_passed_line(target, model, proof, tmp_path,
                                                              monkeypatch):
    python = require(target).python
    save(model(), tmp_path / "m.onnx")
    # (paths relative to the working folder, as users give them: the runner runs in another)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out.onnx"
    done = invoke("prepare", "m.onnx", "--target", target, "--runtime-python", python, "-o",
                  "out.onnx")
    assert done.exit_code == 0, done.output
    name = {"litert": "LiteRT", "mnn": "MNN", "openvino": "OpenVINO", "tvm": "TVM"}[target]
    assert re.search(rf"^PASSED in {re.escape(proof)} and {name} \d+\.\d+", done.output, re.M)
    assert f"{name} " in done.output and "runs the written model too" in done.output
    assert out.exists()


def test_a_form_mnn_computes_wrongly_fails_naming_the_output_and_mnn(tmp_path):
    # qnn's form of a float max (its IsNaN as Equal(x, x), its float Less kept): right in
    # onnxruntime, wrong in MNN 3.6.1, whose float Less is wrong where both operands are negative
    python = require("mnn").python
    source, out = save(_float_max(), tmp_path / "m.onnx"), tmp_path / "out.onnx"
    before = tree(tmp_path)
    with pytest.raises(ValidationError) as failed:
        scatter_rewrite.rewrite(str(source), prepare_passes("qnn"), verb="prepare",
                                options={"target": "mnn", "runtime_proof": True,
                                         "runtime_python": str(python)}, output=str(out))
    said = str(failed.value)
    assert "nothing written" in said and re.search(r"MNN \d", said) and "output 'output'" in said
    assert tree(tmp_path) == before


class _FakeRuntime:
    """Stands in for a runtime's runner as if the runtime were importable here: records each call,
    answers onnxruntime's outputs of the model given (changed by ``change``, if given)."""

    def __init__(self, monkeypatch, change=None):
        self.calls, self.change = [], change
        monkeypatch.setattr(runtimes.Runtime, "python", lambda runtime, given=None: sys.executable)
        monkeypatch.setattr(runtimes, "run", self.run)

    def run(self, runtime, model, inputs, python, workdir, options=()):
        self.calls.append(runtime.name)
        outputs = run_onnxruntime(str(model), inputs)
        if self.change is not None:
            outputs = [self.change(o) for o in outputs]
        return runtimes.Ran(outputs, f"{runtime.name} 0.0-fake")


def test_a_runtime_that_differs_fails_the_cli_with_exit_1_and_nothing_written(monkeypatch,
                                                                             tmp_path):
    fake = _FakeRuntime(monkeypatch, change=lambda o: o + np.float32(1))
    source, out = save(_float_max(), tmp_path / "m.onnx"), tmp_path / "out.onnx"
    before = tree(tmp_path)
    done = invoke("prepare", source, "--target", "mnn", "-o", out)
    assert done.exit_code == 1 and fake.calls == ["MNN"]
    assert "MNN 0.0-fake computes the prepared model otherwise" in done.output
    assert "output 'output'" in done.output and "--no-runtime-proof" in done.output
    assert tree(tmp_path) == before


def test_the_status_names_both_engines_where_the_runtime_agrees(monkeypatch, tmp_path):
    fake = _FakeRuntime(monkeypatch)
    _, outcome = scatter_rewrite.prepare(_float_max(), target="mnn", return_report=True)
    assert fake.calls == ["MNN"]
    assert outcome.status == "PASSED"
    assert outcome.validation["proven_in"] == "onnxruntime and MNN 0.0-fake"


@pytest.mark.skipif(importlib.util.find_spec("MNN") is not None, reason="MNN is importable here")
def test_without_the_runtime_the_status_says_onnxruntime_only(tmp_path):
    source, out = save(_float_max(), tmp_path / "m.onnx"), tmp_path / "out.onnx"
    done = invoke("prepare", source, "--target", "mnn", "-o", out)
    assert done.exit_code == 0, done.output
    assert re.search(r"^PASSED in onnxruntime, ", done.output, re.M)
    assert "not run in MNN: its package 'MNN' is not importable here" in done.output


def test_litert_runs_only_in_the_venv_named():
    litert = scatter_rewrite.targets.get_target("litert").runner
    assert litert.python() is None and litert.python("/venv/bin/python") == "/venv/bin/python"


def test_the_off_switch_runs_no_runtime(monkeypatch, tmp_path):
    fake = _FakeRuntime(monkeypatch, change=lambda o: o + np.float32(1))
    _, outcome = scatter_rewrite.prepare(_float_max(), target="mnn", runtime_proof=False,
                                         return_report=True)
    assert outcome.validation["proven_in"] == "onnxruntime"
    source, out = save(_float_max(), tmp_path / "m.onnx"), tmp_path / "out.onnx"
    done = invoke("prepare", source, "--target", "mnn", "--no-runtime-proof", "-o", out)
    assert done.exit_code == 0, done.output
    assert re.search(r"^PASSED in onnxruntime, ", done.output, re.M)
    assert fake.calls == [] and out.exists()


def test_check_is_a_dry_run_that_runs_no_runtime(monkeypatch, tmp_path):
    fake = _FakeRuntime(monkeypatch, change=lambda o: o + np.float32(1))
    done = invoke("check", save(_float_max(), tmp_path / "m.onnx"), "--target", "mnn")
    assert "FIXABLE" in done.output and fake.calls == []


def test_runtime_python_is_checked_before_any_work(tmp_path):
    model = _float_max()
    with pytest.raises(OptionError, match="does not apply to target='qnn'"):
        scatter_rewrite.prepare(model, target="qnn", runtime_python=sys.executable)
    with pytest.raises(OptionError, match="not an executable file"):
        scatter_rewrite.prepare(model, target="mnn", runtime_python=str(tmp_path / "python"))
    with pytest.raises(OptionError, match="runtime_proof=False turns off"):
        scatter_rewrite.prepare(model, target="mnn", runtime_proof=False,
                                runtime_python=sys.executable)
    with pytest.raises(OptionTypeError, match="runtime_proof must be a bool"):
        scatter_rewrite.prepare(model, target="mnn", runtime_proof="no")
