"""GridSample-20 -> GridSample-16: the modes renamed back; 4-D input only."""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.graph import Scope, attr, reference_reason
from scatter_rewrite.opset.fitting import text
from scatter_rewrite.opset.registry import UNCHANGED, Form, register_form
from scatter_rewrite.opset.rewriting import refuse

__all__ = ["gridsample_20_16"]


_GRID_SAMPLE_MODES = {"linear": "bilinear", "cubic": "bicubic", "nearest": "nearest"}


@register_form("GridSample", 20, 16, neutral=True, reads_rank=True)
def gridsample_20_16(node: ir.Node, scope: Scope, target: int) -> Form:
    """GridSample-20 renamed its modes (linear, cubic: GridSample-16's bilinear, bicubic) and took
    N-D input; GridSample-16 takes 4-D input only."""
    reason = reference_reason(node, ("mode",))
    if reason is not None:
        raise refuse(node, scope, target, f"its {reason}, and GridSample-16 names its modes "
                                          "otherwise")
    x = node.inputs[0]
    if x is None or x.shape is None or len(x.shape) != 4:
        rank = "unknown" if x is None or x.shape is None else len(x.shape)
        raise refuse(node, scope, target, "GridSample-20 -> GridSample-16: its input's rank is "
                                          f"{rank}, and GridSample-16 takes 4-D input only")
    node.attributes["mode"] = ir.AttrString("mode",
                                            _GRID_SAMPLE_MODES[text(attr(node, "mode", "linear"))])
    return UNCHANGED

