"""Runs an ONNX model in MNN: converted by MNN's compiled converter (``_tools.mnnconvert``, not the
``MNN.tools`` wrapper, whose import pip-installs aliyun-log-python-sdk and which sends conversion
logs to a remote service), loaded with MNN.nn.load_module_from_file, run on the CPU.

Python's sockets are disabled before MNN is imported: nothing here may reach the network. MNN
takes int32, not int64 (its converter makes int64 constants int32): int64 inputs are given as
int32, and the outputs come back in the dtype MNN computes them in.
"""

from __future__ import annotations

import os
import socket

import numpy as np

try:  # run as a script (its folder first on sys.path), where this project may not be installed
    from _runner_io import Refused, main
except ModuleNotFoundError:  # imported as a module of the package
    from scatter_rewrite.targets.runners._runner_io import Refused, main

__all__ = ["run", "run_in_mnn", "version"]


def _no_network(*args, **kwargs):
    raise OSError("run_mnn.py: no network access")


def _block_network() -> None:
    """Before MNN is imported (only ever in the runner's own process)."""
    socket.socket = _no_network  # type: ignore[assignment,misc]
    socket.create_connection = _no_network  # type: ignore[assignment]


def version() -> str:
    import importlib.metadata

    return f"MNN {importlib.metadata.version('MNN')}"


def run_in_mnn(model_path: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """``model_path``'s outputs in MNN, in the model's order (Refused: the converter's refusal)."""
    _block_network()
    import _tools  # MNN's compiled converter (site-packages/_tools*.so)
    import MNN.expr as F
    import MNN.nn as nn

    # (into the working folder: the model's own folder may be the user's)
    converted = os.path.join(os.getcwd(), os.path.splitext(os.path.basename(model_path))[0] + ".mnn")
    if os.path.exists(converted):
        os.remove(converted)
    ok = _tools.mnnconvert(["mnnconvert", "-f", "ONNX", "--modelFile", model_path,
                            "--MNNModel", converted, "--bizCode", "MNN"])
    if not ok or not os.path.exists(converted):
        raise Refused(f"{version()}'s converter refused the model (its log is on stdout)")
    module = nn.load_module_from_file(converted, [], [])
    info = module.get_info()
    types = {np.dtype(np.float32): F.float, np.dtype(np.int32): F.int}
    args = []
    for name in info["inputNames"]:
        value = np.ascontiguousarray(feeds[name])
        if value.dtype == np.int64:
            value = value.astype(np.int32)
        if value.dtype not in types:
            raise Refused(f"MNN: input {name} of {value.dtype} (MNN takes float32 and int32)")
        args.append(F.const(value, list(value.shape), F.NCHW, types[value.dtype]))
    outputs = module.onForward(args)
    return [np.array(o.read()) for o in outputs]


def run(model_path: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {f"{i}": out for i, out in enumerate(run_in_mnn(model_path, inputs))}


if __name__ == "__main__":
    raise SystemExit(main(run, version))
