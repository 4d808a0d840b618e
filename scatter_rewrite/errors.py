"""The one error hierarchy for problems a user can fix.

Declining to rewrite a node is *not* an error: passes report it as a skip reason.
Messages name the node, the op, the opset and the fix, on one line.
"""

from __future__ import annotations

__all__ = [
    "ScatterRewriteError", "ModelLoadError", "InvalidModelError", "IndexOutOfRangeError",
    "OptionError", "OptionTypeError", "ValidationError", "ConversionError", "WriteError",
    "internal_error_message",
]


class ScatterRewriteError(Exception):
    """Base class: something the user can fix (bad file, bad option, invalid model).

    A message that names the Python API's parameters (``inputs=``, ``validate=False``) is a
    :class:`~scatter_rewrite.said.Said`, which the command line says as their flags
    (``--inputs``, ``--no-validate``: :meth:`scatter_rewrite.verbs.Verb.cli_message`)."""


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

    def __init__(self, message: str = "", *, parameter: str | None = None):
        super().__init__(message)
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


def _node_said(node: object) -> str | None:
    op_type, name = getattr(node, "op_type", None), getattr(node, "name", None)
    if not isinstance(op_type, str) or not isinstance(name, str) or not name:
        return None
    return f"{op_type} '{name}'"


def internal_error_message(e: BaseException, said: str = "internal error",
                           advice: str = "; rerun with -v and report it") -> str:
    """A bug of ours in one line, naming the node it was working on where the traceback holds one:
    the innermost frame's ``node`` (a pass's, a kernel's) or ``onnx.reference`` op (its
    ``self.onnx_node``), else a node an exception in the chain names (``node_name``)."""
    where, tb = None, e.__traceback__
    while tb is not None:
        frame = tb.tb_frame.f_locals
        for candidate in (frame.get("node"), getattr(frame.get("self"), "onnx_node", None)):
            where = _node_said(candidate) or where
        tb = tb.tb_next
    cause = e
    while where is None and cause is not None:
        if getattr(cause, "op_type", None) and getattr(cause, "node_name", None):
            where = f"{cause.op_type} '{cause.node_name}'"
        cause = cause.__cause__
    at = f" at {where}" if where else ""
    return f"{said}{at} ({type(e).__name__}: {e}){advice}"
