"""What the command's start-up does not load until it is used.

onnx_ir imports sympy, for symbolic shape arithmetic that a rewrite rarely does (otherwise 0.2 s
and ~30 MiB of every run: benchmarks/RESULTS-cli-start.md), and reads a few of its functions while
it is imported (the ones its shape expressions may call). In the command's process sympy is a
stand-in until first use: what onnx_ir reads from it while onnx_ir is imported are forwarders,
which load sympy when they are used; anything else touching sympy loads it at once. Only public
import machinery (``sys.meta_path``, ``sys.modules``), and no module of onnx_ir is named.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
from typing import Any

__all__ = ["defer_imports"]

DEFERRED = "sympy"
READER = "onnx_ir"  # the package that reads DEFERRED's functions while it is imported


class _OnFirstUse(types.ModuleType):
    """Stands in sys.modules for a module not loaded yet: ``import`` finds it (its ``__spec__`` is
    the real one's), and the first attribute it lacks loads the real module, which takes its
    place in sys.modules and lends this one its namespace; except while it is in _FORWARDING, when
    a plain name is answered with a :class:`_Forwarder`. (importlib.util.LazyLoader does not do:
    Python 3.11's import statement reads ``__spec__`` of a module already in sys.modules, which
    loads a LazyLoader's module at once.)"""

    def __getattr__(self, attr: str) -> Any:
        if self in _FORWARDING and not attr.startswith("__"):
            return _Forwarder(self, attr)
        return getattr(_load(self), attr)


# (kept outside the stand-in, whose namespace becomes the real module's)
_FORWARDING: list[_OnFirstUse] = []


def _load(stand_in: _OnFirstUse) -> types.ModuleType:
    name = stand_in.__name__
    if sys.modules.get(name) is stand_in:
        del sys.modules[name]
    real = importlib.import_module(name)
    vars(stand_in).update({k: v for k, v in vars(real).items() if k != "__spec__"})
    return real


class _Forwarder:
    """A name read from a module not loaded yet: called, used as a class (``isinstance``, a base
    class) or read from, it is the real one, and the module is loaded then. (While forwarding,
    every plain name seems to exist, so a ``hasattr`` at import would be told yes: onnx_ir asks
    none; tests/cli/test_footprint.py runs what it reads.)"""

    def __init__(self, module: _OnFirstUse, attr: str) -> None:
        self.module, self.attr, self.target = module, attr, None

    def real(self) -> Any:
        if self.target is None:
            self.target = getattr(_load(self.module), self.attr)
        return self.target

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.real()(*args, **kwargs)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.real(), attr)

    def __instancecheck__(self, obj: Any) -> bool:
        return isinstance(obj, self.real())

    def __subclasscheck__(self, cls: type) -> bool:
        return issubclass(cls, self.real())

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (self.real(),)

    def __eq__(self, other: Any) -> bool:
        return self.real() == (other.real() if isinstance(other, _Forwarder) else other)

    def __hash__(self) -> int:
        return hash(self.real())

    def __repr__(self) -> str:
        return repr(self.real())


class _ForwardingLoader(importlib.abc.Loader):
    """READER's own loader, with the stand-in forwarding while READER (and so every submodule it
    imports) runs; the module keeps its own loader."""

    def __init__(self, loader: importlib.abc.Loader, stand_in: _OnFirstUse) -> None:
        self.loader, self.stand_in = loader, stand_in

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        _FORWARDING.append(self.stand_in)
        try:
            self.loader.exec_module(module)
        finally:
            _FORWARDING.remove(self.stand_in)


class _ReaderFinder(importlib.abc.MetaPathFinder):
    """On READER's import (once), READER's spec from the other finders, its loader wrapped."""

    def __init__(self, stand_in: _OnFirstUse) -> None:
        self.stand_in = stand_in

    def find_spec(self, name, path=None, target=None):
        if name != READER:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _ForwardingLoader(spec.loader, self.stand_in)
        return spec


def defer_imports() -> None:
    """DEFERRED replaced by an _OnFirstUse until it is used, READER's import hooked. Only the
    command does this, never the library, which leaves a user's process as it is; nothing when
    either is already loaded or DEFERRED is not installed."""
    if DEFERRED in sys.modules or READER in sys.modules:
        return
    spec = importlib.util.find_spec(DEFERRED)
    if spec is None:
        return
    stand_in = _OnFirstUse(DEFERRED)
    stand_in.__spec__ = spec
    sys.modules[DEFERRED] = stand_in
    sys.meta_path.insert(0, _ReaderFinder(stand_in))
