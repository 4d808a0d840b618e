"""Pad-18 -> Pad-13: pads for the given axes written out for every axis."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import NodeBuilder, Scope, constant_tensor
from scatter_rewrite.opset.registry import UNCHANGED, Form, Replaced, register_form
from scatter_rewrite.opset.rewriting import not_constant, refuse, replace

__all__ = ["pad_18_13"]


@register_form("Pad", 18, 13, neutral=True,
               reads_rank=lambda node: len(node.inputs) > 3 and node.inputs[3] is not None)
def pad_18_13(node: ir.Node, scope: Scope, target: int) -> Form:
    """Pad-18 added ``axes``: ``pads`` then holds the begins and the ends of those axes only. Older
    Pads take pads for every axis: the same pads written out for each, zeros elsewhere (constant
    pads here, computed ones gathered at run time), which needs constant axes and the input's
    rank."""
    if target >= 18 or len(node.inputs) < 4 or node.inputs[3] is None:
        return UNCHANGED
    x, pads = node.inputs[0], node.inputs[1]
    why = f"opset {target}'s Pad takes pads for every axis"
    axes = constant_tensor(node.inputs[3])
    if axes is None:
        raise refuse(node, scope, target, f"{not_constant(node.inputs[3], 'axes')}, and {why}")
    rank = None if x is None or x.shape is None else len(x.shape)
    if rank is None:
        raise refuse(node, scope, target, f"its input's rank is unknown, and {why}")
    axes = [int(a) for a in axes.numpy().reshape(-1)]
    for a in axes:
        if not -rank <= a < rank:
            raise refuse(node, scope, target, f"axis {a} is out of range for its rank-{rank} "
                                              "input (onnxruntime refuses it too)")
    axes = [a % rank for a in axes]
    if len(set(axes)) < len(axes):
        raise refuse(node, scope, target, f"its axes {axes} repeat an axis (onnxruntime refuses "
                                          "it too)")
    # index[j]: where entry j of every axis's pads (begins, then ends) is in pads; 2 * len(axes) is
    # a zero
    index = np.full(2 * rank, 2 * len(axes), np.int64)
    for i, a in enumerate(axes):
        index[a], index[rank + a] = i, len(axes) + i
    given = constant_tensor(pads)
    b = NodeBuilder()
    if given is not None:
        if given.size != 2 * len(axes):
            raise refuse(node, scope, target, f"it has {given.size} pads for {len(axes)} axes, "
                                              "where Pad takes two per axis (onnxruntime refuses "
                                              "it too)")
        every = b.const(np.append(given.numpy().reshape(-1).astype(np.int64), 0)[index])
    else:
        zero, where = b.const(np.array([0], np.int64)), b.const(index)
        padded = b.add("Concat", [pads, zero], {"axis": 0}, dtype=ir.DataType.INT64,
                       shape=ir.Shape([2 * len(axes) + 1]))
        every = b.add("Gather", [padded, where], dtype=ir.DataType.INT64,
                      shape=ir.Shape([2 * rank]))
    value = [node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] is not None else []
    pad = b.add("Pad", [x, every, *value], dict(node.attributes))
    replace(node, scope, b.nodes, [pad])
    return Replaced(tuple(b.nodes))

