"""Trilu-14 (no older version): Where over a mask from Range."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import Scope, attr, constant_node, reference_reason, typed
from scatter_rewrite.opset.fitting import input_dtype
from scatter_rewrite.opset.registry import Form, Replaced, register_form
from scatter_rewrite.opset.rewriting import refuse, replace


@register_form("Trilu", 14, None)
def trilu_14(node: ir.Node, scope: Scope, target: int) -> Form:
    """Trilu (opset 14, no older version) keeps x[..., i, j] where j - i >= k (upper) or <= k
    (lower) and writes 0 elsewhere: Where over a mask from Range on the last two dimensions."""
    reason = reference_reason(node, ("upper",))
    if reason is not None:
        raise refuse(node, scope, target, f"its {reason}, which decides the mask")
    x = node.inputs[0]
    dtype = input_dtype(x)
    if dtype is None or dtype.numpy() is None:
        raise refuse(node, scope, target, "its input's data type is unknown, and the zeros it "
                                          "writes need it")
    upper = attr(node, "upper", 1)
    i64 = ir.DataType.INT64
    last = [constant_node(np.array(k, np.int64)) for k in (-2, -1)]
    zero, one = constant_node(np.array(0, np.int64)), constant_node(np.array(1, np.int64))
    column = constant_node(np.array([-1, 1], np.int64))
    k = node.inputs[1] if len(node.inputs) > 1 and node.inputs[1] is not None else zero.outputs[0]
    shape = typed(ir.node("Shape", [x]), i64, None)
    rows = typed(ir.node("Gather", [shape.outputs[0], last[0].outputs[0]]), i64, ir.Shape([]))
    cols = typed(ir.node("Gather", [shape.outputs[0], last[1].outputs[0]]), i64, ir.Shape([]))
    i = typed(ir.node("Range", [zero.outputs[0], rows.outputs[0], one.outputs[0]]), i64,
              ir.Shape([None]))
    j = typed(ir.node("Range", [zero.outputs[0], cols.outputs[0], one.outputs[0]]), i64,
              ir.Shape([None]))
    i_column = typed(ir.node("Reshape", [i.outputs[0], column.outputs[0]]), i64,
                     ir.Shape([None, 1]))
    diagonal = typed(ir.node("Sub", [j.outputs[0], i_column.outputs[0]]), i64,
                     ir.Shape([None, None]))
    # upper: keep j - i >= k, i.e. not (j - i < k); lower: keep j - i <= k, i.e. not (j - i > k)
    outside = typed(ir.node("Less" if upper else "Greater", [diagonal.outputs[0], k]),
                    ir.DataType.BOOL, None)
    keep = typed(ir.node("Not", [outside.outputs[0]]), ir.DataType.BOOL, None)
    nothing = constant_node(np.zeros((), dtype.numpy()))
    out = ir.node("Where", [keep.outputs[0], x, nothing.outputs[0]])
    nodes = [*last, zero, one, column, shape, rows, cols, i, j, i_column, diagonal, outside, keep,
             nothing, out]
    replace(node, scope, nodes, list(out.outputs))
    return Replaced(tuple(nodes))

