"""Mod-28 -> Mod-13: fmod=0 on floats from C's fmod."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import NodeBuilder, Scope, attr
from scatter_rewrite.opset.fitting import input_dtype
from scatter_rewrite.opset.registry import UNCHANGED, Form, Replaced, register_form
from scatter_rewrite.opset.rewriting import FLOATS, replace

__all__ = ["mod_28_13"]


@register_form("Mod", 28, 13, neutral=True)
def mod_28_13(node: ir.Node, scope: Scope, target: int) -> Form:
    """Mod-28 takes ``fmod=0`` on floats: the remainder with the divisor's sign (Python's ``%``).
    Older Mods take floats only with ``fmod=1`` (C's fmod, the dividend's sign). The same from it:
    r = fmod(a, b), plus b where r is non-zero and its sign is not b's (exact: r and b then have
    opposite signs and |r| < |b|, so r + b rounds like the true remainder, inf and NaN as ``%``)."""
    if target >= 28 or attr(node, "fmod", 0) != 0 or input_dtype(node.inputs[0]) not in FLOATS:
        return UNCHANGED
    a, b = node.inputs
    dtype, shape, boolean = input_dtype(a), node.outputs[0].shape, ir.DataType.BOOL
    nb = NodeBuilder()
    zero = nb.const(np.zeros((), dtype.numpy()))
    r = nb.add("Mod", [a, b], {"fmod": 1}, dtype=dtype, shape=shape)
    r_neg = nb.add("Less", [r, zero], dtype=boolean, shape=shape)
    b_neg = nb.add("Less", [b, zero], dtype=boolean)
    signs = nb.add("Xor", [r_neg, b_neg], dtype=boolean, shape=shape)
    r_nonzero = nb.add("Not", [nb.add("Equal", [r, zero], dtype=boolean, shape=shape)],
                       dtype=boolean, shape=shape)
    fix = nb.add("And", [signs, r_nonzero], dtype=boolean, shape=shape)
    shifted = nb.add("Add", [r, b], dtype=dtype, shape=shape)
    out = nb.add("Where", [fix, shifted, r])
    replace(node, scope, nb.nodes, [out])
    return Replaced(tuple(nb.nodes))
