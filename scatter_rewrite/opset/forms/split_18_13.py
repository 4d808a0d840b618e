"""Split-18 -> Split-13: num_outputs as chunk sizes, constant or computed."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import Scope, attr, constant_node, reference_reason
from scatter_rewrite.opset.registry import UNCHANGED, Form, Replaced, register_form
from scatter_rewrite.opset.rewriting import refuse, replace


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
    if isinstance(size, int):
        chunk = -(-size // n)
        if size - chunk * (n - 1) < 0:
            raise refuse(node, scope, target, f"num_outputs={n} on a dimension of {size} leaves "
                                              f"the last chunk {size - chunk * (n - 1)} long, "
                                              "which onnxruntime refuses too")
        sizes = [constant_node(np.array([chunk] * (n - 1) + [size - chunk * (n - 1)], np.int64))]
    elif target >= 13:
        sizes = _computed_chunk_sizes(x, axis, n)
    else:
        raise refuse(node, scope, target, f"dimension {axis} of its input is not known before run "
                                          f"time, and opset {target}'s Split takes the chunk "
                                          "sizes as a constant attribute")
    split = ir.node("Split", [x, sizes[-1].outputs[0]], {"axis": axis},
                    num_outputs=len(node.outputs))
    replace(node, scope, [*sizes, split], list(split.outputs))
    return Replaced((*sizes, split))


def _computed_chunk_sizes(x: ir.Value, axis: int, n: int) -> list[ir.Node]:
    """Nodes computing Split-18's chunk sizes for ``n`` outputs along ``axis`` of ``x`` (the last
    node's output, int64): [c] * (n - 1) + [size - c * (n - 1)] with c = ceil(size / n)."""
    position, rest, parts = (constant_node(np.array([k], np.int64)) for k in (axis, n - 1, n))
    shape = ir.node("Shape", [x])
    size = ir.node("Gather", [shape.outputs[0], position.outputs[0]])
    padded = ir.node("Add", [size.outputs[0], rest.outputs[0]])
    chunk = ir.node("Div", [padded.outputs[0], parts.outputs[0]])
    covered = ir.node("Mul", [chunk.outputs[0], rest.outputs[0]])
    last = ir.node("Sub", [size.outputs[0], covered.outputs[0]])
    sizes = ir.node("Concat", [chunk.outputs[0]] * (n - 1) + [last.outputs[0]], {"axis": 0})
    computed = [shape, size, padded, chunk, covered, last, sizes]
    for node in computed:  # (converting each reads its input types)
        node.outputs[0].dtype = ir.DataType.INT64
    for node in computed[1:-1]:
        node.outputs[0].shape = ir.Shape([1])
    sizes.outputs[0].shape = ir.Shape([n])
    return [position, rest, parts, *computed]

