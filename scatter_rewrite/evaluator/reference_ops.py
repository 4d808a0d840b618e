"""``onnx.reference`` operators backed by our NumPy kernels.

``onnx.reference`` has no ``Scatter`` (deprecated at 11) and loops in Python for the others;
validation uses these when onnxruntime cannot run an original model.
"""

from __future__ import annotations

from onnx.reference.op_run import OpRun

from scatter_rewrite.evaluator import scatter, scatter_elements, scatter_nd


class Scatter(OpRun):
    op_domain = ""

    def _run(self, data, indices, updates, axis=None):
        return (scatter(data, indices, updates, axis=0 if axis is None else axis, node_name=self.onnx_node.name),)


class ScatterElements(OpRun):
    op_domain = ""

    def _run(self, data, indices, updates, axis=None, reduction=None):
        return (scatter_elements(data, indices, updates, axis=0 if axis is None else axis,
                                 reduction=reduction or "none", node_name=self.onnx_node.name),)


class ScatterND(OpRun):
    op_domain = ""

    def _run(self, data, indices, updates, reduction=None):
        return (scatter_nd(data, indices, updates, reduction=reduction or "none", node_name=self.onnx_node.name),)


# The custom-domain nodes of ``lower --mode custom|tensorrt-plugin`` (scatter_rewrite.custom_ops runs
# them in onnxruntime, for the dtypes onnxruntime-extensions' Python ops take): same semantics as
# ONNX ScatterElements-18/ScatterND-18; the TensorRT form's plugin_version/plugin_namespace are ignored.
CUSTOM_DOMAIN = "ai.onnx.contrib"


class _ContribScatterElements(OpRun):
    op_domain = CUSTOM_DOMAIN

    def _run(self, data, indices, updates, axis=None, reduction=None, plugin_version=None, plugin_namespace=None):
        return (scatter_elements(data, indices, updates, axis=0 if axis is None else axis,
                                 reduction=reduction or "none", node_name=self.onnx_node.name),)


class _ContribScatterND(OpRun):
    op_domain = CUSTOM_DOMAIN

    def _run(self, data, indices, updates, reduction=None):
        return (scatter_nd(data, indices, updates, reduction=reduction or "none", node_name=self.onnx_node.name),)


# onnx.reference finds an op by its class name (and op_domain).
ContribScatterElements = type("ScatterElements", (_ContribScatterElements,), {})
ContribScatterND = type("ScatterND", (_ContribScatterND,), {})

REFERENCE_OPS = [Scatter, ScatterElements, ScatterND, ContribScatterElements, ContribScatterND]


def make_evaluator(proto):
    """A ReferenceEvaluator using our kernels everywhere: in the main graph, in subgraphs and in
    local functions (onnx.reference builds those with ``self.__class__`` and no ``new_ops``)."""
    from onnx.reference import ReferenceEvaluator

    class _WithOurKernels(ReferenceEvaluator):
        def __init__(self, *args, **kwargs):
            kwargs["new_ops"] = list(kwargs.get("new_ops") or []) + [
                op for op in REFERENCE_OPS if op not in (kwargs.get("new_ops") or [])
            ]
            super().__init__(*args, **kwargs)

    return _WithOurKernels(proto)
