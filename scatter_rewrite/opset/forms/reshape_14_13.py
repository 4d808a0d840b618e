"""Reshape-14 -> Reshape-13: allowzero=1 where the shape holds no 0, or padded where it may."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import (
    NodeBuilder, Scope, attr, constant_tensor, is_reference, reference_reason,
)
from scatter_rewrite.opset.fitting import input_dtype
from scatter_rewrite.opset.registry import UNCHANGED, Form, Replaced, register_form
from scatter_rewrite.opset.rewriting import refuse, replace

__all__ = ["reshape_14_13"]


@register_form("Reshape", 14, 13, neutral=True)
def reshape_14_13(node: ir.Node, scope: Scope, target: int) -> Form:
    """Reshape-14's ``allowzero=1`` keeps a 0 in the shape as a 0-size dimension; Reshape-13 copies
    that dimension from the input. The same when the shape holds no 0: a constant shape without one,
    or any shape when the input has a known non-zero size (a 0 would leave no elements for its)."""
    a = node.attributes.get("allowzero")
    if a is None or (not is_reference(a) and a.value == 0):
        return UNCHANGED
    older = ("Reshape-13 copies a 0 in the shape from the input where allowzero=1 keeps it as a "
             "0-size dimension")
    if is_reference(a):
        raise refuse(node, scope, target, f"its {reference_reason(node, ('allowzero',))}, and "
                                          f"{older}")
    shape = constant_tensor(node.inputs[1])
    x = node.inputs[0]
    if shape is not None:
        if (shape.numpy() == 0).any():
            raise refuse(node, scope, target, f"its constant shape {shape.numpy().tolist()} holds "
                                              f"a 0, and {older}")
    elif not (x is not None and x.shape is not None
              and all(isinstance(d, int) and d > 0 for d in x.shape)
              or _copies_where_zero(node)):
        return _reshape_padded(node, scope, target)
    del node.attributes["allowzero"]
    return UNCHANGED


def _copies_where_zero(node: ir.Node) -> bool:
    """Whether each entry of a Reshape's computed shape is a non-zero constant or the data's own
    dimension at the same position (``Concat`` of constants and of ``Shape(data, start, end)``, or
    its Shape-then-Slice form, at the offset ``start``): where it is 0, Reshape-13 copies that same
    0."""
    data, shape = node.inputs[0], node.inputs[1]
    concat = shape.producer()
    if concat is None or concat.op_type != "Concat" or data is None or data.shape is None:
        return False
    rank, offset = len(data.shape), 0
    for part in concat.inputs:
        piece = constant_tensor(part)
        if piece is not None:
            values = piece.numpy().reshape(-1)
            if (values == 0).any():
                return False
            offset += values.size
            continue
        span = _shape_span(part, data, rank)
        if span is None or span[0] != offset:
            return False
        offset += span[1] - span[0]
    return True


def _shape_span(value: ir.Value, data: ir.Value, rank: int) -> tuple[int, int] | None:
    """(start, end) when ``value`` is ``Shape(data)[start:end]`` (Shape-15's attributes, or Shape
    then a constant Slice), clamped to ``rank``; None otherwise."""
    producer = value.producer()
    if producer is None:
        return None
    if producer.op_type == "Shape" and producer.inputs[0] is data:
        start, end = attr(producer, "start", 0), attr(producer, "end", rank)
    elif (producer.op_type == "Slice" and len(producer.inputs) in (3, 4)
          and producer.inputs[0].producer() is not None
          and producer.inputs[0].producer().op_type == "Shape"
          and producer.inputs[0].producer().inputs[0] is data
          and not producer.inputs[0].producer().attributes):
        bounds = [constant_tensor(v) for v in producer.inputs[1:]]
        if (any(b is None or b.size != 1 for b in bounds)
                or (len(bounds) == 3 and int(bounds[2].numpy()) != 0)):
            return None
        start, end = (int(b.numpy().reshape(-1)[0]) for b in bounds[:2])
    else:
        return None
    # (a reference to a function's attribute)
    if not isinstance(start, int) or not isinstance(end, int):
        return None
    start, end = (min(max(v + rank if v < 0 else v, 0), rank) for v in (start, end))
    return (start, end) if start < end else None


def _reshape_padded(node: ir.Node, scope: Scope, target: int) -> Form:
    """Reshape-14 ``allowzero=1`` on a shape S computed at run time: a 0 in S is a 0-size dimension
    (the data then has no elements; the spec forbids -1 beside it). Exact at Reshape-13: the data,
    flattened and padded with zeros to the size of S' (S with its 0s as 1s), reshaped to S', then
    sliced to 0 where S is 0. With no 0 in S, nothing is padded and nothing sliced."""
    data, shape = node.inputs
    dtype = input_dtype(data)
    if dtype is None or dtype.numpy() is None:
        raise refuse(node, scope, target, "allowzero=1 on a computed shape, and its data type, "
                                          "which the zeros that stand in for a 0-size dimension "
                                          "need, is unknown")
    i64, boolean = ir.DataType.INT64, ir.DataType.BOOL
    b = NodeBuilder()
    zero, one = b.const(np.array([0], np.int64)), b.const(np.array([1], np.int64))
    is_zero = b.add("Equal", [shape, zero], dtype=boolean)
    ones_for_zeros = b.add("Where", [is_zero, one, shape], dtype=i64)
    size = b.add("ReduceProd", [ones_for_zeros], {"keepdims": 1}, dtype=i64)
    missing = b.add("Sub", [size, b.add("Size", [data], dtype=i64)], dtype=i64)
    # (-1 in S: none)
    missing = b.add("Where", [b.add("Greater", [missing, zero], dtype=boolean), missing, zero],
                    dtype=i64)
    flat = b.add("Reshape", [data, b.const(np.array([-1], np.int64))], dtype=dtype)
    filler = b.add("Expand", [b.const(np.zeros((), dtype.numpy())), missing], dtype=dtype)
    padded = b.add("Concat", [flat, filler], {"axis": 0}, dtype=dtype)
    reshaped = b.add("Reshape", [padded, ones_for_zeros], dtype=dtype)
    ends = b.add("Where", [is_zero, zero, b.const(np.array([np.iinfo(np.int64).max], np.int64))],
                 dtype=i64)
    starts = b.add("Sub", [ends, ends], dtype=i64)
    out = b.add("Slice", [reshaped, starts, ends], dtype=dtype)
    replace(node, scope, b.nodes, [out])
    return Replaced(tuple(b.nodes))

