"""scatter-rewrite: ONNX graph passes for scatter operators (upgrade, fold, lower, TensorRT prep).

The public API, re-exported lazily so that ``scatter-rewrite --help`` does not import onnx.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# name -> module that defines it
_EXPORTS = {
    "rewrite": "scatter_rewrite.api",
    "upgrade": "scatter_rewrite.api",
    "fold": "scatter_rewrite.api",
    "lower": "scatter_rewrite.api",
    "to_scatternd": "scatter_rewrite.api",
    "prepare_for_tensorrt": "scatter_rewrite.api",
    "repair": "scatter_rewrite.api",
    "UpgradePass": "scatter_rewrite.passes.upgrade",
    "ScatterRewriteError": "scatter_rewrite.errors",
    "ModelLoadError": "scatter_rewrite.errors",
    "InvalidModelError": "scatter_rewrite.errors",
    "IndexOutOfRangeError": "scatter_rewrite.errors",
    "OptionError": "scatter_rewrite.errors",
    "ValidationError": "scatter_rewrite.errors",
    "ConversionError": "scatter_rewrite.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'scatter_rewrite' has no attribute {name!r}")


if TYPE_CHECKING:
    from scatter_rewrite.api import (  # noqa: F401
        fold, lower, prepare_for_tensorrt, repair, rewrite, to_scatternd, upgrade,
    )
    from scatter_rewrite.errors import (  # noqa: F401
        ConversionError, IndexOutOfRangeError, InvalidModelError, ModelLoadError, OptionError,
        ScatterRewriteError, ValidationError,
    )
    from scatter_rewrite.passes.upgrade import UpgradePass  # noqa: F401
