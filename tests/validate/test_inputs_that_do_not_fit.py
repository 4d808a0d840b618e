"""When the original fails on the generated inputs: other seeds are drawn first, and where it
still cannot run, the message says the generated inputs do not fit and asks for the user's."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto

import scatter_rewrite as sr
from scatter_rewrite.model_io import deserialize
from scatter_rewrite.validate import inputs as generation
from scatter_rewrite.validate.inputs import plan_validation
from scatter_rewrite.validate.trial import OriginalSession
from tests.helpers.cli import invoke, save

F, I = TensorProto.FLOAT, TensorProto.INT64


def cumulative(dim: str | int = "n") -> onnx.ModelProto:
    """A CumSum along a graph-input axis, of data with a symbolic dim (so the original is tried)."""
    graph = oh.make_graph(
        [oh.make_node("CumSum", ["x", "axis"], ["y"])], "cumulative",
        [oh.make_tensor_value_info("x", F, [dim, 3]), oh.make_tensor_value_info("axis", I, [])],
        [oh.make_tensor_value_info("y", F, [dim, 3])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 14)])


def test_a_draw_the_original_fails_on_is_drawn_again_with_another_seed(monkeypatch):
    calls = []
    runs = OriginalSession.failure

    def fails_first(self, inputs):  # (the first draw refused, as a value out of range would be)
        calls.append(inputs)
        return "refused on purpose" if len(calls) == 1 else runs(self, inputs)

    monkeypatch.setattr(OriginalSession, "failure", fails_first)
    plan = plan_validation(deserialize(cumulative()))
    assert len(calls) == 2
    assert "the original runs with n=4 with values of seed 1, not with n=4 (refused on purpose)" \
        in plan.notes
    monkeypatch.setattr(OriginalSession, "failure", runs)
    again = plan_validation(deserialize(cumulative()), seed=1)
    assert all(np.array_equal(plan.inputs[k], again.inputs[k]) for k in plan.inputs)


def test_every_draw_failing_asks_for_the_users_inputs(monkeypatch, tmp_path):
    monkeypatch.setattr(OriginalSession, "failure", lambda self, inputs: "refused on purpose")
    monkeypatch.setattr(generation, "runs_in_reference", lambda model, inputs: "refused too")
    with pytest.raises(sr.ValidationError) as caught:
        plan_validation(deserialize(cumulative()))
    message = str(caught.value)
    assert "with values of seed 1" in message and "with values of seed 2" in message
    assert "pass inputs it runs on with inputs=" in message
    result = invoke("lower", save(cumulative(), tmp_path / "c.onnx"), "--opset", "13",
                    "-o", tmp_path / "out.onnx")
    assert result.exit_code == 1 and "pass inputs it runs on with --inputs" in result.stderr


def unpooled() -> onnx.ModelProto:
    """A MaxUnpool whose indices are a graph input: random ones leave the output's range."""
    graph = oh.make_graph(
        [oh.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
        "unpooled",
        [oh.make_tensor_value_info("x", F, [1, 1, 2, 2]), oh.make_tensor_value_info("i", I, [1, 1, 2, 2])],
        [oh.make_tensor_value_info("y", F, [1, 1, 4, 4])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 11)])


def test_the_proof_on_generated_inputs_the_original_fails_on_asks_for_inputs(tmp_path):
    model = unpooled()
    with pytest.raises(sr.ValidationError, match="the generated inputs do not fit it: pass inputs "
                       "it runs on with inputs=, or use validate=False to skip the proof"):
        sr.upgrade(model, opset=13)
    result = invoke("upgrade", save(model, tmp_path / "u.onnx"), "--opset", "13",
                    "-o", tmp_path / "out.onnx")
    assert result.exit_code == 1
    assert "pass inputs it runs on with --inputs, or use --no-validate" in result.stderr
    given = {"x": np.ones((1, 1, 2, 2), np.float32),
             "i": np.array([0, 3, 9, 15], np.int64).reshape(1, 1, 2, 2)}
    sr.upgrade(model, opset=13, inputs=given)  # (the user's inputs fit: the proof passes)
