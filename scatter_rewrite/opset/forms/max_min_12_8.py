"""Max-12/Min-12 -> Max-8/Min-8 on integers: Where over Greater/Less."""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.graph import NodeBuilder, Scope
from scatter_rewrite.opset.fitting import input_dtype
from scatter_rewrite.opset.registry import UNCHANGED, Form, Replaced, register_form
from scatter_rewrite.opset.rewriting import INTEGERS, replace

__all__ = ["max_min_12_8"]


@register_form("Max", 12, 8, neutral=True)
@register_form("Min", 12, 8, neutral=True)
def max_min_12_8(node: ir.Node, scope: Scope, target: int) -> Form:
    """Max-12 and Min-12 took integers; Max-8/Min-8 take floats only. On integers (no NaN) the same
    as Where(Greater(a, b), a, b) (Less for Min), folded over the inputs with their broadcasting."""
    dtype = input_dtype(node.inputs[0]) if node.inputs and node.inputs[0] is not None else None
    if target >= 12 or dtype not in INTEGERS:
        return UNCHANGED
    b = NodeBuilder()
    if len(node.inputs) == 1:  # the one input as it is
        best = b.add("Identity", [node.inputs[0]])
    else:
        compare, best = "Greater" if node.op_type == "Max" else "Less", node.inputs[0]
        for other in node.inputs[1:]:
            better = b.add(compare, [best, other], dtype=ir.DataType.BOOL)
            best = b.add("Where", [better, best, other], dtype=dtype)
    replace(node, scope, b.nodes, [best])
    return Replaced(tuple(b.nodes))
