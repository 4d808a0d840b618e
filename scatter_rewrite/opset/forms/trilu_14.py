"""Trilu-14 (no older version): Where over a mask from Range."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import NodeBuilder, Scope, attr, reference_reason
from scatter_rewrite.opset.fitting import input_dtype
from scatter_rewrite.opset.registry import Form, Replaced, register_form
from scatter_rewrite.opset.rewriting import refuse, replace

__all__ = ["trilu_14"]


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
    i64, boolean, b = ir.DataType.INT64, ir.DataType.BOOL, NodeBuilder()
    zero, one = b.const(np.array(0, np.int64)), b.const(np.array(1, np.int64))
    k = node.inputs[1] if len(node.inputs) > 1 and node.inputs[1] is not None else zero
    shape = b.add("Shape", [x], dtype=i64)
    rows, cols = (b.add("Gather", [shape, b.const(np.array(d, np.int64))], dtype=i64,
                        shape=ir.Shape([])) for d in (-2, -1))
    i = b.add("Range", [zero, rows, one], dtype=i64, shape=ir.Shape([None]))
    j = b.add("Range", [zero, cols, one], dtype=i64, shape=ir.Shape([None]))
    i_column = b.add("Reshape", [i, b.const(np.array([-1, 1], np.int64))], dtype=i64,
                     shape=ir.Shape([None, 1]))
    diagonal = b.add("Sub", [j, i_column], dtype=i64, shape=ir.Shape([None, None]))
    # upper: keep j - i >= k, i.e. not (j - i < k); lower: keep j - i <= k, i.e. not (j - i > k)
    outside = b.add("Less" if upper else "Greater", [diagonal, k], dtype=boolean)
    keep = b.add("Not", [outside], dtype=boolean)
    out = b.add("Where", [keep, x, b.const(np.zeros((), dtype.numpy()))])
    replace(node, scope, b.nodes, [out])
    return Replaced(tuple(b.nodes))
