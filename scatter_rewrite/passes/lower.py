"""Lower scatter reductions (and TensorScatter) that a target opset lacks, in a model moved there.

Rewrites, in the main graph, every If/Loop/Scan body and every model-local function:

* ``ScatterElements``/``ScatterND`` with ``reduction`` add/mul (opset 16) or max/min (opset 18)
  when the target opset (11 to the installed onnx's highest) lacks that reduction. Reductions the
  target has are kept (add/mul at 16-17, everything at 18+); ``reduction="none"`` needs no lowering.
* ``TensorScatter`` (opset 24, KV-cache update, linear or circular, optional ``write_indices``)
  into one ``ScatterElements`` (reduction none, unique targets) for every target below 24.

The ``lower`` verb runs it after :class:`~.upgrade.UpgradePass` (the deprecated ``Scatter``, which
no opset >= 11 accepts, into ``ScatterElements``) and :class:`~.specialize.SpecializeCallsPass` (a
reduction whose axis or reduction is a function attribute: one copy of the function per call
binding, the value known in each), for the nodes this pass lowers (:meth:`LowerPass.lowers`), and
then its own steps (:func:`scatter_rewrite.passes.lists.lowering_steps`): the Ifs below inlined, and the
move of every other node to the target opset (:class:`~.move_opset.MoveOpsetPass`), which keeps
the nodes to lower as they are (never handed to ``onnx.version_converter``, which asserts on
max/min below 18 and fails on add/mul below 16) and the types inferred before it, which this pass
reads and gives back. It replaces those nodes by forms valid at the target.

Modes (how a reduction is lowered):

``standard``
    Exact standard ONNX ops valid at the target (TopK sort of the row keys, a segmented tree
    reduction in a Loop, one ScatterND write-back): see
    :mod:`scatter_rewrite.passes.lowering.segment_reduce` for the construction, its cost and its
    exactness
    (max/min and integers bit for bit, float add/mul within the validation tolerance).
``custom``
    One custom-domain node per reduction, which a runtime implements natively:
    ``ai.onnx.contrib::ScatterElements(data, indices, updates)`` with attributes ``axis`` (int,
    default 0) and ``reduction`` (string: add, mul, max, min), and
    ``ai.onnx.contrib::ScatterND(data, indices, updates)`` with ``reduction``. Their semantics are
    exactly ONNX ScatterElements-18/ScatterND-18 (onnxruntime's NaN rules for max/min). The domain
    is onnxruntime-extensions' custom-op domain, so :mod:`scatter_rewrite.custom_ops` runs them in
    onnxruntime (validation does). Opset import ``ai.onnx.contrib`` version 1. See
    docs/custom-ops.md. float16/bfloat16 data, which those ops cannot take, is cast to float32 for
    the node and back (exact for max/min; add/mul then round once, as the standard lowering's do).
``tensorrt-plugin``
    The form TensorRT's ONNX parser sends to its ``ScatterElements`` plugin (TensorRT >= 10):
    ``ai.onnx.contrib::ScatterElements`` as above, indices cast to int64 (the plugin takes INT64
    only), plus ``plugin_version="2"`` and ``plugin_namespace=""``. The parser dispatches on
    op_type only and ignores the domain, so the node reaches the built-in ScatterElements importer,
    which routes any reduction to the plugin. ScatterND reductions (no TensorRT support in any
    version) become that ScatterElements form on the data viewed as [rows, row size]. Data types
    the plugin lacks (only FP32, FP16, INT32, INT64, BF16) are lowered with standard ops instead.

TensorScatter is lowered to ScatterElements in every mode.

Before the move, an ``If`` whose condition is a compile-time constant and which feeds a node to
lower that could not be lowered as it stands or whose rank is unknown, or reads its output, is
replaced by the branch it always takes (:class:`~.inline_if.InlineConstantIfsPass` near
:meth:`LowerPass.inlining_helps`), and each such If is reported in the notes. That is PyTorch's TorchScript export of ``scatter_reduce``: Ifs on
"is x rank 0?" hide the scatter's rank, and in a function called on several shapes their
branches declare another call's shapes, which onnx.checker rejects whatever the mode. A custom
node's output declares the data's shape, so what follows it stays checkable. Other Ifs stay.

Leaves alone: nodes of other domains, reductions the target has. A node that cannot be lowered
(unknown rank, a data type without an exact lowering, ...) makes the target unreachable: the pass
raises ConversionError naming it and why. ``opset`` outside 11 to the installed onnx's highest or
an unknown ``mode`` raise OptionError.
"""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite import custom_ops
from scatter_rewrite.errors import ConversionError
from scatter_rewrite.limits import (
    DEFAULT_LOWER_OPSET, OPSET_FLOOR, REDUCTIONS, check_choice, check_opset,
)
from scatter_rewrite.graph import (
    Scope, attr, body_nodes, describe, is_default_domain, iter_nodes, nodes_within,
    reference_reason, remove_unused_expands, value_names,
)
from scatter_rewrite.passes.lowering import segment_reduce as seg
from scatter_rewrite.passes.lowering import tensor_scatter
from scatter_rewrite.passes.move_opset import KEPT_TYPES, restore_kept_types
from scatter_rewrite.type_inference import (
    annotate_functions_with,
    borrow_inferred_types,
    restore_types,
)
from scatter_rewrite.passes.inline_if import scatter_of_unknown_rank
from scatter_rewrite.passes.base import NodeNote, ScatterPass, every_node
from scatter_rewrite.said import said

__all__ = ["LowerPass"]

MODES = ("standard", "custom", "tensorrt-plugin")
CUSTOM_DOMAIN = custom_ops.DOMAIN  # onnxruntime-extensions fixes it
CUSTOM_DOMAIN_VERSION = 1
# TensorRT's ScatterElements plugin (plugin/scatterElementsPlugin, TensorRT >= 10): version 2,
# namespace "", data FP32/FP16/INT32/INT64/BF16, indices INT64 only.
TRT_PLUGIN_DTYPES = {
    ir.DataType.FLOAT,
    ir.DataType.FLOAT16,
    ir.DataType.INT32,
    ir.DataType.INT64,
    ir.DataType.BFLOAT16,
}


class LowerPass(ScatterPass):
    """Lower what the target opset lacks (see the module docstring); move the model to ``opset``."""

    name = "lower"

    def __init__(self, opset: int = DEFAULT_LOWER_OPSET, mode: str = "standard"):
        super().__init__()
        self.opset, self.mode = check_opset(opset), check_choice(mode, MODES, "mode")

    # ---------------------------------------------------------------- what to do with a node

    def lowers(self, node: ir.Node) -> bool:
        """Whether this pass would lower ``node`` (what SpecializeCallsPass specializes for it)."""
        return self.needs_lowering(node) is not None

    def needs_lowering(self, node: ir.Node) -> str | None:
        """'reduction' / 'tensor_scatter' / None."""
        if not is_default_domain(node):
            return None
        if node.op_type in ("ScatterElements", "ScatterND"):
            reduction = attr(node, "reduction", "none")
            # refers to a function attribute: may need lowering (the blocker says why not)
            if reduction is None:
                return "reduction" if self.opset < seg.first_opset_with("max") else None
            if reduction == "none":
                return None
            if reduction in REDUCTIONS and seg.first_opset_with(reduction) <= self.opset:
                return None  # the target has it
            return "reduction"
        if node.op_type == "TensorScatter" and self.opset < 24:
            return "tensor_scatter"
        return None

    def _blocker(self, kind: str, node: ir.Node) -> str | None:
        if (reason := reference_reason(node)) is not None:
            return reason  # its lowering depends on the attribute's value
        if kind == "tensor_scatter":
            return tensor_scatter.tensor_scatter_blocker(node, self.opset)
        if self.mode == "custom":
            return (
                None if attr(node, "reduction", "none") in REDUCTIONS else "unknown reduction"
            )
        return seg.reduction_blocker(node, self.opset)

    def has_work(self, model: ir.Model) -> bool:
        """Whether ``model`` holds a node this pass lowers."""
        return any(self.needs_lowering(n) for n, _ in iter_nodes(model))

    def run(self, model: ir.Model) -> None:
        pending: list[tuple[str, ir.Node, Scope]] = []
        blocked: list[NodeNote] = []
        if not self.has_work(model):
            self._run(model, pending, blocked)
            restore_kept_types(model)
            return
        # Decisions need dtypes and shapes the model may not record (values inside functions, the
        # Expand source of a GNN index): ONNX shape inference's, for as long as the pass runs, then
        # every value left as it came (nothing is added to the saved model). The move before this
        # pass borrowed them on the model before it moved (MoveOpsetPass(keep=...)); else here.
        moved = KEPT_TYPES in model.meta
        borrowed = [] if moved else (borrow_inferred_types(model, sharpen=True)
                                     + annotate_functions_with(model, self.needs_lowering))
        try:
            self._run(model, pending, blocked)
        finally:
            restore_types(borrowed)
            restore_kept_types(model)

    def inlining_helps(self, node: ir.Node) -> bool:
        """Where an If with a constant condition is best inlined first (InlineConstantIfsPass, in
        the verbs' lists before the move): in front of (or behind) a node to lower that cannot be
        lowered as it stands, or whose rank is unknown. TorchScript's rank-0 wrapper hides the
        scatter's rank, and in a function its branches may declare the shapes of another call
        (custom nodes need no rank, but the model would still fail the checker)."""
        kind = self.needs_lowering(node)
        return kind is not None and (
            scatter_of_unknown_rank(node) or self._blocker(kind, node) is not None
        )

    def _run(self, model: ir.Model, pending: list, blocked: list) -> None:
        target = self.opset
        for node, scope in iter_nodes(model):
            kind = self.needs_lowering(node)
            if kind is None:
                continue
            reason = self._blocker(kind, node)
            if reason is not None:
                self.skip(node, scope, reason)
                blocked.append(NodeNote(describe(node, scope), reason))
            else:
                pending.append((kind, node, scope))
        if blocked:
            raise ConversionError(said(
                f"cannot lower to opset {target}: ", every_node(blocked), "; fix the model or "
                "pick a target opset that has the op (max/min: 18, add/mul: 16)"))
        names = seg.Names(value_names(model))
        uses_custom: list[ir.Graph | ir.Function] = []
        built_in_functions: list[ir.Node] = []
        for kind, node, scope in pending:
            if kind == "tensor_scatter":
                nodes, out = tensor_scatter.lower_tensor_scatter(node, target, names)
                detail = f"-> ScatterElements(axis={attr(node, 'axis', -2)}) ({len(nodes)} nodes)"
            else:
                nodes, out, detail = self._lower(node, target, names)
                if any(n.domain == CUSTOM_DOMAIN for n in nodes):
                    uses_custom.append(scope.body)
            old_inputs = list(node.inputs)
            ir.convenience.replace_nodes_and_values(
                scope.body, node, [node], nodes, [node.outputs[0]], [out]
            )
            remove_unused_expands(scope.body, old_inputs)
            if isinstance(scope.body, ir.Function):
                built_in_functions += nodes
            self.rewrote(node, scope, detail)  # named as it was found (source opset)
        # Function values stay untyped, like the rest; only once every node is lowered: a reduction
        # chained after another in the same function reads the first one's (typed) lowered output.
        for new_node in nodes_within(built_in_functions):
            for value in new_node.outputs:
                value.type, value.shape = None, None
        if uses_custom:
            model.opset_imports[CUSTOM_DOMAIN] = CUSTOM_DOMAIN_VERSION
            for body in uses_custom:
                if isinstance(body, ir.Function):
                    body.opset_imports[CUSTOM_DOMAIN] = CUSTOM_DOMAIN_VERSION
            for function in model.functions.values():
                if any(n.domain == CUSTOM_DOMAIN for n in body_nodes(function)):
                    function.opset_imports[CUSTOM_DOMAIN] = CUSTOM_DOMAIN_VERSION

    # ---------------------------------------------------------------- one reduction

    def _lower(
        self, node: ir.Node, target: int, names: seg.Names
    ) -> tuple[list[ir.Node], ir.Value, str]:
        reduction = attr(node, "reduction", "none")
        if self.mode == "custom":
            nodes, out = custom_reduction(node, names)
            detail = f"-> {CUSTOM_DOMAIN}::{node.op_type}(reduction={reduction})"
            if _widened(node):
                detail += (f" on float32, cast from and back to "
                           f"{node.inputs[0].dtype.name.lower()} (onnxruntime-extensions' Python "
                           f"ops take no float16/bfloat16)")
            return nodes, out, detail
        if self.mode == "tensorrt-plugin":
            reason = tensorrt_plugin_blocker(node)
            if reason is None:
                nodes, out = tensorrt_plugin_reduction(node, names, target)
                return (
                    nodes,
                    out,
                    f"-> TensorRT ScatterElements plugin form (reduction={reduction})",
                )
            from scatter_rewrite.passes.lowering.network_reduce import (
                lower_reduction_network,
                network_blocker,
            )

            if network_blocker(node, target) is None:  # ops TensorRT's parser takes
                nodes, out = lower_reduction_network(node, target, names)
                return (
                    nodes,
                    out,
                    (
                        f"-> {len(nodes)} TensorRT-safe standard nodes (sorting network; "
                        f"the TensorRT plugin cannot: {reason})"
                    ),
                )
            nodes, out = seg.lower_reduction(node, target, names)
            return (
                nodes,
                out,
                (
                    f"-> {len(nodes)} standard nodes with a Loop whose carried values shrink, "
                    f"which TensorRT's parser rejects (the TensorRT plugin cannot: {reason}; the "
                    "number of updates is not static)"
                ),
            )
        nodes, out = seg.lower_reduction(node, target, names)
        return (
            nodes,
            out,
            f"-> {len(nodes)} standard nodes (sort + segmented {reduction} + ScatterND)",
        )


def custom_reduction(node: ir.Node, names: seg.Names) -> tuple[list[ir.Node], ir.Value]:
    """``ai.onnx.contrib::ScatterElements``/``ScatterND`` with the node's own inputs and
    attributes."""
    attributes = {"reduction": attr(node, "reduction", "none")}
    if node.op_type == "ScatterElements":
        attributes["axis"] = attr(node, "axis", 0)
    b = seg.Builder(names)
    names.prefix = seg.name_prefix(node)
    if _widened(node):  # float32 holds every value exactly: Cast there and back loses none
        data, indices, updates = node.inputs
        dtype, wide = data.dtype, ir.DataType.FLOAT
        result = b.op(node.op_type, b.cast(data, wide, dtype), indices,
                      b.cast(updates, wide, dtype), domain=CUSTOM_DOMAIN, dtype=wide, **attributes)
        _shaped_like_data(result, node)
        out = b.cast(result, dtype, wide)
    else:
        out = b.op(node.op_type, *node.inputs, domain=CUSTOM_DOMAIN, dtype=node.inputs[0].dtype,
                   **attributes)
    _shaped_like_data(out, node)
    return b.nodes, out


def _widened(node: ir.Node) -> bool:
    """Whether the custom node computes on float32 (custom_ops.WIDENED_TO_FLOAT32)."""
    dtype = node.inputs[0].dtype
    return dtype is not None and dtype.name in custom_ops.WIDENED_TO_FLOAT32


def _shaped_like_data(out: ir.Value, node: ir.Node) -> None:
    # ONNX shape inference knows nothing of a custom node: its output declares the data's shape (a
    # scatter's result has it) so the shapes after it stay inferable and checkable.
    data = node.inputs[0]
    if data.shape is not None:
        out.shape = ir.Shape(list(data.shape))


def tensorrt_plugin_blocker(node: ir.Node) -> str | None:
    dtype = node.inputs[0].dtype
    if dtype not in TRT_PLUGIN_DTYPES:
        return (
            f"data type {dtype.name if dtype else 'unknown'} (the plugin takes FP32, FP16, INT32, "
            "INT64, BF16)"
        )
    if node.op_type == "ScatterND":
        return seg.reduction_blocker(node, OPSET_FLOOR)  # needs the static index-tuple length
    return None


def tensorrt_plugin_reduction(
    node: ir.Node, names: seg.Names, opset: int
) -> tuple[list[ir.Node], ir.Value]:
    names.prefix = seg.name_prefix(node)
    b = seg.Builder(names)
    data, indices, updates = node.inputs
    if seg.is_empty(data):  # no element to write to: the result is the data
        return b.nodes, b.op("Identity", data, dtype=data.dtype)
    trt = {
        "reduction": attr(node, "reduction", "none"),
        "plugin_version": "2",
        "plugin_namespace": "",
    }
    if node.op_type == "ScatterElements":
        idx = b.cast(indices, seg.INT64, indices.dtype)
        out = b.op("ScatterElements", data, idx, updates, domain=CUSTOM_DOMAIN, dtype=data.dtype,
                   axis=attr(node, "axis", 0), **trt)
        _shaped_like_data(out, node)
        return b.nodes, out
    # ScatterND on [rows, row size]: every update row lands on one data row, in update order,
    # exactly what ScatterElements(axis=0) does with the row key repeated along the row.
    rows, keys, vals, _ = seg.scatter_nd_rows(b, data, indices, updates)
    expanded = b.op(
        "Expand",
        b.op("Reshape", keys, b.const([-1, 1]), dtype=seg.INT64),
        b.shape(vals),
        dtype=seg.INT64,
    )
    scattered = b.op(
        "ScatterElements",
        rows,
        expanded,
        vals,
        domain=CUSTOM_DOMAIN,
        dtype=data.dtype,
        axis=0,
        **trt,
    )
    return b.nodes, b.reshape_like(scattered, data, opset)
