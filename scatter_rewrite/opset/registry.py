"""The registry of exact forms: each form registers itself where it is defined, with its key and
metadata, by :func:`register_form`::

    @register_form("Softmax", 13, 11, reads_rank=True)
    def softmax_13_11(node, scope, target) -> Form: ...

The key is (op, from_version, to_version): a step down from a version to the op's previous one
(``to_version`` None when there is none, as for Trilu-14), or a step up from a version to the next
(Softmax-11 -> Softmax-13). The engine (:mod:`scatter_rewrite.opset.engine`) looks a form up by the
step it crosses; a step down with a registered form is ``REWRITE``
(:func:`scatter_rewrite.opset.steps.step` asks this registry before the steps table, which has no
row for it). The forms live in :mod:`scatter_rewrite.opset.forms`, one file per form, loaded by
:func:`load_forms`.

A form takes (node, scope, target), returns a :data:`Form` and raises ConversionError when it has no
exact form for the node:

* :class:`Unchanged`: the step means the same for the node as it is (or as the form left it);
* :class:`Done`: the node is in its form at the target;
* :class:`Replaced`: the node was replaced by new nodes, each moved on in turn;
* :class:`Prepared`: new nodes compute the node's inputs in their older form; the node goes on.

Several forms may take one step (Resize-18 -> 13: antialias, then axes): the engine runs them in
their ``order`` (then by module name) until one returns Done or Replaced.

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
from scatter_rewrite.opset.versions import previous

__all__ = [
    "DONE", "Done", "down_forms", "Form", "FORMS", "FormSpec", "load_forms", "Prepared",
    "register_form",
    "Replaced", "UNCHANGED", "Unchanged", "up_forms",
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
    order: int = 0

    @property
    def up(self) -> bool:
        return self.to_version is not None and self.to_version > self.from_version

    @property
    def name(self) -> str:
        return self.function.__module__.rsplit(".", 1)[-1]

    def needs_rank(self, node: ir.Node) -> bool:
        return self.reads_rank(node) if callable(self.reads_rank) else self.reads_rank


# (op, from_version, to_version) -> the forms of that step, in the order they run
FORMS: dict[tuple[str, int, int | None], list[FormSpec]] = {}


def register_form(op: str, from_version: int, to_version: int | None, *, neutral: bool = False,
                  reads_rank: bool | Callable[[ir.Node], bool] = False, order: int = 0):
    """Register the decorated function as an exact form of ``op`` from ``from_version`` to
    ``to_version`` (stack it for several ops or steps); ``order``: where it runs among the step's
    forms (lower first)."""

    def decorate(function: FormFunction) -> FormFunction:
        key = (op, from_version, to_version)
        forms = [f for f in FORMS.get(key, []) if f.function is not function]
        forms.append(FormSpec(op, from_version, to_version, function, neutral, reads_rank, order))
        FORMS[key] = sorted(forms, key=lambda f: (f.order, f.name))
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


def down_forms(op: str, since: int) -> tuple[FormSpec, ...]:
    """The forms registered for the step down from ``op``'s version ``since``, in order."""
    return tuple(load_forms().get((op, since, previous(op, since)), ()))


def up_forms(op: str, older: int, newer: int) -> tuple[FormSpec, ...]:
    """The forms registered for the step up from ``op``'s version ``older`` to ``newer``."""
    return tuple(f for f in load_forms().get((op, older, newer), ()) if f.up)
