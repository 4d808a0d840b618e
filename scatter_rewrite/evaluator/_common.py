"""Shared pieces of the scatter kernels: validation, index normalization, dtype helpers and
the one in-place "scatter into a flat array" core every op reduces to.

Every kernel turns its indices into *flat* positions in the C-ordered output (one int per
scattered element, in the spec's iteration order, i.e. C order over the updates) and then
calls :func:`scatter_flat`. Keeping the order matters: for ``reduction="none"`` with
duplicate targets the last update wins, and for ``max``/``min`` the position of NaNs in the
sequence decides the result (see :func:`_apply_max_min`), both exactly as onnxruntime's CPU
kernels do.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np

from scatter_rewrite.errors import IndexOutOfRangeError, InvalidModelError
from scatter_rewrite.limits import REDUCTION_VALUES

__all__ = [
    "add_scaled_index", "aligned", "as_string_kind", "check_index_dtype", "check_reduction",
    "check_same_type", "checked_index", "copy_releasing", "horner_index", "invalid", "is_mapped",
    "is_string", "normalize_axis", "release_pages", "restore_string_dtype", "scatter_flat", "scatter_rows", "where",
]

INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))

# float16/bfloat16 reductions run in the type itself. add/mul round after each update, in index
# order, as onnx.reference and onnxruntime's newest CPU kernels do: NumPy's float16 ufunc.at (and
# ml_dtypes' bfloat16 one) computes each update in float32 and stores the type each time, one
# correctly rounded operation per update (float32's 24 bits are >= 2 * 11 + 2, so rounding twice
# is harmless). max/min need no arithmetic, so every bit, a NaN's payload too, is the one
# onnxruntime keeps. Elements no update touches keep every bit.
_HALF_FLOATS = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))

_HUGE_PAGE = 2 << 20


def _block_bytes() -> int:
    """How many output bytes scatter_rows copies and scatters at a time.

    Fresh output memory is faulted in as 2 MiB huge pages (numpy asks for them), each zeroed by
    the kernel on first touch. Where L2 is smaller than a huge page, that zeroing evicts a
    smaller block before its scatter: blocks of a whole huge page were best (4096x4096 float32
    along axis 1, 2-core AMD EPYC, 1 MiB L2: 512 KiB 12.0 ms, 1 MiB 9.6, 2 MiB 8.7, 4 MiB 9.0).
    Where L2 holds a huge page, a block a quarter of L2 keeps the scatter's random writes in L2
    (2-core Intel Xeon, 2 MiB L2: the scatter of 1M float32 took 2.0 ms in 512 KiB blocks, 5.7
    in 2 MiB ones; the whole kernel 21.3-21.7 ms against 24.0).
    """
    l2 = _l2_cache_bytes()
    return l2 // 4 if l2 >= _HUGE_PAGE else _HUGE_PAGE


def _l2_cache_bytes() -> int:
    """This CPU's L2 cache size as Linux reports it (0 if unknown: another OS)."""
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            if (index / "level").read_text().strip() == "2":
                size = (index / "size").read_text().strip()  # "2048K"
                scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
                return int(size.rstrip("KM")) * scale
        except (OSError, ValueError):
            return 0
    return 0


_BLOCK_BYTES = _block_bytes()
_BLOCKED_MIN_BYTES = 4 << 20  # below this, one copy then one scatter is as fast
# max/min look for NaNs in an output this big, to use the faster maximum/minimum.at when there
# are none (_apply_max_min); a block of scatter_rows is smaller.
_NAN_LOOKUP_MIN_BYTES = 4 << 20
# float16/bfloat16 ufunc.at loops slow down 2-7x once their random writes leave L2 (float32 ones
# hardly do): above this output size the updates are grouped by region first (_by_region).
_HALF_GROUPING_MIN_BYTES = 4 << 20
_GROUPING_MIN_UPDATES = 1 << 16  # below this, sorting costs more than the misses it saves
# Updates grouped at a time, in order: the sort's temporaries stay about 27 bytes per update of
# this many (27 MiB), however many updates a fold has.
_GROUPING_CHUNK = 1 << 20
_REGIONS = 256  # one byte per sort key: NumPy's stable sort of uint8 is a single radix pass


# --------------------------------------------------------------------------- messages


def where(op: str, node_name: str | None) -> str:
    """The prefix every message starts with: the op and the node it is about."""
    return f"{op} node {node_name!r}" if node_name else f"{op} node <unnamed>"


def invalid(op: str, node_name: str | None, msg: str) -> InvalidModelError:
    return InvalidModelError(f"{where(op, node_name)}: {msg}")


# --------------------------------------------------------------------------- dtypes


def is_string(dtype: np.dtype) -> bool:
    """ONNX string tensors arrive as object arrays (onnx.numpy_helper) or np.str_/np.bytes_."""
    return dtype.kind in "OUS"


def restore_string_dtype(out: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Turn an object-array result back into ``dtype``'s kind: np.str_/np.bytes_ results get
    ``dtype``'s width or their longest element's, whichever is wider (never truncate)."""
    if dtype.kind == "O":
        return out
    fitted = out.astype(dtype.kind)
    return fitted if fitted.dtype.itemsize >= dtype.itemsize else fitted.astype(dtype)


def as_string_kind(array: np.ndarray, like: np.ndarray) -> np.ndarray:
    """``array``'s strings as an object array of ``like``'s element type: ``bytes`` for np.bytes_
    data and for object data holding any ``bytes`` (onnx.numpy_helper's form), else ``str``.

    String tensors reach a kernel both ways (``bytes`` from tensors, ``str`` from ``value_strings``
    attributes or onnx.reference ops), and Python cannot concatenate or compare the two. ONNX
    strings are UTF-8, so converting keeps every value, and UTF-8 bytes sort like their code
    points."""
    if like.dtype.kind == "O":
        to_bytes = any(isinstance(x, bytes) for x in like.flat)
    else:
        to_bytes = like.dtype.kind == "S"
    if to_bytes:
        convert = np.frompyfunc(lambda x: x.encode() if isinstance(x, str) else x, 1, 1)
    else:
        convert = np.frompyfunc(lambda x: x.decode() if isinstance(x, bytes) else x, 1, 1)
    return (
        np.asarray(convert(array), dtype=object) if array.size else array.astype(object, copy=True)
    )


def has_nan(dtype: np.dtype) -> bool:
    """Whether values of this dtype can be NaN (so max/min need onnxruntime's NaN rules)."""
    return dtype.kind in "fc" or dtype == _HALF_FLOATS[1]


def check_same_type(data: np.ndarray, updates: np.ndarray, op: str, node_name: str | None,
                    names: tuple[str, str] = ("data", "updates")) -> None:
    """Both inputs are the spec's one type T (string widths and containers may differ)."""
    if data.dtype == updates.dtype or (is_string(data.dtype) and is_string(updates.dtype)):
        return
    raise invalid(op, node_name, f"{names[1]} dtype {updates.dtype} differs from {names[0]} "
                                 f"dtype {data.dtype}; both must be the same type T")


def check_index_dtype(indices: np.ndarray, op: str, node_name: str | None,
                      name: str = "indices") -> None:
    if indices.dtype not in INDEX_DTYPES:
        raise invalid(op, node_name, f"{name} dtype {indices.dtype} is not int32 or int64")


def check_reduction(reduction: str, dtype: np.dtype, op: str, node_name: str | None) -> None:
    """Reject reductions the spec or the dtype cannot give a meaning to.

    The spec's type constraints allow every reduction for every T; where a combination has
    no arithmetic meaning we follow onnx.reference: strings concatenate for ``add`` and
    compare lexicographically for ``max``/``min`` (onnxruntime rejects those two) but have no
    ``mul``; bool ``add``/``mul``/``max``/``min`` are or/and/or/and (onnxruntime: same for
    add/mul, rejects max/min).
    """
    if reduction not in REDUCTION_VALUES:
        raise invalid(
            op, node_name, f"reduction {reduction!r} is not one of {', '.join(REDUCTION_VALUES)}"
        )
    if reduction == "none":
        return
    if is_string(dtype):
        if reduction == "mul":
            raise invalid(op, node_name, "reduction 'mul' is undefined for string tensors")
        return
    if dtype.kind not in "biufc" and dtype not in _HALF_FLOATS:
        raise invalid(op, node_name, f"reduction {reduction!r} is not supported for dtype {dtype}")


# --------------------------------------------------------------------------- indices


def normalize_axis(axis: int, rank: int, op: str, node_name: str | None,
                   name: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise invalid(op, node_name, f"{name}={axis} is out of range [{-rank}, {rank - 1}] "
                                     f"for rank-{rank} data")
    return axis + rank if axis < 0 else axis


def checked_index(idx: np.ndarray, size: int, op: str, node_name: str | None,
                  what: str) -> tuple[np.ndarray, bool]:
    """Bounds-check index values against ``[-size, size - 1]``.

    Returns ``(idx, has_negative)``; the caller adds ``size`` where negative (it can fold
    that into its own arithmetic). ``what`` names the axis/column for the message.
    """
    if idx.size == 0:
        return idx, False
    if idx.view(np.dtype(f"u{idx.itemsize}")).max() < size:
        return idx, False  # one pass: viewed unsigned, a negative index is huge
    lo, hi = idx.min(), idx.max()
    if lo < -size or hi >= size:
        bad = idx[(idx < -size) | (idx >= size)].flat[0]
        raise IndexOutOfRangeError(
            f"{where(op, node_name)}: index {int(bad)} is out of range "
            f"[{-size}, {size - 1}] for {what}")
    return idx, bool(lo < 0)


def add_scaled_index(acc: np.ndarray | None, idx: np.ndarray, size: int, stride: int,
                     negative: bool, out: np.ndarray | None = None) -> np.ndarray:
    """``acc + normalize(idx) * stride`` as an intp array of ``idx``'s shape (``acc`` may
    broadcast), written into ``out`` when given, else fresh."""
    # the last axis: one pass instead of a multiply by 1, then the add
    if stride == 1 and acc is not None:
        out = np.add(idx, acc, dtype=np.intp, out=out)
        if negative:
            np.add(out, size, out=out, where=idx < 0)
        return out
    out = np.multiply(idx, stride, dtype=np.intp, out=out)
    if negative:
        # Negative indices count from the end of the axis.
        np.add(out, size * stride, out=out, where=idx < 0)
    if acc is not None:
        np.add(out, acc, out=out)
    return out


def horner_index(acc: np.ndarray | None, idx: np.ndarray, size: int,
                 negative: bool) -> np.ndarray:
    """``acc * size + normalize(idx)``: one step of a row-major ravel, in place in ``acc``
    (a fresh intp array when ``acc`` is None). In place because fresh multi-MB temporaries
    cost page faults that dominate these cheap passes."""
    if acc is None:
        acc = idx.astype(np.intp, copy=True)
    else:
        acc *= size
        acc += idx
    if negative:
        np.add(acc, size, out=acc, where=idx < 0)
    return acc


# --------------------------------------------------------------------------- memory


def _backing_mmap(array: np.ndarray) -> mmap.mmap | None:
    """The read-only ``mmap`` an array views (weights mapped from a model file), or None.

    Only read-only maps: dropping the pages of a writable private map (``np.load(mmap_mode="c")``,
    an anonymous map) would throw away what was written into it, changing the caller's input.
    """
    base = array
    while base is not None and not isinstance(base, mmap.mmap):
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    if base is None or base.closed:
        return None
    with memoryview(base) as view:
        return base if view.readonly else None


def is_mapped(array: np.ndarray) -> bool:
    """Whether :func:`release_pages` can drop anything of ``array`` (or of its slices)."""
    return _backing_mmap(array) is not None


def aligned(array: np.ndarray) -> np.ndarray:
    """``array``, or an aligned copy where its elements are not at multiples of their size.

    A weight mapped from a model file starts wherever protobuf put it; NumPy's loops, ufunc.at
    and reductions among them, take a slower path on such data (ScatterElements on the fold
    benchmark's mapped 4096x4096 weight, 2-core Intel Xeon: 34.6 ms, 32.6 ms with each block's
    indices and updates aligned first). Callers pass blocks, so the copy stays small and in
    cache."""
    return array if array.flags.aligned else np.array(array, order="C")


def release_pages(array: np.ndarray) -> None:
    """Drop the pages of a read-only file-mapped ``array`` from this process's memory once it
    is consumed.

    The pages stay in the OS page cache and are read back if touched again, so this never
    changes a value; it only keeps a fold of a mapped 64 MiB weight from holding both the mapped
    input and the result resident (the fold benchmark's peak memory). No-op for other arrays.
    """
    mapped = _backing_mmap(array)
    if mapped is None or array.size == 0 or not array.flags.c_contiguous:
        return
    start = array.ctypes.data - np.frombuffer(mapped, dtype=np.uint8).ctypes.data
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE  # whole pages inside the array only
    last = (start + array.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    if 0 <= first < last <= len(mapped):
        mapped.madvise(mmap.MADV_DONTNEED, first, last - first)


def copy_releasing(data: np.ndarray) -> np.ndarray:
    """A C-ordered copy of ``data``, made in blocks whose mapped source pages are released as
    they are copied (see :func:`release_pages`); a plain copy for in-memory arrays."""
    if _backing_mmap(data) is None or data.ndim == 0 or not data.flags.c_contiguous:
        return np.array(data, order="C", copy=True)
    out = np.empty_like(data, order="C")
    src, dst = data.reshape(-1), out.reshape(-1)
    step = max(1, (16 << 20) // max(1, data.itemsize))
    for start in range(0, src.size, step):
        dst[start:start + step] = src[start:start + step]
        release_pages(src[start:start + step])
    return out


# --------------------------------------------------------------------------- the core


def scatter_flat(data: np.ndarray, flat: np.ndarray, updates: np.ndarray,
                 reduction: str) -> np.ndarray:
    """Return a C-ordered copy of ``data`` with ``updates.ravel()`` scattered into ``flat``.

    ``flat`` holds intp positions into ``data.ravel()``, already normalized and checked, in
    the spec's iteration order.
    """
    upd = updates.reshape(-1)
    dtype = data.dtype
    if is_string(dtype):
        out = np.ascontiguousarray(
            as_string_kind(data, data)
        )  # a copy (data itself may mix the two)
        _apply(out.reshape(-1), flat, as_string_kind(upd, data), reduction)
        return restore_string_dtype(out, dtype)
    out = copy_releasing(data)
    with _quiet():
        _apply(out.reshape(-1), flat, upd, reduction)
    return out


def scatter_rows(data: np.ndarray, updates: np.ndarray, reduction: str, n_rows: int,
                 positions: Callable[[int, int], np.ndarray]) -> np.ndarray:
    """:func:`scatter_flat` for scatters whose entries go row by row: the ``updates`` of rows
    ``[r0, r1)`` (``r1 <= n_rows``, C order) only target ``data[r0:r1]``, at
    ``positions(r0, r1)``, flat positions counted from the start of ``data[r0]``.

    Large data is then copied and scattered in blocks of rows, each block's random writes
    landing while its fresh copy is still in cache. That takes ScatterElements along axis 1 on
    4096x4096 float32 from 13 ms (copy, then scatter) to about 9 ms, the copy alone being 7 ms.
    """
    upd = updates.reshape(-1)
    dtype = data.dtype
    if data.ndim == 0 or data.nbytes < _BLOCKED_MIN_BYTES or is_string(dtype):
        return scatter_flat(data, positions(0, n_rows), updates, reduction)
    out = np.empty(data.shape, dtype=dtype)
    per_row = upd.size // n_rows if n_rows else 0
    step = max(1, _BLOCK_BYTES // max(1, data[0].nbytes))
    # Looked up once, not per block: which inputs are mapped, and what max/min must handle.
    data_mapped, updates_mapped = is_mapped(data), is_mapped(upd)
    with _quiet():
        facts = _MaxMinFacts.of(upd) if reduction in ("max", "min") else None
        for r0 in range(0, data.shape[0], step):  # loops over blocks of rows, not elements
            r1 = min(r0 + step, data.shape[0])
            out[r0:r1] = data[r0:r1]
            if data_mapped:
                release_pages(data[r0:r1])
            e1 = min(r1, n_rows)
            if e1 > r0:
                block_updates = upd[r0 * per_row:e1 * per_row]
                _apply(out[r0:r1].reshape(-1), positions(r0, e1), aligned(block_updates), reduction,
                       facts)
                if updates_mapped:
                    release_pages(block_updates)
    return out


def _quiet() -> np.errstate:
    """NaN and inf are values like any other in a scatter (inf - inf is NaN, as in onnxruntime):
    no RuntimeWarning for them on the user's terminal."""
    return np.errstate(all="ignore")


class _MaxMinFacts:
    """What max/min must handle in a kernel call's updates, looked up once for all of its blocks
    (per block of scatter_rows, the two lookups cost about 1 ms of a 4096x4096 scatter's 25)."""

    __slots__ = ("nan", "ties")

    def __init__(self, nan: bool, ties: bool) -> None:
        self.nan = nan  # some update is NaN
        self.ties = ties  # some update can tie with a differently signed zero (see _apply_max_min)

    @classmethod
    def of(cls, upd: np.ndarray) -> _MaxMinFacts | None:
        if not has_nan(upd.dtype) or upd.size == 0:
            return None
        return cls(bool(np.isnan(upd).any()), bool(_signed_zero(upd).any()))


def _signed_zero(upd: np.ndarray) -> np.ndarray:
    """Where an update could tie with a value differing only in a zero's sign."""
    return upd == 0 if upd.dtype.kind != "c" else (upd.real == 0) | (upd.imag == 0)


def _apply(out: np.ndarray, flat: np.ndarray, upd: np.ndarray, reduction: str,
           facts: _MaxMinFacts | None = None) -> None:
    """Scatter ``upd`` into the 1-D ``out`` at ``flat``, in order, combining with ``reduction``;
    ``facts``, when given, hold for a larger array of updates ``upd`` is part of.
    (Callers run it under :func:`_quiet`, once per kernel call: per block it cost 0.6 ms of 22.)"""
    if flat.size == 0:
        return
    if (reduction != "none" and out.dtype in _HALF_FLOATS and out.nbytes > _HALF_GROUPING_MIN_BYTES
            and flat.size >= _GROUPING_MIN_UPDATES):
        # One chunk after the other keeps every target's updates in order: each reduction below
        # is the sequential loop over its entries, so applying it chunk by chunk is the same.
        for start in range(0, flat.size, _GROUPING_CHUNK):
            chunk = slice(start, start + _GROUPING_CHUNK)
            _reduce(out, *_by_region(flat[chunk], upd[chunk], out.size), reduction, facts)
        return
    if reduction == "none":
        # A 1-D integer-array assignment writes in index order, so for duplicate targets the
        # last update wins, the same as onnxruntime's sequential loop (the spec leaves it
        # undefined).
        out[flat] = upd
    else:
        _reduce(out, flat, upd, reduction, facts)


def _reduce(out: np.ndarray, flat: np.ndarray, upd: np.ndarray, reduction: str,
            facts: _MaxMinFacts | None = None) -> None:
    """add/mul/max/min of ``upd`` into ``out`` at ``flat``, in order."""
    if reduction == "add":
        np.add.at(out, flat, upd)  # in order: same summation order as onnxruntime
    elif reduction == "mul":
        np.multiply.at(out, flat, upd)
    else:
        _apply_max_min(out, flat, upd, reduction == "max", facts)


def _by_region(flat: np.ndarray, upd: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The entries stably sorted by which of ``_REGIONS`` equal parts of the output they target.

    Every update of a target keeps its place among that target's updates, so any in-order
    reduction gives the same result, while the writes go through the output region by region,
    in cache. (ScatterND float16 add, 1M updates into 4M elements, AMD EPYC: float16 add.at
    31-70 ms unsorted, 9.5 ms within 32 KiB regions; the sort and two gathers cost about 10.)
    """
    shift = max(0, (size - 1).bit_length() - (_REGIONS - 1).bit_length())
    if size <= 1 << 32:
        flat = flat.astype(np.uint32)  # half the bytes for the gather, the costliest step
    key = np.right_shift(flat, shift).astype(np.uint8)
    order = np.argsort(key, kind="stable")
    return np.take(flat, order).astype(np.intp), np.take(upd, order)


def _apply_max_min(out: np.ndarray, flat: np.ndarray, upd: np.ndarray, is_max: bool,
                   facts: _MaxMinFacts | None = None) -> None:
    """max/min exactly as onnxruntime's CPU kernels compute them.

    onnxruntime folds each update ``src`` into ``dst`` with ``dst = (src < dst) ? dst : src``
    for max and ``dst = (dst < src) ? dst : src`` for min. Every comparison with NaN is
    false, so (found empirically with onnxruntime 1.32, both ScatterElements and ScatterND):

    * a NaN update makes the target NaN, but a later non-NaN update replaces that NaN;
    * a NaN in ``data`` is replaced by the first update to it;
    * on ties (only visible as +0.0 vs -0.0, or in a complex number's zero part) the update wins.

    So the result for a target is: NaN if its last update is NaN; else the max of the updates
    after its last NaN update, together with ``data`` unless some update was NaN, where a NaN
    ``data`` counts as absent. ``np.fmax`` gives exactly "max ignoring a NaN dst", so we drop
    the updates up to each target's last NaN, then fmax, then redo the signed-zero ties.
    """
    if not has_nan(out.dtype):
        (np.maximum if is_max else np.minimum).at(out, flat, upd)
        return
    nan = np.isnan(upd) if facts is None or facts.nan else None
    if nan is not None and nan.any():
        keep, nan_targets, nan_pos = _after_last_nan(flat, nan)
        out[nan_targets] = upd[nan_pos]
        flat, upd = flat[keep], upd[keep]
        reduce_at = np.fmax if is_max else np.fmin
    elif out.nbytes < _NAN_LOOKUP_MIN_BYTES or np.isnan(out).any():
        reduce_at = np.fmax if is_max else np.fmin
    else:
        # No NaN anywhere: maximum/minimum agree with fmax/fmin, and their .at loops are faster
        # on data out of cache (ScatterND max on 4M float32: 23 ms instead of 28). In cache (a
        # block of scatter_rows), they are not, and looking for NaNs first would cost 1-2 ms.
        reduce_at = np.maximum if is_max else np.minimum
    reduce_at.at(out, flat, upd)
    # fmax/fmin keep dst on ties, onnxruntime keeps src. A tie is visible only where equal values
    # differ in a zero's sign: a zero update, or for complex one with a zero part (1+0j, 1-0j).
    if facts is not None and not facts.ties:
        return
    tied = np.flatnonzero(_signed_zero(upd))
    if tied.size:
        tied = tied[out[flat[tied]] == upd[tied]]
        out[flat[tied]] = upd[tied]  # the last tying update per target wins (in-order writes)


def _after_last_nan(flat: np.ndarray, nan: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For entries in order: which come after their target's last NaN update; the targets
    that had a NaN update; and the position of that last NaN update for each of them."""
    targets, inverse = np.unique(flat, return_inverse=True)
    nan_pos = np.flatnonzero(nan)
    last = np.full(targets.size, -1, dtype=np.intp)
    np.maximum.at(last, inverse[nan_pos], nan_pos)
    keep = np.arange(flat.size) > last[inverse]
    hit = last >= 0
    return keep, targets[hit], last[hit]
