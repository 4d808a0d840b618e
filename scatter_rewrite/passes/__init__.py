"""The passes, each an in-place ``onnx_ir`` pass (``pass_(model)`` returns a
:class:`ScatterPassResult`: whether it modified the model, every node rewritten and every node left
alone with the reason). Loaded lazily: importing one pass does not import the others.

Example::

    import onnx_ir as ir
    from scatter_rewrite.passes import FoldPass, MoveOpsetPass, UpgradePass
    model = ir.load("model.onnx")
    for pass_ in (UpgradePass(), MoveOpsetPass(13), FoldPass()):
        print(pass_(model).modified)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# public name -> (module, name there)
_EXPORTS = {
    "ScatterPass": ("scatter_rewrite.passes.base", "ScatterPass"),
    "ScatterPassResult": ("scatter_rewrite.passes.base", "ScatterPassResult"),
    "UpgradePass": ("scatter_rewrite.passes.upgrade", "UpgradePass"),
    "FoldPass": ("scatter_rewrite.passes.fold", "FoldPass"),
    "LowerPass": ("scatter_rewrite.passes.lower", "LowerPass"),
    "ToScatterNDPass": ("scatter_rewrite.passes.to_scatternd", "ToScatterNDPass"),
    "RepairPass": ("scatter_rewrite.passes.repair", "RepairPass"),
    "FixDimsPass": ("scatter_rewrite.passes.fix_dims", "FixDimsPass"),
    "SpecializeCallsPass": ("scatter_rewrite.passes.specialize", "SpecializeCallsPass"),
    "TensorRTPass": ("scatter_rewrite.passes.tensorrt", "TensorRTPass"),
    "LowerTensorScatterPass": (
        "scatter_rewrite.passes.tensorrt_tensorscatter", "LowerTensorScatterPass"
    ),
    "CapOpsetPass": ("scatter_rewrite.passes.tensorrt_opset_cap", "CapOpsetPass"),
    "MoveOpsetPass": ("scatter_rewrite.passes.move_opset", "MoveOpsetPass"),
    "InlineConstantIfsPass": ("scatter_rewrite.passes.inline_if", "InlineConstantIfsPass"),
    "Steps": ("scatter_rewrite.passes.compose", "Steps"),
    "OnlyIf": ("scatter_rewrite.passes.compose", "OnlyIf"),
    "RemoveUnusedNodesPass": ("scatter_rewrite.passes.remove_unused", "RemoveUnusedNodesPass"),
    "tensorrt_passes": ("scatter_rewrite.passes.lists", "tensorrt_passes"),
    "NoScatterPass": ("scatter_rewrite.passes.no_scatter", "NoScatterPass"),
    "TargetScattersPass": ("scatter_rewrite.passes.no_scatter", "TargetScattersPass"),
    "FloatComparisonsPass": ("scatter_rewrite.passes.float_comparisons", "FloatComparisonsPass"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        module, attribute = _EXPORTS[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'scatter_rewrite.passes' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__ + ["__all__", "__doc__", "__name__", "__path__"])


if TYPE_CHECKING:
    from scatter_rewrite.passes.base import ScatterPass, ScatterPassResult  # noqa: F401
    from scatter_rewrite.passes.compose import OnlyIf, Steps  # noqa: F401
    from scatter_rewrite.passes.remove_unused import RemoveUnusedNodesPass  # noqa: F401
    from scatter_rewrite.passes.fix_dims import FixDimsPass  # noqa: F401
    from scatter_rewrite.passes.float_comparisons import FloatComparisonsPass  # noqa: F401
    from scatter_rewrite.passes.fold import FoldPass  # noqa: F401
    from scatter_rewrite.passes.inline_if import InlineConstantIfsPass  # noqa: F401
    from scatter_rewrite.passes.lower import LowerPass  # noqa: F401
    from scatter_rewrite.passes.move_opset import MoveOpsetPass  # noqa: F401
    from scatter_rewrite.passes.no_scatter import NoScatterPass, TargetScattersPass  # noqa: F401
    from scatter_rewrite.passes.repair import RepairPass  # noqa: F401
    from scatter_rewrite.passes.specialize import SpecializeCallsPass  # noqa: F401
    from scatter_rewrite.passes.tensorrt import TensorRTPass  # noqa: F401
    from scatter_rewrite.passes.tensorrt_opset_cap import CapOpsetPass  # noqa: F401
    from scatter_rewrite.passes.tensorrt_tensorscatter import LowerTensorScatterPass  # noqa: F401
    from scatter_rewrite.passes.to_scatternd import ToScatterNDPass  # noqa: F401
    from scatter_rewrite.passes.upgrade import UpgradePass  # noqa: F401
    from scatter_rewrite.passes.lists import tensorrt_passes  # noqa: F401
