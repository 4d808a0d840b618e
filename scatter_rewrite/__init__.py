"""scatter-rewrite: ONNX graph passes for scatter operators (upgrade, fold, lower, TensorRT prep,
repair).

The public API, re-exported lazily so that ``scatter-rewrite --help`` does not import onnx::

    import onnx, scatter_rewrite
    model = scatter_rewrite.lower(onnx.load("model.onnx"), opset=13)  # validated, as the CLI
    report = scatter_rewrite.check(model, target="tensorrt-10")

Every verb takes an ``onnx.ModelProto``, an ``onnx_ir.Model``, a path or an onnx_graphsurgeon
graph and returns the same kind; the passes themselves are in :mod:`scatter_rewrite.passes`.
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
    "prepare": "scatter_rewrite.api",
    "check": "scatter_rewrite.api",
    "CheckReport": "scatter_rewrite.readiness.report",
    "Finding": "scatter_rewrite.readiness.report",
    "Outcome": "scatter_rewrite.pipeline",
    "UpgradePass": "scatter_rewrite.passes.upgrade",
    "ScatterRewriteError": "scatter_rewrite.errors",
    "ModelLoadError": "scatter_rewrite.errors",
    "InvalidModelError": "scatter_rewrite.errors",
    "IndexOutOfRangeError": "scatter_rewrite.errors",
    "OptionError": "scatter_rewrite.errors",
    "OptionTypeError": "scatter_rewrite.errors",
    "ValidationError": "scatter_rewrite.errors",
    "ConversionError": "scatter_rewrite.errors",
    "WriteError": "scatter_rewrite.errors",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    if name == "__version__":  # (importlib.metadata: 10-20 ms that only --version needs)
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("scatter-rewrite")
        except PackageNotFoundError:  # (run from a source tree that was never installed)
            return "0+unknown"
    raise AttributeError(f"module 'scatter_rewrite' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__ + ["__all__", "__doc__", "__name__", "__path__"])


if TYPE_CHECKING:
    from scatter_rewrite.api import (  # noqa: F401
        check, fold, lower, prepare, prepare_for_tensorrt, repair, rewrite, to_scatternd, upgrade,
    )
    from scatter_rewrite.errors import (  # noqa: F401
        ConversionError, IndexOutOfRangeError, InvalidModelError, ModelLoadError, OptionError,
        OptionTypeError, ScatterRewriteError, ValidationError, WriteError,
    )
    from scatter_rewrite.passes.upgrade import UpgradePass  # noqa: F401
    from scatter_rewrite.pipeline import Outcome  # noqa: F401
    from scatter_rewrite.readiness.report import CheckReport, Finding  # noqa: F401
