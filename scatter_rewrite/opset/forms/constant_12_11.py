"""Constant-12 -> Constant-11: value_int(s)/value_float(s)/value_string(s) as a ``value`` tensor."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import Scope
from scatter_rewrite.opset.registry import UNCHANGED, Form, register_form

__all__ = ["constant_12_11", "constant_as_value_tensor"]


_CONSTANT_KINDS = {"value_int": np.int64, "value_ints": np.int64, "value_float": np.float32,
                   "value_floats": np.float32, "value_string": np.str_, "value_strings": np.str_}

@register_form("Constant", 12, 11, neutral=True)
def constant_12_11(node: ir.Node, scope: Scope, target: int) -> Form:
    """Constant-12 added value_int(s)/value_float(s)/value_string(s): as ``value`` before."""
    if target < 12:
        constant_as_value_tensor(node)
    return UNCHANGED


def constant_as_value_tensor(node: ir.Node) -> None:
    """Constant-12 added value_int(s)/value_float(s)/value_string(s); opset 11 has only
    ``value``."""
    for name, np_type in _CONSTANT_KINDS.items():
        if name in node.attributes:
            array = np.array(node.attributes.pop(name).value,
                             dtype=np_type if np_type is not np.str_ else object)
            node.attributes["value"] = ir.AttrTensor("value", ir.tensor(array))
            return

