"""One rule for every target: a deprecated Scatter at opset 11 or later (onnx.checker and
onnxruntime reject it) blocks the model as it is, and the target's verb upgrades it first, so
``check`` says FIXABLE with that verb on every target, and the verb then succeeds, validated. A
target that runs Scatter (OpenVINO, TVM) keeps it where the model is at opset 9/10."""

from __future__ import annotations

import json

import onnx
import pytest

import scatter_rewrite as sr
from scatter_rewrite.targets import target_names
from scatter_rewrite.testing import scatter_model
from tests.helpers.cli import invoke
from tests.helpers.models import op_types

TARGETS = [t for t in target_names() if not t.startswith("opset-")] + ["opset-11", "opset-13",
                                                                     "opset-17"]


@pytest.mark.parametrize("target", TARGETS)
def test_a_rejected_scatter_is_fixable_by_the_targets_verb_on_every_target(target, tmp_path):
    source = tmp_path / "m.onnx"
    onnx.save(scatter_model("Scatter", opset=13, data_shape=(4, 5), indices_shape=(2, 5), axis=0),
              source)
    checked = invoke("check", source, "--target", target, "--json")
    (report,) = json.loads(checked.stdout)["models"]
    assert report["status"] == "FIXABLE", report
    (row,) = report["findings"]
    assert row["blockers"] and row["fix"], row
    assert report["fix"] == report["dry_run"]["command"]


@pytest.mark.parametrize("target", ["openvino", "tvm"])
def test_openvino_and_tvm_upgrade_a_rejected_scatter_and_keep_an_accepted_one(target):
    rejected = scatter_model("Scatter", opset=13, data_shape=(4, 5), indices_shape=(2, 5), axis=0)
    assert op_types(sr.prepare(rejected, target=target)) == ["ScatterElements"]
    accepted = scatter_model("Scatter", opset=9, data_shape=(4, 5), indices_shape=(2, 5), axis=0)
    assert op_types(sr.prepare(accepted, target=target)) == ["Scatter"]
