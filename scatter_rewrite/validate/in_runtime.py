"""The proof in the target's own runtime: after the proof in onnxruntime, the written model runs
in the runtime it is prepared for (:mod:`scatter_rewrite.targets.runtimes`) on the same inputs,
and its outputs are judged against the same expected outputs, in the same way (exact for
integers and none/max/min, the float judgement where float sums may round otherwise): a runtime
that computes a form otherwise than onnxruntime (MNN's float Less, OpenVINO's TopK ties) fails the
run, nothing written."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from scatter_rewrite.errors import ValidationError
from scatter_rewrite.said import param, said
from scatter_rewrite.targets import runtimes
from scatter_rewrite.validate.held import Held, proto_of
from scatter_rewrite.validate.inputs import ValidationPlan

__all__ = ["prove_in_runtime"]

_OFF = said("or write it unproven there with ", param("runtime_proof", False))


def prove_in_runtime(runtime: runtimes.Runtime, python: str | None,
                     original: str | os.PathLike, rewritten: str | os.PathLike,
                     plan: ValidationPlan, names: list[str], expected: list,
                     judge: Callable, proven_in: str) -> tuple[str, str]:
    """(the runtime that ran the model, with its version, or "" where it does not run here; the
    summary's line); ValidationError where it refuses the model, fails on it or disagrees.
    ``judge``: validation's judgement (:func:`scatter_rewrite.validate.proof.judge`);
    ``proven_in``: the engine whose run of the model it passed."""
    if python is None:
        return "", runtime.missing()
    with tempfile.TemporaryDirectory(prefix="scatter-rewrite-runtime-") as work:
        if isinstance(rewritten, Held):  # (the runtime reads a file: the API's model saved here)
            rewritten = _saved(rewritten, Path(work) / "prepared.onnx")
        try:
            ran = runtimes.run(runtime, rewritten, plan.inputs, python, work)
        except runtimes.Refused as e:
            raise ValidationError(said(f"validation failed, nothing written: {runtime.name} "
                                       f"refuses the prepared model: {e}; ", _OFF)) from e
        except runtimes.RunnerFailed as e:
            raise ValidationError(said(f"validation failed, nothing written: {runtime.name} "
                                       f"could not run the prepared model in {python}: "
                                       f"{_last_lines(e)}; ", _OFF)) from e
    actual = ran.outputs
    if runtime.int64_as_int32:  # (exact: an int64 beyond int32's range shows as a difference)
        actual = [a.astype(np.int64) if a.dtype == np.int32 and np.asarray(e).dtype == np.int64
                  else a for e, a in zip(expected, actual)]
    if len(actual) != len(expected):
        failures = {"": f"{len(actual)} outputs where the model has {len(expected)}"}
        diffs, tolerance = {}, ""
    else:
        diffs, tolerance, failures = judge(original, plan, names, expected, actual)
    if failures:
        raise ValidationError(said(
            f"validation failed, nothing written: {ran.runtime} computes the prepared model "
            f"otherwise than the original: {'; '.join(failures.values())} (in {proven_in} it "
            f"agrees: the form is right, and {runtime.name} computes it wrongly); ", _OFF))
    worst = max(diffs.values(), default=0.0)
    return ran.runtime, (f"{ran.runtime} runs the written model too, on the same inputs, and "
                         f"agrees with the original: {tolerance}, max |difference| {worst:.3g}")


def _saved(model: Held, path: Path) -> Path:
    """``model`` written to ``path``, its weights beside it past protobuf's 2 GiB."""
    import onnx

    proto = proto_of(model)
    large = proto.ByteSize() > 2**31 - 2**20
    onnx.save(proto, path, save_as_external_data=large, location=path.name + ".data")
    return path


def _last_lines(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return " / ".join(lines[:1] + lines[-2:]) if len(lines) > 3 else " / ".join(lines)
