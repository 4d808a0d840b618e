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

from scatter_rewrite.graph import WRITTEN_FOR, Scope, describe, iter_nodes, nodes_within
from scatter_rewrite.spec import check_scatter_nodes

__all__ = ["NodeNote", "ScatterPass", "ScatterPassResult", "first_and_more"]

logger = logging.getLogger("scatter_rewrite")


def first_and_more(items: list) -> str:
    """The first of ``items`` and how many more: how a one-line error names every node it
    refuses."""
    return f"{items[0]}" + (f" (and {len(items) - 1} more)" if len(items) > 1 else "")


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

    def call(self, model: ir.Model) -> ScatterPassResult:
        check_scatter_nodes(
            model
        )  # before run() reads an axis or an input that is not what the schema says
        self.result = ScatterPassResult(model, False, name=self.name)
        self._known = {id(n) for n, _ in iter_nodes(model)}  # (what a rewrite adds is marked)
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
        self._mark_written(scope.body, (node.metadata_props or {}).get(WRITTEN_FOR, note.node))
        logger.debug("%s rewrote %s", self.name, note)
        self.result.rewritten.append(note)
        self.result.modified = True

    def _mark_written(self, body, origin: str) -> None:
        """Mark the nodes new in ``body`` (and in their subgraphs) as written for ``origin``, the
        node just rewritten, so a later refusal names it. Only a body that grew is read."""
        if not hasattr(self, "_known") or len(body) == self._sizes.get(id(body)):
            return
        self._sizes[id(body)] = len(body)
        for new in nodes_within([n for n in body if id(n) not in self._known]):
            self._known.add(id(new))
            new.metadata_props.setdefault(WRITTEN_FOR, origin)

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
