"""Exact standard-op lowerings of reducing scatters and of TensorScatter (used by the lower pass).

Public entry points (the ``tensorrt`` pass reuses them):

* :func:`reduction_blocker` ``(node, opset) -> str | None``: why a ScatterElements/ScatterND
  with ``reduction`` add/mul/max/min cannot be lowered (None: it can).
* :func:`lower_reduction` ``(node, opset, names=None) -> (nodes, output)``: standard ONNX nodes,
  every one valid at ``opset`` (11..17), computing exactly what ``node`` computes; ``output``
  replaces ``node.outputs[0]`` (splice with ``ir.convenience.replace_nodes_and_values``). The
  nodes hold ``If``/``Loop`` subgraphs: build them after any opset conversion of the scope (the
  converter would otherwise re-convert them). It reads the inputs' dtype and shape from the IR
  values: run ONNX shape inference first (LowerPass does, see ``_borrow_inferred_types``).
* TensorScatter (opset 24) as one ``ScatterElements``: :mod:`.lowering.tensor_scatter`.
* Shared with the TensorRT-safe lowering (:mod:`.lowering.network_reduce`): :func:`update_rows` and
  :func:`row_counts` (step 1 below, in :mod:`.lowering.scatter_rows`), :class:`Kind` (how a
  reduction combines two values, exactly, and its identity element), :class:`Builder` (with its
  exact ``select``).

How a reduction is lowered (cost ~ sorting the updates + touching the data once; nothing of size
data x updates is ever built):

1. Every update gets a *key*: the linear index of the data row it lands in. A "row" is one
   element in general; it is a whole trailing slice when the indices are the same along every
   dimension after the axis (the GNN pattern ``Expand(Unsqueeze(dst))`` feeding ScatterElements
   on axis 0: only the E edge keys are sorted and rows of F features move together), and for
   ScatterND it is the slice ``data[i0..ik]``. Negative indices are normalized (``Where``/``Add``).
2. ``TopK(key * n + position, K=n, largest=0, sorted=1)`` sorts the keys with duplicates in
   update order, which max/min need for exact ties (-0.0/+0.0) and NaN placement; the sort keys
   are distinct, so the order does not rest on TopK's tie rule (ONNX's "the lower index first",
   which OpenVINO's TopK does not keep).
3. Segmented tree reduction in a ``Loop``: each round combines every element at an even rank of
   its key run with its successor (order kept: earlier op later) and drops the successor, so a
   run of length L needs ceil(log2 L) rounds and the total work is ~2n rows. Loop-carried values
   shrink from round to round (ONNX Loop allows it).
4. The one value per distinct key is combined with ``data`` gathered at those rows and written
   back with ``ScatterND`` (reduction none: the keys are unique, so it is well defined).

Exactness: integers (any width; 8/16-bit computed in int32 and cast back, which wraps like
onnxruntime's kernel), bool (add/max = Or, mul/min = And) and max/min are bit for bit. Float
add/mul sum in tree order instead of sequentially (float16/bfloat16 in float32, rounded once):
within :data:`scatter_rewrite.validate.FLOAT_TOLERANCE`.

max/min follow onnxruntime's CPU kernel, measured in onnxruntime 1.32: the accumulator is
replaced by the update unless the update is strictly less (max) / greater (min), i.e.
``acc = u < acc ? acc : u``. So a NaN update replaces the accumulator, a NaN accumulator is
replaced by the next update, and among equal values (-0.0/+0.0) the later one wins. That fold
is not associative when updates hold NaN; with a per-element "a NaN came after" flag it is
((v1,f1) . (v2,f2) = f2 or not v2<v1 ? v2 : v1, f1 or f2). The flagged reduction runs only when
the updates hold a NaN (an ``If`` on ``IsNaN(ReduceSum(updates))``, which may fire spuriously on
inf-inf but never misses a NaN); otherwise the plain one.

onnxruntime 1.32 CPU kernels lack ``Where`` for int16/uint16/uint64/bool and ``Add``/``Mul`` for
8/16-bit integers (checked by creating sessions, opset 11 and 13), hence the int32 compute type
and the arithmetic select for uint64 (``b + (a - b) * cond``, exact modulo 2^64).
"""

from __future__ import annotations

import re

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import (
    FLOAT_TYPES, NamedNodeBuilder as Builder, Names, attr, reference_reason,
)
from scatter_rewrite.limits import OPSET_FLOOR, REDUCTIONS, REDUCTIONS_SINCE
# Step 1, the rows and their keys (importable from here with the rest of the lowering).
from scatter_rewrite.passes.lowering.scatter_rows import (
    INT64, const_value, index_tuple_length, is_empty, row_counts, scatter_nd_rows, static_rank,
    update_rows,
)
from scatter_rewrite.said import param, said

__all__ = [
    "body_input", "Builder", "compute_dtype", "const_value", "first_opset_with",
    "index_tuple_length", "INT64", "is_empty", "Kind",
    "lower_reduction", "name_prefix", "Names", "reduction_blocker",
    "REDUCTIONS", "row_counts", "scatter_nd_rows", "SMALL_INTS", "static_rank", "SUPPORTED_DTYPES",
    "update_rows",
]

SMALL_INTS = {ir.DataType.INT8, ir.DataType.UINT8, ir.DataType.INT16, ir.DataType.UINT16}
_NATIVE = {ir.DataType.INT32, ir.DataType.UINT32, ir.DataType.INT64, ir.DataType.UINT64,
           ir.DataType.FLOAT, ir.DataType.DOUBLE}
SUPPORTED_DTYPES = SMALL_INTS | _NATIVE | FLOAT_TYPES | {ir.DataType.BOOL}


def first_opset_with(reduction: str) -> int:
    """The first opset whose ScatterElements/ScatterND has ``reduction``."""
    return REDUCTIONS_SINCE[reduction]


def compute_dtype(dtype: ir.DataType, reduction: str) -> ir.DataType:
    if dtype in SMALL_INTS:
        return ir.DataType.INT32
    if dtype == ir.DataType.BFLOAT16 or (
        dtype == ir.DataType.FLOAT16 and reduction in ("add", "mul")
    ):
        return ir.DataType.FLOAT
    return dtype


def name_prefix(node: ir.Node) -> str:
    base = re.sub(r"[^A-Za-z0-9_]", "_", node.name or node.op_type.lower())
    return base[:40] or "scatter"


# --------------------------------------------------------------------------- blockers


def reduction_blocker(node: ir.Node, opset: int) -> str | None:
    """Why ``node`` (ScatterElements/ScatterND with a reduction) cannot be lowered, or None."""
    if opset < OPSET_FLOOR:
        return (f"opset {opset} has no ScatterElements/ScatterND to write back with (need >= "
                f"{OPSET_FLOOR})")
    if len(node.inputs) != 3 or any(v is None for v in node.inputs):
        return "needs exactly 3 inputs (data, indices, updates)"
    if (why := reference_reason(node)) is not None:
        return why
    reduction = attr(node, "reduction", "none")
    if reduction not in REDUCTIONS:
        return f"reduction {reduction!r} is not one of add, mul, max, min"
    data, indices, updates = node.inputs
    dtype = data.dtype
    if dtype is None:
        return "the data type is unknown (run shape inference first)"
    if dtype not in SUPPORTED_DTYPES:
        return f"data type {dtype.name} has no exact standard-op reduction here"
    if dtype == ir.DataType.BFLOAT16 and opset < 13:
        return said("bfloat16 needs opset >= 13 (Cast/ScatterND-13); pass ", param("opset", 13))
    if node.op_type == "ScatterElements":
        if static_rank(data, indices, updates) is None:
            return "the rank of data/indices/updates is unknown"
    elif node.op_type == "ScatterND":
        k = index_tuple_length(indices)
        if k is None:
            return ("the last dimension of indices (index tuple length) is not static, nor built "
                    "by Concat/Unsqueeze of pieces of known length")
        if k < 1:
            return "an empty index tuple (indices.shape[-1] == 0) is not lowered"
        if indices.shape is None and (data.shape is None or len(data.shape) < k):
            return "the ranks of indices and data are unknown"
    else:
        return f"{node.op_type} is not a ScatterElements/ScatterND"
    return None


# --------------------------------------------------------------------------- lowering


def lower_reduction(
    node: ir.Node, opset: int, names: Names | None = None
) -> tuple[list[ir.Node], ir.Value]:
    """Standard nodes valid at ``opset`` computing ``node`` (see the module docstring).

    Call :func:`reduction_blocker` first; this assumes it returned None.
    """
    names = names or Names()
    names.prefix = name_prefix(node)
    b = Builder(names)
    data = node.inputs[0]
    if is_empty(data):
        return b.nodes, b.op("Identity", data, dtype=data.dtype)
    reduction = attr(node, "reduction", "none")
    rows, keys, vals = update_rows(b, node)
    out_rows = segment_reduce(b, rows, keys, vals, reduction, data.dtype)
    return b.nodes, b.reshape_like(out_rows, data, opset)


def _sorted(b: Builder, keys: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
    """The number of keys ``n``, ``Range(n)``, the permutation that sorts ``keys`` with equal keys
    in their order, and the sorted keys. The sort keys are distinct (key * n + position): equal
    keys never reach TopK's tie rule, which a runtime may break (OpenVINO's does); keys < R and
    n < 2^31 keep them within int64."""
    n = b.op("Size", keys, dtype=INT64)
    k = b.op("Reshape", n, b.const([1]), dtype=INT64)
    positions = b.op("Range", b.const(0), n, b.const(1), dtype=INT64)
    distinct = b.op("Add", b.op("Mul", keys, n, dtype=INT64), positions, dtype=INT64)
    _, perm = b.op("TopK", distinct, k, outputs=2, axis=0, largest=0, sorted=1)
    perm.dtype = INT64
    return n, positions, perm, b.op("Gather", keys, perm, axis=0, dtype=INT64)


def segment_reduce(b: Builder, rows: ir.Value, keys: ir.Value, vals: ir.Value, reduction: str,
                   dtype: ir.DataType) -> ir.Value:
    """``rows`` [R, w] with ``vals`` [n, w] folded into row ``keys[i]`` (int64 in [0, R)) in
    order."""
    ct = compute_dtype(dtype, reduction)
    n, positions, perm, sorted_keys = _sorted(b, keys)
    shifted = b.op(
        "Concat",
        b.const([-1]),
        b.op("Slice", sorted_keys, b.const([0]), b.const([-1])),
        axis=0,
        dtype=INT64,
    )
    starts_flag = b.op("Not", b.op("Equal", sorted_keys, shifted))
    starts = b.op("Reshape", b.op("NonZero", starts_flag), b.const([-1]), dtype=INT64)
    segments = b.op("Size", starts, dtype=INT64)
    seg_id = b.op(
        "Sub",
        b.op("CumSum", b.cast(starts_flag, INT64, ir.DataType.BOOL), b.const(0)),
        b.const(1),
        dtype=INT64,
    )
    rank_in_run = b.op("Sub", positions, b.op("Gather", starts, seg_id), dtype=INT64)
    values = b.cast(b.op("Gather", vals, perm, axis=0, dtype=dtype), ct, dtype)
    go = b.op("Greater", n, segments)
    kind = Kind(reduction, ct)

    def branch(bb: Builder, flagged: bool) -> ir.Value:
        carried = [sorted_keys, values, rank_in_run]
        if flagged:
            carried.append(bb.op("IsNaN", values))
        body = _round_body(bb.names, kind, segments, flagged)
        outs = bb.op("Loop", None, go, *carried, outputs=len(carried), body=body)
        final_keys, final_vals = outs[0], outs[1]
        final_keys.dtype, final_vals.dtype = INT64, ct
        current = bb.cast(bb.op("Gather", rows, final_keys, axis=0, dtype=dtype), ct, dtype)
        new, _ = kind.combine(bb, current, final_vals, late_flag=outs[3] if flagged else None)
        return final_keys, new

    def write_back(final_keys, new):
        where = b.op("Reshape", final_keys, b.const([-1, 1]), dtype=INT64)
        return b.op("ScatterND", rows, where, b.cast(new, dtype, ct), dtype=dtype)

    if not kind.nan_aware:
        return write_back(*branch(b, False))
    # The exact path is needed when the updates hold a NaN (the fold is not associative then) or
    # updates/data hold a -0.0 (Where's sign loss, see Builder.select). sum(1/x) over both is
    # -inf or NaN in those cases (1/-0.0 = -inf), and may also be so spuriously (overflow), which
    # only costs time.
    total = None
    for part in (values, rows):
        part_dtype = ct if part is values else dtype
        probe = (
            b.cast(part, ir.DataType.FLOAT, part_dtype)
            if part_dtype in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
            else part
        )
        term = b.op("ReduceSum", b.op("Reciprocal", probe), keepdims=0)
        total = term if total is None else b.op("Add", total, term)
    probe_dtype = np.float64 if ct == ir.DataType.DOUBLE else np.float32
    any_nan = b.op("Not", b.op("Greater", total, b.const(-np.inf, probe_dtype)))
    graphs = []
    for flagged in (True, False):
        sub = Builder(b.names)
        outs = branch(sub, flagged)
        graphs.append(
            ir.Graph(
                [], list(outs), nodes=sub.nodes, name=b.names.new("exact" if flagged else "plain")
            )
        )
    final_keys, new = b.op("If", any_nan, outputs=2, then_branch=graphs[0], else_branch=graphs[1])
    final_keys.dtype, new.dtype = INT64, ct
    return write_back(final_keys, new)


class Kind:
    """How one reduction combines values of the compute dtype (both lowerings use it).

    ``int_minmax``: integer max/min may use the ``Max``/``Min`` ops (integer types from opset 12;
    exact, since equal integers are identical)."""

    def __init__(self, reduction: str, dtype: ir.DataType, int_minmax: bool = False):
        self.reduction, self.dtype = reduction, dtype
        self.nan_aware = reduction in ("max", "min") and dtype in FLOAT_TYPES
        self.int_minmax = int_minmax and dtype not in FLOAT_TYPES and dtype != ir.DataType.BOOL

    def identity(self) -> np.ndarray:
        """The element e with ``combine(e, x) == x`` bit for bit for every x (a 0-d array of the
        compute dtype): -0.0 for float add (-0.0 + x keeps x's sign), +-inf or the integer bounds
        for max/min (nothing is strictly below -inf, so x wins, NaN included), False/True for
        bool."""
        dt = self.dtype
        np_dtype = np.float32 if dt == ir.DataType.BFLOAT16 else dt.numpy()
        if dt == ir.DataType.BOOL:
            return np.array(self.reduction in ("mul", "min"))
        if self.reduction == "add":
            return np.array(-0.0 if dt in FLOAT_TYPES else 0, np_dtype)
        if self.reduction == "mul":
            return np.array(1, np_dtype)
        low = self.reduction == "max"
        if dt in FLOAT_TYPES:
            return np.array(-np.inf if low else np.inf, np_dtype)
        info = np.iinfo(np_dtype)
        return np.array(info.min if low else info.max, np_dtype)

    def loses(self, b: Builder, late, early) -> ir.Value:
        """Whether ``late`` loses to ``early`` (strictly below it for max, above for min; false
        with a NaN), written with ``Less`` only: OpenVINO's CPU ``Greater`` is true where an
        operand is NaN (measured on 2026.4.1), its ``Less`` false as ONNX says."""
        return b.op("Less", late, early) if self.reduction == "max" else b.op("Less", early, late)

    def combine(self, b: Builder, early, late, has=None, early_flag=None, late_flag=None):
        """``early op late`` (order kept: the earlier operand first, as onnxruntime folds), and the
        combined "a NaN came after" flag (None unless both flags are given). ``has`` (bool,
        broadcasting; None: everywhere) says where a partner exists: elsewhere ``early`` is kept."""
        dt = self.dtype
        if dt == ir.DataType.BOOL:
            if self.reduction in ("add", "max"):
                return b.op("Or", early, late if has is None else b.op("And", late, has)), None
            return b.op(
                "And", early, late if has is None else b.op("Or", late, b.op("Not", has))
            ), None
        if self.reduction in ("add", "mul"):
            out = b.op("Add" if self.reduction == "add" else "Mul", early, late, dtype=dt)
            return (out if has is None else b.select(has, out, early, dt)), None
        if self.int_minmax and has is None:
            return b.op("Max" if self.reduction == "max" else "Min", early, late, dtype=dt), None
        loses = self.loses(b, late, early)
        if late_flag is not None:
            loses = b.op("And", loses, b.op("Not", late_flag))
        if has is not None:
            loses = b.op("Or", loses, b.op("Not", has))
        merged = b.select(loses, early, late, dt, exact=late_flag is not None)
        flag = None
        if early_flag is not None and late_flag is not None:
            flag = b.op("Or", early_flag, late_flag if has is None else b.op("And", late_flag, has))
        return merged, flag


def body_input(names: Names, hint: str, dtype: ir.DataType, shape=None) -> ir.Value:
    """A fresh input of a subgraph (a Loop body's iteration, condition or carried value)."""
    return ir.Value(
        name=names.new(hint),
        type=ir.TensorType(dtype),
        shape=ir.Shape(shape) if shape is not None else None,
    )


def _round_body(names: Names, kind: Kind, segments: ir.Value, flagged: bool) -> ir.Graph:
    """Loop body: pair every even-rank element with its successor in the same key run."""
    b = Builder(names)

    def inp(hint, dtype, shape=None):
        return body_input(names, hint, dtype, shape)

    it, cond = inp("iter", INT64, []), inp("cond", ir.DataType.BOOL, [])
    keys, vals, ranks = (
        inp("keys", INT64, [None]),
        inp("vals", kind.dtype),
        inp("ranks", INT64, [None]),
    )
    flags = inp("flags", ir.DataType.BOOL) if flagged else None
    m = b.op("Size", keys, dtype=INT64)
    even = b.op("Equal", b.op("Mod", ranks, b.const(2)), b.const(0))
    ie = b.op("Reshape", b.op("NonZero", even), b.const([-1]), dtype=INT64)
    nxt = b.op("Add", ie, b.const(1), dtype=INT64)
    inside = b.op("Less", nxt, m)
    partner = b.op("Where", inside, nxt, ie, dtype=INT64)
    new_keys = b.op("Gather", keys, ie, axis=0, dtype=INT64)
    has = b.op(
        "And", inside, b.op("Equal", b.op("Gather", keys, partner, axis=0, dtype=INT64), new_keys)
    )
    has_col = b.op("Reshape", has, b.const([-1, 1]), dtype=ir.DataType.BOOL)
    early = b.op("Gather", vals, ie, axis=0, dtype=kind.dtype)
    late = b.op("Gather", vals, partner, axis=0, dtype=kind.dtype)
    early_flag = late_flag = None
    if flagged:
        early_flag = b.op("Gather", flags, ie, axis=0, dtype=ir.DataType.BOOL)
        late_flag = b.op("Gather", flags, partner, axis=0, dtype=ir.DataType.BOOL)
    merged, merged_flag = kind.combine(b, early, late, has_col, early_flag, late_flag)
    new_ranks = b.op("Div", b.op("Gather", ranks, ie, axis=0, dtype=INT64), b.const(2), dtype=INT64)
    go_on = b.op("Greater", b.op("Size", new_keys, dtype=INT64), segments)
    outputs = [go_on, new_keys, merged, new_ranks] + ([merged_flag] if flagged else [])
    inputs = [it, cond, keys, vals, ranks] + ([flags] if flagged else [])
    return ir.Graph(inputs, outputs, nodes=b.nodes, name=names.new("round"))
