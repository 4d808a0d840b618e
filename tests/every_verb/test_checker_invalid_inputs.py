"""A model onnx.checker rejects, through every verb with and without validation: ``--no-validate``
refuses where the validated run refuses (the same line, exit 1, nothing written), and what either
writes passes onnx.checker (no model that fails otherwise than the input did)."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
import pytest

from scatter_rewrite.pipeline import checker_failure
from scatter_rewrite.testing import scatter_model
from tests.helpers.cli import invoke, save
from tests.helpers.models import reads_an_undeclared_value

DATA = Path(__file__).parents[1] / "data" / "torch"

INVALID = {
    "undeclared value": lambda: reads_an_undeclared_value(),
    "deprecated Scatter": lambda: scatter_model("Scatter", opset=13),
    "declared shape false": lambda: onnx.load(DATA / "scatter_amax_feeds_add_ts18.onnx"),
}

VERBS = [["fold"], ["lower", "--opset", "13"], ["tensorrt", "--trt-version", "8.6"], ["repair"],
         ["prepare", "--target", "rknn"]]


@pytest.mark.parametrize("verb", VERBS, ids=" ".join)
@pytest.mark.parametrize("case", INVALID)
def test_no_validate_refuses_as_the_validated_run_does(tmp_path: Path, case: str, verb: list[str]):
    source = save(INVALID[case](), tmp_path / "in" / "m.onnx") if (tmp_path / "in").mkdir() is None \
        else None
    assert checker_failure(source) is not None  # (what the test is about)
    runs = {}
    for flag in ("--validate", "--no-validate"):
        out = tmp_path / flag.strip("-") / "m.out.onnx"
        out.parent.mkdir()
        result = invoke(*verb, source, flag, "-o", out)
        runs[flag] = result.exit_code, result.stderr.splitlines(), out.exists()
        if out.exists():
            assert checker_failure(out) is None, (flag, checker_failure(out))
        shutil.rmtree(out.parent)
    (validated_code, validated_err, validated_out), (plain_code, plain_err, plain_out) = runs.values()
    assert plain_code == validated_code and plain_out == validated_out, runs
    if validated_code:
        assert not plain_out and plain_err[-1:] == validated_err[-1:], runs
        assert plain_err[-1].startswith("scatter-rewrite: error: "), runs
        assert "internal error" not in plain_err[-1], runs
