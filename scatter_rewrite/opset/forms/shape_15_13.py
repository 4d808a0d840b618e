"""Shape-15 -> Shape-13: start/end as a Slice of the shape."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import NodeBuilder, Scope, attr, reference_reason
from scatter_rewrite.opset.registry import UNCHANGED, Form, Replaced, register_form
from scatter_rewrite.opset.rewriting import refuse, replace

__all__ = ["shape_15_13"]


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
    x, b = node.inputs[0], NodeBuilder()
    shape = b.add("Shape", [x], dtype=ir.DataType.INT64,
                  shape=None if x.shape is None else ir.Shape([len(x.shape)]))
    starts = b.const(np.array([start], np.int64))
    ends = b.const(np.array([np.iinfo(np.int64).max if end is None else end], np.int64))
    piece = b.add("Slice", [shape, starts, ends])
    replace(node, scope, b.nodes, [piece])
    return Replaced(tuple(b.nodes))
