"""The old name of :mod:`scatter_rewrite.passes.inline_if` (for branches that import it; to remove)."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("scatter_rewrite.passes.inline_if")
