"""Each scatter's index input computed from constants only (``Unsqueeze(arange(n))``, as exporters
write it) evaluated into one ``Constant`` node (``prepare --target litert``, before the scatter-free
forms). onnx2tf permutes a constant 1-D initializer fed to Unsqueeze (``Unsqueeze(arange(30), 1)``
comes out as 0, 2, 3, ..., 29, 1: scatter_rewrite/targets/litert.py); one Constant it folds with the
form's index arithmetic before anything permutes it. Index inputs that are graph inputs or already
one Constant are left alone.
"""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.graph import (
    SCATTER_OPS, describe, is_default_domain, iter_nodes, mark_written, shadowed_names,
    written_for,
)
from scatter_rewrite.passes.base import ScatterPass
from scatter_rewrite.passes.fold import ConstantChains

__all__ = ["ConstantIndicesPass"]


def _index_input(node: ir.Node) -> int:
    return 2 if node.op_type == "TensorScatter" else 1


class ConstantIndicesPass(ScatterPass):
    """A scatter's constant index chain made one Constant (see the module docstring)."""

    name = "constant-indices"

    def run(self, model: ir.Model) -> None:
        chains = ConstantChains(shadowed=shadowed_names(model))
        for node, scope in list(iter_nodes(model)):
            if not (is_default_domain(node) and node.op_type in SCATTER_OPS) \
                    or len(node.inputs) <= _index_input(node):
                continue
            index = node.inputs[_index_input(node)]
            producer = index.producer() if index is not None else None
            if producer is None or producer.op_type == "Constant" \
                    or chains.why_not(index) is not None:
                continue
            tensor = ir.tensor(chains.evaluate(index, scope.opset))
            constant = ir.node("Constant", [], attributes={"value": tensor})
            out = constant.outputs[0]
            out.name = f"{index.name}_constant" if index.name else None
            out.type, out.shape = ir.TensorType(tensor.dtype), ir.Shape(tensor.shape)
            mark_written([constant], written_for(producer, scope))  # (the user's index node)
            scope.body.insert_before(node, constant)
            node.replace_input_with(_index_input(node), out)
            chains.prune([index])
            self.note(f"{describe(node, scope)}: its constant indices evaluated into one Constant",
                      modified=True)
