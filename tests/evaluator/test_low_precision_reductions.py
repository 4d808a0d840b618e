"""float16/bfloat16 reductions: rounded after each update in index order, bit for bit with
onnx.reference (whose loops compute every update in the type itself) and with onnxruntime's own
float16 example."""

from __future__ import annotations

from unittest import mock

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.equivalence import assert_bits, assert_same
from tests.helpers.kernel_oracles import run_reference
from scatter_rewrite.evaluator import _common, scatter_elements, scatter_nd

HALF_FLOATS = [np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)]
HALF_IDS = ["float16", "bfloat16"]


def assert_bits_where_not_nan(got: np.ndarray, expected: np.ndarray) -> None:
    """Every bit of every non-NaN result; NaN exactly where expected. (A NaN an addition makes
    carries the payload and sign the CPU's float unit picks, which this test must not pin.)"""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    nan = np.isnan(expected.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
    assert_bits(got[~nan], expected[~nan])


# ---------------------------------------------------------------- onnxruntime's own example


@pytest.mark.parametrize("op", ["ScatterND", "ScatterElements"])
def test_float16_add_rounds_after_each_update_like_onnxruntime(op):
    """onnxruntime's ScatterND_18_add_MLFloat16_RoundsAfterEachUpdate: 1024 + 0.25 rounds back to
    1024 (float16's spacing there is 1), eight times over. Summed first, it would be 1026."""
    data = np.array([1024.0], np.float16)
    updates = np.full(8, 0.25, np.float16)
    if op == "ScatterND":
        got = scatter_nd(data, np.zeros((8, 1), np.int64), updates, reduction="add")
    else:
        got = scatter_elements(data, np.zeros(8, np.int64), updates, reduction="add")
    assert_bits(got, np.array([1024.0], np.float16))


def test_bfloat16_add_and_mul_round_after_each_update():
    """bfloat16's spacing at 256 is 2: 256 + 0.5 rounds back to 256 every time (258 summed
    first); 1.00390625 * (1 + 2**-8) rounds to 1 every time."""
    bf16 = ml_dtypes.bfloat16
    got = scatter_nd(np.array([256.0], bf16), np.zeros((8, 1), np.int64),
                     np.full(8, 0.5, bf16), reduction="add")
    assert_bits(got, np.array([256.0], bf16))
    got = scatter_elements(np.array([1.0, 3.0], bf16), np.zeros(8, np.int64),
                           np.full(8, 1 + 2**-8, bf16), reduction="mul")
    assert_bits(got, np.array([1.0, 3.0], bf16))


# ---------------------------------------------------------------- against onnx.reference

# Magnitudes far apart, so that most additions round; and factors near 1, so that products do.
_ADD_VALUES = np.array([1024.0, 2048.0, -1000.0, 3.0, 0.25, 0.1, -0.3, 0.007, 1e-3, 60000.0])
_MUL_VALUES = np.array([1.0009765625, 0.999, 1.1, -1.3, 0.7, 3.0, 1.0, 0.01, 250.0])
_SPECIAL = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0])


def _values(rng: np.random.Generator, shape, dtype: np.dtype, reduction: str,
            special: bool) -> np.ndarray:
    base = _ADD_VALUES if reduction == "add" else _MUL_VALUES
    values = rng.choice(base, shape) * (1 + rng.standard_normal(shape) * 0.01)
    if special:
        values = np.where(rng.random(shape) < 0.1, rng.choice(_SPECIAL, shape), values)
    with np.errstate(over="ignore"):
        return values.astype(dtype)


@st.composite
def elements_problems(draw, dtype: np.dtype, reduction: str, specials: bool = True):
    """data, indices, updates, axis for ScatterElements: many updates per target; inf, NaN and
    signed zeros among the values if ``specials`` (and hypothesis) say so."""
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    axis = draw(st.integers(-rank, rank - 1))
    ax = axis % rank
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    ishape = [draw(st.integers(1, shape[d])) for d in range(rank)]
    ishape[ax] = draw(st.integers(1, 4 * shape[ax] + 8))  # many duplicates along the axis
    n = shape[ax]
    idx = rng.integers(-n, n, tuple(ishape)).astype(draw(st.sampled_from([np.int32, np.int64])))
    special = specials and draw(st.booleans())
    return (_values(rng, shape, dtype, reduction, special), idx,
            _values(rng, idx.shape, dtype, reduction, special), axis)


@st.composite
def low_precision_nd_problems(draw, dtype: np.dtype, reduction: str):
    """data, indices, updates for ScatterND: many updates per slot, slices of any length."""
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    k = draw(st.integers(0, rank))
    batch = tuple(draw(st.lists(st.integers(1, 12), min_size=1, max_size=2)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    columns = [rng.integers(-n, n, batch) for n in shape[:k]]
    idx = np.stack(columns, axis=-1) if k else np.zeros(batch + (0,), np.int64)
    special = draw(st.booleans())
    return (_values(rng, shape, dtype, reduction, special), idx.astype(np.int64),
            _values(rng, batch + shape[k:], dtype, reduction, special))


@pytest.mark.parametrize("reduction", ["add", "mul"])
@pytest.mark.parametrize("dtype", HALF_FLOATS, ids=HALF_IDS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_scatter_elements_add_mul_match_onnx_reference(dtype, reduction, data):
    d, idx, upd, axis = data.draw(elements_problems(dtype, reduction))
    copies = [d.copy(), idx.copy(), upd.copy()]
    with np.errstate(all="ignore"):  # onnx.reference's scalar arithmetic on inf and NaN
        expected = run_reference("ScatterElements", [d, idx, upd], axis=axis, reduction=reduction)
    # Tiny blocks force the blocked copy+scatter path (taken for big data) on these small shapes.
    small_blocks = data.draw(st.booleans())
    block, floor = (8, 0) if small_blocks else (_common._BLOCK_BYTES, _common._BLOCKED_MIN_BYTES)
    with mock.patch.object(_common, "_BLOCK_BYTES", block), \
            mock.patch.object(_common, "_BLOCKED_MIN_BYTES", floor):
        got = scatter_elements(d, idx, upd, axis=axis, reduction=reduction)
    assert_bits_where_not_nan(got, expected)
    for a, c in zip([d, upd], copies[::2]):  # inputs untouched, NaN payloads too
        assert_bits(a, c)
    assert_same(idx, copies[1])


def _grouping(on: bool, chunk: int = 1 << 20):
    """Updates grouped by output region (_by_region, taken for big half-float outputs) on these
    small shapes too, ``chunk`` updates at a time, or never."""
    return mock.patch.multiple(_common, _HALF_GROUPING_MIN_BYTES=-1 if on else 1 << 60,
                               _GROUPING_MIN_UPDATES=0 if on else 1 << 60, _GROUPING_CHUNK=chunk)


@pytest.mark.parametrize("reduction", ["add", "mul"])
@pytest.mark.parametrize("dtype", HALF_FLOATS, ids=HALF_IDS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_scatter_nd_add_mul_match_onnx_reference(dtype, reduction, data):
    d, idx, upd = data.draw(low_precision_nd_problems(dtype, reduction))
    with np.errstate(all="ignore"):
        expected = run_reference("ScatterND", [d, idx, upd], reduction=reduction)
    with _grouping(data.draw(st.booleans())):
        got = scatter_nd(d, idx, upd, reduction=reduction)
    assert_bits_where_not_nan(got, expected)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", HALF_FLOATS, ids=HALF_IDS)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_grouping_updates_by_region_changes_no_bit(dtype, reduction, data):
    """Grouped by region, every target still sees its updates in index order: the same bits as
    ungrouped, NaNs and signed zeros included (max/min keep onnxruntime's rules for them)."""
    d, idx, upd = data.draw(low_precision_nd_problems(dtype, reduction))
    with _grouping(False):
        ungrouped = scatter_nd(d, idx, upd, reduction=reduction)
    with _grouping(True, chunk=data.draw(st.sampled_from([1, 3, 7, 1 << 20]))):
        grouped = scatter_nd(d, idx, upd, reduction=reduction)
    assert_bits(grouped, ungrouped)


def test_by_region_sorts_by_region_and_keeps_each_targets_order():
    rng = np.random.default_rng(0)
    size = 10_000
    flat = rng.integers(0, size, 50_000).astype(np.intp)
    ids = np.arange(flat.size).astype(np.float32)  # which update each entry is
    grouped, grouped_ids = _common._by_region(flat, ids, size)
    width = 1 << ((size - 1).bit_length() - (_common._REGIONS - 1).bit_length())  # a power of 2
    region = grouped // width
    assert region.max() < _common._REGIONS and width * _common._REGIONS < 2 * size
    assert np.all(np.diff(region) >= 0)  # one region after the other
    for target in rng.choice(flat, 50):  # and each target's updates in their first order
        np.testing.assert_array_equal(grouped_ids[grouped == target], ids[flat == target])
    assert sorted(zip(grouped, grouped_ids)) == sorted(zip(flat, ids))  # nothing lost


def test_big_float16_scatter_nd_add_is_grouped_and_matches_the_ungrouped_kernel():
    """At the size where grouping pays (an 8 MiB float16 output), the kernel takes it."""
    rng = np.random.default_rng(1)
    n = 1 << 22
    assert n * 2 > _common._HALF_GROUPING_MIN_BYTES
    data = rng.standard_normal(n).astype(np.float16)
    idx = rng.integers(0, n // 64, (_common._GROUPING_MIN_UPDATES, 1))  # duplicates galore
    upd = rng.standard_normal(idx.shape[0]).astype(np.float16)
    with mock.patch.object(_common, "_by_region", wraps=_common._by_region) as by_region, \
            mock.patch.object(_common, "_GROUPING_CHUNK", idx.shape[0] // 4):
        grouped = scatter_nd(data, idx, upd, reduction="add")
    assert by_region.call_count == 4  # in chunks, whose sort temporaries stay small
    with _grouping(False):
        assert_bits(grouped, scatter_nd(data, idx, upd, reduction="add"))


@pytest.mark.parametrize("reduction", ["max", "min"])
@pytest.mark.parametrize("dtype", HALF_FLOATS, ids=HALF_IDS)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_max_min_match_onnx_reference_without_nan_or_signed_zero(dtype, reduction, data):
    """max/min compute nothing, so every bit agrees; onnx.reference's rules for NaN and for ties
    of +0.0 and -0.0 are not onnxruntime's (which ours follow: test_scatter_elements.py)."""
    d, idx, upd, axis = data.draw(elements_problems(dtype, "add", specials=False))
    expected = run_reference("ScatterElements", [d, idx, upd], axis=axis, reduction=reduction)
    assert_bits(scatter_elements(d, idx, upd, axis=axis, reduction=reduction), expected)


def test_reference_cases_are_in_the_type_itself():
    """The oracle computes in the half type (not float32 rounded once), or the tests above could
    not fail on a kernel that sums in float32."""
    data = np.array([1024.0], np.float16)
    expected = run_reference("ScatterND", [data, np.zeros((8, 1), np.int64),
                                           np.full(8, 0.25, np.float16)], reduction="add")
    assert expected.dtype == np.float16 and expected[0] == 1024.0
    bf16 = ml_dtypes.bfloat16
    expected = run_reference("ScatterElements", [np.array([256.0], bf16), np.zeros(8, np.int64),
                                                 np.full(8, 0.5, bf16)], reduction="add")
    assert expected.dtype == bf16 and expected[0] == 256.0
