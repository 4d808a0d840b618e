"""The Typer app every command is registered on, its bad-usage lines, and ``main``."""

from __future__ import annotations

import inspect
import signal
import sys
from typing import Annotated, Any

import typer
import typer.core

from scatter_rewrite.cli.lazy_imports import defer_imports
from scatter_rewrite.cli.signals import (
    STOP_SIGNALS, Stopped, stop_on_signals, stopped_after_the_run, stopped_message,
)

__all__ = ["Command", "app", "main"]


def _usage_piece(piece: str) -> str:
    """``MODEL...`` as the README writes it: typer wraps a required argument's metavar in braces
    (``{MODEL...}``, and from 0.29 on ``{MODEL...}...``)."""
    if piece.startswith("{") and "}" in piece:
        piece = piece[1:].replace("}", "", 1)
        while piece.endswith("......"):
            piece = piece[:-3]
    return piece


def _flags_without_type(params: list) -> list:
    """A flag takes no value: no type in the help's type column (typer 0.29 writes ``<bool>`` there
    for every flag, --help included)."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


def _one_line_paragraphs(text: str) -> str:
    """``text`` with each paragraph on one line: typer joins the lines of a help's first paragraph
    but keeps those of the others, which then break mid-sentence at any width."""
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n"))


class Command(typer.core.TyperCommand):
    """Usage line as the README writes it; flags without a type column (above); the help's
    paragraphs wrapped to the terminal, never at the docstring's line breaks."""

    def __init__(self, *args: Any, help: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, help=_one_line_paragraphs(help) if help else help, **kwargs)

    def collect_usage_pieces(self, ctx):
        return [_usage_piece(p) for p in super().collect_usage_pieces(ctx)]

    def get_params(self, ctx):
        return _flags_without_type(super().get_params(ctx))


class _App(typer.core.TyperGroup):
    """Bad usage (a missing argument, an unknown option or command, a value of the wrong type) is
    one line on stderr and exit 2, like every other failure, instead of Click's usage block or
    Typer's panel. No arguments at all still prints the help."""

    def get_params(self, ctx):
        return _flags_without_type(super().get_params(ctx))

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except Stopped as e:
            typer.echo(f"scatter-rewrite: error: {stopped_message(e)}", err=True)
            sys.exit(128 + e.signum)
        except typer.Abort:
            typer.echo("scatter-rewrite: error: aborted", err=True)
            sys.exit(1)
        except Exception as e:
            # (not a Click usage error)
            if not (hasattr(e, "exit_code") and hasattr(e, "format_message")):
                raise
            # no arguments: the help (rich mode printed it)
            if type(e).__name__ == "NoArgsIsHelpError":
                typer.echo(e.format_message() or "", nl=bool(e.format_message()))
                sys.exit(e.exit_code)
            ctx = getattr(e, "ctx", None)
            where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
            message = " ".join(e.format_message().split())
            typer.echo(f"scatter-rewrite: error: {message}{where}", err=True)
            sys.exit(e.exit_code)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=_App,
    name="scatter-rewrite",
    help="Rewrite ONNX scatter operators: upgrade deprecated Scatter, fold constant scatters, "
    "lower reductions for older opsets, prepare for TensorRT. Every rewrite is validated in "
    "onnxruntime.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from scatter_rewrite import __version__

        typer.echo(f"scatter-rewrite {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.",
                                          is_eager=True, callback=_print_version)] = False,
) -> None:
    """Rewrite ONNX scatter operators; see each command's --help."""


def main() -> None:
    """The ``scatter-rewrite`` console script (the commands are registered on ``app`` by
    :mod:`scatter_rewrite.cli`, which is imported before this module)."""
    stop_on_signals()
    defer_imports()
    try:
        # (also under python -m / -c: the name the messages and help use)
        app(prog_name="scatter-rewrite")
    finally:
        for signum in STOP_SIGNALS:
            signal.signal(signum, stopped_after_the_run)
