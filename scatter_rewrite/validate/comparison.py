"""Comparing the original's outputs with the rewritten model's.

Exact (bit for bit, NaN positions and zero signs included) for integers, strings and wherever no
float arithmetic was reordered. Where a rewrite may reorder float additions or multiplications (a
float add/mul scatter lowered, folded or moved; an op replaced by its function body: the plan's
``float_tolerance``), a float output first gets the cheap check, within :data:`FLOAT_TOLERANCE`
of the original's; where that fails, :func:`judge_rounding` decides against a float64 evaluation of
the original: the rewritten model may be off by what the original's own rounding allows, never
refused for being more accurate than the original. A user's ``--rtol/--atol`` replaces both, for
every float output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "BFLOAT16_TOLERANCE", "compare", "compare_outputs", "FLOAT_TOLERANCE", "judge_rounding",
    "judgeable", "tolerance_said",
]


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
    """NumPy's float and complex types, and ml_dtypes' floats (bfloat16, float8, float4: kind
    "V")."""
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
    # (== on an ml_dtypes float would take NaN for a difference, -0.0 for +0.0)
    if not _is_float(a.dtype):
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
        # inf - inf is NaN, dropped: equal infinities differ by nothing
        with np.errstate(invalid="ignore"):
            diff = np.abs(_wide(ea) - _wide(eb))
        diff = diff[~np.isnan(diff)]
        if diff.size:
            worst = max(worst, float(diff.max()))
    return worst


def _within_tolerance(e: np.ndarray, a: np.ndarray, rtol: float, atol: float) -> bool:
    return all(
        np.allclose(_wide(ab), _wide(eb), rtol=rtol, atol=atol, equal_nan=True)
        for eb, ab in _blocks(e, a)
    )


def _tolerance(dtype: np.dtype) -> tuple[float, float] | None:
    if dtype.name == "bfloat16":
        return BFLOAT16_TOLERANCE
    return FLOAT_TOLERANCE.get(dtype)


def tolerance_said(outputs: list[Any]) -> str:
    """The tolerances of the float types among ``outputs`` (the others are compared exactly)."""
    dtypes = {o.dtype: None for o in outputs if isinstance(o, np.ndarray)}
    said = [
        f"{d.name}: rtol={t[0]}, atol={t[1]}" for d in dtypes if (t := _tolerance(d)) is not None
    ]
    return (
        ("float outputs within " + ", ".join(said) + "; everything else exact")
        if said
        else "exact (bit for bit)"
    )


def _as_text(strings: np.ndarray) -> np.ndarray:
    """A string tensor as an object array of ``str`` (ONNX strings are UTF-8)."""
    decode = np.frompyfunc(lambda x: x.decode() if isinstance(x, bytes) else str(x), 1, 1)
    return np.asarray(decode(strings), dtype=object) if strings.size else strings.astype(object)


def compare(names: list[str], expected: list[Any], actual: list[Any], float_tolerance: bool,
            tolerance: tuple[float, float] | None = None) -> tuple[dict[str, float], list[str]]:
    """Per-output max |difference|, and a list of failures (empty when they agree). ``tolerance``:
    the user's (rtol, atol), for every float output, wherever it comes from."""
    diffs, failures = compare_outputs(names, expected, actual, float_tolerance, tolerance)
    return diffs, list(failures.values())


def compare_outputs(names: list[str], expected: list[Any], actual: list[Any], float_tolerance: bool,
                    tolerance: tuple[float, float] | None = None) -> tuple[dict, dict[str, str]]:
    """As :func:`compare`, with the failures by output name."""
    diffs, failures = {}, {}
    for name, e, a in zip(names, expected, actual):
        e, a = np.asarray(e), np.asarray(a)
        # Strings: np.str_/np.bytes_ arrays from onnx.reference, object arrays (str) from
        # onnxruntime.
        if e.dtype.kind in "OSU" and a.dtype.kind in "OSU":
            e, a = _as_text(e), _as_text(a)
        if e.shape != a.shape or e.dtype != a.dtype:
            failures[name] = (f"output '{name}': expected {e.dtype}{list(e.shape)}, "
                              f"got {a.dtype}{list(a.shape)}")
            continue
        diffs[name] = _max_abs_diff(e, a)
        if tolerance is not None and _is_float(e.dtype):
            tol = tolerance
        else:
            tol = _tolerance(e.dtype) if float_tolerance else None
        if tol is not None:
            rtol, atol = tol
            if not _within_tolerance(e, a, rtol, atol):
                failures[name] = (f"output '{name}': max |difference| {diffs[name]:.3g} "
                                  f"exceeds rtol={rtol}, atol={atol}")
        elif _bit_exact_mismatch(e, a):
            failures[name] = f"output '{name}': not bit-exact (max |difference| {diffs[name]:.3g})"
    return diffs, failures


# Where the original's own error is zero (it happened to round to the float64 result), a rewrite
# summing in another order may still be a few roundings of the terms' magnitude away: a sum of n
# terms in any order is within (n - 1) u sum|x| of the exact sum, typically within about
# u sum|x| (what onnxruntime's own sequential float32 kernel shows on 20,000 terms per slot).
ROUNDINGS_OF_MAGNITUDE = 8
ORIGINAL_ERROR_FACTOR = 2  # the rewritten model may be off by twice what the original is


def judgeable(array: Any) -> bool:
    """Whether :func:`judge_rounding` can judge an output of this kind: a real float array."""
    return isinstance(array, np.ndarray) and _is_float(array.dtype) and array.dtype.kind != "c"


def judge_rounding(name: str, original: np.ndarray, rewritten: np.ndarray, exact: np.ndarray,
                   magnitude: np.ndarray,
                   computed_in: Sequence[np.dtype] = ()) -> tuple[str | None, str]:
    """Judge a float output by the arithmetic: ``exact`` is the original computed in float64,
    ``magnitude`` the same on the absolute values of its inputs and weights (for a sum, the sum of
    its terms' magnitudes). Each element of the rewritten model may be as far from ``exact`` as
    :data:`ORIGINAL_ERROR_FACTOR` times the original's own error there, plus
    :data:`ROUNDINGS_OF_MAGNITUDE` unit roundoffs of the output type times the magnitude, or of the
    coarsest of the ``computed_in`` float types its sums are computed in (a float16 sum cast to a
    float32 output). Where the original is not finite (NaN, an infinity), the rewritten model must
    be the same.

    Returns (the failure or None, what was measured, for the summary)."""
    if exact.shape != original.shape or magnitude.shape != original.shape:
        return (f"output '{name}': the float64 evaluation of the original gave shape "
                f"{list(exact.shape)}, not {list(original.shape)}"), ""
    coarsest = max([original.dtype, *(t for t in computed_in if _is_float(t) and t.kind != "c")],
                   key=lambda t: float(_finfo(t).eps))
    u = float(_finfo(coarsest).eps) / 2
    o, r, x = _wide(original), _wide(rewritten), exact.astype(np.float64)
    m = np.abs(magnitude.astype(np.float64))
    m = np.where(np.isfinite(m), np.maximum(m, np.abs(x)), np.abs(x))
    finite = np.isfinite(o) & np.isfinite(x)
    with np.errstate(invalid="ignore", over="ignore"):
        same_non_finite = np.where(np.isnan(o), np.isnan(r), o == r)
        if not np.all(np.where(np.isfinite(o), np.isfinite(r), same_non_finite)):
            return f"output '{name}': NaN or infinity where the original has another value", ""
        error_o = np.where(finite, np.abs(o - x), 0.0)
        error_r = np.where(finite, np.abs(r - x), 0.0)
        rounding = ROUNDINGS_OF_MAGNITUDE * u * np.where(finite, m, 0.0)
        allowed = ORIGINAL_ERROR_FACTOR * error_o + rounding
        excess = np.where(np.isnan(error_r), np.inf, error_r - allowed)
    measured = (f"the rewritten model off by up to {float(error_r.max(initial=0.0)):.3g}, "
                f"the original by up to {float(error_o.max(initial=0.0)):.3g}")
    if not excess.size or float(excess.max()) <= 0:
        return None, measured
    at = np.unravel_index(int(np.argmax(excess)), excess.shape)
    return (
        f"output '{name}' at {list(map(int, at))}: {float(r[at]):.9g} against a float64 "
        f"evaluation's {float(x[at]):.9g} is off by {float(error_r[at]):.3g}, beyond what the "
        f"original's own rounding allows there ({float(allowed[at]):.3g}: {ORIGINAL_ERROR_FACTOR} "
        f"x its error {float(error_o[at]):.3g} + {ROUNDINGS_OF_MAGNITUDE} roundings of "
        f"{coarsest.name} on the terms' magnitude {float(m[at]):.3g})"
    ), measured


def _finfo(dtype: np.dtype):
    if dtype.kind == "V" or dtype.name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.finfo(dtype)
    return np.finfo(dtype)
