"""SIGINT, SIGTERM and SIGHUP stop a run cleanly: no staging folder, no output of the model in
progress, one line on stderr, the exit status of the signal (128 + its number)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest

from scatter_rewrite.testing import scatter_model

# Big enough that its result stays staged (checked, then validated) for a good part of a second.
SIZE = 1200


def _staged_model(tmp_path: Path, name: str = "m.onnx") -> Path:
    path = tmp_path / name
    onnx.save(scatter_model("ScatterElements", opset=16, reduction="add", data_shape=(SIZE, SIZE),
                            indices_shape=(SIZE, SIZE)), path)
    return path


def _stop_while_staged(command: list[str], cwd: Path, signum: int, staged_in: Path | None = None
                       ) -> subprocess.CompletedProcess:
    """Run the CLI in ``cwd``, send ``signum`` once a staging folder appears in ``staged_in``
    (default ``cwd``), return the result."""
    folder = staged_in or cwd
    process = subprocess.Popen([sys.executable, "-m", "scatter_rewrite.cli", *command], cwd=cwd,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while process.poll() is None and not (folder.is_dir()
                                              and list(folder.glob(".scatter-rewrite-*"))):
            time.sleep(0.002)
        assert process.poll() is None, "the run ended before its result was staged"
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT],
                         ids=lambda s: s.name)
def test_a_signal_mid_run_leaves_no_staging_folder_and_no_output(tmp_path: Path,
                                                                  signum: signal.Signals):
    model = _staged_model(tmp_path)
    done = _stop_while_staged(["lower", model.name, "-o", "out.onnx", "--opset", "13"], tmp_path,
                              signum)
    assert done.returncode == 128 + signum
    lines = done.stderr.strip().splitlines()
    assert lines == [f"scatter-rewrite: error: stopped by {signum.name}: no output of a model in "
                     "progress is left (models finished before it are written)"], done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


@pytest.mark.slow
def test_a_signal_stops_a_batch_and_its_workers_cleanly(tmp_path: Path):
    for name in ("a.onnx", "b.onnx"):
        _staged_model(tmp_path, name)
    out = tmp_path / "out"
    done = _stop_while_staged(["lower", "a.onnx", "b.onnx", "-o", "out/", "--opset", "13"],
                              tmp_path, signal.SIGTERM, staged_in=out)
    assert done.returncode == 128 + signal.SIGTERM
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "stopped by SIGTERM" in done.stderr
    # The folder made for the outputs goes too, unless a model finished before the signal: whole.
    assert not out.exists() or all(p.suffix == ".onnx" for p in out.iterdir())
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left in (["a.onnx", "b.onnx"], ["a.onnx", "b.onnx", "out"])


def test_a_stop_signal_waits_for_a_held_block_while_other_threads_run():
    """Staging a folder and renaming a result into place finish before a stop signal is raised,
    also once other threads (onnxruntime's) are running, which a per-thread signal mask does not
    hold the signal back from."""
    import os
    import threading

    from scatter_rewrite import model_io

    def handler(signum, frame):
        if not model_io.stop_deferred(signum):
            raise KeyboardInterrupt

    steps = []
    previous = signal.signal(signal.SIGTERM, handler)
    other = threading.Thread(target=time.sleep, args=(0.5,))
    other.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            with model_io._stop_signals_held():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.1)  # (the handler runs in this thread meanwhile)
                steps.append("the held block ended")
        assert steps == ["the held block ended"]
    finally:
        signal.signal(signal.SIGTERM, previous)
        other.join()


# The CLI in a process whose rename of the result into place raises SIGINT: the stop is held back
# until the rename is done, then raised before anything about the model is printed.
_STOPPED_ONCE_WRITTEN = """
import signal, sys
from scatter_rewrite import cli, model_io

renamed = model_io.replace_file

def rename_then_interrupt(new, target, like=None):
    renamed(new, target, like)
    if target.name == "out.onnx":
        signal.raise_signal(signal.SIGINT)

model_io.replace_file = rename_then_interrupt
sys.argv = ["scatter-rewrite", *sys.argv[1:]]
cli.main()
"""


def test_a_signal_once_the_one_model_is_written_says_it_is_written(tmp_path: Path):
    onnx.save(scatter_model("ScatterElements", opset=18, reduction="max", data_shape=(4, 3),
                            indices_shape=(5, 3)), tmp_path / "m.onnx")
    done = subprocess.run([sys.executable, "-c", _STOPPED_ONCE_WRITTEN, "lower", "m.onnx", "-o",
                           "out.onnx", "--opset", "13"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 128 + signal.SIGINT, done.stderr
    assert done.stdout == ""  # stopped before its summary
    assert done.stderr.splitlines() == [
        "scatter-rewrite: error: stopped by SIGINT once out.onnx was written: it is whole "
        "(validated as asked), though what the run prints and reports after it may be cut short"]
    onnx.checker.check_model(onnx.load(tmp_path / "out.onnx"), full_check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "out.onnx"]
