"""ONNX ScatterElements (opsets 11/13/16/18) and the deprecated Scatter (opset 9, removed at 11)."""

from __future__ import annotations

import numpy as np

from scatter_rewrite.evaluator._common import (
    add_scaled_index,
    aligned,
    check_index_dtype,
    check_reduction,
    check_same_type,
    checked_index,
    invalid,
    is_mapped,
    normalize_axis,
    release_pages,
    scatter_flat,
    scatter_rows,
)

__all__ = ["scatter", "scatter_elements"]


def scatter_elements(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *,
                     axis: int = 0, reduction: str = "none",
                     node_name: str | None = None) -> np.ndarray:
    """ONNX ScatterElements: a copy of ``data`` with ``updates`` written along ``axis``.

    ``data``, ``indices`` and ``updates`` have the same rank r >= 1 and ``indices.shape ==
    updates.shape``. For each position ``p`` of ``indices`` the target is ``p`` with
    ``p[axis]`` replaced by ``indices[p]`` (negative values count from the end)::

        output[..., indices[i][j][k], ...] = f(output[..., indices[i][j][k], ...], updates[i][j][k])

    with ``f`` taking the update (``reduction="none"``) or ``+``, ``*``, max, min. Updates are
    applied in C order over ``indices``: with duplicate targets and ``"none"`` (undefined by the
    spec) the last one wins, as in onnxruntime. max/min follow onnxruntime's NaN rules (see
    ``_common._apply_max_min``). ``indices.shape[d]`` may exceed ``data.shape[d]`` only along
    ``axis``; elsewhere the entry's own coordinate would be out of range.

    Raises IndexOutOfRangeError for an index outside ``[-data.shape[axis], data.shape[axis]-1]``
    and InvalidModelError for rank/shape/axis/dtype/reduction violations. Inputs are not modified;
    the result has ``data``'s dtype.
    """
    return _scatter_elements(data, indices, updates, axis, reduction, node_name, "ScatterElements")


def scatter(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, axis: int = 0,
            node_name: str | None = None) -> np.ndarray:
    """ONNX Scatter (opset 9, deprecated at 11): ScatterElements with ``reduction="none"``."""
    return _scatter_elements(data, indices, updates, axis, "none", node_name, "Scatter")


def _scatter_elements(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, axis: int,
                      reduction: str, node_name: str | None, op: str) -> np.ndarray:
    data, indices, updates = np.asarray(data), np.asarray(indices), np.asarray(updates)
    check_index_dtype(indices, op, node_name)
    check_same_type(data, updates, op, node_name)
    check_reduction(reduction, data.dtype, op, node_name)
    rank = data.ndim
    if rank < 1:
        raise invalid(op, node_name, "data must have rank >= 1, got a scalar")
    if indices.ndim != rank:
        raise invalid(op, node_name, f"indices rank {indices.ndim} differs from data rank {rank}")
    if updates.shape != indices.shape:
        raise invalid(op, node_name, f"updates shape {updates.shape} differs from indices "
                                     f"shape {indices.shape}")
    axis = normalize_axis(axis, rank, op, node_name)
    for d in range(rank):
        if d != axis and indices.shape[d] > data.shape[d]:
            raise invalid(op, node_name, f"indices dimension {d} has size {indices.shape[d]} > "
                                         f"data's {data.shape[d]} (only axis {axis} may be larger)")

    size = data.shape[axis]
    what = f"axis {axis} of data with shape {data.shape}"
    if axis == 0 or indices.size == 0:
        idx, negative = checked_index(indices, size, op, node_name, what)
        flat = _flat_positions(idx, data.shape, axis, negative)
        release_pages(indices)  # read for the last time: a mapped weight's pages may go
        return scatter_flat(data, flat, updates, reduction)

    stride, buffer, offsets = _stride(data.shape, axis), None, None
    indices_mapped = is_mapped(indices)

    def positions(r0: int, r1: int) -> np.ndarray:
        # Not scattering along axis 0, entries in indices[r] target data[r] only: their
        # positions within data[r0:r1] are those of a scatter into that block alone. The
        # block's indices are checked here, while they are in cache; the offsets of the
        # first (largest) block serve every block, and its positions go to one reused
        # buffer (fresh ones cost page faults and cache misses).
        nonlocal buffer, offsets
        idx, negative = checked_index(aligned(indices[r0:r1]), size, op, node_name, what)
        if buffer is None:
            offsets = _offsets(idx.shape, data.shape, axis)
            buffer = np.empty(idx.size, dtype=np.intp)
        block_offsets = offsets
        if offsets is not None and offsets.shape[0] > 1:
            block_offsets = offsets[:r1 - r0]
        block = add_scaled_index(block_offsets, idx, size, stride, negative,
                                 out=buffer[:idx.size].reshape(idx.shape))
        if indices_mapped:
            release_pages(indices[r0:r1])
        return block.reshape(-1)

    return scatter_rows(data, updates, reduction, indices.shape[0], positions)


def _flat_positions(idx: np.ndarray, shape: tuple[int, ...], axis: int,
                    negative: bool) -> np.ndarray:
    """Flat C-order positions in ``data``: the entry's own coordinates except along ``axis``."""
    if idx.ndim == 1 and idx.dtype == np.intp and not negative:
        return idx.reshape(-1)  # 1-D data: the indices already are the positions
    return add_scaled_index(_offsets(idx.shape, shape, axis), idx, shape[axis],
                            _stride(shape, axis), negative).reshape(-1)


def _stride(shape: tuple[int, ...], axis: int) -> int:
    return int(np.prod(shape[axis + 1:], dtype=np.int64))


def _offsets(idx_shape: tuple[int, ...], shape: tuple[int, ...], axis: int) -> np.ndarray | None:
    """Flat offset of every entry's non-axis coordinates, built small (the axis dimension
    and every size-1 dimension kept at 1) to broadcast in one full-size add; None if all
    are 0."""
    base: np.ndarray | None = None
    for d, n in enumerate(idx_shape):
        if d != axis and n > 1:
            view = [1] * len(idx_shape)
            view[d] = n
            term = (np.arange(n, dtype=np.intp) * _stride(shape, d)).reshape(view)
            base = term if base is None else base + term
    return base
