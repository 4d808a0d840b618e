"""Readiness report: what blocks a model on a target as it is, and whether the command that fixes
it reaches the target.

:func:`check_report` (``scatter-rewrite check``, ``scatter_rewrite.check``) judges a model file in
three steps: onnx.checker (a model it rejects is INVALID, with no findings); ``check(model,
target)``, one :class:`Finding` per scatter node (``Scatter``, ``ScatterElements``, ``ScatterND``,
``TensorScatter`` of the default domain) in the main graph, every If/Loop/Scan body and every
model-local function, with its op, opset, reduction, dtypes, the blockers found on the target as the
node is (empty: ready) and the command that fixes them, plus what blocks the whole model (its opset
above the target's); and :func:`dry_run`, the verb that reaches the target (``lower --opset N``,
``tensorrt --trt-version X``) run as the command line runs it with --no-validate, on every node of
the model, its output thrown away. The verdict (:attr:`CheckReport.status`): READY (nothing blocks
it as it is, and the verb succeeds), FIXABLE (something does, and the verb succeeds), BLOCKED (the
verb refuses it: its reason, on each node it names, a non-scatter node too) or INVALID. READY or
FIXABLE exactly when the verb succeeds: the verb's own code decides, not a second opinion.

Targets are the registered ones (:mod:`scatter_rewrite.targets`, docs/targets.md): each node is
judged by its target's ``judge`` (TensorRT's: :mod:`scatter_rewrite.readiness_tensorrt`;
opset-N's, below) or, for the others (no-scatter, qnn, rknn, ort-cpu, ...), from its table
(:func:`judge_by_support`: a scatter form the target does not run is blocked, its fix
``prepare --target T``), and where a target computes some other op wrongly (MNN's float Less:
``Target.node_fault``) each such node is blocked too; the dry run runs the target's verb, whose
last step, for a target with a published op table (qnn, rknn, litert, mnn, openvino, tvm,
ort-cpu: :class:`scatter_rewrite.targets.OpTable`), refuses every node outside it: check blocks
each such node with the table's source.

What ``check(model, target)`` finds per scatter node, by target:

``tensorrt-10`` / ``tensorrt-8.6``
    What TensorRT's ONNX parser rejects or silently gets wrong (sources in
    docs/tensorrt.md and :mod:`scatter_rewrite.passes.tensorrt`):
    the deprecated ``Scatter``; ``TensorScatter`` (opset 24: no parser supports it); ScatterND with
    any ``reduction`` attribute on 10 (10.0-10.8 reject even "none", onnx/onnx-tensorrt#957); any
    add/mul/max/min on 8.6 (silently ignored, NVIDIA/TensorRT#3750) and ScatterND reductions on 10
    (no support in any version); a ScatterElements reduction on 10 whose indices are not int64 or
    whose data type the ScatterElements plugin lacks; data types the scatter layer lacks
    (:func:`scatter_rewrite.passes.tensorrt.scatter_data_blocker`: UINT8, BFLOAT16 on 8.6, INT16 and
    other non-TensorRT types: no fix; BOOL: fixed by writing it through INT32); a ScatterElements on
    the ``reduction="none"`` path whose static indices/updates dimensions exceed data's
    ("Indices dimensions must be less than data dimensions!", NVIDIA/TensorRT#3650).
    A reduction TensorRT cannot run (any on 8.6; on 10 those the plugin cannot take) is fixed by
    ``scatter-rewrite tensorrt`` when the TensorRT-safe lowering applies
    (:func:`scatter_rewrite.passes.lowering.network_reduce.network_blocker`: a static number of updates,
    ...); otherwise no fix is given and the notes say why. A ScatterElements/ScatterND of another
    domain (what ``lower --mode custom|tensorrt-plugin`` writes) is judged as the ONNX op, since the
    parser dispatches on op_type alone: the plugin form is ready on 10 and blocked on 8.6, where
    its reduction would be ignored; no fix is given for it (our passes rewrite default-domain nodes
    only), the notes say to run ``tensorrt`` on the model before it was lowered.
``opset-N``
    What opset N lacks: ``Scatter`` at N >= 11 (deprecated), ScatterElements/ScatterND below 11,
    reductions add/mul below 16 and max/min below 18, TensorScatter below 24; and a node whose
    opset is above N (``lower --opset N`` moves the model down).

Before any of that, the model is checked with onnx.checker (full), as every rewriting verb does:
a model it rejects (an undefined node input, a cycle, an unknown op...) is INVALID with the reason
and no findings (:func:`check_report`); the deprecated ``Scatter`` alone is left to the findings
(they say to upgrade).

On every target, a default-domain node that breaks its op's schema (:mod:`scatter_rewrite.spec`:
an attribute of the wrong type or unknown, an input or output count the op does not have) is
blocked with the reason and no fix, and nothing else is said of it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from pathlib import Path

import onnx_ir as ir

from scatter_rewrite.errors import OptionError, internal_error_message
from scatter_rewrite.export_patterns import accumulate_export_suspect, mean_export_suspect
from scatter_rewrite.limits import OPSET_FLOOR
from scatter_rewrite.graph import (
    SCATTER_OPS, attr, describe_parts, is_default_domain, is_reference, iter_nodes,
    reference_reason,
)
from scatter_rewrite.type_inference import annotate_functions_with, restore_types
from scatter_rewrite.passes.fix_dims import FixDimsPass
from scatter_rewrite.passes.repair import REPAIR_NOTE, repairable_nodes
from scatter_rewrite.passes.tensorrt import CUSTOM_AS_ONNX, is_reducing_scatter
from scatter_rewrite.passes.to_scatternd import infer_missing_shapes, value_dtype
from scatter_rewrite.spec import REDUCTIONS_SINCE, scatter_node_problem
from scatter_rewrite.verbs import cli_commands, python_call

__all__ = ["BLOCKED", "CheckReport", "DryRun", "FIXABLE", "Finding", "INVALID", "READY", "STATUSES",
           "UNREADABLE",
           "SCHEMA_VERSION", "check", "check_report", "dry_run", "json_document", "parse_target",
           "target_verb", "OPSET_TARGET_FLOOR", "judge_by_support", "judge_opset",
           "TensorrtTwins", "unknown_reduction"]

logger = logging.getLogger("scatter_rewrite")
# opset-N from 9: Scatter's first opset (the lowest at which there is anything to say)
OPSET_TARGET_FLOOR = 9


@dataclasses.dataclass
class Finding:
    node: str  # graph.describe(): op, name, opset, where
    op: str
    opset: int
    where: str
    reduction: str | None
    data_type: str | None
    indices_type: str | None
    blockers: list[str] = dataclasses.field(default_factory=list)
    fix: str | None = None  # the command that removes the blockers (None: none known)
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def blocked(self) -> bool:
        return bool(self.blockers)

    @property
    def python_fix(self) -> str | None:
        """``fix`` as a Python call: ``scatter_rewrite.lower(model, opset=13)``."""
        return python_call(self.fix)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {"blocked": self.blocked, "python_fix": self.python_fix}


# A model's verdict on a target (CheckReport.status): READY as it is; FIXABLE, not ready as it is
# but the target's verb reaches it (its dry run succeeds); BLOCKED, that verb refuses the model (or
# none exists and something is blocked); INVALID, the model fails onnx.checker; UNREADABLE, the file
# cannot be read as a model (missing, truncated, not ONNX; the command line's batches: one entry).
READY, FIXABLE, BLOCKED, INVALID = "READY", "FIXABLE", "BLOCKED", "INVALID"
UNREADABLE = "UNREADABLE"
STATUSES = (READY, FIXABLE, BLOCKED, INVALID, UNREADABLE)  # in the order a summary counts them
# What check --json prints: bumped when a key changes meaning or goes.
SCHEMA_VERSION = 1


@dataclasses.dataclass
class DryRun:
    """The target's verb run on the model as the command line runs it, without validation and
    with nothing kept (:func:`dry_run`): its error (also where the validated run would end
    UNRUNNABLE, its model meant for onnxruntime lacking a kernel), or what it would do."""

    command: str  # the command line, e.g. "scatter-rewrite lower --opset 13"
    error: str | None = None  # why the verb refuses the model (None: it succeeds)
    would: list[str] = dataclasses.field(default_factory=list)  # its report, one line each
    # the nodes a pass of the TensorRT flow left, with why (passes.base.NodeNote): its error's
    declined: list = dataclasses.field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict:
        return {"command": self.command, "succeeded": self.succeeded, "error": self.error,
                "would": self.would}


@dataclasses.dataclass
class CheckReport:
    """What ``check`` found: the model's onnx.checker failure (``invalid``, None if it passes; no
    findings then), one :class:`Finding` per scatter node and per other node the target's verb
    refuses, what blocks the whole model (``blockers``: its opset above the target's) and the dry
    run of the target's verb (``dry_run``; None where no verb reaches the target: opset-9/10)."""

    model: str
    target: str
    findings: list[Finding] = dataclasses.field(default_factory=list)
    invalid: str | None = None
    notes: list[str] = dataclasses.field(default_factory=list)  # about the whole model
    blockers: list[str] = dataclasses.field(default_factory=list)  # about the whole model
    dry_run: DryRun | None = None
    unreadable: str | None = None  # why the file cannot be read as a model (nothing else is known)

    @property
    def reachable(self) -> bool:
        """Whether the target's verb reaches the target (its dry run succeeds); where no verb
        exists, whether the model is ready as it is."""
        if self.unreadable is not None:
            return False
        if self.dry_run is None:
            return self.invalid is None and not self._blocked_as_is
        return self.dry_run.succeeded

    @property
    def status(self) -> str:
        """UNREADABLE, INVALID, BLOCKED, READY or FIXABLE (see above): one of the last two exactly
        when the dry run of the target's verb succeeds."""
        if self.unreadable is not None:
            return UNREADABLE
        if self.invalid is not None:
            return INVALID
        if not self.reachable:
            return BLOCKED
        return FIXABLE if self._blocked_as_is else READY

    @property
    def _blocked_as_is(self) -> bool:
        return bool(self.blockers) or any(f.blocked for f in self.findings)

    @property
    def blocked(self) -> bool:
        """Not ready for the target as it is (whether or not the fix reaches it)."""
        return self.status != READY

    @property
    def fix(self) -> str | None:
        """The command that makes the model ready, when it is not and the command's dry run
        succeeds (an invalid model too: a verb may make it valid, as inlining TorchScript's
        constant Ifs corrects the shapes they declare)."""
        if self.status == READY or not self.reachable or self.dry_run is None:
            return None
        return self.dry_run.command

    def to_dict(self) -> dict:
        """One model's entry in ``check --json`` (see :func:`json_document`)."""
        return {"model": self.model, "status": self.status, "ready": self.status == READY,
                "reachable": self.reachable, "fix": self.fix,
                "invalid": self.invalid, "unreadable": self.unreadable, "blockers": self.blockers,
                "blocked_nodes": sum(f.blocked for f in self.findings),
                "dry_run": self.dry_run.to_dict() if self.dry_run is not None else None,
                "notes": self.notes, "findings": [f.to_dict() for f in self.findings]}


def json_document(reports: list[CheckReport], target: str) -> dict:
    """``check --json``: the same document for one model or many."""
    statuses = [r.status for r in reports]
    return {"schema_version": SCHEMA_VERSION, "target": target,
            "models": [r.to_dict() for r in reports],
            "summary": {"models": len(reports),
                        **{status.lower(): statuses.count(status)
                           for status in STATUSES},
                        "exit_code": 0 if set(statuses) <= {READY} else 1}}


def check_report(path: str | os.PathLike, target: str = "tensorrt-10",
                 name: str | None = None) -> CheckReport:
    """onnx.checker (full) on the model file at ``path``; if it passes, :func:`check` on it, what
    blocks the whole model, and the dry run of the target's verb (:func:`dry_run`), whose refusal
    is the model's and each node's it names. ``name``: how the report names the model (default:
    its path)."""
    from scatter_rewrite.model_io import load_proto, to_ir
    from scatter_rewrite.pipeline import checker_failure

    kind, version = parse_target(target)  # a bad target is refused before any work
    report = CheckReport(str(name or path), target)
    proto = load_proto(path)  # (a missing, empty or truncated file: ModelLoadError)
    failure = checker_failure(Path(path))
    # (the deprecated Scatter: the findings say it, with the fix)
    if failure is not None and "Scatter is deprecated" not in failure:
        # Nothing of a model the checker rejects is ready, nor read node by node; whether the
        # target's verb makes it valid is the dry run's to say.
        report.invalid = f"fails onnx.checker: {failure}"
        report.dry_run = dry_run(path, kind, version, invalid=True)
        return report
    model = to_ir(proto, path)
    del proto
    report.findings = check(model, target)
    report.blockers = _model_blockers(model, kind, version)
    if any(_is_custom_scatter(node) for node, _ in iter_nodes(model)):
        report.notes.append("the model holds custom-domain scatter nodes (lower's custom mode): "
                            "onnxruntime runs it only with the custom ops registered, "
                            "scatter_rewrite.custom_ops.register(session_options)")
    report.dry_run = dry_run(path, kind, version)
    if report.dry_run is not None and not report.dry_run.succeeded:
        _with_fixed_dims(report, path, kind, version)
    if report.dry_run is not None and not report.dry_run.succeeded:
        _blame(report, model)
    return report


# The size a dimension a fix names (--fix-dim NAME=SIZE) is fixed to for the dry run: the one the
# judges try it at (TensorrtTwins).
_TRIED_SIZE = 2


def _with_fixed_dims(report: CheckReport, path, kind: str, version) -> None:
    """The verb refused the model as it is, and nodes' fixes fix dimensions first (``--fix-dim
    NAME=SIZE``): the verb run again with them fixed is the report's run, which decides. It
    succeeds: FIXABLE, that command the fix. It refuses too: BLOCKED, and no node keeps a fix
    that does not reach the target (:func:`_blame`)."""
    import re

    dims = list(dict.fromkeys(name for f in report.findings if f.fix
                              for name in re.findall(r"--fix-dim (\S+)=SIZE", f.fix)))
    if not dims:
        return
    fixed = dry_run(path, kind, version, fix_dims={name: _TRIED_SIZE for name in dims})
    # (its report says the size it tried, as the command says SIZE)
    fixed.would = [line.replace(f"' fixed to {_TRIED_SIZE}",
                                f"' fixed to SIZE ({_TRIED_SIZE} in this dry run)")
                   for line in fixed.would]
    report.dry_run = fixed


def target_name(kind: str, version) -> str:
    """The registered target's name for :func:`parse_target`'s (kind, version)."""
    return f"{kind}-{version}" if kind in ("tensorrt", "opset") else str(version)


def target_verb(kind: str, version) -> tuple[str, dict] | None:
    """The verb that brings a model to the target, with its options, as the target declares it
    (:mod:`scatter_rewrite.targets`): ``lower --opset N`` for opset-N (N >= 11, the lowest lower
    reaches), ``tensorrt --trt-version X`` for tensorrt-X, ``prepare --target T`` for the others;
    None where no verb does."""
    from scatter_rewrite.targets import get_target

    found = get_target(target_name(kind, version)).fix_verb
    return None if found is None else (found[0], dict(found[1]))


def fix_command(kind: str, version) -> str | None:
    """:func:`target_verb` as the command line writes it."""
    from scatter_rewrite.verbs import VERBS

    found = target_verb(kind, version)
    if found is None:
        return None
    verb = VERBS[found[0]]
    options = verb.bind(found[1], cli=True)
    flags = " ".join(f"{o.cli_flag} {options[o.name]}" for o in verb.options if o.name in found[1])
    return f"scatter-rewrite {verb.command} {flags}"


def dry_run(path: str | os.PathLike, kind: str, version, invalid: bool = False,
            fix_dims: dict[str, int] | None = None) -> DryRun | None:
    """The target's verb (:func:`target_verb`) on the model file at ``path`` (``fix_dims``: with
    those dimensions fixed first, the command saying ``--fix-dim NAME=SIZE``), as the command line
    runs it with --no-validate (:func:`scatter_rewrite.pipeline.rewrite_model`: the same passes, the
    same opset move and its self-check, onnx.checker on the result), its output written to a
    temporary folder that is removed; None where no verb reaches the target. ``invalid``: the
    model fails onnx.checker, and whatever stops the verb on it is its refusal (an internal error
    too, said as such)."""
    import tempfile

    from scatter_rewrite.errors import ScatterRewriteError
    from scatter_rewrite.model_io import data_file_name, external_data_files, load_proto, to_ir
    from scatter_rewrite.pipeline import rewrite_model, unrunnable_unvalidated
    from scatter_rewrite.verbs import VERBS

    found = target_verb(kind, version)
    if found is None:
        return None
    name, given = found
    verb = VERBS[name]
    options = verb.bind(given | ({"fix_dims": fix_dims} if fix_dims else {}), cli=True)
    run = DryRun(" ".join([fix_command(kind, version),
                           *(f"--fix-dim {dim}=SIZE" for dim in fix_dims or ())]))
    source = Path(path)
    try:
        proto = load_proto(source)
        external = bool(external_data_files(proto, source))
        model = to_ir(proto, source)
        del proto
        with tempfile.TemporaryDirectory(prefix="scatter-rewrite-check-") as tmp:
            destination = Path(tmp, "dry-run.onnx")
            outcome = rewrite_model(model, verb.make_passes(**options), source, destination,
                                    verb=name, options=options, validate=False,
                                    external=external, data_name=data_file_name(destination))
            # (the status a validated run then gives: UNRUNNABLE is a failure too)
            unrunnable = (unrunnable_unvalidated(name, options, destination)
                          if outcome.modified else None)
        if unrunnable is not None:
            run.error = cli_commands(unrunnable)
            return run
    except ScatterRewriteError as e:
        # (said as the command line says it, as run.command is: --max-intermediate-mib 354)
        run.error = verb.cli_message(e)
        run.declined = [dataclasses.replace(note, detail=verb.cli_message(
            ScatterRewriteError(note.detail, parameters=e.parameters)))
            for note in getattr(e, "declined", [])]
        return run
    except Exception as e:
        if not invalid:
            raise  # a bug of ours, on a valid model
        logger.debug("%s: the dry run stopped on the invalid model", path, exc_info=True)
        run.error = internal_error_message(e, "internal error on the invalid model", "")
        return run
    for p in outcome.passes:
        run.would += [f"{p['pass']}: rewrote {n['node']}: {verb.cli_text(n['detail'])}"
                      for n in p["rewritten"]]
        run.would += [f"{p['pass']}: {verb.cli_text(note)}" for note in p["notes"]]
    return run


def _model_blockers(model: ir.Model, kind: str, version) -> list[str]:
    """What blocks the whole model on the target: its default-domain opset (the model's or a
    function's) above the target's, or above the highest TensorRT's parser documents."""
    from scatter_rewrite.graph import iter_scopes
    from scatter_rewrite.passes.tensorrt import PARSER_MAX_OPSET as MAX_OPSET

    top = max(scope.opset for scope in iter_scopes(model))
    if kind == "opset" and top > int(version):
        return [f"the model is at opset {top}: a runtime at opset {version} does not load it"]
    if kind == "tensorrt" and top > MAX_OPSET[str(version)]:
        return [f"the model is at opset {top}: TensorRT {version}'s parser documents opsets up to "
                f"{MAX_OPSET[str(version)]}"]
    if kind not in ("opset", "tensorrt"):
        from scatter_rewrite.targets import get_target

        highest = get_target(str(version)).opsets[1]
        if highest is not None and top > highest:
            return [f"the model is at opset {top}: {version} loads opsets up to {highest}"]
    return []


def _blame(report: CheckReport, model: ir.Model) -> None:
    """The verb refused the model: each node it names (``declined`` by a pass of the TensorRT flow,
    or named in the error, as ``graph.describe`` names it) is blocked with its reason, a node not
    yet in the findings (not a scatter: a Resize the opset move cannot convert) added; a finding
    whose fix was that very command loses it (a fix with more options, ``--fix-dim``, stays)."""
    from scatter_rewrite.graph import describe

    run = report.dry_run
    reasons = {note.node: note.detail for note in run.declined}
    if not reasons:
        for node, scope in iter_nodes(model):
            named = describe(node, scope)
            if named in run.error:
                reasons.setdefault(named, run.error)
    by_node = {f.node: f for f in report.findings}
    nodes = {describe(n, s): (n, s) for n, s in reversed(list(iter_nodes(model)))}
    for named, reason in reasons.items():
        if " written for " in named:  # (a node a pass wrote: blamed on the user's node)
            named, reason = named.split(" written for ", 1)[1], f"{named}: {reason}"
        finding = by_node.get(named)
        if finding is None and named not in nodes:  # (one the verb made: a function's copy)
            report.blockers.append(f"{run.command} refuses {named}: {reason}")
            continue
        if finding is None:
            node, scope = nodes[named]
            data = node.inputs[0] if node.inputs else None
            finding = Finding(named, node.op_type, scope.opset, scope.where, None,
                              data.dtype.name if data is not None and data.dtype else None, None)
            report.findings.append(finding)
        if not any(reason in b for b in finding.blockers):
            finding.blockers.append(f"{run.command} refuses it: {reason}")
        if finding.fix == run.command:
            finding.fix = None  # (a fix with options, --fix-dim, is another command: kept)
    for finding in report.findings:
        if finding.node not in reasons and finding.fix == run.command:
            finding.blockers.append(f"{run.command} stops at another node")
            finding.fix = None


def _is_custom_scatter(node: ir.Node) -> bool:
    from scatter_rewrite.custom_ops import DOMAIN

    return node.domain == DOMAIN


def parse_target(target: str) -> tuple[str, object]:
    """("tensorrt", "8.6"|"10"|"11"), ("opset", N), or (the family, the name) of another target
    of :mod:`scatter_rewrite.targets`; OptionError otherwise (an opset out of range is said to
    be so)."""
    from scatter_rewrite.targets import get_target
    from scatter_rewrite.verbs import TRT_VERSIONS, highest_opset

    t = target.strip().lower()
    if t.startswith("tensorrt-") and t.split("-", 1)[1] in TRT_VERSIONS:
        return "tensorrt", t.split("-", 1)[1]
    m = re.fullmatch(r"opset-(\d+)", t)
    if m and OPSET_TARGET_FLOOR <= int(m.group(1)) <= highest_opset():
        return "opset", int(m.group(1))
    if m:
        raise OptionError(f"target={target!r} is out of range: pick opset-{OPSET_TARGET_FLOOR} "
                          f"to opset-{highest_opset()} (the highest this onnx defines)",
                          parameters=("target",))
    found = get_target(t)  # (an unknown name: the error names every registered one)
    return found.family, found.name


def _dtype(model: ir.Model, scope, value: ir.Value | None) -> str | None:
    dtype = value_dtype(model, scope, value)
    return dtype.name if dtype is not None else None


def check(model: ir.Model, target: str = "tensorrt-10") -> list[Finding]:
    """One finding per scatter node; ``finding.blocked`` says whether it blocks ``target`` as the
    model is. Whether the fix reaches the target is the dry run's to say (:func:`check_report`)."""
    kind, version = parse_target(target)
    infer_missing_shapes(model)  # dtypes and static dims of values the exporter left unannotated
    # As the tensorrt pass sees a function's reductions: with the types its call sites agree on.
    wanted = is_reducing_scatter if kind == "tensorrt" else _is_scatter
    if kind not in ("tensorrt", "opset"):
        from scatter_rewrite.targets import get_target

        if get_target(target_name(kind, version)).node_fault is not None:
            wanted = _any_node  # (the faulty ops' types too, as the target's passes see them)
    borrowed = annotate_functions_with(model, wanted) if kind != "opset" else []
    try:
        return _findings(model, kind, version, borrowed)
    finally:
        restore_types(borrowed)


def _findings(model: ir.Model, kind: str, version, borrowed) -> list[Finding]:
    from scatter_rewrite.targets import get_target

    target = get_target(target_name(kind, version))
    judge = target.judge or (lambda node, scope, f, context: judge_by_support(node, f, target))
    inlined = TensorrtTwins(model, borrowed)
    findings = []
    repairable = repairable_nodes(model)
    for node, scope in iter_nodes(model):
        # TensorRT's parser dispatches on op_type alone: a ScatterElements/ScatterND of another
        # domain (lower --mode custom or tensorrt-plugin writes them) is imported as the ONNX op.
        custom = not is_default_domain(node)
        as_onnx = kind == "tensorrt" and node.op_type in CUSTOM_AS_ONNX
        if node.op_type not in SCATTER_OPS and target.node_fault is not None and not custom:
            findings += _node_faults(model, node, scope, target)
        if node.op_type not in SCATTER_OPS or (custom and not as_onnx):
            continue
        inputs = list(node.inputs) + [None, None, None]
        # (lower wrote the custom-domain nodes: judged as the ONNX op, not held to its schema)
        malformed = scatter_node_problem(node, scope.opset) if not custom else None
        reduces = node.op_type in ("ScatterElements", "ScatterND")
        reduction = attr(node, "reduction", None) if reduces else None
        # (a malformed one's is shown as absent)
        reduction = reduction if isinstance(reduction, str) else None
        referenced = node.attributes.get("reduction")
        if reduction is None and referenced is not None and is_reference(referenced):
            reduction = "@" + referenced.ref_attr_name  # the function's attribute
        op = f"{node.domain}::{node.op_type}" if custom else node.op_type
        indices = inputs[1] if node.op_type != "TensorScatter" else inputs[2]
        finding = Finding(describe_parts(op, node.name, scope.opset, scope.where), op, scope.opset,
                          scope.where, reduction, _dtype(model, scope, inputs[0]),
                          _dtype(model, scope, indices))
        # (nothing else is read from a malformed node: its attributes are not what the schema says)
        if malformed is not None:
            finding.blockers.append(f"malformed: {malformed}")
            finding.notes.append("no rewrite fixes it: fix the exporter or the model")
            findings.append(finding)
            continue
        judge(node, scope, finding, inlined)
        if finding.blockers and reference_reason(node) is not None:
            _specializing_fix(finding, kind, version)
        accumulating = accumulate_export_suspect(node, finding.reduction)
        if accumulating is not None:
            finding.notes.append(accumulating)
        if (mean := mean_export_suspect(node, finding.reduction)) is not None:
            finding.notes.append(cli_commands(mean))  # (check says commands, as its fixes)
        if id(node) in repairable:
            finding.notes.append(REPAIR_NOTE)
            finding.fix = finding.fix or "scatter-rewrite repair"
        findings.append(finding)
    return findings


def _node_faults(model: ir.Model, node: ir.Node, scope, target) -> list[Finding]:
    """A node that is no scatter which the target computes wrongly (its ``node_fault``): one
    finding, blocked with the reason, fixed by the target's verb; none otherwise."""
    operand = next((v for v in node.inputs if v is not None), None)
    dtype = _dtype(model, scope, operand)
    reason = target.node_fault(node, dtype)
    if reason is None:
        return []
    return [Finding(describe_parts(node.op_type, node.name, scope.opset, scope.where),
                    node.op_type, scope.opset, scope.where, None, dtype, None, [reason],
                    fix_command(target.family, target.name))]


class TensorrtTwins:
    """The model as ``scatter-rewrite tensorrt`` sees it before lowering: a copy with the constant
    Ifs that hide a reducing scatter's rank inlined, and, per set of dimension names, one with those
    dimensions fixed first (``--fix-dim``); each made on first use. The copies are made without
    the function types ``borrowed`` from the call sites, and get them again from their own call
    sites (whose shapes fixing a dimension may have made static)."""

    def __init__(self, model: ir.Model, borrowed):
        self.model = model
        self._borrowed = borrowed
        self._copies: dict[tuple[str, ...], ir.Model] = {}

    def twin(self, node: ir.Node, fixed: tuple[str, ...] = ()) -> ir.Node | None:
        """``node`` in the copy with the ``fixed`` dimensions fixed (found by op and name), None
        when it has no name or is not found."""
        if not node.name:
            return None
        copy = self._copies.get(fixed)
        if copy is None:
            from scatter_rewrite.type_inference import weightless_copy
            from scatter_rewrite.passes.tensorrt import inline_rank_hiding_ifs

            annotated = [(value, value.type, value.shape) for value, _ in self._borrowed]
            restore_types(self._borrowed)
            try:
                copy = self._copies[fixed] = weightless_copy(self.model)
            finally:
                for value, type_, shape in annotated:
                    value.type, value.shape = type_, shape
            if fixed:  # fixed to 2: shapes inferred again, shape arithmetic folded (fix_dims)
                FixDimsPass({name: 2 for name in fixed})(copy)
            if inline_rank_hiding_ifs(copy):
                infer_missing_shapes(copy)
            annotate_functions_with(copy, is_reducing_scatter)
        return next((n for n, _ in iter_nodes(copy)
                     if n.op_type == node.op_type and n.name == node.name), None)


def judge_by_support(node: ir.Node, f: Finding, target) -> None:
    """A target's judgement from its table (:class:`scatter_rewrite.targets.Target` ``runs``):
    a scatter it does not run is blocked, with what the target gets wrong in the notes, and its
    fix is the target's verb (whether that verb reaches the target is the dry run's to say)."""
    if unknown_reduction(f, f"whether {target.name} runs it"):
        return
    if node.op_type == "Scatter" and f.opset >= OPSET_FLOOR:
        # the one rule of every target: the checker rejects it, and the target's verb upgrades it
        f.blockers.append(f"Scatter is deprecated from opset {OPSET_FLOOR} (the checker and "
                          f"onnxruntime reject it at {f.opset})")
        f.fix = fix_command(target.family, target.name)
        return
    reduction = f.reduction or "none"
    if target.supports(node.op_type, reduction, f.data_type, f.indices_type):
        fault = target.node_fault(node, f.data_type) if target.node_fault is not None else None
        if fault is not None:  # (a form it runs, wrong for this node: MNN's ScatterND 2-tuples)
            f.blockers.append(fault)
            f.fix = fix_command(target.family, target.name)
        return
    what = node.op_type + (f" reduction={reduction}" if reduction != "none" else "")
    on = f" on {f.data_type} data" if f.data_type else ""
    f.blockers.append(f"{target.name} does not run {what}{on}"
                      + (" (it runs no scatter)" if target.scatter_free else ""))
    f.notes += [f"{target.name}: {wrong}" for wrong in target.gets_wrong]
    f.fix = fix_command(target.family, target.name)


def _is_scatter(node: ir.Node) -> bool:
    return is_default_domain(node) and node.op_type in SCATTER_OPS


def _any_node(node: ir.Node) -> bool:
    return True


def judge_opset(node: ir.Node, f: Finding, n: int) -> None:
    _opset_lacks(node, f, n)
    # (a Scatter above 10 is refused above, fixed by upgrade)
    if f.opset > n and node.op_type != "Scatter":
        # The node's own schema is newer than the target's: a runtime at opset n does not load it.
        f.blockers.append(f"opset {f.opset}: a runtime at opset {n} does not load it")
        # (lower leaves a referenced reduction alone)
        if not (f.reduction or "").startswith("@") and n >= 11:
            f.fix = f"scatter-rewrite lower --opset {n}"


def _opset_lacks(node: ir.Node, f: Finding, n: int) -> None:
    op, reduction = node.op_type, f.reduction or "none"
    if op == "Scatter":
        if n >= 11:
            f.blockers.append(f"Scatter is deprecated from opset 11 (the checker and onnxruntime "
                              f"reject it at {n})")
            f.fix = f"scatter-rewrite upgrade --opset {n}"
        return
    if op == "TensorScatter":
        if n < 24:
            f.blockers.append("TensorScatter exists from opset 24 only")
            f.fix = f"scatter-rewrite lower --opset {n}" if 11 <= n <= 23 else None
        return
    if n < 11:
        f.blockers.append(f"{op} exists from opset 11 only")
        return
    if n < max(REDUCTIONS_SINCE.values()) and unknown_reduction(f, f"whether opset {n} has it"):
        return
    first = REDUCTIONS_SINCE.get(reduction)
    if first is not None and n < first:
        f.blockers.append(f"{op} reduction={reduction} exists from opset {first} only")
        f.fix = f"scatter-rewrite lower --opset {n}"


def unknown_reduction(f: Finding, question: str) -> bool:
    """Block ``f`` when its reduction refers to an attribute of the enclosing function (known only
    at a call site, so neither the target nor scatter-rewrite's passes can tell what it is)."""
    if not (f.reduction or "").startswith("@"):
        return False
    f.blockers.append(f"reduction={f.reduction} refers to an attribute of the function, known only "
                      f"at a call site: {question} cannot be told here")
    return True


def _specializing_fix(f: Finding, kind: str, version) -> None:
    """A blocked node whose axis/reduction/mode is a function attribute: the verb for the target
    gives the function one copy per call binding, the value known in each (passes/specialize.py),
    and rewrites what it can there; its output is what to check next."""
    verb = fix_command(kind, version)
    if verb is None:
        return
    f.fix = verb
    f.notes.append(f"{verb} gives the function one copy per call, each with the value its call "
                   "passes, and rewrites them where it can: check its output")
