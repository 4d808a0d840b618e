"""The user's validation inputs (``--inputs X.npz``, ``inputs=``) and tolerance (``rtol``/``atol``),
checked against the model before any work.
"""

from __future__ import annotations

import os

import numpy as np
import onnx_ir as ir

from scatter_rewrite.errors import OptionError, ValidationError
from scatter_rewrite.said import param, said
from scatter_rewrite.validate.engines import first_line
from scatter_rewrite.validate.index_paths import numpy_dtype

__all__ = ["checked_user_inputs", "load_inputs", "user_tolerance"]


def checked_user_inputs(graph_inputs, inputs, dim_sizes) -> tuple[dict, list[str]]:
    """The user's inputs (--inputs) by model input, checked against what the model declares, and
    the plan's notes about them."""
    missing = [v.name for v in graph_inputs if v.name not in inputs]
    if missing:
        raise ValidationError(
            said(param("inputs"), f" lacks the model input(s) {', '.join(missing)}; add them"))
    given = {v.name: np.asarray(inputs[v.name]) for v in graph_inputs}
    for v in graph_inputs:
        _check_user_input(v, given[v.name], dict(dim_sizes or {}))
    extra = sorted(set(inputs) - set(given))
    return given, ["user inputs"] + (
        [said("entries of ", param("inputs"), " that are not model inputs were ignored: "
              f"{', '.join(extra)}")]
        if extra
        else []
    )


def user_tolerance(rtol: float | None, atol: float | None) -> tuple[float, float] | None:
    """(rtol, atol) from the user's ``--rtol``/``--atol`` (None: neither given); OptionError for a
    bound that is negative or not a number."""
    if rtol is None and atol is None:
        return None
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None and not (np.isfinite(value) and value >= 0):
            raise OptionError(said(param(name, value), ": a tolerance is a finite number >= 0"),
                              parameter=name)
    return (float(rtol or 0.0), float(atol or 0.0))


def _check_user_input(value: ir.Value, array: np.ndarray, fixed: dict[str, int]) -> None:
    """A user's input (--inputs) has the dtype, rank and static sizes the model declares for it
    (and the sizes a pass fixes symbolic dimensions to); ValidationError saying which otherwise,
    before either model runs (onnxruntime would refuse it; the reference evaluator might not)."""
    def described(dtype, shape) -> str:
        return f"{dtype} [{', '.join(str(d) for d in shape)}]"

    expected_dtype = numpy_dtype(value.dtype) if value.dtype is not None else None
    shape = value.shape
    wrong = expected_dtype is not None and array.dtype != expected_dtype
    if shape is not None:
        wrong |= array.ndim != len(shape)
        for have, want in zip(array.shape, shape):
            if isinstance(want, int):
                wrong |= have != want
            elif want is not None and want.value is not None and str(want) in fixed:
                wrong |= have != fixed[str(want)]
    if wrong:
        declared = (
            described(expected_dtype or "any dtype", shape)
            if shape is not None
            else str(expected_dtype)
        )
        fixes = f" (with {', '.join(f'{k}={n}' for k, n in fixed.items())})" if fixed else ""
        raise ValidationError(said(
            param("inputs"), f": '{value.name}' is {described(array.dtype, array.shape)}; the "
            f"model declares {declared}{fixes}"))


def load_inputs(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The arrays of the .npz at ``path`` (``np.savez``), by name; OptionError (bad usage, exit 2)
    if it is missing or not one."""
    import zipfile

    try:
        with open(path, "rb") as f:
            magic = f.read(4)
        if magic != b"PK\x03\x04" and magic != b"PK\x05\x06":
            raise ValueError("not a zip archive; write one with numpy.savez(path, name=array, ...)")
        with np.load(path, allow_pickle=False) as archive:
            return {k: archive[k] for k in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else first_line(e)
        raise OptionError(
            said(param("inputs", os.fspath(path), text=f"'{path}'"),
                 f": cannot read it as a .npz archive ({reason})"), parameter="inputs"
        ) from e
