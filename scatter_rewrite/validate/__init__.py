"""Prove a rewrite changes nothing: run original and rewritten on the same inputs and compare.

Three parts, one module each:

- :mod:`.inputs`: seeded inputs that respect every scatter's contract, traced on the original
  model before any pass runs (:func:`plan_validation`), or the user's, checked; their sizes fit
  the model's ops (:mod:`.dims`) and the original runs on them (:mod:`.trial`).
- :mod:`.engines`: running a model in onnxruntime or in ``onnx.reference`` with our NumPy kernels.
  onnxruntime runs with the graph optimizations a user's session gets by default; only weight
  prepacking is off (it copies memory-mapped external weights into the heap; same results).
  A ``--mode custom`` result must load with ``custom_ops.register``, as its users run it.
- :mod:`.comparison`: exact for integers and none/max/min, a judgement that follows the float
  arithmetic where a rewrite may reorder float additions or multiplications.

:func:`validate` (in :mod:`.proof`) runs both models, in one engine where it can, and raises
ValidationError on any difference. The caller plans before the passes and, after them, lets the
passes' results say where floats may round otherwise (:func:`allow_float_rounding`).
"""

from scatter_rewrite.validate.comparison import BFLOAT16_TOLERANCE, FLOAT_TOLERANCE, compare
from scatter_rewrite.validate.engines import run_onnxruntime, run_reference
from scatter_rewrite.validate.inputs import (
    IndexContract, ValidationPlan, load_inputs, plan_validation, user_tolerance,
)
from scatter_rewrite.validate.proof import ValidationResult, allow_float_rounding, validate

__all__ = [
    "BFLOAT16_TOLERANCE", "FLOAT_TOLERANCE", "IndexContract", "ValidationPlan", "ValidationResult",
    "allow_float_rounding", "compare", "load_inputs", "plan_validation", "run_onnxruntime",
    "run_reference", "user_tolerance", "validate",
]
