"""Each verb's passes are declared once, in verbs.py: no pass twice in a verb's list, and running
a verb calls each of its passes once (no pass runs another inside itself)."""

from __future__ import annotations

import collections

import onnx_ir as ir
import pytest

from scatter_rewrite import pipeline
from scatter_rewrite.passes.base import ScatterPass
from scatter_rewrite.passes.compose import Steps
from scatter_rewrite.testing import scatter_model
from scatter_rewrite.verbs import VERBS

OPTIONS = {"tensorrt": [{"trt_version": v, "fix_dims": {"n": 4}} for v in ("8.6", "10", "11")],
           "lower": [{"opset": 13}, {"opset": 17, "mode": "custom"}],
           "prepare": [{"target": t} for t in ("no-scatter", "ort-cpu", "openvino-npu", "tensorrt-8.6",
                                               "opset-13")]}


def verb_passes():
    for name, verb in VERBS.items():
        for options in OPTIONS.get(name, [{}]):
            yield pytest.param(name, options, id=f"{name}-{options}")


@pytest.mark.parametrize("verb, options", list(verb_passes()))
def test_no_pass_twice_in_a_verb(verb, options):
    leaves = Steps(*VERBS[verb].make_passes(**options)).leaves()
    kinds = collections.Counter(type(p).__name__ for p in leaves)
    assert leaves and all(count == 1 for count in kinds.values()), kinds


@pytest.mark.parametrize("verb, options", list(verb_passes()))
def test_running_a_verb_calls_each_pass_once(tmp_path, monkeypatch, verb, options):
    calls = collections.Counter()
    original = ScatterPass.call

    def counted(self, model):
        calls[type(self).__name__] += 1
        return original(self, model)

    monkeypatch.setattr(ScatterPass, "call", counted)
    # A deprecated Scatter at opset 10, with a dimension --fix-dim can name: every pass has work.
    # (openvino-npu, not qnn: QNN's table has no Shape, which a dynamic dimension keeps)
    model = ir.serde.deserialize_model(scatter_model("Scatter", opset=10, data_shape=("n", 5),
                                                     indices_shape=(3, 5)))
    passes = VERBS[verb].make_passes(**options)
    pipeline.run_passes(model, passes)
    assert calls and all(count == 1 for count in calls.values()), calls
    assert set(calls) <= {type(p).__name__ for p in Steps(*passes).leaves()}
