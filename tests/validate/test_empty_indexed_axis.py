"""Indices that are not empty into an axis of size 0 (onnxruntime's ScatterND case "nonempty
indices reject indexed zero dimension"): no index is in range, so the original runs on no input.
Input generation says so in one line, on every verb, instead of failing inside NumPy."""

from __future__ import annotations

import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto

import scatter_rewrite as sr
from tests.helpers.cli import invoke, save

F, I = TensorProto.FLOAT, TensorProto.INT64


def into_empty_axis(op: str) -> onnx.ModelProto:
    """``op`` scattering one update row into data of shape [0, 3]."""
    index_shape = [1, 1] if op == "ScatterND" else [1, 3]
    attributes = {} if op == "ScatterND" else {"axis": 0}
    graph = oh.make_graph(
        [oh.make_node(op, ["data", "indices", "updates"], ["out"], **attributes)], "empty_axis",
        [oh.make_tensor_value_info("data", F, [0, 3]),
         oh.make_tensor_value_info("indices", I, index_shape),
         oh.make_tensor_value_info("updates", F, [1, 3])],
        [oh.make_tensor_value_info("out", F, [0, 3])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 16)])


@pytest.mark.parametrize("op", ["ScatterND", "ScatterElements"])
def test_the_api_refuses_with_the_reason(op):
    with pytest.raises(sr.ValidationError, match="runs on no input: indices that are not empty "
                       r"address data dims of sizes \[0\]") as caught:
        sr.lower(into_empty_axis(op), opset=13)
    assert "validate=False" in str(caught.value)


@pytest.mark.parametrize("verb", [("lower", "--opset", "13"), ("to-scatternd",), ("tensorrt",)])
def test_every_verb_refuses_in_one_line(tmp_path, verb):
    source = save(into_empty_axis("ScatterElements"), tmp_path / "empty_axis.onnx")
    out = tmp_path / "out.onnx"
    result = invoke(verb[0], source, *verb[1:], "-o", out)
    assert result.exit_code == 1 and not out.exists()
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "runs on no input" in lines[0], result.stderr
    assert "--no-validate" in lines[0] and "Traceback" not in result.output
