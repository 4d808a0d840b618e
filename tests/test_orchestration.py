"""One orchestration: a verb writes the same bytes, notes and warnings whether it validates or not
and whether it is called from the command line's pipeline or the Python API (pipeline.py takes the
parsed file's form of a pass, when it takes it, for both: :func:`pipeline.parsed_form`)."""

from __future__ import annotations

import logging
from pathlib import Path

import onnx
import pytest

import scatter_rewrite as sr
from scatter_rewrite import pipeline
from tests.helpers.models import accumulate_model

ROOT = Path(__file__).resolve().parent.parent


def zeros_scatter_add() -> onnx.ModelProto:
    """TorchScript's scatter_add below opset 11: Scatter into ConstantOfShape zeros, then Add."""
    return accumulate_model("Scatter", zeros="constant_of_shape", opset=10)


MODELS = {
    "zeros scatter add, opset 10": ("upgrade", zeros_scatter_add),
    "legacy opset 10": ("upgrade", "models/legacy_scatter_opset10.onnx"),
    "legacy opset 13, If and function": ("upgrade", "models/legacy_scatter_opset13.onnx"),
    "TorchScript scatter_add": ("upgrade", "models/gnn_scatter_add_ts13.onnx"),
    "TorchScript scatter_add opset 9": ("upgrade", "tests/data/torch_repair/scatter_add_ts9.onnx"),
    "TorchScript MoE router opset 9": ("upgrade", "tests/data/torch_repair/moe_router_ts9.onnx"),
    "TorchScript index_put opset 11": ("upgrade", "tests/data/torch_repair/index_put_acc_ts11.onnx"),
    "dynamo mean": ("upgrade", "tests/data/torch_repair/scatter_reduce_mean_dynamo18.onnx"),
    "lower max": ("lower", "models/gnn_max_opset18.onnx"),
    "fold": ("fold", "models/constant_scatter_fp16.onnx"),
}


def source_of(tmp_path: Path, model) -> Path:
    if callable(model):
        path = tmp_path / "model.onnx"
        onnx.save(model(), path)
        return path
    return ROOT / model


def run_one_way(caplog, how: str, verb: str, source: Path, output: Path):
    """(outcome passes, notes, warnings logged, written bytes) of one way of running ``verb``."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="scatter_rewrite"):
        if how == "api":
            _, outcome = getattr(sr, verb)(str(source), output=str(output), return_report=True)
        else:
            outcome = pipeline.rewrite_file(verb, source, output=output, validate=how == "validated")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    return outcome.passes, outcome.notes, warnings, output.read_bytes()


@pytest.mark.parametrize("name", MODELS)
def test_validated_unvalidated_and_api_runs_agree(tmp_path, caplog, name):
    verb, model = MODELS[name]
    source = source_of(tmp_path, model)
    runs = {how: run_one_way(caplog, how, verb, source, tmp_path / f"{how}.onnx")
            for how in ("unvalidated", "validated", "api")}
    first = runs["unvalidated"]
    for how, other in runs.items():
        assert other[0] == first[0], how  # the passes' reports
        assert other[1] == first[1], how  # the export's notes
        assert other[2] == first[2], how  # the warnings logged
        assert other[3] == first[3], how  # the written bytes


def test_an_accumulating_export_is_noted_without_validation(tmp_path, caplog):
    """TorchScript's zeros -> Scatter -> Add: its note and warning come with --no-validate too."""
    source = source_of(tmp_path, zeros_scatter_add)
    _, notes, warnings, _ = run_one_way(caplog, "unvalidated", "upgrade", source, tmp_path / "out.onnx")
    assert len(notes) == 1 and "writes into zeros and its result is added" in notes[0]
    assert len(warnings) == 1 and notes[0] in warnings[0]
