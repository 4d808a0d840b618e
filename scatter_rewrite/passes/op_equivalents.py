"""Exact equivalents, inside a target's published op table, of ops outside it: the step of
``prepare --target T`` (:mod:`.op_support`) before it refuses a node the table lacks. Each is
written only where T's table lacks the op and has what replaces it (at the node's opset):

* ``If`` whose condition is a compile-time constant: inlined (:mod:`.inline_if`, every such If, not
  only those near a scatter). An If on a run-time condition stays (QNN's table has no control flow).
* ``CastLike(x, like)`` whose ``like`` has a known element type (declared, or a constant's):
  ``Cast(x, to=that type)`` with CastLike's other attributes (``saturate``, ``round_mode``: Cast
  has the same at every opset CastLike has them). A ``like`` of unknown type (a function input)
  stays.
* ``IsNaN(x)`` of float16, float, double (bfloat16 from opset 13; below opset 20 IsNaN takes no
  other type, so an unknown type will do there): ``Equal(x, x)`` is false exactly
  where x is NaN (IEEE 754: NaN is unequal to everything, itself included), so ``Not(IsNaN(x))``,
  as the sort form's float max/min writes it, becomes ``Equal(x, x)`` and a lone ``IsNaN(x)``
  ``Not(Equal(x, x))``. Equal takes floats from opset 11. ``Equal(x, x)`` measured equal to
  ``Not(IsNaN(x))``, NaN, infinities and signed zeros included, in onnxruntime, OpenVINO's CPU
  plugin, LiteRT through onnx2tf and TVM (tests/passes/test_op_equivalents.py; the qnn forms' float
  max/min there: tests/targets/test_op_tables.py).
* ``Sum`` of two terms: ``Add`` (both broadcast alike; one rounding either way). Of more terms
  the order of a float sum is the kernel's: left alone.
* ``Identity``: removed, its readers reading its input. When its output is an output of its own
  graph, its input takes the output's name, if that input is made by a node of the same graph and
  is no output of it already; an Identity that hands a graph input, an initializer, an outer
  scope's value or another output to an output stays. (onnx_ir's IdentityEliminationPass (1.1.0)
  is not used: it gives two outputs one name when its input is an output too, and fails on an If
  branch returning an outer value.)

What a node's outputs name, type and shape stay; nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir

from scatter_rewrite.graph import (
    Scope, constant_tensor, describe, is_default_domain, is_reference, iter_nodes, mark_written,
    written_for,
)

__all__ = ["remove_dead", "write_within_table"]

# (op, scope) -> whether the target's table has that default-domain op at the scope's opset
Has = Callable[[str, Scope], bool]

# IsNaN's input types that Equal takes too, and from which opset (IsNaN takes only these below
# opset 20, where it adds the float8 types: a type is needed there)
_NAN_TYPES = {ir.DataType.FLOAT16: 11, ir.DataType.FLOAT: 11, ir.DataType.DOUBLE: 11,
              ir.DataType.BFLOAT16: 13}


def write_within_table(model: ir.Model, has: Has) -> list[str]:
    """Every node above written with ops of the table where the table lacks it; what was done,
    one line per node."""
    done = []
    if any(node.op_type == "If" and is_default_domain(node) and not has("If", scope)
           for node, scope in iter_nodes(model)):
        from scatter_rewrite.passes.inline_if import inline_constant_ifs

        done += inline_constant_ifs(model)
    for node, scope in iter_nodes(model):
        if (not is_default_domain(node) or node.graph is None or has(node.op_type, scope)
                or any(is_reference(a) for a in node.attributes.values())):
            continue
        rewrite = _REWRITES.get(node.op_type)
        if rewrite is None:
            continue
        body, origin = node.graph, written_for(node, scope)
        known = {id(n) for n in body}
        said = rewrite(node, scope, has)
        if said is not None:  # (what it wrote names the user's node to a later refusal)
            mark_written([n for n in body if id(n) not in known], origin)
            done.append(f"{describe(node, scope)}: {said}")
    return done


def _cast_like(node: ir.Node, scope: Scope, has: Has) -> str | None:
    if len(node.inputs) != 2 or None in node.inputs or not has("Cast", scope):
        return None
    like = node.inputs[1]
    to = like.dtype or (tensor.dtype if (tensor := constant_tensor(like)) is not None else None)
    if to is None:
        return None
    cast = ir.node("Cast", [node.inputs[0]], {**node.attributes, "to": ir.AttrInt64("to", to)})
    _replace(node, cast, node.outputs[0])
    return f"written as Cast to {to.name}"


def _is_nan(node: ir.Node, scope: Scope, has: Has) -> str | None:
    x = node.inputs[0] if len(node.inputs) == 1 else None
    if x is None or scope.opset < 11 or not has("Equal", scope):
        return None
    typed = x.dtype is not None or scope.opset >= 20  # (below 20, IsNaN takes only Equal's floats)
    if typed and scope.opset < _NAN_TYPES.get(x.dtype, 99):
        return None
    y = node.outputs[0]
    uses = list(y.uses())
    negated = (len(uses) == 1 and not y.is_graph_output() and uses[0].node.op_type == "Not"
               and is_default_domain(uses[0].node) and uses[0].node.graph is node.graph)
    if negated:  # Not(IsNaN(x)) -> Equal(x, x)
        negation = uses[0].node
        _replace(negation, ir.node("Equal", [x, x]), negation.outputs[0])  # (IsNaN goes too)
        return "with its Not, written as Equal(x, x)"
    if not has("Not", scope):
        return None
    equal = ir.node("Equal", [x, x])
    equal.outputs[0].dtype = ir.DataType.BOOL
    node.graph.insert_before(node, equal)
    _replace(node, ir.node("Not", equal.outputs), y)
    return "written as Not(Equal(x, x))"


def _identity(node: ir.Node, scope: Scope, has: Has) -> str | None:
    if len(node.inputs) != 1 or node.inputs[0] is None:
        return None
    x, y = node.inputs[0], node.outputs[0]
    graph = node.graph
    if y.is_graph_output():
        producer = x.producer()
        if producer is None or producer.graph is not graph or x.is_graph_output():
            return None  # (a graph input, an initializer, an outer value or another output)
        name, y.name = y.name, None
        ir.convenience.replace_all_uses_with(y, x, replace_graph_outputs=True)
        x.name = name  # (and the output's declared type and shape)
        x.type, x.shape = y.type or x.type, y.shape if y.shape is not None else x.shape
    else:
        ir.convenience.replace_all_uses_with(y, x)
    graph.remove(node, safe=True)
    return "removed"


def _sum(node: ir.Node, scope: Scope, has: Has) -> str | None:
    if len(node.inputs) != 2 or None in node.inputs or not has("Add", scope):
        return None  # (more terms: the order of a float sum is the kernel's)
    _replace(node, ir.node("Add", list(node.inputs)), node.outputs[0])
    return "written as Add"


_REWRITES = {"CastLike": _cast_like, "IsNaN": _is_nan, "Identity": _identity, "Sum": _sum}


def _replace(node: ir.Node, new: ir.Node, output: ir.Value) -> None:
    """``new`` (one output) in place of ``node``, its output taking ``output``'s name, type,
    shape and readers (graph outputs included); the producers only ``node`` read go too."""
    graph = node.graph
    inputs = [v for v in node.inputs if v is not None]
    ir.convenience.replace_nodes_and_values(graph, node, [node], [new], [output], new.outputs)
    _remove_unread_producers(inputs, graph)


def remove_dead(node: ir.Node) -> None:
    """``node``, none of whose outputs is read any more, and then each producer of its inputs
    (in its graph) that this leaves unread."""
    graph = node.graph  # (a function's nodes belong to its graph, not to the ir.Function)
    inputs = [v for v in node.inputs if v is not None]
    graph.remove(node, safe=True)
    _remove_unread_producers(inputs, graph)


def _remove_unread_producers(values: list[ir.Value], graph: ir.Graph) -> None:
    for value in values:
        producer = value.producer()
        if (producer is not None and producer.graph is graph
                and not any(v.uses() or v.is_graph_output() for v in producer.outputs)):
            remove_dead(producer)
