"""Softmax-11, LogSoftmax-11 and Hardmax-11 -> their version 13 (a step up).

Before 13 these flatten the input to 2-D at ``axis`` (default 1) and normalize over every axis from
it on; from 13, over ``axis`` alone. The same on the last axis, where the node stays with its axis
written out. Another axis: the older op's own flattening, Flatten(axis) -> the op on the last axis
-> Reshape to the input's shape (the converter's Softmax adapter writes that; its Hardmax adapter
keeps the axis, another function).
"""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.graph import NodeBuilder, Scope, attr, reference_reason
from scatter_rewrite.opset.fitting import type_gap
from scatter_rewrite.opset.registry import DONE, UNCHANGED, Form, Replaced, register_form
from scatter_rewrite.opset.rewriting import refuse, replace

__all__ = ["softmax_11_13"]


@register_form("Softmax", 11, 13)
@register_form("LogSoftmax", 11, 13)
@register_form("Hardmax", 11, 13)
def softmax_11_13(node: ir.Node, scope: Scope, target: int) -> Form:
    """The op at opset ``target`` >= 13 normalizing what it did before (see the module
    docstring)."""
    if scope.opset >= 13 or target < 13:
        return UNCHANGED
    x = node.inputs[0]
    rank = None if x is None or x.shape is None else len(x.shape)
    axis = attr(node, "axis", 1)
    if axis is not None and rank is not None and not -rank <= axis < rank:
        raise refuse(node, scope, target, f"axis {axis} is out of range for its rank-{rank} input")
    if axis == -1 or (axis is not None and rank is not None and axis == rank - 1):
        gap = type_gap(node, target)
        if gap is not None:
            raise refuse(node, scope, target, gap)
        node.attributes["axis"] = ir.AttrInt64("axis", axis)  # (written: the default changes at 13)
        return DONE  # the last axis: what the op does at both opsets
    if reference_reason(node, ("axis",)) is None:
        flatten_axis = ir.AttrInt64("axis", axis)
    # a function attribute's axis goes to Flatten, whose default (1) is the older op's too
    else:
        ref = node.attributes["axis"]
        flatten_axis = ir.RefAttr("axis", ref.ref_attr_name, ref.type)
    b = NodeBuilder()
    flat = ir.Shape([None, None])
    flatten = b.add("Flatten", [x], {"axis": flatten_axis}, dtype=x.dtype, shape=flat)
    shape = b.add("Shape", [x], dtype=ir.DataType.INT64,
                  shape=None if rank is None else ir.Shape([rank]))
    inner = b.add(node.op_type, [flatten], {"axis": -1}, dtype=x.dtype, shape=flat)
    reshape = b.add("Reshape", [inner, shape])
    replace(node, scope, b.nodes, [reshape])
    return Replaced(tuple(b.nodes))
