"""ONNX ScatterND (opsets 11/13/16/18)."""

from __future__ import annotations

import numpy as np

from scatter_rewrite.evaluator._common import (
    check_index_dtype,
    check_reduction,
    check_same_type,
    checked_index,
    copy_releasing,
    horner_index,
    invalid,
    is_string,
    scatter_flat,
)

__all__ = ["scatter_nd"]

# With reduction "none", slices at least this long are copied row by row (one fancy-index
# assignment of whole slices) instead of being expanded to one flat position per element.
_ROW_COPY_MIN_SLICE = 8


def scatter_nd(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *,
               reduction: str = "none", node_name: str | None = None) -> np.ndarray:
    """ONNX ScatterND: a copy of ``data`` with slices ``updates`` written at ``indices``.

    ``data`` has rank r >= 1, ``indices`` rank q >= 1 with ``k = indices.shape[-1] <= r``: each
    k-tuple ``indices[idx]`` addresses the slice ``data[indices[idx]]`` of shape ``data.shape[k:]``
    (negative values count from the end). ``updates.shape`` must be
    ``indices.shape[:-1] + data.shape[k:]``::

        output = np.copy(data)
        for idx in np.ndindex(indices.shape[:-1]):
            output[tuple(indices[idx])] = f(output[tuple(indices[idx])], updates[idx])

    with ``f`` taking the update (``reduction="none"``) or ``+``, ``*``, max, min, applied in
    C order over ``indices.shape[:-1]``: duplicate targets with ``"none"`` (undefined by the
    spec) keep the last update, as in onnxruntime; max/min follow onnxruntime's NaN rules (see
    ``_common._apply_max_min``). int32 indices are accepted too (the spec says int64).

    Raises IndexOutOfRangeError for an index outside ``[-data.shape[j], data.shape[j]-1]`` and
    InvalidModelError for rank/shape/dtype/reduction violations. Inputs are not modified; the
    result has ``data``'s dtype.
    """
    op = "ScatterND"
    data, indices, updates = np.asarray(data), np.asarray(indices), np.asarray(updates)
    check_index_dtype(indices, op, node_name)
    check_same_type(data, updates, op, node_name)
    check_reduction(reduction, data.dtype, op, node_name)
    if data.ndim < 1:
        raise invalid(op, node_name, "data must have rank >= 1, got a scalar")
    if indices.ndim < 1:
        raise invalid(op, node_name, "indices must have rank >= 1, got a scalar")
    k = indices.shape[-1]
    if k > data.ndim:
        raise invalid(op, node_name, f"indices.shape[-1]={k} exceeds data rank {data.ndim}")
    expected = indices.shape[:-1] + data.shape[k:]
    if updates.shape != expected:
        raise invalid(op, node_name, f"updates shape {updates.shape} must be indices.shape[:-1] "
                                     f"+ data.shape[{k}:] = {expected}")

    n_slices = int(np.prod(indices.shape[:-1], dtype=np.int64))
    slice_len = int(np.prod(data.shape[k:], dtype=np.int64))
    # Position of each addressed slice among the prod(data.shape[:k]) slices, in C order.
    tuples = indices.reshape(n_slices, k)
    slot: np.ndarray | None = None
    for j in range(k):  # loops over the k index columns, not over elements
        column, negative = checked_index(tuples[:, j], data.shape[j], op, node_name,
                                         f"dimension {j} (indices[..., {j}]) of data with shape "
                                         f"{data.shape}")
        if k == 1 and not negative and column.dtype == np.intp:
            slot = column  # already the positions (only read from here on: no copy)
        else:
            slot = horner_index(slot, column, data.shape[j], negative)
    if slot is None:  # k == 0: every update is the whole of data
        slot = np.zeros(n_slices, dtype=np.intp)

    if slice_len == 1:
        return scatter_flat(data, slot, updates, reduction)
    if reduction == "none" and slice_len >= _ROW_COPY_MIN_SLICE and not is_string(data.dtype):
        out = copy_releasing(data)
        # In-order row writes: duplicate slots keep the last slice, like the flat path.
        out.reshape(-1, slice_len)[slot] = updates.reshape(n_slices, slice_len)
        return out
    # One flat position per updated element, slice after slice (the spec's order per element).
    flat = (slot[:, None] * slice_len + np.arange(slice_len, dtype=np.intp)).reshape(-1)
    return scatter_flat(data, flat, updates, reduction)
