"""Repair the TorchScript exporter's accumulating scatters: the only pass that changes results.

Rewrites, in the main graph, every If/Loop/Scan body and every model-local function, the chain
the TorchScript exporter (``dynamo=False``) emits for ``scatter_add`` below opset 16, ``index_add``
and ``index_put_(accumulate=True)`` at opsets 11-17 (pytorch/pytorch#61034, #111159)::

    zeros = Constant(0...) | ConstantOfShape(0)(Shape(self)) | ConstantOfShape(0)(shape)
    written = Scatter | ScatterElements | ScatterND (zeros, indices, updates)   # no reduction
    result = Add(self, written)

A repeated index is written once (the last write wins in onnxruntime) where PyTorch sums every
update. The scatter becomes the same scatter with ``reduction="add"``, which is what PyTorch
computed: ``self + (the sum of the updates at each index)``. At opset >= 16 that is the
ScatterElements/ScatterND attribute; below, :mod:`~.lowering.segment_reduce`'s exact standard-op
lowering
(the one ``lower`` uses); a model at opset 9/10 first moves to opset 11 (``Scatter`` becomes
``ScatterElements``, as ``upgrade`` does), since no lowering writes back with ``Scatter``.

A chain is repaired only when all of these hold (each is what the exporter emits; a chain that
fails one is left alone, its reason reported, since it may mean what it computes):

* the scatter is of the default domain, with no ``reduction`` (or ``"none"``), not a reference
  to a function attribute;
* its data is all zeros by construction (a zero ``Constant``, a non-overridable zero initializer,
  a ``ConstantOfShape`` of zero, or a Cast/Expand/Identity of one);
* its result is read by exactly one node, an ``Add``, and is no graph output;
* the Add's other input is the tensor the export accumulates into: of the zeros' data type and
  exactly their shape (no broadcast), known statically or because the zeros are
  ``ConstantOfShape(Shape(that tensor))``.

float16/bfloat16 data (onnxruntime's CPU provider has no reducing scatter for them) is lowered
the same way at every opset, so that the repaired model runs there.

It also rewrites dynamo's ``scatter_reduce(reduce="mean")`` (torch 2.13, opset 18), which comes out
as a scatter without reduction: the mean is lost. With ``include_self=False`` the graph itself says
so: a ``ScatterElements`` of constant zeros into ``x`` at ``idx`` (read by nothing else), then a
``ScatterElements`` without reduction of the updates at the same ``idx`` value and axis. With
``include_self=True`` the export is one plain ``ScatterElements``, told from ``scatter`` only by its
name ``node_scatter_reduce``: rewritten only when asked (``assume="scatter-reduce-mean"``), and the
report says what was assumed. Either becomes PyTorch's computation::

    sums   = ScatterElements(base, idx, updates, reduction="add")   # base: cleared x, or x
    counts = ScatterElements(0 | 1 (x's shape and type), idx, ones, reduction="add")
    mean   = Div(sums, Max(counts, 1))       # integers: floor division, as PyTorch divides them

A slot no update reaches keeps ``x`` (``x / 1``). Below opset 16 and for float16/bfloat16 the two
reducing scatters are lowered as above.

Every repaired node's report line names the pattern recognized and what it assumed. Leaves alone:
everything else; the repair is proven by :mod:`scatter_rewrite.repair_proof`.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from scatter_rewrite.export_patterns import (
    SCATTER_REDUCE_NAME, clearing_scatter, is_constant_zeros,
)
from scatter_rewrite.graph import (
    Scope, attr, constant_tensor, describe, is_default_domain, iter_nodes, mark_written,
    nodes_within, reference_reason, remove_unused_expands, value_names, written_for,
)
from scatter_rewrite.passes.lowering import segment_reduce as seg
from scatter_rewrite.limits import OPSET_FLOOR, REDUCTIONS_SINCE
from scatter_rewrite.passes.base import NodeNote, ScatterPass
from scatter_rewrite.said import param, said

__all__ = ["ASSUMPTIONS", "find_sites", "REPAIR_NOTE", "repairable_nodes", "RepairPass",
           "typed_sites"]

SCATTERS = ("Scatter", "ScatterElements", "ScatterND")
EXPORTER_BEHAVIOUR = (
    "TorchScript export of scatter_add (below opset 16), index_add or index_put_(accumulate=True): "
    "zeros -> scatter without reduction -> Add counts a repeated index once where PyTorch sums "
    "(pytorch/pytorch#61034, #111159)"
)
ACCUMULATE_ASSUMES = ("the Add's other input is the tensor PyTorch accumulated into (same type and "
                      "shape as the zeros), so PyTorch's result is it plus every update summed")
MEAN_BEHAVIOUR = ("dynamo export of scatter_reduce(reduce='mean', include_self=False): a scatter "
                  "of zeros clearing the targets, then a scatter without reduction of the updates "
                  "at the same indices (the mean lost: the last update written)")
MEAN_ASSUMES = ("the clearing scatter then the plain one at the same indices is the exporter's "
                "include_self=False reduction, and 'none' what it writes for mean")
NAMED_MEAN_BEHAVIOUR = ("a ScatterElements without reduction named as dynamo's scatter_reduce "
                        "(node_scatter_reduce)")
# What a caller may let repair assume beyond the graph (the verb's --assume): name -> meaning.
ASSUMPTIONS = {
    "scatter-reduce-mean": ("a ScatterElements without reduction named node_scatter_reduce "
                            "(dynamo's name) is scatter_reduce(reduce='mean', include_self=True)"),
}
HALF_FLOATS = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


@dataclasses.dataclass
class Site:
    """One mis-exported scatter and the scope it lives in. ``kind`` "accumulate": ``add`` reads it
    (the TorchScript chain); "mean": dynamo's scatter_reduce mean, ``clear`` the scatter of zeros
    before it (None: include_self=True, assumed from the name)."""

    scatter: ir.Node
    add: ir.Node | None
    scope: Scope
    kind: str = "accumulate"
    clear: ir.Node | None = None

    @property
    def include_self(self) -> bool:
        return self.clear is None


def find_sites(model: ir.Model, assume: str | None = None
               ) -> tuple[list[Site], list[tuple[ir.Node, Scope, str]]]:
    """The scatters :class:`RepairPass` repairs, and each lookalike it leaves alone, with why.
    ``assume``: a key of :data:`ASSUMPTIONS` (or None)."""
    sites, lookalikes = [], []
    for node, scope in iter_nodes(model):
        if node.op_type not in SCATTERS or not is_default_domain(node) or not node.inputs:
            continue
        mean = _mean_site(node, scope, assume)
        if mean is not None:
            sites.append(mean)
            continue
        add = _sole_add(node)
        if add is None or not _constant_fill(node.inputs[0]):
            continue  # no chain of the exporter's shape: not a lookalike either
        reason = _not_the_pattern(node, add)
        if reason is None:
            sites.append(Site(node, add, scope))
        else:
            lookalikes.append((node, scope, reason))
    return sites, lookalikes


def typed_sites(model: ir.Model, assume: str | None = None
                ) -> tuple[list[Site], list[tuple[ir.Node, Scope, str]]]:
    """:func:`find_sites` with the shapes ONNX infers lent to the model while it looks (restored
    after): the sites :class:`RepairPass` repairs, which anything judging its repair must see
    alike (an accumulation's Add reads the previous one, whose static shape only inference
    gives)."""
    from scatter_rewrite.type_inference import (
        annotate_functions_with, borrow_inferred_types, restore_types,
    )

    # Static shapes the export may not have recorded (in functions: from their call sites).
    scatters = lambda node: node.op_type in SCATTERS and is_default_domain(node)  # noqa: E731
    borrowed = borrow_inferred_types(model) + annotate_functions_with(model, scatters)
    try:
        return find_sites(model, assume)
    finally:
        restore_types(borrowed)


def _mean_site(node: ir.Node, scope: Scope, assume: str | None) -> Site | None:
    """The dynamo mean export ``node`` ends, when it is one (see the module docstring)."""
    if node.op_type != "ScatterElements" or attr(node, "reduction", "none") != "none":
        return None
    if (clear := clearing_scatter(node)) is not None:
        return Site(node, None, scope, "mean", clear)
    if (assume == "scatter-reduce-mean" and SCATTER_REDUCE_NAME.match(node.name or "")
            and reference_reason(node) is None and len(node.inputs) == 3
            and all(v is not None for v in node.inputs)):
        return Site(node, None, scope, "mean")
    return None


def _sole_add(node: ir.Node) -> ir.Node | None:
    """The Add that reads the scatter's result, when one does."""
    return next((user for user, _ in node.outputs[0].uses()
                 if user.op_type == "Add" and is_default_domain(user)), None)


def _constant_fill(value: ir.Value | None, depth: int = 0) -> bool:
    """Whether ``value`` is a constant the graph fills (zeros or not), as
    :func:`~scatter_rewrite.export_patterns.is_constant_zeros` follows one: where a lookalike
    starts."""
    if value is None or depth > 8:
        return False
    producer = value.producer()
    if producer is None:
        return value.is_initializer()
    if not is_default_domain(producer):
        return False
    if producer.op_type in ("Cast", "Expand", "Identity"):
        return _constant_fill(producer.inputs[0] if producer.inputs else None, depth + 1)
    return producer.op_type in ("Constant", "ConstantOfShape")


def _not_the_pattern(node: ir.Node, add: ir.Node) -> str | None:
    """Why ``node`` (a scatter into a constant, read by ``add``) is not certainly the exporter's
    accumulation; None when it is."""
    if (why := reference_reason(node)) is not None:
        return why
    reduction = attr(node, "reduction", "none") if node.op_type != "Scatter" else "none"
    if reduction != "none":
        return f"already reduces (reduction={reduction!r}): nothing to repair"
    if len(node.inputs) != 3 or any(v is None for v in node.inputs):
        return "does not have the 3 inputs data, indices, updates"
    zeros, written = node.inputs[0], node.outputs[0]
    if not is_constant_zeros(zeros):
        return ("writes into a constant that is not all zeros (or a graph input's default that a "
                "caller may override): not the exporter's zero fill")
    users = [user for user, _ in written.uses()]
    if len(users) != 1 or written.is_graph_output():
        return ("its result is read by more than the Add: repairing it would change those readers "
                "too")
    others = [v for v in add.inputs if v is not written]
    if len(add.inputs) != 2 or len(others) != 1:
        return (f"the Add {add.name or '<unnamed>'!r} does not add the scatter's result to one "
                "other tensor")
    base = others[0]
    if zeros.dtype is not None and base.dtype is not None and zeros.dtype != base.dtype:
        return f"the Add reads a {base.dtype.name} tensor into {zeros.dtype.name} zeros"
    if _shaped_by(zeros) is base:
        return None
    zero_shape, base_shape = _static_shape(zeros), _static_shape(base)
    if zero_shape is None or base_shape is None:
        return ("the shapes of the zeros and of the tensor the Add reads are not both static, and "
                "the zeros are not ConstantOfShape(Shape(that tensor)): it cannot be certain they "
                "match")
    if zero_shape != base_shape:
        return (f"the Add reads a tensor of shape {list(base_shape)} into zeros of shape "
                f"{list(zero_shape)} (a broadcast): not the tensor the export accumulates into")
    return None


def _shaped_by(zeros: ir.Value) -> ir.Value | None:
    """``v`` when ``zeros`` is ``ConstantOfShape(Shape(v))`` (Shape without start/end)."""
    producer = zeros.producer()
    if producer is None or producer.op_type != "ConstantOfShape" or not producer.inputs:
        return None
    shape = producer.inputs[0].producer() if producer.inputs[0] is not None else None
    if shape is None or shape.op_type != "Shape" or not is_default_domain(shape):
        return None
    if attr(shape, "start", 0) != 0 or attr(shape, "end", None) is not None:
        return None
    return shape.inputs[0]


def _static_shape(value: ir.Value) -> tuple[int, ...] | None:
    tensor = constant_tensor(value)
    if tensor is not None:
        return tuple(tensor.shape.dims)
    producer = value.producer()
    if producer is not None and producer.op_type == "ConstantOfShape" and producer.inputs:
        dims = constant_tensor(producer.inputs[0])
        if dims is not None:
            return tuple(int(d) for d in dims.numpy().reshape(-1))
    if value.shape is not None and all(isinstance(d, int) for d in value.shape):
        return tuple(value.shape.dims)
    return None


REPAIR_NOTE = ("`scatter-rewrite repair` changes it into what PyTorch computed (repeated indices "
               "summed, or averaged for a mean; see docs/repair.md)")


def repairable_nodes(model: ir.Model, assume: str | None = None) -> set[int]:
    """The ids of the scatter nodes :class:`RepairPass` would change (for ``check``)."""
    return {id(site.scatter) for site in typed_sites(model, assume)[0]}


class RepairPass(ScatterPass):
    """Give each TorchScript accumulating scatter ``reduction="add"`` (lowered below opset 16 and
    for float16/bfloat16), and make each dynamo scatter_reduce mean compute the mean.
    ``assume``: a key of :data:`ASSUMPTIONS`, what the caller lets it assume beyond the graph."""

    name = "repair"
    repairs = True

    def __init__(self, assume: str | None = None):
        super().__init__()
        if assume is not None and assume not in ASSUMPTIONS:
            raise ValueError(f"assume={assume!r}: pick one of {', '.join(ASSUMPTIONS)}")
        self.assume = assume

    def needs_upgrade(self, model: ir.Model) -> bool:
        """Whether a scatter this pass repairs is in a scope below opset 11 (a Scatter, or no
        ScatterElements reduction to give it): the repair verb runs UpgradePass(11) first then,
        as `upgrade` does it (:func:`scatter_rewrite.verbs.repair_passes`)."""
        from scatter_rewrite.graph import iter_scopes

        if all(scope.opset >= OPSET_FLOOR for scope in iter_scopes(model)):
            return False
        sites, _ = self._sites(model)
        return any(site.scope.opset < OPSET_FLOOR for site in sites)

    def _sites(self, model: ir.Model) -> tuple[list, list]:
        return typed_sites(model, self.assume)

    def run(self, model: ir.Model) -> None:
        from scatter_rewrite.type_inference import (
            annotate_functions_with, borrow_inferred_types, restore_types,
        )

        sites, lookalikes = self._sites(model)
        for node, scope, reason in lookalikes:
            self.skip(node, scope, reason)
        for site in [site for site in sites if site.scope.opset < OPSET_FLOOR]:
            sites.remove(site)  # (the repair verb upgrades first: needs_upgrade)
            self.skip(site.scatter, site.scope, f"opset {site.scope.opset} has no reducing "
                      f"scatter to write: run UpgradePass({OPSET_FLOOR}) first")
        if not sites:
            return
        found = {id(site.scatter): describe(site.scatter, site.scope) for site in sites}
        scopes = {id(node): scope for node, scope in iter_nodes(model) if id(node) in found}
        wanted = lambda node: id(node) in found  # noqa: E731
        borrowed = borrow_inferred_types(model) + annotate_functions_with(model, wanted)
        try:
            names = seg.Names(value_names(model))
            for site in sites:
                site.scope = scopes[id(site.scatter)]
                if site.kind == "mean":
                    self._repair_mean(site, found[id(site.scatter)], names)
                else:
                    self._repair(site.scatter, site.scope, found[id(site.scatter)], names)
        finally:
            restore_types(borrowed)

    def _repair(self, node: ir.Node, scope: Scope, found_as: str, names: seg.Names) -> None:
        origin = written_for(node, scope)  # (what the nodes it becomes are marked with)
        node.op_type = "ScatterElements" if node.op_type == "Scatter" else node.op_type
        node.attributes["reduction"] = ir.AttrString("reduction", "add")
        if not _needs_lowering(node, scope.opset):
            mark_written([node], origin)
            self._record(found_as, EXPORTER_BEHAVIOUR, ACCUMULATE_ASSUMES,
                         f"{node.op_type}(reduction='add')")
            return
        reason = seg.reduction_blocker(node, scope.opset)
        if reason is not None:
            del node.attributes["reduction"]
            self.skip(node, scope, f"{EXPORTER_BEHAVIOUR}; cannot be lowered at opset "
                                   f"{scope.opset}: {reason}")
            return
        nodes, out = seg.lower_reduction(node, scope.opset, names)
        why, old_inputs = _why_lowered(node, scope.opset), list(node.inputs)
        mark_written(nodes, origin)
        ir.convenience.replace_nodes_and_values(
            scope.body, node, [node], nodes, [node.outputs[0]], [out])
        remove_unused_expands(scope.body, old_inputs)
        self._record(found_as, EXPORTER_BEHAVIOUR, ACCUMULATE_ASSUMES,
                     f"{node.op_type}(reduction='add') lowered to {len(nodes)} standard nodes at "
                     f"opset {scope.opset} ({why}; sort + segmented add + ScatterND)")
        _untype_in_functions(scope, nodes)

    def _repair_mean(self, site: Site, found_as: str, names: seg.Names) -> None:
        """sum / count in place of the lost mean (the module docstring's graph)."""
        node, scope = site.scatter, site.scope
        x = node.inputs[0] if site.include_self else site.clear.inputs[0]
        base, idx, updates = node.inputs
        dtype = x.dtype
        if dtype is None or not (dtype.is_floating_point() or dtype.is_integer()):
            self.skip(node, scope, f"{_mean_behaviour(site)}; the data type "
                                   f"{dtype.name if dtype else 'is unknown'}: no mean to compute")
            return
        names.prefix = seg.name_prefix(node)
        b = seg.Builder(names)
        axis = attr(node, "axis", 0)
        one = np.ones((), dtype.numpy())
        count_base = b.op("ConstantOfShape", b.op("Shape", x, dtype=seg.INT64),
                          value=ir.tensor((one * int(site.include_self)).reshape(1)), dtype=dtype)
        ones = b.op("ConstantOfShape", b.op("Shape", updates, dtype=seg.INT64),
                    value=ir.tensor(one.reshape(1)), dtype=dtype)
        for value, like in ((count_base, x), (ones, updates)):
            value.shape = like.shape
        try:
            sums, how = _add_scatter(b, base, idx, updates, axis, scope.opset, names)
            counts, _ = _add_scatter(b, count_base, idx, ones, axis, scope.opset, names)
        except _Blocked as blocked:  # nothing spliced yet: the model keeps the export
            _detach(b.nodes)
            self.skip(node, scope, f"{_mean_behaviour(site)}; its sums cannot be lowered at "
                                   f"opset {scope.opset}: {blocked}")
            return
        safe = b.op("Max", counts, b.const(one, one.dtype), dtype=dtype)
        if dtype.is_floating_point():
            mean = b.op("Div", sums, safe, dtype=dtype)
        else:  # PyTorch divides integers with floor: (s - s mod c) / c, exact, c >= 1
            exact = b.op("Sub", sums, b.op("Mod", sums, safe, dtype=dtype), dtype=dtype)
            mean = b.op("Div", exact, safe, dtype=dtype)
        mark_written(b.nodes, written_for(node, scope))
        ir.convenience.replace_nodes_and_values(
            scope.body, node, [node], b.nodes, [node.outputs[0]], [mean])
        assumes = (MEAN_ASSUMES if not site.include_self
                   else said("(asked: ", param("assume", "scatter-reduce-mean"), ") ",
                             ASSUMPTIONS['scatter-reduce-mean']))
        division = "Div" if dtype.is_floating_point() else "floor division"
        self._record(found_as, _mean_behaviour(site), assumes,
                     f"sum / count ({how}; count of updates per slot"
                     f"{' plus one for self' if site.include_self else ''}, {division}; a slot "
                     "without updates keeps the data)")
        _untype_in_functions(scope, b.nodes)

    def _record(self, found_as: str, pattern: str, assumes: str, became: str) -> None:
        note = NodeNote(found_as, said(f"recognized {pattern}; assumed ", assumes, f"; -> {became}"))
        self.result.rewritten.append(note)
        self.result.modified = True


class _Blocked(Exception):
    """Why an add scatter that needs lowering cannot be lowered."""


def _add_scatter(b: seg.Builder, data, idx, updates, axis: int, opset: int,
                 names: seg.Names) -> tuple[ir.Value, str]:
    """``ScatterElements(data, idx, updates, reduction="add")``, lowered where onnxruntime's CPU
    provider or the opset has none; and how it was written. _Blocked where it cannot be."""
    out = b.op("ScatterElements", data, idx, updates, axis=axis, reduction="add",
               dtype=data.dtype)
    out.shape = data.shape
    scatter = out.producer()
    if not _needs_lowering(scatter, opset):
        return out, f"ScatterElements(reduction='add') at opset {opset}"
    if (reason := seg.reduction_blocker(scatter, opset)) is not None:
        raise _Blocked(reason)
    nodes, lowered = seg.lower_reduction(scatter, opset, names)
    how = (f"the add scatters lowered to standard nodes at opset {opset} "
           f"({_why_lowered(scatter, opset)})")
    b.nodes.remove(scatter)
    _detach([scatter])  # read by the lowering, then dropped: it must not stay a user of its inputs
    b.nodes.extend(nodes)
    return lowered, how


def _detach(nodes: list[ir.Node]) -> None:
    """Built nodes that are not spliced in, no longer users of their inputs."""
    for node in nodes:
        for i in range(len(node.inputs)):
            node.replace_input_with(i, None)


def _needs_lowering(node: ir.Node, opset: int) -> bool:
    """Below opset 16 no scatter reduces; onnxruntime's CPU provider reduces no float16/bfloat16."""
    return opset < REDUCTIONS_SINCE["add"] or node.inputs[0].dtype in HALF_FLOATS


def _why_lowered(node: ir.Node, opset: int) -> str:
    if opset < REDUCTIONS_SINCE["add"]:
        return f"no scatter reduces at opset {opset}"
    return (f"onnxruntime's CPU provider has no {node.inputs[0].dtype.name} scatter add; "
            "summed in float32, rounded once")


def _mean_behaviour(site: Site) -> str:
    return MEAN_BEHAVIOUR if not site.include_self else NAMED_MEAN_BEHAVIOUR


def _untype_in_functions(scope: Scope, nodes: list[ir.Node]) -> None:
    """Function values stay untyped, as lower leaves them."""
    if isinstance(scope.body, ir.Function):
        for new_node in nodes_within(nodes):
            for value in new_node.outputs:
                value.type, value.shape = None, None
