"""What every runner shares: ``python run_X.py MODEL.onnx INPUTS.npz OUTPUTS.npz [OPTION...]``.

A runner runs as a script in a python that has its runtime, which may be another venv with numpy
but not this project (its folder first on ``sys.path``, so that it imports this module by file
name): it reads the inputs (keyed by the model's input names), converts and runs the model, and
writes the outputs in the model's order (the caller reads them by position; keys name them), and
says the runtime and its version on a stderr line starting "RUNTIME: ". OPTIONs (a runner's own,
such as run_litert.py's ``--onnx2tf-default-layout``) go to its ``run``. A runtime that refuses the
model (a converter's error, a compiler's) exits with REFUSED and says why on a stderr line starting
"REFUSED: "; anything else that goes wrong keeps its traceback (a runner's own bug).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np

__all__ = ["REFUSED", "Refused", "main"]

REFUSED = 3  # the runtime refused the model: the reason is on the stderr line "REFUSED: ..."


class Refused(Exception):
    """The runtime (its converter or compiler) refused the model."""


def main(run: Callable[..., dict[str, np.ndarray]], version: Callable[[], str],
         options: frozenset[str] = frozenset()) -> int:
    """Parses the command line, calls ``run(model_path, inputs, *given)`` (``given``: those of the
    runner's ``options`` on the command line), writes what it returns; ``version()``: the runtime
    and its version, as the status names it ("OpenVINO 2026.4.1")."""
    given = sys.argv[4:]
    if len(sys.argv) < 4 or not set(given) <= options:
        print(f"usage: {sys.argv[0]} MODEL.onnx INPUTS.npz OUTPUTS.npz "
              f"{' '.join(f'[{o}]' for o in sorted(options))}", file=sys.stderr)
        return 2
    model, inputs_path, outputs_path = sys.argv[1:4]
    with np.load(inputs_path) as npz:
        inputs = {name: npz[name] for name in npz.files}
    print("RUNTIME: " + version(), file=sys.stderr, flush=True)
    try:
        outputs = run(model, inputs, *given)
    except Refused as e:
        print("REFUSED: " + " ".join(str(e).split()), file=sys.stderr, flush=True)
        return REFUSED
    np.savez(outputs_path, **outputs)
    return 0
