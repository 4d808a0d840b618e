"""What a new user meets on a fresh install: help text, usage errors, unwritable folders,
objects the API is handed straight from PyTorch.

Every failure: one line on stderr starting ``scatter-rewrite: error:``, exit 1 (user error) or 2
(bad usage), no traceback, nothing written.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

import scatter_rewrite as sr
from scatter_rewrite import model_io
from scatter_rewrite.errors import ScatterRewriteError
from scatter_rewrite.testing import scatter_model
from tests.helpers.cli import invoke, tree

VERBS = ["upgrade", "fold", "lower", "tensorrt"]


# ---- help text --------------------------------------------------------------------------------

@pytest.mark.parametrize("verb", VERBS + ["check"])
def test_help_usage_line_and_columns_read_cleanly(verb: str):
    """typer wraps the usage's MODEL... in braces (`{MODEL...}`, `{MODEL...}...` from 0.29 on), types
    options `<int>`/`<str>` without a metavar and flags `<bool>` (0.29). The MODEL row's type column
    is typer's own (`<str>`, `<list[str]>` from 0.29; no public API sets it), so it is left out."""
    result = invoke(verb, "--help")
    assert result.exit_code == 0, result.output
    text = result.output
    model = "MODEL..."  # (check takes several models and folders too)
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert usage.split() == ["Usage:", "scatter-rewrite", verb, "[OPTIONS]", model], usage
    rows = [line for line in text.splitlines() if "MODEL..." not in line]
    for raw in ("{", "}", "<str>", "<int>", "<bool>", "<text>", "TEXT", "INTEGER"):
        assert not any(raw in line for line in rows), (raw, text)
    if verb in ("upgrade", "lower"):
        assert any(line.split()[1:3] == ["--opset", "N"] for line in text.splitlines() if "--opset" in line), text
    if verb == "check":
        assert any("--target" in line and "TARGET" in line for line in text.splitlines()), text
        assert "rewritten" not in text  # check rewrites nothing; its -v says what it does


def test_help_is_still_complete():
    """The metavars changed, not what the help tells: choices and defaults are still there."""
    lower = invoke("lower", "--help").output
    for needle in ("standard", "custom", "tensorrt-plugin", "[default: 13]", "[default: standard]"):
        assert needle in lower, needle
    tensorrt = invoke("tensorrt", "--help").output
    for needle in ("8.6", "10", "NAME=SIZE"):
        assert needle in tensorrt, needle
    check = invoke("check", "--help").output
    assert "tensorrt-8.6" in check and "opset-N" in check and "[default: tensorrt-10]" in check


# ---- usage errors: one line, exit 2 -----------------------------------------------------------

@pytest.mark.parametrize("args, needle", [
    (["upgrade"], "MODEL..."),
    (["check"], "MODEL"),
    (["frobnicate", "{m}"], "frobnicate"),
    (["upgrade", "{m}", "--opset", "eleven"], "eleven"),
    (["fold", "{m}", "--size-limit", "abc"], "abc"),
    (["tensorrt", "{m}", "--trt-version", "9"], "8.6"),
    (["lower", "{m}", "--mode", "plugin"], "tensorrt-plugin"),
    (["tensorrt", "{m}", "--fix-dim", "E=0"], "NAME=SIZE"),
    (["upgrade", "{m}", "--no-such-option"], "--no-such-option"),
    (["upgrade", ""], "an empty path"),
    (["upgrade", "{m}", "-o", ""], "an empty path"),
])
def test_bad_usage_is_one_line_and_exit_2(legacy: Path, tmp_path: Path, args: list[str], needle: str):
    before = tree(tmp_path)
    result = invoke(*[a.replace("{m}", str(legacy)) for a in args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scatter-rewrite: error: "), result.stderr
    assert needle in lines[0], lines[0]
    assert "--help" in lines[0]  # where to look next
    assert result.stdout == ""
    assert tree(tmp_path) == before


def test_bad_usage_in_a_real_process_is_one_line(legacy: Path):
    """The installed entry point (main()), not only the CliRunner: no rich panel on stderr."""
    done = subprocess.run([sys.executable, "-c", "from scatter_rewrite.cli import main; main()",
                           "tensorrt", str(legacy), "--trt-version", "9"], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr
    assert done.stderr.startswith("scatter-rewrite: error: ") and "'9'" in done.stderr and done.stdout == ""


def test_no_arguments_still_prints_the_help():
    result = invoke()
    assert result.exit_code == 2
    assert "upgrade" in result.stdout and "tensorrt" in result.stdout and "Usage" in result.stdout


def test_help_and_success_exit_0(legacy: Path):
    assert invoke("--help").exit_code == 0
    result = invoke("upgrade", legacy)
    assert result.exit_code == 0 and "PASSED" in result.stdout, result.output


# ---- an output folder that cannot be written ---------------------------------------------------

def test_unwritable_output_folder_is_refused_before_any_work(legacy: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch):
    """(Tests run as root here, where chmod does not stop a write: the permission is what os.access says.)"""
    import scatter_rewrite.pipeline as pipeline

    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == tmp_path else real_access(p, mode, **kw))
    monkeypatch.setattr(pipeline, "run_passes", lambda *a, **k: pytest.fail("passes ran before the write check"))
    before = tree(tmp_path)
    for verb in VERBS:
        result = invoke(verb, legacy)
        assert result.exit_code == 1, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("scatter-rewrite: error: "), result.stderr
        assert str(tmp_path) in lines[0] and "-o" in lines[0], lines[0]
    assert tree(tmp_path) == before


def test_unwritable_folder_says_so_without_naming_the_staging_folder(legacy: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch):
    """The write itself failing (a folder made read-only while the model was rewritten): the error
    named the staging folder ('[Errno 13] Permission denied: 'ro/.scatter-rewrite-m9rsooms'')."""
    def refuse(prefix=None, dir=None, **kw):
        raise PermissionError(13, "Permission denied", os.path.join(dir, f"{prefix}m9rsooms"))

    monkeypatch.setattr(model_io.tempfile, "mkdtemp", refuse)
    result = invoke("upgrade", legacy, "-o", tmp_path / "out.onnx")
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert ".scatter-rewrite-" not in line and "Errno" not in line, line
    assert f"could not write {tmp_path / 'out.onnx'}" in line and "permission denied" in line.lower(), line
    assert str(tmp_path) in line and "-o" in line, line
    assert not (tmp_path / "out.onnx").exists()


# ---- the API handed torch.onnx.export(..., dynamo=True)'s result ------------------------------

def test_api_names_what_to_pass_for_a_torch_onnx_program():
    fake = type("ONNXProgram", (), {"__module__": "torch.onnx._internal.exporter._onnx_program"})()
    with pytest.raises(ScatterRewriteError) as info:
        sr.upgrade(fake)
    message = str(info.value)
    assert "torch.onnx.ONNXProgram" in message and ".model" in message and "model_proto" in message
    with pytest.raises(TypeError, match=r"fold\(\): model must be an onnx.ModelProto, .*got int"):
        sr.fold(3)  # anything else: the kinds it takes


# ---- check's table in a CI log (80 columns, not a terminal) ------------------------------------

def test_check_prints_each_fix_command_whole(tmp_path: Path):
    """The table folded the fix column mid-word ('scatter-rewrit' / 'e upgrade'): not copyable."""
    path = tmp_path / "legacy13.onnx"
    onnx.save(scatter_model("Scatter", opset=13, where="if", axis=1), path)
    result = invoke("check", path, "--target", "opset-13", terminal_width=80)
    assert result.exit_code == 1
    fixes = [line for line in result.stdout.splitlines() if line.startswith("fix: ")]
    assert fixes == ["fix: scatter-rewrite upgrade --opset 13 (2 node(s))"], result.stdout
    assert result.stdout.rstrip().splitlines()[-1].startswith(f"{path}: FIXABLE for opset-13 ")
    onnx.save(scatter_model("Scatter", opset=10, where="if", axis=1), path)
    ready = invoke("check", path, "--target", "opset-10", terminal_width=80)
    assert ready.exit_code == 0 and not [line for line in ready.stdout.splitlines() if line.startswith("fix: ")]


def test_the_target_help_lists_every_target_and_the_check_summary_is_one_line():
    from scatter_rewrite.cli.check import check
    from scatter_rewrite.targets import TARGETS_HELP, target_names

    assert all(name in TARGETS_HELP for name in target_names() if not name.startswith("opset-"))
    assert "..." not in TARGETS_HELP
    for args in (["check", "--help"], ["prepare", "--help"]):
        said = " ".join(invoke(*args, terminal_width=200).output.replace("│", " ").split())
        assert "litert, mnn, no-scatter, qnn, rknn, openvino, openvino-npu, ort-cpu, ort-web, tvm" in said, said
    summary = check.__doc__.split("\n\n")[0]
    assert "\n" not in summary and summary.endswith(".")


def test_every_command_help_paragraph_is_wrapped_by_width_never_at_its_source_lines():
    """A help's paragraphs after the first were printed with their docstring's line breaks: at
    any width, check's broke mid-sentence ("... the target (lower," / "tensorrt or prepare) ...").
    As wide as every paragraph, each is one line."""
    from scatter_rewrite.verbs import VERBS

    for command in ["check", *(v.command for v in VERBS.values())]:
        said = invoke(command, "--help", env={"COLUMNS": "300"}).output
        lines = [" ".join(line.split()) for line in said.splitlines()]
        help_text = _registered_help(command)
        for paragraph in help_text.split("\n\n"):
            assert " ".join(paragraph.split()) in lines, (command, paragraph, said)


def _registered_help(name: str) -> str:
    """The help text a command is registered with (its docstring, for check)."""
    from scatter_rewrite.cli import app

    (info,) = [c for c in app.registered_commands if c.name == name]
    return info.help or info.callback.__doc__
