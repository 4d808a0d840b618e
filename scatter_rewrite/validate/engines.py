"""Running a model: onnxruntime (with our custom-domain ops registered where the model uses them)
and ``onnx.reference`` with scatter-rewrite's NumPy kernels; what onnxruntime's refusals mean."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir


class CustomOpsRefused(Exception):
    """onnxruntime cannot load a model with our custom-domain ops even with
    ``custom_ops.register``: how that model's users run it (``lower --mode custom``)."""


def run_onnxruntime(model: str | os.PathLike | bytes, inputs: dict[str, np.ndarray], threads: int = 0) -> list[np.ndarray]:
    import onnxruntime as ort

    from scatter_rewrite import custom_ops

    source = str(model) if isinstance(model, (str, Path)) else model
    run = None
    try:
        session = ort.InferenceSession(source, _session_options(threads), providers=["CPUExecutionProvider"])
    except Exception as e:
        # Our custom-domain nodes (lower --mode custom) only: registering them costs seconds where
        # onnxruntime-extensions finds PyTorch installed (it imports it), so only on demand.
        if custom_ops.DOMAIN not in str(e):
            raise
        options = _session_options(threads)
        custom_ops.register(options)
        try:
            session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        except Exception as refused:
            raise CustomOpsRefused(ort_reason(refused)) from refused
        run = custom_ops.run  # raises what the ops raised (an index out of range), after the run
    names = {i.name for i in session.get_inputs()}
    run_options = ort.RunOptions()
    run_options.log_severity_level = 4
    feeds = {k: v for k, v in inputs.items() if k in names}
    outputs = run(session, feeds, run_options) if run else session.run(None, feeds, run_options)
    return [_as_declared(array, o.type) for array, o in zip(outputs, session.get_outputs())]


def _as_declared(array: Any, ort_type: str) -> Any:
    """An onnxruntime output as the ONNX element type the model declares (``ort_type``, as
    ``tensor(float8e4m3fn)``), the type onnx.reference returns. onnxruntime's Python binding returns
    float8e4m3fn and float4e2m1 as raw uint8: one byte per element, or packed two to a byte (low
    nibble first) at the start of an array of the element count. (The other types NumPy lacks, float8e5m2
    or int4, it does not return at all: "No corresponding Numpy type".)"""
    if not isinstance(array, np.ndarray) or array.dtype != np.uint8 or not ort_type.startswith("tensor("):
        return array
    declared = getattr(ir.DataType, ort_type[len("tensor("):-1].upper(), None)
    if declared is None or declared == ir.DataType.UINT8:
        return array
    if declared.bitwidth == 8:
        return array.view(declared.numpy())
    packed = array.reshape(-1)[: (array.size * declared.bitwidth + 7) // 8]
    return ir.PackedTensor(packed, declared, shape=ir.Shape(array.shape)).numpy()


def _session_options(threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 4  # failures reach the user as our own one-line error, not ORT's log
    # The graph optimizations a user's session gets by default (ORT_ENABLE_ALL): the rewritten model
    # is proven as it will run, and a TorchScript original that onnxruntime runs with its defaults
    # runs here too (with them off, it fell back to onnx.reference). One exception, for memory:
    # weight prepacking copies every MatMul weight into the heap where ORT memory-maps external
    # initializers. Measured with ORT 1.32 on 50 MatMuls over 200 MiB of external weights: 255 MiB
    # after session creation with the defaults, 55 MiB with prepacking off (as with every
    # optimization off). Prepacking lays the same weights out for the same kernel, and stays off.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.disable_prepacking", "1")
    # Without the arena, buffers go back as soon as a run is done instead of staying reserved for
    # the next run (there is none): measured 0.8 -> 0.5 GB peak validating a 76 MiB model.
    options.enable_cpu_mem_arena = False
    return options


def run_reference(model: str | os.PathLike | onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """``onnx.reference`` with our NumPy kernels for every scatter op (it lacks ``Scatter``)."""
    import warnings

    from scatter_rewrite.evaluator.reference_ops import make_evaluator

    evaluator = make_evaluator(model if isinstance(model, onnx.ModelProto) else onnx.load(str(model)))
    # NumPy's RuntimeWarnings (log of 0, an overflow to inf) are values here, as in onnxruntime,
    # not lines for the user's terminal.
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return evaluator.run(None, inputs)



def first_line(e: BaseException, limit: int = 200) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:limit] if text else type(e).__name__


def without_paths(reason: str | None) -> str | None:
    """An onnxruntime reason without the model file it names ("Load model from /tmp/x.onnx failed:"),
    to compare the original's failure with the rewritten model's."""
    return None if reason is None else re.sub(r"Load model from \S+ failed:", "Load model failed:", reason)


def ort_reason(e: BaseException) -> str:
    """onnxruntime's messages bury the reason after the node dump: keep the reason."""
    text = first_line(e, 10_000)
    for marker in ("Type Error: ", " Error ", "Status Message: "):
        if marker in text:
            return text.rsplit(marker, 1)[1][:200]
    return text[:200]



def lacks_a_kernel(e: BaseException) -> bool:
    """Whether onnxruntime refused a model for a kernel or type its CPU provider lacks, or whose
    inputs or outputs its Python binding cannot pass (bfloat16 inputs: "Numpy_type 256 can't be
    converted"; float8e5m2, int4 outputs: "No corresponding Numpy type"), not for a malformed graph."""
    text = str(e)
    # (A type refused inside an If/Loop body comes as FAIL "Graph attribute inferencing failed".)
    return ("NOT_IMPLEMENTED" in text or "No corresponding Numpy type" in text or "can't be converted to MLDataType" in text or ("RUNTIME_EXCEPTION" in text and "data type is not supported" in text)
            or (("INVALID_GRAPH" in text or "Graph attribute inferencing failed" in text)
                and "Type Error: Type 'tensor(" in text))

