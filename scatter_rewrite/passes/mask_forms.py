"""Exact scatter-free forms for runtimes that run the ``sort`` form wrong (``prepare --target
litert``, ``openvino-npu``; why: scatter_rewrite/targets/litert.py, openvino.py).

Every scatter is rewritten as :class:`.no_scatter.NoScatterPass` does, but in the ``mask`` form
(one-hot Equal, Where, Reduce*) wherever the node has one, whatever its size (within the bound).
With ``fold_indices`` (litert), a scatter's constant index chain (``Unsqueeze(arange(n))``, as
exporters write it, which onnx2tf permutes) is first evaluated into one constant, which the
converter then folds with the form's index arithmetic.
A node with only the ``sort`` form (float max/min) gets it where the target runs it with constant
indices (``sort_if_constant``: onnx2tf folds the index arithmetic into constants first), and is
refused otherwise with the target's reason.
"""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.graph import SCATTER_OPS, is_default_domain, iter_nodes, shadowed_names
from scatter_rewrite.passes.fold import ConstantChains
from scatter_rewrite.passes.no_scatter import Form, NoScatterPass, forms_for

__all__ = ["MaskFormPass"]


def _constant(value: ir.Value | None) -> bool:
    if value is None:
        return False
    if value.const_value is not None:
        return True
    producer = value.producer()
    return (producer is not None and producer.op_type == "Constant"
            and producer.domain in ("", "ai.onnx"))


class MaskFormPass(NoScatterPass):
    """NoScatterPass choosing the mask form; ``sort_wrong`` says why the sort form is refused."""

    def __init__(self, target: str, sort_wrong: str, sort_if_constant: bool,
                 max_intermediate_mib: int, fold_indices: bool = False):
        super().__init__(max_intermediate_mib)
        self.name = target
        self.refusal = f"not prepared for {target}"
        self.sort_wrong = sort_wrong
        self.sort_if_constant = sort_if_constant
        self.fold_indices = fold_indices

    def run(self, model: ir.Model) -> None:
        if self.fold_indices:
            _fold_constant_indices(model)
        super().run(model)

    def form_for(self, node: ir.Node, opset: int) -> tuple[Form | None, str | None]:
        forms = forms_for(node, opset)
        masks = [f for f in forms if f.name == "mask"]
        if masks:
            return masks[0], None
        index = node.inputs[_index_input(node)]
        if self.sort_if_constant and _constant(index):
            return forms[0], None
        return None, self.sort_wrong


def _index_input(node: ir.Node) -> int:
    return 2 if node.op_type == "TensorScatter" else 1


def _fold_constant_indices(model: ir.Model) -> None:
    """Each scatter's index input computed from constants only, made one Constant node."""
    chains = ConstantChains(shadowed=shadowed_names(model))
    for node, scope in list(iter_nodes(model)):
        if not (is_default_domain(node) and node.op_type in SCATTER_OPS) \
                or len(node.inputs) <= _index_input(node):
            continue
        index = node.inputs[_index_input(node)]
        producer = index.producer() if index is not None else None
        if producer is None or producer.op_type == "Constant" or chains.why_not(index) is not None:
            continue
        tensor = ir.tensor(chains.evaluate(index, scope.opset))
        constant = ir.node("Constant", [], attributes={"value": tensor})
        out = constant.outputs[0]
        out.name = f"{index.name}_constant" if index.name else None
        out.type, out.shape = ir.TensorType(tensor.dtype), ir.Shape(tensor.shape)
        scope.body.insert_before(node, constant)
        node.replace_input_with(_index_input(node), constant.outputs[0])
        chains.prune([index])
