"""``onnx.reference`` operators backed by our NumPy kernels.

``onnx.reference`` has no ``Scatter`` (deprecated at 11) and loops in Python for the others;
validation uses these when onnxruntime cannot run an original model, with corrected ``Loop``,
``Unsqueeze``, ``Squeeze``, ``Where`` and ``GatherElements`` (fold's constant chains use them as
well).
"""

from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun
from onnx.reference.ops.op_where import Where as _ReferenceWhere

from scatter_rewrite import custom_ops
from scatter_rewrite.errors import ScatterRewriteError
from scatter_rewrite.evaluator import scatter, scatter_elements, scatter_nd, tensor_scatter

__all__ = ["CORRECTED_OPS", "NodeFailure", "failing_node", "make_evaluator"]


class NodeFailure(RuntimeError):
    """An op the evaluator ran raised something other than our errors (a NumPy ValueError on
    shapes the op's spec forbids): the message names the op and node, the cause is kept."""

    def __init__(self, op_type: str, name: str, cause: BaseException):
        super().__init__(f"{op_type} '{name}': {type(cause).__name__}: {cause}")
        self.op_type, self.node_name = op_type, name


def failing_node(e: BaseException) -> tuple[str, str] | None:
    """(op type, node name) of the innermost ``onnx.reference`` op running where ``e`` was raised
    (the traceback's frames whose ``self`` is an ``OpRun``), or None."""
    found, tb = None, e.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, OpRun) and getattr(owner, "onnx_node", None) is not None:
            found = (owner.onnx_node.op_type, owner.onnx_node.name)
        tb = tb.tb_next
    return found


class Scatter(OpRun):
    op_domain = ""

    def _run(self, data, indices, updates, axis=None):
        return (
            scatter(
                data,
                indices,
                updates,
                axis=0 if axis is None else axis,
                node_name=self.onnx_node.name,
            ),
        )


class ScatterElements(OpRun):
    op_domain = ""

    def _run(self, data, indices, updates, axis=None, reduction=None):
        return (scatter_elements(data, indices, updates, axis=0 if axis is None else axis,
                                 reduction=reduction or "none", node_name=self.onnx_node.name),)


class ScatterND(OpRun):
    op_domain = ""

    def _run(self, data, indices, updates, reduction=None):
        return (
            scatter_nd(
                data, indices, updates, reduction=reduction or "none", node_name=self.onnx_node.name
            ),
        )


class TensorScatter(OpRun):
    """Ours rather than onnx.reference's, which writes strings into the fixed-width array of
    ``past_cache`` and so cuts them ('Zz' into a '<U1' cache came out 'Z')."""

    op_domain = ""

    def _run(self, past_cache, update, write_indices=None, axis=None, mode=None):
        return (tensor_scatter(past_cache, update, write_indices, axis=-2 if axis is None else axis,
                               mode=mode or "linear", node_name=self.onnx_node.name),)


# The custom-domain nodes of ``lower --mode custom|tensorrt-plugin`` (scatter_rewrite.custom_ops
# runs them in onnxruntime, for the dtypes onnxruntime-extensions' Python ops take): same semantics
# as ONNX ScatterElements-18/ScatterND-18; the TensorRT form's plugin_version/plugin_namespace are
# ignored.
CUSTOM_DOMAIN = custom_ops.DOMAIN


class _ContribScatterElements(OpRun):
    op_domain = CUSTOM_DOMAIN

    def _run(
        self,
        data,
        indices,
        updates,
        axis=None,
        reduction=None,
        plugin_version=None,
        plugin_namespace=None,
    ):
        return (scatter_elements(data, indices, updates, axis=0 if axis is None else axis,
                                 reduction=reduction or "none", node_name=self.onnx_node.name),)


class _ContribScatterND(OpRun):
    op_domain = CUSTOM_DOMAIN

    def _run(self, data, indices, updates, reduction=None):
        return (
            scatter_nd(
                data, indices, updates, reduction=reduction or "none", node_name=self.onnx_node.name
            ),
        )


# onnx.reference finds an op by its class name (and op_domain).
ContribScatterElements = type("ScatterElements", (_ContribScatterElements,), {})
ContribScatterND = type("ScatterND", (_ContribScatterND,), {})

class Loop(OpRun):
    """Loop through onnx.reference's public interface only (the body is the ReferenceEvaluator
    ``self.body``, run with its ``run``), correcting onnx.reference's (1.23) two faults: scan
    outputs are stacked into ``[iterations, *shape]`` (it concatenated them along their first
    axis), and an omitted condition means true (it ran no iteration)."""

    op_domain = ""

    def need_context(self) -> bool:
        return True  # (the body reads names of the outer scopes)

    def _run(self, M, cond, *args, context=None, attributes=None, **_):  # noqa: N803
        names, outputs_names = self.body.input_names, self.body.output_names
        position = {name: i for i, name in enumerate(outputs_names)}
        scanned = len(outputs_names) - len(names) + 1  # scan outputs: after cond and the carried
        inputs = dict(context or {})
        for name, value in zip(names[2:], args):  # the loop-carried values' initial values
            inputs[name] = value
        scans: list[list] = [[] for _ in range(scanned)]
        going, it = (True if cond is None else bool(cond)), 0
        while going and (M is None or it < M):
            if names and names[0]:
                inputs[names[0]] = np.array(it, dtype=np.int64 if M is None else M.dtype)
            if len(names) > 1 and names[1]:
                inputs[names[1]] = np.array(going)
            outputs = self.body.run(None, inputs, attributes=attributes)
            for k in range(scanned):
                scans[k].append(outputs[len(outputs) - scanned + k])
            going = bool(outputs[position[outputs_names[0]]])
            for name, out in zip(names[2:], outputs_names[1:]):
                inputs[name] = outputs[position[out]]
            it += 1
        results = [inputs[name] for name in names[2:]]
        results += [np.stack(s) if s else np.empty((0,)) for s in scans]
        while len(results) < len(self.onnx_node.output):
            results.append(np.empty(shape=()))
        return tuple(np.asarray(r) if np.isscalar(r) else r for r in results)


class Unsqueeze(OpRun):
    """Unsqueeze with every axis counted in the output's rank at once: onnx.reference's
    Unsqueeze-1/11 inserts its ``axes`` attribute one axis at a time, so axes = [-2, 2] on shape
    (2,) gave (1, 2, 1) instead of (2, 1, 1) and [-3, -1] on (2,) failed."""

    op_domain = ""

    def _run(self, data, axes=None):
        return (np.expand_dims(data, tuple(int(a) for a in np.ravel(axes))),)


class Squeeze(OpRun):
    """Squeeze of all its axes at once (onnx.reference's Squeeze-1/11 removes them one at a time, in
    reverse order: axes = [4, -5] on a 5-D tensor failed)."""

    op_domain = ""

    def _run(self, data, axes=None):
        axes = None if axes is None else tuple(int(a) for a in np.ravel(axes))
        for axis in axes or ():
            if -data.ndim <= axis < data.ndim and data.shape[axis] != 1:
                raise ValueError(f"axis {axis} of its input, shape {list(data.shape)}, has size "
                                 f"{data.shape[axis]}, not 1")
        return (np.squeeze(data, axes),)


class Where(_ReferenceWhere):
    """Where on strings as object arrays: onnx.reference casts the result to x's dtype, which cuts
    fixed-width strings to x's width (Where(false, ['é'], ['Zz']) gave 'Z')."""

    op_domain = ""

    def _run(self, condition, x, y):
        if x.dtype.kind in "OSU" or y.dtype.kind in "OSU":
            return (np.where(condition, x.astype(object), y.astype(object)),)
        return super()._run(condition, x, y)


class GatherElements(OpRun):
    """GatherElements by ``np.take_along_axis``: onnx.reference's goes through ``np.choose``, which
    takes at most 64 choices, so it failed on any gather along an axis longer than 64 (the sorting
    network ``tensorrt`` writes for a bfloat16 reduction, which only onnx.reference can run). Out of
    range indices are an error, as in onnxruntime (``np.choose``'s ``mode="wrap"`` wrapped them)."""

    op_domain = ""

    def _run(self, data, indices, axis=None):
        from scatter_rewrite.evaluator._common import checked_index, normalize_axis

        axis = normalize_axis(0 if axis is None else int(axis), data.ndim, "GatherElements",
                              self.onnx_node.name)
        size = data.shape[axis]
        indices, negative = checked_index(indices, size, "GatherElements", self.onnx_node.name,
                                          f"axis {axis} of size {size}")
        if negative:
            indices = np.where(indices < 0, indices + size, indices)
        return (np.take_along_axis(data, indices.astype(np.intp), axis=axis),)


# Used for the constant chains fold evaluates too (fold.ConstantChains).
CORRECTED_OPS = {"Loop": Loop, "Unsqueeze": Unsqueeze, "Squeeze": Squeeze, "Where": Where,
                 "GatherElements": GatherElements}

REFERENCE_OPS = [
    Scatter,
    ScatterElements,
    ScatterND,
    TensorScatter,
    ContribScatterElements,
    ContribScatterND,
    *CORRECTED_OPS.values(),
]


def make_evaluator(proto, extra_ops: list | None = None):
    """A ReferenceEvaluator using our kernels everywhere: in the main graph, in subgraphs and in
    local functions (onnx.reference builds those with ``self.__class__`` and no ``new_ops``).
    ``extra_ops``: more OpRun classes (repair's proof: PyTorch's scatter mean)."""
    from onnx.reference import ReferenceEvaluator

    class _WithOurKernels(ReferenceEvaluator):
        def __init__(self, *args, **kwargs):
            kwargs["new_ops"] = list(kwargs.get("new_ops") or []) + [
                op for op in REFERENCE_OPS + list(extra_ops or [])
                if op not in (kwargs.get("new_ops") or [])
            ]
            super().__init__(*args, **kwargs)

        def run(self, *args, **kwargs):
            try:
                return super().run(*args, **kwargs)
            except (ScatterRewriteError, NodeFailure):
                raise  # (ours name their node already; a subgraph's named its own)
            except Exception as e:  # whatever an op raised: said with the node it ran
                where = failing_node(e)
                if where is None:
                    raise
                raise NodeFailure(*where, e) from e

    return _WithOurKernels(proto)
