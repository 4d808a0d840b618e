"""The last step of ``prepare --target T`` for a target with a published op table
(:class:`scatter_rewrite.targets.OpTable`: qnn, rknn, litert, openvino, openvino-npu, tvm,
ort-cpu): every node of the prepared model (main graph, If/Loop/Scan bodies, model-local functions)
is looked up in T's table, its opset that of its own domain in its scope, and a model with a node
outside it is refused (ConversionError, every such node in ``error.declined``, each with the
source). ``check --target T`` is the dry run of ``prepare``: it reports the same nodes, blocked
with the same reason.

First, a node outside the table that has an exact equivalent inside it is written so
(:mod:`.op_equivalents`: an If on a constant condition inlined, CastLike as Cast, IsNaN as Equal,
Sum of two as Add, Identity removed). Then a node outside the table whose outputs are compile-time
constants (a Range over static sizes, a Shape of a static shape: what the scatter-free forms write
where shapes are static) is replaced by Constant nodes holding its value, and the nodes only it
read go: QNN's and RKNN's tables have no Range or Shape, and onnxruntime's and RKNN's loaders fold
such constants before their op support is asked. If that is not enough, shapes are inferred
again and the shape arithmetic that reads only static shapes folded, as ``--fix-dim`` does
(:func:`scatter_rewrite.passes.fix_dims.settle_shapes`), then such nodes folded again. A model
inside the table is left as it is.
"""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.errors import ConversionError
from scatter_rewrite.graph import (
    Scope, constant_node, describe, iter_nodes, mark_written, shadowed_names, written_for,
)
from scatter_rewrite.passes.base import NodeNote, ScatterPass, every_node
from scatter_rewrite.passes.op_equivalents import remove_dead, write_within_table
from scatter_rewrite.said import said

__all__ = ["OpSupportPass", "fold_constant_outside", "unsupported_nodes"]

# The most elements a folded node's outputs may hold (8 MiB of int64: the row ids of a 1M-row
# scatter, far below the one-hot mask the same form builds).
_MAX_FOLDED_ELEMENTS = 1 << 20


def _lacks(model: ir.Model, node: ir.Node, scope: Scope, table) -> str | None:
    """Why ``node`` is outside ``table`` (None: inside, or a call of a model-local function,
    whose nodes are judged instead)."""
    if (node.domain, node.op_type, node.overload) in model.functions:
        return None
    imports = scope.body.opset_imports if scope.is_function else model.opset_imports
    domain = "" if node.domain == "ai.onnx" else node.domain
    opset = scope.opset if domain == "" else imports.get(domain)
    return table.lacks(domain, node.op_type, opset)


def unsupported_nodes(model: ir.Model, table) -> list[NodeNote]:
    """The nodes of ``model`` outside ``table`` (an OpTable), each with why."""
    return [NodeNote(describe(node, scope), reason) for node, scope in iter_nodes(model)
            if (reason := _lacks(model, node, scope, table)) is not None]


def fold_constant_outside(model: ir.Model, table) -> int:
    """Every node outside ``table`` whose outputs are constants (and not graph outputs) replaced by
    Constant nodes; returns how many. In graph order, so a Range over a Shape goes after it."""
    from scatter_rewrite.passes.fold import CannotEvaluate, ConstantChains

    chains = ConstantChains(shadowed=shadowed_names(model))
    folded = 0
    for node, scope in iter_nodes(model):
        if (_lacks(model, node, scope, table) is None
                or any(v.is_graph_output() or chains.why_not(v) is not None for v in node.outputs)):
            continue
        try:
            arrays = [chains.evaluate(v, scope.opset) for v in node.outputs]
        except CannotEvaluate:
            continue
        if sum(a.size for a in arrays) > _MAX_FOLDED_ELEMENTS:
            continue
        for value, array in zip(node.outputs, arrays):
            constant = constant_node(array)
            mark_written([constant], written_for(node, scope))
            scope.body.insert_before(node, constant)
            constant.outputs[0].name, value.name = value.name, None
            ir.convenience.replace_all_uses_with(value, constant.outputs[0])
        remove_dead(node)
        chains.clear()
        folded += 1
    return folded


class OpSupportPass(ScatterPass):
    """Refuse a model with an op outside the target's published table (after folding static
    shape arithmetic)."""

    name = "op-support"

    def __init__(self, target: str):
        from scatter_rewrite.targets import get_target

        super().__init__()
        self.target = get_target(target)

    def run(self, model: ir.Model) -> None:
        from scatter_rewrite.passes.fix_dims import settle_shapes

        table = self.target.ops()
        folded = 0
        if unsupported_nodes(model, table):  # (a model inside the table is left as it is)
            for text in write_within_table(model, lambda op, scope: table.lacks(
                    "", op, scope.opset) is None):
                self.note(text, modified=True)
            folded = fold_constant_outside(model, table)
        if unsupported_nodes(model, table):  # (shapes inferred again may make more constant)
            folded += settle_shapes(model) + fold_constant_outside(model, table)
        if folded:
            self.note(f"{folded} constant computation(s) folded (ops outside "
                      f"{self.target.name}'s table, static shapes)", modified=True)
        missing = unsupported_nodes(model, table)
        if missing:
            error = ConversionError(said(f"not prepared for {self.target.name}: ",
                                         every_node(missing)))
            error.declined = missing
            raise error
        self.note(f"every op is in {self.target.name}'s published support ({table.cited})")
