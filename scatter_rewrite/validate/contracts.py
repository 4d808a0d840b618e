"""The index contracts of a model: which graph inputs reach scatter (and gather) indices, and the
bounds and uniqueness their values must respect, traced on the original model (:func:`index_contracts`;
where index values come from: :mod:`.index_sources`; the paths they take: :mod:`.index_paths`).
Input generation (:mod:`.inputs`) draws values that respect them.

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
from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import (
    attr, computes_a_scatter, is_default_domain, is_reference, iter_nodes,
)
from scatter_rewrite.validate.index_paths import (
    NO_AXIS, first_calls, float_type, node_named, normalization_shifts, outer_values,
    trace_to_input,
)
from scatter_rewrite.validate.index_sources import (
    Leaf, element_leaves, inferred_shapes, nd_sources, static_shape,
)

__all__ = ["fits_contract", "index_contracts", "IndexContract", "row_contract"]


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


def row_contract(contract: IndexContract, row: int | None) -> IndexContract:
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


@dataclasses.dataclass
class _Tracing:
    """What tracing one model's index contracts shares: the graph inputs' sizes and the ids of
    those without an initializer, the values each body reads from outside, each function's first
    call, two shape readers, and what is found (the contracts, the notes)."""

    input_shapes: dict[str, tuple]
    graph_inputs: set[int]
    outer: dict[int, list]
    calls: dict[int, tuple[ir.Node, ir.Function]]
    shape_of: Callable[[ir.Value], tuple | None]
    rank_and_last_dim: Callable[[ir.Value], tuple | None]  # enough to place ScatterND components
    contracts: dict[str, IndexContract] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)


def _tracing(model: ir.Model, input_shapes: dict[str, tuple]) -> _Tracing:
    graph_inputs = {
        id(v) for v in model.graph.inputs if v.name in input_shapes
    }  # not those with an initializer
    shapes = functools.cache(lambda: inferred_shapes(model, input_shapes))
    outer = outer_values(model)
    return _Tracing(
        input_shapes, graph_inputs, outer, first_calls(model),
        shape_of=lambda value: static_shape(value, shapes, outer),
        rank_and_last_dim=lambda value: static_shape(value, shapes, outer, partial=True),
    )


def index_contracts(model: ir.Model,
               input_shapes: dict[str, tuple]) -> tuple[dict, list[str], list[np.dtype], list[str]]:
    """The index contract of each graph input, the float add/mul scatters (named), and notes."""
    t = _tracing(model, input_shapes)
    float_sums, float_sum_types = [], []
    for node, _scope in iter_nodes(model):
        if node.op_type in _GATHER_OPS and is_default_domain(node):
            _gather_contract(
                node, t.graph_inputs, t.outer, t.contracts, t.shape_of, t.rank_and_last_dim, t.calls
            )
            continue
        # (our custom-domain scatters too: lowering a lowered model)
        if not computes_a_scatter(node):
            continue
        reduction = _attr_at_call(node, "reduction", "none", t.calls)
        data = node.inputs[0]
        # Unknown dtype (inside a function): assume float; integer outputs are compared exactly
        # anyway.
        if reduction in ("add", "mul", None) and (
            data is None or data.dtype is None or data.dtype.is_floating_point()
        ):
            float_sums.append(node_named(node))
            if (sum_type := float_type(data)) is not None:
                float_sum_types.append(sum_type)
        if node.op_type == "TensorScatter":
            _tensor_scatter_contract(node, t.graph_inputs, t.outer, t.contracts, t.shape_of,
                                     t.calls)
            continue
        unique = reduction in ("none", None)  # (unique indices respect every reduction's contract)
        if node.op_type == "ScatterND":
            _scatter_nd_contracts(node, unique, t)
        else:
            _scatter_elements_contracts(node, unique, t)
    return t.contracts, float_sums, float_sum_types, t.notes


def _scatter_nd_contracts(node: ir.Node, unique: bool, t: _Tracing) -> None:
    """The contract of each graph input whose values become components of the ScatterND's index
    tuples: the bounds of the data dimensions they index; a note where the tuples may repeat."""
    data = node.inputs[0]
    indices_shape = (
        t.rank_and_last_dim(node.inputs[1]) if node.inputs[1] is not None else None
    )
    k = indices_shape[-1] if indices_shape else None
    sources = (
        []
        if k is None
        else nd_sources(node.inputs[1], 0, k, t.graph_inputs, t.outer, t.rank_and_last_dim)
    )
    data_shape = t.shape_of(data) if sources and data is not None else None
    if data_shape is None:
        return
    for source, first, width, steps in sources:
        shifts, reason = normalization_shifts(steps, width, t.shape_of)
        if reason:
            t.notes.append(f"{source.name}: {reason}: only non-negative indices generated")
        _add_contract(
            t.contracts,
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
            fits_contract(t.input_shapes[v.name], t.contracts[v.name]),
            int(np.prod(t.input_shapes[v.name])) // max(w, 1) == tuples,
        )
        for v, _, w, _ in sources
    ]
    if unique and not (all(f for f, _ in fits) or any(f and whole for f, whole in fits)):
        names = ", ".join(sorted({v.name for v, _, _, _ in sources}))
        t.notes.append(
            f"ScatterND {node.name!r}: the data has too few slots for unique indices from "
            f"{names}: index tuples may repeat, and reduction none then depends on write "
            "order"
        )


def _scatter_elements_contracts(node: ir.Node, unique: bool, t: _Tracing) -> None:
    """The contract of each graph input the ScatterElements' (or Scatter's) indices come from:
    in range of the scatter axis, within its share of the slots; a note where the targets may
    repeat."""
    data = node.inputs[0]
    # A first pass without axes (no shape inference): on only if some graph input feeds the
    # indices.
    reached = [] if node.inputs[1] is None else element_leaves(
        node.inputs[1], None, (0, 0), False, t.graph_inputs, t.outer, t.rank_and_last_dim, [])
    if data is None or not any(id(leaf.value) in t.graph_inputs for leaf in reached):
        return
    data_shape = t.shape_of(data)
    axis = _attr_at_call(node, "axis", 0, t.calls)
    if not data_shape or axis is None:
        return
    axis %= len(data_shape)
    bound = data_shape[axis]
    problems: list[str] = []
    leaves = element_leaves(
        node.inputs[1],
        axis,
        (0, bound),
        unique,
        t.graph_inputs,
        t.outer,
        t.rank_and_last_dim,
        problems,
    )
    names = sorted({leaf.value.name for leaf in leaves if id(leaf.value) in t.graph_inputs})
    for leaf in leaves:
        if id(leaf.value) in t.graph_inputs:
            _add_leaf_contract(leaf, axis, bound, len(data_shape), unique, t, problems)
    if unique and problems and names:  # (constant indices are the model's own business)
        t.notes.append(
            f"{node.op_type} {node.name!r}: {'; '.join(problems)}: targets of the indices from "
            f"{', '.join(names)} may repeat, and reduction none then depends on write order"
        )


def _add_leaf_contract(leaf: Leaf, axis: int, bound: int, data_rank: int, unique: bool,
                       t: _Tracing, problems: list[str]) -> None:
    """The contract of the graph input (or the row of it) ``leaf`` reaches, for a scatter ``axis``
    of ``bound`` slots; where its values cannot be unique, the reason goes to ``problems``."""
    name = leaf.value.name
    shifts, reason = normalization_shifts(leaf.steps, 1, t.shape_of)
    if reason:
        t.notes.append(f"{name}: {reason}: only non-negative indices generated")
    # The values traced: the input, or one row of it (then in that row's frame).
    shape = t.input_shapes[name] if leaf.row is None else t.input_shapes[name][1:]
    label = name if leaf.row is None else f"{name}[{leaf.row}]"
    if leaf.axis is None:
        # Not followed (a Reshape): the input's first axis is the scatter axis when ranks
        # differ (GNN: dst[E] -> unsqueeze -> expand), else the same axis.
        src_axis, leaf_unique = (
            (axis if len(shape) == data_rank else 0),
            unique,
        )
    else:
        # An axis of size 1 the input lacks holds one of its values per column: nothing to
        # keep unique.
        src_axis, leaf_unique = (0, False) if leaf.axis == NO_AXIS else (leaf.axis, unique)
    window = None if leaf.window == (0, bound) else leaf.window
    _add_contract(
        t.contracts,
        name,
        IndexContract("elements", (bound,), leaf_unique, src_axis, shifts or (), window),
        leaf.row,
    )
    contract = row_contract(t.contracts[name], leaf.row)
    if (contract.kind == "elements" and contract.unique
            and not fits_contract(shape, contract)):
        lo, hi = contract.slots
        along = shape[contract.axis] if shape else 1
        problems.append(
            f"{label} has {along} indices along the scatter axis for {max(hi - lo, 0)} "
            "slots"
        )


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
    for leaf in element_leaves(indices, None, (0, bound), False, graph_inputs, outer, rank_of, []):
        if id(leaf.value) in graph_inputs:
            shifts, _reason = normalization_shifts(leaf.steps, 1, shape_of)
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
    source = trace_to_input(node.inputs[2], graph_inputs, outer)
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


def fits_contract(shape: tuple[int, ...], c: IndexContract) -> bool:
    """Whether an index input of ``shape`` can have the unique values contract ``c`` asks for."""
    if c.kind == "nd":
        return int(np.prod(shape, dtype=np.int64)) // max(len(c.bounds), 1) <= int(
            np.prod(c.bounds, dtype=np.int64)
        )
    lo, hi = c.slots
    return lo < hi and (not shape or shape[c.axis] <= hi - lo)
