"""The library's errors, notes and skip reasons name Python parameters (``inputs=``,
``validate=False``, ``rtol=``) and functions (``scatter_rewrite.upgrade(model, opset=18)``); the
command line says the flags and commands instead (``--inputs``, ``--no-validate``, ``--rtol``,
``scatter-rewrite upgrade --opset 18``): one mechanism, messages as ``said.Said`` and
``Verb.cli_message`` (errors), ``Verb.cli_text`` (notes: ``Outcome.said_on_the_command_line``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import scatter_rewrite as sr
from scatter_rewrite.pipeline import VERBS, Verb
from scatter_rewrite.testing import scatter_model
from scatter_rewrite.verbs import upgrade_passes
from tests.helpers.cli import invoke
from tests.helpers.wrong_passes import NegateScatterOutputs


def _stderr_line(*args, code: int = 1) -> str:
    """The one line a failed command writes on stderr."""
    result = invoke(*args)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == code and len(lines) == 1, result.output
    return lines[0]


@pytest.fixture
def wrong_upgrade(monkeypatch):
    """``upgrade`` that negates its scatters' outputs: validation fails."""
    passes = lambda opset=None: [*upgrade_passes(opset), NegateScatterOutputs()]  # noqa: E731
    monkeypatch.setitem(VERBS, "upgrade", Verb("upgrade", "upgraded", passes,
                                               options=VERBS["upgrade"].options))
    return passes


def test_a_failed_proof_names_the_parameters_in_python_and_the_flags_on_the_command_line(
        tmp_path: Path, wrong_upgrade):
    model = scatter_model("Scatter", opset=10)
    with pytest.raises(sr.ValidationError) as caught:
        sr.rewrite(model, wrong_upgrade(), validate=True)
    said = str(caught.value)
    assert "set the bound with rtol=/atol=, or skip validation with validate=False" in said
    assert "--" not in said
    onnx.save(model, tmp_path / "m.onnx")
    line = _stderr_line("upgrade", tmp_path / "m.onnx")
    assert "set the bound with --rtol/--atol, or skip validation with --no-validate" in line
    assert "validate=False" not in line and "rtol=" not in line


def test_users_inputs_an_index_out_of_range_in_python_and_on_the_command_line(tmp_path: Path):
    model = scatter_model("Scatter", opset=13, where="if")
    names = [i.name for i in model.graph.input]
    bad = {"data": np.zeros((4, 5), np.float32), "indices": np.full((2, 5), 9),
           "updates": np.ones((2, 5), np.float32), "cond": np.array(True)}
    bad = {k: v for k, v in bad.items() if k in names}
    with pytest.raises(sr.ScatterRewriteError) as caught:
        sr.upgrade(model, inputs=bad)
    assert "inputs=" in str(caught.value) and "--inputs" not in str(caught.value)
    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "x.npz", **bad)
    line = _stderr_line("upgrade", tmp_path / "m.onnx", "--inputs", tmp_path / "x.npz")
    assert "--inputs" in line and "inputs=" not in line


def test_an_unreadable_inputs_file_and_a_bad_tolerance_name_their_flags(tmp_path: Path):
    onnx.save(scatter_model("Scatter", opset=10), tmp_path / "m.onnx")
    (tmp_path / "x.npz").write_text("not an archive\n")
    line = _stderr_line("upgrade", tmp_path / "m.onnx", "--inputs", tmp_path / "x.npz", code=2)
    assert line.startswith(f"scatter-rewrite: error: --inputs {tmp_path / 'x.npz'}: cannot read it")
    result = invoke("upgrade", tmp_path / "m.onnx", "--rtol", "-1")
    assert result.exit_code == 2
    assert result.stderr.strip() == ("scatter-rewrite: error: --rtol -1.0: a tolerance is a finite "
                                     "number >= 0")


def test_the_translation_touches_only_the_parameters_the_message_carries():
    """Only a parameter a message carries as data (said.param) becomes a flag: the same words in
    its plain text (a node's name) stay as they are."""
    from scatter_rewrite.errors import ValidationError
    from scatter_rewrite.said import param, said

    error = ValidationError(said("lower with ", param("mode", "standard"),
                                 " (node 'validate=False'), or ", param("validate", False)))
    assert str(error) == "lower with mode='standard' (node 'validate=False'), or validate=False"
    assert VERBS["lower"].cli_message(error) == ("lower with --mode standard (node "
                                                 "'validate=False'), or --no-validate")


def test_an_unknown_target_is_the_parameter_in_python_and_the_flag_for_check_and_prepare(
        tmp_path: Path):
    model = scatter_model("ScatterElements", opset=18, reduction="add")
    with pytest.raises(sr.OptionError, match=r"^target='npu-x' is unknown: pick "):
        sr.check(model, target="npu-x")
    with pytest.raises(sr.OptionError, match=r"^fix_dims= does not apply to target='rknn'"):
        sr.prepare(model, target="rknn", fix_dims={"n": 2})
    onnx.save(model, tmp_path / "m.onnx")
    for args in (["check", "--target", "npu-x"], ["prepare", "--target", "npu-x"]):
        result = invoke(args[0], tmp_path / "m.onnx", *args[1:])
        assert result.exit_code == 2
        assert result.stderr.startswith("scatter-rewrite: error: --target npu-x is unknown: pick ")
    result = invoke("prepare", tmp_path / "m.onnx", "--target", "rknn", "--fix-dim", "n=2")
    assert result.exit_code == 2
    assert "--fix-dim does not apply to --target rknn" in result.stderr


def test_refusals_of_the_lowering_and_the_tensorrt_flow_name_their_parameters(tmp_path: Path):
    """A bfloat16 reduction cannot be lowered below opset 13 (``opset=13`` / ``--opset 13``), and
    TensorRT 8.6 has no bfloat16 (``trt_version='10'`` / ``--trt-version 10``)."""
    from onnx import TensorProto

    model = scatter_model("ScatterElements", opset=18, reduction="max",
                          data_type=TensorProto.BFLOAT16)
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(sr.ConversionError) as lowered:
        sr.lower(model, opset=11, validate=False)
    assert "pass opset=13" in str(lowered.value) and "--opset" not in str(lowered.value)
    assert "pass --opset 13" in _stderr_line("lower", tmp_path / "m.onnx", "--opset", "11",
                                              "--no-validate")
    with pytest.raises(sr.ConversionError) as capped:
        sr.prepare_for_tensorrt(model, trt_version="8.6", validate=False)
    assert "use trt_version='10'" in str(capped.value) and "--trt" not in str(capped.value)
    assert "use --trt-version 10" in _stderr_line("tensorrt", tmp_path / "m.onnx", "--trt-version",
                                                   "8.6", "--no-validate")


def _reported(tmp_path: Path, *args) -> dict:
    """The one model's outcome in the report of the command ``args`` (exit 0)."""
    result = invoke(*args, "--report", tmp_path / "report.json")
    assert result.exit_code == 0, result.output
    [outcome] = json.loads((tmp_path / "report.json").read_text())["models"]
    return outcome


@pytest.mark.parametrize("model, python, command", [
    (scatter_model("ScatterElements", opset=16, reduction="max"),
     "run scatter_rewrite.upgrade(model, opset=18) first",
     "run scatter-rewrite upgrade --opset 18 first"),
    (scatter_model("Scatter", opset=10),
     "run scatter_rewrite.upgrade(model) first (scatter_rewrite.prepare_for_tensorrt(model) does both)",
     "run scatter-rewrite upgrade first (scatter-rewrite tensorrt does both)"),
], ids=["max-below-18", "Scatter"])
def test_a_skip_reason_names_the_function_in_python_and_the_command_on_the_command_line(
        tmp_path: Path, model, python, command):
    _, outcome = sr.to_scatternd(model, return_report=True)
    [skipped] = outcome.passes[0]["skipped"]
    assert python in skipped["detail"]
    assert "--" not in skipped["detail"] and "scatter-rewrite " not in skipped["detail"]
    onnx.save(model, tmp_path / "m.onnx")
    [skipped] = _reported(tmp_path, "to-scatternd", tmp_path / "m.onnx")["passes"][0]["skipped"]
    assert command in skipped["detail"]
    assert "scatter_rewrite." not in skipped["detail"]


def test_a_validation_note_names_the_parameter_in_python_and_the_flag_on_the_command_line(
        tmp_path: Path):
    model = scatter_model("Scatter", opset=10)
    inputs = {"data": np.zeros((4, 5), np.float32), "indices": np.zeros((2, 5), np.int64),
              "updates": np.ones((2, 5), np.float32), "unused": np.zeros(1, np.float32)}
    _, outcome = sr.upgrade(model, inputs=inputs, return_report=True)
    said = "that are not model inputs were ignored: unused"
    assert f"entries of inputs= {said}" in outcome.validation["notes"]
    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "x.npz", **inputs)
    outcome = _reported(tmp_path, "upgrade", tmp_path / "m.onnx", "--inputs", tmp_path / "x.npz")
    assert f"entries of --inputs {said}" in outcome["validation"]["notes"]


def test_a_call_is_said_as_the_command_that_does_the_same():
    """A call a message suggests (said.call) reads as the Python call in Python and as the command
    on the command line, for every option kind; on a model file, the command names the file."""
    from scatter_rewrite.said import call, said
    from scatter_rewrite.verbs import spoken

    for made, python, command in [
        (call("upgrade"), "scatter_rewrite.upgrade(model)", "scatter-rewrite upgrade"),
        (call("lower", opset=13, mode="custom"),
         "scatter_rewrite.lower(model, opset=13, mode='custom')",
         "scatter-rewrite lower --opset 13 --mode custom"),
        (call("repair", assume="scatter-reduce-mean"),
         "scatter_rewrite.repair(model, assume='scatter-reduce-mean')",
         "scatter-rewrite repair --assume scatter-reduce-mean"),
        (call("prepare_for_tensorrt", trt_version="8.6", fix_dims={"n": 8}),
         "scatter_rewrite.prepare_for_tensorrt(model, trt_version='8.6', fix_dims={'n': 8})",
         "scatter-rewrite tensorrt --trt-version 8.6 --fix-dim n=8"),
        (call("lower", "m.onnx", opset=13), "scatter_rewrite.lower('m.onnx', opset=13)",
         "scatter-rewrite lower m.onnx --opset 13"),
    ]:
        text = said("run ", made, " first")
        assert str(text) == f"run {python} first"
        assert spoken(text, {}) == f"run {command} first"
    # a function that is no verb's, or an argument its verb does not take: as Python writes it
    for made in (call("scatter_model"), call("upgrade", mode="x")):
        assert spoken(made, {}) == str(made)
    # check, not a rewriting verb, with its one option
    assert spoken(said(call("check", target="opset-9"), " says what blocks it"), {}) == (
        "scatter-rewrite check --target opset-9 says what blocks it")


def test_the_flags_messages_say_are_the_options_every_rewriting_command_declares():
    """verbs.SHARED_FLAGS, the flag of each parameter every verb takes, is what every rewriting
    command declares for it, and cli/options.py takes the flags from there instead of writing them
    again: they cannot drift apart."""
    import typer.core
    import typer.main

    from scatter_rewrite.cli import app, options
    from scatter_rewrite.verbs import SHARED_FLAGS

    group = typer.main.get_command(app)
    for verb in VERBS.values():
        params = {p.name: p for p in group.commands[verb.command].params
                  if isinstance(p, typer.core.TyperOption)}
        for name, flag in SHARED_FLAGS.items():
            assert flag in params[name].opts, (verb.command, name, params[name].opts)
        assert params["validate"].secondary_opts == ["--no-validate"]
    source = Path(options.__file__).read_text()
    written = [flag for flag in SHARED_FLAGS.values() if f'"{flag}"' in source or f"'{flag}'" in source]
    assert written == [], f"cli/options.py writes {written} again: take them from SHARED_FLAGS"
