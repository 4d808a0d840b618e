"""The limits and facts the package shares, each declared once, and the range checks on them.

Library code (passes, validation) raises :class:`~scatter_rewrite.errors.OptionError` naming the
Python parameter (``opset=9 is out of range``); the command line shows the flag instead
(:meth:`scatter_rewrite.verbs.Verb.cli_message`; the message a
:class:`~scatter_rewrite.said.Said`). Imports nothing heavy: ``--help`` reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scatter_rewrite.errors import OptionError, OptionTypeError
from scatter_rewrite.said import param, said

__all__ = [
    "DEFAULT_CHECK_TARGET", "DEFAULT_DOMAINS", "DEFAULT_LOWER_OPSET", "DEFAULT_TRT_VERSION", "OPSET_FLOOR",
    "REDUCTIONS", "REDUCTION_VALUES", "REDUCTIONS_SINCE", "TRT_VERSIONS",
    "check_choice", "check_opset", "check_size", "highest_opset", "opset_range",
]

# The names of the default (ONNX) domain.
DEFAULT_DOMAINS = ("", "ai.onnx")
# The lowest opset every verb writes: ScatterElements (what they write) starts at 11.
OPSET_FLOOR = 11
# The scatter reductions besides "none", and every value of the attribute.
REDUCTIONS = ("add", "mul", "max", "min")
REDUCTION_VALUES = ("none", *REDUCTIONS)
# The first opset of each ScatterElements/ScatterND reduction (the attribute itself came with 16).
REDUCTIONS_SINCE = {"none": 11, "add": 16, "mul": 16, "max": 18, "min": 18}
# TensorRT versions ``tensorrt`` prepares for (see passes/tensorrt.py and docs/tensorrt-11.md).
TRT_VERSIONS = ("8.6", "10", "11")
# The version ``tensorrt`` prepares for when none is given.
DEFAULT_TRT_VERSION = "10"
# The target ``check`` judges a model on when none is given.
DEFAULT_CHECK_TARGET = f"tensorrt-{DEFAULT_TRT_VERSION}"
# The opset ``lower`` brings a model to when none is given.
DEFAULT_LOWER_OPSET = 13


def highest_opset() -> int:
    """The highest default-domain opset the installed onnx defines (every verb's ceiling)."""
    import onnx

    return onnx.defs.onnx_opset_version()


def opset_range(floor: int = OPSET_FLOOR) -> str:
    return f"{floor} to {highest_opset()}"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_opset(value: Any, name: str = "opset", floor: int = OPSET_FLOOR) -> int:
    """``value`` as a target opset: an int from ``floor`` to :func:`highest_opset`; OptionError
    (OptionTypeError for a non-int) naming the parameter ``name`` otherwise."""
    if not _is_int(value):
        raise OptionTypeError(f"{name} must be an int, got {type(value).__name__} {value!r}",
                              parameter=name)
    if not floor <= value <= highest_opset():
        raise OptionError(said(param(name, value), f" is out of range: pick {opset_range(floor)} "
                               "(the highest this onnx defines)"), parameter=name)
    return value


def check_choice(value: Any, choices: Sequence[str], name: str) -> str:
    """``value`` if one of ``choices`` (a number given for a text choice as its text)."""
    if _is_int(value) or isinstance(value, float):
        value = str(value)
    if value not in choices:
        raise OptionError(said(param(name, value), f" is unknown: pick one of {', '.join(choices)}"),
                          parameter=name)
    return value


def check_size(value: Any, name: str, minimum: int = 0) -> int:
    """``value`` as an int >= ``minimum`` (a number of bytes, a dimension's size)."""
    if not _is_int(value) or value < minimum:
        raise OptionError(said(param(name, value), f" is out of range: pick >= {minimum}"),
                          parameter=name)
    return value
