"""Exact scatter-free forms for runtimes that cannot run the ``sort`` form (``prepare --target
rknn``: rknn-toolkit2 does not convert TopK; why: scatter_rewrite/targets/no_scatter.py).

Every scatter is rewritten as :class:`.no_scatter.NoScatterPass` does, but in the ``mask`` form
(one-hot Equal, Where, Reduce*) wherever the node has one, whatever its size (within the bound). A
node with only the ``sort`` form (float max/min, whose result among NaNs and signed zeros depends
on the update order a mask reduction does not keep) is refused with the target's reason.
"""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.passes.no_scatter import Form, NoScatterPass, forms_for

__all__ = ["MaskFormPass"]


class MaskFormPass(NoScatterPass):
    """NoScatterPass choosing the mask form; ``sort_wrong`` says why the sort form is refused."""

    def __init__(self, target: str, sort_wrong: str, max_intermediate_mib: int):
        super().__init__(max_intermediate_mib)
        self.name = target
        self.refusal = f"not prepared for {target}"
        self.sort_wrong = sort_wrong

    def form_for(self, node: ir.Node, opset: int) -> tuple[Form | None, str | None]:
        masks = [f for f in forms_for(node, opset, self.writing) if f.name == "mask"]
        return (masks[0], None) if masks else (None, self.sort_wrong)
