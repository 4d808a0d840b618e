"""The old name of :mod:`scatter_rewrite.passes.lowering.network_reduce` (for branches that import it; to remove)."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("scatter_rewrite.passes.lowering.network_reduce")
