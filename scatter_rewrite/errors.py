"""The one error hierarchy for problems a user can fix.

Declining to rewrite a node is *not* an error: passes report it as a skip reason.
Messages name the node, the op, the opset and the fix, on one line.
"""

from __future__ import annotations

__all__ = [
    "ScatterRewriteError", "ModelLoadError", "InvalidModelError", "IndexOutOfRangeError",
    "OptionError", "OptionTypeError", "ValidationError", "ConversionError", "WriteError",
]


class ScatterRewriteError(Exception):
    """Base class: something the user can fix (bad file, bad option, invalid model).

    ``parameters``: the Python parameters the message names, each spelled as the Python API takes
    it (``inputs=``, ``validate=False``, ``mode='standard'``); the command line says their flags
    instead (``--inputs``, ``--no-validate``, ``--mode standard``:
    :meth:`scatter_rewrite.verbs.Verb.cli_message`)."""

    def __init__(self, message: str = "", *, parameters: tuple[str, ...] = ()):
        super().__init__(message)
        self.parameters = tuple(parameters)


class ModelLoadError(ScatterRewriteError):
    """The model file is missing, empty, truncated or not ONNX."""


class InvalidModelError(ScatterRewriteError):
    """The model is ONNX but breaks the operator spec (bad axis, rank mismatch, ...)."""


class IndexOutOfRangeError(InvalidModelError):
    """A scatter index lies outside the data's bounds (the spec makes this an error)."""


class OptionError(ScatterRewriteError, ValueError):
    """An option value is invalid (opset out of range, unknown target, options that exclude each
    other): bad usage, exit 2 on the command line; a ValueError in Python, raised before any work,
    naming the parameter.

    ``parameter``: the Python parameter the message starts with (``opset=9 is out of range``), which
    the command line shows as its flag (:meth:`scatter_rewrite.verbs.Verb.cli_message`)."""

    def __init__(self, message: str = "", *, parameter: str | None = None,
                 parameters: tuple[str, ...] = ()):
        super().__init__(message, parameters=parameters)
        self.parameter = parameter


class ValidationError(ScatterRewriteError):
    """The rewritten model does not compute what the original computes."""


class ConversionError(ScatterRewriteError):
    """Opset conversion of the nodes we do not rewrite failed."""


class OptionTypeError(OptionError, TypeError):
    """An option given to the Python API has the wrong type (``opset="13"``)."""


class WriteError(ScatterRewriteError):
    """An output cannot be written (no permission, a file in the way, the disk full): not bad
    usage, so exit 1."""
