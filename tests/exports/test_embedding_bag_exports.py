"""Dynamo's exports of ``torch.nn.EmbeddingBag`` (tests/data/torch/make_embedding_bag.py: sum with
per-sample weights, max, mean with an empty bag; opsets 18 and 20) moved down. Their Loop body
declares no type: its carried inputs are typed by inference from the Loop's inputs, so the body's
CastLike and Reshape move as the main graph's do. The Loop builds a sequence of rows, which Loop-11
does not carry: at opset 11 it is the Loop's scan output (scatter_rewrite/opset/sequence_carries.py).
The mean export crashes onnxruntime's constant folding (scatter_rewrite/ort_folding.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import scatter_rewrite
from scatter_rewrite.validate import run_onnxruntime
from tests.helpers.cli import invoke
from tests.helpers.exports import export_arrays

DATA = Path(__file__).parents[1] / "data" / "torch"
EXPORTS = [f"embedding_bag_{mode}_dynamo{opset}" for mode in ("sum", "max")
           for opset in (18, 20)] + ["embedding_bag_mean_dynamo18"]


def _assert_pytorchs(path, name):
    feeds, pytorchs = export_arrays(DATA, name)
    got = run_onnxruntime(str(path), feeds)[0]
    if "_max_" in name:  # a max: bit for bit
        np.testing.assert_array_equal(got, pytorchs["y"])
    else:  # float sums and a mean: a different order of additions
        np.testing.assert_allclose(got, pytorchs["y"], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("opset", [13, 11])
@pytest.mark.parametrize("name", EXPORTS)
def test_lower_moves_the_loop_and_gives_pytorchs_outputs(tmp_path, name, opset):
    out = tmp_path / f"{name}.onnx"
    result = invoke("lower", DATA / f"{name}.onnx", "--opset", str(opset), "-o", out)
    assert result.exit_code == 0, result.output
    assert "PASSED" in result.output
    model = onnx.load(out)
    assert next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == opset
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    assert not any(n.op_type == "CastLike" for n in loop.attribute[0].g.node)  # (came at 15)
    if opset == 11:  # the rows as a scan output: no sequence carried, none made before the Loop
        assert len(loop.input) == 3 and len(loop.output) == 2
        assert "SequenceEmpty" not in {n.op_type for n in model.graph.node}
        assert "sequence(s) built in a Loop written as its scan output" in result.output
    _assert_pytorchs(out, name)


@pytest.mark.parametrize("opset", [13, 11])
@pytest.mark.parametrize("name", ["embedding_bag_sum_dynamo18", "embedding_bag_mean_dynamo18"])
def test_lower_unvalidated_writes_the_same_model(tmp_path, name, opset):
    lowered = scatter_rewrite.lower(onnx.load(DATA / f"{name}.onnx"), opset=opset, validate=False)
    out = tmp_path / f"{name}.onnx"
    onnx.save(lowered, out)
    _assert_pytorchs(out, name)


def test_the_exports_leave_the_loop_body_untyped():
    """(So that the tests above test body inference: a typed export would pass them emptily.)"""
    model = onnx.load(DATA / "embedding_bag_sum_dynamo18.onnx")
    body = next(n for n in model.graph.node if n.op_type == "Loop").attribute[0].g
    assert not body.input[3].type.HasField("tensor_type")
    assert any(n.op_type == "CastLike" and body.input[3].name in n.input for n in body.node)
