"""Pure, vectorized NumPy kernels for the ONNX scatter ops, independent of any IR.

Each kernel returns a new array (inputs are never modified) and raises
:class:`~scatter_rewrite.errors.IndexOutOfRangeError` for out-of-range indices and
:class:`~scatter_rewrite.errors.InvalidModelError` for shape/axis/attribute violations.
Results match onnxruntime's CPU kernels bit for bit except the float summation order of
``add``/``mul`` (which in practice is the same order too). float16/bfloat16 ``add``/``mul`` round
after each update in index order, bit for bit with onnx.reference and as onnxruntime's newest CPU
kernel does (onnxruntime 1.32 has none): what a runtime would compute, so a fold bakes in that.
"""

from scatter_rewrite.evaluator.scatter_elements import scatter, scatter_elements
from scatter_rewrite.evaluator.scatter_nd import scatter_nd
from scatter_rewrite.evaluator.tensor_scatter import tensor_scatter

__all__ = ["scatter", "scatter_elements", "scatter_nd", "tensor_scatter"]
