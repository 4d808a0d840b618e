"""Runs an ONNX model on OpenVINO's CPU plugin (openvino.Core().compile_model(model, "CPU")).

Precision pinned to f32 (INFERENCE_PRECISION_HINT f32, EXECUTION_MODE_HINT ACCURACY): by default the
CPU plugin runs MatMul and convolutions in bf16 on CPUs that have it (AVX512_BF16, AMX), so the
same model gives other results on another machine. Pinned, a test judges the model, not the CPU.
"""

from __future__ import annotations

import numpy as np

try:  # run as a script (its folder first on sys.path), where this project may not be installed
    from _runner_io import Refused, main
except ModuleNotFoundError:  # imported as a module of the package
    from scatter_rewrite.targets.runners._runner_io import Refused, main

__all__ = ["CONFIG", "run", "version"]

CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "EXECUTION_MODE_HINT": "ACCURACY"}


def version() -> str:
    import openvino as ov

    return f"OpenVINO {ov.__version__.split('-')[0]}"


def run(model_path: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import openvino as ov

    core = ov.Core()
    try:
        model = core.read_model(model_path)
        compiled = core.compile_model(model, "CPU", CONFIG)
    except RuntimeError as e:
        raise Refused(f"OpenVINO {ov.__version__}: {e}") from e
    result = compiled(inputs)
    # Results in the model's order (OpenVINO keeps the ONNX graph's outputs in order).
    return {f"{i}:{port.get_any_name()}": np.asarray(result[port])
            for i, port in enumerate(compiled.outputs)}


if __name__ == "__main__":
    raise SystemExit(main(run, version))
