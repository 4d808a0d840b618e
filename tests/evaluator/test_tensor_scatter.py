"""TensorScatter (opset 24): linear and circular modes against onnx.reference and onnxruntime."""

from __future__ import annotations

import importlib
from unittest import mock

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.equivalence import assert_same
from tests.helpers.kernel_oracles import random_values, run_ort, run_reference
from scatter_rewrite.errors import IndexOutOfRangeError, InvalidModelError
from scatter_rewrite.evaluator import tensor_scatter

# The package re-exports the function under the module's name: reach the module itself.
tensor_scatter_module = importlib.import_module("scatter_rewrite.evaluator.tensor_scatter")

DTYPES = [np.float32, np.float16, np.int64, np.uint8, np.bool_, np.str_, ml_dtypes.bfloat16]


@st.composite
def ts_problems(draw, mode: str):
    rank = draw(st.integers(2, 5))
    shape = list(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    axis = draw(st.integers(-rank + 1, rank - 1).filter(lambda a: a % rank != 0))
    ax = axis % rank
    shape[ax] = draw(st.integers(1, 6))
    max_len = shape[ax]
    seq_len = draw(st.integers(0, max_len))
    ushape = list(shape)
    ushape[ax] = seq_len
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    batch = shape[0]
    if not draw(st.booleans()):
        starts = None
    elif mode == "linear":
        starts = rng.integers(0, max_len - seq_len, batch, endpoint=True)
    else:
        starts = rng.integers(0, 2 * max_len, batch)
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    past = random_values(rng, tuple(shape), dtype, special=False)
    update = random_values(rng, tuple(ushape), dtype, special=False)
    return past, update, starts, axis


@pytest.mark.parametrize("mode", ["linear", "circular"])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_matches_onnx_reference(mode, data):
    past, update, starts, axis = data.draw(ts_problems(mode))
    inputs = [past, update] if starts is None else [past, update, starts]
    copies = [a.copy() for a in inputs]
    expected = run_reference("TensorScatter", inputs, opset=24, axis=axis, mode=mode)
    with _window_path(data):
        got = tensor_scatter(past, update, starts, axis=axis, mode=mode, node_name="n0")
    assert got.dtype == past.dtype
    assert_same(got, expected.astype(past.dtype))
    for a, c in zip(inputs, copies):
        assert_same(a, c)


@pytest.mark.parametrize("mode", ["linear", "circular"])
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_matches_onnxruntime(mode, data):
    past, update, starts, axis = data.draw(ts_problems(mode))
    if past.dtype.kind in "US" or past.dtype == ml_dtypes.bfloat16 or 0 in update.shape:
        return  # not what onnxruntime's TensorScatter takes; covered by onnx.reference above
    inputs = [past, update] if starts is None else [past, update, starts]
    expected = run_ort("TensorScatter", inputs, opset=24, axis=axis, mode=mode)
    with _window_path(data):
        got = tensor_scatter(past, update, starts, axis=axis, mode=mode)
    assert_same(got, expected)


def _window_path(data):
    """Ragged windows go one slice per batch entry from _SLICE_LOOP_MIN_SEQ steps on, else by one
    fancy assignment: the shapes drawn here are short, so draw which path they take."""
    threshold = data.draw(st.sampled_from([1, tensor_scatter_module._SLICE_LOOP_MIN_SEQ]))
    return mock.patch.object(tensor_scatter_module, "_SLICE_LOOP_MIN_SEQ", threshold)


def test_circular_wraps_and_linear_window():
    past = np.zeros((2, 5), np.int64)
    update = np.array([[1, 2, 3], [4, 5, 6]])
    got = tensor_scatter(past, update, np.array([3, 1]), axis=1, mode="circular")
    assert_same(got, np.array([[3, 0, 0, 1, 2], [0, 4, 5, 6, 0]]))  # 3, 4, then wraps to 0
    got = tensor_scatter(past, update, axis=-1)  # no write_indices: start at 0
    assert_same(got, np.array([[1, 2, 3, 0, 0], [4, 5, 6, 0, 0]]))


def test_strings_are_not_truncated():
    past = np.array([["a", "b", "c"]])
    got = tensor_scatter(past, np.array([["longer"]]), np.array([1]), axis=1)
    assert got.tolist() == [["a", "longer", "c"]]
    got = tensor_scatter(past.astype(object), np.array([["longer"]], dtype=object), axis=1)
    assert got.dtype == object and got.tolist() == [["longer", "b", "c"]]


def test_write_index_out_of_range():
    past = np.zeros((2, 5, 3), np.float32)
    update = np.ones((2, 3, 3), np.float32)
    message = r"TensorScatter node 'kv'.*write_indices\[1\]=3.*\[0, 2\]"
    with pytest.raises(IndexOutOfRangeError, match=message):
        tensor_scatter(past, update, np.array([0, 3]), axis=1, node_name="kv")
    with pytest.raises(IndexOutOfRangeError, match=r"write_indices\[0\]=-1"):
        tensor_scatter(past, update, np.array([-1, 0]), axis=1, mode="circular", node_name="kv")


@pytest.mark.parametrize(("past_shape", "update_shape", "kwargs", "message"), [
    ((2, 5, 3), (2, 6, 3), {"axis": 1}, "exceeds"),
    ((2, 5, 3), (2, 2, 4), {"axis": 1}, "dimension 2"),
    ((2, 5, 3), (2, 2, 3), {"axis": 0}, "batch"),
    ((2, 5, 3), (2, 2, 3), {"axis": 3}, "out of range"),
    ((5,), (2,), {"axis": 0}, "rank >= 2"),
    ((2, 5, 3), (2, 2, 3), {"axis": 1, "mode": "ring"}, "mode"),
])
def test_invalid(past_shape, update_shape, kwargs, message):
    with pytest.raises(InvalidModelError, match=message):
        tensor_scatter(np.zeros(past_shape), np.zeros(update_shape), **kwargs, node_name="kv")


def test_write_indices_shape_and_dtype():
    past, update = np.zeros((2, 5)), np.zeros((2, 1))
    with pytest.raises(InvalidModelError, match="shape"):
        tensor_scatter(past, update, np.array([0, 1, 2]), axis=1)
    with pytest.raises(InvalidModelError, match="dtype"):
        tensor_scatter(past, update, np.array([0.0, 1.0]), axis=1)
