"""Remove what a rewrite left unread: nodes none of whose outputs is read (a Constant a lowering
built and did not use, the shape chain of an index Expand the row-key lowering reads past), the
producers that leaves unread, and initializers no node reads any more. onnxruntime warns of each
on load.

What the model itself had unread before the rewrite is its own and stays: the pass is made from the
model before the rewriting passes run (:meth:`RemoveUnusedNodesPass.keeping`), in every scope (main
graph, subgraphs, local functions). Unlike onnx_ir's ``RemoveUnusedNodesPass``, which removes every
unused node and initializer, the model's own included.
"""

from __future__ import annotations

import logging

import onnx_ir as ir

from scatter_rewrite.graph import iter_scopes
from scatter_rewrite.passes.base import ScatterPassResult

__all__ = ["RemoveUnusedNodesPass", "dead_nodes", "unused_initializers"]

logger = logging.getLogger("scatter_rewrite")


def dead_nodes(model: ir.Model) -> list[ir.Node]:
    """Every node, in every scope, none of whose outputs is read or is an output of its graph."""
    return [node for scope in iter_scopes(model) for node in scope.body
            if node.outputs and not any(v.uses() or v.is_graph_output() for v in node.outputs)]


def unused_initializers(model: ir.Model) -> list[tuple[ir.Graph, ir.Value]]:
    """(graph, initializer) for every initializer of the main graph and the subgraphs that no node
    reads and that is neither a graph input nor a graph output."""
    unused = []
    for scope in iter_scopes(model):
        body = scope.body
        if isinstance(body, ir.Graph):
            ends = {id(v) for v in body.inputs} | {id(v) for v in body.outputs}
            unused += [(body, v) for v in body.initializers.values()
                       if not v.uses() and id(v) not in ends]
    return unused


class RemoveUnusedNodesPass(ir.passes.InPlacePass):
    """Remove the nodes and initializers left unread since :meth:`keeping` saw the model."""

    name = "remove-unused"

    def __init__(self, kept_nodes: set[ir.Node], kept_initializers: set[int]):
        super().__init__()
        # (nodes held, not their ids: an id stays theirs while they live)
        self.kept_nodes, self.kept_initializers = kept_nodes, kept_initializers

    @classmethod
    def keeping(cls, model: ir.Model) -> RemoveUnusedNodesPass:
        """The pass that keeps what ``model`` has unread now (call it before rewriting)."""
        return cls(set(dead_nodes(model)), {id(v) for _, v in unused_initializers(model)})

    def call(self, model: ir.Model) -> ScatterPassResult:
        result = ScatterPassResult(model, False, name=self.name)
        removed = self._remove_nodes(model)
        if removed:  # (housekeeping, as a rewrite that replaces a node removes it: no note)
            logger.debug("%d node(s) the rewrite left unread removed", removed)
        left = [(body, v) for body, v in unused_initializers(model)
                if id(v) not in self.kept_initializers]
        for body, value in left:
            body.initializers.pop(value.name)
        if left:
            result.notes.append(f"{len(left)} initializer(s) the rewrite no longer uses removed")
        result.modified = bool(removed or left)
        return result

    def _remove_nodes(self, model: ir.Model) -> int:
        work = [node for node in dead_nodes(model) if node not in self.kept_nodes]
        removed = 0
        while work:
            node = work.pop()
            if node.graph is None or any(v.uses() or v.is_graph_output() for v in node.outputs):
                continue  # (removed already, or read again)
            producers = [v.producer() for v in node.inputs if v is not None]
            node.graph.remove(node, safe=True)
            removed += 1
            work += [p for p in producers if p is not None and p not in self.kept_nodes]
        return removed
