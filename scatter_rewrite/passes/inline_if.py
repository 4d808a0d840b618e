"""Inline every ``If`` whose condition is a compile-time constant: the If becomes the branch it
takes.

Why: PyTorch's TorchScript exporter (``dynamo=False``) wraps ``scatter_reduce`` in two Ifs on
``Equal(Size(Shape(x)), 0)`` (is x rank 0?): the first reshapes x/index/src to 1-D or passes them
through, the second squeezes the result. Branches of different ranks leave the If outputs without a
rank, so nothing downstream can be lowered. Whenever x's rank is known the condition is constant
(``Size(Shape(x))`` is the rank, even with dynamic dims) and the If is just its taken branch.

Constant means what :class:`scatter_rewrite.passes.fold.ConstantChains` says: a ``Constant``, an
initializer that is not a graph input, or a chain of its ops over those, where ``Shape``/``Size``
need only the static dims or the rank they read. Ranks and dims come from the model and from ONNX
shape inference (borrowed for the decision, then given back; a function's values get the types of
its call sites). The condition must hold exactly one element.

Inlining, in the main graph, every subgraph and every model-local function (the one traversal,
:mod:`scatter_rewrite.graph`): the taken branch's nodes move in front of the If (they already read
the outer values they capture: the same ``ir.Value`` objects); its initializers become initializers
of the enclosing graph, or ``Constant`` nodes in a function; the If's outputs are replaced by the
branch's outputs, which take the If output's name where it is an output of the enclosing graph (an
``Identity`` keeps it when the branch returns a value it does not produce); moved values whose names
are used elsewhere are renamed. The If goes, and so do the nodes and initializers of its condition
that nothing else uses. Ifs nested in a taken branch come up with it and are decided in the next
round. Exporters declare If outputs from both branches merged (TorchScript declares the scatter
result ``float[12]`` for a ``[4, 3]`` tensor); every value that came out of a taken branch is
checked against ONNX shape inference afterwards, and a declared shape that contradicts it (another
rank or another static dim) is replaced by the inferred one, and said so.

Left alone: Ifs whose condition depends on a value known only at run time (a graph input, a
function input, a dynamic dim, a non-chain op), a condition of several elements, branches given as
function attribute references, and Ifs the caller's ``near`` does not select.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable

import onnx_ir as ir

from scatter_rewrite.graph import (
    Scope, body_nodes, describe, is_default_domain, is_reference, iter_nodes, iter_scopes,
    mark_written, written_for,
)
from scatter_rewrite.type_inference import (
    annotate_function_types, borrow_inferred_types, inferred_tensor_types, restore_types, shape_of,
)
from scatter_rewrite.passes.base import ScatterPass
from scatter_rewrite.passes.fold import CannotEvaluate, ConstantChains

__all__ = ["InlineConstantIfsPass", "inline_constant_ifs", "inline_ifs_hiding_rank",
           "scatter_of_unknown_rank"]

logger = logging.getLogger("scatter_rewrite")

BRANCHES = ("then_branch", "else_branch")


def inline_constant_ifs(
    model: ir.Model, near: Callable[[ir.Node], bool] | None = None
) -> list[str]:
    """Inline, in place, every If whose condition is constant (see the module docstring); return one
    line per If inlined and per declared shape corrected, for the pass's notes.

    ``near``: when given, only Ifs related to a node it selects are inlined: an If that feeds the
    node (through any chain of nodes, its data/indices/updates for a scatter) or that reads its
    output. It is called while ONNX-inferred types are set on the values, so it may look at ranks
    (e.g. "a scatter that must be lowered and cannot be: its rank is unknown").
    """
    messages: list[str] = []
    touched: list[
        tuple[ir.Value, ir.Shape | None]
    ] = []  # values out of taken branches, declared shape
    declined: set[ir.Node] = set()
    # each round inlines or declines at least one If; nested ones come up one level per round
    while True:
        decisions = _decide(model, near, declined)
        if not decisions:
            break
        decided = {node for node, _, _ in decisions}
        inner = {g for node in decided for g in _graphs_within(node)}
        for node, scope, (branch, value, why) in decisions:
            if scope.body in inner:
                # Inside a branch inlined (or dropped) this round: decided again next round.
                continue
            text = _inline(model, node, scope, branch, value, why, touched)
            if text is None:
                declined.add(node)
            else:
                messages.append(text)
    if touched:
        messages += _correct_declared_shapes(model, touched)
    for text in messages:
        logger.debug("inline-if: %s", text)
    return messages


class InlineConstantIfsPass(ScatterPass):
    """:func:`inline_constant_ifs` near the nodes ``near`` selects, as a step of a verb's list
    (``lower``: before the opset move, as the lowering needs); each If inlined is a note."""

    name = "inline-if"

    def __init__(self, near: Callable[[ir.Node], bool]):
        super().__init__()
        self.near = near

    def run(self, model: ir.Model) -> None:
        for text in inline_constant_ifs(model, near=self.near):
            self.note(text, modified=True)


def scatter_of_unknown_rank(node: ir.Node) -> bool:
    """A ``near`` for passes that need a scatter's rank: a default-domain ScatterElements/ScatterND
    with an input whose rank even ONNX shape inference does not know."""
    return (node.op_type in ("ScatterElements", "ScatterND") and is_default_domain(node)
            and any(v is not None and v.shape is None for v in node.inputs))


def inline_ifs_hiding_rank(model: ir.Model, wanted: Callable[[ir.Node], bool]) -> list[str]:
    """:func:`inline_constant_ifs` near the scatters ``wanted`` selects whose rank is unknown
    (:func:`scatter_of_unknown_rank`; TorchScript's rank-0 wrapper), for passes that need that rank.
    Deciding runs shape inference: skipped when no If or no such scatter lacks a recorded shape."""
    def near(node: ir.Node) -> bool:
        return scatter_of_unknown_rank(node) and wanted(node)

    nodes = [n for n, _ in iter_nodes(model)]
    if not any(_is_if(n) for n in nodes) or not any(near(n) for n in nodes):
        return []
    return inline_constant_ifs(model, near=near)


# ---- deciding -----------------------------------------------------------------------------------


def _is_if(node: ir.Node) -> bool:
    return node.op_type == "If" and is_default_domain(node)


def _decide(
    model: ir.Model, near, declined: set[ir.Node]
) -> list[tuple[ir.Node, Scope, tuple[str, bool, str]]]:
    if not any(_is_if(n) for n, _ in iter_nodes(model)):
        return []
    borrowed = borrow_inferred_types(model)
    for function in model.functions.values():
        # an If elsewhere cannot concern a node inside
        if any(_is_if(n) for n in body_nodes(function)):
            borrowed += annotate_function_types(model, function)
    try:
        wanted = None if near is None else _related_ifs(model, near)
        if wanted is not None and not wanted:
            return []
        chains = ConstantChains()
        decisions = []
        for node, scope in iter_nodes(model):
            if _is_if(node) and node not in declined and (wanted is None or node in wanted):
                taken = _constant_branch(node, scope, chains)
                if taken is not None:
                    decisions.append((node, scope, taken))
        return decisions
    finally:
        restore_types(borrowed)


def _related_ifs(model: ir.Model, near) -> set[ir.Node]:
    """The Ifs that feed a node ``near`` selects, or read its outputs."""
    targets = [n for n, _ in iter_nodes(model) if near(n)]
    related: set[ir.Node] = set()
    seen: set[ir.Value] = set()
    stack = [v for t in targets for v in t.inputs if v is not None]
    while stack:
        value = stack.pop()
        if value in seen:
            continue
        seen.add(value)
        producer = value.producer()
        if producer is None:
            continue
        if _is_if(producer):
            related.add(producer)
        stack.extend(v for v in producer.inputs if v is not None)
    # A branch reads an outer value directly (an If has no input for it): climb from each reader's
    # graph to the If that owns it, up to the target's own graph.
    owner = {g: n for n, _ in iter_nodes(model) for g in _graphs_within(n, nested=False)}
    for target in targets:
        for out in target.outputs:
            for use in out.uses():
                reader, graph = use.node, use.node.graph
                if _is_if(reader):
                    related.add(reader)
                while graph is not target.graph and graph in owner:
                    reader = owner[graph]
                    if _is_if(reader):
                        related.add(reader)
                    graph = reader.graph
    return related


def _constant_branch(
    node: ir.Node, scope: Scope, chains: ConstantChains
) -> tuple[str, bool, str] | None:
    """(branch the If always takes, the condition's value, what the condition is), or None."""
    if len(node.inputs) != 1 or node.inputs[0] is None:
        return None
    for name in BRANCHES:
        a = node.attributes.get(name)
        if a is None or is_reference(a) or a.type != ir.AttributeType.GRAPH:
            return None  # a reference to a function attribute: unknown until called
        if len(a.value.outputs) != len(node.outputs):
            return None  # malformed: leave it to the checker
    cond = node.inputs[0]
    if chains.why_not(cond) is not None:
        return None
    try:
        array = chains.evaluate(cond, scope.opset)
    except CannotEvaluate:
        return None
    if array.size != 1:
        return None
    value = bool(array.reshape(-1)[0])
    producer = cond.producer()
    what = f"{producer.op_type} '{cond.name}'" if producer is not None else f"'{cond.name}'"
    return BRANCHES[0] if value else BRANCHES[1], value, what


def _graphs_within(node: ir.Node, nested: bool = True):
    """The node's subgraphs, and (``nested``) theirs."""
    for a in node.attributes.values():
        if is_reference(a):
            continue
        graphs = [a.value] if a.type == ir.AttributeType.GRAPH else (
            list(a.value) if a.type == ir.AttributeType.GRAPHS else [])
        for graph in graphs:
            yield graph
            if nested:
                for inner in graph:
                    yield from _graphs_within(inner)


# ---- inlining -----------------------------------------------------------------------------------


def _inline(model: ir.Model, node: ir.Node, scope: Scope, branch: str, value: bool, why: str,
            touched: list) -> str | None:
    """Inline one If (None: it cannot be, a branch output names no value)."""
    body = scope.body
    graph: ir.Graph = node.attributes[branch].value
    where = describe(node, scope)
    moved = list(graph)
    outputs = _resolved_outputs(model, node, graph)
    if outputs is None:
        return None
    _rename_clashes(model, node, graph, moved)
    graph.outputs.clear()
    graph.remove(moved)
    in_function = isinstance(body, ir.Function)
    constants = []
    for name, init in list(graph.initializers.items()):
        graph.initializers.pop(name)
        if in_function:  # no initializers in a function: a Constant node holds it
            constant = ir.node("Constant", [], attributes={"value": init.const_value})
            constant.outputs[0].name = init.name
            mark_written([constant], written_for(node, scope))
            constants.append(constant)
            init.replace_all_uses_with(constant.outputs[0])
            outputs = [constant.outputs[0] if v is init else v for v in outputs]
        else:
            body.register_initializer(init)
    moved = constants + moved
    body.insert_before(node, moved)
    if in_function:  # a function's values are untyped: their types depend on the call site
        for out in (v for n in moved for v in n.outputs):
            out.type, out.shape = None, None
    moved_set = set(moved)
    for out_if, out_b in zip(node.outputs, outputs):
        replacement = out_b
        if out_if.is_graph_output():  # the enclosing graph's output keeps its name
            if (
                out_b.producer() in moved_set
                and not out_b.is_graph_output()
                and outputs.count(out_b) == 1
            ):
                out_b.name = out_if.name
            else:
                identity = ir.node("Identity", [out_b])
                mark_written([identity], written_for(node, scope))
                body.insert_before(node, identity)
                moved.append(identity)
                replacement = identity.outputs[0]
                replacement.name = out_if.name
            if replacement.type is None and not in_function:
                replacement.type = out_if.type
            if replacement.shape is None and not in_function:
                replacement.shape = out_if.shape
        out_if.replace_all_uses_with(replacement, replace_graph_outputs=True)
    cond = node.inputs[0]
    body.remove(node, safe=True)
    removed = ConstantChains().prune([cond])
    if not in_function:
        touched.extend((v, v.shape) for n in moved for v in n.outputs)
    extra = f"; {removed} condition node(s)/initializer(s) left unused removed" if removed else ""
    return (f"{where}: condition {why} is always {str(value).lower()} -> {branch} inlined "
            f"({len(moved)} node(s)){extra}")


def _resolved_outputs(model: ir.Model, node: ir.Node, graph: ir.Graph) -> list[ir.Value] | None:
    """The branch's outputs. A branch that returns an outer value directly holds, in onnx_ir, a
    stand-in of that name without a producer: the outer value it names is found by name (None: no
    value has that name)."""
    outputs = list(graph.outputs)
    dangling = [
        v
        for v in outputs
        if v.producer() is None and not v.is_initializer() and not v.is_graph_input()
    ]
    if not dangling:
        return outputs
    inner = set(_graphs_within(node))
    by_name: dict[str, ir.Value] = {}
    for scope in iter_scopes(model):
        if scope.body in inner:
            continue
        values = list(scope.body.inputs) + [v for n in scope.body for v in n.outputs]
        if isinstance(scope.body, ir.Graph):
            values += list(scope.body.initializers.values())
        by_name.update((v.name, v) for v in values if v is not None and v.name)
    resolved = []
    for v in outputs:
        if v in dangling:
            if v.name not in by_name:
                return None
            v = by_name[v.name]
        resolved.append(v)
    return resolved


def _rename_clashes(model: ir.Model, node: ir.Node, graph: ir.Graph, moved: list[ir.Node]) -> None:
    """Moved values whose name another scope also defines get a fresh one (names are global in ONNX:
    the other branch, or a sibling If's branch, may reuse them)."""
    inner = set(_graphs_within(node))
    outside: set[str] = set()
    for scope in iter_scopes(model):
        if scope.body in inner:
            continue
        body = scope.body
        values = list(body.inputs) + list(body.outputs) + [v for n in body for v in n.outputs]
        if isinstance(body, ir.Graph):
            values += list(body.initializers.values())
        outside.update(v.name for v in values if v is not None and v.name)
    own = [v for n in moved for v in n.outputs] + list(graph.initializers.values())
    taken = outside | {v.name for v in own if v.name}
    for v in own:
        if v.name in outside:
            fresh = next(
                f"{v.name}_{k}" for k in itertools.count(1) if f"{v.name}_{k}" not in taken
            )
            if v.is_initializer():
                graph.initializers.pop(v.name)
                v.name = fresh
                graph.register_initializer(v)
            else:
                v.name = fresh
            taken.add(fresh)


def _contradicts(declared: ir.Shape, inferred: ir.Shape) -> bool:
    if len(declared) != len(inferred):
        return True
    return any(
        isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(declared, inferred)
    )


def _correct_declared_shapes(
    model: ir.Model, touched: list[tuple[ir.Value, ir.Shape | None]]
) -> list[str]:
    """Check the declared shape of every value that came out of a taken branch against ONNX shape
    inference (run without those declarations); replace the ones it contradicts."""
    live = [
        (v, declared) for v, declared in touched if declared is not None and v.graph is not None
    ]
    for v, _ in live:
        v.shape = None
    found = inferred_tensor_types(model) or {}
    messages = []
    for v, declared in live:
        t = found.get(v)
        inferred = shape_of(t) if t is not None else None
        if inferred is not None and _contradicts(declared, inferred):
            messages.append(
                f"'{v.name}' (out of an inlined If) was declared {list(declared)}, but the taken "
                f"branch computes {list(inferred)}: the declared shape is replaced"
            )
            v.shape = inferred
        else:
            v.shape = declared
    return messages
