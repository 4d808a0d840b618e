"""The command line's edges: --version, the verbs built from one declaration, one opset range,
-o with several models, check on several models and on invalid ones, unchanged models, unused
initializers, log lines (another library's only under -v), the check table in a pipe, progress on
a terminal."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from pathlib import Path

import onnx
import onnx_ir as ir
import pytest

from scatter_rewrite import __version__
from scatter_rewrite.cli import printing, rewriting
from scatter_rewrite.cli.messages import LineFormatter
from scatter_rewrite.testing import scatter_model
from scatter_rewrite.verbs import VERBS
from tests.helpers.cli import invoke, save
from tests.helpers.models import reads_an_undeclared_value

DATA = Path(__file__).parents[1] / "data"


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout == f"scatter-rewrite {__version__}\n"


def test_every_declared_verb_is_a_command_with_its_declared_options():
    for verb in VERBS.values():
        result = invoke(verb.command, "--help", terminal_width=200)
        assert result.exit_code == 0, result.output
        for option in verb.options:
            assert option.cli_flag in result.stdout, (verb.name, option.cli_flag)
    assert "to-scatternd" in invoke("--help").stdout


@pytest.mark.parametrize("verb", ["upgrade", "lower"])
def test_one_opset_range_for_every_verb(tmp_path: Path, verb: str):
    highest = onnx.defs.onnx_opset_version()
    model = save(scatter_model("ScatterElements", opset=16), tmp_path / "m.onnx")
    for opset in (10, highest + 1):
        result = invoke(verb, model, "--opset", opset)
        assert result.exit_code == 2  # bad usage
        assert f"--opset {opset} is out of range for {verb}: pick 11 to {highest}" in result.stderr
    result = invoke(verb, model, "--opset", highest, "-o", tmp_path / "top.onnx")
    assert result.exit_code == 0, result.output
    check = invoke("check", model, "--target", f"opset-{highest + 1}")
    assert check.exit_code == 2 and "out of range" in check.stderr and "unknown" not in check.stderr


def test_o_naming_one_file_with_several_models_is_a_usage_error(tmp_path: Path):
    a = save(scatter_model("Scatter", opset=10), tmp_path / "a.onnx")
    b = save(scatter_model("Scatter", opset=10), tmp_path / "b.onnx")
    result = invoke("upgrade", a, b, "-o", tmp_path / "x.onnx")
    assert result.exit_code == 2
    assert result.stderr.startswith("scatter-rewrite: error: ")
    assert len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "x.onnx").exists()
    assert invoke("upgrade", a, b, "-o", f"{tmp_path / 'x'}/").exit_code == 0  # a folder: fine
    written = sorted(p.name for p in (tmp_path / "x").iterdir())
    assert written == ["a.upgraded.onnx", "b.upgraded.onnx"]


def test_check_takes_several_models_and_folders(tmp_path: Path):
    folder = tmp_path / "models"
    folder.mkdir()
    save(scatter_model("ScatterElements", opset=16, reduction="add"), folder / "add.onnx")
    save(scatter_model("ScatterElements", opset=13), folder / "plain.onnx")
    one = save(scatter_model("Scatter", opset=10), tmp_path / "legacy.onnx")
    result = invoke("check", folder, one, "--target", "opset-13")
    assert result.exit_code == 1
    assert result.stdout.count("readiness for opset-13") == 3
    blocked = result.stderr.strip().splitlines()
    assert len(blocked) == 2
    assert all(line.startswith("scatter-rewrite: error: ") for line in blocked)
    assert "add.onnx: not ready for opset-13" in blocked[0] and "legacy.onnx" in blocked[1]
    # a folder of the verbs' outputs: checked too (rewriting verbs skip them, check does not)
    assert invoke("lower", folder / "add.onnx", "-o", f"{tmp_path / 'out'}/").exit_code == 0
    outputs = invoke("check", tmp_path / "out", "--target", "opset-13")
    assert outputs.exit_code == 0, outputs.output
    assert outputs.stdout.count("readiness for opset-13") == 1
    as_json = invoke("check", folder, "--target", "opset-18", "--json")
    assert as_json.exit_code == 0
    import json

    shown = json.loads(as_json.stdout)
    assert shown["summary"]["ready"] == 2
    assert [Path(m["model"]).name for m in shown["models"]] == ["add.onnx", "plain.onnx"]


def _undefined_input(path: Path) -> Path:
    model = scatter_model("ScatterElements", opset=16)
    model.graph.node[0].input[2] = "nowhere"
    return save(model, path)


def _cycle(path: Path) -> Path:
    model = scatter_model("ScatterElements", opset=16)
    model.graph.node[0].input[2] = "back"
    scatter_output = model.graph.node[0].output[0]
    model.graph.node.append(onnx.helper.make_node("Identity", [scatter_output], ["back"]))
    return save(model, path)


def _unknown_op(path: Path) -> Path:
    model = scatter_model("ScatterElements", opset=16)
    model.graph.node[0].input[0] = "bogus_out"
    model.graph.node.insert(0, onnx.helper.make_node("Bogus", ["data"], ["bogus_out"]))
    return save(model, path)


@pytest.mark.parametrize("make, reason", [(_undefined_input, "'nowhere'"), (_cycle, "'back'"),
                                          (_unknown_op, "No Op registered for Bogus")])
def test_check_blocks_a_model_the_checker_rejects_with_the_reason(tmp_path: Path, make, reason):
    model = make(tmp_path / "bad.onnx")
    result = invoke("check", model)
    assert result.exit_code == 1
    assert "READY" not in result.stdout and "INVALID" in result.stdout
    errors = [line for line in result.stderr.splitlines()
              if line.startswith("scatter-rewrite: error:")]
    assert len(errors) == 1, result.stderr
    assert "fails onnx.checker" in errors[0] and reason in errors[0], result.stderr
    # the other verbs reject it too
    assert invoke("upgrade", model, "-o", tmp_path / "out.onnx").exit_code == 1


def test_a_warning_is_printed_once(tmp_path: Path):
    model = _undefined_input(tmp_path / "bad.onnx")
    result = invoke("check", model)
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == len(set(warnings)), result.stderr


def test_check_says_a_custom_mode_output_needs_the_custom_ops(tmp_path: Path):
    model = save(scatter_model("ScatterElements", opset=18, reduction="max"), tmp_path / "m.onnx")
    lowered = tmp_path / "m.lowered.onnx"
    assert invoke("lower", model, "--opset", "13", "--mode", "custom").exit_code == 0
    result = invoke("check", lowered, "--target", "opset-13")
    assert "scatter_rewrite.custom_ops.register" in result.stderr
    assert "custom_ops.register" not in invoke("check", model, "--target", "opset-18").stderr


def test_a_model_with_nothing_to_rewrite_is_said_so_and_still_written(tmp_path: Path):
    plain = save(scatter_model("ScatterElements", opset=16), tmp_path / "plain.onnx")
    legacy = save(scatter_model("Scatter", opset=10), tmp_path / "legacy.onnx")
    one = invoke("upgrade", plain)
    assert one.exit_code == 0
    assert "nothing rewritten" in one.stdout
    assert one.stdout.rstrip().splitlines()[-1].startswith("UNCHANGED")
    assert "PASSED" not in one.stdout and "validation:" not in one.stdout
    assert (tmp_path / "plain.upgraded.onnx").exists()
    batch = invoke("upgrade", plain, legacy, "-o", f"{tmp_path / 'out'}/")
    assert batch.exit_code == 0
    assert batch.stdout.rstrip().splitlines()[-1] == (
        f"2 models: 1 PASSED, 1 UNCHANGED (unchanged: nothing to rewrite in {plain})")
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["legacy.upgraded.onnx", "plain.upgraded.onnx"]


def test_no_initializer_the_rewrite_stopped_using_is_left(tmp_path: Path):
    source = DATA / "torch_trt" / "index_put_dynamo18.onnx"

    def unused(model: ir.Model) -> set[str]:
        return {name for name, v in model.graph.initializers.items() if not v.uses()} - {
            v.name for v in model.graph.outputs}

    assert not unused(ir.load(source))
    out = tmp_path / "out.onnx"
    result = invoke("tensorrt", source, "--trt-version", "8.6", "-o", out)
    assert result.exit_code == 0, result.output
    assert not unused(ir.load(out))
    assert "initializer(s) the rewrite no longer uses removed" in result.stdout


def test_no_node_the_rewrite_left_unread_is_left_but_the_models_own_dead_nodes_stay(tmp_path):
    """lower reads the GNN index before its Expand (row keys): the Expand's shape chain, and a
    Constant the lowering built and did not use, computed what nothing read (onnxruntime warned of
    each on load). A dead node of the model's own is not the rewrite's to remove."""
    model = onnx.load(DATA / "torch" / "gnn_max_layer_dynamo18.onnx")
    model.graph.node.append(onnx.helper.make_node("Neg", ["x"], ["unread_by_design"], name="own"))
    source = tmp_path / "gnn.onnx"
    onnx.save(model, source)

    def dead(path: Path) -> set[str]:
        graph = ir.load(path).graph
        return {node.name for node in graph
                if not any(v.uses() or v.is_graph_output() for v in node.outputs)}

    assert dead(source) == {"own"}
    out = tmp_path / "out.onnx"
    result = invoke("lower", source, "--opset", "13", "-o", out)
    assert result.exit_code == 0, result.output
    assert dead(out) == {"own"}


def test_a_library_log_line_is_formatted_on_one_line():
    try:
        raise ValueError("bad shape\n  at node x")
    except ValueError:
        import sys

        message = "Shape inference failed: %s. Model is left unchanged"
        record = logging.LogRecord("onnx_ir.passes.common.shape_inference", logging.WARNING,
                                   __file__, 1, message, None, sys.exc_info())
    line = LineFormatter().format(record)
    assert line == ("scatter-rewrite: warning: onnx_ir.passes.common.shape_inference: Shape "
                    "inference failed: bad shape at node x. Model is left unchanged")


@pytest.mark.parametrize("verb", [["lower", "--opset", "17"], ["check", "--target", "opset-17"]])
def test_another_librarys_warning_is_said_only_under_v(tmp_path: Path, verb: list[str]):
    """onnx_ir warns when it loads a model reading an undeclared value: the tool's own error says
    what is wrong with the model; the loader's words are for -v (in the command's own process,
    where its logging set-up is the one that writes stderr)."""
    model = save(reads_an_undeclared_value(), tmp_path / "m.onnx")

    def run(*extra):
        return subprocess.run([sys.executable, "-m", "scatter_rewrite", verb[0], str(model),
                               *verb[1:], *extra], capture_output=True, text=True, timeout=300)

    plain, verbose = run(), run("-v")
    assert plain.returncode == verbose.returncode == 1
    assert "still create a new input" not in plain.stderr and "onnx_ir" not in plain.stderr
    assert plain.stderr.startswith("scatter-rewrite: error: ") and "'ghost'" in plain.stderr
    assert "we will still create a new input" in verbose.stderr and "onnx_ir" in verbose.stderr


def test_the_check_table_in_an_80_column_pipe_keeps_words_whole(tmp_path: Path):
    model = save(scatter_model("ScatterND", opset=18, reduction="add", indices_shape=(2, 1),
                               updates_shape=(2, 5)), tmp_path / "m.onnx")
    result = invoke("check", model, "--target", "tensorrt-8.6", terminal_width=80)
    table = result.stdout.split("fix: ")[0]
    assert "scatter-rewrite" in table and "--trt-version" in table
    for line in table.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 5 and cells[4]:  # the fix column: whole words only
            whole = ("scatter-rewrite", "tensorrt", "--trt-version", "8.6", "none", "known", "-")
            assert all(word in whole for word in cells[4].split()), line


def test_progress_on_a_terminal_names_each_pass(tmp_path: Path, monkeypatch):
    from rich.console import Console

    screen = io.StringIO()
    monkeypatch.setattr(printing, "stderr_console",
                        lambda: Console(file=screen, force_terminal=True, width=100))
    # (the runner's stderr is a pipe)
    monkeypatch.setattr(printing, "may_be_terminal", lambda stream: True)
    steps = []
    real = rewriting.pass_progress

    def recording(model):
        manager = real(model)

        class Recorder:
            def __enter__(self):
                update = manager.__enter__()
                return None if update is None else lambda step: (steps.append(step), update(step))

            def __exit__(self, *exc):
                return manager.__exit__(*exc)

        return Recorder()

    monkeypatch.setattr(rewriting, "pass_progress", recording)
    model = save(scatter_model("ScatterElements", opset=18, reduction="add"), tmp_path / "m.onnx")
    assert invoke("lower", model).exit_code == 0
    assert steps == ["lower", "validating"]
    assert "m.onnx: " in screen.getvalue()  # the spinner's line was drawn
    screen.seek(0)
    screen.truncate()
    monkeypatch.setattr(printing, "stderr_console",
                        lambda: Console(file=screen, force_terminal=False))
    steps.clear()
    again = invoke("lower", model, "-o", tmp_path / "again.onnx")
    assert again.exit_code == 0, again.output
    assert not steps and not screen.getvalue()  # not a terminal: nothing


def test_a_scatter_tensorrt_cannot_make_ready_is_a_refusal(tmp_path: Path):
    from onnx import TensorProto

    model = save(scatter_model("ScatterElements", opset=18, data_type=TensorProto.UINT64),
                 tmp_path / "m.onnx")
    result = invoke("tensorrt", model)
    assert result.exit_code == 1
    assert result.stderr.startswith("scatter-rewrite: error: cannot prepare for TensorRT 10: ")
    assert "UINT64 data" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # nothing written


def test_check_json_of_an_invalid_model(tmp_path: Path):
    import json

    result = invoke("check", _undefined_input(tmp_path / "bad.onnx"), "--json")
    assert result.exit_code == 1
    (shown,) = json.loads(result.stdout)["models"]
    assert shown["ready"] is False and "fails onnx.checker" in shown["invalid"]
    assert shown["status"] == "INVALID" and shown["findings"] == []


def _good_and_unreadable(tmp_path: Path) -> tuple[Path, Path]:
    good = save(scatter_model("ScatterElements", opset=16, reduction="add"), tmp_path / "good.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    return good, bad


def test_check_reports_a_good_model_beside_an_unreadable_one(tmp_path: Path):
    good, bad = _good_and_unreadable(tmp_path)
    missing = tmp_path / "missing.onnx"
    result = invoke("check", good, bad, missing, "--target", "opset-16")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert f"{good}: READY for opset-16 (1 scatter node(s), 0 node(s) blocked as it is)" in lines
    assert any(line.startswith(f"{bad}: UNREADABLE: not a readable ONNX model") for line in lines)
    assert any(line.startswith(f"{missing}: UNREADABLE: no such file") for line in lines)
    assert lines[-1] == "3 models: 1 READY, 2 UNREADABLE"
    errors = result.stderr.strip().splitlines()
    assert [e.split(": ")[:3] for e in errors] == [["scatter-rewrite", "error", str(bad)],
                                                  ["scatter-rewrite", "error", str(missing)]]


def test_check_json_is_one_document_with_an_unreadable_model(tmp_path: Path):
    import json

    good, bad = _good_and_unreadable(tmp_path)
    result = invoke("check", good, bad, "--target", "opset-16", "--json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert [(Path(m["model"]).name, m["status"]) for m in document["models"]] == [
        ("good.onnx", "READY"), ("bad.onnx", "UNREADABLE")]
    assert "not a readable ONNX model" in document["models"][1]["unreadable"]
    assert document["models"][0]["unreadable"] is None
    assert document["summary"] == {"models": 2, "ready": 1, "fixable": 0, "blocked": 0,
                                   "invalid": 0, "unreadable": 1, "exit_code": 1}
    alone = invoke("check", bad, "--json")  # one model: one document too
    assert alone.exit_code == 1
    assert [m["status"] for m in json.loads(alone.stdout)["models"]] == ["UNREADABLE"]
    assert len(alone.stderr.strip().splitlines()) == 1


def test_check_reports_a_folder_model_by_model_and_a_folder_without_models(tmp_path: Path):
    import json

    (tmp_path / "models" / "sub").mkdir(parents=True)
    good = save(scatter_model("ScatterElements", opset=16, reduction="add"),
                tmp_path / "models" / "good.onnx")
    bad = tmp_path / "models" / "sub" / "bad.onnx"
    bad.write_bytes(b"not a model")
    empty = tmp_path / "empty"
    empty.mkdir()
    document = invoke("check", tmp_path / "models", empty, "--target", "opset-16", "--json")
    assert document.exit_code == 1
    assert [(m["model"], m["status"]) for m in json.loads(document.stdout)["models"]] == [
        (str(good), "READY"), (str(bad), "UNREADABLE"), (str(empty), "UNREADABLE")]
    assert json.loads(document.stdout)["models"][2]["unreadable"] == (
        f"{empty}: the folder holds no .onnx model")
    text = invoke("check", tmp_path / "models", empty, "--target", "opset-16")
    assert text.exit_code == 1
    assert f"{empty}: UNREADABLE: the folder holds no .onnx model" in text.stdout.splitlines()
    assert text.stdout.splitlines()[-1] == "3 models: 1 READY, 2 UNREADABLE"
    assert len(text.stderr.strip().splitlines()) == 2  # (one error line per entry not READY)


def test_a_single_unreadable_model_is_one_error_line_for_check(tmp_path: Path):
    _, bad = _good_and_unreadable(tmp_path)
    result = invoke("check", bad)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith(f"scatter-rewrite: error: {bad}: not a readable ONNX model")
    assert len(result.stderr.strip().splitlines()) == 1


def _terminal_screen(monkeypatch, terminal: bool = True) -> io.StringIO:
    """stderr as a terminal for the progress display: a wide console writing to the returned
    buffer (wide so that no column is cut: what it shows does not depend on the width)."""
    from rich.console import Console

    screen = io.StringIO()
    monkeypatch.setattr(printing, "stderr_console",
                        lambda: Console(file=screen, force_terminal=terminal, width=300))
    monkeypatch.setattr(printing, "may_be_terminal", lambda stream: True)  # (a pipe here)
    return screen


def _plain(screen: io.StringIO) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())


def test_a_batch_shows_its_progress_on_a_terminal(tmp_path: Path, monkeypatch):
    models = [save(scatter_model("ScatterElements", opset=18, reduction=r), tmp_path / f"{r}.onnx")
              for r in ("add", "max")]
    screen = _terminal_screen(monkeypatch)
    result = invoke("lower", *models, "-o", f"{tmp_path / 'out'}/")
    assert result.exit_code == 0, result.output
    shown = _plain(screen)
    # (its first line, drawn when it starts, and its last, drawn before it is erased)
    assert "lower 0/2 models 0:00:00" in shown and "lower 2/2 models " in shown, shown
    assert result.stdout.splitlines()[-1] == "2 models: 2 PASSED"


@pytest.mark.parametrize("how", ["-q", "not a terminal"])
def test_a_batch_shows_no_progress_under_q_or_off_a_terminal(tmp_path: Path, monkeypatch, how):
    models = [save(scatter_model("ScatterElements", opset=18, reduction=r), tmp_path / f"{r}.onnx")
              for r in ("add", "max")]
    screen = _terminal_screen(monkeypatch, terminal=how != "not a terminal")
    result = invoke("lower", *models, "-o", f"{tmp_path / 'out'}/", *(["-q"] * (how == "-q")))
    assert result.exit_code == 0, result.output
    assert screen.getvalue() == ""


def test_the_batch_progress_counts_and_names_the_models_in_progress():
    from rich.console import Console

    screen = io.StringIO()
    with printing.BatchProgress("fold", 3, Console(file=screen, force_terminal=True,
                                                   width=300)) as progress:
        progress.started("a.onnx")
        progress.started("b.onnx")
        assert (progress.task.completed, progress.task.total) == (0, 3)
        assert progress.task.fields["current"] == "a.onnx, b.onnx"
        progress.finished("a.onnx")
        assert progress.task.completed == 1 and progress.task.fields["current"] == "b.onnx"
    assert "fold 1/3 models" in _plain(screen)


def test_the_batch_summary_counts_every_status():
    from types import SimpleNamespace as Outcome

    outcomes = [Outcome(status=s, input=f"m{i}.onnx") for i, s in
                enumerate(["FAILED", "PASSED", "UNCHANGED", "PASSED", "UNRUNNABLE"])]
    assert printing.batch_summary(outcomes) == (
        "5 models: 2 PASSED, 1 UNCHANGED, 1 UNRUNNABLE, 1 FAILED "
        "(unchanged: nothing to rewrite in m2.onnx)")
    assert printing.status_counts(["BLOCKED", "READY", "UNREADABLE", "READY"]) == (
        "4 models: 2 READY, 1 BLOCKED, 1 UNREADABLE")
    assert printing.status_counts(["READY"]) == "1 model: 1 READY"
