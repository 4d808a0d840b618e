"""Upgrade the deprecated ``Scatter`` to ``ScatterElements``.

Rewrites: every default-domain ``Scatter`` (opset 9/10, and the deprecated one still found in models
declaring opset >= 11, which the checker and onnxruntime reject) into ``ScatterElements`` with the
same ``axis`` and inputs; ``Scatter`` has exactly ScatterElements-11's semantics without a
reduction. The model's move to the target opset (11 or more, where ScatterElements exists) is the
next pass in every list that runs this one, :class:`~.move_opset.MoveOpsetPass`
(:func:`scatter_rewrite.verbs.upgrade_passes`); on the parsed file, :func:`upgrade_proto` does
both where they are only renames.

Leaves alone: nodes of other domains. Raises InvalidModelError for a ``Scatter`` that breaks its
spec where it can be seen statically (axis out of range, rank or shape mismatch).
"""

from __future__ import annotations

import onnx
import onnx_ir as ir

from scatter_rewrite.errors import InvalidModelError
from scatter_rewrite.limits import OPSET_FLOOR, check_opset
from scatter_rewrite.graph import (
    DEFAULT_DOMAINS, Scope, attr, default_opset, describe, describe_parts, is_default_domain,
    iter_nodes, mark_written, written_for,
)
from scatter_rewrite.opset import MIN_IR_VERSION, needs_conversion, opset_note
from scatter_rewrite.passes.base import NodeNote, ScatterPassResult, ScatterPass
from scatter_rewrite.spec import check_scatter_proto
from scatter_rewrite.said import param, said

__all__ = ["has_rejected_scatter", "has_scatter", "upgrade_proto", "upgrade_steps", "UpgradePass"]


def checked_upgrade(where: str, bfloat16: bool, target: int, shapes: dict[str, list | None],
                    axis: int | None) -> int | None:
    """What upgrading one Scatter (``where`` names it) to ScatterElements at opset ``target``
    demands, for the IR pass and its form on the parsed file alike: bfloat16 data (``bfloat16``)
    only from ScatterElements-13, and the spec's shapes (:func:`checked_axis`); the axis
    normalized (None: a reference to a function's attribute, kept as it is)."""
    if bfloat16 and target < 13:
        raise InvalidModelError(said(f"{where}: bfloat16 data needs ScatterElements-13; pass ",
                                     param("opset", 13)))
    return None if axis is None else checked_axis(where, shapes, axis)


def checked_axis(where: str, shapes: dict[str, list | None], axis: int) -> int:
    """:func:`check_scatter_elements_shapes` on the shapes of data, indices and updates (dims: int,
    or anything else when unknown); ``where`` names the node in the error."""
    ranks = {name: len(shape) for name, shape in shapes.items() if shape is not None}
    rank = ranks.get("data") or ranks.get("indices") or ranks.get("updates")
    if len(set(ranks.values())) > 1:
        raise InvalidModelError(
            f"{where}: data, indices and updates must have the same rank, got "
            + ", ".join(f"{k} rank {r}" for k, r in ranks.items())
            + "; fix the exporter or the model"
        )
    indices, updates = shapes.get("indices"), shapes.get("updates")
    if indices is not None and updates is not None:
        for a, b in zip(indices, updates):
            if isinstance(a, int) and isinstance(b, int) and a != b:
                raise InvalidModelError(
                    f"{where}: indices shape {indices} differs from updates "
                    f"shape {updates}; the spec requires them equal"
                )
    if rank is not None:
        if not -rank <= axis < rank:
            raise InvalidModelError(
                f"{where}: axis={axis} is out of range for rank {rank} "
                f"(allowed {-rank}..{rank - 1}); fix the attribute"
            )
        return axis % rank
    return axis


def has_scatter(model: ir.Model) -> bool:
    """Whether ``model`` holds a default-domain ``Scatter`` (which no opset >= 11 accepts)."""
    return any(n.op_type == "Scatter" and is_default_domain(n) for n, _ in iter_nodes(model))


def has_rejected_scatter(model: ir.Model) -> bool:
    """Whether ``model`` holds a default-domain ``Scatter`` at opset 11 or later, which onnx.checker
    and onnxruntime reject (a target that runs Scatter at opset 9/10 still needs it upgraded)."""
    return any(n.op_type == "Scatter" and is_default_domain(n) and (scope.opset or 0) >= OPSET_FLOOR
               for n, scope in iter_nodes(model))


class UpgradePass(ScatterPass):
    """Scatter -> ScatterElements everywhere. ``opset``: the one the model moves to next
    (MoveOpsetPass; None: its own, 11 at least), which bfloat16 data needs to be 13 or more."""

    name = "upgrade"

    def __init__(self, opset: int | None = None):
        super().__init__()
        self.opset = None if opset is None else check_opset(opset)

    def run(self, model: ir.Model) -> None:
        current = default_opset(model.opset_imports, fallback=1)
        target = self.opset or max(current, OPSET_FLOOR)
        for node, scope in iter_nodes(model):
            if node.op_type == "Scatter" and is_default_domain(node):
                self._rewrite(node, scope, target)

    def _rewrite(self, node: ir.Node, scope: Scope, target: int) -> None:
        shapes = {name: (None if v is None or v.shape is None else list(v.shape))
                  for name, v in zip(("data", "indices", "updates"), node.inputs[:3])}
        axis = checked_upgrade(describe(node, scope), node.inputs[0].dtype == ir.DataType.BFLOAT16,
                               target, shapes, attr(node, "axis", 0))
        # a reference to a function attribute, kept as it is: ScatterElements reads it the same way
        if axis is None:
            axis = f"@{node.attributes['axis'].ref_attr_name}"
        origin = written_for(node, scope)
        self.rewrote(
            node, scope, f"-> ScatterElements(axis={axis})"
        )  # described as the Scatter it was
        # Same inputs, output, name and axis: renaming the op in place is the whole rewrite (no use
        # lists to rewire: 0.5 s less on a 50k-node chain), once any attribute but axis is dropped.
        for name in [n for n in node.attributes if n != "axis"]:
            del node.attributes[name]
        node.op_type = "ScatterElements"
        mark_written([node], origin)  # (a later refusal names the user's Scatter)


def upgrade_steps(opset: int | None = None):
    """UpgradePass and the move after it (MoveOpsetPass, to ``opset``; None: the model's own, 11
    at least), one report line; on the parsed file, :func:`upgrade_proto`."""
    import functools

    from scatter_rewrite.passes.compose import Steps
    from scatter_rewrite.passes.move_opset import MoveOpsetPass

    return Steps(UpgradePass(opset), MoveOpsetPass(opset), name=UpgradePass.name,
                 call_on_proto=functools.partial(upgrade_proto, opset=opset))


def upgrade_proto(proto: onnx.ModelProto, opset: int | None = None) -> ScatterPassResult | None:
    """:class:`UpgradePass` and the move to ``opset`` after it (:func:`scatter_rewrite.verbs.
    upgrade_passes`) done on the parsed file, in place, where they are only renames: a graph
    with no subgraphs, no local functions and no external data, whose other nodes keep their schema
    at the target opset. None (``proto`` untouched) for any other model: the IR path handles it.

    Same result and report as the two passes, without the IR round trip that dominates a big flat
    graph's upgrade (50k nodes: ~1.5 s of deserializing and serializing for a few thousand renames):
    the pipeline's form of the ``upgrade`` verb's steps on a model that allows it
    (:func:`scatter_rewrite.pipeline.parsed_form`).
    """
    from scatter_rewrite.model_io import has_external_data

    graph = proto.graph
    if (
        proto.functions
        or has_external_data(proto)
        or any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
            for n in graph.node
            for a in n.attribute
        )
    ):
        return None
    current = default_opset({o.domain: o.version for o in proto.opset_import}, fallback=1)
    target = opset or max(current, OPSET_FLOOR)
    types = {t.name: t.type.tensor_type for t in [*graph.input, *graph.value_info, *graph.output]
             if t.type.HasField("tensor_type")}
    shapes = {name: [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
              for name, t in types.items() if t.HasField("shape")}
    shapes.update({t.name: list(t.dims) for t in graph.initializer})
    scatters = []
    for node in graph.node:
        if node.domain not in DEFAULT_DOMAINS:
            continue
        data_shape = shapes.get(node.input[0]) if node.input else None
        # (as every pass does on the IR)
        check_scatter_proto(
            node, current, "main graph", None if data_shape is None else len(data_shape)
        )
        if node.op_type == "Scatter":
            scatters.append(node)
        elif needs_conversion(node.op_type, current, target):
            return None
    dtypes = {name: t.elem_type for name, t in types.items()} | {
        t.name: t.data_type for t in graph.initializer
    }
    result = ScatterPassResult(None, False, name=UpgradePass.name)
    for node in scatters:
        where = describe_parts(node.op_type, node.name, current, "main graph")
        axis = checked_upgrade(
            where, dtypes.get(node.input[0]) == onnx.TensorProto.BFLOAT16, target,
            {k: shapes.get(v) for k, v in zip(("data", "indices", "updates"), node.input)},
            next((a.i for a in node.attribute if a.name == "axis"), 0))
        result.rewritten.append(NodeNote(where, f"-> ScatterElements(axis={axis})"))
    for node in scatters:
        node.op_type = "ScatterElements"
        for a in [a for a in node.attribute if a.name != "axis"]:
            node.attribute.remove(a)
    result.modified = bool(scatters)
    if current != target:
        imports = [o for o in proto.opset_import if o.domain in DEFAULT_DOMAINS]
        for o in imports:
            o.version = target
        if not imports:
            proto.opset_import.add(domain="", version=target)
        proto.ir_version = max(proto.ir_version, MIN_IR_VERSION)
        result.notes.append(opset_note({current}, target, 0))
        result.modified = True
    return result
