"""Reduce*-18 (and ReduceSum-13) -> their previous versions: axes as an input to the attribute."""

from __future__ import annotations

import numpy as np
import onnx.defs
import onnx_ir as ir

from scatter_rewrite.graph import (
    NodeBuilder, Scope, attr, is_reference, reference_reason,
)
from scatter_rewrite.opset.fitting import input_dtype, type_gap
from scatter_rewrite.opset.registry import DONE, UNCHANGED, Form, Replaced, register_form
from scatter_rewrite.opset.rewriting import known_value, not_constant, refuse, replace

__all__ = ["reduce_18_13"]


# With noop_with_empty_axes set and no axes these reduce nothing and are the input as it is; the
# other Reduce* still apply their elementwise step (:func:`_elementwise_step`).
_PURE_REDUCE_OPS = frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"})

@register_form("ReduceSum", 13, 11, neutral=True)
@register_form("ReduceL1", 18, 13, neutral=True)
@register_form("ReduceL2", 18, 13, neutral=True)
@register_form("ReduceLogSum", 18, 13, neutral=True)
@register_form("ReduceLogSumExp", 18, 13, neutral=True)
@register_form("ReduceMax", 18, 13, neutral=True)
@register_form("ReduceMean", 18, 13, neutral=True)
@register_form("ReduceMin", 18, 13, neutral=True)
@register_form("ReduceProd", 18, 13, neutral=True)
@register_form("ReduceSumSquare", 18, 13, neutral=True)
def reduce_18_13(node: ir.Node, scope: Scope, target: int) -> Form:
    """ReduceSum-13 and the other Reduce*-18 take ``axes`` as an input, with
    ``noop_with_empty_axes``: set, empty axes reduce nothing, else they mean every axis. Older
    versions take constant axes as an attribute, where none means every axis. So empty or absent
    axes with the flag set become Identity, or the op's elementwise step where it has one
    (:func:`_elementwise_step`); constant axes are written as the older attribute here (the
    converter writes ``axes=[]`` for every axis, keeps the flag set, and has no ReduceMax 13 -> 12
    adapter); computed ones, and an initializer callers may override, have no older form."""
    try:
        old = onnx.defs.get_schema(node.op_type, target, "")
    except onnx.defs.SchemaError:
        return UNCHANGED
    # the target takes axes as an input, and the flag, too
    if "noop_with_empty_axes" in old.attributes:
        return UNCHANGED
    noop = node.attributes.get("noop_with_empty_axes")
    if noop is not None and is_reference(noop):
        raise refuse(node, scope, target, "its "
                                          f"{reference_reason(node, ('noop_with_empty_axes',))}, "
                                          f"and opset {target}'s {node.op_type} reduces every "
                                          "axis when given none")
    axes = None
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        axes = known_value(node.inputs[1])
        if axes is None:
            x = node.inputs[0]
            if x is None or x.shape is None:
                raise refuse(node, scope, target, f"{not_constant(node.inputs[1], 'axes')}, "
                                                  f"opset {target}'s {node.op_type} takes them as "
                                                  "a constant attribute, and its input's rank, "
                                                  "which reducing axis by axis needs, is unknown")
            return _reduce_axis_by_axis(node, scope, target)
    if noop is not None and noop.value and (axes is None or axes.size == 0):
        if node.op_type not in _PURE_REDUCE_OPS:
            return _elementwise_step(node, scope, target)
        b = NodeBuilder()
        same = b.add("Identity", [node.inputs[0]])
        replace(node, scope, b.nodes, [same])
        return Replaced(tuple(b.nodes))
    if axes is None:
        # every axis at both opsets (the flag at its default: dropped after conversion)
        return UNCHANGED
    gap = type_gap(node, target)
    if gap is not None:
        raise refuse(node, scope, target, gap)
    node.resize_inputs(1)
    node.attributes.pop("noop_with_empty_axes", None)  # (non-empty axes: the flag changes nothing)
    if axes.size:
        node.attributes["axes"] = ir.AttrInt64s("axes", [int(a) for a in axes.numpy().reshape(-1)])
    return DONE


# Reduce* over axes known only at run time, axis by axis: (the step before, the per-axis op, the
# step after).
_AXIS_BY_AXIS = {
    "ReduceSum": (None, "ReduceSum", None), "ReduceMean": (None, "ReduceMean", None),
    "ReduceMax": (None, "ReduceMax", None), "ReduceMin": (None, "ReduceMin", None),
    "ReduceProd": (None, "ReduceProd", None), "ReduceSumSquare": ("Square", "ReduceSum", None),
    "ReduceL1": ("Abs", "ReduceSum", None), "ReduceL2": ("Square", "ReduceSum", "Sqrt"),
    "ReduceLogSum": (None, "ReduceSum", "Log"),
    "ReduceLogSumExp": ("ShiftedExp", "ReduceSum", "LogShifted"),
}


def _reduce_axis_by_axis(node: ir.Node, scope: Scope, target: int) -> Form:
    """Reduce* whose ``axes`` are known only at run time (a graph input, a computed value), on an
    input of known rank r: for each axis i < r, ``Reduce(y, [i])`` where i is in axes, else y (both
    concatenated on axis i and sliced; constant axes each, which every older version takes),
    then the reduced axes dropped unless keepdims. Empty axes mean every axis, or none with
    ``noop_with_empty_axes``. Max and Min are exact; Sum, Mean and Prod add or multiply in another
    order (Mean: the mean of equal-size means), within validation's float tolerance; the other ops
    through ReduceSum between their elementwise steps, LogSumExp shifted by the maximum as
    onnxruntime's kernel does (inf and -inf included)."""
    x, axes = node.inputs[0], node.inputs[1]
    rank, dtype = len(x.shape), input_dtype(x)
    b = NodeBuilder()
    in_axis = _reduced_axes(b, axes, rank, attr(node, "noop_with_empty_axes", 0))
    bounds = _axis_bounds(b, in_axis, rank)
    before, op, after = _AXIS_BY_AXIS[node.op_type]
    y, shift = x, None
    if before == "Square":
        y = b.add("Mul", [x, x], dtype=dtype)
    elif before == "Abs":
        y = b.add("Abs", [x], dtype=dtype)
    elif before == "ShiftedExp":  # log(sum(exp(x - m))) + m, m the maximum (0 where it is infinite)
        peak = _reduce_each(b, x, "ReduceMax", bounds, dtype)
        shift = b.add("Where", [b.add("IsInf", [peak], dtype=ir.DataType.BOOL),
                                b.const(np.zeros((), dtype.numpy())), peak], dtype=dtype)
        y = b.add("Exp", [b.add("Sub", [x, shift], dtype=dtype)], dtype=dtype)
    y = _reduce_each(b, y, op, bounds, dtype)
    if after == "Sqrt":
        y = b.add("Sqrt", [y], dtype=dtype)
    elif after == "Log":
        y = b.add("Log", [y], dtype=dtype)
    elif after == "LogShifted":
        y = b.add("Add", [b.add("Log", [y], dtype=dtype), shift], dtype=dtype)
    if not attr(node, "keepdims", 1):
        y = _drop_reduced(node, scope, target, b, y, in_axis)
    replace(node, scope, b.nodes, [y])
    return Replaced(tuple(b.nodes))


def _reduced_axes(b: NodeBuilder, axes: ir.Value, rank: int, noop: int) -> ir.Value:
    """in_axis[i]: whether axis i is reduced (axes normalized into [0, r); repeated ones count
    once; none: every axis, or none with ``noop``)."""
    i64, boolean = ir.DataType.INT64, ir.DataType.BOOL
    normalized = b.add("Mod", [b.add("Add", [axes, b.const(np.int64(rank))], dtype=i64),
                               b.const(np.int64(rank))], dtype=i64)
    column = b.add("Reshape", [normalized, b.const(np.array([-1, 1], np.int64))], dtype=i64,
                   shape=ir.Shape([None, 1]))
    hits = b.add("Equal", [column, b.const(np.arange(rank, dtype=np.int64))], dtype=boolean,
                 shape=ir.Shape([None, rank]))
    counted = b.add("ReduceSum", [b.add("Cast", [hits], {"to": i64}, dtype=i64),
                                  b.const(np.array([0], np.int64))],
                    {"keepdims": 0}, dtype=i64, shape=ir.Shape([rank]))
    in_axis = b.add("Greater", [counted, b.const(np.int64(0))], dtype=boolean,
                    shape=ir.Shape([rank]))
    if not noop:  # no axes: every axis
        size = b.add("Size", [axes], dtype=i64, shape=ir.Shape([]))
        empty = b.add("Equal", [size, b.const(np.int64(0))], dtype=boolean)
        in_axis = b.add("Or", [in_axis, empty], dtype=boolean, shape=ir.Shape([rank]))
    return in_axis


def _axis_bounds(b: NodeBuilder, in_axis: ir.Value, rank: int) -> list[tuple]:
    """Per axis i, the Slice (start, end) of Concat(reduced, y) on axis i: [0:1] (the reduced)
    where axis i is reduced, else [1:] (y itself)."""
    i64, bounds = ir.DataType.INT64, []
    for i in range(rank):
        flag = b.add("Gather", [in_axis, b.const(np.int64(i))], dtype=ir.DataType.BOOL,
                     shape=ir.Shape([]))
        start = b.add("Where", [flag, b.const(np.array([0], np.int64)),
                                b.const(np.array([1], np.int64))], dtype=i64, shape=ir.Shape([1]))
        end = b.add("Where", [flag, b.const(np.array([1], np.int64)),
                              b.const(np.array([np.iinfo(np.int64).max], np.int64))],
                    dtype=i64, shape=ir.Shape([1]))
        bounds.append((start, end))
    return bounds


def _reduce_each(b: NodeBuilder, y: ir.Value, op: str, bounds: list[tuple],
                 dtype: ir.DataType) -> ir.Value:
    for i, (start, end) in enumerate(bounds):
        reduced = b.add(op, [y, b.const(np.array([i], np.int64))], {"keepdims": 1}, dtype=dtype)
        both = b.add("Concat", [reduced, y], {"axis": i}, dtype=dtype)
        y = b.add("Slice", [both, start, end, b.const(np.array([i], np.int64))], dtype=dtype)
    return y


def _drop_reduced(node: ir.Node, scope: Scope, target: int, b: NodeBuilder, y: ir.Value,
                  in_axis: ir.Value) -> ir.Value:
    """``y`` without the reduced axes (length 1 now): Squeeze takes them as an input from 13."""
    x, rank, dtype = node.inputs[0], len(node.inputs[0].shape), input_dtype(node.inputs[0])
    i64, boolean = ir.DataType.INT64, ir.DataType.BOOL
    if target >= 13:
        positions = b.add("Compress", [b.const(np.arange(rank, dtype=np.int64)), in_axis],
                          {"axis": 0}, dtype=i64, shape=ir.Shape([None]))
        return b.add("Squeeze", [y, positions], dtype=dtype)
    # Squeeze-11 takes constant axes: the kept dimensions as a shape instead
    if not all(isinstance(d, int) and d > 0 for d in x.shape):
        raise refuse(node, scope, target, f"{not_constant(node.inputs[1], 'axes')}, and with "
                                          f"keepdims=0 opset {target} drops them only as "
                                          "constant Squeeze axes or as a Reshape, which copies a "
                                          "0-size dimension from the wrong place (its input may "
                                          "have one)")
    kept = b.add("Compress", [b.add("Shape", [y], dtype=i64, shape=ir.Shape([rank])),
                              b.add("Not", [in_axis], dtype=boolean, shape=ir.Shape([rank]))],
                 {"axis": 0}, dtype=i64, shape=ir.Shape([None]))
    return b.add("Reshape", [y, kept], dtype=dtype)


def _elementwise_step(node: ir.Node, scope: Scope, target: int) -> Form:
    """ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum and ReduceLogSumExp with the flag set and
    no axes reduce nothing and apply their elementwise step (x*x, |x|, sqrt(x*x), log x, log(exp
    x)). Written in forms that give onnxruntime's result bit for bit (NaN, inf and overflow
    included; every float16): float, double, int32 and int64 as the same op reducing an axis of size
    1 put in front (its kernel then runs the step as it does here; Log or Abs alone round or treat
    ints otherwise); float16, whose kernels differ between the versions, as the elementwise ops.
    Other types, which onnxruntime's kernels lack (bfloat16, uint32, uint64), are refused: nothing
    could show a form exact."""
    x = node.inputs[0]
    dtype = None if x is None else input_dtype(x)
    step = {"ReduceSumSquare": "x*x", "ReduceL1": "|x|", "ReduceL2": "sqrt(x*x)",
            "ReduceLogSum": "log(x)", "ReduceLogSumExp": "log(exp(x))"}[node.op_type]
    shape, b = (x.shape if x is not None else None), NodeBuilder()
    if dtype in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.INT32, ir.DataType.INT64):
        front = b.const(np.array([0], np.int64))
        unsqueeze = b.add("Unsqueeze", [x, front], dtype=dtype,
                          shape=None if shape is None else ir.Shape([1, *shape]))
        y = b.add(node.op_type, [unsqueeze, front], {"keepdims": 0})
    elif dtype == ir.DataType.FLOAT16:
        # (onnxruntime's float16 kernel computes it in double)
        wide = ir.DataType.DOUBLE
        if node.op_type == "ReduceLogSumExp":
            exp = b.add("Exp", [b.add("Cast", [x], {"to": wide}, dtype=wide, shape=shape)],
                        dtype=wide, shape=shape)
            y = b.add("Cast", [b.add("Log", [exp], dtype=wide, shape=shape)], {"to": dtype})
        elif node.op_type in ("ReduceSumSquare", "ReduceL2"):
            y = b.add("Mul", [x, x], dtype=dtype, shape=shape)
            if node.op_type == "ReduceL2":
                y = b.add("Sqrt", [y])
        else:
            y = b.add({"ReduceL1": "Abs", "ReduceLogSum": "Log"}[node.op_type], [x])
    else:
        what = "unknown" if dtype is None else dtype.name
        raise refuse(node, scope, target, "with noop_with_empty_axes set and no axes it computes "
                                          f"{step} elementwise, and no form at opset {target} is "
                                          "known to compute that bit for bit for its data type "
                                          f"({what})")
    replace(node, scope, b.nodes, [y])
    return Replaced(tuple(b.nodes))

