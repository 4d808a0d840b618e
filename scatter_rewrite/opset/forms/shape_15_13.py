"""Shape-15 -> Shape-13: start/end as a Slice of the shape."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import Scope, attr, constant_node, reference_reason, typed
from scatter_rewrite.opset.registry import UNCHANGED, Form, Replaced, register_form
from scatter_rewrite.opset.rewriting import refuse, replace


@register_form("Shape", 15, 13, neutral=True)
def shape_15_13(node: ir.Node, scope: Scope, target: int) -> Form:
    """Shape-15's ``start``/``end`` take a slice of the shape, clamped as Slice clamps: Shape, then
    Slice with those bounds."""
    reason = reference_reason(node, ("start", "end"))
    if reason is not None:
        raise refuse(node, scope, target, f"its {reason}, and Shape-13 has no start or end")
    start, end = attr(node, "start", 0), attr(node, "end")
    if start == 0 and end is None:
        node.attributes.pop("start", None)
        return UNCHANGED
    x = node.inputs[0]
    shape = typed(ir.node("Shape", [x]), ir.DataType.INT64,
                  None if x.shape is None else ir.Shape([len(x.shape)]))
    starts = constant_node(np.array([start], np.int64))
    ends = constant_node(np.array([np.iinfo(np.int64).max if end is None else end], np.int64))
    piece = ir.node("Slice", [shape.outputs[0], starts.outputs[0], ends.outputs[0]])
    nodes = [shape, starts, ends, piece]
    replace(node, scope, nodes, list(piece.outputs))
    return Replaced(tuple(nodes))

