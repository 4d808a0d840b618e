"""The one path every rewriting verb takes: load, run passes, stage, check, validate, write.

Order matters: the validation plan (contract-respecting inputs) is computed from the original
before any pass mutates it; the rewritten model is staged beside its destination, checked with
``onnx.checker`` (full) and validated against the original; only then is it renamed into place.
Any failure leaves the destination and the input untouched.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir

from scatter_rewrite.errors import InvalidModelError, OptionError, ScatterRewriteError
from scatter_rewrite.export_patterns import accumulate_export_notes
from scatter_rewrite.model_io import (data_file_name, external_data_files, in_place_data_name, load_proto,
                                      staged_save, to_ir)
from scatter_rewrite.passes.base import ScatterPassResult
from scatter_rewrite.spec import check_scatter_nodes

logger = logging.getLogger("scatter_rewrite")


@dataclasses.dataclass(frozen=True)
class Verb:
    """A rewriting command: its output-name suffix and how its options become passes."""

    name: str
    suffix: str  # model.<suffix>.onnx
    make_passes: Callable[..., list[ir.passes.PassBase]]
    # The same rewrite done on the parsed file when the model allows (None: it does not), taken
    # when nothing needs the IR afterwards (no validation); called with the verb's options.
    on_proto: Callable[..., ScatterPassResult | None] | None = None
    # Its own proof (original path, rewritten path, seed, user inputs, user (rtol, atol)) -> report,
    # replacing the proof of equality: for the one verb meant to change results
    # (repair_proof.prove_repair).
    prove: Callable[..., dict] | None = None


def _upgrade_passes(opset: int | None = None) -> list[ir.passes.PassBase]:
    from scatter_rewrite.passes.upgrade import UpgradePass

    return [UpgradePass(opset)]


def _upgrade_proto(proto: onnx.ModelProto, opset: int | None = None) -> ScatterPassResult | None:
    from scatter_rewrite.passes.upgrade import upgrade_proto

    return upgrade_proto(proto, opset)


def _fold_passes(size_limit: int | None = None) -> list[ir.passes.PassBase]:
    from scatter_rewrite.passes.fold import FoldPass

    return [FoldPass(size_limit=size_limit)]


def _lower_passes(opset: int = 13, mode: str = "standard") -> list[ir.passes.PassBase]:
    from scatter_rewrite.passes.lower import LowerPass

    return [LowerPass(opset=opset, mode=mode)]


def _to_scatternd_passes() -> list[ir.passes.PassBase]:
    from scatter_rewrite.passes.to_scatternd import ToScatterNDPass

    return [ToScatterNDPass()]


def _tensorrt_passes(trt_version: str = "10", fix_dims: dict[str, int] | None = None) -> list[ir.passes.PassBase]:
    from scatter_rewrite.passes.tensorrt import tensorrt_passes

    return tensorrt_passes(trt_version, fix_dims)


def _repair_passes() -> list[ir.passes.PassBase]:
    from scatter_rewrite.passes.repair import RepairPass

    return [RepairPass()]


def _prove_repair(original: Path, repaired: Path, seed: int = 0, inputs: dict | None = None,
                  tolerance: tuple[float, float] | None = None) -> dict:
    from scatter_rewrite.repair_proof import prove_repair

    return prove_repair(original, repaired, seed, inputs, tolerance)


def fixed_dim_sizes(passes: Sequence[ir.passes.PassBase]) -> dict[str, int]:
    """The sizes the passes give symbolic dimensions (``FixDimsPass.dim_sizes``): validation feeds
    both models inputs of those sizes, which the rewritten model then requires."""
    sizes: dict[str, int] = {}
    for p in passes:
        sizes.update(getattr(p, "dim_sizes", None) or {})
    return sizes


# The verbs, in one place. Each maps the verb's own options (keyword arguments) to its passes.
VERBS: dict[str, Verb] = {
    "upgrade": Verb("upgrade", "upgraded", _upgrade_passes, on_proto=_upgrade_proto),
    "fold": Verb("fold", "folded", _fold_passes),
    "lower": Verb("lower", "lowered", _lower_passes),
    "to_scatternd": Verb("to_scatternd", "scatternd", _to_scatternd_passes),
    "tensorrt": Verb("tensorrt", "tensorrt", _tensorrt_passes),
    "repair": Verb("repair", "repaired", _repair_passes, prove=_prove_repair),
}


@dataclasses.dataclass
class Outcome:
    """What one model went through: the report the CLI prints and ``--report`` writes."""

    input: str
    output: str | None = None
    passes: list[dict] = dataclasses.field(default_factory=list)
    validation: dict | None = None
    status: str = "FAILED"
    error: str | None = None
    seconds: float = 0.0
    notes: list[str] = dataclasses.field(default_factory=list)  # about the files and the export itself, not any pass

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def run_passes(model: ir.Model, passes: Sequence[ir.passes.PassBase]) -> list[ScatterPassResult | ir.passes.PassResult]:
    """Run passes in order on ``model`` (in place). Unlike ``ir.passes.PassManager`` this keeps our
    errors as they are instead of wrapping them, and keeps every pass's result."""
    from scatter_rewrite.type_inference import correct_contradicted_shapes, has_control_flow

    claims = has_control_flow(model)  # (before the passes, which may inline what made the claims false)
    results = []
    for p in passes:
        result = p(model)
        if result.model is not model:
            raise RuntimeError(f"pass {p} is not in place")  # our passes all are: a bug if not
        results.append(result)
    if claims and any(r.modified for r in results):
        # An exporter's shape claims the rewrite made checkable and false would fail onnx.checker.
        corrected = correct_contradicted_shapes(model)
        last = next((r for r in reversed(results) if isinstance(r, ScatterPassResult)), None)
        if corrected and last is not None:
            last.notes.append(f"{len(corrected)} declared shape(s) the rewrite showed false, corrected (the export's "
                              f"claims; no value changes): {'; '.join(corrected[:3])}{' ...' if len(corrected) > 3 else ''}")
    return results


def result_dict(result: ir.passes.PassResult) -> dict:
    if isinstance(result, ScatterPassResult):
        return result.to_dict()
    return {"pass": type(result).__name__, "modified": result.modified, "rewritten": [], "skipped": [], "notes": []}


def check_model(path: Path, source: Path | None = None, source_name: str | None = None) -> None:
    """``onnx.checker`` (full) on the rewritten model at ``path``; InvalidModelError if it fails,
    saying so of the input too when ``source`` fails it the same way (the rewrite did not cause it).
    ``source_name``: how the message names the input (default: its path)."""
    failure = _checker_failure(path)
    if failure is None:
        return
    # (The source through its real path: a model file that is a symlink into another folder has its big
    # inline weights referenced by the real file's name, see _protowire.checkable.)
    before = _checker_failure(Path(os.path.realpath(source))) if source is not None else None
    source_name = source_name or str(source)
    if before == failure:
        hint = "; scatter-rewrite upgrade replaces a deprecated Scatter" if "Scatter is deprecated" in failure else ""
        raise InvalidModelError(f"{source_name} fails onnx.checker before any rewrite, and this rewrite does not "
                                f"fix it: {failure}{hint}")
    if before is not None:  # (the same fault may read differently once nodes moved, e.g. a rewritten export)
        raise InvalidModelError(f"{source_name} fails onnx.checker before any rewrite ({before}), and so does the "
                                f"rewritten model: {failure}")
    hint = ""
    if "Inferred shape and existing shape differ" in failure:  # (what a fold's constants let inference see)
        hint = ("; a shape the model declares (value_info or a graph output) may contradict what its now-constant "
                "values give: check the model's declared shapes")
    raise InvalidModelError(f"the rewritten model fails onnx.checker: {failure}{hint}")


def _checker_failure(path: Path) -> str | None:
    from scatter_rewrite._protowire import checkable

    try:
        with checkable(path) as target:  # big inline weights: checked without reading them again
            onnx.checker.check_model(target, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return None


def default_output(source: Path, suffix: str, folder: Path | None = None) -> Path:
    stem = source.name[: -len(".onnx")] if source.name.endswith(".onnx") else source.name
    return (folder or source.parent) / f"{stem}.{suffix}.onnx"


def resolve_output(source: Path, verb: Verb, output: str | os.PathLike | None, in_place: bool,
                   output_is_folder: bool = False) -> Path:
    if in_place:
        if output is not None:
            raise OptionError("--in-place and -o/--output exclude each other; pick one")
        return source
    if output is None:
        return default_output(source, verb.suffix)
    output = Path(output)
    folder = output_is_folder or output.is_dir()
    destination = default_output(source, verb.suffix, output) if folder else output
    if destination.resolve() == source.resolve():
        raise OptionError(f"{destination} is the input model; pass --in-place to overwrite it")
    return destination


def rewrite_file(
    verb_name: str,
    source: str | os.PathLike,
    *,
    options: dict[str, Any] | None = None,
    passes: Sequence[ir.passes.PassBase] | None = None,
    output: str | os.PathLike | None = None,
    output_is_folder: bool = False,
    in_place: bool = False,
    validate: bool = True,
    inputs: dict | None = None,
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
) -> Outcome:
    """Rewrite one model file. Raises ScatterRewriteError for anything a user can fix."""
    from scatter_rewrite import validate as validation

    started = time.perf_counter()
    verb = VERBS[verb_name] if verb_name in VERBS else Verb(verb_name, "rewritten", lambda: [])
    source = Path(source)
    destination = resolve_output(source, verb, output, in_place, output_is_folder)
    if passes is None:
        passes = verb.make_passes(**(options or {}))
        on_proto = verb.on_proto if not validate else None
    else:
        on_proto = None  # the caller's own passes
    proto = load_proto(source)
    input_data = external_data_files(proto, source)
    data_name = output_data_name(source, destination, input_data, in_place)
    result = on_proto(proto, **(options or {})) if on_proto is not None else None
    if result is not None:  # done on the parsed file (see Verb.on_proto): save, check, rename
        outcome = Outcome(str(source), str(destination), [result.to_dict()])
        with staged_save(proto, destination) as staged:
            del proto
            check_model(staged, source)
        outcome.status, outcome.seconds = "PASSED", time.perf_counter() - started
        return outcome
    model = to_ir(proto, source)
    del proto
    check_scatter_nodes(model)  # (the passes do too, but validation plans its inputs from the nodes first)
    suspects = accumulate_export_notes(model)  # before the passes: what the export itself computes
    plan = None
    if validate:
        plan = validation.plan_validation(model, seed=seed, inputs=inputs,
                                          dim_sizes=fixed_dim_sizes(passes), rtol=rtol, atol=atol)
    results = run_passes(model, passes)
    if plan is not None:
        validation.allow_float_rounding(plan, results)
    outcome = Outcome(str(source), str(destination), [result_dict(r) for r in results],
                      notes=without_repaired(suspects, results))
    modified = any(r.modified for r in results)
    del results  # they hold the model too
    # A new output keeps the input's form, external data, even when the rewrite replaced every external
    # tensor; in place, such a model is written whole and the old data file left, with a note.
    with staged_save(model, destination, data_name, external=bool(input_data) and not in_place) as staged:
        del model  # written: free the rewritten weights (a folded result, say) before validation runs
        check_model(staged, source)
        if plan is not None and modified:
            outcome.validation = _validated(source, staged, plan, outcome, verb.prove, seed, inputs)
        elif plan is not None:
            outcome.validation = {"checked_against": "nothing rewritten: the model is unchanged", "max_abs_diff": 0.0}
        written = data_name if (staged.parent / data_name).is_file() else None
    if in_place:
        outcome.notes += _left_data_notes(input_data, written)
    for note in outcome.notes:
        logger.warning("%s: %s", source, note)
    outcome.status = "PASSED"
    outcome.seconds = time.perf_counter() - started
    return outcome


def without_repaired(notes: list[str], results: Sequence[ir.passes.PassResult]) -> list[str]:
    """``notes`` (about the export) less those on a node the repair pass repaired."""
    repaired = [n.node for r in results if getattr(r, "name", "") == "repair" for n in r.rewritten]
    return [note for note in notes if not any(note.startswith(f"{node} ") for node in repaired)]


def _validated(original: Path, rewritten: Path, plan: Any, outcome: Outcome,
               prove: Callable[..., dict] | None = None, seed: int = 0,
               inputs: dict | None = None) -> dict:
    """``validate``'s result (or the verb's own proof, ``prove``); a failure carries the passes
    that ran (``error.passes``), for the report."""
    from scatter_rewrite import validate as validation

    try:
        if prove is not None:  # repair's: its results are meant to change
            return prove(original, rewritten, seed, inputs, plan.tolerance)
        return validation.validate(original, rewritten, plan).to_dict()
    except ScatterRewriteError as e:
        e.passes = outcome.passes
        raise


def output_data_name(source: Path, destination: Path, input_data: list[str], in_place: bool) -> str:
    """Where the rewritten model's external data goes (if it has any), relative to its folder;
    ``input_data``: the input's data files (:func:`model_io.external_data_files`).

    In place: the input's one data file is replaced (see :func:`model_io.in_place_data_name`).
    Otherwise ``<output>.data``, which must not be one of the input's data files (the input is
    never touched without --in-place).
    """
    if in_place:
        return in_place_data_name(destination, input_data)
    name = data_file_name(destination)
    inputs = {os.path.realpath(source.parent / f) for f in input_data}
    for target, what in ((destination, "is"), (destination.parent / name, "would write its external data to")):
        if os.path.realpath(target) in inputs:
            raise OptionError(f"{destination} {what} the input's external data file {os.path.realpath(target)}; "
                              "write the output elsewhere, or pass --in-place to overwrite the input")
    return name


def _left_data_notes(input_data: list[str], written: str | None) -> list[str]:
    """After an in-place rewrite: the input's data files the new model no longer references.
    They are left where they are (another model may use them too); the note says so."""
    left = [f for f in input_data if f != written]
    if not left:
        return []
    now = f"keeps all its external data in {written}" if written else "has no external data"
    return [f"the rewritten model {now}; the input's data file(s) {', '.join(left)} are no longer "
            "referenced by it and were left in place: delete them if no other model uses them"]


def rewrite_file_reporting(verb_name: str, source: str, kwargs: dict) -> Outcome:
    """For worker processes: never raises, returns a FAILED outcome instead (a bug of ours too, said
    so in the outcome's error; the traceback goes to the debug log, which ``-v`` shows), so that one
    model's failure does not stop the others nor lose their outcomes."""
    started = time.perf_counter()
    try:
        return rewrite_file(verb_name, source, **kwargs)
    except ScatterRewriteError as e:
        return Outcome(str(source), None, getattr(e, "passes", []), status="FAILED", error=str(e),
                       seconds=time.perf_counter() - started)
    except Exception as e:
        logger.debug("%s: internal error", source, exc_info=True)
        return Outcome(str(source), None, status="FAILED", seconds=time.perf_counter() - started,
                       error=f"internal error ({type(e).__name__}: {e}); rerun with -v and report it")
