"""What every runner shares: ``python run_X.py MODEL.onnx INPUTS.npz OUTPUTS.npz [OPTION...]``.

A runner runs in its runtime's own venv (tests/runtimes/setup_venvs.sh), which has numpy but not
this project: it reads the inputs (keyed by the model's input names), converts and runs the model,
and writes the outputs in the model's order (the test side reads them by position; keys name them).
OPTIONs (a runner's own, such as run_litert.py's ``--onnx2tf-default-layout``) go to its ``run``.
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


def main(run: Callable[..., dict[str, np.ndarray]], options: frozenset[str] = frozenset()) -> int:
    """Parses the command line, calls ``run(model_path, inputs, *given)`` (``given``: those of the
    runner's ``options`` on the command line), writes what it returns."""
    given = sys.argv[4:]
    if len(sys.argv) < 4 or not set(given) <= options:
        print(f"usage: {sys.argv[0]} MODEL.onnx INPUTS.npz OUTPUTS.npz "
              f"{' '.join(f'[{o}]' for o in sorted(options))}", file=sys.stderr)
        return 2
    model, inputs_path, outputs_path = sys.argv[1:4]
    with np.load(inputs_path) as npz:
        inputs = {name: npz[name] for name in npz.files}
    try:
        outputs = run(model, inputs, *given)
    except Refused as e:
        print("REFUSED: " + " ".join(str(e).split()), file=sys.stderr, flush=True)
        return REFUSED
    np.savez(outputs_path, **outputs)
    return 0
