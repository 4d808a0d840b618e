"""Dynamo's exports of ``torch.nn.EmbeddingBag`` (tests/data/torch/make_embedding_bag.py: sum with
per-sample weights and max; opsets 18 and 20) moved down. Their Loop body
declares no type: its carried inputs are typed by inference from the Loop's inputs, so the body's
CastLike and Reshape move as the main graph's do. At opset 11 the Loop carries a sequence, which
Loop-11 does not take: refused, naming the Loop."""

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
EXPORTS = [f"embedding_bag_{mode}_dynamo{opset}" for mode in ("sum", "max") for opset in (18, 20)]


def _assert_pytorchs(path, name):
    feeds, pytorchs = export_arrays(DATA, name)
    got = run_onnxruntime(str(path), feeds)[0]
    if "_max_" in name:  # a max: bit for bit
        np.testing.assert_array_equal(got, pytorchs["y"])
    else:  # float sums and a mean: a different order of additions
        np.testing.assert_allclose(got, pytorchs["y"], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", EXPORTS)
def test_lower_13_moves_the_loop_body_and_gives_pytorchs_outputs(tmp_path, name):
    out = tmp_path / f"{name}.onnx"
    result = invoke("lower", DATA / f"{name}.onnx", "--opset", "13", "-o", out)
    assert result.exit_code == 0, result.output
    assert "PASSED" in result.output
    model = onnx.load(out)
    assert next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == 13
    body = next(n for n in model.graph.node if n.op_type == "Loop").attribute[0].g
    assert not any(n.op_type == "CastLike" for n in body.node)  # (CastLike came at 15)
    _assert_pytorchs(out, name)


@pytest.mark.parametrize("name", EXPORTS[:2])
def test_lower_13_unvalidated_writes_the_same_model(tmp_path, name):
    lowered = scatter_rewrite.lower(onnx.load(DATA / f"{name}.onnx"), opset=13, validate=False)
    out = tmp_path / f"{name}.onnx"
    onnx.save(lowered, out)
    _assert_pytorchs(out, name)


@pytest.mark.parametrize("name", ["embedding_bag_sum_dynamo18", "embedding_bag_max_dynamo20"])
def test_lower_11_refuses_the_sequence_loop_by_its_name(tmp_path, name):
    out = tmp_path / f"{name}.onnx"
    result = invoke("lower", DATA / f"{name}.onnx", "--opset", "11", "-o", out)
    assert result.exit_code == 1 and not out.exists(), result.output
    loop = next(n for n in onnx.load(DATA / f"{name}.onnx").graph.node if n.op_type == "Loop")
    assert f"Loop '{loop.name}'" in result.stderr
    assert "Loop at opset 11 takes no sequence" in result.stderr


def test_the_exports_leave_the_loop_body_untyped():
    """(So that the tests above test body inference: a typed export would pass them emptily.)"""
    model = onnx.load(DATA / "embedding_bag_sum_dynamo18.onnx")
    body = next(n for n in model.graph.node if n.op_type == "Loop").attribute[0].g
    assert not body.input[3].type.HasField("tensor_type")
    assert any(n.op_type == "CastLike" and body.input[3].name in n.input for n in body.node)
