"""Exact scatter-free forms for runtimes that run the ``sort`` form wrong (``prepare --target
litert``, ``openvino-npu``; why: scatter_rewrite/targets/litert.py, openvino.py).

Every scatter is rewritten as :class:`.no_scatter.NoScatterPass` does, but in the ``mask`` form
(one-hot Equal, Where, Reduce*) wherever the node has one, whatever its size (within the bound).
A node with only the ``sort`` form (float max/min) gets it where the target runs it with constant
indices (``sort_if_constant``: onnx2tf folds the index arithmetic into constants first), and is
refused otherwise with the target's reason.
"""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.passes.no_scatter import Form, NoScatterPass, forms_for


def _constant(value: ir.Value | None) -> bool:
    if value is None:
        return False
    if value.const_value is not None:
        return True
    producer = value.producer()
    return producer is not None and producer.op_type == "Constant" and producer.domain in ("", "ai.onnx")


class MaskFormPass(NoScatterPass):
    """NoScatterPass choosing the mask form; ``sort_wrong`` says why the sort form is refused."""

    def __init__(self, target: str, sort_wrong: str, sort_if_constant: bool,
                 max_intermediate_mib: int):
        super().__init__(max_intermediate_mib)
        self.name = target
        self.refusal = f"not prepared for {target}"
        self.sort_wrong = sort_wrong
        self.sort_if_constant = sort_if_constant

    def form_for(self, node: ir.Node) -> tuple[Form | None, str | None]:
        forms = forms_for(node)
        masks = [f for f in forms if f.name == "mask"]
        if masks:
            return masks[0], None
        index = node.inputs[2 if node.op_type == "TensorScatter" else 1]
        if self.sort_if_constant and _constant(index):
            return forms[0], None
        return None, self.sort_wrong
