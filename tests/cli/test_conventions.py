"""The conventions people carry over from other tools: ``-`` for standard input and output, ``-h``,
``-q``, ``python -m scatter_rewrite``, exit 2 for bad usage (1 for a model that fails or is
blocked), status words that are always true, help that names the real suffixes, one spelling per
verb, and a stop signal that does not hide what was done."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
import typer.main

from scatter_rewrite.cli import app
from scatter_rewrite.testing import external_weights_model, scatter_model
from scatter_rewrite.verbs import VERBS
from tests.helpers.cli import invoke

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(scatter_model("ScatterElements", opset=18, reduction="max"), path)
    return path


def one_error_line(result, code: int) -> str:
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scatter-rewrite: error: "), result.stderr
    return lines[0]


# ---- -h, -q, python -m ---------------------------------------------------------------------------

@pytest.mark.parametrize("args", [["-h"], ["lower", "-h"], ["check", "-h"]])
def test_h_is_help(args: list[str]):
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert "Usage: scatter-rewrite" in result.stdout and "--help" in result.stdout


def test_python_m_scatter_rewrite_is_the_command(model: Path):
    from scatter_rewrite import __version__

    done = subprocess.run([sys.executable, "-m", "scatter_rewrite", "--version"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == f"scatter-rewrite {__version__}\n", done
    done = subprocess.run([sys.executable, "-m", "scatter_rewrite", "lower", str(model),
                           "--opset", "8"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("scatter-rewrite: error: --opset 8")


def test_quiet_prints_nothing_but_errors(model: Path, tmp_path: Path):
    result = invoke("lower", model, "-q", "-o", tmp_path / "out.onnx")
    assert result.exit_code == 0 and result.stdout == "" and result.stderr == ""
    assert (tmp_path / "out.onnx").is_file()
    other = tmp_path / "n.onnx"
    onnx.save(scatter_model("ScatterElements", opset=16), other)
    batch = invoke("to-scatternd", model, other, "--quiet", "-o", f"{tmp_path / 'nd'}/")
    assert batch.exit_code == 0 and batch.stdout == "", batch.output
    failed = invoke("lower", tmp_path / "missing.onnx", "-q")
    assert one_error_line(failed, 1) and failed.stdout == ""
    check = invoke("check", model, "--target", "opset-13", "-q")
    assert check.exit_code == 1 and check.stdout == ""  # blocked: said by the exit and on stderr


# ---- exit codes ----------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["check", "{m}", "--target", "trt"],  # an unknown target
    ["check", "{m}", "--target", "opset-99"],  # out of range
    ["lower", "{m}", "--opset", "8"],
    ["lower", "{m}", "--opset", "thirteen"],  # the wrong type
    ["lower", "{m}", "--mode", "fast"],
    ["lower", "{m}", "--rtol", "-1"],
    ["lower", "{m}", "--atol", "nan"],
    ["fold", "{m}", "--size-limit", "-1"],
    ["tensorrt", "{m}", "--trt-version", "9"],
    ["tensorrt", "{m}", "--fix-dim", "N=0"],
    ["upgrade", "{m}", "--in-place", "-o", "{m}.out.onnx"],
    ["upgrade", "{m}", "-o", "{m}"],  # the input, without --in-place
])
def test_bad_usage_exits_2_with_one_line_and_nothing_written(model: Path, args: list[str]):
    before = sorted(model.parent.iterdir())
    one_error_line(invoke(*[a.replace("{m}", str(model)) for a in args]), 2)
    assert sorted(model.parent.iterdir()) == before


def test_an_option_a_model_of_a_batch_cannot_take_is_bad_usage(tmp_path: Path):
    """As for one model: a --fix-dim naming a dim the models lack exits 2, nothing written."""
    folder = tmp_path / "models"
    folder.mkdir()
    for name in ("a", "b"):
        onnx.save(scatter_model("ScatterElements", opset=18, reduction="max"), folder / f"{name}.onnx")
    before = sorted(folder.iterdir())
    result = invoke("tensorrt", folder, "--fix-dim", "no_such_dim=4")
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "--fix-dim" in result.stderr and "no_such_dim" in result.stderr
    assert sorted(folder.iterdir()) == before


def test_a_model_that_fails_or_is_blocked_exits_1_and_success_0(model: Path, tmp_path: Path):
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(model.read_bytes()[:40])
    one_error_line(invoke("lower", truncated), 1)
    assert invoke("check", model, "--target", "opset-13").exit_code == 1  # blocked
    assert invoke("check", model, "--target", "opset-18").exit_code == 0
    assert invoke("lower", model).exit_code == 0


def test_the_exit_codes_are_one_table_in_the_docs():
    text = (ROOT / "docs" / "command-line.md").read_text()
    table = re.search(r"\| exit \| meaning \|\n *\|---\|---\|\n((?: *\|.*\|\n)+)", text)
    assert table, "docs/command-line.md lacks the exit-code table"
    codes = [row.split("|")[1].strip() for row in table.group(1).splitlines()]
    assert codes == ["0", "1", "2", "128 + N"], codes


# ---- status words --------------------------------------------------------------------------------

def test_no_validate_is_written_in_a_batch_too(model: Path, tmp_path: Path):
    other = tmp_path / "n.onnx"
    onnx.save(scatter_model("ScatterElements", opset=16, reduction="add"), other)
    result = invoke("lower", model, other, "--no-validate", "-o", f"{tmp_path / 'out'}/")
    assert result.exit_code == 0, result.output
    assert "PASSED" not in result.stdout
    assert result.stdout.count("\nWRITTEN in ") == 2
    assert result.stdout.splitlines()[-1] == "2 models: 2 WRITTEN"
    validated = invoke("lower", model, other, "-o", f"{tmp_path / 'checked'}/")
    assert validated.stdout.splitlines()[-1] == "2 models: 2 PASSED"
    assert "WRITTEN" not in validated.stdout


# ---- help and spelling ---------------------------------------------------------------------------

def test_each_verbs_help_names_its_real_suffix():
    commands = typer.main.get_command(app).commands
    for verb in VERBS.values():
        (output,) = [p for p in commands[verb.command].params if p.name == "output"]
        assert f"<stem>.{verb.suffix}.onnx" in output.help, (verb.name, output.help)
        assert "<verb>" not in output.help


def test_the_docs_list_every_suffix():
    text = (ROOT / "docs" / "command-line.md").read_text()
    for verb in VERBS.values():
        assert f"`<stem>.{verb.suffix}.onnx`" in text, verb.suffix


def test_to_scatternd_is_spelled_as_its_command_in_every_report(model: Path, tmp_path: Path):
    report = tmp_path / "r.json"
    result = invoke("to-scatternd", model, "--report", report)
    assert result.exit_code == 0, result.output
    assert "\n  to-scatternd: 1 rewritten, 0 left alone\n" in result.stdout
    data = json.loads(report.read_text())
    assert data["verb"] == "to-scatternd" and data["models"][0]["verb"] == "to-scatternd"
    assert [p["pass"] for p in data["models"][0]["passes"]] == ["to-scatternd"]
    said = (result.output + report.read_text()).replace(str(tmp_path), "")
    assert "to_scatternd" not in said


# ---- - for standard input and output -------------------------------------------------------------

def test_a_model_through_standard_input_and_output(model: Path, tmp_path: Path):
    result = invoke("lower", "-", "-o", "-", input=model.read_bytes())
    assert result.exit_code == 0, result.stderr
    assert invoke("lower", model, "-o", tmp_path / "file.onnx").exit_code == 0
    assert result.stdout_bytes == (tmp_path / "file.onnx").read_bytes()  # the model alone
    lowered = onnx.load_from_string(result.stdout_bytes)
    assert [n.op_type for n in lowered.graph.node if n.op_type.startswith("Scatter")] == ["ScatterND"]
    messages = result.stderr.splitlines()  # every message on stderr, naming - as the user did
    assert messages[0] == "- -> -" and messages[-1].startswith("PASSED in ")
    assert "stdin.onnx" not in result.stderr and "stdout.onnx" not in result.stderr
    to_file = invoke("lower", "-", "-o", tmp_path / "from_stdin.onnx", input=model.read_bytes())
    assert to_file.exit_code == 0 and to_file.stdout.splitlines()[0] == \
        f"- -> {tmp_path / 'from_stdin.onnx'}"
    assert (tmp_path / "from_stdin.onnx").read_bytes() == (tmp_path / "file.onnx").read_bytes()


def test_a_model_on_standard_input_that_is_not_one_is_one_line(tmp_path: Path):
    line = one_error_line(invoke("lower", "-", "-o", "-", input=b"not a model"), 1)
    assert "stdin.onnx" not in line and "scatter-rewrite-" not in line, line
    one_error_line(invoke("lower", "-", "-o", "-", input=b""), 1)


def test_check_reads_a_model_from_standard_input(model: Path):
    result = invoke("check", "-", "--target", "opset-13", "--json", input=model.read_bytes())
    assert result.exit_code == 1, result.output  # blocked, as the file is
    json.loads(result.stdout)
    assert '"model": "-"' in result.stdout  # (whatever the layout around each model's report)
    assert "stdin.onnx" not in result.output
    one_error_line(invoke("check", "-", model, input=model.read_bytes()), 2)


def test_a_report_on_standard_output(model: Path):
    result = invoke("lower", model, "--report", "-")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # stdout is the report alone
    assert report["verb"] == "lower" and report["models"][0]["status"] == "PASSED"
    assert result.stderr.splitlines()[-1].startswith("PASSED in ")


@pytest.mark.parametrize("args, said", [
    (["lower", "-", "{m}", "-o", "{d}/"], "standard input"),
    (["lower", "-", "--in-place"], "--in-place"),
    (["lower", "-"], "-o"),
    (["lower", "{m}", "{m2}", "-o", "-"], "one model"),
    (["lower", "{d}", "-o", "-"], "one model"),
    (["lower", "{m}", "-o", "-", "--report", "-"], "both write to standard output"),
])
def test_dash_where_it_cannot_apply_is_bad_usage(model: Path, tmp_path: Path, args, said):
    other = tmp_path / "m2.onnx"
    onnx.save(scatter_model("ScatterElements", opset=16), other)
    before = sorted(tmp_path.iterdir())
    filled = [a.replace("{m2}", str(other)).replace("{m}", str(model)).replace("{d}", str(tmp_path))
              for a in args]
    result = invoke(*filled, input=model.read_bytes())
    assert said in one_error_line(result, 2)
    assert result.stdout == "" and sorted(tmp_path.iterdir()) == before


def test_external_data_to_standard_output_is_bad_usage(tmp_path: Path):
    source = external_weights_model(tmp_path, 64 * 1024)
    before = sorted(tmp_path.iterdir())
    result = invoke("upgrade", source, "-o", "-")
    assert "external data" in one_error_line(result, 2)
    assert result.stdout == "" and sorted(tmp_path.iterdir()) == before


# ---- stopped -------------------------------------------------------------------------------------

def test_a_batch_stopped_reports_the_models_it_finished(tmp_path: Path):
    """One small model and one big one rewritten in parallel; SIGINT once the parent has the small
    one's outcome (it says so under -v) and the big one is staged: the small one is reported (it
    is written), the big one is not, and the stop is said, never an OSError. Synchronised on what
    the run prints and writes, not on time."""
    import threading

    small = tmp_path / "small.onnx"
    onnx.save(scatter_model("ScatterElements", opset=18, reduction="max"), small)
    big = tmp_path / "big.onnx"
    size = 1200
    onnx.save(scatter_model("ScatterElements", opset=16, reduction="add", data_shape=(size, size),
                            indices_shape=(size, size)), big)
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "scatter_rewrite", "lower", str(small),
                                str(big), "-o", f"{out}/", "-v"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    small_finished = threading.Event()

    def read_stderr() -> None:
        for line in process.stderr:
            lines.append(line)
            if f"{small}: finished (1 of 2)" in line:
                small_finished.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        while process.poll() is None and not (small_finished.is_set()
                                              and list(out.glob(".scatter-rewrite-*"))):
            small_finished.wait(0.01)
        assert process.poll() is None, "the run ended before the big model was staged"
        process.send_signal(signal.SIGINT)
        process.wait(timeout=120)
        # (a worker left alive, waiting for work, would hold the pipes open)
        reader.join(timeout=120)
        assert not reader.is_alive(), "a worker outlived the batch: " + "".join(lines)[-3000:]
        stdout = process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
    stderr = "".join(lines)
    assert process.returncode == 130, stderr[-3000:]
    assert stdout.startswith(f"{small} -> {out / 'small.lowered.onnx'}\n"), stdout
    assert "\nPASSED in " in stdout and str(big) not in stdout
    assert "Bad file descriptor" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith("scatter-rewrite: error: stopped by SIGINT")
    assert sorted(p.name for p in out.iterdir()) == ["small.lowered.onnx"]


def test_a_stop_after_the_run_exits_128_plus_n_and_says_so(model: Path):
    """SIGINT while the process exits (after PASSED was printed, its output written)."""
    stop_at_exit = ("import atexit, os, signal, sys; "
                    "atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT)); "
                    "sys.argv[0] = 'scatter-rewrite'; "
                    "from scatter_rewrite.cli import main; main()")
    done = subprocess.run([sys.executable, "-c", stop_at_exit, "lower", str(model)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done
    assert done.stdout.splitlines()[-1].startswith("PASSED in ")
    assert done.stderr.strip().splitlines() == [
        "scatter-rewrite: error: stopped by SIGINT after the run ended: what it printed above "
        "stands"], done.stderr
    assert model.with_name("m.lowered.onnx").is_file()
