"""onnxruntime implementations of the custom-domain nodes ``lower --mode custom`` emits.

``register(session_options)`` is called for every onnxruntime session validation opens, so a
model holding our custom-domain nodes runs in onnxruntime exactly like a standard one.

The nodes (see docs/custom-ops.md and :mod:`scatter_rewrite.passes.lower`):

* ``ai.onnx.contrib::ScatterElements(data, indices, updates)``, attributes ``axis`` (int, default
  0), ``reduction`` (string: none, add, mul, max, min), and, in the TensorRT plugin form,
  ``plugin_version``/``plugin_namespace`` (ignored here);
* ``ai.onnx.contrib::ScatterND(data, indices, updates)``, attribute ``reduction``.

Semantics: exactly ONNX ScatterElements-18/ScatterND-18 as onnxruntime's CPU kernels compute them
(our NumPy evaluator, :mod:`scatter_rewrite.evaluator`). They are onnxruntime-extensions Python
ops (``onnxruntime_extensions.onnx_op``): that package fixes the domain to ``ai.onnx.contrib``
and needs one registration per type signature (an op may have only one dynamically typed input,
onnxruntime 1.32 custom_ops.cc), hence one per data dtype x index dtype. Python ops are slow
(every output goes through a Python list): they are for validation, not for serving.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("scatter_rewrite")

DOMAIN = "ai.onnx.contrib"
_registered: bool | None = None  # None: not tried yet; False: onnxruntime-extensions missing


def _kernels():
    from scatter_rewrite.evaluator import scatter_elements, scatter_nd

    def elements(data, indices, updates, axis=0, reduction="none"):
        return scatter_elements(data, indices, updates, axis=int(axis), reduction=reduction or "none")

    def nd(data, indices, updates, reduction="none"):
        return scatter_nd(data, indices, updates, reduction=reduction or "none")

    return elements, nd


def _register_python_ops() -> bool:
    try:
        from onnxruntime_extensions import PyCustomOpDef, onnx_op
    except ImportError:
        logger.debug("onnxruntime-extensions is not installed: custom-domain scatter nodes cannot run")
        return False
    elements, nd = _kernels()
    P = PyCustomOpDef
    # No float16: onnxruntime-extensions registers it, but running such a node aborts the process
    # (std::runtime_error "Type float16 not supported by python customops api", uncaught: SIGABRT).
    # Unregistered, onnxruntime refuses the model and validation reports it or falls back to
    # onnx.reference, which runs these nodes too (evaluator.reference_ops).
    data_types = [P.dt_float, P.dt_double, P.dt_int8, P.dt_uint8, P.dt_int16, P.dt_uint16,
                  P.dt_int32, P.dt_uint32, P.dt_int64, P.dt_uint64, P.dt_bool]
    # Only the attributes every form has: an attribute declared here must be on the node, and
    # undeclared ones (the TensorRT form's plugin_version/plugin_namespace) are ignored.
    elements_attrs = {"axis": P.dt_int64, "reduction": P.dt_string}
    for dt in data_types:
        for it in (P.dt_int64, P.dt_int32):
            onnx_op(op_type="ScatterElements", inputs=[dt, it, dt], outputs=[dt], attrs=elements_attrs)(elements)
        onnx_op(op_type="ScatterND", inputs=[dt, P.dt_int64, dt], outputs=[dt], attrs={"reduction": P.dt_string})(nd)
    return True


def register(session_options) -> None:
    """Make our custom-domain ops known to an onnxruntime session."""
    global _registered
    if _registered is None:
        _registered = _register_python_ops()
    if _registered:
        from onnxruntime_extensions import get_library_path

        session_options.register_custom_ops_library(get_library_path())


__all__ = ["DOMAIN", "register"]
