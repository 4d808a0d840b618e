"""Resize-18 -> Resize-13: roi, scales and sizes for the given axes written out for every axis."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import NodeBuilder, Scope, attr, reference_reason
from scatter_rewrite.opset.fitting import input_dtype, text
from scatter_rewrite.opset.registry import UNCHANGED, Form, Prepared, register_form
from scatter_rewrite.opset.rewriting import refuse

__all__ = ["resize_18_13"]


@register_form("Resize", 18, 13, neutral=True)
def resize_18_13(node: ir.Node, scope: Scope, target: int) -> Form:
    """Resize-18's ``axes``: roi, scales and sizes then hold values for those axes only. Older
    Resizes take them for every axis: roi 0 and 1, scale 1 and the input's size elsewhere (scattered
    at run time into a full tensor), which needs the input's rank; ``keep_aspect_ratio_policy``
    other than stretch has no older form."""
    if "axes" not in node.attributes:
        return UNCHANGED
    reason = reference_reason(node, ("axes", "keep_aspect_ratio_policy"))
    if reason is not None:
        raise refuse(node, scope, target, f"its {reason}, and Resize-13 takes roi, scales and "
                                          "sizes for every axis")
    policy = text(attr(node, "keep_aspect_ratio_policy", "stretch"))
    if policy != "stretch":
        raise refuse(node, scope, target, "Resize-18 -> Resize-13: keep_aspect_ratio_policy "
                                          f"'{policy}' computes the sizes from one scale, which "
                                          "Resize-13 has no attribute for")
    x = node.inputs[0]
    if x is None or x.shape is None:
        raise refuse(node, scope, target, "Resize-18 -> Resize-13: its input's rank is unknown, "
                                          "and Resize-13 takes roi, scales and sizes for every "
                                          "axis")
    rank = len(x.shape)
    axes = [int(a) % rank for a in attr(node, "axes")]
    b = NodeBuilder()

    def full(value: ir.Value, base: ir.Value, positions: list[int]) -> ir.Value:
        """``base`` with ``value`` written at ``positions`` (at run time)."""
        where = b.const(np.array(positions, np.int64))
        return b.add("ScatterElements", [base, where, value], {"axis": 0}, dtype=value.dtype,
                     shape=ir.Shape([len(positions) and None]))

    inputs = list(node.inputs) + [None] * (4 - len(node.inputs))
    roi, scales, sizes = inputs[1:4]
    if roi is not None:
        dtype = input_dtype(roi) or ir.DataType.FLOAT
        base = b.const(np.array([0] * rank + [1] * rank, dtype.numpy()))
        node.replace_input_with(1, full(roi, base, axes + [a + rank for a in axes]))
    if scales is not None:
        base = b.const(np.ones(rank, (input_dtype(scales) or ir.DataType.FLOAT).numpy()))
        node.replace_input_with(2, full(scales, base, axes))
    if sizes is not None:
        shape = b.add("Shape", [x], dtype=ir.DataType.INT64, shape=ir.Shape([rank]))
        node.replace_input_with(3, full(sizes, shape, axes))
    del node.attributes["axes"]
    node.attributes.pop("keep_aspect_ratio_policy", None)
    scope.body.insert_before(node, b.nodes)
    return Prepared(tuple(b.nodes))

