"""ScatterElements / Scatter: differential tests against onnxruntime and onnx.reference."""

from __future__ import annotations

from unittest import mock

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.equivalence import (
    ADD_MUL_RTOL, assert_bits, assert_kernel_matches, assert_same, assert_same_or_reordered_sum,
)
from tests.helpers.kernel_oracles import (
    FLOATS, INTS, loop_scatter_elements, random_values, run_kernel, run_ort, run_reference,
)
from scatter_rewrite.errors import IndexOutOfRangeError
from scatter_rewrite.evaluator import _common, scatter, scatter_elements, scatter_nd

# What onnxruntime's CPU ScatterElements (opset 18) implements, per reduction.
ORT_DTYPES = {
    "none": [np.bool_, *INTS, np.float16, *FLOATS, np.str_],
    "add": [np.bool_, *INTS, *FLOATS, np.str_],
    "mul": [np.bool_, *INTS, *FLOATS],
    "max": [*INTS, np.float16, *FLOATS],
    "min": [*INTS, np.float16, *FLOATS],
}
ORT_CASES = [(r, np.dtype(t)) for r, ts in ORT_DTYPES.items() for t in ts]


@st.composite
def se_problems(draw, dtype: np.dtype, reduction: str, max_rank: int = 5):
    """data, indices, updates, axis: unique targets for "none", duplicates otherwise."""
    rank = draw(st.integers(1, max_rank))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    axis = draw(st.integers(-rank, rank - 1))
    ax = axis % rank
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    ishape = [draw(st.integers(0 if d != ax else 1, shape[d])) for d in range(rank)]
    n = shape[ax]
    if reduction == "none":
        # unique per line along the axis: the first ishape[ax] of a random permutation
        keys = rng.random(tuple(ishape[:ax]) + (n,) + tuple(ishape[ax + 1:]))
        idx = np.argsort(keys, axis=ax).take(np.arange(ishape[ax]), axis=ax)
    else:
        ishape[ax] = draw(st.integers(1, n + 3))
        idx = rng.integers(0, n, tuple(ishape))
    idx = np.where(rng.random(idx.shape) < 0.3, idx - n, idx)  # negative indices
    idx = idx.astype(draw(st.sampled_from([np.int32, np.int64])))
    special = reduction in ("max", "min") and draw(st.booleans())
    data = random_values(rng, shape, dtype, special)
    updates = random_values(rng, idx.shape, dtype, special)
    return data, idx, updates, axis


@pytest.mark.parametrize(("reduction", "dtype"), ORT_CASES, ids=[f"{r}-{t}" for r, t in ORT_CASES])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_matches_onnxruntime(reduction, dtype, data):
    d, idx, upd, axis = data.draw(se_problems(dtype, reduction))
    small_blocks = data.draw(st.booleans())
    expected = run_ort("ScatterElements", [d, idx, upd], axis=axis, reduction=reduction)
    # Tiny blocks force the blocked copy+scatter path on these small shapes too.
    block, floor = (8, 0) if small_blocks else (_common._BLOCK_BYTES, _common._BLOCKED_MIN_BYTES)
    with mock.patch.object(_common, "_BLOCK_BYTES", block), \
            mock.patch.object(_common, "_BLOCKED_MIN_BYTES", floor):
        got = run_kernel(scatter_elements, [d, idx, upd], axis=axis, reduction=reduction, node_name="n0")
    assert_kernel_matches(expected, got, reduction)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_float32_matches_onnxruntime(reduction, data):
    """The main dtype gets the full example budget."""
    d, idx, upd, axis = data.draw(se_problems(np.dtype(np.float32), reduction))
    expected = run_ort("ScatterElements", [d, idx, upd], axis=axis, reduction=reduction)
    got = scatter_elements(d, idx, upd, axis=axis, reduction=reduction)
    assert_kernel_matches(expected, got, reduction)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_deprecated_scatter_matches_onnxruntime_opset10(data):
    dtype = np.dtype(data.draw(st.sampled_from([np.float32, np.int64, np.bool_, np.uint8])))
    d, idx, upd, axis = data.draw(se_problems(dtype, "none"))
    expected = run_ort("Scatter", [d, idx, upd], opset=10, axis=axis)
    assert_same(scatter(d, idx, upd, axis=axis), expected)


# dtypes onnxruntime lacks for some reduction: onnx.reference, or a loop with onnxruntime's fold
REFERENCE_CASES = [
    ("none", np.complex64), ("add", np.complex128), ("mul", np.complex64),
    ("none", ml_dtypes.bfloat16), ("max", np.bool_), ("min", np.bool_),
    ("max", np.str_), ("min", np.str_),
]


@pytest.mark.parametrize(("reduction", "dtype"), REFERENCE_CASES,
                         ids=[f"{r}-{np.dtype(t)}" for r, t in REFERENCE_CASES])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_matches_onnx_reference(reduction, dtype, data):
    d, idx, upd, axis = data.draw(se_problems(np.dtype(dtype), reduction, max_rank=3))
    expected = run_reference("ScatterElements", [d, idx, upd], axis=axis, reduction=reduction)
    got = scatter_elements(d, idx, upd, axis=axis, reduction=reduction)
    if np.dtype(dtype).kind == "U":
        expected = expected.astype(str)
    assert_same_or_reordered_sum(expected.astype(got.dtype), got, reduction)


@pytest.mark.parametrize("reduction", ["max", "min"])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.complex64])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_max_min_follow_onnxruntime_fold_where_ort_lacks_dtype(reduction, dtype, data):
    d, idx, upd, axis = data.draw(se_problems(np.dtype(dtype), reduction, max_rank=3))
    expected = loop_scatter_elements(d, idx, upd, axis=axis, reduction=reduction)
    got = scatter_elements(d, idx, upd, axis=axis, reduction=reduction)
    assert got.dtype == expected.dtype
    if np.dtype(dtype).kind == "c":  # each part's bits: signed zeros included
        assert_bits(got.view(got.real.dtype), expected.view(expected.real.dtype))
    else:
        assert_bits(got, expected)


@pytest.mark.parametrize("reduction", ["add", "mul"])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_low_precision_add_mul_round_after_each_update(reduction, dtype, data):
    """The loop's scalar arithmetic is in the type itself, one rounding per update, as in
    onnx.reference (test_low_precision_reductions.py compares with it)."""
    d, idx, upd, axis = data.draw(se_problems(np.dtype(dtype), reduction, max_rank=3))
    expected = loop_scatter_elements(d, idx, upd, axis=axis, reduction=reduction)
    assert_bits(scatter_elements(d, idx, upd, axis=axis, reduction=reduction), expected)


# ---------------------------------------------------------------- explicit behaviours


@pytest.mark.parametrize("small_blocks", [False, True])
def test_duplicates_with_reduction_none_last_write_wins_like_onnxruntime(small_blocks):
    rng = np.random.default_rng(0)
    data = np.zeros((3, 50), np.float32)
    idx = rng.integers(-50, 50, (3, 2000))
    upd = np.arange(3 * 2000, dtype=np.float32).reshape(3, 2000)
    block, floor = (8, 0) if small_blocks else (_common._BLOCK_BYTES, _common._BLOCKED_MIN_BYTES)
    with mock.patch.object(_common, "_BLOCK_BYTES", block), \
            mock.patch.object(_common, "_BLOCKED_MIN_BYTES", floor):
        got = scatter_elements(data, idx, upd, axis=1)
    assert_same(got, run_ort("ScatterElements", [data, idx, upd], axis=1))
    assert_same(got, loop_scatter_elements(data, idx, upd, axis=1))


def test_nan_max_min_rules_match_onnxruntime():
    nan = np.nan
    data = np.array([nan, 1, 2, 3, nan, 0.0], np.float32)
    idx = np.array([0, 1, 1, 2, 3, 3, 4, 5, 5])
    upd = np.array([5, nan, 7, nan, nan, 9, nan, -0.0, 0.0], np.float32)
    for reduction in ("max", "min"):
        got = scatter_elements(data, idx, upd, reduction=reduction)
        assert_bits(got, run_ort("ScatterElements", [data, idx, upd], reduction=reduction))
    # NaN data is replaced, a NaN update sticks unless a later update follows, ties take the update
    got = scatter_elements(data, idx, upd, reduction="max")
    assert_bits(got, np.array([5, 7, nan, 9, nan, 0.0], np.float32))


@pytest.mark.parametrize("nan_lookup", [True, False])
@pytest.mark.parametrize("reduction", ["max", "min"])
@pytest.mark.parametrize("nan_in", ["nowhere", "data", "untouched data", "updates"])
def test_max_min_each_nan_case_matches_onnxruntime(reduction, nan_in, nan_lookup, monkeypatch):
    """_apply_max_min takes maximum/minimum.at only where no NaN is in data or updates (looked
    for in big outputs only: here in every one, or in none), fmax/fmin otherwise: each case
    against onnxruntime, bit for bit, signed-zero ties included."""
    monkeypatch.setattr(_common, "_NAN_LOOKUP_MIN_BYTES", 0 if nan_lookup else 1 << 60)
    rng = np.random.default_rng(7)
    data = rng.integers(-3, 4, (6, 40)).astype(np.float32)  # small values: many ties, zeros
    data[rng.random(data.shape) < 0.2] *= -0.0
    idx = rng.integers(-40, 40, (6, 90))
    upd = rng.integers(-3, 4, idx.shape).astype(np.float32)
    upd[rng.random(upd.shape) < 0.3] = -0.0
    if nan_in == "data":
        data[:, :: 3] = np.nan
    elif nan_in == "untouched data":  # a NaN no update reaches stays, whatever the path
        idx %= 39
        data[:, 39] = np.nan
    elif nan_in == "updates":
        upd[rng.random(upd.shape) < 0.05] = np.nan
    for op in ("ScatterElements", "ScatterND"):
        if op == "ScatterElements":
            got = scatter_elements(data, idx, upd, axis=1, reduction=reduction)
            expected = run_ort(op, [data, idx, upd], axis=1, reduction=reduction)
        else:  # the same scatter as (row, column) tuples
            from scatter_rewrite.evaluator import scatter_nd
            rows = np.broadcast_to(np.arange(6)[:, None], idx.shape)
            tuples = np.stack([rows, idx], axis=-1)
            got = scatter_nd(data, tuples, upd, reduction=reduction)
            expected = run_ort(op, [data, tuples, upd], reduction=reduction)
        assert_bits(got, expected)
        assert (np.signbit(got) & (got == 0)).any()  # the ties were there to get wrong


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_large_blocked_path_matches_onnxruntime(reduction):
    """Big enough data for the real cache-blocked path; fewer index rows than data rows."""
    rng = np.random.default_rng(1)
    data = rng.standard_normal((1900, 600)).astype(np.float32)
    assert data.nbytes > max(_common._BLOCKED_MIN_BYTES, 2 * _common._BLOCK_BYTES)
    data[rng.random(data.shape) < 0.01] = np.nan
    if reduction == "none":
        idx = np.argsort(rng.random((1850, 600)), axis=1)[:, :40]
        idx[rng.random(idx.shape) < 0.5] -= 600
        idx[:300] %= 600  # the first block has no negative index, later ones do
    else:
        idx = rng.integers(-600, 600, (1850, 80))
    upd = rng.standard_normal(idx.shape).astype(np.float32)
    upd[rng.random(upd.shape) < 0.01] = np.nan
    got = scatter_elements(data, idx, upd, axis=-1, reduction=reduction)
    expected = run_ort("ScatterElements", [data, idx, upd], axis=-1, reduction=reduction)
    if reduction in ("add", "mul"):
        np.testing.assert_allclose(got, expected, rtol=ADD_MUL_RTOL[np.dtype(np.float32)], equal_nan=True)
    else:
        assert_bits(got, expected)


def test_string_data_object_and_str():
    data = np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=object)
    idx = np.array([[2, 0], [1, 1]])
    upd = np.array([["X", "Y"], ["long string", "Z"]], dtype=object)
    got = scatter_elements(data, idx, upd, axis=1)
    assert got.dtype == object
    assert got.tolist() == [["Y", "b", "X"], ["d", "Z", "f"]]
    got_str = scatter_elements(data.astype(str), idx, upd.astype(str), axis=1)
    assert got_str.dtype.kind == "U"  # widened, never truncated
    assert got_str.tolist() == [["Y", "b", "X"], ["d", "Z", "f"]]
    got_add = scatter_elements(data, idx, upd, axis=1, reduction="add")
    assert got_add.tolist() == [["aY", "b", "cX"], ["d", "elong stringZ", "f"]]
    assert got_add.tolist() == run_ort("ScatterElements", [data, idx, upd], axis=1, reduction="add").tolist()


def test_float16_add_where_onnxruntime_has_no_kernel():
    data = np.array([1.0, 2.0, 3.0], np.float16)
    idx = np.array([0, 0, 2, 2, 2])
    upd = np.array([0.1, 0.2, 1000.0, 0.3, 0.4], np.float16)
    got = scatter_elements(data, idx, upd, reduction="add")
    # Each sum rounded to float16 (1003 + 0.3 -> 1003.5, + 0.4 -> 1004): 1003.5 summed first.
    assert_bits(got, np.array([np.float16(np.float16(1.0) + np.float16(0.1)) + np.float16(0.2),
                               2.0, 1004.0], np.float16))


def test_large_blocked_path_reports_an_index_out_of_range_in_a_later_block():
    data = np.zeros((1900, 600), np.float32)
    idx = np.zeros((1900, 8), np.int64)
    idx[1800, 3] = 600  # far past the first block of rows
    with pytest.raises(IndexOutOfRangeError, match="index 600 is out of range"):
        scatter_elements(data, idx, np.ones(idx.shape, np.float32), axis=1, node_name="n9")


@pytest.mark.parametrize(("l2", "block"), [(0, 2 << 20), (512 << 10, 2 << 20), (1 << 20, 2 << 20),
                                           (2 << 20, 512 << 10), (4 << 20, 1 << 20)])
def test_block_size_follows_whether_l2_holds_a_huge_page(l2, block, monkeypatch):
    """Whole huge pages where zeroing one evicts L2 (and where L2 is unknown), a quarter of L2
    where it holds one (the measurements are in _common._block_bytes)."""
    monkeypatch.setattr(_common, "_l2_cache_bytes", lambda: l2)
    assert _common._block_bytes() == block


def test_l2_cache_size_read_on_this_machine():
    l2 = _common._l2_cache_bytes()
    assert l2 == 0 or l2 >= 64 << 10  # read from sysfs ("2048K"), or unknown
    assert _common._BLOCK_BYTES == _common._block_bytes()


@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
@pytest.mark.parametrize("small_blocks", [False, True])
@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_half_float_reductions_keep_every_bit_they_do_not_compute(dtype, reduction, small_blocks, op):
    """NaN payloads survive: in elements no update touches (a round trip through float32 would
    make every bfloat16 NaN 0x7fc0), and for max/min in the update that wins (onnxruntime keeps
    the update's bits)."""
    bits = np.array([0x7F81, 0xFF81, 0x7FA0, 0x3F80, 0x4000, 0x3C00] * 3, np.uint16)
    if dtype == np.float16:
        bits = np.array([0x7C01, 0xFC01, 0x7E10, 0x3C00, 0x4000, 0x3800] * 3, np.uint16)
    data = bits.view(dtype).reshape(3, 6)
    nan_update = bits[:1].view(dtype)[0]
    upd = np.array([[2.0, nan_update], [0.5, 1.0], [nan_update, 3.0]], dtype)
    idx = np.array([[3, 4], [5, 3], [4, 5]])
    with np.errstate(all="ignore"):  # the loop's scalar arithmetic on NaNs
        expected = loop_scatter_elements(data, idx, upd, axis=1, reduction=reduction)
    block, floor = (8, 0) if small_blocks else (_common._BLOCK_BYTES, _common._BLOCKED_MIN_BYTES)
    with mock.patch.object(_common, "_BLOCK_BYTES", block), \
            mock.patch.object(_common, "_BLOCKED_MIN_BYTES", floor):
        if op == "ScatterElements":
            got = scatter_elements(data, idx, upd, axis=1, reduction=reduction)
        else:
            rows = np.broadcast_to(np.arange(3)[:, None], idx.shape)
            got = scatter_nd(data, np.stack([rows, idx], axis=-1), upd, reduction=reduction)
    untouched = np.ones(data.shape, bool)
    untouched[:, 3:] = False
    assert_bits(got[untouched], data[untouched])
    if reduction in ("max", "min"):
        assert_bits(got, expected)  # no arithmetic: every bit is the one onnxruntime keeps
    else:
        with np.errstate(all="ignore"):
            assert_same_or_reordered_sum(expected, got, reduction)


@pytest.mark.parametrize("reduction", ["max", "min"])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_max_min_ties_keep_the_update_as_onnxruntime_would(dtype, reduction):
    """Equal complex values that differ in a zero's sign (1+0j and 1-0j): the update wins, as
    for real zeros, under onnxruntime's ``dst = (src < dst) ? dst : src``."""
    data = np.array([0j, complex(1, 0.0), complex(0.0, 1), complex(-0.0, -0.0), 2 + 2j], dtype)
    upd = np.array([complex(-0.0, -0.0), complex(1, -0.0), complex(-0.0, 1), 0j, complex(2, 2)], dtype)
    for order in ([0, 1, 2, 3, 4], [4, 3, 2, 1, 0]):  # and ties between updates to one target
        idx = np.array(order + [1, 1], np.int64)
        both = np.concatenate([upd, np.array([complex(1, 0.0), complex(1, -0.0)], dtype)])
        expected = loop_scatter_elements(data, idx, both, reduction=reduction)
        got = scatter_elements(data, idx, both, reduction=reduction)
        assert_bits(got.view(got.real.dtype), expected.view(expected.real.dtype))


def _unaligned(array: np.ndarray) -> np.ndarray:
    """``array``'s values at an address that is no multiple of their size, as a weight mapped from
    a model file may be."""
    raw = np.zeros(array.nbytes + 1, np.uint8)
    view = np.frombuffer(raw.data, array.dtype, array.size, offset=1).reshape(array.shape)
    view[...] = array
    assert not view.flags.aligned
    return view


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_unaligned_inputs_on_the_blocked_path_give_the_bits_of_aligned_ones(reduction):
    rng = np.random.default_rng(7)
    data = rng.standard_normal((12, 10)).astype(np.float32)
    upd = rng.standard_normal((12, 6)).astype(np.float32)
    upd.flat[::7] = np.nan
    upd.flat[3::11] = -0.0
    data.flat[::5] = 0.0
    if reduction == "none":
        idx = np.argsort(rng.random((12, 10)), axis=1)[:, :6].astype(np.int64)
    else:
        idx = rng.integers(-10, 10, (12, 6)).astype(np.int64)
    expected = scatter_elements(data, idx, upd, axis=1, reduction=reduction)
    with mock.patch.object(_common, "_BLOCK_BYTES", 80), mock.patch.object(_common, "_BLOCKED_MIN_BYTES", 0):
        got = scatter_elements(_unaligned(data), _unaligned(idx), _unaligned(upd), axis=1,
                               reduction=reduction)
    assert_bits(got, expected)
    assert got.flags.aligned
