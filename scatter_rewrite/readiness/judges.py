"""The judges of ``check`` other than TensorRT's (:mod:`scatter_rewrite.readiness.tensorrt`): a
target's judgement from its table (:func:`judge_by_support`: no-scatter, qnn, rknn, ort-cpu, ...),
opset-N's (:func:`judge_opset`), and the blocker every judge gives a reduction that is a function's
attribute (:func:`unknown_reduction`). Each fills a
:class:`scatter_rewrite.readiness.report.Finding` (blockers, notes, fix).
"""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.limits import OPSET_FLOOR
from scatter_rewrite.readiness.dry_run import fix_command
from scatter_rewrite.readiness.report import Finding
from scatter_rewrite.spec import REDUCTIONS_SINCE
from scatter_rewrite.verbs import command

__all__ = ["judge_by_support", "judge_opset", "unknown_reduction"]


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
        f.remedy = fix_command(target.family, target.name)
        return
    reduction = f.reduction or "none"
    if target.supports(node.op_type, reduction, f.data_type, f.indices_type):
        fault = target.node_fault(node, f.data_type) if target.node_fault is not None else None
        if fault is not None:  # (a form it runs, wrong for this node: MNN's ScatterND 2-tuples)
            f.blockers.append(fault)
            f.remedy = fix_command(target.family, target.name)
        return
    what = node.op_type + (f" reduction={reduction}" if reduction != "none" else "")
    on = f" on {f.data_type} data" if f.data_type else ""
    f.blockers.append(f"{target.name} does not run {what}{on}"
                      + (" (it runs no scatter)" if target.scatter_free else ""))
    f.notes += [f"{target.name}: {wrong}" for wrong in target.gets_wrong]
    f.remedy = fix_command(target.family, target.name)


def judge_opset(node: ir.Node, f: Finding, n: int) -> None:
    _opset_lacks(node, f, n)
    # (a Scatter above 10 is refused above, fixed by upgrade)
    if f.opset > n and node.op_type != "Scatter":
        # The node's own schema is newer than the target's: a runtime at opset n does not load it.
        f.blockers.append(f"opset {f.opset}: a runtime at opset {n} does not load it")
        # (lower leaves a referenced reduction alone)
        if not (f.reduction or "").startswith("@") and n >= OPSET_FLOOR:
            f.remedy = command("lower", opset=n)


def _opset_lacks(node: ir.Node, f: Finding, n: int) -> None:
    op, reduction = node.op_type, f.reduction or "none"
    if op == "Scatter":
        if n >= OPSET_FLOOR:
            f.blockers.append(f"Scatter is deprecated from opset {OPSET_FLOOR} (the checker and "
                              f"onnxruntime reject it at {n})")
            f.remedy = command("upgrade", opset=n)
        return
    if op == "TensorScatter":
        if n < 24:
            f.blockers.append("TensorScatter exists from opset 24 only")
            f.remedy = command("lower", opset=n) if OPSET_FLOOR <= n <= 23 else None
        return
    if n < OPSET_FLOOR:
        f.blockers.append(f"{op} exists from opset {OPSET_FLOOR} only")
        return
    if n < max(REDUCTIONS_SINCE.values()) and unknown_reduction(f, f"whether opset {n} has it"):
        return
    first = REDUCTIONS_SINCE.get(reduction)
    if first is not None and n < first:
        f.blockers.append(f"{op} reduction={reduction} exists from opset {first} only")
        f.remedy = command("lower", opset=n)


def unknown_reduction(f: Finding, question: str) -> bool:
    """Block ``f`` when its reduction refers to an attribute of the enclosing function (known only
    at a call site, so neither the target nor scatter-rewrite's passes can tell what it is)."""
    if not (f.reduction or "").startswith("@"):
        return False
    f.blockers.append(f"reduction={f.reduction} refers to an attribute of the function, known only "
                      f"at a call site: {question} cannot be told here")
    return True
