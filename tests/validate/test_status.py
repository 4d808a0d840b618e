"""What a status promises: PASSED only where the written model ran in onnxruntime (as a user runs
it) and matched, the line naming the engine that compared them (never the target runtime: WRITTEN
where nodes whose runtime cannot run here ran as our kernels); UNRUNNABLE where onnx.reference proves it and onnxruntime cannot run it; FAILED
where onnxruntime fails on a rewritten model it has every kernel for. The Python API's verb
functions validate by default. Opset moves are judged against a float64 evaluation of the
original where onnxruntime's per-opset fusions round otherwise, and a wrong move is still caught."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import numpy_helper as nh

import scatter_rewrite as sr
from scatter_rewrite.pipeline import PASSED, UNRUNNABLE, WRITTEN
from scatter_rewrite.testing import scatter_model
from scatter_rewrite.validate import run_onnxruntime

from tests.helpers.models import scatter_reshaped_at_run_time
from tests.helpers.wrong_passes import (
    MoveOffByOneRounding, NegateScatterOutputs, OneSymbolicDimForAll, product_chain_model,
    two_row_counts_model,
)
from tests.helpers.cli import invoke
from tests.helpers.exports import export_arrays

DATA = Path(__file__).parents[1] / "data" / "torch"
# ---- the Python API validates by default -----------------------------------------------------

VERB_FUNCTIONS = {
    "upgrade": lambda m, **kw: sr.upgrade(m, **kw),
    "fold": lambda m, **kw: sr.fold(m, **kw),
    "lower": lambda m, **kw: sr.lower(m, opset=13, **kw),
    "to_scatternd": lambda m, **kw: sr.to_scatternd(m, **kw),
    "prepare_for_tensorrt": lambda m, **kw: sr.prepare_for_tensorrt(m, **kw),
    "repair": lambda m, **kw: sr.repair(m, **kw),
    "rewrite": lambda m, **kw: sr.rewrite(m, [], **kw),
}


@pytest.mark.parametrize("verb", sorted(VERB_FUNCTIONS))
def test_every_verb_function_validates_unless_told_not_to(verb, monkeypatch):
    import scatter_rewrite.validate as validation

    planned = []
    real = validation.plan_validation
    monkeypatch.setattr(validation, "plan_validation", lambda *a, **k: planned.append(1) or real(*a, **k))
    model = scatter_model(reduction="max")
    _, outcome = VERB_FUNCTIONS[verb](model, return_report=True)
    assert planned, f"{verb}() did not validate"
    assert outcome.validation is not None or not outcome.modified
    planned.clear()
    _, skipped = VERB_FUNCTIONS[verb](model, return_report=True, validate=False)
    assert not planned and skipped.validation is None


def test_a_wrong_rewrite_through_the_api_raises_and_returns_nothing():
    with pytest.raises(sr.ValidationError, match="validation failed"):
        sr.rewrite(scatter_model(reduction="max"), [NegateScatterOutputs()])


# ---- onnxruntime as a user runs it: its failure is the rewrite's --------------------------------

def test_a_rewrite_onnxruntime_fails_to_run_is_a_failure_not_a_fallback(tmp_path):
    """Colliding symbolic dims: onnxruntime with default options reuses a 51-row buffer for a
    33-row value and fails at run time. onnx.reference runs it; it used to PASS there."""
    rows = {"x": np.ones((51, 4), np.float32), "y": np.ones((33, 4), np.float32)}
    wrong = sr.rewrite(two_row_counts_model(), [OneSymbolicDimForAll()], validate=False)
    with pytest.raises(Exception, match="re-use buffer"):
        run_onnxruntime(wrong.SerializeToString(), rows)
    with pytest.raises(sr.ValidationError, match="onnxruntime cannot run the rewritten model, though it runs "
                                                 "the original"):
        sr.rewrite(two_row_counts_model(), [OneSymbolicDimForAll()], inputs=rows)
    np.savez(tmp_path / "rows.npz", **rows)
    onnx.save(two_row_counts_model(), tmp_path / "m.onnx")
    with pytest.raises(sr.ValidationError):
        sr.rewrite(str(tmp_path / "m.onnx"), [OneSymbolicDimForAll()], inputs=rows,
                   output=tmp_path / "out.onnx")
    assert not (tmp_path / "out.onnx").exists()


# ---- UNRUNNABLE: correct, written, and said so ------------------------------------------------

def float16_max(reduction: str = "max") -> onnx.ModelProto:
    """A float16 ScatterElements max/min, which onnxruntime runs (its ScatterND has no float16
    reduction: ``to-scatternd`` writes one)."""
    return scatter_model(reduction=reduction, data_type=TensorProto.FLOAT16)


UNRUNNABLE_CASES = {  # verb, model, what onnxruntime lacks in the written model
    "to-scatternd max": ("to-scatternd", lambda: float16_max("max"),
                         "ScatterND 'scatterelements_0' (opset 18, main graph): no float16 reduction='max'"),
    "to-scatternd min": ("to-scatternd", lambda: float16_max("min"),
                         "ScatterND 'scatterelements_0' (opset 18, main graph): no float16 reduction='min'"),
}


@pytest.mark.parametrize("case", sorted(UNRUNNABLE_CASES))
def test_a_correct_model_onnxruntime_cannot_run_is_written_unrunnable_with_the_fix(case, tmp_path):
    verb, make, lacks = UNRUNNABLE_CASES[case]
    source, written = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(make(), source)
    result = invoke(verb, source, "-o", written)
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines()[-1].startswith("UNRUNNABLE in ")
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"scatter-rewrite: error: {source}: onnxruntime cannot run the written model (")
    assert lacks in line and "float16" in line
    assert line.endswith(f"scatter-rewrite lower {written} --opset 13 writes a form it runs"), line
    onnx.checker.check_model(str(written), full_check=True)  # written: it is correct
    # the command named makes it run in onnxruntime (on in-range indices: --inputs)
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.integers(0, 4, [d.dim_value for d in i.type.tensor_type.shape.dim])
             if i.type.tensor_type.elem_type == TensorProto.INT64
             else rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float16)
             for i in onnx.load(written).graph.input}
    np.savez(tmp_path / "feeds.npz", **feeds)
    lowered = invoke("lower", written, "--opset", "13", "--inputs", tmp_path / "feeds.npz", "-o", tmp_path / "runs.onnx")
    assert lowered.exit_code == 0, lowered.output
    assert lowered.stdout.splitlines()[-1].startswith("PASSED in ")
    assert "validation: onnx.reference" in lowered.stdout  # (onnxruntime cannot run the unlowered one)
    run_onnxruntime(tmp_path / "runs.onnx", feeds)


def test_the_api_returns_an_unrunnable_model_with_its_status_and_a_warning(caplog):
    model, outcome = sr.to_scatternd(float16_max(), return_report=True)
    assert outcome.status == UNRUNNABLE
    assert "no float16 reduction='max'" in outcome.validation["onnxruntime_cannot_run"]
    assert "scatter_rewrite.lower(model, opset=13) writes a form it runs" in outcome.error
    assert [r.message for r in caplog.records if "onnxruntime cannot run" in r.message]
    assert [n.op_type for n in model.graph.node][-1] == "ScatterND"


# ---- the status names the engine that proved it, never the target runtime ----------------------

MODELS = Path(__file__).parents[2] / "models"
# command, model in models/, the last line's start, the report's validation.proven_in
PROVEN_IN_CASES = {
    "prepare no-scatter": (["prepare", "--target", "no-scatter"], "gnn_max_opset18.onnx", "PASSED in onnxruntime, ",
                    "onnxruntime"),
    "tensorrt 8.6": (["tensorrt", "--trt-version", "8.6"], "gnn_add_opset17.onnx",
                     "PASSED in onnxruntime, ", "onnxruntime"),
    "lower custom": (["lower", "--mode", "custom"], "gnn_max_opset18.onnx",
                     "PASSED in onnxruntime with scatter_rewrite.custom_ops, ",
                     "onnxruntime with scatter_rewrite.custom_ops"),
    "upgrade, original only in onnx.reference": (["upgrade"], "legacy_scatter_opset13.onnx",
                                                 "PASSED in onnx.reference, ", "onnx.reference"),
    # TensorRT runs the plugin nodes; here they ran as our kernels: checked, not PASSED
    "lower tensorrt-plugin": (["lower", "--mode", "tensorrt-plugin"], "gnn_max_opset18.onnx",
                              "WRITTEN, checked in onnxruntime with scatter_rewrite.custom_ops (its 1 "
                              "TensorRT plugin node(s) ran as scatter-rewrite's kernels of the ONNX op; "
                              "TensorRT, their runtime, cannot run here), ",
                              "onnxruntime with scatter_rewrite.custom_ops"),
}


@pytest.mark.parametrize("case", sorted(PROVEN_IN_CASES))
def test_the_status_line_and_report_name_the_engine_that_proved_the_written_model(case, tmp_path):
    command, name, line, engine = PROVEN_IN_CASES[case]
    report = tmp_path / "r.json"
    result = invoke(command[0], MODELS / name, *command[1:], "-o", tmp_path / "out.onnx", "--report", report)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1].startswith(line), result.stdout
    (entry,) = json.loads(report.read_text())["models"]
    assert entry["validation"]["proven_in"] == engine
    plugin = command[-1] == "tensorrt-plugin"
    assert entry["status"] == ("WRITTEN" if plugin else "PASSED")
    assert bool(entry["validation"]["stand_in"]) == plugin


def test_the_api_says_a_tensorrt_plugin_form_is_written_not_passed():
    _, outcome = sr.lower(scatter_model(reduction="max"), opset=13, mode="tensorrt-plugin", return_report=True)
    assert outcome.status == WRITTEN and "TensorRT, their runtime, cannot run here" in outcome.validation["stand_in"]
    _, outcome = sr.lower(scatter_model(reduction="max"), opset=13, mode="custom", return_report=True)
    assert outcome.status == PASSED and outcome.validation["stand_in"] == ""


# ---- opset moves: judged by the arithmetic, wrong moves still caught --------------------------

LLAMA = DATA / "llama_tiny_ts17.onnx"


def llama_inputs() -> dict[str, np.ndarray]:
    return export_arrays(DATA, LLAMA.stem)[0]


def test_a_llama_export_moved_to_opset_13_is_judged_by_the_arithmetic_not_bit_for_bit(tmp_path):
    """The move only drops allowzero=0 from its Reshapes, yet onnxruntime fuses a MatMul with its
    scales at opset 17 and not at 13: the logits differ in the last bits."""
    original = run_onnxruntime(LLAMA, llama_inputs())[0]
    moved = sr.lower(str(LLAMA), opset=13, validate=False, output=tmp_path / "moved.onnx")
    assert not np.array_equal(run_onnxruntime(moved, llama_inputs())[0], original)
    _, outcome = sr.lower(onnx.load(LLAMA), opset=13, inputs=llama_inputs(), return_report=True)
    assert outcome.status == PASSED
    assert outcome.validation["tolerance"].startswith(
        "float outputs bit for bit (the opset moved 17 -> 13, and onnxruntime fuses ops differently per opset), "
        "or else judged against a float64 evaluation of the original")


def test_an_honest_move_passes_and_a_move_off_by_a_few_ulps_fails():
    _, honest = sr.lower(product_chain_model(), opset=13, return_report=True)
    assert honest.status == PASSED
    with pytest.raises(sr.ValidationError, match="beyond what the original's own rounding allows"):
        sr.rewrite(product_chain_model(), [MoveOffByOneRounding(13)])
    wrong, _ = sr.rewrite(product_chain_model(), [MoveOffByOneRounding(13)], validate=False, return_report=True)
    original = onnx.load_from_string(product_chain_model().SerializeToString())
    x = np.random.default_rng(0).standard_normal((64, 16)).astype(np.float32)
    difference = np.abs(run_onnxruntime(wrong.SerializeToString(), {"x": x})[0]
                        - run_onnxruntime(original.SerializeToString(), {"x": x})[0])
    assert 0 < difference.max() <= 1e-5 * np.abs(x).max()  # within the fixed float32 tolerance


def test_validation_plans_a_model_with_external_data_from_any_working_directory(tmp_path):
    """A model whose weights are in files beside it (one per tensor, as onnx.save writes them),
    with an If that planning inlines: its copy found them relative to the working directory."""
    model = scatter_model(reduction="max", where="if")
    data = next(i for i in model.graph.input if i.name == "data")
    model.graph.input.remove(data)
    model.graph.initializer.append(nh.from_array(np.arange(20, dtype=np.float32).reshape(4, 5), "data"))
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    onnx.save(model, folder / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=False,
              size_threshold=0)
    assert Path.cwd() != folder
    result = invoke("lower", folder / "m.onnx", "--opset", "13", "-o", tmp_path / "out.onnx")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1].startswith("PASSED in ")


def test_no_inputs_to_validate_on_fails_a_rewrite_not_a_model_left_unchanged(tmp_path):
    onnx.save(scatter_reshaped_at_run_time(), tmp_path / "m.onnx")
    unchanged = invoke("to-scatternd", tmp_path / "m.onnx", "-o", tmp_path / "nd.onnx")
    assert unchanged.exit_code == 0, unchanged.output
    assert unchanged.stdout.splitlines()[-1].startswith("UNCHANGED in ")
    moved = invoke("lower", tmp_path / "m.onnx", "--opset", "17", "-o", tmp_path / "17.onnx")
    assert moved.exit_code == 1
    assert "cannot find inputs the original model runs with" in moved.stderr
    assert not (tmp_path / "17.onnx").exists()
