"""Assertions that two results are the same, one name per meaning:

- ``assert_same``: exactly equal, shape and dtype included, NaNs in the same places.
- ``assert_bits``: bit for bit, signed zeros and NaN payloads included.
- ``assert_same_or_reordered_sum``: exact, except float add/mul, which may sum in another order
  (within ``ADD_MUL_RTOL``).
- ``assert_kernel_matches``: an evaluator kernel against onnxruntime: ``assert_same_or_reordered_sum``,
  and bit for bit for float max/min (no arithmetic: every bit is one onnxruntime keeps).
- ``assert_validation_accepts``: what validation's own comparison accepts
  (``scatter_rewrite.validate.compare``), for results of rewritten models.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

# Tolerances for float add/mul, whose summation order may differ from onnxruntime's.
ADD_MUL_RTOL = {
    np.dtype(np.float32): 1e-5,
    np.dtype(np.float64): 1e-12,
    np.dtype(np.complex64): 1e-5,
    np.dtype(np.complex128): 1e-12,
    np.dtype(np.float16): 1e-2,
    "bfloat16": 1e-2,
}


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    """Exact equality, dtype and shape included, NaNs in the same places."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype or (actual.dtype.kind in "OUS" and expected.dtype.kind in "OUS"), (
        actual.dtype, expected.dtype)
    if actual.dtype.kind in "OUS":
        assert actual.tolist() == expected.tolist()
        return
    np.testing.assert_array_equal(actual, expected, strict=True)


def assert_bits(got: np.ndarray, expected: np.ndarray) -> None:
    """Bit-for-bit float equality: signed zeros and NaN payloads included."""
    assert got.dtype == expected.dtype
    view = {2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    np.testing.assert_array_equal(got.view(view), expected.view(view))


def assert_same_or_reordered_sum(expected: np.ndarray, got: np.ndarray, reduction: str) -> None:
    """Exact, except float add/mul which may sum in another order (named tolerances)."""
    is_float = got.dtype.kind in "fc" or got.dtype == ml_dtypes.bfloat16
    if reduction in ("add", "mul") and is_float:
        assert got.dtype == expected.dtype
        rtol = ADD_MUL_RTOL["bfloat16" if got.dtype == ml_dtypes.bfloat16 else got.dtype]
        wide = np.complex128 if got.dtype.kind == "c" else np.float64
        np.testing.assert_allclose(got.astype(wide), expected.astype(wide),
                                   rtol=rtol, atol=rtol, equal_nan=True)
    else:
        assert_same(got, expected)


def assert_kernel_matches(expected: np.ndarray, got: np.ndarray, reduction: str) -> None:
    assert_same_or_reordered_sum(expected, got, reduction)
    if reduction in ("max", "min") and got.dtype.kind == "f":
        assert_bits(got, expected)


def assert_validation_accepts(expected, actual, float_reduction: bool) -> None:
    """Each output as validation judges a rewrite: exact, or within its float bound for a float
    reduction (``scatter_rewrite.validate.compare``)."""
    from scatter_rewrite.validate import compare

    names = [f"out{i}" for i in range(len(expected))]
    _, failures = compare(names, list(expected), list(actual), float_reduction)
    assert not failures, failures
