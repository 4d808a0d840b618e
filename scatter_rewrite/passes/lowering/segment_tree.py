"""Float max/min of the scatter-free sort form as a segment tree: O(R+n) work where the doubling
scan does ceil(log2(n+1)) passes over all R+n rows (passes/no_scatter.py's ``_sort_form`` calls
:func:`positional_tree` where the counts are static).

The rows are sorted as the sort form sorts them (each data row first in its key run, its updates
in order). Level 0 is the sorted rows; level k+1 pairs the blocks 2j and 2j+1 of level k (aligned
blocks of 2^(k+1) sorted rows, runs mixed: a block spanning two runs is never read). A block
holds, per element, the position (in the concatenated rows and updates) of the value its fold
keeps, and whether the block holds a NaN. The fold is onnxruntime's (``acc = u < acc ? acc : u``
for max, :class:`.segment_reduce.Kind`); with the NaN flag it is associative:
``(v1, f1) . (v2, f2) = f2 or not v2 < v1 ? v2 : v1, f1 or f2``.

Each data row's run [s, e] is then read as the classic bottom-up segment-tree query: its data row
first (position s), then for [s+1, e+1) at each level the left block when the low end is odd and
the right block when the high end is odd, both halved. Left blocks come in order and fold into
the left accumulator, right blocks come last-first and fold under the right one; the two meet at
the end. The two accumulators are one [R, 2, w] tensor, so the query is one chain: onnxruntime's
run order (:func:`.live_bytes.run_order`) then builds each level just before its query step and
frees it after the next level is built.

Exact: no float passes through Where (onnxruntime's CPU Where loses a -0.0 it selects from its
first input); Where picks int32 positions and the values are gathered from them. Comparisons use
``Less`` only (OpenVINO's Greater is true on NaN on some CPUs). Every shape is static: the level
sizes are known from R + n; no Loop.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.passes.lowering.segment_reduce import Builder, Kind

__all__ = ["applies", "positional_tree"]

INT64, INT32, BOOL = ir.DataType.INT64, ir.DataType.INT32, ir.DataType.BOOL


def _level_sizes(total: int) -> list[int]:
    sizes = [total]
    while sizes[-1] > 1:
        sizes.append(sizes[-1] // 2)
    return sizes


def _col(b: Builder, value: ir.Value, shape: list[int], dtype: ir.DataType) -> ir.Value:
    return b.op("Reshape", value, b.const(shape), dtype=dtype)


def _is_nan(b: Builder, value: ir.Value) -> ir.Value:
    return b.op("IsNaN", value, dtype=BOOL)


def positional_tree(b: Builder, both: ir.Value, order: ir.Value, end_at: ir.Value, kind: Kind,
                    rows: int, total: int) -> ir.Value:
    """The [rows, w] result of float max/min (``kind``): ``both`` [total, w] the data rows
    then the update rows (compute type), ``order`` [total] the sort (sorted position -> row of
    ``both``), ``end_at`` [rows] each key run's last sorted position, in key order."""
    sizes = _level_sizes(total)
    # every level built first: the query reads them, so each is made when its step needs it
    levels = _levels(b, both, order, kind, sizes)
    acc_at, acc, acc_nan, has = _query(b, both, order, end_at, kind, rows, sizes, levels)
    # left . right where the right accumulator holds a block
    ct = kind.dtype
    left_at = b.op("Gather", acc_at, b.const(0), axis=1, dtype=INT32)
    right_at = b.op("Gather", acc_at, b.const(1), axis=1, dtype=INT32)
    left_v = b.op("Gather", acc, b.const(0), axis=1, dtype=ct)
    right_v = b.op("Gather", acc, b.const(1), axis=1, dtype=ct)
    right_nan = b.op("Gather", acc_nan, b.const(1), axis=1, dtype=BOOL)
    right_has = b.op("Gather", has, b.const(1), axis=1, dtype=BOOL)
    wins = b.op("And", right_has, b.op("Or", right_nan,
                                       b.op("Not", kind.loses(b, right_v, left_v))))
    final = b.op("Where", wins, right_at, left_at, dtype=INT32)
    return b.op("GatherElements", both, final, axis=0, dtype=ct)


def _levels(b: Builder, both, order, kind: Kind, sizes: list[int]) -> list:
    """Per level (None for level 0, the sorted rows read through ``order``): each block's kept
    position [size, w] int32, its value, and whether it holds a NaN."""
    ct = kind.dtype
    levels = [None]
    for k in range(len(sizes) - 1):
        pairs = sizes[k + 1]
        evens = b.op("Range", b.const(0), b.const(2 * pairs), b.const(2), dtype=INT64)
        odds = b.op("Range", b.const(1), b.const(2 * pairs), b.const(2), dtype=INT64)
        if k == 0:
            at_l = b.op("Gather", order, evens, axis=0, dtype=INT64)
            at_r = b.op("Gather", order, odds, axis=0, dtype=INT64)
            v_l = b.op("Gather", both, at_l, axis=0, dtype=ct)
            v_r = b.op("Gather", both, at_r, axis=0, dtype=ct)
            f_l, f_r = _is_nan(b, v_l), _is_nan(b, v_r)
            at_l = _col(b, b.cast(at_l, INT32, INT64), [pairs, 1], INT32)
            at_r = _col(b, b.cast(at_r, INT32, INT64), [pairs, 1], INT32)
        else:
            at, value, nan = levels[k]
            at_l = b.op("Gather", at, evens, axis=0, dtype=INT32)
            at_r = b.op("Gather", at, odds, axis=0, dtype=INT32)
            v_l = b.op("Gather", value, evens, axis=0, dtype=ct)
            v_r = b.op("Gather", value, odds, axis=0, dtype=ct)
            f_l = b.op("Gather", nan, evens, axis=0, dtype=BOOL)
            f_r = b.op("Gather", nan, odds, axis=0, dtype=BOOL)
        right = b.op("Or", f_r, b.op("Not", kind.loses(b, v_r, v_l)))
        at = b.op("Where", right, at_r, at_l, dtype=INT32)
        nan = b.op("Or", f_l, f_r)
        levels.append((at, b.op("GatherElements", both, at, axis=0, dtype=ct), nan))
    return levels


def _query(b: Builder, both, order, end_at, kind: Kind, rows: int, sizes: list[int],
           levels: list) -> tuple:
    """The [rows, 2] accumulators (0: left, from the data row on; 1: right, empty at first) after
    every level: kept positions [rows, 2, w], their values, NaN flags, whether each holds any."""
    ct = kind.dtype
    is_right = b.const(np.array([False, True]).reshape(1, 2, 1), np.bool_)
    has = b.const(np.array([True, False]).reshape(1, 2, 1), np.bool_)
    # the run of row r is [s, e]: s = e of row r-1 plus one; the query covers [s + 1, e + 1)
    ends = b.op("Add", end_at, b.const(1), dtype=INT64)
    low = b.op("Concat", b.const([1]), b.op("Add", b.op("Slice", ends, b.const([0]),
                                                         b.const([rows - 1])), b.const(1),
                                             dtype=INT64), axis=0, dtype=INT64)
    high = ends
    # each step's blocks first: they read only the levels, so that onnxruntime's run order walks
    # the accumulators' chain first and gathers each step's blocks when that step runs (built
    # after them, each step's blocks would be gathered before the chain and held throughout)
    steps = []
    for k in range(len(sizes)):
        active = b.op("Less", low, high)
        take_l = b.op("And", active, b.op("Equal", b.op("Mod", low, b.const(2)), b.const(1)))
        take_r = b.op("And", active, b.op("Equal", b.op("Mod", high, b.const(2)), b.const(1)))
        at_l = b.op("Mul", low, b.cast(take_l, INT64, BOOL), dtype=INT64)
        at_r = b.op("Mul", b.op("Sub", high, b.const(1), dtype=INT64), b.cast(take_r, INT64, BOOL),
                    dtype=INT64)
        picks = b.op("Concat", _col(b, at_l, [rows, 1], INT64), _col(b, at_r, [rows, 1], INT64),
                     axis=1, dtype=INT64)
        take = b.op("Concat", _col(b, take_l, [rows, 1], BOOL), _col(b, take_r, [rows, 1], BOOL),
                    axis=1, dtype=BOOL)
        take = _col(b, take, [rows, 2, 1], BOOL)
        if k == 0:
            block_at = b.op("Gather", order, picks, axis=0, dtype=INT64)  # [rows, 2]
            block = b.op("Gather", both, block_at, axis=0, dtype=ct)
            block_nan = _is_nan(b, block)
            block_at = _col(b, b.cast(block_at, INT32, INT64), [rows, 2, 1], INT32)
        else:
            at, value, nan = levels[k]
            block_at = b.op("Gather", at, picks, axis=0, dtype=INT32)
            block = b.op("Gather", value, picks, axis=0, dtype=ct)
            block_nan = b.op("Gather", nan, picks, axis=0, dtype=BOOL)
        steps.append((take, block_at, block, block_nan))
        if k + 1 < len(sizes):
            low = b.op("Div", b.op("Add", low, b.cast(take_l, INT64, BOOL), dtype=INT64),
                       b.const(2), dtype=INT64)
            high = b.op("Div", b.op("Sub", high, b.cast(take_r, INT64, BOOL), dtype=INT64),
                        b.const(2), dtype=INT64)
    row_ids = b.op("Range", b.const(0), b.const(rows), b.const(1), dtype=INT64)
    pair_ids = b.op("Concat", _col(b, row_ids, [rows, 1], INT64),
                    _col(b, row_ids, [rows, 1], INT64), axis=1, dtype=INT64)  # [rows, 2]
    acc_at = _col(b, b.cast(pair_ids, INT32, INT64), [rows, 2, 1], INT32)
    acc = b.op("Gather", both, pair_ids, axis=0, dtype=ct)  # [rows, 2, w]
    acc_nan = _is_nan(b, acc)
    for take, block_at, block, block_nan in steps:
        # left: acc . block keeps the block when it holds a NaN or the acc does not beat it;
        # right: block . acc keeps the block when acc holds no NaN and loses to it
        left = b.op("Or", block_nan, b.op("Not", kind.loses(b, block, acc)))
        right = b.op("And", b.op("Not", acc_nan), kind.loses(b, acc, block))
        keeps = b.op("Or", b.op("And", is_right, right),
                     b.op("And", b.op("Not", is_right), left))
        chosen = b.op("And", take, b.op("Or", b.op("Not", has), keeps))
        acc_at = b.op("Where", chosen, block_at, acc_at, dtype=INT32)
        acc_nan = b.op("Or", b.op("And", take, b.op("Or", block_nan, b.op("And", acc_nan, has))),
                       b.op("And", b.op("Not", take), acc_nan))
        flat = _col(b, acc_at, [2 * rows, -1], INT32)
        acc = _col(b, b.op("GatherElements", both, flat, axis=0, dtype=ct), [rows, 2, -1], ct)
        has = b.op("Or", has, take)
    return acc_at, acc, acc_nan, has


def applies(count: int | None, rows: int | None) -> bool:
    """Whether :func:`positional_tree` is written: n > 0 update rows and R data rows, both static,
    R + n below 2^31 (int32 positions)."""
    return count is not None and rows is not None and count > 0 and count + rows < 2 ** 31
