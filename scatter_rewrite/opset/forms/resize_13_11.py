"""Resize-13 -> Resize-11: roi and scales written out (empty) where omitted."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import NodeBuilder, Scope
from scatter_rewrite.opset.registry import UNCHANGED, Form, Prepared, register_form

__all__ = ["resize_13_11"]


@register_form("Resize", 13, 11, neutral=True)
def resize_13_11(node: ir.Node, scope: Scope, target: int) -> Form:
    """Resize-13 made roi and scales optional; Resize-11 takes them always (empty when unused)."""
    if target >= 13:
        return UNCHANGED
    b = NodeBuilder()
    for i in (1, 2):
        if i < len(node.inputs) and node.inputs[i] is None:
            node.replace_input_with(i, b.const(np.array([], np.float32)))
    scope.body.insert_before(node, b.nodes)
    return Prepared(tuple(b.nodes))
