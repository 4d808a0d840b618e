"""What every runner shares: ``python run_X.py MODEL.onnx INPUTS.npz OUTPUTS.npz``.

A runner runs in its runtime's own venv (tests/runtimes/setup_venvs.sh), which has numpy but not
this project: it reads the inputs (keyed by the model's input names), converts and runs the model,
and writes the outputs in the model's order (the test side reads them by position; keys name them).
A runtime that refuses the model (a converter's error, a compiler's) exits with REFUSED and says why
on a stderr line starting "REFUSED: "; anything else that goes wrong keeps its traceback (a
runner's own bug).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np

REFUSED = 3  # the runtime refused the model: the reason is on the stderr line "REFUSED: ..."


class Refused(Exception):
    """The runtime (its converter or compiler) refused the model."""


def main(run: Callable[[str, dict[str, np.ndarray]], dict[str, np.ndarray]]) -> int:
    """Parses the command line, calls ``run(model_path, inputs)``, writes what it returns."""
    if len(sys.argv) != 4:
        print(f"usage: {sys.argv[0]} MODEL.onnx INPUTS.npz OUTPUTS.npz", file=sys.stderr)
        return 2
    model, inputs_path, outputs_path = sys.argv[1:]
    with np.load(inputs_path) as npz:
        inputs = {name: npz[name] for name in npz.files}
    try:
        outputs = run(model, inputs)
    except Refused as e:
        print("REFUSED: " + " ".join(str(e).split()), file=sys.stderr, flush=True)
        return REFUSED
    np.savez(outputs_path, **outputs)
    return 0
