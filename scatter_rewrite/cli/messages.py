"""The lines the command writes on stderr besides a summary: log records as one line each, errors
(a traceback only with -v), and the exit code an error makes."""

from __future__ import annotations

import contextlib
import logging
import sys
import traceback
from collections.abc import Callable, Iterator

import typer

__all__ = ["LineFormatter", "error", "exit_code", "internal_error", "setup_logging",
           "warnings_said_with_flags"]


class LineFormatter(logging.Formatter):
    """Warnings as every other line this tool prints on stderr: ``scatter-rewrite: warning: ...``
    (another library's logger is named in front of its message)."""

    def format(self, record: logging.LogRecord) -> str:
        source = "" if record.name.split(".")[0] == "scatter_rewrite" else f"{record.name}: "
        message = record.getMessage()
        error = record.exc_info[1] if record.exc_info else None
        if not record.args and "%s" in message and error is not None:
            # onnx_ir logs "Shape inference failed: %s." with the exception as exc_info, not as
            # an argument: the exception's words go where it meant them (no traceback without -v).
            said = " ".join(str(error).split())[:300] or type(error).__name__
            message = message.replace("%s", said, 1)
        return f"scatter-rewrite: {record.levelname.lower()}: {source}{' '.join(message.split())}"


class _Once(logging.Filter):
    """Each warning once: a warning said for each read of the model is said once."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[tuple[str, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.getMessage())
        if key in self._seen:
            return False
        self._seen.add(key)
        return True


class _WithFlags(logging.Filter):
    """The library's warnings name Python parameters (``inputs=``), as the API says them; on the
    command line they say the running verb's flags instead (``--inputs``: Verb.cli_text). On the
    library's own logger, so that worker processes (forked) say them so too."""

    said: Callable[[str], str] | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if self.said is not None and record.levelno >= logging.WARNING:
            from scatter_rewrite.said import Said

            if isinstance(record.args, tuple):  # (a Said among them says its parameters so)
                record.args = tuple(self.said(a) if isinstance(a, Said) else a
                                    for a in record.args)
            record.msg = self.said(record.msg) if isinstance(record.msg, Said) else record.msg
        return True


_WITH_FLAGS = _WithFlags()


def _ours(record: logging.LogRecord) -> bool:
    """Whether the record is this tool's: another library's (onnx_ir's loader on an invalid model,
    onnx's, onnxruntime's) is for -v, where its logger is named."""
    return record.name.split(".")[0] == "scatter_rewrite"


@contextlib.contextmanager
def warnings_said_with_flags(said: Callable[[str], str]) -> Iterator[None]:
    """While a command runs, the library's warnings as ``said`` writes them (a verb's
    ``cli_text``); after it, as the API says them again (in a process that goes on: tests, or a
    program calling the command line's ``app``)."""
    library = logging.getLogger("scatter_rewrite")
    _WITH_FLAGS.said = said
    library.addFilter(_WITH_FLAGS)
    try:
        yield
    finally:
        library.removeFilter(_WITH_FLAGS)
        _WITH_FLAGS.said = None


def setup_logging(verbose: bool) -> None:
    logging.captureWarnings(True)  # (another library's Python warnings: log records, for -v too)
    if not verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(LineFormatter())
        handler.addFilter(_ours)
        handler.addFilter(_Once())
        logging.basicConfig(level=logging.WARNING, handlers=[handler])
        return
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("onnx_ir", "onnx", "onnxruntime"):
        logging.getLogger(noisy).setLevel(logging.INFO)


def error(message: str, exc: BaseException | None, verbose: bool) -> None:
    if verbose and exc is not None:
        traceback.print_exception(exc, file=sys.stderr)
    typer.echo(f"scatter-rewrite: error: {message}", err=True)


def exit_code(e: BaseException) -> int:
    """2 for bad usage (an option's value, options that exclude each other), 1 otherwise."""
    from scatter_rewrite.errors import OptionError

    return 2 if isinstance(e, OptionError) else 1


def internal_error(e: BaseException, verbose: bool):
    """A bug of ours: said in one line (-v shows where), exit 1."""
    from scatter_rewrite.errors import internal_error_message

    error(internal_error_message(e), e, verbose)
    raise typer.Exit(1) from None
