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

from scatter_rewrite.checking import (
    check_in_memory, check_model, checker_failure, checker_failure_in_memory,
)
from scatter_rewrite.errors import (
    InvalidModelError, ModelLoadError, OptionError, ScatterRewriteError, ValidationError,
    internal_error_message,
)
from scatter_rewrite.export_patterns import accumulate_export_notes
from scatter_rewrite.graph import forget_origins
from scatter_rewrite.model_io import (
    data_file_name, external_data_files, in_place_data_name, load_proto, staged_save, to_ir,
)
from scatter_rewrite.passes.base import ScatterPassResult
from scatter_rewrite.spec import check_scatter_nodes
from scatter_rewrite.verbs import VERBS, Verb, spoken
from scatter_rewrite.said import Said, joined, on_file, param, said

__all__ = [
    "FAILED", "Outcome", "PASSED", "SUCCEEDED", "UNCHANGED", "UNREADABLE", "UNRUNNABLE", "VERBS",
    "WRITTEN", "Verb", "check_model", "checker_failure", "default_output", "failed_status",
    "fixed_dim_sizes", "meant_for_onnxruntime", "output_data_name", "resolve_output",
    "result_dict", "rewrite_file", "rewrite_file_reporting", "rewrite_model", "run_passes",
    "unrunnable_unvalidated",
]

logger = logging.getLogger("scatter_rewrite")


def fixed_dim_sizes(passes: Sequence[ir.passes.PassBase]) -> dict[str, int]:
    """The sizes the passes give symbolic dimensions (``FixDimsPass.dim_sizes``): validation feeds
    both models inputs of those sizes, which the rewritten model then requires."""
    from scatter_rewrite.passes.compose import Steps

    sizes: dict[str, int] = {}
    for p in Steps(*passes).leaves() if passes else []:
        sizes.update(getattr(p, "dim_sizes", None) or {})
    return sizes


# Outcome.status: PASSED (rewritten, checked, and the written model ran in onnxruntime and matched
# the original, compared in the engine validation["proven_in"] names), WRITTEN (rewritten and
# checked, not proven in its runtime: validation not asked for, or validation["stand_in"] says what
# stood in for the runtime its nodes are for, which cannot run here: the TensorRT plugin form),
# UNCHANGED (nothing to rewrite: the output is still written, a copy of the input), UNRUNNABLE
# (rewritten, written and proven in onnx.reference, but onnxruntime cannot run it: Outcome.error
# says why and what makes it run; exit 1), FAILED, UNREADABLE (the model file cannot be read:
# missing, truncated, not ONNX, its external data missing; nothing written, exit 1, as check's).
PASSED, WRITTEN, UNCHANGED, FAILED = "PASSED", "WRITTEN", "UNCHANGED", "FAILED"
UNRUNNABLE, UNREADABLE = "UNRUNNABLE", "UNREADABLE"
SUCCEEDED = (PASSED, WRITTEN, UNCHANGED)


@dataclasses.dataclass
class Outcome:
    """What one model went through: the report the CLI prints and ``--report`` writes."""

    input: str
    output: str | None = None
    passes: list[dict] = dataclasses.field(default_factory=list)
    validation: dict | None = None
    status: str = FAILED
    error: str | None = None
    seconds: float = 0.0
    # about the files and the export itself, not any pass
    notes: list[str] = dataclasses.field(default_factory=list)
    verb: str | None = None
    options: dict = dataclasses.field(default_factory=dict)  # the verb's, as declared (verbs.py)
    bad_usage: bool = False  # FAILED on an option this model cannot take (the CLI's exit 2)

    @property
    def modified(self) -> bool:
        return any(p["modified"] for p in self.passes)

    def __post_init__(self) -> None:
        if self.verb in VERBS:  # the verb as the command spells it (to-scatternd), in every report
            self.verb = VERBS[self.verb].command

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def said_on_the_command_line(self) -> Outcome:
        """This outcome, its notes and skip reasons (which name Python parameters and functions,
        as the API says them) as the command line says them: its verb's flags and commands
        (:meth:`~scatter_rewrite.verbs.Verb.cli_text`). Its error is said so where it is raised
        (:meth:`~scatter_rewrite.verbs.Verb.cli_message`)."""
        verb = next((v for v in VERBS.values() if v.command == self.verb), None)
        if verb is None:
            return self
        for p in self.passes:
            for node in p["rewritten"] + p["skipped"]:
                node["detail"] = verb.cli_text(node["detail"])
            p["notes"] = [verb.cli_text(note) for note in p["notes"]]
        self.notes = [verb.cli_text(note) for note in self.notes]
        if self.validation and self.validation.get("notes"):
            self.validation["notes"] = [verb.cli_text(note) for note in self.validation["notes"]]
        if self.validation and self.validation.get("in_runtime"):  # (runtime_python=, say)
            self.validation["in_runtime"] = verb.cli_text(self.validation["in_runtime"])
        # (what makes an UNRUNNABLE model run: a call, said as its command)
        for key in ("onnxruntime_note", "to_run_it"):
            if self.validation and self.validation.get(key):
                self.validation[key] = spoken(self.validation[key], {})
        if self.status == UNRUNNABLE and self.error:
            self.error = spoken(self.error, {})
        return self


def run_passes(model: ir.Model, passes: Sequence[ir.passes.PassBase],
               progress: Callable[[str], None] | None = None
               ) -> list[ScatterPassResult | ir.passes.PassResult]:
    """Run passes in order on ``model`` (in place), through :class:`~.passes.compose.Steps`
    (onnx_ir's Sequential, keeping our errors as they are and every pass's result), then remove
    what they left unread (:class:`~.passes.remove_unused.RemoveUnusedNodesPass`) and correct the
    export's shape claims they showed false. ``progress`` is called with each pass's name before
    it runs."""
    from scatter_rewrite.passes.compose import Steps
    from scatter_rewrite.passes.remove_unused import RemoveUnusedNodesPass
    from scatter_rewrite.type_inference import correct_contradicted_shapes, has_control_flow

    # (before the passes, which may inline what made the claims false)
    claims = has_control_flow(model)
    cleanup = RemoveUnusedNodesPass.keeping(model)  # (the model's own unused ones stay)
    steps = Steps(*passes, progress=progress) if passes else None
    if steps is not None:
        steps(model)
    results = steps.results if steps is not None else []
    last = next((r for r in reversed(results) if isinstance(r, ScatterPassResult)), None)
    removed, _ = cleanup(model), forget_origins(model)  # (the marks a refusal would have read)
    if last is not None:  # (not a pass of the verb's: its notes are the last pass's)
        last.notes += removed.notes
    if claims and any(r.modified for r in results):
        # An exporter's shape claims the rewrite made checkable and false would fail onnx.checker.
        corrected = correct_contradicted_shapes(model)
        if corrected and last is not None:
            more = " ..." if len(corrected) > 3 else ""
            last.notes.append(f"{len(corrected)} declared shape(s) the rewrite showed false, "
                              f"corrected (the export's claims; no value changes): "
                              f"{'; '.join(corrected[:3])}{more}")
    return results


def result_dict(result: ir.passes.PassResult) -> dict:
    if isinstance(result, ScatterPassResult):
        return result.to_dict()
    return {"pass": type(result).__name__, "modified": result.modified, "rewritten": [],
            "skipped": [], "notes": []}


def default_output(source: Path, suffix: str, folder: Path | None = None) -> Path:
    stem = source.name[: -len(".onnx")] if source.name.endswith(".onnx") else source.name
    return (folder or source.parent) / f"{stem}.{suffix}.onnx"


def resolve_output(source: Path, verb: Verb, output: str | os.PathLike | None, in_place: bool,
                   output_is_folder: bool = False) -> Path:
    if in_place:
        if output is not None:
            raise OptionError(said(param("in_place", True), " and ", param("output"),
                                   " exclude each other; pick one"))
        return source
    if output is None:
        return default_output(source, verb.suffix)
    output = Path(output)
    folder = output_is_folder or output.is_dir()
    destination = default_output(source, verb.suffix, output) if folder else output
    if destination.resolve() == source.resolve():
        # (the API, which never replaces its input, refuses this before: api._check_not_input)
        raise OptionError(said(f"{destination} is the input model: write the output elsewhere (",
                               param("output"), "), or replace the input (",
                               param("in_place", True), ")"))
    return destination


def rewrite_file(
    verb_name: str, source: str | os.PathLike, *, options: dict[str, Any] | None = None,
    passes: Sequence[ir.passes.PassBase] | None = None, output: str | os.PathLike | None = None,
    output_is_folder: bool = False, in_place: bool = False, validate: bool = True,
    inputs: dict | None = None, seed: int = 0, progress: Callable[[str], None] | None = None,
    rtol: float | None = None, atol: float | None = None,
) -> Outcome:
    """Rewrite one model file. Raises ScatterRewriteError for anything a user can fix.
    ``options``: the verb's, already checked (:meth:`scatter_rewrite.verbs.Verb.bind`)."""
    started = time.perf_counter()
    verb = VERBS[verb_name] if verb_name in VERBS else Verb(verb_name, "rewritten", lambda: [])
    options = dict(options or {})
    source = Path(source)
    destination = resolve_output(source, verb, output, in_place, output_is_folder)
    if passes is None:
        passes = verb.make_passes(**options)
    parsed = [load_proto(source)]
    input_data = external_data_files(parsed[0], source)
    data_name = output_data_name(source, destination, input_data, in_place)
    # (parsed.pop(): the parsed file is freed once converted, the IR once written: rewrite_model)
    outcome = rewrite_model(parsed.pop(), passes, source, destination,
                            verb=verb_name, options=options, data_name=data_name,
                            external=bool(input_data) and not in_place,
                            validate=validate, inputs=inputs, seed=seed, rtol=rtol, atol=atol,
                            progress=progress, replaced_data=input_data if in_place else None)
    for note in outcome.notes:
        logger.warning("%s: %s", source, note)
    return _finish(outcome, started)


def rewrite_model(
    model: ir.Model | onnx.ModelProto, passes: Sequence[ir.passes.PassBase], source: Path | None,
    destination: Path | None, *, verb: str | None = None, options: dict[str, Any] | None = None,
    source_name: str | None = None, data_name: str | None = None, external: bool = False,
    validate: bool = True, inputs: dict | None = None, seed: int = 0, rtol: float | None = None,
    atol: float | None = None,
    progress: Callable[[str], None] | None = None, replaced_data: list[str] | None = None,
    original: Callable[[], ir.Model] | None = None,
) -> Outcome:
    """The one orchestration of every rewrite, from the CLI and the API: check the scatter nodes,
    note what the export computes, plan the validation (on the original, before any pass), run the
    passes, stage the result beside ``destination``, check it with onnx.checker (full), validate it
    against ``source`` (the original model's file) and only then rename it into place.

    ``model``: an ``ir.Model``, rewritten in place, or ``source`` as parsed (``onnx.ModelProto``),
    which a pass with a form on the parsed file rewrites without the IR when the model allows
    (:func:`parsed_form`: the same bytes validated or not). The model is dropped once written.
    ``source_name``: how errors name the input (default: its path). ``progress``: called with
    each pass's name before it runs.
    ``replaced_data``: in place, the input's external data files (a note names those left unused).
    ``rtol``/``atol``: the caller's bound for float outputs (:mod:`scatter_rewrite.validate`).
    ``original``: the model is in memory (``source``, ``destination`` None): checked and
    validated there, never saved (:func:`_finished_in_memory`).
    """
    proto = model if isinstance(model, onnx.ModelProto) else None
    form = parsed_form(proto, passes) if proto is not None else None
    if proto is not None:  # (the original's IR: the passes', or the plan's)
        model = to_ir(proto, source) if form is None or validate else None
    suspects, plan, unplanned = _before_passes(model, passes, validate, inputs, seed, rtol, atol)
    opset_before = _default_opset(model if model is not None else proto)
    if progress is not None and form is not None:
        progress(getattr(passes[0], "name", type(passes[0]).__name__))
    result = form(proto) if form is not None else None  # (None: the model needs the IR)
    if result is not None:
        results, written, model = [result], proto, None  # (the original's IR served the plan)
    else:
        model = model if model is not None else to_ir(proto, source)
        results = _passes_run(model, passes, None if form is not None else progress, source,
                              source_name, original)
        written = model
    del proto
    if plan is not None:
        from scatter_rewrite import validate as validation

        validation.allow_float_rounding(plan, results, (opset_before, _default_opset(written)))
    repaired = repaired_nodes(results)
    outcome = Outcome(str(source_name or source), str(destination),
                      [result_dict(r) for r in results], notes=without_repaired(suspects, repaired),
                      verb=verb, options=dict(options or {}))
    del results, model  # they hold the model too
    if plan is not None and inputs is not None or not validate:
        outcome.notes += (unused_inputs_notes(inputs, plan.inputs) if validate
                          else unvalidated_notes(inputs, rtol, atol))
    if unplanned is not None and outcome.modified:
        unplanned.passes = outcome.passes  # (for the report, as a failed validation's)
        raise unplanned
    if progress is not None:
        progress("checking" if plan is None or not outcome.modified else "validating")
    if original is not None:
        return _finished_in_memory(written, original, plan, outcome, (bool(repaired), seed, inputs),
                                   source_name or "the model given", verb)
    # A new output keeps the input's form, external data, even when the rewrite replaced every
    # external tensor; in place, such a model is written whole and the old data file left, with a
    # note.
    with staged_save(written, destination, data_name, external=external) as staged:
        del written  # written: free the rewritten weights (a folded result, say) now
        check_model(staged, source, source_name)
        if plan is not None and outcome.modified:
            outcome.validation = _validated(source, staged, plan, outcome, bool(repaired), seed,
                                            inputs)
        data = (data_name if data_name is not None and (staged.parent / data_name).is_file()
                else None)
    if replaced_data is not None:
        outcome.notes += _left_data_notes(replaced_data, data)
    _settle_status(outcome, destination if source_name is None else None, verb)
    return outcome


def _passes_run(model: ir.Model, passes: Sequence[ir.passes.PassBase], progress: Any,
                source: Path | None, source_name: str | None,
                original: Callable[[], ir.Model] | None) -> list:
    """:func:`run_passes`; a pass failing on a model the checker rejects: refused as it says."""
    try:
        return run_passes(model, passes, progress=progress)
    except Exception as e:
        if isinstance(e, ScatterRewriteError):
            raise
        before = (checker_failure(Path(os.path.realpath(source))) if source is not None
                  else checker_failure_in_memory(original()) if original is not None else None)
        if before is None:
            raise
        raise InvalidModelError(f"{source_name or source} fails onnx.checker before any "
                                f"rewrite, and this rewrite does not fix it: {before}") from e


def _finished_in_memory(written: ir.Model, original: Callable[[], ir.Model], plan: Any,
                        outcome: Outcome, proof: tuple[bool, int, dict | None],
                        source_name: str, verb: str | None) -> Outcome:
    """The end of :func:`rewrite_model` for a model held in memory (the API's): the rewritten
    model checked (:func:`~scatter_rewrite.checking.check_in_memory`) and validated against
    ``original()`` (the input, untouched) without a file, their onnxruntime sessions made from
    memory (:class:`~scatter_rewrite.validate.held.Held`). ``proof``: (whether the repair pass
    changed a node, the seed, the caller's inputs)."""
    check_in_memory(written, original, source_name)
    if plan is not None and outcome.modified:
        from scatter_rewrite.validate.held import Held

        outcome.validation = _validated(Held(original(), source_name),
                                        Held(written, "the rewritten model"), plan, outcome,
                                        *proof)
    _settle_status(outcome, None, verb)
    return outcome


def unused_inputs_notes(inputs: dict, used: dict) -> list[str]:
    """A note naming the caller's ``inputs`` entries the model does not take (``used``: those
    validation ran on): a misspelt name is not silently ignored."""
    extra = sorted(set(inputs) - set(used))
    if not extra:
        return []
    return [said(param("inputs"), f" has {len(extra)} entr{'y' if len(extra) == 1 else 'ies'} "
                 f"that the model does not take as an input, ignored: {', '.join(extra)}")]


def unvalidated_notes(inputs: dict | None, rtol: float | None, atol: float | None) -> list[str]:
    """A note naming what was given for a validation that does not run (``validate=False``)."""
    given = [param(name) for name, value in (("inputs", inputs), ("rtol", rtol), ("atol", atol))
             if value is not None]
    if not given:
        return []
    one = len(given) == 1
    return [said(joined(", ", given), f" {'is' if one else 'are'} not used: ",
                 param("validate", False),
                 f" skips the validation {'it is' if one else 'they are'} for")]


def parsed_form(proto: onnx.ModelProto, passes: Sequence[ir.passes.PassBase]
                ) -> Callable[[onnx.ModelProto], ScatterPassResult] | None:
    """The passes' rewrite done on the parsed file, when the model allows it (None: the IR path).

    A pass may declare such a form (``call_on_proto``: the same rewrite, report and checks, on
    ``onnx.ModelProto``, returning None, the model untouched, where it needs the IR; then the pass
    runs on the IR). It is tried only when that pass is the only one, the model fits in one
    protobuf, and the export holds no pattern a note names
    (:func:`~scatter_rewrite.export_patterns.may_note`): only the IR path computes the notes. The
    choice depends on the model alone, never on validation, so that both write the same bytes.
    """
    if len(passes) != 1 or getattr(passes[0], "call_on_proto", None) is None:
        return None
    from scatter_rewrite import model_io
    from scatter_rewrite.export_patterns import may_note

    # (a model that needs external data once written is written from the IR: model_io.staged_save)
    if may_note(proto) or proto.ByteSize() > model_io.PROTO_LIMIT_BYTES:
        return None
    return passes[0].call_on_proto


def _before_passes(model: ir.Model | None, passes: Sequence[ir.passes.PassBase], validate: bool,
                   inputs: dict | None, seed: int, rtol: float | None, atol: float | None):
    """What is read from the original before any pass: its scatter nodes checked, the export's
    notes, the validation plan (or the ValidationError that no inputs can be planned, raised
    once a pass rewrites). ``model`` None: the parsed-file form checks the nodes itself, and
    has no notes (:func:`parsed_form`)."""
    if model is None:
        return [], None, None
    # (the passes check the nodes too, but validation plans its inputs from them first)
    check_scatter_nodes(model)
    suspects = accumulate_export_notes(model)  # before the passes: what the export itself computes
    plan = unplanned = None
    if validate:  # (validation's imports only then: a --no-validate run starts faster)
        from scatter_rewrite import validate as validation

        try:
            plan = validation.plan_validation(model, seed=seed, inputs=inputs,
                                              dim_sizes=fixed_dim_sizes(passes), rtol=rtol,
                                              atol=atol)
        except ValidationError as e:
            if inputs is not None:
                raise  # (the user's inputs are refused, whatever the passes do)
            unplanned = e  # no inputs the original runs on: a failure once a pass rewrites
    return suspects, plan, unplanned


def _settle_status(outcome: Outcome, written: Path | None, verb: str | None = None) -> None:
    """The status, by the runtime the model is written for (:func:`verbs.target_of`): a model
    onnxruntime cannot run is UNRUNNABLE where onnxruntime is that runtime (or none is named);
    for another target (TensorRT, OpenVINO, a runtime at opset N) its proof judges it, and
    onnxruntime's missing kernels are a note."""
    outcome.status = _status(outcome.modified, outcome.validation is not None)
    cannot = (outcome.validation or {}).get("onnxruntime_cannot_run")
    if (outcome.validation or {}).get("stand_in"):
        outcome.status = WRITTEN  # (not proven where it runs: the status line says what ran)
    if not cannot:
        return
    if not meant_for_onnxruntime(verb, outcome.options):
        outcome.validation["onnxruntime_note"] = onnxruntime_note(
            cannot, outcome.validation.get("to_run_it", ""), written,
            _target(verb, outcome.options).summary)
        return
    outcome.status = UNRUNNABLE
    outcome.error = unrunnable_error(cannot, outcome.validation.get("to_run_it", ""), written)


def meant_for_onnxruntime(verb: str | None, options: dict[str, Any]) -> bool:
    """Whether the model a run of ``verb`` writes is meant for onnxruntime, whose missing kernels
    then make it UNRUNNABLE: its target's declared fact (``Target.onnxruntime``), or no target
    named (the verbs written for no runtime in particular: :func:`verbs.target_of`)."""
    target = _target(verb, options)
    return target is None or target.onnxruntime


def unrunnable_unvalidated(verb: str | None, options: dict[str, Any], written: Path) -> str | None:
    """For a run without validation (check's dry run): why a validated run of ``verb`` would end
    UNRUNNABLE on the model it wrote to ``written``, from onnxruntime's declared kernels alone
    (what validation reads too); None where it would not, or the model is meant for another
    runtime."""
    if not meant_for_onnxruntime(verb, options):
        return None
    from scatter_rewrite.validate.engines import what_onnxruntime_lacks

    cannot, to_run_it = what_onnxruntime_lacks(written)
    if not cannot:
        return None
    return said(f"onnxruntime cannot run the model it writes ({cannot}), which is meant for "
                "onnxruntime; ", _fix_said(to_run_it, None))


def _target(verb: str | None, options: dict[str, Any]):
    """The registered target a run writes its model for, or None (see verbs.target_of)."""
    from scatter_rewrite.targets import targets
    from scatter_rewrite.verbs import target_of

    name = target_of(verb, options)
    return targets().get(name) if name is not None else None


def onnxruntime_note(why: str, to_run_it: Said | str, written: Path | None, runtime: str) -> str:
    """The note of a model written for another runtime (``runtime``: the target's summary) that
    onnxruntime cannot run: why, and the command that writes a form it runs, if one does."""
    fix = _fix_said(to_run_it, written)
    return said(f"onnxruntime cannot run the written model ({why}); it is written for {runtime}, "
                "and proven in onnx.reference", *(("; for onnxruntime, ", fix) if to_run_it else ()))


def _status(modified: bool, validated: bool) -> str:
    return UNCHANGED if not modified else PASSED if validated else WRITTEN


def unrunnable_error(why: str, to_run_it: Said | str, written: Path | None) -> str:
    """The one line an UNRUNNABLE outcome gives: what onnxruntime lacks, that the model is written
    and correct, and the command that makes it run (``written``: the model's path; None for a
    model given in memory, where the command is the Python API's)."""
    return said(f"onnxruntime cannot run the written model ({why}); it is written, proven in "
                "onnx.reference; ", _fix_said(to_run_it, written))


def _fix_said(to_run_it: Said | str, written: Path | None) -> Said | str:
    """The call that writes a form onnxruntime runs, on the written file (``written``; None: the
    model in memory), as Python says it: the command line says it as its command
    (:meth:`Outcome.said_on_the_command_line`)."""
    if not to_run_it:
        return "no scatter-rewrite command writes a form it runs"
    fix = on_file(to_run_it, str(written)) if written is not None else to_run_it
    return said(fix, " writes a form it runs")


def _default_opset(model: ir.Model | onnx.ModelProto) -> int | None:
    imports = (model.opset_imports if isinstance(model, ir.Model)
               else {o.domain: o.version for o in model.opset_import})
    return imports.get("", imports.get("ai.onnx"))


def _finish(outcome: Outcome, started: float) -> Outcome:
    outcome.seconds = time.perf_counter() - started
    return outcome


def repaired_nodes(results: Sequence[ir.passes.PassResult]) -> list[str]:
    """The nodes a repairing pass (``ScatterPass.repairs``) changed, whichever verb ran it: their
    outputs are meant to differ from the original's where indices repeat."""
    return [n.node for r in results if getattr(r, "repairs", False) for n in r.rewritten]


def without_repaired(notes: list[str], repaired: list[str]) -> list[str]:
    """``notes`` (about the export) less those on a node the repair pass repaired."""
    return [note for note in notes if not any(note.startswith(f"{node} ") for node in repaired)]


def _validated(original: Path, rewritten: Path, plan: Any, outcome: Outcome,
               repaired: bool = False, seed: int = 0, inputs: dict | None = None) -> dict:
    """``validate``'s result, or repair's own proof where the repair pass changed a node (its
    results are meant to change: :mod:`scatter_rewrite.repair_proof`); a failure carries the
    passes that ran (``error.passes``), for the report."""
    from scatter_rewrite import validate as validation

    try:
        if repaired:
            from scatter_rewrite.repair_proof import prove_repair

            return prove_repair(original, rewritten, seed, inputs, plan.tolerance)
        runtime = _runtime_proof(outcome.verb, outcome.options)
        return validation.validate(original, rewritten, plan, *runtime).to_dict()
    except ScatterRewriteError as e:
        e.passes = outcome.passes
        raise


def _runtime_proof(verb: str | None, options: dict[str, Any]) -> tuple:
    """(the target's own runtime, the python it runs in: None where it is not found) for the proof
    there (``prepare``'s ``runtime_proof``, on by default, and ``runtime_python``), or ()."""
    target = _target(verb, options) if verb == "prepare" else None
    if target is None or target.runner is None or not options.get("runtime_proof", True):
        return ()
    return target.runner, target.runner.python(options.get("runtime_python"))


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
    for target, what in ((destination, "is"),
                         (destination.parent / name, "would write its external data to")):
        if os.path.realpath(target) in inputs:
            raise OptionError(said(f"{destination} {what} the input's external data file "
                                   f"{os.path.realpath(target)}: write the output elsewhere (",
                                   param("output"), ")"))
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


def failed_status(e: ScatterRewriteError) -> str:
    """The status of a model whose rewrite raised ``e``: UNREADABLE if its file cannot be read,
    else FAILED."""
    return UNREADABLE if isinstance(e, ModelLoadError) else FAILED


def rewrite_file_reporting(verb_name: str, source: str, kwargs: dict) -> Outcome:
    """For worker processes: never raises, returns a FAILED (or UNREADABLE) outcome instead (a bug
    of ours too, said so in the outcome's error; the traceback goes to the debug log, which ``-v``
    shows), so that one model's failure does not stop the others nor lose their outcomes."""
    started = time.perf_counter()
    try:
        return rewrite_file(verb_name, source, **kwargs)
    except ScatterRewriteError as e:
        error = str(e)
        if verb_name in VERBS:  # (the command line's workers: the flags of what it names)
            error = VERBS[verb_name].cli_message(e)
        return Outcome(str(source), None, getattr(e, "passes", []), status=failed_status(e),
                       error=error,
                       seconds=time.perf_counter() - started, verb=verb_name,
                       bad_usage=isinstance(e, OptionError))
    except Exception as e:
        logger.debug("%s: internal error", source, exc_info=True)
        return Outcome(str(source), None, status=FAILED, seconds=time.perf_counter() - started,
                       verb=verb_name,
                       error=internal_error_message(e))
