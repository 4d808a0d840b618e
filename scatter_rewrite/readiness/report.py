"""What ``check`` reports (:mod:`scatter_rewrite.readiness` computes it): one :class:`Finding` per
node judged, the :class:`DryRun` of the target's verb, the model's :class:`CheckReport` and its
verdict (READY, FIXABLE, BLOCKED, INVALID, UNREADABLE), and the document ``check --json`` prints
(:func:`json_document`).
"""

from __future__ import annotations

import dataclasses

from scatter_rewrite.said import Said
from scatter_rewrite.verbs import spoken

__all__ = ["BLOCKED", "CheckReport", "DryRun", "FIXABLE", "Finding", "INVALID", "READY", "STATUSES",
           "UNREADABLE", "SCHEMA_VERSION", "json_document"]


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
    # the call that removes the blockers, as data (scatter_rewrite.said: verbs.command), which
    # ``fix`` and ``python_fix`` say; None: none known
    remedy: Said | None = None
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def blocked(self) -> bool:
        return bool(self.blockers)

    @property
    def fix(self) -> str | None:
        """The command that removes the blockers: ``scatter-rewrite lower --opset 13``."""
        return None if self.remedy is None else spoken(self.remedy, {})

    @property
    def python_fix(self) -> str | None:
        """``fix`` as a Python call: ``scatter_rewrite.lower(model, opset=13)``."""
        return None if self.remedy is None else str(self.remedy)

    def to_dict(self) -> dict:
        said = {("fix" if k == "remedy" else k): (self.fix if k == "remedy" else v)
                for k, v in dataclasses.asdict(self).items()}
        return said | {"blocked": self.blocked, "python_fix": self.python_fix}


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
