"""check --target T is READY or FIXABLE exactly when the verb that reaches T succeeds: lower --opset N
for opset-N, tensorrt --trt-version X for tensorrt-X, prepare --target T for the other registered
targets (no-scatter, the NPUs, ort-cpu, litert, mnn, openvino, tvm, with their op tables), run as a user
runs them (--no-validate: check's dry run does not validate either), on every shipped model and
every real export in tests/data. Where check's fix fixes dimensions first (``--fix-dim NAME=SIZE``), the
verb is run so (at the size check's dry run tried), and refuses the model without them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers.cli import invoke

ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted(ROOT.glob("models/*.onnx")) + sorted(ROOT.glob("tests/data/**/*.onnx"))
VERBS = {"opset-11": ["lower", "--opset", "11"], "opset-13": ["lower", "--opset", "13"],
         "opset-17": ["lower", "--opset", "17"], "tensorrt-8.6": ["tensorrt", "--trt-version", "8.6"],
         "tensorrt-10": ["tensorrt", "--trt-version", "10"],
         "no-scatter": ["prepare", "--target", "no-scatter"],
         **{t: ["prepare", "--target", t]
            for t in ("qnn", "rknn", "ort-cpu", "litert", "mnn", "openvino", "openvino-npu",
                      "tvm")}}
# The default run: every target on the shipped models, and on the exports the two that change them
# most (a move down to 13, TensorRT 8.6's lowering); the whole matrix is slow.
DEFAULT_TARGETS = ("opset-13", "tensorrt-8.6")
CASES = [pytest.param(model, target, id=f"{model.relative_to(ROOT)}-{target}",
                      marks=() if model.parent.name == "models" or target in DEFAULT_TARGETS
                      else pytest.mark.slow)
         for model in MODELS for target in VERBS]

def test_the_corpus_is_there():
    assert len([m for m in MODELS if m.parent.name == "models"]) >= 6
    assert len(MODELS) >= 40


@pytest.mark.parametrize("model, target", CASES)
def test_check_is_ready_or_fixable_exactly_when_the_verb_succeeds(model, target, tmp_path):
    checked = invoke("check", model, "--target", target, "--json")
    (report,) = json.loads(checked.stdout)["models"]
    verb = VERBS[target]
    dims = re.findall(r"--fix-dim (\S+)=SIZE", (report["dry_run"] or {}).get("command", ""))
    fixing = [arg for name in dims for arg in ("--fix-dim", f"{name}=2")]
    done = invoke(verb[0], model, *verb[1:], *fixing, "--no-validate", "-o", tmp_path / "out.onnx")
    succeeded = done.exit_code == 0
    if dims:  # (the dimensions are fixed because the verb refuses the model as it is)
        as_is = invoke(verb[0], model, *verb[1:], "--no-validate", "-o", tmp_path / "as_is.onnx")
        assert as_is.exit_code == 1 and all(f"--fix-dim {n}=SIZE" in as_is.stderr for n in dims)
    assert report["reachable"] is succeeded, (report["status"], report["dry_run"], done.stderr)
    assert (report["status"] in ("READY", "FIXABLE")) is succeeded or report["status"] == "INVALID"
    assert checked.exit_code == (0 if report["status"] == "READY" else 1)
    if not succeeded:  # the same reason, word for word
        assert done.stderr.splitlines()[-1] == f"scatter-rewrite: error: {report['dry_run']['error']}"
    else:
        assert report["fix"] in (None, " ".join([f"scatter-rewrite {' '.join(verb)}",
                                                 *(f"--fix-dim {n}=SIZE" for n in dims)]))
