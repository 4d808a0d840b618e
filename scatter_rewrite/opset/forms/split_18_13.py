"""Split-18 -> Split-13: num_outputs as chunk sizes, constant or computed."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import NodeBuilder, Scope, attr, reference_reason
from scatter_rewrite.opset.registry import UNCHANGED, Form, Replaced, register_form
from scatter_rewrite.opset.rewriting import refuse, replace

__all__ = ["split_18_13"]


@register_form("Split", 18, 13, neutral=True, reads_rank=True)
def split_18_13(node: ir.Node, scope: Scope, target: int) -> Form:
    """Split-18's ``num_outputs`` cuts chunks of ceil(size / n) along ``axis``, the last one smaller
    (onnxruntime refuses a size that leaves it negative). Older Splits need the sizes: constant for
    a static dimension, computed from the input's shape otherwise (an input from 13, an attribute
    before)."""
    if target >= 18 or "num_outputs" not in node.attributes:
        return UNCHANGED
    reason = reference_reason(node, ("num_outputs", "axis"))
    if reason is not None:
        raise refuse(node, scope, target, f"its {reason}, and opset {target}'s Split needs the "
                                          "chunk sizes")
    n, axis, x = attr(node, "num_outputs"), attr(node, "axis", 0), node.inputs[0]
    rank = None if x is None or x.shape is None else len(x.shape)
    size = x.shape[axis] if rank is not None and -rank <= axis < rank else None
    b = NodeBuilder()
    if isinstance(size, int):
        chunk = -(-size // n)
        if size - chunk * (n - 1) < 0:
            raise refuse(node, scope, target, f"num_outputs={n} on a dimension of {size} leaves "
                                              f"the last chunk {size - chunk * (n - 1)} long, "
                                              "which onnxruntime refuses too")
        sizes = b.const(np.array([chunk] * (n - 1) + [size - chunk * (n - 1)], np.int64))
    elif target >= 13:
        sizes = _computed_chunk_sizes(b, x, axis, n)
    else:
        raise refuse(node, scope, target, f"dimension {axis} of its input is not known before run "
                                          f"time, and opset {target}'s Split takes the chunk "
                                          "sizes as a constant attribute")
    split = b.node("Split", [x, sizes], {"axis": axis}, num_outputs=len(node.outputs))
    replace(node, scope, b.nodes, list(split.outputs))
    return Replaced(tuple(b.nodes))


def _computed_chunk_sizes(b: NodeBuilder, x: ir.Value, axis: int, n: int) -> ir.Value:
    """Split-18's chunk sizes for ``n`` outputs along ``axis`` of ``x`` (int64), computed:
    [c] * (n - 1) + [size - c * (n - 1)] with c = ceil(size / n). (Typed: converting each new
    node reads its input types.)"""
    i64, one = ir.DataType.INT64, ir.Shape([1])
    position, rest, parts = (b.const(np.array([k], np.int64)) for k in (axis, n - 1, n))
    size = b.add("Gather", [b.add("Shape", [x], dtype=i64), position], dtype=i64, shape=one)
    padded = b.add("Add", [size, rest], dtype=i64, shape=one)
    chunk = b.add("Div", [padded, parts], dtype=i64, shape=one)
    covered = b.add("Mul", [chunk, rest], dtype=i64, shape=one)
    last = b.add("Sub", [size, covered], dtype=i64, shape=one)
    return b.add("Concat", [chunk] * (n - 1) + [last], {"axis": 0}, dtype=i64,
                 shape=ir.Shape([n]))

