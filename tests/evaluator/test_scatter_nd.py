"""ScatterND: differential tests against onnxruntime and onnx.reference."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.equivalence import (
    ADD_MUL_RTOL, assert_bits, assert_kernel_matches, assert_same, assert_same_or_reordered_sum,
)
from tests.helpers.kernel_oracles import (
    FLOATS, INTS, loop_scatter_nd, random_values, run_kernel, run_ort, run_reference,
)
from scatter_rewrite.evaluator import scatter_nd

# What onnxruntime's CPU ScatterND (opset 18) implements, per reduction (no float16 reductions).
ORT_DTYPES = {
    "none": [np.bool_, *INTS, np.float16, *FLOATS, np.str_],
    "add": [np.bool_, *INTS, *FLOATS, np.str_],
    "mul": [np.bool_, *INTS, *FLOATS],
    "max": [*INTS, *FLOATS],
    "min": [*INTS, *FLOATS],
}
ORT_CASES = [(r, np.dtype(t)) for r, ts in ORT_DTYPES.items() for t in ts]


@st.composite
def nd_problems(draw, dtype: np.dtype, reduction: str, max_rank: int = 5):
    """data, indices (int64), updates: unique tuples for "none", duplicates otherwise."""
    rank = draw(st.integers(1, max_rank))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    k = draw(st.integers(0 if reduction != "none" else 1, rank))
    batch = tuple(draw(st.lists(st.integers(0, 3), min_size=0, max_size=2)))
    if not batch and draw(st.booleans()):
        batch = ()  # indices of rank 1: a single tuple, updates of rank r - k
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_slots = int(np.prod(shape[:k]))
    m = int(np.prod(batch))
    if reduction == "none":
        m = min(m, n_slots)
        batch = (m,) if batch else ()
        m = int(np.prod(batch))
        slots = rng.permutation(n_slots)[:m]
    else:
        slots = rng.integers(0, n_slots, m)
    tuples = np.stack(np.unravel_index(slots, shape[:k]), axis=-1).reshape(batch + (k,)) if k else \
        np.zeros(batch + (0,), np.int64)
    neg = rng.random(tuples.shape) < 0.3
    tuples = np.where(neg, tuples - np.array(shape[:k], dtype=np.int64), tuples).astype(np.int64)
    special = reduction in ("max", "min") and draw(st.booleans())
    data = random_values(rng, shape, dtype, special)
    updates = random_values(rng, batch + shape[k:], dtype, special)
    return data, tuples, updates


@pytest.mark.parametrize(("reduction", "dtype"), ORT_CASES, ids=[f"{r}-{t}" for r, t in ORT_CASES])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_matches_onnxruntime(reduction, dtype, data):
    d, idx, upd = data.draw(nd_problems(dtype, reduction))
    expected = run_ort("ScatterND", [d, idx, upd], reduction=reduction)
    got = run_kernel(scatter_nd, [d, idx, upd], reduction=reduction, node_name="n0")
    assert_kernel_matches(expected, got, reduction)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_float32_matches_onnxruntime(reduction, data):
    d, idx, upd = data.draw(nd_problems(np.dtype(np.float32), reduction))
    expected = run_ort("ScatterND", [d, idx, upd], reduction=reduction)
    got = scatter_nd(d, idx, upd, reduction=reduction)
    assert_kernel_matches(expected, got, reduction)


REFERENCE_CASES = [
    ("none", np.complex64), ("add", np.complex128), ("mul", np.complex64),
    ("none", ml_dtypes.bfloat16), ("max", np.bool_), ("min", np.bool_),
]


@pytest.mark.parametrize(("reduction", "dtype"), REFERENCE_CASES,
                         ids=[f"{r}-{np.dtype(t)}" for r, t in REFERENCE_CASES])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_matches_onnx_reference(reduction, dtype, data):
    d, idx, upd = data.draw(nd_problems(np.dtype(dtype), reduction, max_rank=3))
    expected = run_reference("ScatterND", [d, idx, upd], reduction=reduction)
    got = scatter_nd(d, idx, upd, reduction=reduction)
    assert_same_or_reordered_sum(expected.astype(got.dtype), got, reduction)


@pytest.mark.parametrize("reduction", ["max", "min"])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_low_precision_max_min_follow_onnxruntime_fold(reduction, dtype, data):
    d, idx, upd = data.draw(nd_problems(np.dtype(dtype), reduction, max_rank=3))
    got = scatter_nd(d, idx, upd, reduction=reduction)
    assert_bits(got, loop_scatter_nd(d, idx, upd, reduction=reduction))


@pytest.mark.parametrize("reduction", ["add", "mul"])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_low_precision_add_mul_round_after_each_update(reduction, dtype, data):
    """The loop's scalar arithmetic is in the type itself, one rounding per update."""
    d, idx, upd = data.draw(nd_problems(np.dtype(dtype), reduction, max_rank=3))
    got = scatter_nd(d, idx, upd, reduction=reduction)
    assert_bits(got, loop_scatter_nd(d, idx, upd, reduction=reduction))


def test_duplicates_with_reduction_none_last_write_wins_like_onnxruntime():
    rng = np.random.default_rng(0)
    for shape, k in [((40,), 1), ((6, 5), 1), ((6, 20), 1), ((4, 5, 3), 2)]:
        data = np.zeros(shape, np.float32)
        idx = np.stack([rng.integers(-n, n, 500) for n in shape[:k]], axis=-1)
        upd = np.arange(500 * int(np.prod(shape[k:])), dtype=np.float32).reshape((500,) + shape[k:])
        got = scatter_nd(data, idx, upd)
        assert_same(got, run_ort("ScatterND", [data, idx, upd]))
        assert_same(got, loop_scatter_nd(data, idx, upd))


def test_scalar_update_and_whole_data_slices():
    data = np.arange(6, dtype=np.int64).reshape(2, 3)
    assert_same(scatter_nd(data, np.array([1, -1]), np.array(9)), np.array([[0, 1, 2], [3, 4, 9]]))
    whole = np.ones((3, 2, 3), np.int64)  # k == 0: every update is all of data
    assert_same(scatter_nd(data, np.zeros((3, 0), np.int64), whole, reduction="add"),
                run_ort("ScatterND", [data, np.zeros((3, 0), np.int64), whole], reduction="add"))


def test_int32_indices_accepted():
    data = np.zeros(5, np.float32)
    got = scatter_nd(data, np.array([[4], [-5]], np.int32), np.array([1, 2], np.float32))
    assert_same(got, np.array([2, 0, 0, 0, 1], np.float32))


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_large_element_scatter_matches_onnxruntime(reduction):
    rng = np.random.default_rng(2)
    data = rng.standard_normal((300, 400)).astype(np.float32)
    n = 50_000
    if reduction == "none":
        slots = rng.permutation(data.size)[:n]
    else:
        slots = rng.integers(0, data.size, n)
    idx = np.stack(np.unravel_index(slots, data.shape), axis=-1).astype(np.int64)
    upd = rng.standard_normal(n).astype(np.float32)
    upd[rng.random(n) < 0.01] = np.nan
    got = scatter_nd(data, idx, upd, reduction=reduction)
    expected = run_ort("ScatterND", [data, idx, upd], reduction=reduction)
    if reduction == "add":
        np.testing.assert_allclose(got, expected, rtol=ADD_MUL_RTOL[np.dtype(np.float32)], equal_nan=True)
    else:
        assert_bits(got, expected)
