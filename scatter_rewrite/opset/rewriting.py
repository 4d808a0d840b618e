"""What the exact forms (:mod:`scatter_rewrite.opset.forms`) share: refusing with the node named,
putting new nodes in a node's place, and reading a value known before run time."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.errors import ConversionError
from scatter_rewrite.graph import (
    FLOAT_TYPES, Scope, attr, constant_tensor, describe, is_default_domain, is_overridable,
    is_reference, mark_written, written_for,
)

__all__ = ["FLOATS", "INTEGERS", "known_value", "not_constant", "refuse", "replace"]

FLOATS = FLOAT_TYPES
INTEGERS = frozenset({ir.DataType.INT8, ir.DataType.INT16, ir.DataType.INT32, ir.DataType.INT64,
                      ir.DataType.UINT8, ir.DataType.UINT16, ir.DataType.UINT32,
                      ir.DataType.UINT64})


def refuse(node: ir.Node, scope: Scope, target: int, why: str) -> ConversionError:
    return ConversionError(f"cannot convert {describe(node, scope)} to opset {target}: {why}")


# Ops through which a value computed from small constants alone is known before run time here (an
# exporter's ``Reshape(Constant, [-1])`` for a Reduce's axes).
_FOLDABLE = frozenset({"Identity", "Reshape", "Concat", "Cast"})


def known_value(value: ir.Value | None, depth: int = 4) -> ir.TensorProtocol | None:
    """``value``'s tensor when it is a constant (:func:`constant_tensor`) or computed from small
    constants alone through Identity, Reshape (without allowzero), Concat or Cast; None
    otherwise."""
    tensor = constant_tensor(value)
    if tensor is not None or value is None or depth == 0:
        return tensor
    node = value.producer()
    if (node is None or not is_default_domain(node) or node.op_type not in _FOLDABLE
            or len(node.outputs) != 1):
        return None
    inputs = [known_value(v, depth - 1) for v in node.inputs]
    if any(t is None for t in inputs) or any(t.size > 64 for t in inputs):
        return None
    arrays = [t.numpy() for t in inputs]
    if node.op_type == "Identity":
        result = arrays[0]
    # (0: the input's dimension there)
    elif node.op_type == "Reshape" and not attr(node, "allowzero", 0):
        dims = [int(d) for d in arrays[1].reshape(-1)]
        result = arrays[0].reshape([arrays[0].shape[i] if d == 0 else d
                                    for i, d in enumerate(dims)])
    elif (node.op_type == "Concat"
          and not is_reference(node.attributes.get("axis", ir.AttrInt64("axis", 0)))):
        result = np.concatenate(arrays, axis=attr(node, "axis", 0))
    elif node.op_type == "Cast" and not is_reference(node.attributes["to"]):
        numpy_type = ir.DataType(attr(node, "to")).numpy()
        if numpy_type is None:
            return None
        result = arrays[0].astype(numpy_type)
    else:
        return None
    return ir.tensor(np.ascontiguousarray(result))


def not_constant(value: ir.Value, what: str) -> str:
    """Why input ``what`` (``value``) has no value before run time, for a refusal."""
    if is_overridable(value):
        return (f"its {what} '{value.name}' is a graph input with an initializer, which callers "
                "may override (a default, not a constant)")
    verb = "are" if what == "axes" else "is"
    if value.is_graph_input():
        return f"its {what} '{value.name}' {verb} a graph input, known only at run time"
    return f"its {what} {verb} computed in the graph"


def replace(node: ir.Node, scope: Scope, new_nodes: list[ir.Node],
            outputs: list[ir.Value]) -> None:
    """``new_nodes`` in ``node``'s place; ``outputs`` take its outputs' names, types and uses. The
    new nodes are marked as written for the user's node (:func:`graph.written_for`), which a later
    refusal names."""
    mark_written(new_nodes, written_for(node, scope))
    named = False
    for new in new_nodes:  # the first of the same op keeps the name (None: named on insertion)
        new.name = node.name if new.op_type == node.op_type and not named else None
        named = named or new.name is not None
    ir.convenience.replace_nodes_and_values(scope.body, node, [node], new_nodes, list(node.outputs),
                                            outputs)


