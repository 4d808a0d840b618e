"""Softmax-13, LogSoftmax-13 and Hardmax-13 -> their version 11.

Before opset 13 these flatten the input to 2-D at ``axis`` and normalize over every axis from it on;
from 13, over ``axis`` alone. The same on the last axis, where the node stays with its axis written
out. Another axis of an input of known rank: moved last and back around the op (Transpose, exact).
Of unknown rank: computed on the same axis by other ops, as ONNX's own definitions do (Softmax-13's
and LogSoftmax-13's function bodies: ``x - ReduceMax(x)``, Exp, ReduceSum, then Div, or Sub of the
Log; float results may round otherwise than a fused kernel, so the move lists them for validation's
float tolerance), and Hardmax as the one-hot of ArgMax (the first maximum, as Hardmax takes; exact).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import NodeBuilder, Scope, attr, reference_reason
from scatter_rewrite.opset.fitting import type_gap
from scatter_rewrite.opset.registry import DONE, UNCHANGED, Form, Replaced, register_form
from scatter_rewrite.opset.rewriting import refuse, replace

__all__ = ["softmax_13_11"]


@register_form("Softmax", 13, 11, reads_rank=True)
@register_form("LogSoftmax", 13, 11, reads_rank=True)
@register_form("Hardmax", 13, 11, reads_rank=True)
def softmax_13_11(node: ir.Node, scope: Scope, target: int) -> Form:
    """The op over ``axis`` alone at opset ``target`` < 13 (see the module docstring)."""
    if target >= 13:
        return UNCHANGED
    x = node.inputs[0]
    rank = None if x is None or x.shape is None else len(x.shape)
    reason = reference_reason(node, ("axis",))
    if reason is not None:
        raise refuse(node, scope, target, f"its {reason}, and opset {target}'s {node.op_type} "
                                          "reads an axis other than the last otherwise")
    axis = attr(node, "axis", -1)
    if rank is not None and not -rank <= axis < rank:
        raise refuse(node, scope, target, f"axis {axis} is out of range for its rank-{rank} input")
    if axis == -1 or (rank is not None and axis == rank - 1):
        gap = type_gap(node, target)
        if gap is not None:
            raise refuse(node, scope, target, gap)
        node.attributes["axis"] = ir.AttrInt64("axis", axis)  # (written: the default changes at 13)
        return DONE  # the last axis: what the op does at both opsets
    if rank is None:
        return _on_the_axis(node, scope, axis)
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]  # (a swap: its own inverse)
    b = NodeBuilder()
    shape = ir.Shape([x.shape[i] for i in perm])
    before = b.add("Transpose", [x], {"perm": perm}, dtype=x.dtype, shape=shape)
    inner = b.add(node.op_type, [before], {"axis": -1}, dtype=x.dtype, shape=shape)
    after = b.add("Transpose", [inner], {"perm": perm})
    replace(node, scope, b.nodes, [after])
    return Replaced(tuple(b.nodes))


def _on_the_axis(node: ir.Node, scope: Scope, axis: int) -> Replaced:
    """The op on ``axis`` of an input of unknown rank, by ops that reduce that axis alone, valid at
    the scope's opset (the engine moves them on)."""
    x, b = node.inputs[0], NodeBuilder()
    axes = b.const(np.array([axis], np.int64))
    if node.op_type == "Hardmax":
        first = b.add("ArgMax", [x], {"axis": axis, "keepdims": 0}, dtype=ir.DataType.INT64)
        depth = b.add("Gather", [b.add("Shape", [x], dtype=ir.DataType.INT64), axes],
                      dtype=ir.DataType.INT64, shape=ir.Shape([1]))
        # (float 0 and 1: what onnxruntime's OneHot takes with int64 indices; exact in any type)
        off_on = b.const(np.array([0, 1], np.float32))
        y = b.add("OneHot", [first, depth, off_on], {"axis": axis}, dtype=ir.DataType.FLOAT)
        if x.dtype != ir.DataType.FLOAT:
            y = b.add("Cast", [y], {"to": x.dtype})
        replace(node, scope, b.nodes, [y])
        return Replaced(tuple(b.nodes))
    if scope.opset >= 18:  # (ReduceMax takes its axes as an input from 18)
        peak = b.add("ReduceMax", [x, axes], {"keepdims": 1}, dtype=x.dtype)
    else:
        peak = b.add("ReduceMax", [x], {"axes": [axis], "keepdims": 1}, dtype=x.dtype)
    shifted = b.add("Sub", [x, peak], dtype=x.dtype)
    exp = b.add("Exp", [shifted], dtype=x.dtype)
    total = b.add("ReduceSum", [exp, axes], {"keepdims": 1}, dtype=x.dtype)
    if node.op_type == "Softmax":
        y = b.add("Div", [exp, total])
    else:
        y = b.add("Sub", [shifted, b.add("Log", [total], dtype=x.dtype)])
    replace(node, scope, b.nodes, [y])
    return Replaced(tuple(b.nodes), rounding=True)
