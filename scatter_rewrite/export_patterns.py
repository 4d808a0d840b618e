"""Exporter patterns: scatters whose model computes something other than the PyTorch code exported,
which no rewrite can see is wrong (validation proves a rewrite equal to the export, not to PyTorch).
Every verb notes them in its report and ``check`` in its findings.

Kept apart from :mod:`scatter_rewrite.readiness`, which imports every pass: each verb asks this of
the model it is given, and a fold should not pay for importing the TensorRT passes.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnx_ir as ir

from scatter_rewrite.graph import (
    DEFAULT_DOMAINS, attr, describe, is_default_domain, is_reference, iter_nodes, reference_reason,
)
from scatter_rewrite.said import call, said

__all__ = [
    "accumulate_export_notes", "accumulate_export_suspect", "ACCUMULATE_NOTE_START",
    "CLEARED_MEAN_NOTE_START",
    "clearing_scatter", "is_constant_zeros", "may_note", "mean_export_suspect",
    "SCATTER_REDUCE_NAME",
]

ACCUMULATE_NOTE_START = "writes into zeros and its result is added"
MEAN_NOTE_START = "is named as dynamo's export of scatter_reduce and has no reduction"
CLEARED_MEAN_NOTE_START = "has no reduction after a scatter of zeros at the same indices"
# The dynamo exporter names a node after its aten op: node_scatter_reduce, node_scatter_reduce_1...
SCATTER_REDUCE_NAME = re.compile(r"node_scatter_reduce(_\d+)?$")


def accumulate_export_suspect(node: ir.Node, reduction: str | None) -> str | None:
    """A note when ``node`` looks like the TorchScript exporter's form of an accumulating scatter:
    a scatter without reduction into constant zeros whose result goes into an ``Add``. That is how
    it exports ``scatter_add`` below opset 16, ``index_add`` and ``index_put_(accumulate=True)``
    (docs/pytorch-exporters.md; pytorch/pytorch#61034, #111159): a repeated
    index is counted once where PyTorch sums. The model is what it is, so every rewrite keeps it
    (validation proves equality with the export, not with PyTorch); only the export can be fixed.
    None otherwise."""
    if (node.op_type not in ("Scatter", "ScatterElements", "ScatterND")
            or (reduction or "none") != "none"):
        return None
    add = next((user for user, _ in node.outputs[0].uses()
                if user.op_type == "Add" and is_default_domain(user)), None)
    # (the Add first: no data read)
    if add is None or not node.inputs or not is_constant_zeros(node.inputs[0]):
        return None
    return (f"{ACCUMULATE_NOTE_START} (Add {add.name or '<unnamed>'!r}): TorchScript's export of "
            "scatter_add (below opset 16), index_add and index_put_(accumulate=True), which "
            "counts a repeated index once where PyTorch sums; if indices can repeat, re-export "
            "with dynamo=True (or scatter_add at opset 16 or later)")


def mean_export_suspect(node: ir.Node, reduction: str | None) -> str | None:
    """A note when ``node`` looks like the dynamo exporter's form of
    ``scatter_reduce(reduce="mean")`` (torch 2.13, opset 18): a ScatterElements with
    ``reduction="none"`` written out, which loses the mean (each index gets the last update
    written). With ``include_self=False`` the graph says so (:func:`clearing_scatter`) and
    ``repair`` computes the mean; with ``include_self=True`` only the name ``node_scatter_reduce``
    tells it from a plain ``scatter``, which exports to the very same node, so ``repair`` rewrites
    it only when asked to assume it. ``reduction``: the attribute as written (None when absent).
    None otherwise."""
    if node.op_type != "ScatterElements" or reduction != "none":
        return None
    if clearing_scatter(node) is not None:
        return said(f"{CLEARED_MEAN_NOTE_START}: how torch.onnx (dynamo=True) exports "
                    "scatter_reduce(reduce='mean', include_self=False), which keeps the last "
                    "update written instead of the mean; ", call("repair"), " computes the mean "
                    "(docs/repair.md)")
    if not SCATTER_REDUCE_NAME.match(node.name or ""):
        return None
    return said(f"{MEAN_NOTE_START}: how torch.onnx (dynamo=True) exports "
            "scatter_reduce(reduce='mean', include_self=True), which keeps the last update written "
            "instead of the mean; nothing but the name tells it from a plain scatter, so it is "
            "changed only on request: if it is that mean, ",
            call("repair", assume="scatter-reduce-mean"), " computes it (docs/repair.md)")


def clearing_scatter(node: ir.Node) -> ir.Node | None:
    """The scatter that clears ``node``'s targets when ``node`` ends dynamo's export of an
    ``include_self=False`` reduction: ``node`` a ScatterElements without reduction whose data is
    a ScatterElements without reduction of constant zeros at the same indices value and axis, read
    by nothing else. None otherwise."""
    if not _plain_scatter_elements(node):
        return None
    cleared = node.inputs[0]
    clear = cleared.producer()
    if (clear is None or not _plain_scatter_elements(clear) or clear.inputs[1] is not node.inputs[1]
            or attr(clear, "axis", 0) != attr(node, "axis", 0)
            or not is_constant_zeros(clear.inputs[2])
            or len(cleared.uses()) != 1 or cleared.is_graph_output()):
        return None
    return clear


def _plain_scatter_elements(node: ir.Node) -> bool:
    return (node.op_type == "ScatterElements" and is_default_domain(node)
            and reference_reason(node) is None and attr(node, "reduction", "none") == "none"
            and len(node.inputs) == 3 and all(v is not None for v in node.inputs))


def accumulate_export_notes(model: ir.Model) -> list[str]:
    """The exporter-pattern notes (:func:`accumulate_export_suspect`, :func:`mean_export_suspect`)
    for every scatter node of ``model``, each note naming its node."""
    notes = []
    for node, scope in iter_nodes(model):
        if not is_default_domain(node):
            continue
        reduction = (attr(node, "reduction", None)
                     if node.op_type in ("ScatterElements", "ScatterND") else None)
        for suspect in (accumulate_export_suspect, mean_export_suspect):
            if (note := suspect(node, reduction)) is not None:
                notes.append(said(f"{describe(node, scope)} ", note))
    return notes


def may_note(proto: onnx.ModelProto) -> bool:
    """Whether :func:`accumulate_export_notes` may note anything on ``proto``, read without the IR:
    False only when it certainly notes nothing. Each note needs a default-domain scatter read by
    an ``Add`` (the accumulating form) or a ``ScatterElements`` whose reduction is written as
    ``"none"`` (the mean's forms); subgraphs and functions are not looked into (True)."""
    graph_types = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
    if proto.functions or any(a.type in graph_types for n in proto.graph.node for a in n.attribute):
        return True
    added = {name for n in proto.graph.node if n.op_type == "Add" for name in n.input}
    for node in proto.graph.node:
        if node.domain not in DEFAULT_DOMAINS:
            continue
        if node.op_type in ("Scatter", "ScatterElements", "ScatterND") and node.output[0] in added:
            return True
        if node.op_type == "ScatterElements" and any(
                a.name == "reduction" and a.s == b"none" for a in node.attribute):
            return True
    return False


def is_constant_zeros(value: ir.Value | None, depth: int = 0) -> bool:
    """Whether ``value`` is all zeros by construction: a zero Constant or initializer, a
    ConstantOfShape of zero (its default), or a Cast/Expand/Identity of one."""
    if value is None or depth > 8:
        return False
    if value.producer() is None:  # an initializer, unless a graph input may override it
        return (value.const_value is not None and not value.is_graph_input()
                and _all_zero(value.const_value))
    node = value.producer()
    if node is None or not is_default_domain(node):
        return False
    tensor = node.attributes.get("value")
    # A function's attribute: known at a call site only.
    if tensor is not None and is_reference(tensor):
        return False
    if node.op_type == "Constant":
        return (tensor is not None and tensor.type == ir.AttributeType.TENSOR
                and _all_zero(tensor.value))
    if node.op_type == "ConstantOfShape":
        return tensor is None or (tensor.type == ir.AttributeType.TENSOR
                                  and _all_zero(tensor.value))
    if node.op_type in ("Cast", "Expand", "Identity"):
        return is_constant_zeros(node.inputs[0] if node.inputs else None, depth + 1)
    return False


def _all_zero(tensor) -> bool:
    try:
        array = tensor.numpy()
        if array.dtype.kind in "OSU":
            return False
        if array.dtype.kind not in "biufc":  # bfloat16, float8: ml_dtypes arrays
            array = array.astype(np.float32)
    except Exception:
        return False  # an unreadable external file, an unconvertible type: no zeros to vouch for
    # Block by block, stopping at the first nonzero one: a weight's first values say it is no
    # zeros without paging in the rest of a mapped 64 MiB tensor (the fold benchmark's peak paid).
    flat = array.reshape(-1)
    step = max(1, (1 << 20) // max(1, flat.itemsize))
    return not any(flat[start:start + step].any() for start in range(0, flat.size, step))
