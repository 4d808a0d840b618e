"""Float comparisons written with the comparisons a runtime computes right (``prepare --target
mnn``: MNN 3.6.1's float ``Less`` and ``Equal`` compare bit patterns, its ``Greater``,
``GreaterOrEqual`` and ``LessOrEqual`` follow IEEE 754; why: scatter_rewrite/targets/mnn.py).
Every node of the model is rewritten (main graph, If/Loop/Scan bodies, model-local functions),
the scatter-free forms' and the model's own, each exactly for every value (NaN, infinities,
signed zeros):

* ``Less(a, b)`` of floats, or of a type not known here: ``Greater(b, a)`` (the same relation for
  every type Less takes; Greater takes the same types at every opset).
* ``Equal(a, b)`` of floats: ``And(GreaterOrEqual(a, b), LessOrEqual(a, b))`` (false where either
  is NaN, true for -0.0 and +0.0).
* ``IsNaN(x)`` of floats: ``Not(GreaterOrEqual(x, x))``, and ``Not(IsNaN(x))`` (as the sort form
  writes it for float max/min) one ``GreaterOrEqual(x, x)``: x >= x is false exactly where x is
  NaN. (Not ``Equal(x, x)``, which passes/op_equivalents.py writes for a table without IsNaN:
  MNN's Equal is true for a NaN against itself.)

GreaterOrEqual and LessOrEqual exist from opset 12 (bfloat16 from 16): a model below 12 is moved
there first (:func:`needs_opset`), exactly; a node that still cannot be written is refused.
What a node's outputs name, type and shape stay.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir

from scatter_rewrite.errors import ConversionError
from scatter_rewrite.graph import (
    Names, describe, is_default_domain, iter_nodes, iter_scopes, mark_written, value_names,
    written_for,
)
from scatter_rewrite.passes.base import NodeNote, ScatterPass, every_node
from scatter_rewrite.passes.op_equivalents import remove_dead
from scatter_rewrite.said import Said
from scatter_rewrite.targets.mnn import COMPARISONS, comparison_fault
from scatter_rewrite.type_inference import (
    annotate_functions_with, borrow_inferred_types, restore_types,
)

__all__ = ["FloatComparisonsPass", "ORDERED_SINCE", "needs_opset"]

# the first opset of GreaterOrEqual/LessOrEqual, and of their bfloat16
ORDERED_SINCE = 12
_BFLOAT16_SINCE = 16


def _operand_type(node: ir.Node) -> str | None:
    """The element type of the node's operands (the first one known), by name; None: unknown."""
    for value in node.inputs:
        if value is not None and value.dtype is not None:
            return value.dtype.name
    return None


def _first_opset(node: ir.Node, dtype: str | None) -> int:
    if node.op_type == "Less":
        return 1
    return _BFLOAT16_SINCE if dtype == "BFLOAT16" else ORDERED_SINCE


def _wanted(node: ir.Node) -> bool:
    return is_default_domain(node) and node.op_type in COMPARISONS


def needs_opset(model: ir.Model) -> bool:
    """Whether the model is below opset 12 in every scope and holds a node this pass writes with
    GreaterOrEqual/LessOrEqual (which opset 12 brings): the target moves it to 12 first."""
    if max(scope.opset for scope in iter_scopes(model)) >= ORDERED_SINCE:
        return False
    borrowed = borrow_inferred_types(model)
    try:
        return any(n.op_type in ("Equal", "IsNaN") and comparison_fault(n, _operand_type(n))
                   for n, _ in iter_nodes(model))
    finally:
        restore_types(borrowed)


class FloatComparisonsPass(ScatterPass):
    """Every float Less, Equal and IsNaN written as above (``target``: whose fault it avoids, for
    the report)."""

    name = "float-comparisons"

    def __init__(self, target: str):
        super().__init__()
        self.target = target

    def run(self, model: ir.Model) -> None:
        if not any(_wanted(n) for n, _ in iter_nodes(model)):
            return
        borrowed = borrow_inferred_types(model) + annotate_functions_with(model, _wanted)
        try:
            self._run(model)
        finally:
            restore_types(borrowed)

    def _run(self, model: ir.Model) -> None:
        names = Names(value_names(model), prefix="compare")  # (unique across every scope)
        refused = []
        for node, scope in iter_nodes(model):
            if node.graph is None:  # (an IsNaN removed with the Not that read it)
                continue
            dtype = _operand_type(node)
            said = comparison_fault(node, dtype)
            if said is None:
                continue
            if scope.opset < _first_opset(node, dtype):
                refused.append(NodeNote(describe(node, scope), (
                    f"{said.split(':')[0]} at opset {scope.opset}: GreaterOrEqual/LessOrEqual "
                    f"{'of bfloat16 ' if dtype == 'BFLOAT16' else ''}need opset "
                    f"{_first_opset(node, dtype)} ({self.target} computes {node.op_type} "
                    "wrongly)")))
                continue
            shown, origin, made = describe(node, scope), written_for(node, scope), []
            self.result.rewritten.append(NodeNote(shown, _REWRITES[node.op_type](node, names,
                                                                                 made)))
            mark_written(made, origin)  # (a later refusal names the user's comparison)
            self.result.modified = True
        if refused:
            error = ConversionError(Said(f"not prepared for {self.target}: ", every_node(refused)))
            error.declined = refused
            raise error


def _part(op: str, inputs: list[ir.Value], before: ir.Node, names: Names,
          made: list[ir.Node]) -> ir.Value:
    """A new ``op`` node (bool output, a fresh name) in ``before``'s graph just before it (and in
    ``made``)."""
    part = ir.node(op, inputs)
    made.append(part)
    part.outputs[0].dtype, part.outputs[0].name = ir.DataType.BOOL, names.new(op.lower())
    before.graph.insert_before(before, part)
    return part.outputs[0]


def _less(node: ir.Node, names: Names, made: list[ir.Node]) -> str:
    a, b = node.inputs
    _replace(node, ir.node("Greater", [b, a]), made)
    return "float Less(a, b) written as Greater(b, a)"


def _equal(node: ir.Node, names: Names, made: list[ir.Node]) -> str:
    a, b = node.inputs
    _replace(node, ir.node("And", [_part("GreaterOrEqual", [a, b], node, names, made),
                                   _part("LessOrEqual", [a, b], node, names, made)]), made)
    return "float Equal(a, b) written as And(GreaterOrEqual(a, b), LessOrEqual(a, b))"


def _is_nan(node: ir.Node, names: Names, made: list[ir.Node]) -> str:
    (x,) = node.inputs
    y = node.outputs[0]
    uses = list(y.uses())
    negation = uses[0].node if len(uses) == 1 else None
    if (negation is not None and not y.is_graph_output() and negation.op_type == "Not"
            and is_default_domain(negation) and negation.graph is node.graph):
        _replace(negation, ir.node("GreaterOrEqual", [x, x]), made)
        remove_dead(node)
        return "with its Not, written as GreaterOrEqual(x, x)"
    _replace(node, ir.node("Not", [_part("GreaterOrEqual", [x, x], node, names, made)]), made)
    return "written as Not(GreaterOrEqual(x, x))"


_REWRITES: dict[str, Callable[[ir.Node, Names, list[ir.Node]], str]] = {
    "Less": _less, "Equal": _equal, "IsNaN": _is_nan}


def _replace(node: ir.Node, new: ir.Node, made: list[ir.Node]) -> None:
    """``new`` (one output, then in ``made``) in place of ``node``, taking its output's name,
    type, shape and readers (graph outputs included)."""
    made.append(new)
    ir.convenience.replace_nodes_and_values(node.graph, node, [node], [new], [node.outputs[0]],
                                            new.outputs)
