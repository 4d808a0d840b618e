"""Inputs for validation that respect every scatter's contract, traced on the original model.

Inputs are seeded and respect each scatter's contract (our custom-domain scatters, which compute the
standard ops, included: :func:`graph.computes_a_scatter`): a graph input that feeds scatter indices
(directly or through value-preserving ops like Cast/Unsqueeze/Expand, and PyTorch's negative-index
normalization ``Where(Less(i, 0), Add(i, c), i)``, and a ``Gather`` by constant positions like a
GNN's ``edge_index[1]``) gets in-range values, negative ones included, unique along the axis when
the reduction is "none" (duplicates are undefined there); symbolic dimensions get sizes that fit
the model's ops (:mod:`.dims`), grown while the original fails in onnxruntime on them
(:mod:`.trial`). An
input feeding the indices of a Gather/GatherElements (``x[src]``) gets values in range of the
gathered axis too, so that the original model runs. A Gather by one position on axis 0 binds only
the row it picks (:attr:`IndexContract.rows`): ``edge_index[1]`` in range of the scatter and unique
(where it has no more values than slots), ``edge_index[0]`` only in range of ``x``. Values are
drawn as the slots they must reach: a negative value is ``slot - c`` for a normalization adding
``c`` (a constant, or a static dim read by ``Shape``), so the normalized value is that slot
whatever ``c`` is (only slots below ``c`` get one), and ``slot - n`` without one; where ``c`` is
not known before run time, or an input feeds scatters that disagree on it, only non-negative
values are drawn (the plan's notes say which).

ScatterElements (and ``Scatter``) indices may be a Concat of several inputs: each gets the bound of
the scatter axis. For reduction "none", a Concat along another axis than the scatter axis leaves
every column of indices within one input, which is made unique along that axis on its own; a Concat
along the scatter axis splits each column between the inputs, so each input gets its own part of
the slots (sized by its share of the column), which makes the column unique. Where that cannot hold
(more indices than slots, sizes not static, a part that is not a graph input, an input used twice,
an axis that cannot be followed through a Reshape), the inputs keep the axis bound, and the plan's
notes say the targets may repeat.

ScatterND index tuples ``[..., k]`` may be built, as PyTorch's exporters build them for
``index_put``/``index_add``, by a Concat along the last axis of several index tensors (each
Unsqueezed, or itself ``[..., w]``): each Concat input gets the bounds of the data dimensions its
components index. For reduction "none", each such input is made unique on its own (its tuples
distinct) where its size allows. That makes the full tuples unique whenever one input is one-to-one
with them (same-shape indices, ``x[i, j]``), and also when the inputs are broadcast against each
other (``x[i[:, None], j]``: every input unique gives every pair once; a constant component, like
the row ``arange`` TorchScript emits for ``x[:, i]``, is assumed distinct). When neither holds (5
updates through ``x[i, j]`` into a 2 x 3 ``x``; a 5 x 5 grid into 3 rows) the tuples may repeat: the
plan's notes say so, and such a validation may fail on write order. Joint generation (unique flat
indices over the product of the bounds, split between the inputs) would cover the same-shape case
too; not done, to keep one contract per input.

"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from scatter_rewrite.errors import OptionError, ValidationError
from scatter_rewrite.graph import (
    attr,
    computes_a_scatter,
    function_calls,
    is_default_domain,
    is_reference,
    iter_nodes,
)
from scatter_rewrite.type_inference import (
    annotate_functions_with, restore_types, serialize_without_weights, weightless_copy,
)
from scatter_rewrite.validate.dims import DEFAULT_SIZE, fit_dims
from scatter_rewrite.validate.engines import first_line
from scatter_rewrite.validate.trial import OriginalSession, runs_in_reference

__all__ = ["IndexContract", "load_inputs", "plan_validation", "user_tolerance", "ValidationPlan"]

# Ops whose indices input must be in range of the data, like a scatter's (see _gather_contract).
_GATHER_OPS = {"Gather", "GatherElements", "GatherND"}


@dataclasses.dataclass
class IndexContract:
    # "elements": every value in [-bound, bound), unique along `axis`; "start": in [0, bound);
    # "nd": tuples of len(bounds) components, each in [-bound, bound) of its own, along the last
    # axis (with one bound, every value is a 1-tuple whatever the shape), unique tuples.
    kind: str
    bounds: tuple[int, ...]
    unique: bool
    axis: int = 0  # for "elements": the axis of the traced input along which values must be unique
    # Per component: a negative value is drawn as slot - shift, for slots below shift (no negative
    # value for a shift <= 0). Empty: the bounds (the scatter's own wrap-around).
    shifts: tuple[int, ...] = ()
    window: tuple[int, int] | None = (
        None  # for "elements": the slots [lo, hi) drawn from; None: all
    )
    # Contracts on rows of axis 0 (a GNN's ``edge_index[1]``), each in its row's frame: that row
    # unique, the others only in range. Kind "rows": the input has no contract of its own.
    rows: dict[int, IndexContract] = dataclasses.field(default_factory=dict)

    @property
    def negative_shifts(self) -> tuple[int, ...]:
        return self.shifts or self.bounds

    @property
    def slots(self) -> tuple[int, int]:
        """For "elements": the slots [lo, hi) values are drawn from, within [0, bound); empty when
        the scatters an input feeds want disjoint slots of it."""
        lo, hi = self.window or (0, self.bounds[0])
        return max(lo, 0), min(hi, self.bounds[0])


@dataclasses.dataclass
class ValidationPlan:
    """What validation needs to know about the *original* model, computed before any pass runs."""

    inputs: dict[str, np.ndarray]
    # The original's float add/mul scatters (named): sums and products a rewrite may reorder.
    float_sums: list[str]
    notes: list[str]
    outputs: list[str] = dataclasses.field(
        default_factory=list
    )  # graph output names (passes keep them)
    # The user's (rtol, atol) for every float output (--rtol/--atol), instead of our judgement.
    tolerance: tuple[float, float] | None = None
    # Ops the passes re-expressed so that float results may round otherwise (allow_float_rounding).
    float_rounding: list[str] = dataclasses.field(default_factory=list)
    # The default-domain opset (before, after) where the passes moved it (allow_float_rounding):
    # onnxruntime fuses ops differently per opset, so float outputs may round otherwise.
    opset_move: tuple[int, int] | None = None
    # The float types those sums are computed in, where known: a float16 sum cast to a float32
    # output rounds as float16 does, not as the output type shows.
    float_sum_types: list[np.dtype] = dataclasses.field(default_factory=list)

    @property
    def float_tolerance(self) -> bool:
        """Whether float outputs may differ by rounding (see :mod:`.comparison`): the one place that
        says so, from what the original computes and what the passes report."""
        return bool(self.float_sums or self.float_rounding)


def _np_dtype(dtype: ir.DataType | None):
    if dtype is None:
        return np.dtype(np.float32)
    if dtype == ir.DataType.STRING:
        return np.dtype(object)
    return dtype.numpy()


def _float_type(value: ir.Value | None) -> np.dtype | None:
    """A value's type where known: declared, or the ``to`` of the Cast that makes it (a half-float
    sum inside a float32 graph, whose intermediate values carry no type)."""
    if value is None:
        return None
    if value.dtype is not None:
        return _np_dtype(value.dtype)
    producer = value.producer()
    if producer is not None and producer.op_type == "Cast" and is_default_domain(producer):
        to = attr(producer, "to", None)
        if isinstance(to, int):
            return _np_dtype(ir.DataType(to))
    return None


def _infer_shapes(model: ir.Model, input_shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple]:
    """Static shapes of every value (None for a dim inference could not fix), with the graph inputs
    fixed to their concrete sizes."""
    proto = serialize_without_weights(model)
    for value_info in proto.graph.input:
        if value_info.name in input_shapes and value_info.type.HasField("tensor_type"):
            shape = value_info.type.tensor_type.shape
            shape.ClearField("dim")
            for size in input_shapes[value_info.name]:
                shape.dim.add().dim_value = size
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:  # shape inference is best effort here
        return {}
    shapes = {}
    graphs = [inferred.graph]
    while graphs:
        g = graphs.pop()
        for vi in list(g.value_info) + list(g.input) + list(g.output):
            t = vi.type.tensor_type
            if t.HasField("shape"):
                shapes[vi.name] = tuple(
                    d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim
                )
        for init in g.initializer:
            shapes[init.name] = tuple(init.dims)
        for node in g.node:
            for a in node.attribute:
                graphs.extend([a.g] if a.HasField("g") else list(a.graphs))
    return shapes


def _trace_to_input(
    value: ir.Value | None, graph_inputs: set[int], outer: dict[int, list]
) -> ir.Value | None:
    """The main-graph input whose values reach ``value`` unchanged, across body boundaries."""
    origin = _trace(value, outer)
    return origin if origin is not None and id(origin) in graph_inputs else None


def _trace(value: ir.Value | None, outer: dict[int, list], width: int = 1, shape_of=None,
           steps: list | None = None) -> ir.Value | None:
    """Where ``value``'s index values come from: up through :func:`_index_source` and out of
    bodies, to a graph input (or whatever stops the walk: a Concat, a constant, arithmetic).
    ``steps`` gets each step taken, from the scatter's side: (node, its input, its output), with
    node None for a body input bound outside."""
    while value is not None:
        producer = value.producer()
        source = (
            _bound_outside(value, outer)
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

    The ops of :data:`_CARRIERS`: value-preserving ones, PyTorch's normalization ``Where(Less(x, 0),
    Add(x, n), x)``, a Gather by constant positions. With ``width`` > 1 (ScatterND tuples of that
    many components along the last axis), only where the input's last axis is that same axis: same
    size, not moved by a Transpose (``shape_of`` gives a value's static shape or None)."""
    carrier = _carrier(node)
    source = carrier.source(node) if carrier is not None else None
    if source is None or width == 1:
        return source
    shape = shape_of(source)
    if shape and shape[-1] == width and carrier.keeps_last(node, shape):
        return source
    return None


def _selected_by_constant(node: ir.Node) -> np.ndarray | None:
    """The positions of a ``Gather`` by constant indices (``edge_index[1]``, as exporters pick the
    source and destination rows of a GNN's edge list): its output holds some of its data's values,
    so it carries their bounds, and their uniqueness along the other axes. None for anything
    else."""
    if node.op_type != "Gather" or len(node.inputs) != 2 or node.inputs[1] is None:
        return None
    tensor = ir.convenience.get_const_tensor(node.inputs[1])
    return None if tensor is None else tensor.numpy()


def _is_zero(value: ir.Value | None) -> bool:
    tensor = ir.convenience.get_const_tensor(value) if value is not None else None
    return tensor is not None and tensor.size == 1 and tensor.numpy().item() == 0


def _named(node: ir.Node) -> str:
    return f"{node.op_type} {node.name!r}" if node.name else f"a {node.op_type}"


def _constant_ints(value: ir.Value | None, shape_of) -> np.ndarray | None:
    """The integers ``value`` holds before run time, flattened: a constant, or static dims read by
    ``Shape`` (then Gather/Cast/Squeeze/Unsqueeze/Reshape), as exporters compute a dim size."""
    if value is None:
        return None
    tensor = ir.convenience.get_const_tensor(value)
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
    carrier = _carrier(node)
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


def _normalization_shifts(
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
                f"the normalization Where(i < 0, i + c, i) ({_named(node)}) adds a c that is not "
                "one number known before run time"
            )
        return (int(c[0]),) * width, None
    return None, None


_NO_AXIS = -1  # the scatter axis is one of size 1 the traced input lacks (an Unsqueeze made it)


def _axes(node: ir.Node) -> list[int] | None:
    """Unsqueeze/Squeeze axes: the input (opset >= 13) or the attribute; None if not constant."""
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        tensor = ir.convenience.get_const_tensor(node.inputs[1])
        return None if tensor is None else [int(a) for a in tensor.numpy().reshape(-1)]
    axes = attr(node, "axes")
    return None if axes is None else list(axes)


def _map_axis(steps: list, axis: int | None, rank_of) -> int | None:
    """The axis of the input reached by ``steps`` (from :func:`_trace`) that becomes ``axis`` of
    the first step's output: :data:`_NO_AXIS` if that is an axis of size 1 the input lacks, None
    when not known (Reshape, Flatten, an Expand along it, unknown ranks)."""
    for node, source, value in steps:
        if axis is None or axis == _NO_AXIS:
            return axis
        out_shape, in_shape = rank_of(value), rank_of(source)
        if out_shape is None or in_shape is None:
            return None
        # (node None: a body input bound outside, whose value it is)
        carrier = _CARRIERS["Identity"] if node is None else _carrier(node)
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
    return _NO_AXIS if axis in axes else axis - sum(a < axis for a in axes)


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
    """By constant positions (:func:`_selected_by_constant`): theirs replace the gathered axis (one
    position: an axis of size 1, one value per column)."""
    positions = _selected_by_constant(node)
    gathered, picked = attr(node, "axis", 0) % len(in_shape), positions.ndim
    if gathered <= axis < gathered + picked:
        return _NO_AXIS if positions.size == 1 else None
    return axis if axis < gathered else axis - picked + 1


def _expanded_axis(node, axis: int, in_shape: tuple, out_shape: tuple) -> int | None:
    k = axis - (len(out_shape) - len(in_shape))
    if k < 0 or in_shape[k] == 1:  # a new or size-1 axis: broadcast along it unless it stays 1
        return (_NO_AXIS if k < 0 else k) if out_shape[axis] == 1 else None
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
    return node.inputs[0] if _selected_by_constant(node) is not None else None


def _gathered_row(node: ir.Node) -> int | None:
    """The row of a Gather by one constant position on axis 0 (``edge_index[1]``, maybe negative):
    its output holds that row's values only."""
    positions = _selected_by_constant(node)
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
_CARRIERS = {
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


def _carrier(node: ir.Node) -> _Carrier | None:
    if not is_default_domain(node) or not node.inputs:
        return None
    return _CARRIERS.get(node.op_type)


@dataclasses.dataclass
class _Leaf:
    value: ir.Value  # where tracing stopped: a graph input, or not (then no contract)
    steps: list  # from the scatter's indices to value, Concats included
    axis: int | None  # the scatter axis in value's frame (_NO_AXIS, or None when not known)
    window: tuple[int, int]  # the slots value's indices may take
    row: int | None = None  # the row of value's axis 0 the indices are (then axis is in its frame)


def _selected_row(steps: list, rank_of) -> tuple[int, int] | None:
    """(row, position in ``steps``) where the traced input's values reach the scatter through one
    row of its axis 0 (a carrier's ``row``), the steps between them keeping values in place (Cast,
    Identity, a body's binding); None otherwise, or for a row out of range."""
    for position in range(len(steps) - 1, -1, -1):
        node, source, _value = steps[position]
        carrier = _CARRIERS["Identity"] if node is None else _carrier(node)
        if carrier is None:
            return None
        row = carrier.row(node) if node is not None else None
        if row is not None:
            shape = rank_of(source)
            if not shape or not isinstance(shape[0], int) or not -shape[0] <= row < shape[0]:
                return None
            return row % shape[0], position
        if not carrier.same_shape:
            return None
    return None


def _element_leaves(
    value: ir.Value,
    axis: int | None,
    window: tuple[int, int],
    unique: bool,
    graph_inputs: set[int],
    outer: dict[int, list],
    rank_of,
    problems: list[str],
    before: list | None = None,
) -> list[_Leaf]:
    """Where ScatterElements indices ``value`` come from, split at each Concat, with the slots each
    part may take: all of ``window`` for a Concat along another axis than the scatter ``axis``, a
    share of it (in order, sized by the part's length, so the parts' slots are disjoint) for one
    along it when ``unique``. What keeps the targets from being unique goes to ``problems``."""
    steps: list = []
    origin = _trace(value, outer, steps=steps)
    if origin is None:
        return []
    here = _map_axis(steps, axis, rank_of)
    path = list(before or []) + steps
    concat = origin.producer()
    if id(origin) in graph_inputs:
        selected = _selected_row(steps, rank_of)
        if selected is None:
            return [_Leaf(origin, path, here, window)]
        row, position = selected
        # The scatter axis in the row's frame: mapped as far as the Gather's output, which is the
        # row with the positions' axes (of size 1) in front.
        here = _map_axis(steps[:position], axis, rank_of)
        picked = _selected_by_constant(steps[position][0]).ndim
        if here is not None and here != _NO_AXIS:
            here = _NO_AXIS if here < picked else here - picked
        return [_Leaf(origin, path, here, window, row)]
    if concat is None or concat.op_type != "Concat" or not is_default_domain(concat):
        return [_Leaf(origin, path, here, window)]
    parts = [part for part in concat.inputs if part is not None]
    windows = [window] * len(parts)
    cat_axis = None
    if unique and here is not None and here != _NO_AXIS:
        shape = rank_of(origin)
        cat_axis = (
            attr(concat, "axis") % len(shape)
            if shape and attr(concat, "axis") is not None
            else None
        )
    split = cat_axis is not None and here == cat_axis
    if unique and (here is None or (here != _NO_AXIS and cat_axis is None)):
        problems.append(f"the scatter axis cannot be followed to {_named(concat)}")
    elif split:
        lengths = [(rank_of(part) or (None,) * (cat_axis + 1))[cat_axis] for part in parts]
        lo, hi = window
        if None in lengths:
            problems.append(f"{_named(concat)} along the scatter axis has parts of unknown length")
            split = False
        elif sum(lengths) > hi - lo:
            problems.append(
                f"{_named(concat)} puts {sum(lengths)} indices along the scatter axis into "
                f"{hi - lo} slots"
            )
            split = False
        else:
            slack, windows = hi - lo - sum(lengths), []
            for i, length in enumerate(lengths):
                size = length + slack // len(parts) + (i < slack % len(parts))
                windows.append((lo, lo + size))
                lo += size
    leaves_per_part = [
        _element_leaves(
            part,
            here,
            w,
            unique,
            graph_inputs,
            outer,
            rank_of,
            problems,
            path + [(concat, part, origin)],
        )
        for part, w in zip(parts, windows)
    ]
    leaves = [leaf for part_leaves in leaves_per_part for leaf in part_leaves]
    if split:
        if any(id(leaf.value) not in graph_inputs for leaf in leaves):
            problems.append(
                f"{_named(concat)} along the scatter axis has a part that is not a graph input"
            )
        per_part = [{id(leaf.value) for leaf in part_leaves} for part_leaves in leaves_per_part]
        if sum(map(len, per_part)) != len(set().union(*per_part)):
            problems.append(f"{_named(concat)} along the scatter axis has an input in two parts")
            for leaf in leaves:  # its slot shares would not meet: back to the whole window
                leaf.window = window
    return leaves


def _nd_sources(
    value: ir.Value,
    first: int,
    width: int,
    graph_inputs: set[int],
    outer: dict[int, list],
    shape_of,
    before: list | None = None,
) -> list[tuple[ir.Value, int, int, list]]:
    """(graph input, first component, number of components, steps) for every input whose values
    become components ``first .. first + width - 1`` of ScatterND index tuples ``value[...,
    :width]``: traced like any index, and split at a Concat along the last axis, whose inputs cover
    successive components. The steps (see :func:`_trace`) go from the scatter to the input."""
    steps = list(before or [])
    origin = _trace(value, outer, width, shape_of, steps)
    if origin is None:
        return []
    if id(origin) in graph_inputs:
        return [(origin, first, width, steps)]
    concat = origin.producer()
    shape = shape_of(origin)
    if concat is None or concat.op_type != "Concat" or not is_default_domain(concat) or not shape:
        return []
    if attr(concat, "axis") not in (-1, len(shape) - 1):
        return []
    found = []
    for part in concat.inputs:
        part_shape = shape_of(part) if part is not None else None
        if not part_shape or part_shape[-1] is None:
            break  # the components of the parts after it are unknown
        found += _nd_sources(
            part,
            first,
            part_shape[-1],
            graph_inputs,
            outer,
            shape_of,
            steps + [(concat, part, origin)],
        )
        first += part_shape[-1]
    return found


def _outer_values(model: ir.Model) -> dict[int, list[ir.Value | None]]:
    """For Loop/Scan bodies and functions: id(body) -> the values its inputs are bound to outside.

    Loop body inputs are (iteration, condition, carried...) bound to the Loop's (M, cond,
    carried...); Scan's state inputs are bound to its inputs; a function's inputs to its first
    call's inputs (its only one when contracts are traced: :func:`_planning_copy` inlines a function
    called twice)."""
    bound: dict[int, list[ir.Value | None]] = {}
    for node, _scope in iter_nodes(model):
        body = node.attributes.get("body")
        if isinstance(body, ir.Attr) and body.type == ir.AttributeType.GRAPH:
            if node.op_type == "Loop":
                bound[id(body.value)] = [None, None] + list(node.inputs[2:])
            elif node.op_type == "Scan":
                bound[id(body.value)] = list(node.inputs)
    for body, (call, _function) in _first_calls(model).items():
        bound[body] = list(call.inputs)
    return bound


def _first_calls(model: ir.Model) -> dict[int, tuple[ir.Node, ir.Function]]:
    """id(function body) -> (its first call, the function): validation binds a function to it."""
    calls = function_calls(model)
    return {
        id(function.graph): (calls[key][0], function)
        for key, function in model.functions.items()
        if key in calls
    }


def _attr_at_call(node: ir.Node, name: str, default, calls: dict[int, tuple[ir.Node, ir.Function]]):
    """``attr(node, name, default)``, with an attribute that refers to the enclosing function's
    (``axis = @ax``) read from the first call (else the function's default); None if unknown."""
    a = node.attributes.get(name)
    if a is None or not is_reference(a):
        return attr(node, name, default)
    call, function = calls.get(id(node.graph), (None, None))
    for source in (call, function):
        found = None if source is None else source.attributes.get(a.ref_attr_name)
        if found is not None and not is_reference(found) and found.value is not None:
            return found.value
    return None


def _bound_outside(value: ir.Value, outer: dict[int, list]) -> ir.Value | None:
    """The outer value a body input is bound to, or None."""
    body = value.graph
    if value.producer() is not None or body is None or id(body) not in outer:
        return None
    inputs = list(body.inputs)
    position = next((i for i, v in enumerate(inputs) if v is value), -1)
    bindings = outer[id(body)]
    return bindings[position] if 0 <= position < len(bindings) else None


def _shape_of(
    value: ir.Value, shapes, outer: dict[int, list], partial: bool = False
) -> tuple | None:
    """``value``'s static shape: declared, else inferred (``shapes()``, computed on first need).
    With ``partial``, a shape of known rank with unknown dims (None) rather than no shape."""
    while value is not None:
        declared = (
            None
            if value.shape is None
            else tuple(d if isinstance(d, int) else None for d in value.shape)
        )
        if declared is not None and None not in declared:
            return declared
        inferred = shapes().get(value.name)
        if inferred is not None and None not in inferred:
            return inferred
        if partial and (inferred or declared):
            return inferred or declared
        producer = value.producer()
        same_shape = producer is not None and (
            computes_a_scatter(producer) or getattr(_carrier(producer), "same_shape", False))
        if same_shape and producer.inputs:
            # A scatter's output has its data's shape (a Cast's, its input's): what shape inference
            # cannot say inside a function or a Loop body (a chain of scatters there) that input
            # may.
            value = producer.inputs[0]
            continue
        if producer is not None and producer.op_type == "Constant" and is_default_domain(producer):
            tensor = producer.attributes.get(
                "value"
            )  # (in a function, inference does not reach it)
            if (
                isinstance(tensor, ir.Attr)
                and tensor.type == ir.AttributeType.TENSOR
                and tensor.value is not None
            ):
                return tuple(tensor.value.shape.numpy())
        value = _bound_outside(value, outer)
    return None


def _add_contract(contracts: dict, name, new: IndexContract, row: int | None = None) -> None:
    """One input feeding several scatters must satisfy all: the tightest bounds and slots, unique if
    any wants it, and negative values only where every scatter maps them to the same slot (the same
    shift: with shifts 7 and 4, -4 would be slot 3 of the one and slot 0 of the other). With
    ``row``, ``new`` binds that row of the input's axis 0 only (:attr:`IndexContract.rows`)."""
    if row is not None:
        holder = contracts.setdefault(name, IndexContract("rows", (), False))
        _add_contract(holder.rows, row, new)
        return
    old = contracts.get(name)
    if old is not None and old.kind == "rows":
        contracts[name] = dataclasses.replace(new, rows=old.rows)
        return
    if old is None or old.kind != new.kind or len(old.bounds) != len(new.bounds):
        kept = new if old is None or new.kind == "nd" else old
        contracts[name] = dataclasses.replace(kept, rows=old.rows if old is not None else {})
        return
    bounds = tuple(min(a, b) for a, b in zip(old.bounds, new.bounds))
    shifts = tuple(a if a == b else 0 for a, b in zip(old.negative_shifts, new.negative_shifts))
    window = None
    if old.window is not None or new.window is not None:
        (old_lo, old_hi), (new_lo, new_hi) = (c.window or (0, c.bounds[0]) for c in (old, new))
        window = (max(old_lo, new_lo), min(old_hi, new_hi))
    contracts[name] = IndexContract(
        old.kind, bounds, old.unique or new.unique, old.axis, shifts, window, old.rows
    )


def _row_contract(contract: IndexContract, row: int | None) -> IndexContract:
    """What the values of ``row`` of an input's axis 0 (all of it: None) must satisfy, in that row's
    frame: the row's contract, and the whole input's in range (its uniqueness too where it lies
    within rows); the whole input's where the row has none or its uniqueness spans rows."""
    if row is None or row not in contract.rows:
        return contract
    own = contract.rows[row]
    if contract.kind != "elements":
        return own
    if contract.unique and contract.axis == 0:
        return contract  # unique across rows: generated as a whole
    merged = {0: own}
    _add_contract(merged, 0, dataclasses.replace(contract, axis=max(contract.axis - 1, 0), rows={}))
    return merged[0]


def _contracts(model: ir.Model,
               input_shapes: dict[str, tuple]) -> tuple[dict, list[str], list[np.dtype], list[str]]:
    """The index contract of each graph input, the float add/mul scatters (named), and notes."""
    graph_inputs = {
        id(v) for v in model.graph.inputs if v.name in input_shapes
    }  # not those with an initializer
    shapes = functools.cache(lambda: _infer_shapes(model, input_shapes))
    outer = _outer_values(model)
    calls = _first_calls(model)

    def shape_of(value: ir.Value) -> tuple | None:
        return _shape_of(value, shapes, outer)

    def rank_and_last_dim(
        value: ir.Value,
    ) -> tuple | None:  # enough to place ScatterND tuple components
        return _shape_of(value, shapes, outer, partial=True)

    contracts: dict[str, IndexContract] = {}
    float_sums, float_sum_types, notes = [], [], []
    for node, _scope in iter_nodes(model):
        if node.op_type in _GATHER_OPS and is_default_domain(node):
            _gather_contract(
                node, graph_inputs, outer, contracts, shape_of, rank_and_last_dim, calls
            )
            continue
        # (our custom-domain scatters too: lowering a lowered model)
        if not computes_a_scatter(node):
            continue
        reduction = _attr_at_call(node, "reduction", "none", calls)
        data = node.inputs[0]
        # Unknown dtype (inside a function): assume float; integer outputs are compared exactly
        # anyway.
        if reduction in ("add", "mul", None) and (
            data is None or data.dtype is None or data.dtype.is_floating_point()
        ):
            float_sums.append(_named(node))
            if (sum_type := _float_type(data)) is not None:
                float_sum_types.append(sum_type)
        if node.op_type == "TensorScatter":
            _tensor_scatter_contract(node, graph_inputs, outer, contracts, shape_of, calls)
            continue
        unique = reduction in ("none", None)  # (unique indices respect every reduction's contract)
        if node.op_type == "ScatterND":
            indices_shape = (
                rank_and_last_dim(node.inputs[1]) if node.inputs[1] is not None else None
            )
            k = indices_shape[-1] if indices_shape else None
            sources = (
                []
                if k is None
                else _nd_sources(node.inputs[1], 0, k, graph_inputs, outer, rank_and_last_dim)
            )
            data_shape = shape_of(data) if sources and data is not None else None
            if data_shape is None:
                continue
            for source, first, width, steps in sources:
                shifts, reason = _normalization_shifts(steps, width, shape_of)
                if reason:
                    notes.append(f"{source.name}: {reason}: only non-negative indices generated")
                _add_contract(
                    contracts,
                    source.name,
                    IndexContract(
                        "nd", tuple(data_shape[first : first + width]), unique, shifts=shifts or ()
                    ),
                )
            # Unique tuples: one input unique and one-to-one with them, or all unique (broadcast
            # against each other).
            tuples = int(np.prod(indices_shape[:-1])) if None not in indices_shape else -1
            fits = [
                (
                    _fits(input_shapes[v.name], contracts[v.name]),
                    int(np.prod(input_shapes[v.name])) // max(w, 1) == tuples,
                )
                for v, _, w, _ in sources
            ]
            if unique and not (all(f for f, _ in fits) or any(f and whole for f, whole in fits)):
                names = ", ".join(sorted({v.name for v, _, _, _ in sources}))
                notes.append(
                    f"ScatterND {node.name!r}: the data has too few slots for unique indices from "
                    f"{names}: index tuples may repeat, and reduction none then depends on write "
                    "order"
                )
            continue
        # A first pass without axes (no shape inference): on only if some graph input feeds the
        # indices.
        reached = [] if node.inputs[1] is None else _element_leaves(
            node.inputs[1], None, (0, 0), False, graph_inputs, outer, rank_and_last_dim, [])
        if data is None or not any(id(leaf.value) in graph_inputs for leaf in reached):
            continue
        data_shape = shape_of(data)
        axis = _attr_at_call(node, "axis", 0, calls)
        if not data_shape or axis is None:
            continue
        axis %= len(data_shape)
        bound = data_shape[axis]
        problems: list[str] = []
        leaves = _element_leaves(
            node.inputs[1],
            axis,
            (0, bound),
            unique,
            graph_inputs,
            outer,
            rank_and_last_dim,
            problems,
        )
        names = sorted({leaf.value.name for leaf in leaves if id(leaf.value) in graph_inputs})
        for leaf in leaves:
            if id(leaf.value) not in graph_inputs:
                continue
            name = leaf.value.name
            shifts, reason = _normalization_shifts(leaf.steps, 1, shape_of)
            if reason:
                notes.append(f"{name}: {reason}: only non-negative indices generated")
            # The values traced: the input, or one row of it (then in that row's frame).
            shape = input_shapes[name] if leaf.row is None else input_shapes[name][1:]
            label = name if leaf.row is None else f"{name}[{leaf.row}]"
            if leaf.axis is None:
                # Not followed (a Reshape): the input's first axis is the scatter axis when ranks
                # differ (GNN: dst[E] -> unsqueeze -> expand), else the same axis.
                src_axis, leaf_unique = (
                    (axis if len(shape) == len(data_shape) else 0),
                    unique,
                )
            else:
                # An axis of size 1 the input lacks holds one of its values per column: nothing to
                # keep unique.
                src_axis, leaf_unique = (0, False) if leaf.axis == _NO_AXIS else (leaf.axis, unique)
            window = None if leaf.window == (0, bound) else leaf.window
            _add_contract(
                contracts,
                name,
                IndexContract("elements", (bound,), leaf_unique, src_axis, shifts or (), window),
                leaf.row,
            )
            contract = _row_contract(contracts[name], leaf.row)
            if contract.kind == "elements" and contract.unique and not _fits(shape, contract):
                lo, hi = contract.slots
                along = shape[contract.axis] if shape else 1
                problems.append(
                    f"{label} has {along} indices along the scatter axis for {max(hi - lo, 0)} "
                    "slots"
                )
        if unique and problems and names:  # (constant indices are the model's own business)
            notes.append(
                f"{node.op_type} {node.name!r}: {'; '.join(problems)}: targets of the indices from "
                f"{', '.join(names)} may repeat, and reduction none then depends on write order"
            )
    return contracts, float_sums, float_sum_types, notes


def _gather_contract(node, graph_inputs, outer, contracts, shape_of, rank_of, calls) -> None:
    """A graph input feeding the indices of a Gather/GatherElements, or the 1-tuples of a GatherND
    (``x[src]`` of a GNN, whose edge list also feeds the scatter), gets values in range of the
    gathered axis: else the original model itself cannot run on the generated inputs. No
    uniqueness: gathering twice is fine."""
    data, indices = node.inputs[0], node.inputs[1] if len(node.inputs) > 1 else None
    data_shape = shape_of(data) if data is not None and indices is not None else None
    if node.op_type == "GatherND":
        # Rows picked by 1-tuples (dynamo's x[src]: GatherND(x, Unsqueeze(src, -1))): positions
        # along axis 0. Longer tuples and batch_dims are left to the model's own inputs.
        indices_shape = shape_of(indices) if indices is not None else None
        if (_attr_at_call(node, "batch_dims", 0, calls) != 0 or not indices_shape
                or indices_shape[-1] != 1):
            return
        axis = 0
    else:
        axis = _attr_at_call(node, "axis", 0, calls)
    if not data_shape or axis is None or not isinstance(data_shape[axis % len(data_shape)], int):
        return
    bound = data_shape[axis % len(data_shape)]
    for leaf in _element_leaves(indices, None, (0, bound), False, graph_inputs, outer, rank_of, []):
        if id(leaf.value) in graph_inputs:
            shifts, _reason = _normalization_shifts(leaf.steps, 1, shape_of)
            _add_contract(
                contracts,
                leaf.value.name,
                IndexContract("elements", (bound,), False, 0, shifts or ()),
                leaf.row,
            )


def _tensor_scatter_contract(node, graph_inputs, outer, contracts, shape_of, calls) -> None:
    """write_indices: one start per batch entry in [0, max_len - seq_len] (linear; onnxruntime
    rejects a window past the end) or [0, 2 * max_len) (circular wraps); 0 when the lengths are
    not known."""
    if len(node.inputs) < 3 or node.inputs[2] is None:
        return
    source = _trace_to_input(node.inputs[2], graph_inputs, outer)
    if source is None:
        return
    cache, update = shape_of(node.inputs[0]), shape_of(node.inputs[1])
    axis, mode = (
        _attr_at_call(node, "axis", -2, calls),
        _attr_at_call(node, "mode", "linear", calls),
    )
    if cache is None or update is None or axis is None or mode is None:
        bound = 1  # lengths unknown: only start 0, which fits every window (sequence <= max length)
    else:
        axis %= len(cache)
        max_len, seq_len = cache[axis], update[axis]
        bound = 2 * max_len if mode == "circular" else max_len - seq_len + 1
    old = contracts.get(source.name)
    contracts[source.name] = IndexContract(
        "start", (min(bound, old.bounds[0]) if old and old.kind == "start" else bound,), False
    )


def _fits(shape: tuple[int, ...], c: IndexContract) -> bool:
    """Whether an index input of ``shape`` can have the unique values contract ``c`` asks for."""
    if c.kind == "nd":
        return int(np.prod(shape, dtype=np.int64)) // max(len(c.bounds), 1) <= int(
            np.prod(c.bounds, dtype=np.int64)
        )
    lo, hi = c.slots
    return lo < hi and (not shape or shape[c.axis] <= hi - lo)


def _negated(slots: np.ndarray, shifts, dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """About 30% of ``slots`` drawn as the negative value ``slot - shift`` that reaches them (those
    below their shift, and where ``dtype`` holds it: none for an unsigned input)."""
    shifts = np.asarray(shifts, np.int64)
    lowest = np.iinfo(dtype).min if np.issubdtype(dtype, np.integer) else -np.inf
    negate = (rng.random(np.shape(slots)) < 0.3) & (slots < shifts) & (slots - shifts >= lowest)
    return np.where(negate, slots - shifts, slots)


def _index_values(
    shape: tuple[int, ...], dtype: np.dtype, c: IndexContract, rng: np.random.Generator
) -> np.ndarray:
    if (c.rows and shape and c.kind in ("rows", "elements")
            and not (c.kind == "elements" and c.unique and c.axis == 0)):
        # Row by row: the rows without a contract hold anything (the whole input's, if it has one).
        whole = dataclasses.replace(c, rows={})
        values = (_random_values(shape, dtype, rng) if c.kind == "rows"
                  else _index_values(shape, dtype, whole, rng))
        for row in sorted(c.rows):
            values[row] = _index_values(shape[1:], dtype, _row_contract(c, row), rng)
        return values
    if c.rows and c.kind == "rows":  # (a scalar input has no rows)
        return _random_values(shape, dtype, rng)
    if c.kind == "start":
        return rng.integers(0, max(c.bounds[0], 1), size=shape).astype(dtype)
    if c.kind == "nd":
        count = int(np.prod(shape, dtype=np.int64)) // max(len(c.bounds), 1)
        total = int(np.prod(c.bounds, dtype=np.int64))
        flat = (rng.choice(total, size=count, replace=False) if c.unique and _fits(shape, c)
                else rng.integers(0, max(total, 1), size=count))
        coords = (
            np.stack(np.unravel_index(flat, c.bounds), axis=-1)
            if c.bounds
            else np.zeros((count, 0), np.int64)
        )
        return _negated(coords, c.negative_shifts, dtype, rng).reshape(shape).astype(dtype)
    lo, hi = c.slots
    if lo >= hi:  # no slot suits every scatter (the notes say the targets may repeat): any in range
        lo, hi = 0, c.bounds[0]
    if not shape:
        values = np.asarray(rng.integers(lo, hi))
    elif c.unique and _fits(shape, c):
        moved = (-1,) + shape[: c.axis] + shape[c.axis + 1 :]
        columns = int(np.prod(moved[1:], dtype=np.int64))
        if columns * (hi - lo) <= 2**20:
            keys = (
                rng.random((columns, hi - lo)).argsort(axis=1)[:, : shape[c.axis]].T
            )  # a permutation per column
        else:
            # A big axis: draw without replacement per column, O(indices) memory instead of
            # O(columns x slots).
            keys = np.stack(
                [rng.choice(hi - lo, size=shape[c.axis], replace=False) for _ in range(columns)],
                axis=1,
            )
        values = lo + np.moveaxis(
            keys.reshape((shape[c.axis],) + shape[: c.axis] + shape[c.axis + 1 :]), 0, c.axis
        )
    else:
        values = rng.integers(lo, hi, size=shape)
    return _negated(values, c.negative_shifts, dtype, rng).astype(dtype)


def _random_values(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    if dtype == np.dtype(object):
        return np.array(
            [f"s{v}" for v in rng.integers(0, 100, size=int(np.prod(shape)))], dtype=object
        ).reshape(shape)
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if np.issubdtype(dtype, np.unsignedinteger):
        return rng.integers(0, 20, size=shape).astype(dtype)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-20, 20, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(
        dtype
    )  # float16/32/64 and ml_dtypes (bfloat16, float8)


def _planning_copy(model: ir.Model) -> ir.Model:
    """What index contracts are traced on: a weightless copy of ``model`` with its local functions
    inlined when one is called more than once, and its Ifs with a constant condition replaced by the
    branch they take; ``model`` itself when neither applies. Graph input names are kept.

    A function called twice may scatter into data of other sizes, with indices from other inputs:
    inlined, each call is traced with its own. (Called once, it stays a function, bound to its call,
    so that notes name its nodes as the model does.) Without the If wrappers, contracts see through
    TorchScript's rank-0 If around scatter_reduce."""
    repeated = any(len(calls) > 1 for calls in function_calls(model).values())
    has_if = any(node.op_type == "If" and is_default_domain(node) for node, _ in iter_nodes(model))
    if not repeated and not has_if:
        return model
    from onnx_ir.passes.common import InlinePass

    from scatter_rewrite.passes._inline_if import inline_constant_ifs

    copy = weightless_copy(model)
    changed = False
    if repeated:
        try:
            InlinePass()(copy)
            changed = True
        # (cyclic functions, say) traced as they are: each bound to its first call
        except Exception:
            copy = weightless_copy(model)
    changed = inline_constant_ifs(copy) or changed
    return copy if changed else model


def plan_validation(model: ir.Model, seed: int = 0, inputs: dict[str, np.ndarray] | None = None,
                    dim_sizes: dict[str, int] | None = None, rtol: float | None = None,
                    atol: float | None = None) -> ValidationPlan:
    """Inputs for the original ``model`` (or the user's, checked), and how to compare outputs.
    Symbolic dimensions get ``dim_sizes[name]`` where given (the sizes a pass fixed them to),
    else sizes that fit the model's ops (:mod:`.dims`), grown while the original fails to run in
    onnxruntime on them (ValidationError saying what was tried if it never runs).
    ``rtol``/``atol`` (either, the other then 0): the user's bound for every float output,
    ``|rewritten - original| <= atol + rtol * |original|``."""
    tolerance = user_tolerance(rtol, atol)
    outputs = [v.name for v in model.graph.outputs]
    initializer_names = set(model.graph.initializers)
    graph_inputs = [v for v in model.graph.inputs if v.name not in initializer_names]
    planned = _planning_copy(model)
    if inputs is not None:
        given, user_notes = _checked_user_inputs(graph_inputs, inputs, dim_sizes)
        _, float_sums, sum_types, _ = _traced(planned, {k: v.shape for k, v in given.items()})
        return ValidationPlan(given, float_sums, user_notes, outputs, tolerance,
                              float_sum_types=sum_types)
    dims, refit = fit_dims(model, graph_inputs, dim_sizes)
    attempt = _Attempt.of(planned, graph_inputs, dims, dims.sizes, seed)
    if dims.free:  # (else nothing to grow: validation's own run says whether the original runs)
        attempt = _running_attempt(model, planned, graph_inputs, dims, refit, attempt, seed)
    contracts, float_sums, sum_types, notes = attempt.traced
    if any(attempt.sizes[k] != DEFAULT_SIZE for k in dims.free):
        notes.append(f"input sizes for the model's ops: {dims.describe(attempt.sizes)}")
    notes += dims.notes
    if contracts:
        notes.append(f"in-range scatter indices generated for {', '.join(sorted(contracts))}")
    return ValidationPlan(attempt.inputs, float_sums, notes, outputs, tolerance,
                          float_sum_types=sum_types)


@dataclasses.dataclass
class _Attempt:
    """Inputs generated for one choice of sizes, and the contracts traced for them; with ``ones``,
    the integer and bool inputs no contract covers are all 1 (a mask over every position, a count
    of one) instead of random."""

    sizes: dict[str, int]
    traced: tuple  # _contracts's (contracts, float sums, their types, notes)
    inputs: dict[str, np.ndarray]
    ones: list[str]  # the inputs set to 1

    @classmethod
    def of(cls, planned, graph_inputs, dims, sizes, seed, ones: bool = False) -> _Attempt:
        input_shapes = dims.shapes(sizes)
        traced = _traced(planned, input_shapes)
        inputs = _generated(graph_inputs, input_shapes, traced[0], seed)
        set_to_one = [v.name for v in graph_inputs if ones and v.name not in traced[0]
                      and _np_dtype(v.dtype).kind in "biu"]
        for name in set_to_one:
            inputs[name] = np.ones_like(inputs[name])
        return cls(sizes, traced, inputs, set_to_one)

    def said(self, dims) -> str:
        ones = f" with {', '.join(self.ones)} all 1" if self.ones else ""
        return f"{dims.describe(self.sizes)}{ones}"


def _running_attempt(model, planned, graph_inputs, dims, refit, first: _Attempt,
                     seed: int) -> _Attempt:
    """The first attempt, from ``first`` on, on which the original runs in onnxruntime: at each
    size, random values, then the integer inputs no contract covers set to 1 (random integers make
    no valid attention mask); the free dims grown after both fail (:func:`_grown`). When none runs:
    ``first``, if onnx.reference runs the original on it (validation then runs there);
    ValidationError saying what was tried if it does not."""
    session = OriginalSession(model)
    tried: list[tuple[str, str]] = []
    sizes = first.sizes
    while sizes is not None:
        for ones in (False, True):
            attempt = (first if not tried and not ones
                       else _Attempt.of(planned, graph_inputs, dims, sizes, seed, ones))
            if ones and not attempt.ones:
                break
            failure = session.failure(attempt.inputs)
            if failure is None:
                if tried:
                    attempt.traced[3].append(
                        f"the original runs with {attempt.said(dims)}, not with {_said(tried)}")
                return attempt
            tried.append((attempt.said(dims), failure))
        sizes = _grown(dims, refit, sizes, [t for t, _ in tried])
    reason = runs_in_reference(model, first.inputs)
    if reason is not None:
        raise ValidationError(
            "cannot find inputs the original model runs with: onnxruntime fails with "
            f"{_said(tried)}; onnx.reference with {first.said(dims)} ({reason}){_unmet(dims)}; "
            "give inputs with --inputs X.npz, or use --no-validate")
    first.traced[3].append(
        f"onnxruntime fails on the original with every size tried: {_said(tried)}")
    return first


_GROWTHS = 6  # times the free dims are doubled after the fitted sizes fail in onnxruntime
_LARGEST_INPUT = 1 << 24  # elements: no input is grown past this


def _unmet(dims) -> str:
    """What the ops need that no size met (:mod:`.dims`'s notes), for an error."""
    return f"; {'; '.join(dims.unmet)}" if dims.unmet else ""


def _said(tried: list[tuple[str, str]]) -> str:
    """The sizes tried, each run of them that failed alike said once with its reason."""
    runs: list[tuple[list[str], str]] = []
    for sizes, reason in tried:
        if runs and runs[-1][1] == reason:
            runs[-1][0].append(sizes)
        else:
            runs.append(([sizes], reason))
    return "; ".join(f"{' then '.join(sizes)} ({reason})" for sizes, reason in runs)


def _grown(dims, refit, sizes: dict[str, int], tried: list[str]) -> dict[str, int] | None:
    """The next sizes to try after ``sizes`` failed: the free dims doubled (then refitted to the
    ops' needs), skipping sizes already tried; None past :data:`_GROWTHS` tries or the input
    bound."""
    if len(tried) > _GROWTHS:
        return None
    start = sizes
    for _ in range(_GROWTHS):
        start = {k: n * 2 if k in dims.free else n for k, n in start.items()}
        grown = refit(start)
        if any(math.prod(s) > _LARGEST_INPUT for s in dims.shapes(grown).values()):
            return None
        if not any(t == dims.describe(grown) or t.startswith(f"{dims.describe(grown)} with ")
                   for t in tried):
            return grown
    return None


def _traced(planned: ir.Model, input_shapes: dict[str, tuple]):
    """:func:`_contracts` of the planning copy, its functions typed from their call sites for the
    while."""
    # ONNX shape inference does not enter functions: a function scatter's data shape (a Reshape
    # of constants there) comes from inferring the body with its call sites' input types.
    borrowed = annotate_functions_with(planned, computes_a_scatter)
    try:
        return _contracts(planned, input_shapes)
    finally:
        restore_types(borrowed)


def _generated(graph_inputs: list[ir.Value], input_shapes: dict[str, tuple],
               contracts: dict[str, IndexContract], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    generated = {}
    for v in graph_inputs:
        shape, dtype = input_shapes[v.name], _np_dtype(v.dtype)
        if v.name in contracts:
            generated[v.name] = _index_values(shape, dtype, contracts[v.name], rng)
        else:
            generated[v.name] = _random_values(shape, dtype, rng)
    return generated


def _checked_user_inputs(graph_inputs, inputs, dim_sizes) -> tuple[dict, list[str]]:
    """The user's inputs (--inputs) by model input, checked against what the model declares, and
    the plan's notes about them."""
    missing = [v.name for v in graph_inputs if v.name not in inputs]
    if missing:
        raise ValidationError(
            f"--inputs lacks the model input(s) {', '.join(missing)}; add them to the .npz"
        )
    given = {v.name: np.asarray(inputs[v.name]) for v in graph_inputs}
    for v in graph_inputs:
        _check_user_input(v, given[v.name], dict(dim_sizes or {}))
    extra = sorted(set(inputs) - set(given))
    return given, ["user inputs"] + (
        [f"--inputs entries that are not model inputs were ignored: {', '.join(extra)}"]
        if extra
        else []
    )


def user_tolerance(rtol: float | None, atol: float | None) -> tuple[float, float] | None:
    """(rtol, atol) from the user's ``--rtol``/``--atol`` (None: neither given); OptionError for a
    bound that is negative or not a number."""
    if rtol is None and atol is None:
        return None
    for flag, value in (("--rtol", rtol), ("--atol", atol)):
        if value is not None and not (np.isfinite(value) and value >= 0):
            raise OptionError(f"{flag} {value}: a tolerance is a finite number >= 0")
    return (float(rtol or 0.0), float(atol or 0.0))


def _check_user_input(value: ir.Value, array: np.ndarray, fixed: dict[str, int]) -> None:
    """A user's input (--inputs) has the dtype, rank and static sizes the model declares for it
    (and the sizes a pass fixes symbolic dimensions to); ValidationError saying which otherwise,
    before either model runs (onnxruntime would refuse it; the reference evaluator might not)."""
    def described(dtype, shape) -> str:
        return f"{dtype} [{', '.join(str(d) for d in shape)}]"

    expected_dtype = _np_dtype(value.dtype) if value.dtype is not None else None
    shape = value.shape
    wrong = expected_dtype is not None and array.dtype != expected_dtype
    if shape is not None:
        wrong |= array.ndim != len(shape)
        for have, want in zip(array.shape, shape):
            if isinstance(want, int):
                wrong |= have != want
            elif want is not None and want.value is not None and str(want) in fixed:
                wrong |= have != fixed[str(want)]
    if wrong:
        declared = (
            described(expected_dtype or "any dtype", shape)
            if shape is not None
            else str(expected_dtype)
        )
        fixes = f" (with {', '.join(f'{k}={n}' for k, n in fixed.items())})" if fixed else ""
        raise ValidationError(
            f"--inputs: '{value.name}' is {described(array.dtype, array.shape)}; the model "
            f"declares {declared}{fixes}; fix the .npz"
        )


def load_inputs(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The arrays of the .npz at ``path`` (``np.savez``), by name; ValidationError if it is not
    one."""
    import zipfile

    try:
        with open(path, "rb") as f:
            magic = f.read(4)
        if magic != b"PK\x03\x04" and magic != b"PK\x05\x06":
            raise ValueError("not a zip archive; write one with numpy.savez(path, name=array, ...)")
        with np.load(path, allow_pickle=False) as archive:
            return {k: archive[k] for k in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else first_line(e)
        raise ValidationError(
            f"--inputs {path}: cannot read it as a .npz archive ({reason})"
        ) from e

