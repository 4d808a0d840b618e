"""Mod-28 -> Mod-13: fmod=0 on floats from C's fmod."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import Scope, attr, constant_node, typed
from scatter_rewrite.opset.fitting import input_dtype
from scatter_rewrite.opset.registry import UNCHANGED, Form, Replaced, register_form
from scatter_rewrite.opset.rewriting import FLOATS, replace


@register_form("Mod", 28, 13, neutral=True)
def mod_28_13(node: ir.Node, scope: Scope, target: int) -> Form:
    """Mod-28 takes ``fmod=0`` on floats: the remainder with the divisor's sign (Python's ``%``).
    Older Mods take floats only with ``fmod=1`` (C's fmod, the dividend's sign). The same from it:
    r = fmod(a, b), plus b where r is non-zero and its sign is not b's (exact: r and b then have
    opposite signs and |r| < |b|, so r + b rounds like the true remainder, inf and NaN as ``%``)."""
    if target >= 28 or attr(node, "fmod", 0) != 0 or input_dtype(node.inputs[0]) not in FLOATS:
        return UNCHANGED
    a, b = node.inputs
    dtype, shape = input_dtype(a), node.outputs[0].shape
    zero = constant_node(np.zeros((), dtype.numpy()))
    r = typed(ir.node("Mod", [a, b], {"fmod": 1}), dtype, shape)
    r_neg = typed(ir.node("Less", [r.outputs[0], zero.outputs[0]]), ir.DataType.BOOL, shape)
    b_neg = typed(ir.node("Less", [b, zero.outputs[0]]), ir.DataType.BOOL, None)
    signs = typed(ir.node("Xor", [r_neg.outputs[0], b_neg.outputs[0]]), ir.DataType.BOOL, shape)
    r_zero = typed(ir.node("Equal", [r.outputs[0], zero.outputs[0]]), ir.DataType.BOOL, shape)
    r_nonzero = typed(ir.node("Not", [r_zero.outputs[0]]), ir.DataType.BOOL, shape)
    fix = typed(ir.node("And", [signs.outputs[0], r_nonzero.outputs[0]]), ir.DataType.BOOL, shape)
    shifted = typed(ir.node("Add", [r.outputs[0], b]), dtype, shape)
    out = ir.node("Where", [fix.outputs[0], shifted.outputs[0], r.outputs[0]])
    nodes = [zero, r, r_neg, b_neg, signs, r_zero, r_nonzero, fix, shifted, out]
    replace(node, scope, nodes, list(out.outputs))
    return Replaced(tuple(nodes))


# Ops through which a value computed from small constants alone is known before run time here (an
