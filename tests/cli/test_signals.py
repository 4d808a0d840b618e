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

# The CLI in a process stopped at chosen points of its run (argv: the points, comma-separated, the
# signal's name, then the command). Each point, but "held", raises the signal in the main thread
# there (as a signal from outside lands at any point); at "held" the staged result waits, checked
# never, until a signal from outside comes, so the run cannot end before it; at "swallowed" the
# signal's exception is lost where it is raised.
_STOPPED_AT = """
import shutil, signal, sys, tempfile, time
from scatter_rewrite import cli, model_io, pipeline

points, signum = set(sys.argv[1].split(",")), signal.Signals[sys.argv[2]]
make_folder, check, remove, rename, make_folders = (
    tempfile.mkdtemp, pipeline.check_model, shutil.rmtree, model_io.replace_file,
    model_io._make_folders)

def staging(path):
    return str(path).rpartition("/")[2].startswith(".scatter-rewrite-")

def made(*args, **kwargs):
    folder = make_folder(*args, **kwargs)
    if "made" in points and staging(folder):
        signal.raise_signal(signum)
    return folder

def folders_made(folder):
    created = make_folders(folder)
    if "folders" in points:
        signal.raise_signal(signum)
    return created

def checked(*args, **kwargs):
    if "checked" in points:
        signal.raise_signal(signum)
    if "swallowed" in points:  # as C code that clears the errors it meets loses the exception
        try:
            signal.raise_signal(signum)
        except BaseException:
            pass
    while "held" in points:
        time.sleep(0.01)
    return check(*args, **kwargs)

def removed(path, *args, **kwargs):
    if "removed" in points and staging(path):
        signal.raise_signal(signum)
    return remove(path, *args, **kwargs)

def renamed(new, target, like=None):
    rename(new, target, like)
    if "renamed" in points and target.name == "out.onnx":
        signal.raise_signal(signum)

(tempfile.mkdtemp, pipeline.check_model, shutil.rmtree, model_io.replace_file,
 model_io._make_folders) = made, checked, removed, renamed, folders_made
sys.argv = ["scatter-rewrite", *sys.argv[3:]]
cli.main()
"""

_NOTHING_LEFT = ("scatter-rewrite: error: stopped by {}: no output of a model in progress is left "
                 "(models finished before it are written)")
_WRITTEN = ("scatter-rewrite: error: stopped by {} once out.onnx was written: it is whole "
            "(validated as asked), though what the run prints and reports after it may be cut short")


def _model(tmp_path: Path, name: str = "m.onnx") -> Path:
    path = tmp_path / name
    onnx.save(scatter_model("ScatterElements", opset=16, reduction="add", data_shape=(6, 5),
                            indices_shape=(6, 5)), path)
    return path


def _lower(tmp_path: Path, points: str, signum: signal.Signals, output: str = "out.onnx"
           ) -> subprocess.CompletedProcess:
    _model(tmp_path)
    return subprocess.run([sys.executable, "-c", _STOPPED_AT, points, signum.name, "lower",
                           "m.onnx", "-o", output, "--opset", "13"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def _stop_while_staged(command: list[str], cwd: Path, signum: int, staged_in: Path | None = None
                       ) -> subprocess.CompletedProcess:
    """Run the CLI in ``cwd``, its staged results held (never checked) until a signal comes; send
    ``signum`` once a staging folder appears in ``staged_in`` (default ``cwd``), return the
    result."""
    folder = staged_in or cwd
    process = subprocess.Popen([sys.executable, "-c", _STOPPED_AT, "held", "SIGTERM", *command],
                               cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while process.poll() is None and not (folder.is_dir()
                                              and list(folder.glob(".scatter-rewrite-*"))):
            time.sleep(0.002)
        assert process.poll() is None, process.communicate()
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
    model = _model(tmp_path)
    done = _stop_while_staged(["lower", model.name, "-o", "out.onnx", "--opset", "13"], tmp_path,
                              signum)
    assert done.returncode == 128 + signum
    assert done.stderr.strip().splitlines() == [_NOTHING_LEFT.format(signum.name)], done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


@pytest.mark.parametrize("points", ["made", "checked", "checked,removed", "swallowed"])
def test_a_signal_at_any_point_of_a_run_leaves_no_staging_folder_and_no_output(tmp_path: Path,
                                                                               points: str):
    """As the staging folder is made, as the result is checked, and again while the folder of the
    run it stopped is removed, or where its exception is lost (the rename asks again): nothing
    of the model is left."""
    done = _lower(tmp_path, points, signal.SIGTERM)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert done.stderr.splitlines() == [_NOTHING_LEFT.format("SIGTERM")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_a_signal_as_the_output_folders_are_made_leaves_none_of_them(tmp_path: Path):
    done = _lower(tmp_path, "folders", signal.SIGTERM, output="out/sub/out.onnx")
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert done.stderr.splitlines() == [_NOTHING_LEFT.format("SIGTERM")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


@pytest.mark.slow
def test_a_signal_stops_a_batch_and_its_workers_cleanly(tmp_path: Path):
    for name in ("a.onnx", "b.onnx"):
        _model(tmp_path, name)
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


@pytest.mark.parametrize("point", ["renamed", "removed"])
def test_a_signal_once_the_one_model_is_written_says_it_is_written(tmp_path: Path, point: str):
    """As the result is renamed into place, or as its staging folder is removed afterwards: the
    model is whole, the stop held back until the step is done, and said."""
    done = _lower(tmp_path, point, signal.SIGINT)
    assert done.returncode == 128 + signal.SIGINT, done.stderr
    assert done.stdout == ""  # stopped before its summary
    assert done.stderr.splitlines() == [_WRITTEN.format("SIGINT")]
    onnx.checker.check_model(onnx.load(tmp_path / "out.onnx"), full_check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "out.onnx"]
