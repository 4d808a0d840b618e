"""Running a model in another runtime, each in a venv of its own (tests/runtimes/setup_venvs.sh builds
them; onnx2tf pins onnx, onnxruntime, numpy and tensorflow exactly, so never in the project's venv):
LiteRT through onnx2tf, OpenVINO's CPU plugin, Apache TVM's Relax. A runner script
(tests/runtimes/run_*.py) runs in that venv as a subprocess and writes the outputs; the test judges
them against onnxruntime on the original model with validation's own comparison.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from scatter_rewrite.validate.comparison import compare
from scatter_rewrite.validate.engines import run_onnxruntime

RUNNERS = Path(__file__).parent / "runtimes"
# where setup_venvs.sh builds them (its default, or the same variable)
VENVS = Path(os.environ.get("SCATTER_REWRITE_RUNTIME_VENVS", "/work/venvs"))
REFUSED = 3  # tests/runtimes/_runner_io.py: the runtime refused the model
RUN_LIMIT_S = 900  # a runner that hangs fails the test instead of the whole run


@dataclasses.dataclass(frozen=True)
class Runtime:
    name: str  # as the targets spell it: litert, openvino, tvm
    venv: str  # the venv under VENVS (setup_venvs.sh's name)
    runner: str  # the script in tests/runtimes/

    @property
    def python(self) -> Path:
        return VENVS / self.venv / "bin" / "python"


RUNTIMES = {r.name: r for r in (Runtime("litert", "onnx2tf", "run_litert.py"),
                                Runtime("openvino", "openvino", "run_openvino.py"),
                                Runtime("tvm", "tvm", "run_tvm.py"))}


class Refused(Exception):
    """The runtime refused the model (its converter's or compiler's reason is the message)."""


def require(name: str) -> Runtime:
    """The runtime, or the test skipped with what builds its venv."""
    runtime = RUNTIMES[name]
    if not (VENVS / runtime.venv / ".requirements").exists():
        pytest.skip(f"no {runtime.venv} venv in {VENVS}: run tests/runtimes/setup_venvs.sh "
                    f"{runtime.venv}")
    return runtime


def run_in(name: str, model: onnx.ModelProto, inputs: dict[str, np.ndarray],
           workdir: Path) -> list[np.ndarray]:
    """``model``'s outputs in the runtime, in the model's order; Refused with its reason."""
    runtime = require(name)
    workdir.mkdir(parents=True, exist_ok=True)
    model_path, inputs_path, outputs_path = (workdir / f"{name}_{f}" for f in
                                             ("model.onnx", "inputs.npz", "outputs.npz"))
    onnx.save(model, model_path)
    np.savez(inputs_path, **inputs)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([str(runtime.python), str(RUNNERS / runtime.runner), str(model_path),
                           str(inputs_path), str(outputs_path)], capture_output=True, text=True,
                          env=env, cwd=workdir, timeout=RUN_LIMIT_S, check=False)
    if done.returncode == REFUSED:
        raise Refused(done.stderr.strip().splitlines()[-1])
    if done.returncode != 0:
        raise AssertionError(f"{runtime.runner} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    with np.load(outputs_path) as npz:
        return [npz[key] for key in npz.files]


def original_outputs(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs of ``model``: what every runtime is judged against."""
    return run_onnxruntime(model.SerializeToString(), inputs)


def disagreement(model: onnx.ModelProto, expected: list[np.ndarray], actual: list[np.ndarray],
                 float_tolerance: bool) -> list[str]:
    """Validation's judgement (exact, or float32's tolerance where a float add/mul reorders sums):
    the outputs that disagree, said; empty when all agree."""
    names = [o.name for o in model.graph.output]
    if len(actual) != len(names):
        return [f"{len(actual)} outputs where the model has {len(names)}"]
    return compare(names, expected, actual, float_tolerance)[1]
