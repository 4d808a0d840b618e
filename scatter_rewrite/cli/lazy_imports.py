"""What the command's start-up does not load until it is used.

Loaded on first use in the command's process: onnx_ir imports sympy, and its _symbolic_shapes
reads sympy's functions at import, for symbolic shape arithmetic that a rewrite rarely does;
otherwise 0.2 s and ~30 MiB of every run (benchmarks/RESULTS-fold.md).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__all__ = ["defer_imports"]

_DEFERRED = ("sympy", "onnx_ir._symbolic_shapes")


class _OnFirstUse(types.ModuleType):
    """Stands in sys.modules for a module not loaded yet: ``import`` finds it (its ``__spec__`` is
    the real one's), and the first attribute it lacks loads the real module, which takes its
    place in sys.modules and lends this one its namespace. (importlib.util.LazyLoader does not
    do: Python 3.11's import statement reads ``__spec__`` of a module already in sys.modules, which
    loads a LazyLoader's module at once.)"""

    def __getattr__(self, attr: str) -> Any:
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        real = importlib.import_module(name)
        vars(self).update({k: v for k, v in vars(real).items() if k != "__spec__"})
        return getattr(real, attr)


def defer_imports() -> None:
    """Each of _DEFERRED (a top-level module, or a top-level package's submodule) replaced by an
    _OnFirstUse until it is used. Only the command does this, never the library, which leaves a
    user's process as it is."""
    import importlib.machinery
    import importlib.util

    for name in _DEFERRED:
        if name in sys.modules:
            continue
        parent = name.rpartition(".")[0]
        if parent:  # (found without importing the package: find_spec of a top-level name)
            package = importlib.util.find_spec(parent)
            if package is None or not package.submodule_search_locations:
                continue
            spec = importlib.machinery.PathFinder.find_spec(name,
                                                            package.submodule_search_locations)
        else:
            spec = importlib.util.find_spec(name)
        if spec is None:
            continue
        stand_in = _OnFirstUse(name)
        stand_in.__spec__ = spec
        sys.modules[name] = stand_in
