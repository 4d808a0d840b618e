"""Runs an ONNX model with Apache TVM's Relax: tvm.relax.frontend.onnx.from_onnx, the ops legalized,
compiled for the CPU (LLVM), run in Relax's virtual machine.

Input shapes and dtypes are the given inputs' (the model compiled static): TVM's frontend otherwise
takes every input as float32 unless told.
"""

from __future__ import annotations

import numpy as np

try:  # run as a script (its folder first on sys.path), where this project may not be installed
    from _runner_io import Refused, main
except ModuleNotFoundError:  # imported as a module of the package
    from scatter_rewrite.targets.runners._runner_io import Refused, main

__all__ = ["run", "version"]


def version() -> str:
    import tvm

    return f"TVM {tvm.__version__}"


def run(model_path: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    model = onnx.load(model_path)
    names = [i.name for i in model.graph.input if i.name in inputs]
    try:
        mod = from_onnx(model, shape_dict={n: list(inputs[n].shape) for n in names},
                        dtype_dict={n: str(inputs[n].dtype) for n in names},
                        keep_params_in_input=False)
        mod = relax.transform.DecomposeOpsForInference()(mod)
        mod = relax.transform.LegalizeOps()(mod)
        executable = tvm.compile(mod, target="llvm")
    except Exception as e:  # the frontend and compiler raise many kinds (tvm.error.*, ValueError, ...)
        raise Refused(f"TVM {tvm.__version__}: {type(e).__name__}: {str(e).strip().splitlines()[-1]}") from e
    vm = relax.VirtualMachine(executable, tvm.cpu())
    result = vm["main"](*[tvm.runtime.tensor(inputs[n]) for n in names])
    results = [result] if hasattr(result, "numpy") else list(result)  # one Tensor, or a tuple's Array
    outputs = [o.name for o in model.graph.output]
    return {name: r.numpy() for name, r in zip(outputs, results, strict=True)}


if __name__ == "__main__":
    raise SystemExit(main(run, version))
