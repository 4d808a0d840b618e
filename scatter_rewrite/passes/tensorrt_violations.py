"""Why TensorRT's ONNX parser would reject nodes the ``tensorrt`` flow emits
(:func:`tensorrt_violations`): each op and data type against the audited table
(:mod:`scatter_rewrite.targets.tensorrt.parser`), TopK's K, and the fixed-shape recurrences a Loop
needs."""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.graph import attr, constant_tensor, nodes_within
from scatter_rewrite.targets.tensorrt.parser import (
    BOOL_OUTPUT_OPS, SUPPORTED_TYPES, TOPK_MAX_K, UNSUPPORTED_OPS, typed_inputs, unsupported_type,
)
from scatter_rewrite.passes.to_scatternd import const_array

__all__ = ["tensorrt_violations", "VALUE_SIZED_OPS"]

# Ops whose output size depends on input values (a Loop may not carry what they shape).
VALUE_SIZED_OPS = {"NonZero", "Compress", "Unique"}


def _is_constant(value: ir.Value | None) -> bool:
    return constant_tensor(value) is not None


def _loop_shape_changes(node: ir.Node) -> list[str]:
    """The loop-carried values of a ``Loop`` whose shape may change from one iteration to the next:
    the body's output shape differs statically from its input's, or the output depends on an op
    whose output size depends on values (NonZero, Compress, Unique, TopK with a run-time K).
    A heuristic: a scatter's output is traced through its data input only."""
    body = attr(node, "body")
    if not isinstance(body, ir.Graph):
        return []
    carried = max(len(node.inputs) - 2, 0)
    found = []
    for i in range(carried):
        if 2 + i >= len(body.inputs) or 1 + i >= len(body.outputs):
            break
        before, after = body.inputs[2 + i], body.outputs[1 + i]
        changes = (
            before.shape is not None
            and after.shape is not None
            and (
                len(before.shape) != len(after.shape)
                or any(
                    isinstance(x, int) and isinstance(y, int) and x != y
                    for x, y in zip(before.shape, after.shape)
                )
            )
        )
        if changes or _value_sized(after, body):
            found.append(f"Loop carried value '{after.name}' changes shape between iterations "
                         "(TensorRT's ILoop needs fixed-shape recurrences)")
    return found


def _value_sized(value: ir.Value, body: ir.Graph) -> bool:
    seen, stack = set(), [value]
    while stack:
        producer = stack.pop().producer()
        if producer is None or producer.graph is not body or id(producer) in seen:
            continue
        seen.add(id(producer))
        op = producer.op_type
        if op in VALUE_SIZED_OPS or (
            op == "TopK" and len(producer.inputs) > 1 and not _is_constant(producer.inputs[1])
        ):
            return True
        inputs = (
            producer.inputs[:1]
            if op in ("ScatterND", "ScatterElements", "Scatter")
            else producer.inputs
        )
        stack.extend(v for v in inputs if v is not None)
    return False


def tensorrt_violations(nodes, trt_version: str) -> list[str]:
    """Why TensorRT's ONNX parser would reject any of ``nodes`` (and their subgraphs); [] if none
    known.

    Only documented restrictions are checked: every op must be in the audited operator table
    (:mod:`scatter_rewrite.targets.tensorrt.parser`, onnx-tensorrt docs/operators.md) with a data
    type it lists (Cast: its input and ``to``; Constant: its value), as the parser casts it (INT64
    -> INT32 on 8.6, DOUBLE -> FLOAT); Compress/Unique/... are unsupported; TopK's K must be at most 3840 (NvInfer.h), so one
    computed at run time, which the parser takes from 8.6 on, is reported as unbounded; a Loop may
    not carry a value whose shape changes
    (ILoop recurrences have a fixed shape: see :func:`_loop_shape_changes`); ScatterND may not carry
    a reduction, ScatterElements reductions are ignored on 8.6. Values without a recorded type get
    the type their producer gives them (:class:`_Types`); one still unknown is not checked.
    """
    found = []
    types = _Types()
    table = SUPPORTED_TYPES[trt_version]
    for node in nodes_within(nodes):
        op = node.op_type
        if op in UNSUPPORTED_OPS:
            found.append(f"{op} is not supported by TensorRT's ONNX parser")
            continue
        if op not in table:
            found.append(f"{op} is not in the operator table audited for TensorRT {trt_version} "
                         "(scatter_rewrite/targets/tensorrt/parser.py)")
            continue
        checked = [types.of(node.inputs[i]) for i in typed_inputs(node) if i < len(node.inputs)]
        if op == "Cast":
            checked.append(_cast_target(node))
        elif op == "Constant":
            checked = [types.of(node.outputs[0])]
        for dtype in checked:
            if (why := unsupported_type(op, dtype, trt_version)) is not None:
                found.append(why)
        if op == "TopK":
            if len(node.inputs) > 1 and not _is_constant(node.inputs[1]):
                found.append(
                    f"TopK's K is computed at run time, so nothing bounds it by the "
                    f"{TOPK_MAX_K[trt_version]} TensorRT {trt_version} takes (a larger K fails "
                    "at run time: NvInfer.h, ITopKLayer::setInput)"
                )
            elif (
                len(node.inputs) > 1
                and (k := const_array(node.inputs[1])) is not None
                and k.size
                and int(k.max()) > TOPK_MAX_K[trt_version]
            ):
                found.append(
                    f"TopK with K={int(k.max())} (TensorRT {trt_version}: K <= "
                    f"{TOPK_MAX_K[trt_version]})"
                )
        elif op == "Loop":
            found.extend(_loop_shape_changes(node))
        elif op in ("ScatterND", "ScatterElements"):
            reduction = attr(node, "reduction", None)
            if op == "ScatterND" and reduction is not None:
                found.append(f'ScatterND with reduction="{reduction}"')
            if op == "ScatterElements" and reduction not in (None, "none") and trt_version == "8.6":
                found.append(
                    f"ScatterElements reduction={reduction} (silently ignored by TensorRT 8.6)"
                )
    return list(dict.fromkeys(found))


def _cast_target(node: ir.Node) -> ir.DataType | None:
    to = attr(node, "to", None)
    return ir.DataType(to) if isinstance(to, int) else None


class _Types:
    """The element type of a value: as recorded, else as its producer makes it (comparisons and
    logic give BOOL, Cast its ``to``, Shape/Size INT64, Constant its tensor's, Where its branches',
    every other op its data input's). None when that cannot be told."""

    def __init__(self):
        self._memo: dict[int, ir.DataType | None] = {}

    def of(self, value: ir.Value | None) -> ir.DataType | None:
        if value is None or value.dtype is not None:
            return value.dtype if value is not None else None
        key = id(value)
        if key not in self._memo:
            self._memo[key] = None  # a cycle (none in a DAG) stays unknown
            self._memo[key] = self._from_producer(value)
        return self._memo[key]

    def _from_producer(self, value: ir.Value) -> ir.DataType | None:
        producer = value.producer()
        if producer is None:
            return None
        op = producer.op_type
        if op in BOOL_OUTPUT_OPS:
            return ir.DataType.BOOL
        if op == "Cast":
            return _cast_target(producer)
        if op in ("Shape", "Size", "NonZero") or (
            op == "TopK" and value is not producer.outputs[0]
        ):
            return ir.DataType.INT64
        if op == "Constant":
            tensor = attr(producer, "value", None)
            return tensor.dtype if tensor is not None else None
        if op in ("If", "Loop", "Scan"):
            return None
        inputs = [producer.inputs[i] for i in typed_inputs(producer) if i < len(producer.inputs)]
        return next((t for t in map(self.of, inputs) if t is not None), None)
