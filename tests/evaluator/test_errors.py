"""Errors, validation and input immutability shared by the kernels."""

from __future__ import annotations

import numpy as np
import pytest

from scatter_rewrite.errors import IndexOutOfRangeError, InvalidModelError
from scatter_rewrite.evaluator import scatter, scatter_elements, scatter_nd


@pytest.mark.parametrize("bad", [3, -4, 100])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_scatter_elements_out_of_range(bad, dtype):
    data = np.zeros((2, 3), np.float32)
    idx = np.array([[0, bad]], dtype)
    upd = np.ones((1, 2), np.float32)
    with pytest.raises(IndexOutOfRangeError) as err:
        scatter_elements(data, idx, upd, axis=1, node_name="se_7")
    msg = str(err.value)
    assert "\n" not in msg
    assert "ScatterElements node 'se_7'" in msg and f"index {bad} " in msg and "[-3, 2]" in msg
    with pytest.raises(IndexOutOfRangeError, match=r"^Scatter node 'old': index"):
        scatter(data, idx, upd, axis=1, node_name="old")


def test_scatter_nd_out_of_range_names_column():
    data = np.zeros((2, 3), np.float32)
    with pytest.raises(IndexOutOfRangeError,
                       match=r"^ScatterND node 'nd': index -3 is out of range \[-2, 1\] for dimension 0"):
        scatter_nd(data, np.array([[-3, 0]]), np.ones(1, np.float32), node_name="nd")
    with pytest.raises(IndexOutOfRangeError, match=r"index 3 .*\[-3, 2\] for dimension 1"):
        scatter_nd(data, np.array([[1, 3]]), np.ones(1, np.float32), node_name="nd")


def test_unnamed_node():
    with pytest.raises(IndexOutOfRangeError, match="<unnamed>"):
        scatter_elements(np.zeros(2), np.array([2]), np.zeros(1))


@pytest.mark.parametrize(("data", "indices", "updates", "kwargs", "message"), [
    (np.zeros((2, 3)), np.zeros((2, 3), np.int64), np.zeros((2, 2)), {}, "updates shape"),
    (np.zeros((2, 3)), np.zeros((3,), np.int64), np.zeros((3,)), {}, "rank"),
    (np.zeros((2, 3)), np.zeros((1, 1), np.int64), np.zeros((1, 1)), {"axis": 2}, "axis=2"),
    (np.zeros((2, 3)), np.zeros((1, 1), np.int64), np.zeros((1, 1)), {"axis": -3}, "axis=-3"),
    (np.zeros((2, 3)), np.zeros((3, 1), np.int64), np.zeros((3, 1)), {"axis": 1}, "dimension 0"),
    (np.zeros((2, 3)), np.zeros((1, 1), np.float32), np.zeros((1, 1)), {}, "int32 or int64"),
    (np.zeros((2, 3)), np.zeros((1, 1), np.int64), np.zeros((1, 1), np.float32), {}, "dtype"),
    (np.zeros((2, 3)), np.zeros((1, 1), np.int64), np.zeros((1, 1)), {"reduction": "sum"}, "reduction"),
    (np.array(["a"], object), np.zeros(1, np.int64), np.array(["b"], object), {"reduction": "mul"}, "string"),
    (np.float32(1), np.zeros((), np.int64), np.float32(2), {}, "rank >= 1"),
])
def test_scatter_elements_invalid(data, indices, updates, kwargs, message):
    with pytest.raises(InvalidModelError, match=message):
        scatter_elements(data, indices, updates, **kwargs, node_name="se")


def test_more_indices_than_data_along_axis_is_fine():
    got = scatter_elements(np.zeros((2, 2)), np.zeros((2, 5), np.int64), np.ones((2, 5)), axis=1,
                           reduction="add")
    np.testing.assert_array_equal(got, [[5, 0], [5, 0]])


@pytest.mark.parametrize(("data", "indices", "updates", "message"), [
    (np.zeros((2, 3)), np.zeros((1, 2), np.int64), np.zeros((1, 3)), "updates shape"),
    (np.zeros((2, 3)), np.zeros((1, 3), np.int64), np.zeros((1,)), r"exceeds data rank"),
    (np.zeros((2, 3)), np.zeros((), np.int64), np.zeros(()), "rank >= 1"),
    (np.zeros(()), np.zeros((1, 0), np.int64), np.zeros((1,)), "rank >= 1"),
    (np.zeros((2, 3)), np.zeros((1, 1), np.uint8), np.zeros((1, 3)), "int32 or int64"),
])
def test_scatter_nd_invalid(data, indices, updates, message):
    with pytest.raises(InvalidModelError, match=message):
        scatter_nd(data, indices, updates, node_name="nd")


def test_empty_indices_return_a_copy():
    data = np.arange(6.0).reshape(2, 3)
    got = scatter_elements(data, np.zeros((0, 3), np.int64), np.zeros((0, 3)), reduction="max")
    np.testing.assert_array_equal(got, data)
    assert got is not data and not np.shares_memory(got, data)
    got = scatter_nd(data, np.zeros((0, 2), np.int64), np.zeros((0,)))
    np.testing.assert_array_equal(got, data)
    assert not np.shares_memory(got, data)


def test_inputs_not_mutated_and_not_aliased():
    rng = np.random.default_rng(0)
    data = rng.standard_normal(10)
    data_f = np.asfortranarray(rng.standard_normal((4, 5)))
    idx = np.array([1, 1, -1])
    for reduction in ["none", "add", "mul", "max", "min"]:
        for d, i, u, f in [
            (data, idx, rng.standard_normal(3), lambda d, i, u, r: scatter_elements(d, i, u, reduction=r)),
            (data, idx[:, None], rng.standard_normal(3), lambda d, i, u, r: scatter_nd(d, i, u, reduction=r)),
            (data_f, np.zeros((4, 2), np.int64), np.ones((4, 2)),
             lambda d, i, u, r: scatter_elements(d, i, u, axis=1, reduction=r)),
        ]:
            copies = [d.copy(), i.copy(), u.copy()]
            out = f(d, i, u, reduction)
            for a, c in zip([d, i, u], copies):
                np.testing.assert_array_equal(a, c, strict=True)
            assert not any(np.shares_memory(out, a) for a in (d, i, u))
