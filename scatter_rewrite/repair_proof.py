"""Prove what ``repair`` promises, since it is meant to change a model's results.

``repair`` (:mod:`scatter_rewrite.passes.repair`) gives each TorchScript accumulating scatter
``reduction="add"``. Two runs prove it:

1. On inputs whose scatter indices do not repeat (the contract a scatter without reduction has:
   :func:`scatter_rewrite.validate.plan_validation` of the original), the repaired model equals
   the original bit for bit: where no index repeats, writing and summing into zeros agree. (Not
   run where no such inputs exist, more updates than targets, as the plan's notes say: the
   result says so.)
2. On inputs whose indices may repeat (the plan of the *intended* model: the original with those
   scatters reducing, whose contract allows repeats), onnxruntime on the repaired model equals
   the intended model evaluated by our NumPy kernels (:mod:`scatter_rewrite.evaluator` through
   ``onnx.reference``), float outputs within
   :data:`scatter_rewrite.validate.FLOAT_TOLERANCE` (sums in another order; another engine for
   the float ops around them). Draws are repeated (other seeds, up to :data:`REPEAT_TRIES`) until
   the original differs there, i.e. the inputs exercised a repeated index; the result says so.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

import onnx_ir as ir

from scatter_rewrite.errors import ValidationError
from scatter_rewrite.model_io import load_model, save_model
from scatter_rewrite.passes.repair import find_sites

__all__ = ["prove_repair"]

REPEAT_TRIES = 8  # input draws at most, until one repeats an index the original gets wrong


def intended_model(original: ir.Model) -> ir.Model:
    """``original`` (cloned) with every chain ``repair`` repairs computing what PyTorch computed:
    its scatter reducing with add (``Scatter`` read as ``ScatterElements``), at the model's own
    opset. For :mod:`scatter_rewrite.evaluator`, which reads the attribute at any opset; not a
    model for a runtime below opset 16."""
    model = original.clone()
    sites, _ = find_sites(model)
    for site in sites:
        if site.scatter.op_type == "Scatter":
            site.scatter.op_type = "ScatterElements"
        site.scatter.attributes["reduction"] = ir.AttrString("reduction", "add")
    return model


def prove_repair(original: str | os.PathLike, repaired: str | os.PathLike, seed: int = 0,
                 inputs: dict | None = None, tolerance: tuple[float, float] | None = None) -> dict:
    """Both proofs of the module docstring on the model files; ValidationError if either fails.
    ``inputs`` (the user's, name -> array): the second proof runs on them too, first.
    ``tolerance``: the user's (rtol, atol) for the second proof's float outputs (--rtol/--atol).
    Returns what each compared, for the report."""
    from scatter_rewrite import validate as validation

    source = load_model(Path(original))
    plan = validation.plan_validation(source, seed=seed)
    cannot = [note for note in plan.notes if "may repeat" in note]  # more updates than targets
    if cannot:
        unique = {"checked_against": "nothing: no inputs without repeated indices exist here",
                  "notes": cannot}
    else:
        exact = dataclasses.replace(plan, float_sums=[], float_rounding=[], tolerance=None)
        done = validation.validate(original, repaired, exact)
        unique = {"checked_against": done.checked_against, "tolerance": done.tolerance,
                  "max_abs_diff": done.max_abs_diff}
    intended = intended_model(source)
    worst, draws, differs = 0.0, 0, False
    with tempfile.TemporaryDirectory(prefix="scatter-rewrite-repair-") as tmp:
        intended_path = save_model(intended, Path(tmp, "intended.onnx"))
        if inputs is not None:
            given = validation.plan_validation(intended, inputs=inputs)
            worst, differs, engine, expected = _prove_on(given, intended_path, original, repaired,
                                                         tolerance)
            notes = list(given.notes)
        # Random in-range indices usually repeat; where a draw happens not to, the next seed is
        # tried (every draw is a proof too), so that the result can say a repeated index was met.
        while not differs and draws < REPEAT_TRIES:
            repeats = validation.plan_validation(intended, seed=seed + draws)
            draws += 1
            diff, differs, engine, expected = _prove_on(repeats, intended_path, original, repaired,
                                                        tolerance)
            worst, notes = max(worst, diff), list(repeats.notes)
    if tolerance is not None:
        said_tolerance = f"float outputs within the given rtol={tolerance[0]}, atol={tolerance[1]}"
    else:
        said_tolerance = _tolerance_said(expected, validation.FLOAT_TOLERANCE)
    repeated = {
        "checked_against": ("scatter-rewrite's evaluator (onnx.reference with its NumPy kernels) "
                            "on the original with each repaired scatter reducing with add; "
                            f"{engine} on the repaired model"),
        "tolerance": said_tolerance, "max_abs_diff": worst, "draws": draws,
        "user_inputs": inputs is not None,
        "original_differs": differs,  # False: no inputs repeated an index the export gets wrong
    }
    without = (f"equal to {unique['checked_against']} bit for bit" if "tolerance" in unique
               else "no inputs without repeated indices exist (more updates than targets)")
    said = ("the original differs there" if differs
            else "no inputs tried repeated an index the original misses")
    return {
        "checked_against": (f"repair's proof: without repeated indices, {without}; with repeated "
                            f"indices ({said}), equal to the evaluator's add on the original, "
                            f"{engine} on the repaired model"),
        "tolerance": said_tolerance,
        "max_abs_diff": worst,
        "without_repeated_indices": unique,
        "with_repeated_indices": repeated,
        "notes": notes,
    }


def _prove_on(plan, intended: Path, original, repaired,
              tolerance: tuple[float, float] | None) -> tuple[float, bool, str, list]:
    """The second proof on ``plan``'s inputs: (max |difference|, whether the original differs
    from the intended result there, the engine that ran the repaired model, the expected
    outputs)."""
    from scatter_rewrite import validate as validation

    expected = validation.run_reference(intended, plan.inputs)
    actual, engine = _run(repaired, plan.inputs)
    names = plan.outputs or [f"output {i}" for i in range(len(actual))]
    diffs, failures = validation.compare(names, expected, actual, True, tolerance)
    if failures:
        raise ValidationError("the repaired model does not compute the intended accumulation, "
                              "nothing written: " + "; ".join(failures))
    before, _ = _run(original, plan.inputs)
    differs = bool(validation.compare(names, expected, before, float_tolerance=True)[1])
    return max(diffs.values(), default=0.0), differs, engine, expected


def _tolerance_said(outputs: list, tolerances: dict) -> str:
    said = sorted({f"{o.dtype}: rtol={tolerances[o.dtype][0]}, atol={tolerances[o.dtype][1]}"
                   for o in outputs if getattr(o, "dtype", None) in tolerances})
    if not said:
        return "exact (bit for bit)"
    return f"float outputs within {', '.join(said)}; everything else exact"


def _run(model: str | os.PathLike, inputs: dict) -> tuple[list, str]:
    """onnxruntime's outputs, or the evaluator's where onnxruntime cannot run the model (the
    deprecated ``Scatter`` of an opset-9 export); and which engine gave them."""
    from scatter_rewrite import validate as validation

    try:
        return validation.run_onnxruntime(model, inputs), "onnxruntime"
    except Exception:  # ORT reports load failures through several exception types
        return validation.run_reference(model, inputs), "scatter-rewrite's evaluator"
