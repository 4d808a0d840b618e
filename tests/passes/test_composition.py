"""Each verb's passes are declared once, in verbs.py: no pass twice in a verb's list, and running
a verb calls each of its passes once (no pass runs another inside itself). Moving the model's opset
is a step of its own (MoveOpsetPass), declared in the list of every verb that moves a model: no
other pass changes the model's opset."""

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


# The passes a verb's list may hold more than once, each with its own target: the upgrade's move
# to opset 11 and the target's move (lower: a model below 11 moves as `upgrade` moves it, then to
# the target; tensorrt: after the upgrade, before lowering TensorScatter, to the parser's cap).
MOVES = {"MoveOpsetPass"}


@pytest.mark.parametrize("verb, options", list(verb_passes()))
def test_no_pass_twice_in_a_verb(verb, options):
    leaves = Steps(*VERBS[verb].make_passes(**options)).leaves()
    kinds = collections.Counter(type(p).__name__ for p in leaves)
    assert leaves and all(count == 1 for kind, count in kinds.items() if kind not in MOVES), kinds
    assert len({id(p) for p in leaves}) == len(leaves)  # (no instance twice)


@pytest.mark.parametrize("verb", ["upgrade", "lower", "tensorrt", "repair"])
def test_the_verbs_that_move_a_model_declare_the_move(verb):
    for options in OPTIONS.get(verb, [{}]):
        leaves = Steps(*VERBS[verb].make_passes(**options)).leaves()
        assert "MoveOpsetPass" in {type(p).__name__ for p in leaves}, options


@pytest.mark.parametrize("verb, options", list(verb_passes()))
def test_only_the_move_changes_the_opset(verb, options, monkeypatch):
    """Every pass but MoveOpsetPass leaves the model's opsets as it found them (a model at opset 10
    with a deprecated Scatter: every verb that runs moves it)."""
    from scatter_rewrite.opset import scope_opsets

    changed = []
    original = ScatterPass.call

    def watched(self, model):
        before = scope_opsets(model)
        result = original(self, model)
        if scope_opsets(model) != before:
            changed.append(type(self).__name__)
        return result

    monkeypatch.setattr(ScatterPass, "call", watched)
    model = ir.serde.deserialize_model(scatter_model("Scatter", opset=10, data_shape=("n", 5),
                                                     indices_shape=(3, 5)))
    pipeline.run_passes(model, VERBS[verb].make_passes(**options))
    assert set(changed) <= MOVES, changed


@pytest.mark.parametrize("verb, options", list(verb_passes()))
def test_running_a_verb_calls_each_pass_once(tmp_path, monkeypatch, verb, options):
    calls = collections.Counter()
    original = ScatterPass.call

    def counted(self, model):
        calls[id(self)] += 1
        return original(self, model)

    monkeypatch.setattr(ScatterPass, "call", counted)
    # A deprecated Scatter at opset 10, with a dimension --fix-dim can name: every pass has work.
    # (openvino-npu, not qnn: QNN's table has no Shape, which a dynamic dimension keeps)
    model = ir.serde.deserialize_model(scatter_model("Scatter", opset=10, data_shape=("n", 5),
                                                     indices_shape=(3, 5)))
    passes = VERBS[verb].make_passes(**options)
    pipeline.run_passes(model, passes)
    assert calls and all(count == 1 for count in calls.values()), calls
    assert set(calls) <= {id(p) for p in Steps(*passes).leaves()}
