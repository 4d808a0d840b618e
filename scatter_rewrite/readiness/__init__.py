"""Readiness report: what blocks a model on a target as it is, and whether the command that fixes
it reaches the target.

:func:`check_report` (``scatter-rewrite check``, ``scatter_rewrite.check``) judges a model file in
three steps: onnx.checker (a model it rejects is INVALID, with no findings); ``check(model,
target)``, one :class:`Finding` per scatter node (``Scatter``, ``ScatterElements``, ``ScatterND``,
``TensorScatter`` of the default domain) in the main graph, every If/Loop/Scan body and every
model-local function, with its op, opset, reduction, dtypes, the blockers found on the target as the
node is (empty: ready) and the command that fixes them, plus what blocks the whole model (its opset
above the target's); and :func:`scatter_rewrite.readiness.dry_run.dry_run`, the verb that reaches
the target (``lower --opset N``, ``tensorrt --trt-version X``) run as the command line runs it
with --no-validate, on every node of the model, its output thrown away. The report's data
(:class:`Finding`, :class:`CheckReport`): :mod:`scatter_rewrite.readiness.report`. The verdict
(:attr:`CheckReport.status`): READY (nothing blocks
it as it is, and the verb succeeds), FIXABLE (something does, and the verb succeeds), BLOCKED (the
verb refuses it: its reason, on each node it names, a non-scatter node too) or INVALID. READY or
FIXABLE exactly when the verb succeeds: the verb's own code decides, not a second opinion.

Targets are the registered ones (:mod:`scatter_rewrite.targets`, docs/targets.md): each node is
judged by its target's ``judge`` (TensorRT's: :mod:`scatter_rewrite.readiness.tensorrt`;
opset-N's, below: :mod:`scatter_rewrite.readiness.judges`) or, for the others (no-scatter, qnn,
rknn, ort-cpu, ...), from its table (:func:`scatter_rewrite.readiness.judges.judge_by_support`:
a scatter form the target does not run is blocked, its fix
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

import logging
from collections.abc import Callable
from typing import Any
import os
import re
from pathlib import Path

import onnx_ir as ir

from scatter_rewrite.errors import OptionError
from scatter_rewrite.limits import DEFAULT_CHECK_TARGET
from scatter_rewrite.export_patterns import accumulate_export_suspect, mean_export_suspect
from scatter_rewrite.graph import (
    SCATTER_OPS, attr, describe_parts, is_default_domain, is_reference, iter_nodes,
    reference_reason,
)
from scatter_rewrite.type_inference import annotate_functions_with, restore_types
from scatter_rewrite.passes.repair import REPAIR_NOTE, repairable_nodes
from scatter_rewrite.passes.tensorrt import CUSTOM_AS_ONNX, is_reducing_scatter
from scatter_rewrite.passes.to_scatternd import infer_missing_shapes, value_dtype
from scatter_rewrite.readiness.dry_run import dry_run, fix_command, target_name
from scatter_rewrite.readiness.judges import judge_by_support, judge_opset
from scatter_rewrite.readiness.report import CheckReport, Finding
from scatter_rewrite.readiness.tensorrt import TensorrtTwins, judge_tensorrt
from scatter_rewrite.spec import scatter_node_problem
from scatter_rewrite.said import Call, param, said
from scatter_rewrite.verbs import command, spoken

__all__ = ["check", "check_report", "parse_target", "OPSET_TARGET_FLOOR"]

logger = logging.getLogger("scatter_rewrite")
# opset-N from 9: Scatter's first opset (the lowest at which there is anything to say)
OPSET_TARGET_FLOOR = 9


def check_report(path: str | os.PathLike, target: str = DEFAULT_CHECK_TARGET,
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

    dims = list(dict.fromkeys(name for f in report.findings if f.remedy is not None
                              for part in f.remedy.parts if isinstance(part, Call)
                              for option, sizes in part.arguments if option == "fix_dims"
                              for name in sizes))
    if not dims:
        return
    fixed = dry_run(path, kind, version, fix_dims={name: _TRIED_SIZE for name in dims})
    # (its report says the size it tried, as the command says SIZE)
    fixed.would = [line.replace(f"' fixed to {_TRIED_SIZE}",
                                f"' fixed to SIZE ({_TRIED_SIZE} in this dry run)")
                   for line in fixed.would]
    report.dry_run = fixed


def _model_blockers(model: ir.Model, kind: str, version) -> list[str]:
    """What blocks the whole model on the target: its default-domain opset (the model's or a
    function's) above the target's, or above the highest TensorRT's parser documents."""
    from scatter_rewrite.graph import iter_scopes
    from scatter_rewrite.targets.tensorrt.parser import PARSER_MAX_OPSET as MAX_OPSET

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
            finding.remedy = None  # (a fix with options, --fix-dim, is another command: kept)
    for finding in report.findings:
        if finding.node not in reasons and finding.fix == run.command:
            finding.blockers.append(f"{run.command} stops at another node")
            finding.remedy = None


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
        raise OptionError(said(param("target", target), " is out of range: pick "
                               f"opset-{OPSET_TARGET_FLOOR} to opset-{highest_opset()} (the "
                               "highest this onnx defines)"))
    found = get_target(t)  # (an unknown name: the error names every registered one)
    return found.family, found.name


def _dtype(model: ir.Model, scope, value: ir.Value | None) -> str | None:
    dtype = value_dtype(model, scope, value)
    return dtype.name if dtype is not None else None


def check(model: ir.Model, target: str = DEFAULT_CHECK_TARGET) -> list[Finding]:
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
    judge = judged_by(target)
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
            finding.notes.append(spoken(mean, {}))  # (check says commands, as its fixes)
        if id(node) in repairable:
            finding.notes.append(REPAIR_NOTE)
            finding.remedy = finding.remedy or command("repair")
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


def _is_scatter(node: ir.Node) -> bool:
    return is_default_domain(node) and node.op_type in SCATTER_OPS


def _any_node(node: ir.Node) -> bool:
    return True


def _specializing_fix(f: Finding, kind: str, version) -> None:
    """A blocked node whose axis/reduction/mode is a function attribute: the verb for the target
    gives the function one copy per call binding, the value known in each (passes/specialize.py),
    and rewrites what it can there; its output is what to check next."""
    verb = fix_command(kind, version)
    if verb is None:
        return
    f.remedy = verb
    f.notes.append(f"{spoken(verb, {})} gives the function one copy per call, each with the value "
                   "its call passes, and rewrites them where it can: check its output")


def judged_by(target) -> Callable[[ir.Node, Any, Finding, Any], None]:
    """The judgement ``check`` gives each node for ``target``: the one its ``judge`` names
    ((kind, argument), data, so that targets/ imports nothing of check's: "opset" with its opset,
    "tensorrt" with its version), else its table's (:func:`judge_by_support`)."""
    if target.judge is None:
        return lambda node, scope, f, context: judge_by_support(node, f, target)
    kind, argument = target.judge
    if kind == "opset":
        return lambda node, scope, f, context: judge_opset(node, f, argument)
    if kind == "tensorrt":
        return lambda node, scope, f, context: judge_tensorrt(node, f, argument, context)
    raise AssertionError(f"target {target.name!r} names an unknown judge {kind!r}")
