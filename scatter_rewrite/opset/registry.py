"""The registry of exact forms: each form registers itself where it is defined, with its key and
metadata, by :func:`register_form`::

    @register_form("Softmax", 13, 11, reads_rank=True)
    def softmax_13_11(node, scope, target) -> Form: ...

The key is (op, from_version, to_version): a step down from a version to the op's previous one
(``to_version`` None when there is none, as for Trilu-14), or a step up from a version to the next
(Softmax-11 -> Softmax-13). The engine (:mod:`scatter_rewrite.opset.engine`) looks a form up by the
step it crosses; the steps table (:mod:`scatter_rewrite.opset.steps`) says which steps down have one
(``REWRITE``). The forms live in :mod:`scatter_rewrite.opset.forms`, one file per form, loaded by
:func:`load_forms`.

A form takes (node, scope, target), returns a :data:`Form` and raises ConversionError when it has no
exact form for the node:

* :class:`Unchanged`: the step means the same for the node as it is (or as the form left it);
* :class:`Done`: the node is in its form at the target;
* :class:`Replaced`: the node was replaced by new nodes, each moved on in turn;
* :class:`Prepared`: new nodes compute the node's inputs in their older form; the node goes on.

Metadata: ``neutral`` (a node without the form's trigger is left as it is: with none, the step means
the same, which schema fitting relies on); ``reads_rank`` (the form needs its input's rank, which
the engine then borrows from shape inference when unrecorded: True, or a predicate on the node);
``rounding`` (the form's float results may round differently from the op's kernel: validation
compares them within its float tolerance).
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable

import onnx_ir as ir

from scatter_rewrite.graph import Scope
from scatter_rewrite.opset import steps

__all__ = [
    "DONE", "Done", "down_form", "Form", "FORMS", "FormSpec", "load_forms", "Prepared", "register_form",
    "Replaced", "UNCHANGED", "Unchanged", "up_form",
]


@dataclasses.dataclass(frozen=True)
class Unchanged:
    """The step means the same for this node as it is (or as the form left it, attributes
    rewritten)."""


@dataclasses.dataclass(frozen=True)
class Done:
    """The node is now in its form at the target: nothing more to do."""


@dataclasses.dataclass(frozen=True)
class Replaced:
    """The node was replaced by ``nodes`` (valid at the scope's opset), each moved on in turn."""

    nodes: tuple[ir.Node, ...]
    rounding: bool = False  # floats computed otherwise than the op's kernel does (see module doc)


@dataclasses.dataclass(frozen=True)
class Prepared:
    """New ``nodes`` compute the node's inputs in their older form; the node goes on to its older
    steps."""

    nodes: tuple[ir.Node, ...]


Form = Unchanged | Done | Replaced | Prepared  # what a registered form returns
UNCHANGED, DONE = Unchanged(), Done()
FormFunction = Callable[[ir.Node, Scope, int], Form]


@dataclasses.dataclass(frozen=True)
class FormSpec:
    """A registered form: its key, its function and its metadata (see the module docstring)."""

    op: str
    from_version: int
    to_version: int | None
    function: FormFunction
    neutral: bool
    reads_rank: bool | Callable[[ir.Node], bool]

    @property
    def up(self) -> bool:
        return self.to_version is not None and self.to_version > self.from_version

    @property
    def name(self) -> str:
        return self.function.__module__.rsplit(".", 1)[-1]

    def needs_rank(self, node: ir.Node) -> bool:
        return self.reads_rank(node) if callable(self.reads_rank) else self.reads_rank


# (op, from_version, to_version) -> the form
FORMS: dict[tuple[str, int, int | None], FormSpec] = {}


def register_form(op: str, from_version: int, to_version: int | None, *, neutral: bool = False,
                  reads_rank: bool | Callable[[ir.Node], bool] = False):
    """Register the decorated function as the exact form of ``op`` from ``from_version`` to
    ``to_version`` (stack it for several ops or steps). A key registered twice is an error."""

    def decorate(function: FormFunction) -> FormFunction:
        key = (op, from_version, to_version)
        if key in FORMS and FORMS[key].function is not function:
            raise ValueError(f"two forms registered for {op} {from_version} -> {to_version}: "
                             f"{FORMS[key].function.__module__} and {function.__module__}")
        FORMS[key] = FormSpec(op, from_version, to_version, function, neutral, reads_rank)
        return function

    return decorate


_LOADED: set[str] = set()


def load_forms(package: str = "scatter_rewrite.opset.forms") -> dict:
    """Import every module of ``package`` once (each registers its forms); :data:`FORMS`."""
    if package not in _LOADED:
        root = importlib.import_module(package)
        for info in pkgutil.iter_modules(root.__path__):
            importlib.import_module(f"{package}.{info.name}")
        _LOADED.add(package)
    return FORMS


def down_form(op: str, since: int) -> FormSpec | None:
    """The form registered for the step down from ``op``'s version ``since``; None if none."""
    return load_forms().get((op, since, steps.previous(op, since)))


def up_form(op: str, older: int, newer: int) -> FormSpec | None:
    """The form registered for the step up from ``op``'s version ``older`` to ``newer``."""
    spec = load_forms().get((op, older, newer))
    return spec if spec is not None and spec.up else None
