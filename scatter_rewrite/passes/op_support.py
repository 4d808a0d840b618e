"""The last step of ``prepare --target T`` for a target with a published op table
(:class:`scatter_rewrite.targets.OpTable`: qnn, rknn, litert, openvino, openvino-npu, tvm,
ort-cpu): every node of the prepared model (main graph, If/Loop/Scan bodies, model-local functions)
is looked up in T's table, its opset that of its own domain in its scope, and a model with a node
outside it is refused (ConversionError, every such node in ``error.declined``, each with the
source). ``check --target T`` is the dry run of ``prepare``: it reports the same nodes, blocked
with the same reason.

First, the shape arithmetic that reads only static shapes (Shape, Size, and the Range and Gather
over them that the scatter-free forms write) is folded into initializers, as ``--fix-dim`` folds it
(:func:`scatter_rewrite.passes.fix_dims.settle_shapes`): a runtime's loader does the same before
its op support is asked, and a table such as QNN's or RKNN's has no Shape or Range. Nothing else
is rewritten.
"""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.errors import ConversionError
from scatter_rewrite.graph import describe, iter_nodes
from scatter_rewrite.passes.base import NodeNote, ScatterPass, first_and_more

__all__ = ["OpSupportPass", "unsupported_nodes"]


def unsupported_nodes(model: ir.Model, table) -> list[NodeNote]:
    """The nodes of ``model`` outside ``table`` (an OpTable), each with why; calls of the
    model's own functions are not ops (the function's nodes are judged)."""
    local = set(model.functions)
    found = []
    for node, scope in iter_nodes(model):
        if (node.domain, node.op_type, node.overload) in local:
            continue
        imports = scope.body.opset_imports if scope.is_function else model.opset_imports
        domain = "" if node.domain == "ai.onnx" else node.domain
        opset = scope.opset if domain == "" else imports.get(domain)
        reason = table.lacks(domain, node.op_type, opset)
        if reason is not None:
            found.append(NodeNote(describe(node, scope), reason))
    return found


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
        folded = settle_shapes(model)
        if folded:
            self.note(f"{folded} static shape computation(s) folded to constants", modified=True)
        missing = unsupported_nodes(model, table)
        if missing:
            error = ConversionError(f"not prepared for {self.target.name}: "
                                    f"{first_and_more(missing)}")
            error.declined = missing
            raise error
        self.note(f"every op is in {self.target.name}'s published support ({table.cited})")
