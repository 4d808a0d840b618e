"""Messages that name the Python API's parameters and calls as data: a :class:`Said` is the text
Python users read (``opset=13 is out of range``, ``scatter_rewrite.lower(model, opset=13)``), a
``str``, which also holds its parts, so that the command line says each :class:`Param` as its flag
and each :class:`Call` as its command (:func:`scatter_rewrite.verbs.spoken`) without reading the
text back. Build one with :func:`said` (parts and plain text, in order), :func:`param`,
:func:`call` and :func:`joined`; a Said composed into an f-string is plain text again, so compose
with these."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["BARE", "Call", "Param", "Placeholder", "Said", "call", "joined", "message_of", "on_file", "param",
           "python_value", "said"]

BARE = None  # a Param without a value: the parameter itself is named ("inputs=")


class Placeholder(str):
    """A value the user picks, written as it is in Python too (``opset=N``, ``{'E': SIZE}``)."""


def python_value(value: Any) -> str:
    """``value`` as a Python call writes it: text quoted, a dict of sizes ``{'N': 8}``, other values
    as they print (13, False, 1e-05, a Placeholder)."""
    if isinstance(value, Placeholder):
        return str(value)
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{python_value(k)}: {v}" for k, v in value.items()) + "}"
    return str(value)


@dataclasses.dataclass(frozen=True)
class Param:
    """A Python parameter a message names, with the value it speaks of (None: the parameter
    alone). ``text``: the value as the message writes it, where that is not its Python spelling
    (a path in quotes, a ``{'N': SIZE}`` placeholder)."""

    name: str
    value: Any = BARE
    text: str | None = None
    equals: bool = True  # False: the name alone, as a message's heading ("dim_sizes: ...")

    @property
    def python(self) -> str:
        if not self.equals:
            return self.name
        if self.value is BARE and self.text is None:
            return f"{self.name}="
        return f"{self.name}={self.text if self.text is not None else python_value(self.value)}"


@dataclasses.dataclass(frozen=True)
class Call:
    """A call of one of the API's functions (``scatter_rewrite.FUNCTION``) a message suggests, on
    the model (``path`` None) or a model file, with keyword arguments."""

    function: str
    arguments: tuple[tuple[str, Any], ...] = ()
    path: str | None = None

    @property
    def python(self) -> str:
        first = "model" if self.path is None else repr(self.path)
        arguments = "".join(f", {name}={python_value(value)}" for name, value in self.arguments)
        return f"scatter_rewrite.{self.function}({first}{arguments})"


Part = str | Param | Call


class Said(str):
    """Text naming parameters and calls (its ``parts``): ``str(said)`` is what Python users read;
    :meth:`spoken` says it otherwise, part by part."""

    parts: tuple[Part, ...]

    def __new__(cls, *parts: Any) -> Said:
        flat: list[Part] = []
        for part in parts:
            if isinstance(part, Said):
                flat += part.parts
            elif isinstance(part, (Param, Call)):
                flat.append(part)
            else:
                flat.append(str(part))
        self = super().__new__(cls, "".join(p if isinstance(p, str) else p.python for p in flat))
        self.parts = tuple(flat)
        return self

    def __add__(self, other: Any) -> Said:
        return Said(self, other) if isinstance(other, str) else NotImplemented

    def __radd__(self, other: Any) -> Said:
        return Said(other, self) if isinstance(other, str) else NotImplemented

    def __reduce__(self):  # (pickled with its parts, as onnx.reference's worker processes need)
        return (Said, self.parts)

    def spoken(self, param: Callable[[Param], str], call: Callable[[Call], str]) -> str:
        """The text with each Param said by ``param`` and each Call by ``call``."""
        return "".join(p if isinstance(p, str) else param(p) if isinstance(p, Param) else call(p)
                       for p in self.parts)


def said(*parts: Any) -> Said:
    """The parts (text, Params, Calls, other Saids) in order, as one Said."""
    return Said(*parts)


def param(name: str, value: Any = BARE, text: str | None = None, equals: bool = True) -> Said:
    """A message's naming of parameter ``name`` (``opset=13``; no value: ``inputs=``; not
    ``equals``: ``dim_sizes``)."""
    return Said(Param(name, value, text, equals))


def call(function: str, path: str | None = None, **arguments: Any) -> Said:
    """A message's suggestion of a call, ``scatter_rewrite.lower(model, opset=13)``."""
    return Said(Call(function, tuple(arguments.items()), path))


def joined(separator: str, items: Iterable[Any]) -> Said:
    """``separator.join(items)`` keeping the parts of each Said item."""
    parts: list[Any] = []
    for i, item in enumerate(items):
        parts += [separator, item] if i else [item]
    return Said(*parts)


def on_file(text: Said, path: str) -> Said:
    """``text`` with each call made on the model file ``path`` rather than on the model."""
    return Said(*(dataclasses.replace(p, path=path) if isinstance(p, Call) else p
                  for p in text.parts))


def message_of(error: BaseException | str) -> str:
    """An error's message as it was raised: the Said it was raised with (its one argument), or its
    text."""
    if isinstance(error, str):
        return error
    first = error.args[0] if len(error.args) == 1 else None
    return first if isinstance(first, Said) else str(error)
