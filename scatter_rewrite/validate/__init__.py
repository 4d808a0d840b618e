"""Prove a rewrite changes nothing: run original and rewritten on the same inputs and compare.

Three parts:

- :mod:`.inputs`: seeded inputs that respect every scatter's contract (:mod:`.contracts`, which
  traces the paths index values take: :mod:`.index_paths`) on the original model before any pass
  runs (:func:`plan_validation`), or the user's, checked (:mod:`.user_inputs`); their sizes fit
  the model's ops (:mod:`.dims`) and the original runs on them (:mod:`.trial`).
- :mod:`.engines`: running a model in onnxruntime or in ``onnx.reference`` with our NumPy kernels.
  onnxruntime runs as a user's session does by default (the exceptions, none changing a result, are
  stated in :func:`.engines._session_options`); what it lacks to run a model is decided from its
  kernel registry and declared facts (:func:`.engines.kernels_onnxruntime_lacks`), never from an
  error's text. A ``--mode custom`` result must load with ``custom_ops.register``, as its users
  run it.
- :mod:`.comparison`: exact for integers and none/max/min, a judgement that follows the float
  arithmetic where a rewrite may reorder float additions or multiplications.

:func:`validate` (in :mod:`.proof`) runs both models, in one engine where it can, and raises
ValidationError on any difference, and where onnxruntime fails on a rewritten model it has all it
needs for; a rewritten model proven in onnx.reference that onnxruntime cannot run is reported so
(``ValidationResult.onnxruntime_cannot_run``: the pipeline's UNRUNNABLE status). The caller plans before the passes and, after them, lets the
passes' results say where floats may round otherwise (:func:`allow_float_rounding`).
"""

from scatter_rewrite.validate.comparison import BFLOAT16_TOLERANCE, FLOAT_TOLERANCE, compare
from scatter_rewrite.validate.engines import run_onnxruntime, run_reference
from scatter_rewrite.validate.contracts import IndexContract
from scatter_rewrite.validate.inputs import ValidationPlan, plan_validation
from scatter_rewrite.validate.user_inputs import load_inputs, user_tolerance
from scatter_rewrite.validate.proof import ValidationResult, allow_float_rounding, validate

__all__ = [
    "BFLOAT16_TOLERANCE", "FLOAT_TOLERANCE", "IndexContract", "ValidationPlan", "ValidationResult",
    "allow_float_rounding", "compare", "load_inputs", "plan_validation", "run_onnxruntime",
    "run_reference", "user_tolerance", "validate",
]
