"""The paths index values take from a graph input to a scatter (or gather): the ops that carry
them unchanged as far as bounds go (:data:`CARRIERS`: value-preserving ops, PyTorch's negative-index
normalization, a Gather by constant positions), the axis each step maps, and the way out of
subgraph and function bodies. :mod:`.contracts` reads them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import attr, const_tensor, function_calls, is_default_domain, iter_nodes

__all__ = [
    "bound_outside", "carrier_of", "CARRIERS", "divisor_inputs", "size_inputs", "first_calls", "float_type",
    "map_axis",
    "NO_AXIS", "node_named", "normalization_shifts", "numpy_dtype", "outer_values",
    "selected_by_constant", "slot_values", "trace_index", "trace_to_input",
]


def numpy_dtype(dtype: ir.DataType | None):
    if dtype is None:
        return np.dtype(np.float32)
    if dtype == ir.DataType.STRING:
        return np.dtype(object)
    return dtype.numpy()


def float_type(value: ir.Value | None) -> np.dtype | None:
    """A value's type where known: declared, or the ``to`` of the Cast that makes it (a half-float
    sum inside a float32 graph, whose intermediate values carry no type)."""
    if value is None:
        return None
    if value.dtype is not None:
        return numpy_dtype(value.dtype)
    producer = value.producer()
    if producer is not None and producer.op_type == "Cast" and is_default_domain(producer):
        to = attr(producer, "to", None)
        if isinstance(to, int):
            return numpy_dtype(ir.DataType(to))
    return None


def divisor_inputs(model: ir.Model) -> set[str]:
    """The integer graph inputs whose values reach an integer ``Div``'s divisor unchanged (through
    :data:`CARRIERS`, out of bodies): validation generates them positive, since onnxruntime refuses
    a zero divisor and its int32/int64 Div of the type's lowest value by -1 traps (SIGFPE, the
    process dies). A divisor computed from an input is checked before each run instead
    (:func:`.engines.trapping_division`)."""
    graph_inputs = {id(v) for v in model.graph.inputs}
    outer = outer_values(model)
    found = set()
    for node, _scope in iter_nodes(model):
        if node.op_type != "Div" or not is_default_domain(node) or len(node.inputs) != 2:
            continue
        source = trace_to_input(node.inputs[1], graph_inputs, outer)
        if source is not None and source.dtype is not None and source.dtype.is_integer():
            found.add(source.name)
    return found


# The inputs of ops that read a count, size, scale or shape: (op, input position) -> whether 1 is
# the only value generated (a TopK's k must not exceed the axis; an Expand to ones broadcasts to
# any data), else small positive values. A real input gives them positive values; random ones of
# either sign make onnxruntime refuse the original (Resize scales <= 0, a negative count).
SIZE_SLOTS: dict[tuple[str, int], bool] = {
    ("Resize", 2): False, ("Resize", 3): False, ("Upsample", 1): False,
    ("ConstantOfShape", 0): False, ("Tile", 1): False, ("Range", 2): False,
    ("OneHot", 1): False, ("AffineGrid", 1): False, ("TopK", 1): True, ("Expand", 1): True,
}
# Ops whose output values do not depend on their input's values.
_SHAPE_READERS = frozenset({"Shape", "Size", "EyeLike", "ConstantOfShape"})


def size_inputs(model: ir.Model) -> dict[str, bool]:
    """The graph inputs whose values reach a :data:`SIZE_SLOTS` input, through any arithmetic (a
    SAM export's ``orig_im_size`` reaches Resize's sizes scaled and cast), mapped to whether they
    are generated as ones. The walk stops at ops that read only a shape and leaves bodies out."""
    graph_inputs = {id(v): v for v in model.graph.inputs}
    found: dict[str, bool] = {}
    for _node, ones, value in slot_values(model, SIZE_SLOTS):
        stack, seen = [value], set()
        while stack:
            v = stack.pop()
            if v is None or id(v) in seen:
                continue
            seen.add(id(v))
            if id(v) in graph_inputs:
                found[v.name] = found.get(v.name, False) or ones
                continue
            producer = v.producer()
            if producer is not None and producer.op_type not in _SHAPE_READERS:
                stack.extend(producer.inputs)
    return found


def slot_values(model: ir.Model, slots: dict[tuple[str, int], Any]
                ) -> Iterator[tuple[ir.Node, Any, ir.Value]]:
    """(node, its entry, the value) for each input of an ONNX-domain node, in the graph, its bodies
    and functions, that fills a slot of ``slots`` ((op_type, input position) -> entry)."""
    for node, _scope in iter_nodes(model):
        if not is_default_domain(node):
            continue
        for position, value in enumerate(node.inputs):
            entry = slots.get((node.op_type, position))
            if entry is not None and value is not None:
                yield node, entry, value


def trace_to_input(
    value: ir.Value | None, graph_inputs: set[int], outer: dict[int, list]
) -> ir.Value | None:
    """The main-graph input whose values reach ``value`` unchanged, across body boundaries."""
    origin = trace_index(value, outer)
    return origin if origin is not None and id(origin) in graph_inputs else None


def trace_index(value: ir.Value | None, outer: dict[int, list], width: int = 1, shape_of=None,
           steps: list | None = None) -> ir.Value | None:
    """Where ``value``'s index values come from: up through :func:`_index_source` and out of
    bodies, to a graph input (or whatever stops the walk: a Concat, a constant, arithmetic).
    ``steps`` gets each step taken, from the scatter's side: (node, its input, its output), with
    node None for a body input bound outside."""
    while value is not None:
        producer = value.producer()
        source = (
            bound_outside(value, outer)
            if producer is None
            else _index_source(producer, width, shape_of)
        )
        if source is None:
            return value
        if steps is not None:
            steps.append((producer, source, value))
        value = source
    return None


def _index_source(node: ir.Node, width: int, shape_of) -> ir.Value | None:
    """The input of ``node`` whose values its output carries, as far as index bounds go, or None.

    The ops of :data:`CARRIERS`: value-preserving ones, PyTorch's normalization ``Where(Less(x, 0),
    Add(x, n), x)``, a Gather by constant positions. With ``width`` > 1 (ScatterND tuples of that
    many components along the last axis), only where the input's last axis is that same axis: same
    size, not moved by a Transpose (``shape_of`` gives a value's static shape or None)."""
    carrier = carrier_of(node)
    source = carrier.source(node) if carrier is not None else None
    if source is None or width == 1:
        return source
    shape = shape_of(source)
    if shape and shape[-1] == width and carrier.keeps_last(node, shape):
        return source
    return None


def selected_by_constant(node: ir.Node) -> np.ndarray | None:
    """The positions of a ``Gather`` by constant indices (``edge_index[1]``, as exporters pick the
    source and destination rows of a GNN's edge list): its output holds some of its data's values,
    so it carries their bounds, and their uniqueness along the other axes. None for anything
    else."""
    if node.op_type != "Gather" or len(node.inputs) != 2 or node.inputs[1] is None:
        return None
    tensor = const_tensor(node.inputs[1])
    return None if tensor is None else tensor.numpy()


def _is_zero(value: ir.Value | None) -> bool:
    tensor = const_tensor(value) if value is not None else None
    return tensor is not None and tensor.size == 1 and tensor.numpy().item() == 0


def node_named(node: ir.Node) -> str:
    return f"{node.op_type} {node.name!r}" if node.name else f"a {node.op_type}"


def _constant_ints(value: ir.Value | None, shape_of) -> np.ndarray | None:
    """The integers ``value`` holds before run time, flattened: a constant, or static dims read by
    ``Shape`` (then Gather/Cast/Squeeze/Unsqueeze/Reshape), as exporters compute a dim size."""
    if value is None:
        return None
    tensor = const_tensor(value)
    if tensor is not None:
        array = tensor.numpy()
        return (
            array.reshape(-1).astype(np.int64) if np.issubdtype(array.dtype, np.integer) else None
        )
    node = value.producer()
    if node is None or not is_default_domain(node) or not node.inputs:
        return None
    if node.op_type == "Shape":
        shape = shape_of(node.inputs[0]) if node.inputs[0] is not None else None
        return (
            None
            if shape is None
            else np.array(shape, np.int64)[attr(node, "start", 0) : attr(node, "end", None)]
        )
    carrier = carrier_of(node)
    if carrier is not None and carrier.flat_order:
        return _constant_ints(node.inputs[0], shape_of)
    if node.op_type == "Gather" and attr(node, "axis", 0) == 0 and len(node.inputs) == 2:
        data, positions = (_constant_ints(v, shape_of) for v in node.inputs)
        if (
            data is None
            or positions is None
            or np.any((positions < -data.size) | (positions >= data.size))
        ):
            return None
        return data[positions]
    return None


def normalization_shifts(
    steps: list, width: int, shape_of
) -> tuple[tuple[int, ...] | None, str | None]:
    """The ``c`` of the index normalization ``Where(i < 0, i + c, i)`` nearest the input on the
    traced ``steps`` (it is the one that sees the negative values; the others then see slots), per
    component: None without one. Zeros (no negative values) where ``c`` is not known, or not one
    number, with the reason."""
    for node, source, _value in reversed(steps):
        if node is None or node.op_type != "Where":
            continue
        add = node.inputs[1].producer()
        others = [v for v in add.inputs if v is not source]
        c = _constant_ints(others[0], shape_of) if len(others) == 1 else None
        if c is None or c.size != 1:
            return (0,) * width, (
                f"the normalization Where(i < 0, i + c, i) ({node_named(node)}) adds a c that is "
                "not one number known before run time"
            )
        return (int(c[0]),) * width, None
    return None, None


NO_AXIS = -1  # the scatter axis is one of size 1 the traced input lacks (an Unsqueeze made it)


def _axes(node: ir.Node) -> list[int] | None:
    """Unsqueeze/Squeeze axes: the input (opset >= 13) or the attribute; None if not constant."""
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        tensor = const_tensor(node.inputs[1])
        return None if tensor is None else [int(a) for a in tensor.numpy().reshape(-1)]
    axes = attr(node, "axes")
    return None if axes is None else list(axes)


def map_axis(steps: list, axis: int | None, rank_of) -> int | None:
    """The axis of the input reached by ``steps`` (from :func:`trace_index`) that becomes ``axis``
    of the first step's output: :data:`NO_AXIS` if that is an axis of size 1 the input lacks, None
    when not known (Reshape, Flatten, an Expand along it, unknown ranks)."""
    for node, source, value in steps:
        if axis is None or axis == NO_AXIS:
            return axis
        out_shape, in_shape = rank_of(value), rank_of(source)
        if out_shape is None or in_shape is None:
            return None
        # (node None: a body input bound outside, whose value it is)
        carrier = CARRIERS["Identity"] if node is None else carrier_of(node)
        if carrier is None or carrier.axis is None:
            return None
        axis = carrier.axis(node, axis, in_shape, out_shape)
    return axis


def _same_axis(node, axis: int, in_shape: tuple, out_shape: tuple) -> int | None:
    return axis if len(in_shape) == len(out_shape) else None


def _reshaped_axis(node, axis: int, in_shape: tuple, out_shape: tuple) -> int | None:
    return axis if in_shape == out_shape and None not in in_shape else None  # (a Reshape to itself)


def _transposed_axis(node, axis: int, in_shape: tuple, out_shape: tuple) -> int | None:
    perm = attr(node, "perm") or list(reversed(range(len(out_shape))))
    return perm[axis]


def _unsqueezed_axis(node, axis: int, in_shape: tuple, out_shape: tuple) -> int | None:
    axes = _axes(node)
    if axes is None:
        return None
    axes = [a % len(out_shape) for a in axes]
    return NO_AXIS if axis in axes else axis - sum(a < axis for a in axes)


def _squeezed_axis(node, axis: int, in_shape: tuple, out_shape: tuple) -> int | None:
    axes = _axes(node)
    if axes is None and None in in_shape:
        return None
    if axes is None:
        axes = [i for i, d in enumerate(in_shape) if d == 1]
    axes = [a % len(in_shape) for a in axes]
    kept = [i for i in range(len(in_shape)) if i not in axes]
    return kept[axis] if len(kept) == len(out_shape) else None


def _gathered_axis(node, axis: int, in_shape: tuple, out_shape: tuple) -> int | None:
    """By constant positions (:func:`selected_by_constant`): theirs replace the gathered axis (one
    position: an axis of size 1, one value per column)."""
    positions = selected_by_constant(node)
    gathered, picked = attr(node, "axis", 0) % len(in_shape), positions.ndim
    if gathered <= axis < gathered + picked:
        return NO_AXIS if positions.size == 1 else None
    return axis if axis < gathered else axis - picked + 1


def _expanded_axis(node, axis: int, in_shape: tuple, out_shape: tuple) -> int | None:
    k = axis - (len(out_shape) - len(in_shape))
    if k < 0 or in_shape[k] == 1:  # a new or size-1 axis: broadcast along it unless it stays 1
        return (NO_AXIS if k < 0 else k) if out_shape[axis] == 1 else None
    return k


def _keeps_last(node: ir.Node, shape: tuple) -> bool:
    return True


def _transpose_keeps_last(node: ir.Node, shape: tuple) -> bool:
    perm = attr(node, "perm")
    return perm is not None and perm[-1] == len(perm) - 1


def _gather_keeps_last(node: ir.Node, shape: tuple) -> bool:
    return attr(node, "axis", 0) % len(shape) != len(shape) - 1


def _first_input(node: ir.Node) -> ir.Value | None:
    return node.inputs[0]


def _normalized(node: ir.Node) -> ir.Value | None:
    """``Where(Less(x, 0), Add(x, n), x)``'s x: it maps [-n, n) onto [0, n) and keeps values
    unique mod n, which the generated indices are."""
    if len(node.inputs) != 3:
        return None
    cond, shifted, x = node.inputs
    less, add = (v.producer() if v is not None else None for v in (cond, shifted))
    if (
        less is not None
        and less.op_type == "Less"
        and list(less.inputs[:1]) == [x]
        and _is_zero(less.inputs[1])
        and add is not None
        and add.op_type == "Add"
        and x in add.inputs
    ):
        return x
    return None


def _gathered_by_constant(node: ir.Node) -> ir.Value | None:
    return node.inputs[0] if selected_by_constant(node) is not None else None


def _gathered_row(node: ir.Node) -> int | None:
    """The row of a Gather by one constant position on axis 0 (``edge_index[1]``, maybe negative):
    its output holds that row's values only."""
    positions = selected_by_constant(node)
    if positions is None or positions.size != 1 or attr(node, "axis", 0) != 0:
        return None
    return int(positions.reshape(-1)[0])


def _no_row(node: ir.Node) -> int | None:
    return None


@dataclasses.dataclass(frozen=True)


class _Carrier:
    """How an op carries index values from an input to its output, for the index-contract tracer:
    which input's values it carries (``source``: None where this node does not), whether its
    output has that input's shape and its values in their flat order (constant ints pass through),
    which axis of that input becomes an axis of the output (``axis``: None where not known), and
    whether the input's last axis stays the output's last (``keeps_last``, given the input's
    shape: where ScatterND index tuples lie), and which row of the input's axis 0 the output is
    (``row``: None where it is not one row), so that a contract binds that row only."""

    source: Any = _first_input
    same_shape: bool = False
    flat_order: bool = False
    axis: Any = None
    keeps_last: Any = _keeps_last
    row: Any = _no_row


# Every op the tracer sees through, in one table (default domain only).
CARRIERS = {
    "Cast": _Carrier(same_shape=True, flat_order=True, axis=_same_axis),
    "Identity": _Carrier(same_shape=True, flat_order=True, axis=_same_axis),
    "Reshape": _Carrier(flat_order=True, axis=_reshaped_axis),
    "Flatten": _Carrier(flat_order=True, axis=_reshaped_axis),
    "Squeeze": _Carrier(flat_order=True, axis=_squeezed_axis),
    "Unsqueeze": _Carrier(flat_order=True, axis=_unsqueezed_axis),
    "Transpose": _Carrier(axis=_transposed_axis, keeps_last=_transpose_keeps_last),
    "Expand": _Carrier(axis=_expanded_axis),
    "Where": _Carrier(source=_normalized, axis=_same_axis),
    "Gather": _Carrier(source=_gathered_by_constant, axis=_gathered_axis,
                       keeps_last=_gather_keeps_last, row=_gathered_row),
}


def carrier_of(node: ir.Node) -> _Carrier | None:
    if not is_default_domain(node) or not node.inputs:
        return None
    return CARRIERS.get(node.op_type)


def outer_values(model: ir.Model) -> dict[int, list[ir.Value | None]]:
    """For Loop/Scan bodies and functions: id(body) -> the values its inputs are bound to outside.

    Loop body inputs are (iteration, condition, carried...) bound to the Loop's (M, cond,
    carried...); Scan's state inputs are bound to its inputs; a function's inputs to its first
    call's inputs (its only one when contracts are traced: :func:`.inputs._planning_copy` inlines a
    function called twice)."""
    bound: dict[int, list[ir.Value | None]] = {}
    for node, _scope in iter_nodes(model):
        body = node.attributes.get("body")
        if isinstance(body, ir.Attr) and body.type == ir.AttributeType.GRAPH:
            if node.op_type == "Loop":
                bound[id(body.value)] = [None, None] + list(node.inputs[2:])
            elif node.op_type == "Scan":
                bound[id(body.value)] = list(node.inputs)
    for body, (call, _function) in first_calls(model).items():
        bound[body] = list(call.inputs)
    return bound


def first_calls(model: ir.Model) -> dict[int, tuple[ir.Node, ir.Function]]:
    """id(function body) -> (its first call, the function): validation binds a function to it."""
    calls = function_calls(model)
    return {
        id(function.graph): (calls[key][0], function)
        for key, function in model.functions.items()
        if key in calls
    }


def bound_outside(value: ir.Value, outer: dict[int, list]) -> ir.Value | None:
    """The outer value a body input is bound to, or None."""
    body = value.graph
    if value.producer() is not None or body is None or id(body) not in outer:
        return None
    inputs = list(body.inputs)
    position = next((i for i, v in enumerate(inputs) if v is value), -1)
    bindings = outer[id(body)]
    return bindings[position] if 0 <= position < len(bindings) else None
