"""The proof of a rewrite: both models run on the planned inputs, in one engine where it can be,
and their outputs compared (see :mod:`scatter_rewrite.validate`)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from scatter_rewrite.errors import IndexOutOfRangeError, ScatterRewriteError, ValidationError
from scatter_rewrite.said import param, said
from scatter_rewrite.validate import engines, float64
from scatter_rewrite.validate.comparison import (
    compare, compare_outputs, judge_rounding, judgeable, tolerance_said,
)
from scatter_rewrite.validate.engines import first_line, ort_reason, without_paths
from scatter_rewrite.validate.held import Held, proto_of
from scatter_rewrite.validate.inputs import ValidationPlan

__all__ = ["allow_float_rounding", "judge", "validate", "ValidationResult"]


ONNXRUNTIME, REFERENCE = "onnxruntime", "onnx.reference"  # (proven_in: the engine)


@dataclasses.dataclass
class ValidationResult:
    checked_against: str
    tolerance: str
    max_abs_diff: float
    outputs: dict[str, float]
    notes: list[str]
    # Where the proof ran in onnx.reference: how onnxruntime's results on the model it runs compare
    # with onnx.reference's (see validate); empty where onnxruntime ran both.
    cross_check: str = ""
    # Why onnxruntime cannot run the rewritten model (proven in onnx.reference), or "" where it ran
    # it: the status then says so (pipeline.UNRUNNABLE), never PASSED.
    onnxruntime_cannot_run: str = ""
    to_run_it: str = ""  # the scatter-rewrite command that writes a form onnxruntime runs, if one
    # The engine in which the written model ran and matched the original: "onnxruntime" (with
    # scatter_rewrite.custom_ops where its --mode custom nodes need them, as its users run it), or
    # "onnx.reference" (with our kernels). The status line names it.
    proven_in: str = ONNXRUNTIME
    # What stood in for the runtime some of its nodes are for, which cannot run here (the TensorRT
    # plugin form's nodes ran as our kernels of the ONNX op): the status is then WRITTEN, not
    # PASSED, and says so. "" where every node ran in the engine named.
    stand_in: str = ""
    # How the target's own runtime ran the written model on the same inputs, compared with the same
    # expected outputs (proven_in then names it too), or why it did not run ("" where the target
    # has no runtime of its own, or its proof was not asked for).
    in_runtime: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)



def allow_float_rounding(plan: ValidationPlan, results,
                         opsets: tuple[int | None, int | None] = (None, None)) -> None:
    """After the passes: where one re-expressed an op so that float results may round differently
    (``ScatterPassResult.float_rounding``: an op replaced by its ONNX function body, the spec's own
    definition of it), float outputs are compared within FLOAT_TOLERANCE, and the notes say why.
    ``opsets``: the model's default-domain opset before and after the passes; where they differ,
    float outputs that are not bit for bit the original's are judged against a float64 evaluation
    of the original (onnxruntime fuses ops differently per opset: the same arithmetic may round
    otherwise in the moved model), without the fixed tolerance, which a wrong move could pass."""
    ops = sorted({op for r in results for op in getattr(r, "float_rounding", ())})
    already = plan.float_tolerance
    plan.float_rounding = ops
    if ops and not already:
        plan.notes.append(f"float outputs compared within tolerance: {', '.join(ops)} replaced by "
                          f"{'its' if len(ops) == 1 else 'their'} ONNX function body")
    before, after = opsets
    if before is not None and after is not None and before != after:
        plan.opset_move = (before, after)


_REFERENCE = "onnx.reference with scatter-rewrite's NumPy kernels"


def validate(
    original: str | os.PathLike | Held, rewritten: str | os.PathLike | Held, plan: ValidationPlan,
    runtime: Any = None, runtime_python: str | None = None,
) -> ValidationResult:
    """Run both (files, or :class:`~.held.Held` models) and compare; ValidationError if they differ.

    Both run in onnxruntime, as a user runs them (:mod:`.engines`), where it runs both. A rewritten
    model it fails to load or run is a failure, unless it lacks what that model needs
    (:func:`engines.kernels_onnxruntime_lacks`, from its kernel registry and declared facts, never
    from the error's text) or fails on it just as on the original: only then do both run in
    onnx.reference, compared there, in one engine (across engines, a float op after the scatter,
    NumPy's MatMul against onnxruntime's, rounds differently, and no bit-for-bit comparison would
    hold), and the result says why onnxruntime cannot run the rewritten model
    (``onnxruntime_cannot_run``: the model is correct, not PASSED). Where onnxruntime cannot run the
    original, the rewritten model it does run is compared in onnx.reference too, and with its own
    onnxruntime results (``cross_check``): the summary says how far the two engines are apart on it
    (never a failure: their float ops round differently). Where onnx.reference cannot run that
    model, onnxruntime's results on it are compared with the other's.

    ``runtime``: the target's own (:class:`scatter_rewrite.targets.runtimes.Runtime`), which then
    runs the written model too, in ``runtime_python`` (None: said not run), judged against the same
    expected outputs in the same way (:mod:`.in_runtime`)."""
    try:
        original_ort = engines.run_onnxruntime(original, plan.inputs)
        ort_cannot_run_original = None
    except Exception as ort_error:  # ORT reports load/run failures through several exception types
        original_ort, ort_cannot_run_original = None, ort_reason(ort_error)
    original_ref = None
    if original_ort is None:
        original_ref = _run_in_reference(original, plan, ort_cannot_run_original, True)
    try:
        rewritten_ort = engines.run_onnxruntime(rewritten, plan.inputs)
        ort_cannot_run_rewritten = unrunnable = to_run_it = None
    except engines.CustomOpsRefused as e:
        if not engines.needs_custom_ops_in_onnxruntime(rewritten):  # (the TensorRT plugin form)
            rewritten_ort, ort_cannot_run_rewritten = None, str(e)
            unrunnable = to_run_it = None
        else:  # never PASSED for a model its users cannot load
            raise ValidationError(said(
                "onnxruntime cannot load the rewritten model with "
                "scatter_rewrite.custom_ops.register, which is how a ", param("mode", "custom"),
                f" model runs: {e}; lower with ", param("mode", "standard"),
                ", or skip validation with ", param("validate", False), " to write it anyway")
            ) from e
    except engines.WouldTrap as e:  # (never run: the model is judged in onnx.reference)
        rewritten_ort, unrunnable, to_run_it = None, str(e), ""
        ort_cannot_run_rewritten = unrunnable
    except Exception as e:
        rewritten_ort = None
        unrunnable, to_run_it = _why_onnxruntime_cannot_run(rewritten, e, ort_cannot_run_original)
        ort_cannot_run_rewritten = unrunnable
    expected, actual, checked_against, cross_check, engine = _expected_and_actual(
        original, rewritten, plan, (original_ort, original_ref, ort_cannot_run_original),
        (rewritten_ort, ort_cannot_run_rewritten))
    proven_in, stand_in = _proven_in(rewritten, engine)
    # (Not read back from the rewritten file: with inline weights that would parse all of them
    # again.)
    names = plan.outputs or [f"output {i}" for i in range(len(actual))]
    diffs, tolerance, failures = judge(original, plan, names, expected, actual)
    if failures:
        raise ValidationError(_failed(checked_against, failures))
    in_runtime = ""
    if runtime is not None:
        proven_in, in_runtime = _in_runtime(runtime, runtime_python, original, rewritten, plan,
                                            names, expected, proven_in)
    return ValidationResult(
        checked_against,
        tolerance,
        max(diffs.values(), default=0.0),
        diffs,
        list(plan.notes),
        _cross_check(names, *cross_check) if cross_check else "",
        unrunnable or "",
        to_run_it or "",
        proven_in,
        stand_in,
        in_runtime,
    )


def _in_runtime(runtime: Any, python: str | None, original: str | os.PathLike,
                rewritten: str | os.PathLike, plan: ValidationPlan, names: list[str],
                expected: list, proven_in: str) -> tuple[str, str]:
    """(the engines the model is proven in, the summary's line on the target's runtime)."""
    from scatter_rewrite.validate.in_runtime import prove_in_runtime

    ran, line = prove_in_runtime(runtime, python, original, rewritten, plan, names, expected,
                                 judge, proven_in)
    return (f"{proven_in} and {ran}" if ran else proven_in), line


def judge(original: str | os.PathLike, plan: ValidationPlan, names: list[str], expected: list,
          actual: list) -> tuple[dict[str, float], str, dict[str, str]]:
    """Validation's judgement of ``actual`` against ``expected`` (exact, or the float judgement
    where the plan allows rounding: :mod:`.comparison`): (max |difference| per output, the
    tolerance said, the failures by output)."""
    diffs, failures = compare_outputs(names, expected, actual, plan.float_tolerance, plan.tolerance)
    if plan.tolerance is not None:
        rtol, atol = plan.tolerance
        tolerance = (
            f"float outputs within the given rtol={rtol}, atol={atol}; everything else exact"
        )
    else:
        tolerance = tolerance_said(expected) if plan.float_tolerance else "exact (bit for bit)"
    if failures and (plan.float_tolerance or plan.opset_move) and plan.tolerance is None:
        failures, judged = _judge_by_the_arithmetic(original, plan, names, expected, actual,
                                                    failures)
        tolerance = judged or tolerance
    return diffs, tolerance, failures


def _proven_in(rewritten: str | os.PathLike, engine: str) -> tuple[str, str]:
    """(the engine the written model ran in and was compared in, said with the custom ops it
    needed there; what stood in for the runtime of its nodes that cannot run here, or "").
    ``engine``: ONNXRUNTIME or REFERENCE, as :func:`_expected_and_actual` compared."""
    custom, plugin = engines.custom_domain_nodes(rewritten)
    if engine == ONNXRUNTIME and (custom or plugin):
        engine = f"{ONNXRUNTIME} with scatter_rewrite.custom_ops"
    if not plugin:
        return engine, ""
    return engine, (f"its {plugin} TensorRT plugin node(s) ran as scatter-rewrite's kernels of the "
                    "ONNX op; TensorRT, their runtime, cannot run here")


def _expected_and_actual(original: str | os.PathLike, rewritten: str | os.PathLike,
                         plan: ValidationPlan, original_runs: tuple, rewritten_runs: tuple):
    """(expected, actual, what they were checked against, cross check, the engine that ran the
    rewritten model for the comparison): the outputs to compare, in one engine where it can (see
    :func:`validate`). ``original_runs``: its onnxruntime outputs
    (None where it cannot run it), its onnx.reference outputs (None unless so), onnxruntime's
    reason; ``rewritten_runs``: its onnxruntime outputs, onnxruntime's reason. The cross check:
    (model, its onnx.reference results, its onnxruntime results), or None."""
    original_ort, original_ref, ort_cannot_run_original = original_runs
    rewritten_ort, ort_cannot_run_rewritten = rewritten_runs
    cross_check, engine = None, REFERENCE
    if original_ort is not None and rewritten_ort is not None:
        engine = ONNXRUNTIME
        expected, actual = original_ort, rewritten_ort
        checked_against = "onnxruntime on the original model"
    elif original_ort is None and rewritten_ort is None:
        expected, actual = (
            original_ref,
            _run_in_reference(rewritten, plan, ort_cannot_run_rewritten, False),
        )
        checked_against = (
            f"{_REFERENCE}, for both models (onnxruntime cannot run either: "
            f"{ort_cannot_run_original})"
        )
    elif original_ort is None:  # the rewritten model runs in onnxruntime
        expected, actual = original_ref, _reference_or_none(rewritten, plan)
        checked_against = (f"{_REFERENCE}, for both models (onnxruntime cannot run the original: "
                           f"{ort_cannot_run_original})")
        if actual is None:
            actual, engine = rewritten_ort, ONNXRUNTIME
            checked_against = (
                f"{_REFERENCE} on the original model (onnxruntime cannot run it: "
                f"{ort_cannot_run_original}), onnxruntime on the rewritten one (onnx.reference "
                "cannot)"
            )
        else:
            cross_check = ("rewritten", actual, rewritten_ort)
    else:  # the original runs in onnxruntime, the rewritten model does not
        expected = _reference_or_none(original, plan)
        actual = _run_in_reference(rewritten, plan, ort_cannot_run_rewritten, False)
        checked_against = (
            f"onnxruntime on the original model, {_REFERENCE} on the rewritten one (onnxruntime "
            f"cannot run it: {ort_cannot_run_rewritten})"
        )
        if expected is None:
            expected = original_ort
        else:
            checked_against += " and on the original"
            cross_check = ("original", expected, original_ort)
    return expected, actual, checked_against, cross_check, engine


def _why_onnxruntime_cannot_run(rewritten: str | os.PathLike, e: BaseException,
                                ort_cannot_run_original: str | None) -> tuple[str, str]:
    """Why onnxruntime failed on the rewritten model (``e``), where that leaves the model correct
    but not runnable there, and the command that writes a form it runs ("" if none is known);
    ValidationError where the failure is the rewrite's: one onnxruntime has all it needs for, and
    did not have on the original."""
    lacks, to_run_it = engines.what_onnxruntime_lacks(rewritten)
    if lacks:
        return lacks, to_run_it
    if without_paths(ort_reason(e)) == without_paths(ort_cannot_run_original):
        return f"it fails on it as on the original: {ort_cannot_run_original}", ""
    ran = "runs the original" if ort_cannot_run_original is None else "has every kernel it needs"
    raise ValidationError(
        f"validation failed, nothing written: onnxruntime cannot run the rewritten model, though "
        f"it {ran}: {first_line(e, 300)}"
    ) from e


def _failed(checked_against: str, failures: dict[str, str]) -> str:
    """What was compared, by how much it missed, and the ways out."""
    return said(
        f"validation failed, nothing written: {'; '.join(failures.values())} (checked against: "
        f"{checked_against}); if the difference is acceptable, set the bound with ",
        param("rtol"), "/", param("atol"), ", or skip validation with ", param("validate", False)
    )


def _judge_by_the_arithmetic(original: str | os.PathLike, plan: ValidationPlan, names: list[str],
                             expected: list, actual: list,
                             failures: dict[str, str]) -> tuple[dict[str, str], str]:
    """The float outputs beyond the fixed tolerance, judged against a float64 evaluation of the
    original (:func:`comparison.judge_rounding`). Returns the failures left, and the tolerance said
    for the summary ("" where no output was judged)."""
    at = {name: k for k, name in enumerate(names)}
    judged = [name for name in failures if name in at and judgeable(expected[at[name]])
              and np.asarray(actual[at[name]]).dtype == expected[at[name]].dtype]
    if not judged:
        return failures, ""
    try:
        exact, magnitude = float64.evaluate(proto_of(original), plan.inputs)
    except Exception as e:  # (an op onnx.reference cannot run in float64): the fixed bound stands
        left = dict(failures)
        for name in judged:
            left[name] += (" (and no float64 evaluation of the original to judge its rounding by: "
                           f"{first_line(e)})")
        return left, ""
    left, measured = dict(failures), []
    for name in judged:
        k = at[name]
        failure, rounding = judge_rounding(name, expected[k], np.asarray(actual[k]),
                                           np.asarray(exact[k]), np.asarray(magnitude[k]),
                                           plan.float_sum_types)
        if failure is None:
            del left[name]
            measured.append(f"'{name}': {rounding}")
        else:
            left[name] = failure
    if left:
        return left, ""
    if plan.float_tolerance:
        first = tolerance_said(expected).replace("; everything else exact", "")
    else:
        before, after = plan.opset_move
        first = (f"float outputs bit for bit (the opset moved {before} -> {after}, and onnxruntime "
                 "fuses ops differently per opset)")
    return left, (f"{first}, or else judged against a float64 evaluation of the original "
                  f"({'; '.join(measured)}); everything else exact")


def _run_in_reference(model: str | os.PathLike, plan: ValidationPlan, ort_reason: str,
                      original: bool) -> list:
    """A model's outputs from onnx.reference, where onnxruntime cannot run it (``ort_reason``).
    ``original``: the original model, where an index out of range is the inputs' fault."""
    try:
        return engines.run_reference(model, plan.inputs)
    except IndexOutOfRangeError as e:
        if not original:
            raise
        if "user inputs" in plan.notes:  # the user's indices, not the model, break the spec
            raise ValidationError(said("the original model cannot run on the inputs given (",
                                       param("inputs"), f"): {e}; scatter indices must lie "
                                       "within the data's bounds")) from e
        # Generated inputs: an index computed from them (where the plan could not bound it, e.g.
        # a data shape inference does not reach in a Loop body) is ours to blame, not the model.
        raise ValidationError(said(
            f"the generated validation inputs put an index out of range in the original "
            f"model ({e}): pass inputs it runs on with ", param("inputs"), ", or ",
            param("validate", False))) from e
    except ScatterRewriteError:
        raise
    except Exception as ref_error:
        which, skip = "rewritten", ""
        if original and "user inputs" in plan.notes:
            which, skip = "original", said("; use ", param("validate", False), " to skip")
        elif original:  # (generated inputs that do not fit the model: the user's would)
            which = "original"
            skip = said("; the generated inputs do not fit it: pass inputs it runs on with ",
                        param("inputs"), ", or use ", param("validate", False),
                        " to skip the proof")
        raise ValidationError(said(
            f"cannot evaluate the {which} model: onnxruntime says '{ort_reason}', "
            f"onnx.reference says '{first_line(ref_error)}'", skip)
        ) from ref_error


def _reference_or_none(model: str | os.PathLike, plan: ValidationPlan) -> list | None:
    """A model's outputs from onnx.reference, or None where it cannot run it (onnxruntime does)."""
    try:
        return engines.run_reference(model, plan.inputs)
    except Exception:  # (an op or type onnxruntime has and onnx.reference lacks)
        return None


def _cross_check(names: list[str], which: str, reference: list, ort: list) -> str:
    """onnxruntime's results on the ``which`` model against onnx.reference's, which the proof used,
    for the summary: how far apart the two engines are on a model the rewrite does not judge (a
    MatMul with K=768, a Conv, a long ReduceSum round differently in each, by more than any
    tolerance for a scatter's sums; a QuantizeLinear after them may then differ by one). Never a
    failure: the proof is the comparison in one engine."""
    diffs, failures = compare(names, reference, ort, float_tolerance=True)
    worst = max(diffs.values(), default=0.0)
    if not failures:
        return (f"onnxruntime runs the {which} model too, and agrees with onnx.reference on it: "
                f"{tolerance_said(reference)}, max |difference| {worst:.3g}")
    return (
        f"onnxruntime runs the {which} model too; its outputs differ from onnx.reference's by up "
        f"to {worst:.3g} (the engines' float ops round differently: {'; '.join(failures)})"
    )
