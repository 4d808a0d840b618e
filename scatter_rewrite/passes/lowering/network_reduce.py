"""A TensorRT-safe exact lowering of reducing scatters: a sorting network and a segmented scan,
each one fixed-shape ``Loop``; no TopK, NonZero or If.

Used by the ``tensorrt`` pass where TensorRT cannot run a ScatterElements/ScatterND reduction:
on TensorRT 8.6 always (its parser silently ignores ``reduction``, NVIDIA/TensorRT#3750), on
TensorRT 10 when the ScatterElements plugin cannot take the node (data other than
FP32/FP16/INT32/INT64). The standard lowering (:mod:`.segment_reduce`) cannot serve there: it
sorts all n keys with one ``TopK`` and reduces in a ``Loop`` whose carried values shrink.

Public entry points:

* :func:`network_blocker` ``(node, opset) -> str | None``: why the node cannot be lowered here
  (None: it can).
* :func:`lower_reduction_network` ``(node, opset, names=None) -> (nodes, output)``: nodes valid
  at ``opset`` (11..24) computing exactly what ``node`` computes; every shape in them is static
  where the node's input shapes are, except what depends on the data's (dynamic) shape, which
  comes from ``Shape`` ops.

What TensorRT offers, and why a network is still needed (sources read in onnx/onnx-tensorrt
branches 8.5-GA, 8.6-GA, 10.1-GA and NVIDIA/TensorRT release/8.6):

* TopK takes K at run time from 8.6 on (onnx-tensorrt 8.6-EA Changelog "Added support for TopK
  operators with dynamic K values"; its importer calls ``layer->setInput(1, *kPtr)``, where 8.4
  and 8.5 asserted "This version of TensorRT only supports input K as an initializer"), but K is
  at most 3840 (release/8.6 include/NvInfer.h, addTopK: "Currently only values of K up to 3840 are
  supported"; ITopKLayer::setInput: "Values larger than 3840 will result in a runtime error").
  8.6's importer also runs an INT32 TopK in FLOAT32 ("Rounding errors may occur for large integer
  values"), and TensorRT does not document TopK's order among ties. So TopK cannot sort n > 3840
  keys, nor int32 keys above 2^24 exactly, nor keep equal keys in update order: the network sorts.
* ``ILoop`` runs a Loop whose carried values keep their dimensions (NvInfer.h,
  IRecurrenceLayer::setInput: "The next value of the output tensor ... must have the same
  dimensions as input 0"; onnx-tensorrt 10.1 docs/operators.md, Loop: "The shape of Loop carried
  dependencies must be the same across all loop iterations"). The importer maps the trip count to
  a kCOUNT trip limit and each state input to an IRecurrenceLayer, and adds a kWHILE limit only
  when the ``cond`` input is given: every Loop here has a constant trip count and no ``cond`` (its
  body's condition output, a constant true, is then ignored).
* 8.6 takes Mod on INT32 (docs/operators.md) but no BitShift/BitwiseXor, and its CumSum is
  FP32/FP16 only and runs an ILoop over the whole axis (not used).

Construction, for n updates on data viewed as R rows of width w (cost: the sort is
O(n log^2 n) on int32 pairs, the scan O(n w log n); nothing of size data x updates):

1. Keys as in :mod:`.segment_reduce` (its code, :func:`~.segment_reduce.update_rows`): the
   linear index of the data row each update lands in (whole trailing rows for the GNN pattern and
   for ScatterND, single elements otherwise; negative indices normalized), cast to int32.
2. Sort the pairs (key, position) with a bitonic network over n padded to a power of two N (pad
   keys = R, a sentinel above every real key; positions are unique), in the variant whose
   comparators all point one way (:func:`network_steps`: for each block size 2k, each slot
   against its mirror in the block, then half-cleaners of half size k/2, ..., 1), run as ONE
   ``Loop`` of log2(N) (log2(N) + 1) / 2 iterations (:func:`_sorting_network`): iteration i
   reads its step's constants from small tables (``Gather(table, i)``), computes every slot's
   partner from t = Range(N) and t mod 2j, reads the partner's value (``GatherElements``) and
   keeps the smaller value in the lower slot; nothing in the body has a shape that depends on i.
   The comparison is lexicographic on (key, position), a total order, so the sort is stable:
   duplicates keep update order, which max/min need for exact ties (-0.0/+0.0) and NaN
   placement. Where every pair fits one int32 ``key * N + position`` (static data rows R with
   (R + 1) N <= 2^31: :func:`fits_one_sort_key`) the Loop carries that one key, else the keys
   and the positions. The update rows are then gathered once by the sorted positions.
3. Segmented inclusive scan (Hillis-Steele) over the sorted rows plus one identity row at the end
   (:meth:`~.segment_reduce.Kind.identity`), as ONE ``Loop`` of ceil(log2 n) iterations
   (:func:`_segmented_scan`) carrying the rows [n + 1, w] and, for float max/min, the "a NaN came
   after" flags: iteration i reads d = 2^i from a table, and row t becomes
   ``combine(V[src], V[t])`` with src = t - d where key[t - d] == key[t], else the identity row. ``combine`` is
   :class:`~.segment_reduce.Kind`'s (order kept: earlier op later; float16 and bfloat16 add/mul
   in float32, 8/16-bit integers in int32, bool as Or/And); float max/min always use the flags and
   the exact select (the standard lowering chooses at run time with an ``If``).
4. At each run end (key != next key) the run total is folded into the data row it lands on
   (data first, then the updates in order, as onnxruntime's kernel folds), and ONE ``ScatterND``
   (no reduction attribute) writes every position's row into the data padded with n extra rows
   (``Concat``): run ends to their key, every other position t to the dummy row R + t. All
   targets are unique (TensorRT's IScatterLayer leaves duplicate writes undefined). The padding
   is sliced off and the result reshaped to the data's shape. Bool data is written back as int32
   (TensorRT's scatter layer has no BOOL: 8.6 FP32/FP16/INT8/INT32, 10 also BF16/INT64). 8/16-bit
   integer data (computed in int32 anyway) is cast to int32 before step 1 and back at the very
   end, so only three Casts (data, updates, result) touch the small type (TensorRT 8.6's Flatten
   does not list INT8, and 10.x lists INT8 for Cast and the scatter layer only:
   :mod:`scatter_rewrite.targets.tensorrt.parser`).

Size: the node count no longer grows with n. The PyG max layer (N = E / 10 nodes, F = 64) as a
synthetic opset-18 ScatterElements: 92 / 92 / 88 top-level nodes at E = 2,000 / 20,000 /
200,000 (the unrolled network it replaces: 914 / 1,428 / 4,482; ``lower --opset 13``: 50); the
committed 24-edge exports (tests/data/torch/gnn_max_layer_*): 102 (TorchScript) and 110 (dynamo)
against 60 and 68 for ``lower --opset 13``. In onnxruntime (one thread, medians of 5 runs
alternating with the unrolled form's; two runs on a shared machine) it takes 1.05x the unrolled
network's time at E = 200,000 (2.0-2.1 s) and 1.1-1.2x at E = 20,000 (0.14-0.18 s).

Exactness: as :mod:`.segment_reduce` (integers, bool and max/min bit for bit; float add/mul in
scan order, within :data:`scatter_rewrite.validate.FLOAT_TOLERANCE`).

Limits (the blocker names them): n must be static (the network is built for it) and so must the
ScatterND index tuple length; keys, dummy rows and positions are int32, so R + N must fit in int32
(checked when R is static; with a dynamic data shape it is assumed: TensorRT 8.x tensors hold fewer
than 2^31 elements, and the padded data holds (R + n) w of them). What TensorRT itself does with
DOUBLE (cast to FP32 on 8.x and 10) or INT8 data is outside this lowering; which data types the
tensorrt flow lowers at all is :func:`scatter_rewrite.passes.tensorrt.scatter_data_blocker`'s."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import attr
from scatter_rewrite.passes.lowering import segment_reduce as seg

__all__ = [
    "fits_one_sort_key", "lower_reduction_network", "network_blocker", "network_steps",
    "NOT_STATIC", "padded_size",
]

INT32 = ir.DataType.INT32
BOOL = ir.DataType.BOOL
INT32_MAX = 2**31 - 1
NOT_STATIC = "the number of updates is not static"  # how network_blocker's reason starts for it


def padded_size(n: int) -> int:
    """The sorting network's width: n rounded up to a power of two."""
    return 1 << max(n - 1, 0).bit_length()


def network_blocker(node: ir.Node, opset: int) -> str | None:
    """Why :func:`lower_reduction_network` cannot lower ``node``, or None."""
    reason = seg.reduction_blocker(node, opset)
    if reason is not None:
        return reason
    n, rows, _ = seg.row_counts(node)
    if n is None:
        return f"{NOT_STATIC} (the sorting network is built for a fixed count)"
    if rows is not None and rows + padded_size(n) > INT32_MAX:
        return (
            f"{rows} data rows + {padded_size(n)} sort slots exceed int32 (keys and positions are "
            f"int32 for TensorRT)"
        )
    return None


def lower_reduction_network(
    node: ir.Node, opset: int, names: seg.Names | None = None
) -> tuple[list[ir.Node], ir.Value]:
    """Nodes computing ``node`` exactly (see the module docstring). Call :func:`network_blocker`
    first."""
    names = names or seg.Names()
    names.prefix = seg.name_prefix(node)
    b = seg.Builder(names)
    data = node.inputs[0]
    dtype = data.dtype
    reduction = attr(node, "reduction", "none")
    n, r_static, w_static = seg.row_counts(node)
    if n == 0 or seg.is_empty(data):  # nothing to scatter (no updates, or no element to write to)
        return b.nodes, b.op("Identity", data, dtype=dtype)
    given = dtype
    if dtype in seg.SMALL_INTS:  # computed in int32 anyway: only Casts touch the small type
        data, updates = (_cast_like(b, v, INT32) for v in (data, node.inputs[2]))
        dtype = INT32
    else:
        updates = node.inputs[2]
    ct = seg.compute_dtype(dtype, reduction)
    kind = seg.Kind(reduction, ct, int_minmax=opset >= 12)
    rows, keys64, vals = seg.update_rows(b, node, data, updates)
    keys = b.cast(keys64, INT32, seg.INT64)
    r32, r64, width = _row_count_and_width(b, rows, vals, r_static, w_static)
    combined = r_static is not None and fits_one_sort_key(r_static, n)
    sorted_keys, perm = _sort(b, keys, r32, n, combined)

    # 3. segmented scan over the sorted rows + one identity row (index n)
    identity = b.op(
        "Expand", b.const(kind.identity().reshape(1, 1), kind.identity().dtype), width, dtype=ct
    )
    values = b.cast(b.op("Gather", vals, perm, axis=0, dtype=dtype), ct, dtype)
    scan = b.op("Concat", values, identity, axis=0, dtype=ct)
    flags = b.op("IsNaN", scan, dtype=BOOL) if kind.nan_aware else None
    ext_keys = b.op(
        "Concat", sorted_keys, b.const([-1], np.int32), axis=0, dtype=INT32
    )  # identity row: key -1
    scan, flags = _segmented_scan(b, kind, ext_keys, scan, flags, n, w_static)

    # 4. fold each run total into its data row; one ScatterND with unique targets
    first_n = (b.const([0]), b.const([n]))
    totals = b.op("Slice", scan, *first_n, dtype=ct)
    total_flags = b.op("Slice", flags, *first_n, dtype=BOOL) if flags is not None else None
    current = b.cast(b.op("Gather", rows, sorted_keys, axis=0, dtype=dtype), ct, dtype)
    final, _ = kind.combine(b, current, totals, late_flag=total_flags)
    final = b.cast(final, dtype, ct)
    following = b.op("Concat", b.op("Slice", sorted_keys, b.const([1]), b.const([n]), dtype=INT32),
                     b.const([-1], np.int32), axis=0, dtype=INT32)
    is_end = b.cast(b.op("Not", b.op("Equal", sorted_keys, following)), INT32, BOOL)
    positions = b.op(
        "Range", b.const(0, np.int32), b.const(n, np.int32), b.const(1, np.int32), dtype=INT32
    )
    dummy = b.op("Add", positions, r32, dtype=INT32)  # position t's dummy row R + t
    targets = b.op(
        "Add",
        dummy,
        b.op("Mul", b.op("Sub", sorted_keys, dummy, dtype=INT32), is_end, dtype=INT32),
        dtype=INT32,
    )
    targets = b.op("Reshape", b.cast(targets, seg.INT64, INT32), b.const([n, 1]), dtype=seg.INT64)
    write = INT32 if dtype == BOOL else dtype
    base, final = b.cast(rows, write, dtype), b.cast(final, write, dtype)
    padded = b.op("Concat", base, final, axis=0, dtype=write)
    scattered = b.op("ScatterND", padded, targets, final, dtype=write)
    out_rows = b.cast(
        b.op("Slice", scattered, b.const([0]), r64, b.const([0]), dtype=write), dtype, write
    )
    return b.nodes, b.cast(b.reshape_like(out_rows, data, opset), given, dtype)


def _row_count_and_width(b: seg.Builder, rows: ir.Value, vals: ir.Value, r_static: int | None,
                         w_static: int | None) -> tuple[ir.Value, ir.Value, ir.Value]:
    """The number of data rows R as [R] in int32 and int64, and [1, row width]: constants where
    static."""
    if r_static is not None:
        r32, r64 = b.const([r_static], np.int32), b.const([r_static])
    else:
        r64 = b.op("Slice", b.shape(rows), b.const([0]), b.const([1]), dtype=seg.INT64)
        r32 = b.cast(r64, INT32, seg.INT64)
    if w_static is not None:
        return r32, r64, b.const([1, w_static])
    row_width = b.op("Slice", b.shape(vals), b.const([1]), b.const([2]), dtype=seg.INT64)
    return r32, r64, b.op("Concat", b.const([1]), row_width, axis=0, dtype=seg.INT64)


def _cast_like(b: seg.Builder, value: ir.Value, to: ir.DataType) -> ir.Value:
    """``value`` cast to ``to``, keeping its shape (which the row layout reads)."""
    out = b.cast(value, to, value.dtype)
    out.shape = ir.Shape(list(value.shape)) if value.shape is not None else None
    return out


def fits_one_sort_key(rows: int, n: int) -> bool:
    """Whether every (key, position) pair fits one int32 ``key * N + position`` (N the network's
    width, keys up to the sentinel ``rows``), which then sorts alone: ordering it is ordering the
    pairs lexicographically, as positions lie in [0, N)."""
    return (rows + 1) * padded_size(n) - 1 <= INT32_MAX


def network_steps(size: int) -> list[tuple[int, bool]]:
    """The bitonic network on ``size`` (a power of two) slots, step by step: (half size j, whether
    the step compares each slot with its mirror in the block of 2j rather than with the slot j
    away). For each block size 2k: the mirror step (j = k), then half-cleaners k/2, ..., 1."""
    steps = []
    k = 1
    while k < size:
        j = k
        while j >= 1:
            steps.append((j, j == k and k > 1))
            j //= 2
        k *= 2
    return steps


def _sort(
    b: seg.Builder, keys: ir.Value, sentinel: ir.Value, n: int, combined: bool
) -> tuple[ir.Value, ir.Value]:
    """Sort the pairs (keys[i], i) (int32 [n]) lexicographically; return the sorted keys and
    positions. ``combined`` (where :func:`fits_one_sort_key`): the network moves the one int32
    ``key * N + position``, split once at the end; else the pairs, compared lexicographically."""
    size = padded_size(n)
    width = b.const(size, np.int32)
    slots = b.op("Range", b.const(0, np.int32), width, b.const(1, np.int32), dtype=INT32)
    if size > n:  # sentinel keys
        pad = b.op("Expand", sentinel, b.const([size - n]), dtype=INT32)
        keys = b.op("Concat", keys, pad, axis=0, dtype=INT32)
    if combined:
        state = [b.op("Add", b.op("Mul", keys, width, dtype=INT32), slots, dtype=INT32)]
    else:
        state = [keys, slots]
    if size > 1:
        state = _sorting_network(b, state, slots, size)
    if size > n:
        state = [b.op("Slice", v, b.const([0]), b.const([n]), dtype=INT32) for v in state]
    if not combined:
        return state[0], state[1]
    sorted_keys = b.op("Div", state[0], width, dtype=INT32)  # (non-negative: exact)
    positions = b.op("Sub", state[0], b.op("Mul", sorted_keys, width, dtype=INT32), dtype=INT32)
    return sorted_keys, positions


def _sorting_network(
    b: seg.Builder, state: list[ir.Value], slots: ir.Value, size: int
) -> list[ir.Value]:
    """``state`` (one int32 key, or keys and positions, each [size]) sorted by the bitonic network
    as one Loop of :func:`network_steps`. Iteration i reads its step's constants from tables and
    compare-exchanges every slot with its partner through a Gather, so nothing in the body has a
    shape that depends on the step; the smaller value goes to the lower slot of each pair (every
    comparator points one way). With offset = slot mod 2j and lower = offset < j, the partner is
    slot + j (lower) or slot - j in a half-cleaner, slot + 2j - 1 - 2 offset in a mirror step:
    slot + base + lift * lower - bend * offset, with (base, lift, bend) = (-j, 2j, 0) or
    (2j - 1, 0, 2). Selections are integer arithmetic, v + (w - v) * take (exact: the values lie
    in [0, 2^31)) and the partner is read with GatherElements (onnxruntime 1.32, per int32
    element of [2^18]: Where ~7 ns, Gather ~8 ns, GatherElements ~1.3 ns, Add/Mul ~0.15 ns)."""
    steps = network_steps(size)
    tables = [
        b.const(column, np.int32)
        for column in zip(*[(j, 2 * j - 1, 0, 2) if m else (j, -j, 2 * j, 0) for j, m in steps])
    ]

    def step(bb: seg.Builder, i: ir.Value, *carried: ir.Value) -> list[ir.Value]:
        j, base, lift, bend = (bb.op("Gather", t, i, axis=0, dtype=INT32) for t in tables)
        offset = bb.op("Mod", slots, bb.op("Add", j, j, dtype=INT32), dtype=INT32)  # in the block
        lower = bb.op("Less", offset, j)
        partner = bb.op(
            "Sub",
            bb.op("Add", bb.op("Add", slots, base, dtype=INT32),
                  bb.op("Mul", bb.cast(lower, INT32, BOOL), lift, dtype=INT32), dtype=INT32),
            bb.op("Mul", offset, bend, dtype=INT32),
            dtype=INT32,
        )
        others = [bb.op("GatherElements", v, partner, axis=0, dtype=INT32) for v in carried]
        first = bb.op("Less", carried[0], others[0])
        if len(carried) == 2:  # (key, position) pairs: positions break ties
            first = bb.op("Or", first, bb.op(
                "And", bb.op("Equal", carried[0], others[0]), bb.op("Less", carried[1], others[1])
            ))
        # the lower slot keeps the smaller, the upper the larger
        take = bb.cast(bb.op("Xor", lower, first), INT32, BOOL)
        return [
            bb.op("Add", v, bb.op("Mul", bb.op("Sub", o, v, dtype=INT32), take, dtype=INT32),
                  dtype=INT32)
            for v, o in zip(carried, others)
        ]

    return _counted_loop(b, len(steps), state, [[size]] * len(state), step)


def _segmented_scan(
    b: seg.Builder, kind: seg.Kind, ext_keys: ir.Value, scan: ir.Value, flags: ir.Value | None,
    n: int, width: int | None,
) -> tuple[ir.Value, ir.Value | None]:
    """Inclusive segmented scan (Hillis-Steele) of ``scan`` (the n sorted rows and the identity
    row, [n + 1, w]) over the runs of equal ``ext_keys``, as one Loop of ceil(log2 n) iterations
    carrying the rows and the NaN flags: in iteration i, with d = 2^i (a constant table, like the
    sort's: no scalar recurrence), row t becomes ``combine(row[t - d], row[t])`` where
    key[t - d] == key[t], else ``combine(identity, row[t])`` (row n, key -1)."""
    trips = max(n - 1, 0).bit_length()
    if trips == 0:
        return scan, flags
    last = b.const(n, np.int32)
    distances = b.const([1 << i for i in range(trips)], np.int32)
    rows = b.op(
        "Range", b.const(0, np.int32), b.const(n + 1, np.int32), b.const(1, np.int32), dtype=INT32
    )

    def step(bb: seg.Builder, i: ir.Value, scan: ir.Value, *flags: ir.Value):
        def pick(cond, a, c):  # cond ? a : c, exact integer arithmetic (see _sorting_network)
            delta = bb.op("Mul", bb.op("Sub", a, c, dtype=INT32), bb.cast(cond, INT32, BOOL),
                          dtype=INT32)
            return bb.op("Add", c, delta, dtype=INT32)

        d = bb.op("Gather", distances, i, axis=0, dtype=INT32)
        back = bb.op("Sub", rows, d, dtype=INT32)
        # t - d, or the identity row before the first row (no negative index)
        back = pick(bb.op("Less", back, bb.const(0, np.int32)), last, back)
        same = bb.op(
            "Equal", ext_keys, bb.op("GatherElements", ext_keys, back, axis=0, dtype=INT32)
        )
        src = pick(same, back, last)
        early = bb.op("Gather", scan, src, axis=0, dtype=kind.dtype)
        early_flag = bb.op("Gather", flags[0], src, axis=0, dtype=BOOL) if flags else None
        scan, flag = kind.combine(bb, early, scan, None, early_flag, flags[0] if flags else None)
        return [scan] + ([flag] if flags else [])

    state = [scan] + ([flags] if flags is not None else [])
    shapes = [[n + 1, width]] * len(state)
    scan, *rest = _counted_loop(b, trips, state, shapes, step)
    return scan, (rest[0] if rest else None)


def _counted_loop(b: seg.Builder, trips: int, state: list[ir.Value], shapes: list, step):
    """``state`` after ``trips`` runs of ``step(body, iteration, *state) -> new state``, as one ONNX
    Loop TensorRT's ILoop takes: the trip count a constant and ``cond`` empty (onnx-tensorrt maps
    the trip count to a kCOUNT limit and adds a kWHILE one only for a given ``cond``; the body's
    condition output is then ignored), every carried value of one shape in every iteration (an
    IRecurrenceLayer's next value must have the dimensions of its first: NvInfer.h). ``shapes``:
    each carried value's shape, declared on the body's inputs and outputs and the Loop's."""
    names = b.names
    body = seg.Builder(names)
    iteration = seg.body_input(names, "iteration", seg.INT64, [])
    cond = seg.body_input(names, "cond", BOOL, [])
    inputs = [seg.body_input(names, "carried", v.dtype, shape) for v, shape in zip(state, shapes)]
    outputs = step(body, iteration, *inputs)
    go_on = body.const(True, np.bool_)  # a constant: nothing in the body reads `cond`
    for value, carried, shape in zip(outputs, inputs, shapes):
        value.dtype, value.shape = carried.dtype, ir.Shape(shape)
    graph = ir.Graph(
        [iteration, cond, *inputs], [go_on, *outputs], nodes=body.nodes, name=names.new("steps")
    )
    results = b.op("Loop", b.const(trips), None, *state, outputs=len(state), body=graph)
    results = list(results) if isinstance(results, tuple) else [results]
    for result, value, shape in zip(results, state, shapes):
        result.dtype, result.shape = value.dtype, ir.Shape(shape)
    return results
