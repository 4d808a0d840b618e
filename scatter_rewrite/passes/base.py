"""What every scatter-rewrite pass shares: its result, with what it rewrote and what it declined.

A pass is an ``onnx_ir`` in-place pass. Its ``call`` returns a :class:`ScatterPassResult`, which is
an ``ir.passes.PassResult`` plus one :class:`NodeNote` per node rewritten or left alone (with why).
A node a pass cannot rewrite stays as it is and its reason is reported; the pass itself goes on.
Some passes then refuse the model as a whole when a node they exist to remove stays (``lower``
when the target opset lacks a reduction left, ``no_scatter``'s passes when a scatter is left):
they raise, naming the node. A malformed scatter node (against its schema:
:mod:`scatter_rewrite.spec`) is an error in every pass: it refuses the model before reading any
node, with InvalidModelError naming it.
"""

from __future__ import annotations

import dataclasses
import logging

import onnx_ir as ir

from scatter_rewrite.graph import (
    Scope, describe, iter_nodes, mark_written, nodes_within, written_for,
)
from scatter_rewrite.said import joined, said
from scatter_rewrite.spec import check_scatter_nodes

__all__ = ["NAMED_AT_MOST", "NodeNote", "ScatterPass", "ScatterPassResult", "every_node"]

logger = logging.getLogger("scatter_rewrite")

# How many nodes a one-line refusal names; the rest are counted ("(and 3 more)").
NAMED_AT_MOST = 10


def every_node(notes: list[NodeNote]) -> str:
    """How a one-line error names the nodes it refuses (:class:`NodeNote`, each with why): every
    one, in order, up to :data:`NAMED_AT_MOST`, then how many more; nodes refused for the same
    reason share it (``A and B: why; C: other``), and nodes described alike (two a pass wrote for
    the same user's node) are said once, with how many (``(x2)``)."""
    by_reason: dict[str, dict[str, int]] = {}
    for note in notes[:NAMED_AT_MOST]:
        alike = by_reason.setdefault(note.detail, {})
        alike[note.node] = alike.get(note.node, 0) + 1
    named = joined("; ", (
        said(_and([node + (f" (x{n})" if n > 1 else "") for node, n in nodes.items()]), ": ",
             reason) for reason, nodes in by_reason.items()))
    more = len(notes) - NAMED_AT_MOST
    return said(named, f" (and {more} more)" if more > 0 else "")


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


@dataclasses.dataclass
class NodeNote:
    node: str  # as graph.describe() names it
    detail: str  # what became of it, or why it was left alone

    def __str__(self) -> str:
        return f"{self.node}: {self.detail}"


@dataclasses.dataclass
class ScatterPassResult(ir.passes.PassResult):
    name: str = ""
    rewritten: list[NodeNote] = dataclasses.field(default_factory=list)
    skipped: list[NodeNote] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(
        default_factory=list
    )  # model-level facts (opset change...)
    # Ops re-expressed so that float results may round differently (an op replaced by its ONNX
    # function body): validation then compares float outputs within its stated tolerance.
    float_rounding: list[str] = dataclasses.field(default_factory=list)
    # The pass's nodes are meant to compute otherwise than the original's (ScatterPass.repairs):
    # validation proves them against the intended accumulation, not the original.
    repairs: bool = False

    def to_dict(self) -> dict:
        return {
            "pass": self.name,
            "modified": self.modified,
            "rewritten": [dataclasses.asdict(n) for n in self.rewritten],
            "skipped": [dataclasses.asdict(n) for n in self.skipped],
            "notes": list(self.notes),
        }


class ScatterPass(ir.passes.InPlacePass):
    """Base of our passes: subclasses implement :meth:`run` and record with
    :meth:`rewrote`/:meth:`skip`."""

    name = "scatter-pass"
    # True for a pass whose rewrites are meant to change what a node computes (repair: repeated
    # indices summed where the export overwrote): declared here, read by the pipeline's proof.
    repairs = False

    def call(self, model: ir.Model) -> ScatterPassResult:
        check_scatter_nodes(
            model
        )  # before run() reads an axis or an input that is not what the schema says
        self.result = ScatterPassResult(model, False, name=self.name, repairs=self.repairs)
        # (what a rewrite adds is marked; the nodes held, so that no id is reused by a new node
        # once a removed one is freed)
        self._known = {id(n): n for n, _ in iter_nodes(model)}
        self._sizes: dict[int, int] = {}
        self.run(model)
        r = self.result
        logger.info("%s: %d rewritten, %d skipped", self.name, len(r.rewritten), len(r.skipped))
        del self.result, self._known, self._sizes
        return r

    def run(self, model: ir.Model) -> None:
        raise NotImplementedError

    def rewrote(self, node: ir.Node, scope: Scope, detail: str) -> None:
        note = NodeNote(describe(node, scope), detail)
        self._mark_written(scope.body, written_for(node, scope))
        logger.debug("%s rewrote %s", self.name, note)
        self.result.rewritten.append(note)
        self.result.modified = True

    def _mark_written(self, body, origin: str) -> None:
        """Mark the nodes new in ``body`` (and in their subgraphs) as written for ``origin``, the
        node just rewritten, so a later refusal names it. Only a body that grew is read."""
        if not hasattr(self, "_known") or len(body) == self._sizes.get(id(body)):
            return
        self._sizes[id(body)] = len(body)
        new = list(nodes_within([n for n in body if id(n) not in self._known]))
        self._known.update((id(n), n) for n in new)
        mark_written(new, origin)

    def skip(self, node: ir.Node, scope: Scope, reason: str) -> None:
        note = NodeNote(describe(node, scope), reason)
        logger.debug("%s skipped %s", self.name, note)
        self.result.skipped.append(note)

    def note(self, text: str, *, modified: bool = False) -> None:
        self.result.notes.append(text)
        self.result.modified |= modified

    def moved(self, move, why: str = "") -> None:
        """Record an ``opset.OpsetMove`` (None: nothing moved): its note, and the ops it replaced by
        function bodies that may round float results differently."""
        if move is None:
            return
        self.note(move.note + why, modified=True)
        self.result.float_rounding += move.rounding
