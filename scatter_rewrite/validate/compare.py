"""Comparing the original's outputs with the rewritten model's.

outputs of a model holding a float add/mul scatter are compared within :data:`FLOAT_TOLERANCE`,
because a lowering may sum in another order. Where onnxruntime cannot run the original (an invalid
deprecated ``Scatter``, a reduction its CPU kernel lacks) or the rewritten model (a kernel it lacks),
both are evaluated by ``onnx.reference`` with our NumPy scatter kernels and compared there, and the
model onnxruntime does run is compared with its own onnx.reference results within the float
tolerance (see :func:`validate`); the result says so. onnxruntime's outputs are compared as the
"""

from __future__ import annotations

from typing import Any

import numpy as np


# (rtol, atol) for float outputs of models with a float add/mul scatter: a few ulps of the partial
# sums' magnitude. Everything else must be bit-exact.
FLOAT_TOLERANCE = {
    np.dtype(np.float16): (1e-2, 1e-2),
    np.dtype(np.float32): (1e-5, 1e-5),
    np.dtype(np.float64): (1e-12, 1e-12),
}
BFLOAT16_TOLERANCE = (4e-2, 4e-2)


_BLOCK = 1 << 20  # elements compared at a time: temporaries stay ~8 MiB whatever the output's size


def _blocks(e: np.ndarray, a: np.ndarray):
    """The two arrays as matching flat blocks (no copy of either whole array)."""
    e, a = e.reshape(-1), a.reshape(-1)
    for start in range(0, max(e.size, 1), _BLOCK):
        yield e[start:start + _BLOCK], a[start:start + _BLOCK]


def _wide(x: np.ndarray) -> np.ndarray:
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def _is_float(dtype: np.dtype) -> bool:
    """NumPy's float and complex types, and ml_dtypes' floats (bfloat16, float8, float4: kind "V")."""
    if dtype.kind in "fc":
        return True
    if dtype.kind != "V":
        return False
    import ml_dtypes

    try:
        ml_dtypes.finfo(dtype)
    except (TypeError, ValueError):  # int4, uint4, ...
        return False
    return True


def _bit_exact_mismatch(a: np.ndarray, b: np.ndarray) -> bool:
    """Different values, NaN positions or zero signs (NaN payloads may differ)."""
    if not _is_float(a.dtype):  # (== on an ml_dtypes float would take NaN for a difference, -0.0 for +0.0)
        return not np.array_equal(a, b)
    for ea, eb in _blocks(a, b):
        af, bf = _wide(ea), _wide(eb)
        nan_a = np.isnan(af)
        if not np.array_equal(nan_a, np.isnan(bf)):
            return True
        ok = ~nan_a
        if not np.array_equal(af[ok], bf[ok]):
            return True
        if a.dtype.kind != "c" and not np.array_equal(np.signbit(af[ok]), np.signbit(bf[ok])):
            return True
    return False


def _max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    if a.dtype == object or a.dtype == np.bool_ or a.size == 0:
        return 0.0 if np.array_equal(a, b) else float("inf")
    worst = 0.0
    for ea, eb in _blocks(a, b):
        with np.errstate(invalid="ignore"):  # inf - inf is NaN, dropped: equal infinities differ by nothing
            diff = np.abs(_wide(ea) - _wide(eb))
        diff = diff[~np.isnan(diff)]
        if diff.size:
            worst = max(worst, float(diff.max()))
    return worst


def _within_tolerance(e: np.ndarray, a: np.ndarray, rtol: float, atol: float) -> bool:
    return all(np.allclose(_wide(ab), _wide(eb), rtol=rtol, atol=atol, equal_nan=True) for eb, ab in _blocks(e, a))


def _tolerance(dtype: np.dtype) -> tuple[float, float] | None:
    if dtype.name == "bfloat16":
        return BFLOAT16_TOLERANCE
    return FLOAT_TOLERANCE.get(dtype)


def _tolerance_said(outputs: list[Any]) -> str:
    """The tolerances of the float types among ``outputs`` (the others are compared exactly)."""
    dtypes = {o.dtype: None for o in outputs if isinstance(o, np.ndarray)}
    said = [f"{d.name}: rtol={t[0]}, atol={t[1]}" for d in dtypes if (t := _tolerance(d)) is not None]
    return ("float outputs within " + ", ".join(said) + "; everything else exact") if said else "exact (bit for bit)"


def _as_text(strings: np.ndarray) -> np.ndarray:
    """A string tensor as an object array of ``str`` (ONNX strings are UTF-8)."""
    decode = np.frompyfunc(lambda x: x.decode() if isinstance(x, bytes) else str(x), 1, 1)
    return np.asarray(decode(strings), dtype=object) if strings.size else strings.astype(object)


def compare(names: list[str], expected: list[Any], actual: list[Any], float_tolerance: bool) -> tuple[dict[str, float], list[str]]:
    """Per-output max |difference|, and a list of failures (empty when they agree)."""
    diffs, failures = {}, []
    for name, e, a in zip(names, expected, actual):
        e, a = np.asarray(e), np.asarray(a)
        if e.dtype.kind in "OSU" and a.dtype.kind in "OSU":  # strings: np.str_/np.bytes_ arrays from
            e, a = _as_text(e), _as_text(a)  # onnx.reference, object arrays (str) from onnxruntime
        if e.shape != a.shape or e.dtype != a.dtype:
            failures.append(f"output '{name}': expected {e.dtype}{list(e.shape)}, got {a.dtype}{list(a.shape)}")
            continue
        diffs[name] = _max_abs_diff(e, a)
        tol = _tolerance(e.dtype) if float_tolerance else None
        if tol is not None:
            rtol, atol = tol
            if not _within_tolerance(e, a, rtol, atol):
                failures.append(f"output '{name}': max |difference| {diffs[name]:.3g} exceeds rtol={rtol}, atol={atol}")
        elif _bit_exact_mismatch(e, a):
            failures.append(f"output '{name}': not bit-exact (max |difference| {diffs[name]:.3g})")
    return diffs, failures

