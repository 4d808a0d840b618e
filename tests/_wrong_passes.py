"""Passes that rewrite wrongly on purpose, to show that validation catches a wrong rewrite."""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.graph import iter_nodes
from scatter_rewrite.passes.base import ScatterPass


class NegateScatterOutputs(ScatterPass):
    """Negates every ScatterElements output (validation must catch it)."""

    name = "negate-output"

    def run(self, model):
        for node, scope in iter_nodes(model):
            if node.op_type == "ScatterElements":
                neg = ir.node("Neg", [node.outputs[0]])
                neg.outputs[0].type, neg.outputs[0].shape = node.outputs[0].type, node.outputs[0].shape
                ir.convenience.replace_all_uses_with(node.outputs[0], neg.outputs[0], replace_graph_outputs=True)
                neg.replace_input_with(0, node.outputs[0])
                scope.body.insert_after(node, neg)
                self.rewrote(node, scope, "negated (wrong on purpose)")


class UpgradeAndRetypeIndices(ScatterPass):
    """Scatter -> ScatterElements (right) and the graph input 'i' retyped to int32 (wrong on
    purpose: onnxruntime refuses the int64 inputs the original takes)."""

    name = "upgrade-and-retype"

    def run(self, model):
        for node, scope in iter_nodes(model):
            if node.op_type == "Scatter":
                node.op_type = "ScatterElements"
                self.rewrote(node, scope, "renamed")
        for value in model.graph.inputs:
            if value.name == "i":
                value.type = ir.TensorType(ir.DataType.INT32)


class Unregistered(ScatterPass):
    """An invalid rewrite on purpose: an Add becomes an op no opset has (onnx.checker must catch it)."""

    name = "unregistered-op"

    def run(self, model):
        for node, scope in iter_nodes(model):
            if node.op_type == "Add":
                node.op_type = "NoSuchOp"
                self.rewrote(node, scope, "-> NoSuchOp (invalid on purpose)")
                return
