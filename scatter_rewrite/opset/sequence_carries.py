"""A sequence a Loop builds, written as a Loop-11 scan output: Loop takes sequences from opset 13
only, and dynamo exports build one in a Loop (``torch.nn.EmbeddingBag``: ``SequenceEmpty`` before
the Loop, one ``SequenceInsert`` at the end per iteration in its body, ``ConcatFromSequence``
after it).

A scan output stacks each iteration's tensor along a new first axis, which is the sequence's
``ConcatFromSequence`` once that axis is moved to the concatenation axis (``new_axis=1``) or, for
``new_axis=0``, merged into it. That merge is the concatenation only when every element has the
same size along the axis (a scan output needs one shape); the form is written only where that size
is known before run time (:func:`_static_dim`), and refused otherwise, saying why. The element's
rank must be known (shape inference gives it).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.errors import ConversionError
from scatter_rewrite.graph import (
    WRITTEN_FOR, NodeBuilder, Scope, attr, describe, is_default_domain, is_reference, mark_written,
    written_for,
)
from scatter_rewrite.opset.rewriting import known_value

__all__ = ["scan_outputs_for_sequences"]

_INT64 = ir.DataType.INT64
_BIG = np.iinfo(np.int64).max


def scan_outputs_for_sequences(loop: ir.Node, scope: Scope, target: int) -> int:
    """Rewrite, in place, every sequence ``loop`` carries as a scan output (see the module
    docstring); how many. Raises ConversionError naming the Loop where a carried sequence is not
    one this form takes."""
    count = 0
    while (j := _first_sequence_carry(loop)) is not None:
        loop = _as_scan_output(loop, scope, target, j)
        count += 1
    return count


def _is_sequence_input(value: ir.Value | None) -> bool:
    if value is None:
        return False
    if isinstance(value.type, ir.SequenceType):
        return True
    producer = value.producer()
    return (producer is not None and is_default_domain(producer)
            and producer.op_type in ("SequenceEmpty", "SequenceConstruct", "SequenceInsert",
                                     "SequenceErase", "SplitToSequence"))


def _first_sequence_carry(loop: ir.Node) -> int | None:
    return next((j for j, v in enumerate(loop.inputs[2:]) if _is_sequence_input(v)), None)


def _as_scan_output(loop: ir.Node, scope: Scope, target: int, j: int) -> ir.Node:
    body = loop.attributes["body"].value
    carried = len(loop.inputs) - 2

    def refuse(why: str) -> ConversionError:
        return ConversionError(f"{describe(loop, scope)} cannot move to opset {target}: Loop at "
                               f"opset {target} takes no sequence (input {j + 2}), and {why}")

    initial, state = loop.inputs[2 + j], body.inputs[2 + j]
    maker = initial.producer()
    if maker is None or not is_default_domain(maker) or maker.op_type != "SequenceEmpty":
        raise refuse("the sequence it carries does not start empty (SequenceEmpty)")
    uses = list(state.uses())
    insert = uses[0].node if len(uses) == 1 else None
    if (insert is None or insert.graph is not body or not is_default_domain(insert)
            or insert.op_type != "SequenceInsert" or uses[0].idx != 0
            or len([v for v in insert.inputs if v is not None]) != 2
            or body.outputs[1 + j] is not insert.outputs[0] or list(insert.outputs[0].uses())):
        raise refuse("its body does not append one tensor per iteration to the sequence it "
                     "carries")
    final = loop.outputs[j]
    if final.is_graph_output():
        raise refuse("the sequence is an output of the graph")
    concats = [use.node for use in final.uses()]
    if not all(is_default_domain(c) and c.op_type == "ConcatFromSequence"
               and not is_reference(c.attributes.get("axis"))
               and not is_reference(c.attributes.get("new_axis", ir.AttrInt64("new_axis", 0)))
               for c in concats):
        raise refuse("the sequence it builds is read by other nodes than ConcatFromSequence")
    element = insert.inputs[1]
    rank = None if element.shape is None else len(element.shape)
    if rank is None:
        raise refuse("the rank of the tensors it appends is not known here")
    for c in concats:
        axis, new = attr(c, "axis"), attr(c, "new_axis", 0)
        if not -(rank + new) <= axis < rank + new:
            raise refuse(f"ConcatFromSequence '{c.name}' has axis={axis} out of range")
        if not new and _static_dim(element, axis % rank) is None:
            raise refuse(f"ConcatFromSequence '{c.name}' joins tensors whose size along axis "
                         f"{axis} is not known to be the same in every iteration (a scan output "
                         "needs one shape)")

    # The body: the element as the last scan output, the sequence state gone.
    b = NodeBuilder()
    scanned = b.add("Identity", [element], dtype=element.dtype, shape=element.shape)
    body.outputs.pop(1 + j)
    body.remove(insert, safe=True)
    body.inputs.pop(2 + j)
    mark_written(b.nodes, written_for(loop, scope))
    body.extend(b.nodes)
    body.outputs.append(scanned)

    # The Loop: the carry gone, the scan output last.
    inputs = [v for i, v in enumerate(loop.inputs) if i != 2 + j]
    new_loop = ir.node("Loop", inputs, dict(loop.attributes), num_outputs=len(loop.outputs),
                       name=loop.name)
    if WRITTEN_FOR in loop.metadata_props:  # (the user's Loop and body: marked only if it was)
        new_loop.metadata_props[WRITTEN_FOR] = loop.metadata_props[WRITTEN_FOR]
    finals = list(new_loop.outputs[:carried - 1])
    scans = list(new_loop.outputs[carried - 1:])
    stacked = scans[-1]
    stacked.dtype = element.dtype
    stacked.shape = ir.Shape([None, *element.shape])
    kept = [v for i, v in enumerate(loop.outputs) if i != j]
    ir.convenience.replace_nodes_and_values(scope.body, loop, [], [new_loop], kept,
                                            finals + scans[:-1])
    for c in concats:
        b = NodeBuilder()
        out = _concatenated(b, stacked, rank, attr(c, "axis"), attr(c, "new_axis", 0))
        mark_written(b.nodes, written_for(c, scope))
        ir.convenience.replace_nodes_and_values(scope.body, c, [c], b.nodes, list(c.outputs),
                                                [out])
    scope.body.remove(loop, safe=True)
    if not list(initial.uses()) and not initial.is_graph_output():
        scope.body.remove(maker, safe=True)
    return new_loop


def _concatenated(b: NodeBuilder, stacked: ir.Value, rank: int, axis: int, new: int) -> ir.Value:
    """``ConcatFromSequence(axis, new_axis=new)`` of the sequence whose elements (rank ``rank``)
    ``stacked`` holds along its first axis."""
    axis %= rank + new
    moved = stacked
    if axis:  # the iteration axis to the concatenation axis
        perm = [*range(1, axis + 1), 0, *range(axis + 1, rank + 1)]
        moved = b.add("Transpose", [stacked], {"perm": perm}, dtype=stacked.dtype)
    if new:
        return b.add("Identity", [moved], dtype=stacked.dtype) if not axis else moved
    # new_axis=0: the iteration axis merged with the element's axis after it
    shape = b.add("Shape", [moved], dtype=_INT64)

    def part(start, end):
        return b.add("Slice", [shape, b.const(np.array([start], np.int64)),
                               b.const(np.array([end], np.int64))], dtype=_INT64)

    merged = b.add("Mul", [part(axis, axis + 1), part(axis + 1, axis + 2)], dtype=_INT64)
    dims = b.add("Concat", [part(0, axis), merged, part(axis + 2, _BIG)], {"axis": 0},
                 dtype=_INT64)
    return b.add("Reshape", [moved, dims], dtype=stacked.dtype)


def _static_dim(value: ir.Value, axis: int, depth: int = 8) -> int | None:
    """``value``'s size along ``axis`` when it is the same on every run: declared or inferred, or
    read through the ops exporters wrap a row in (If branches that agree, Expand to a shape whose
    entry there is a constant, Identity, Cast, CastLike)."""
    if value.shape is not None and axis < len(value.shape) and isinstance(value.shape[axis], int):
        return value.shape[axis]
    node = value.producer()
    if node is None or depth == 0 or not is_default_domain(node):
        return None
    if node.op_type in ("Identity", "Cast", "CastLike"):
        return _static_dim(node.inputs[0], axis, depth - 1)
    if node.op_type == "If":
        index = list(node.outputs).index(value)
        sizes = {_static_dim(node.attributes[branch].value.outputs[index], axis, depth - 1)
                 for branch in ("then_branch", "else_branch")}
        return sizes.pop() if len(sizes) == 1 else None
    if node.op_type == "Expand":
        x, dims = node.inputs
        length = None if dims is None or dims.shape is None else dims.shape[0]
        if x is None or x.shape is None or not isinstance(length, int):
            return None
        rank = max(length, len(x.shape))  # (both align to the right)
        offset = rank - len(x.shape)
        entry = 1 if axis < rank - length else _entry(dims, axis - (rank - length))
        if entry is None:
            return None
        x_size = 1 if axis < offset else _static_dim(x, axis - offset, depth - 1)
        if x_size is None:
            return None
        return max(entry, x_size) if 1 in (entry, x_size) or entry == x_size else None
    return None


def _entry(shape: ir.Value | None, index: int) -> int | None:
    """Entry ``index`` of a 1-D shape value when it is a constant: the whole value known, or the
    part of a Concat that holds it."""
    whole = known_value(shape)
    if whole is not None:
        flat = whole.numpy().reshape(-1)
        return int(flat[index]) if index < flat.size else None
    node = None if shape is None else shape.producer()
    if node is None or not is_default_domain(node) or node.op_type != "Concat":
        return None
    start = 0
    for part in node.inputs:
        if part is None or part.shape is None or len(part.shape) != 1 \
                or not isinstance(part.shape[0], int):
            return None
        if index < start + part.shape[0]:
            return _entry(part, index - start)
        start += part.shape[0]
    return None
