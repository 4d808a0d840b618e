"""The exact scatter-free forms of a scatter node (:func:`scatter_free`): a ScatterElements or
ScatterND (reduction none/add/mul/max/min) written as Gather/Equal/Where/Reduce*/TopK-class
standard ops, in one of two forms; which one a node gets, and the memory each holds, is
:mod:`scatter_rewrite.passes.no_scatter`'s to decide.

Each node is first viewed as rows (:func:`.segment_reduce.update_rows`, no scatter): the data as
``rows`` [R, w], each update row's target row ``keys`` [n] (negative indices normalized; the GNN
``Expand(Unsqueeze(dst))`` pattern as whole rows of w features) and the update rows ``vals``
[n, w], in the order the scatter applies them. Then one of two forms, the one that holds fewer
bytes at once (the memory each holds: :mod:`scatter_rewrite.passes.no_scatter`):

``mask`` (one-hot ``Equal(Range(R)[:, None], keys[None, :])``, [R, n]): for ``none`` the last
    writer of each row, ``ReduceMax(Where(mask, Range(n), -1))``, that writer's update row
    gathered (for a static n > 0; all n rows otherwise), then one Gather from it concatenated
    with the rows (index arithmetic only: bit for bit for every type); for add/mul and
    integer max/min, ``Reduce{Sum,Prod,Max,Min}(Where(mask[:, :, None], vals, identity))`` over
    the update axis, combined with the row. Largest intermediate: R*n int64 (none) or R*n*w of
    the compute type. Not used for float max/min: their result among NaNs and equal values
    (-0.0/+0.0) depends on the order onnxruntime applies the updates in, which a reduction does
    not keep; nor for int64 add/mul (onnxruntime's int64 ReduceSum/ReduceProd round past 2^53). A one-hot MatMul would be cheaper for add (R*n) but is not used: 0 * inf is NaN
    (an infinite update would poison every row) and runtimes may lower MatMul's precision
    (OpenVINO's bf16 default on Xeons: 0.023 off, issue #32).
``sort`` (any reduction, any type the lowering supports): the data rows and the update rows
    concatenated, with keys ``Range(R)`` and ``keys``, sorted with ``TopK(largest=0)`` by
    ``key * (R+n) + position`` (int64; distinct, so no runtime's tie rule matters: each row's
    data comes first and its updates in order); then an inclusive segmented scan by doubling
    (Hillis-Steele: step d combines element i with i-d when both lie in the same key run;
    ceil(log2(n+1)) steps for n static in the indices' or the updates' shape, 31 when n is
    symbolic, enough for any n below 2^31), unrolled (no Loop); every run's last element,
    picked with ``TopK`` of ``position + (R+n) * (not a run end)`` (distinct too; exactly R run
    ends, in key order: the output rows).
    ``none`` needs no scan: the run's last element is the last writer. Largest intermediate:
    (R+n)*w of the compute type. The combine is :class:`.segment_reduce.Kind`'s, with its
    "a NaN came after" flag for float max/min: bit for bit, as onnxruntime folds. Float max/min
    with R and n static: a segment tree over the sorted rows instead of the scan (O(R+n) work,
    :mod:`.segment_tree`).


summed in float32, rounded once): judged by validation against the original's own rounding.

"""

from __future__ import annotations

import dataclasses
import math

import onnx_ir as ir

from scatter_rewrite.graph import attr
from scatter_rewrite.passes.lowering import segment_reduce as seg
from scatter_rewrite.passes.lowering import segment_tree

__all__ = ["ShapeWriting", "reduction_of", "scatter_free"]

INT64 = ir.DataType.INT64
# doubling steps of the scan when the number of updates is symbolic: runs up to 2^31 long
DYNAMIC_STEPS = 31


@dataclasses.dataclass(frozen=True)
class ShapeWriting:
    """How the forms write their shape changes, for a converter that gets some wrong (one value
    per target: targets/litert.py's for onnx2tf); the defaults suit every other runtime."""

    flatten: bool = True  # rows may be a Flatten (False: Reshapes only)
    # an Expand may take a shape computed at run time (False: only one whose entries are all
    # equal; below opset 14 the output is then reshaped through one: graph.py's reshape_to)
    computed_expands: bool = True
    # float max/min over static counts as a segment tree (False: the doubling scan; the tree's
    # rank-3 accumulators meet onnx2tf's channels-last layout: tf.where refused)
    segment_tree: bool = True



def reduction_of(node: ir.Node) -> str:
    """The node's reduction ("none" for TensorScatter and the deprecated Scatter)."""
    if node.op_type in ("ScatterElements", "ScatterND"):
        return attr(node, "reduction", "none")
    return "none"


def scatter_free(node: ir.Node, opset: int, form: str, names: seg.Names | None = None,
                 writing: ShapeWriting = ShapeWriting()) -> tuple[list[ir.Node], ir.Value]:
    """Standard nodes without any scatter computing ``node`` (ScatterElements or ScatterND) in
    ``form`` ("mask" or "sort"); the value replacing its output. ``writing.flatten=False``: no
    Flatten, also where no side of a rows axis is static (a Reshape to sizes computed from the
    shape: onnx2tf's Flatten comes out wrong there, targets/litert.py)."""
    names = names or seg.Names()
    names.prefix = seg.name_prefix(node)
    b = seg.Builder(names, writing.computed_expands)
    data = node.inputs[0]
    if seg.is_empty(data):
        return b.nodes, b.op("Identity", data, dtype=data.dtype)
    reduction = reduction_of(node)
    rows, keys, vals = seg.update_rows(b, node,
                                       reshape_opset=None if writing.flatten else opset)
    count, row_count, _ = seg.row_counts(node)
    if form == "mask":
        out = _mask_form(b, rows, keys, vals, reduction, data.dtype, opset, count)
    else:
        out = _sort_form(b, rows, keys, vals, reduction, data.dtype, opset, count,
                         _position_dtype(count, row_count),
                         row_count if writing.segment_tree else None)
    return b.nodes, b.reshape_like(out, data, opset)


def _unsqueeze(b: seg.Builder, value: ir.Value, axes: list[int], opset: int,
               dtype: ir.DataType) -> ir.Value:
    if opset >= 13:
        return b.op("Unsqueeze", value, b.const(axes), dtype=dtype)
    return b.op("Unsqueeze", value, axes=axes, dtype=dtype)


def _reduce(b: seg.Builder, op: str, value: ir.Value, axis: int, opset: int,
            dtype: ir.DataType) -> ir.Value:
    """``op`` over ``axis``, dropped (the axes attribute became an input: ReduceSum at 13, the
    others at 18)."""
    takes_input = opset >= (13 if op == "ReduceSum" else 18)
    if takes_input:
        return b.op(op, value, b.const([axis]), keepdims=0, dtype=dtype)
    return b.op(op, value, axes=[axis], keepdims=0, dtype=dtype)


def _mask_form(b: seg.Builder, rows, keys, vals, reduction: str, dtype: ir.DataType,
               opset: int, count: int | None) -> ir.Value:
    updates = b.op("Size", keys, dtype=INT64)
    row_count = b.dim(rows, 0)
    row_ids = b.op("Range", b.const(0), row_count, b.const(1), dtype=INT64)
    mask = b.op("Equal", _unsqueeze(b, row_ids, [1], opset, INT64),
                _unsqueeze(b, keys, [0], opset, INT64))  # [R, n]
    if reduction == "none":
        positions = b.op("Range", b.const(0), updates, b.const(1), dtype=INT64)
        # the last writer of each row (-1: none), then one Gather from the rows and the updates
        last = _reduce(b, "ReduceMax", b.op("Where", mask, _unsqueeze(b, positions, [0], opset,
                                                                       INT64),
                                            b.const(-1), dtype=INT64), 1, opset, INT64)
        unwritten = b.op("Less", last, b.const(0))
        if count:  # each row's last writer's update first: [R, w], not all n rows copied
            writer = b.op("Where", unwritten, b.const(0), last, dtype=INT64)
            vals = b.op("Gather", vals, writer, axis=0, dtype=dtype)
            last = row_ids
        source = b.op("Where", unwritten, row_ids, b.op("Add", last, row_count, dtype=INT64),
                      dtype=INT64)
        both = b.op("Concat", rows, vals, axis=0, dtype=dtype)
        return b.op("Gather", both, source, axis=0, dtype=dtype)
    ct = seg.compute_dtype(dtype, reduction)
    kind = seg.Kind(reduction, ct, int_minmax=opset >= 12)
    picked = b.op("Where", _unsqueeze(b, mask, [2], opset, ir.DataType.BOOL),
                  _unsqueeze(b, b.cast(vals, ct, dtype), [0], opset, ct),
                  b.const(kind.identity(), kind.identity().dtype), dtype=ct)  # [R, n, w]
    op = {"add": "ReduceSum", "mul": "ReduceProd", "max": "ReduceMax", "min": "ReduceMin"}
    folded = _reduce(b, op[reduction], picked, 1, opset, ct)
    merged, _ = kind.combine(b, b.cast(rows, ct, dtype), folded)
    return b.cast(merged, dtype, ct)


def _position_dtype(count: int | None, row_count: int | None) -> ir.DataType:
    """int32 for the float max/min scan's positions where the R + n rows are static and fewer
    than 2^31 (half the bytes of its largest tensors); int64 otherwise."""
    static = count is not None and row_count is not None and count + row_count < 2 ** 31
    return ir.DataType.INT32 if static else INT64


def _sort_form(b: seg.Builder, rows, keys, vals, reduction: str, dtype: ir.DataType,
               opset: int, count: int | None, position_dtype: ir.DataType = INT64,
               static_rows: int | None = None) -> ir.Value:
    row_count = b.dim(rows, 0)
    row_ids = b.op("Range", b.const(0), row_count, b.const(1), dtype=INT64)
    all_keys = b.op("Concat", row_ids, keys, axis=0, dtype=INT64)
    total = b.op("Size", all_keys, dtype=INT64)
    positions = b.op("Range", b.const(0), total, b.const(1), dtype=INT64)
    order = _ascending(b, b.op("Add", b.op("Mul", all_keys, total, dtype=INT64), positions,
                               dtype=INT64), total)
    sorted_keys = b.op("Gather", all_keys, order, axis=0, dtype=INT64)
    # run ends: the key changes after them (the last element ends the last run); the slice's end
    # is the length itself (onnx2tf reads a huge constant end as int32: an empty slice)
    following = b.op("Concat", b.op("Slice", sorted_keys, b.const([1]), _as_vector(b, total)),
                     b.const([-1]), axis=0, dtype=INT64)
    inner = b.cast(b.op("Equal", sorted_keys, following), INT64, ir.DataType.BOOL)
    # exactly R ends, in position order: each position, plus the length where it ends no run
    end_at = _ascending(b, b.op("Add", b.op("Mul", inner, total, dtype=INT64), positions,
                                dtype=INT64), row_count)
    if reduction == "none":
        both = b.op("Concat", rows, vals, axis=0, dtype=dtype)
        return b.op("Gather", both, b.op("Gather", order, end_at, axis=0, dtype=INT64), axis=0,
                    dtype=dtype)
    ct = seg.compute_dtype(dtype, reduction)
    kind = seg.Kind(reduction, ct, int_minmax=opset >= 12)
    both = b.cast(b.op("Concat", rows, vals, axis=0, dtype=dtype), ct, dtype)
    if kind.nan_aware and segment_tree.applies(count, static_rows):  # (O(R+n): static counts)
        return b.cast(segment_tree.positional_tree(b, both, order, end_at, kind, static_rows,
                                                   static_rows + count), dtype, ct)
    x = b.op("Gather", both, order, axis=0, dtype=ct)
    steps = DYNAMIC_STEPS if count is None else math.ceil(math.log2(count + 1))
    if kind.nan_aware:
        scanned = _positional_scan(b, x, sorted_keys, positions, end_at, kind, steps,
                                   position_dtype)
        return b.cast(scanned, dtype, ct)
    out = _identity_row_scan(b, x, sorted_keys, positions, end_at, kind, steps, total,
                             b.dims(both, 1, 2))
    return b.cast(out, dtype, ct)


def _identity_row_scan(b: seg.Builder, x, sorted_keys, positions, end_at, kind: seg.Kind,
                       steps: int, total, width) -> ir.Value:
    """The scan of add/mul, integer max/min and bool: ``x`` [total, w] with one more row, the
    reduction's identity (combine(identity, v) is v bit for bit), that an element whose partner
    lies outside its run reads instead: a Gather of [total] indices picks the partners, no Where
    over [total, w] (whose two temporaries onnxruntime allocates: live_bytes.py). Every step's
    index arithmetic is built first, so that onnxruntime's run order (live_bytes.run_order) walks
    the rows' chain first and computes each step's partners when that step runs. ``width``:
    the rows' width as a [1] vector, read from the unsorted rows (static where shapes are, so a
    target's op table step folds it; x's comes after TopK)."""
    ct = kind.dtype
    last = _as_vector(b, total)
    partners = [b.op("Concat", b.op("Where", b.op("Reshape", same_col, b.const([-1]),
                                                  dtype=ir.DataType.BOOL), back, total,
                                    dtype=INT64), last, axis=0, dtype=INT64)
                for _, same_col, back in _doubling(b, sorted_keys, positions, steps)]
    identity = kind.identity()
    # (Tile, not Expand: onnx2tf refuses an Expand its onnxsim has folded to a constant)
    row = b.op("Tile", b.const(identity.reshape(1, 1), identity.dtype),
               b.op("Concat", b.const([1]), width, axis=0, dtype=INT64), dtype=ct)
    x = b.op("Concat", x, row, axis=0, dtype=ct)  # [total + 1, w]
    for partner in partners:
        x, _ = kind.combine(b, b.op("Gather", x, partner, axis=0, dtype=ct), x)
    return b.op("Gather", x, end_at, axis=0, dtype=ct)


def _as_vector(b: seg.Builder, scalar: ir.Value) -> ir.Value:
    return b.op("Reshape", scalar, b.const([1]), dtype=INT64)


def _ascending(b: seg.Builder, unique: ir.Value, k: ir.Value) -> ir.Value:
    """The positions of ``unique``'s ``k`` smallest values, smallest first (``TopK``'s indices).
    The values are distinct (a key times the length plus the position), so the result does not
    depend on how a runtime's TopK orders equal values: ONNX puts the lower index first, OpenVINO's
    does not (docs/targets.md)."""
    _, at = b.op("TopK", unique, _as_vector(b, k), outputs=2, axis=0, largest=0, sorted=1)
    at.dtype = INT64
    return at


def _doubling(b: seg.Builder, sorted_keys, positions, steps: int):
    """The scan's steps: (the distance d, whether element i-d is in i's run [total, 1], i-d
    clipped to 0)."""
    for step in range(steps):
        d = b.const(1 << step)
        shifted = b.op("Sub", positions, d, dtype=INT64)
        inside = b.op("Not", b.op("Less", shifted, b.const(0)))
        back = b.op("Where", inside, shifted, b.const(0), dtype=INT64)
        same = b.op("And", inside, b.op("Equal", b.op("Gather", sorted_keys, back, axis=0,
                                                      dtype=INT64), sorted_keys))
        yield d, b.op("Reshape", same, b.const([-1, 1]), dtype=ir.DataType.BOOL), back


def _positional_scan(b: seg.Builder, x, sorted_keys, positions, end_at, kind: seg.Kind,
                     steps: int, position_dtype: ir.DataType) -> ir.Value:
    """Float max/min: the scan carries, per element, the position of the winning value (picked
    with Where) and "no NaN at or after it" (Kind's flagged fold, associative, carried negated so
    that no step negates a [total, w] tensor); the values are gathered once at the end. No float
    passes through Where, whose -0.0 onnxruntime loses (and whose arithmetic repair,
    Builder.select(exact=True), its graph optimizer undoes: measured on onnxruntime 1.23 with
    optimizations on), so the result is bit for bit.

    Memory: each step's inputs are built before what reads them and the positions' chain is
    the last input of each join, so onnxruntime's run order (:func:`.lowering.live_bytes.run_order`)
    walks the positions first and computes each step's flags when that step runs. A negation
    of the flags in each step would be a chain of its own, which that order computes for every
    step first and holds (17 steps x [total, w] bool for a 20k-node GNN)."""
    ct = kind.dtype
    at = b.op("Expand", b.op("Reshape", b.cast(positions, position_dtype, INT64),
                             b.const([-1, 1]), dtype=position_dtype),
              b.shape(x), dtype=position_dtype)  # [total, w]
    clean = b.op("Not", b.op("IsNaN", x))
    for _, same_col, back in _doubling(b, sorted_keys, positions, steps):
        early_at = b.op("Gather", at, back, axis=0, dtype=position_dtype)
        early = b.op("GatherElements", x, early_at, axis=0, dtype=ct)
        late = b.op("GatherElements", x, at, axis=0, dtype=ct)
        loses = b.op("And", b.op("And", kind.loses(b, late, early), clean), same_col)
        early_clean = b.op("Or", b.op("Gather", clean, back, axis=0), b.op("Not", same_col))
        at = b.op("Where", loses, early_at, at, dtype=position_dtype)
        clean = b.op("And", early_clean, clean)
    final = b.op("Gather", at, end_at, axis=0, dtype=position_dtype)
    return b.op("GatherElements", x, final, axis=0, dtype=ct)
