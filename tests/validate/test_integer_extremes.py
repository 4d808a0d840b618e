"""Generated integer scatter data reaches near its type's limits (within what the scatter's
reduction keeps from overflowing), so that a form exact only on small integers fails its proof."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scatter_rewrite as sr
from scatter_rewrite.model_io import deserialize
from scatter_rewrite.validate.arguments import extreme_values
from scatter_rewrite.validate.inputs import plan_validation
from tests.helpers.models import integer_scatter
from tests.helpers.wrong_passes import IntegerSumThroughFloat64


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_add_values_are_large_and_every_sum_stays_in_range(dtype):
    rng = np.random.default_rng(0)
    count = 6
    bound = np.iinfo(dtype).max // (count + 1)
    values = extreme_values((40,), np.dtype(dtype), "add", count, False, rng)
    assert values.dtype == dtype
    assert np.abs(values.astype(object)).max() <= bound  # (the data and all updates in one slot)
    assert np.abs(values.astype(object)).max() >= bound - 8  # near the bound, not small
    assert values.min() < 0 < values.max()


INTEGER_TYPES = [np.int8, np.uint8, np.int16, np.int32, np.uint32, np.int64, np.uint64]


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(INTEGER_TYPES), reduction=st.sampled_from(["none", "add", "mul", "max"]),
       count=st.one_of(st.none(), st.integers(0, 5000)), size=st.integers(0, 12),
       seed=st.integers(0, 2**32 - 1))
def test_no_sum_or_product_a_slot_can_get_overflows(dtype, reduction, count, size, seed):
    """Whatever lands in one slot (the data and every update) stays within the type, and the
    values are never beyond it."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    data = [int(v) for v in extreme_values((size,), np.dtype(dtype), reduction, count, False, rng)]
    updates = [int(v) for v in extreme_values((size,), np.dtype(dtype), reduction, count, True, rng)]
    assert all(info.min <= v <= info.max for v in data + updates)
    if reduction == "add" and data:
        terms = (count if count is not None else 1 << 16) + 1
        assert max(map(abs, data + updates)) * terms <= info.max
    if reduction == "mul" and data:
        largest_update = max(map(abs, updates))
        assert largest_update <= 2
        growth = largest_update ** (count if count is not None else 1 << 16)
        assert max(map(abs, data)) * growth <= info.max or max(map(abs, data)) == 0


def test_plain_scatter_data_holds_the_types_extremes_themselves():
    values = extreme_values((10,), np.dtype(np.int64), "none", None, False,
                            np.random.default_rng(0))
    assert {np.iinfo(np.int64).max, np.iinfo(np.int64).min} <= set(values.tolist())


def test_mul_products_stay_in_range():
    rng = np.random.default_rng(0)
    count = 5
    data = extreme_values((30,), np.dtype(np.int64), "mul", count, False, rng)
    updates = extreme_values((count,), np.dtype(np.int64), "mul", count, True, rng)
    assert np.abs(updates).max() <= 2
    worst = max(abs(int(v)) for v in data) * 2 ** count
    assert worst <= np.iinfo(np.int64).max
    assert max(abs(int(v)) for v in data) > 2 ** 50


def test_unsigned_values_are_not_negative():
    values = extreme_values((30,), np.dtype(np.uint32), "add", 3, False,
                            np.random.default_rng(0))
    assert values.min() >= 0 and values.max() > np.iinfo(np.uint32).max // 4 - 8


def test_the_plan_draws_integer_scatter_data_near_2_to_the_60():
    plan = plan_validation(deserialize(integer_scatter("add")))
    largest = max(abs(int(v)) for v in np.concatenate(
        [plan.inputs["data"].reshape(-1), plan.inputs["updates"].reshape(-1)]))
    # 18 updates and the data may meet in one slot: each within 2**63 / 19, near it.
    assert 2 ** 58 < largest <= np.iinfo(np.int64).max // 19
    assert ((-4 <= plan.inputs["indices"]) & (plan.inputs["indices"] < 4)).all()  # (in range)
    assert plan.inputs["data"].dtype == np.int64


def test_a_sum_exact_only_on_small_integers_is_caught():
    model = integer_scatter("add")
    small = {"data": np.arange(12, dtype=np.int64).reshape(4, 3),
             "indices": np.tile(np.arange(3, dtype=np.int64), (6, 1)) % 4,
             "updates": np.ones((6, 3), np.int64)}
    # On small integers float64 is exact: the proof passes...
    sr.rewrite(model, passes=[IntegerSumThroughFloat64()], inputs=small)
    # ...and on generated ones, which reach past 2**53, it fails.
    with pytest.raises(sr.ValidationError, match="not bit-exact"):
        sr.rewrite(model, passes=[IntegerSumThroughFloat64()])


def test_generation_is_seeded():
    model = deserialize(integer_scatter("add"))
    first, again = plan_validation(model).inputs, plan_validation(model).inputs
    assert all(np.array_equal(first[k], again[k]) for k in first)


def exact_scatter(data: np.ndarray, indices: np.ndarray, updates: np.ndarray,
                  reduction: str) -> np.ndarray:
    """ScatterElements on axis 0 in Python integers (no rounding, no overflow)."""
    out = data.astype(object)
    for (row, column), index in np.ndenumerate(indices):
        target = (index % data.shape[0], column)
        value = int(updates[row, column])
        out[target] = out[target] + value if reduction == "add" else out[target] * value
    return out


def written_or_refused(target: str, reduction: str, dtype: int) -> None:
    """``prepare --target`` on an integer add/mul scatter either refuses, or writes a model exact
    on values near the type's limits (run in onnxruntime where it can run it)."""
    import onnxruntime as ort

    model = integer_scatter(reduction, dtype)
    try:
        written = sr.prepare(model, target=target)
    except sr.ScatterRewriteError:
        return
    inputs = plan_validation(deserialize(model)).inputs
    try:
        session = ort.InferenceSession(written.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
    except Exception:  # (a form for another runtime: its proof ran in onnx.reference)
        return
    (got,) = session.run(None, inputs)
    expected = exact_scatter(inputs["data"], inputs["indices"], inputs["updates"], reduction)
    assert got.astype(object).tolist() == expected.tolist(), (target, reduction, dtype)


def test_rknn_int64_sums_near_the_limits_are_exact_or_not_written():
    """rknn's mask form sums with int64 ReduceSum, which onnxruntime computes inexactly near
    2**60: on generated values its proof must catch that (or an exact form be written)."""
    from onnx import TensorProto

    written_or_refused("rknn", "add", TensorProto.INT64)


@pytest.mark.parametrize("target", ["no-scatter", "rknn", "qnn", "litert"])
@pytest.mark.parametrize("reduction", ["add", "mul"])
def test_int64_sums_and_products_are_written_without_onnxruntimes_rounding_reductions(target,
                                                                                     reduction):
    """onnxruntime's int64 ReduceSum and ReduceProd go through double (2**55 + 1 alone sums to
    2**55): an int64 add/mul is written without them, exact near the limits without validation,
    or refused where its one exact form needs an op the target lacks (rknn: TopK)."""
    import onnxruntime as ort
    from onnx import TensorProto

    model = integer_scatter(reduction, TensorProto.INT64, rows=3, updates=1)
    try:
        written = sr.prepare(model, target=target, validate=False)
    except sr.ConversionError as e:
        assert target == "rknn" and "TopK" in str(e), e
        return
    assert not {n.op_type for n in written.graph.node} & {"ReduceSum", "ReduceProd"}
    inputs = plan_validation(deserialize(model)).inputs
    session = ort.InferenceSession(written.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, inputs)
    expected = exact_scatter(inputs["data"], inputs["indices"], inputs["updates"], reduction)
    assert got.astype(object).tolist() == expected.tolist()


def test_every_target_writes_integer_sums_and_products_exact_near_the_limits():
    from onnx import TensorProto

    from scatter_rewrite.targets import target_names

    for target in target_names():
        for reduction in ("add", "mul"):
            for dtype in (TensorProto.INT32, TensorProto.INT64):
                written_or_refused(target, reduction, dtype)
