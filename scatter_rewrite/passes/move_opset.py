"""Move a whole model to a default-domain opset (:func:`scatter_rewrite.opset.move_to_opset`: every
node of every scope converted, exactly, or ConversionError naming the one that cannot be).

A pass of its own so that a verb's list says where a model moves: the TensorRT flow moves a model
above the highest opset its parser documents down to it, last (``only_down``). The passes that
rewrite scatters for a target opset (UpgradePass, LowerPass) move the model themselves, as part of
their rewrite: LowerPass hides the nodes it lowers from the move and builds their replacements at
the target.
"""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.graph import iter_scopes
from scatter_rewrite.limits import check_opset
from scatter_rewrite.opset import move_to_opset
from scatter_rewrite.passes.base import ScatterPass

__all__ = ["MoveOpsetPass"]


class MoveOpsetPass(ScatterPass):
    """Every scope to ``opset``; with ``only_down``, only a model above it. ``why``: what the
    report's note says after the move's."""

    name = "move-opset"

    def __init__(self, opset: int, *, only_down: bool = False, why: str = ""):
        super().__init__()
        self.opset, self.only_down, self.why = check_opset(opset), only_down, why

    def run(self, model: ir.Model) -> None:
        if self.only_down and max(scope.opset for scope in iter_scopes(model)) <= self.opset:
            return
        self.moved(move_to_opset(model, self.opset), f" ({self.why})" if self.why else "")
