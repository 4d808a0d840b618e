"""A target's own runtime, run on a model: which one (:class:`Runtime`, declared in the target's
module as ``Target.runner``), in which python (the user's own where the runtime is importable
there, told by ``importlib.util.find_spec``, never by importing it; or the python of another venv
the caller names), and how: its runner (``targets/runners/run_*.py``) as a subprocess, which
converts and runs the model and writes its outputs. A subprocess even in the user's own python: a
runtime that crashes (MNN's SIGBUS) fails the run, not the caller, and MNN's runner blocks the
network in its own process only.

This module imports neither numpy, subprocess nor any runtime at import: the command line starts
without them.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from pathlib import Path

__all__ = ["RUNNERS", "RUN_LIMIT_S", "Ran", "Refused", "Runtime", "RunnerFailed", "run"]

RUNNERS = Path(__file__).parent / "runners"
_REFUSED = 3  # runners/_runner_io.py's REFUSED: the runtime refused the model
RUN_LIMIT_S = 900  # a runtime that hangs fails the run instead of holding it


@dataclasses.dataclass(frozen=True)
class Runtime:
    """The runtime a target's models run in, as a runner runs it."""

    name: str  # as messages name it: "OpenVINO" (the runner says its version)
    runner: str  # its script in targets/runners/
    # The package importlib.util.find_spec looks for in the user's python; None: the runtime runs
    # only in a venv of its own, whose python the caller names (onnx2tf pins onnx, numpy, ...).
    module: str | None
    installs: str  # what installs it (said where it is not found)
    # It computes int64 as int32 (MNN): its int32 outputs are widened to the original's int64
    # (exact; a value beyond int32's range then shows as a difference).
    int64_as_int32: bool = False

    def python(self, given: str | os.PathLike | None = None) -> str | None:
        """The python to run the runner in: ``given``, else the caller's own where the runtime is
        importable there, else None."""
        if given is not None:
            return os.fspath(given)
        if self.module is not None and importlib.util.find_spec(self.module) is not None:
            return sys.executable
        return None

    def missing(self) -> str:
        """Why it does not run here, said for the validation's summary (runtime_python= names the
        python that has it)."""
        where = (f"its package {self.module!r} is not importable here" if self.module
                 else "it runs only in a venv of its own")
        from scatter_rewrite.said import param, said

        return said(f"not run in {self.name}: {where}; ", param("runtime_python"),
                    f" names a python that has it ({self.installs})")


class Refused(Exception):
    """The runtime (its converter or compiler) refused the model: the message is its reason."""


class RunnerFailed(Exception):
    """The runner failed otherwise (the runtime crashed, or the python given cannot run it)."""


@dataclasses.dataclass
class Ran:
    outputs: list  # numpy arrays, in the model's output order
    runtime: str  # the runtime and its version, as the runner says it ("OpenVINO 2026.4.1")


def run(runtime: Runtime, model: str | os.PathLike, inputs: dict, python: str | os.PathLike,
        workdir: str | os.PathLike, options: tuple[str, ...] = ()) -> Ran:
    """``model``'s outputs in ``runtime``, run by its runner in ``python`` with ``workdir`` (an
    existing folder) for its files; Refused with the runtime's reason, RunnerFailed otherwise.
    ``options``: the runner's own (run_litert.py's ``--onnx2tf-default-layout``)."""
    import subprocess

    import numpy as np

    workdir = Path(workdir)
    inputs_path, outputs_path = workdir / "inputs.npz", workdir / "outputs.npz"
    np.savez(inputs_path, **inputs)
    # (absolute: the runner runs in ``workdir``, and the model given is often staged beside a
    # relative output path)
    python = os.fspath(python)
    python = os.path.abspath(python) if os.sep in python else python
    model = os.path.abspath(model)
    env = dict(os.environ)
    # (not realpath: every venv's python links to the same interpreter)
    if os.path.dirname(os.path.abspath(python)) != os.path.dirname(os.path.abspath(sys.executable)):
        # another venv: none of this one's paths; its commands first, as its activate script
        # does (onnx2tf runs `onnxsim` by name)
        env = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env["PATH"] = os.pathsep.join([str(Path(python).parent), env.get("PATH", "")])
    env.update(TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONDONTWRITEBYTECODE="1")
    command = [python, str(RUNNERS / runtime.runner), model, str(inputs_path),
               str(outputs_path), *options]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=workdir,
                              timeout=RUN_LIMIT_S, check=False)
    except OSError as e:
        raise RunnerFailed(f"{python} cannot run {runtime.runner}: {e}") from e
    except subprocess.TimeoutExpired as e:
        raise RunnerFailed(f"{runtime.name} did not finish within {RUN_LIMIT_S} s") from e
    lines = done.stderr.splitlines()
    named = [line.removeprefix("RUNTIME: ") for line in lines if line.startswith("RUNTIME: ")]
    if done.returncode == _REFUSED:
        reasons = [line.removeprefix("REFUSED: ") for line in lines if line.startswith("REFUSED: ")]
        raise Refused(reasons[-1] if reasons else done.stderr[-2000:])
    if done.returncode != 0:
        raise RunnerFailed(f"{runtime.runner} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    with np.load(outputs_path) as npz:
        outputs = [npz[key] for key in npz.files]
    return Ran(outputs, named[-1] if named else runtime.name)
