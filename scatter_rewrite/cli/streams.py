"""``-`` as a model (standard input) or as the output (standard output): temporary files stand for
them while a run reads or writes, and messages and reports name them ``-``."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any, Optional

from scatter_rewrite.cli.options import STANDARD

__all__ = ["refuse_standard_streams", "shown", "shown_paths", "standard_streams"]

# The temporary files that stand for standard input and output while a run reads or writes them
# (file -> the name to show), for messages and reports.
_SHOWN: dict[str, str] = {}


def shown_paths(text: str) -> str:
    """``text`` with the temporary files of standard input and output named as the user named
    them (``-``)."""
    for path, name in _SHOWN.items():
        text = text.replace(path, name)
    return text


def shown(outcome: Any) -> Any:
    """The outcome as the command line shows it: standard input and output named ``-`` (see
    standard_streams), its notes and skip reasons with flags and commands where the API's say
    parameters and functions (pipeline.Outcome.said_on_the_command_line)."""
    outcome.said_on_the_command_line()
    if _SHOWN:
        outcome.input = shown_paths(outcome.input)
        outcome.output = outcome.output and shown_paths(outcome.output)
        outcome.error = outcome.error and shown_paths(outcome.error)
    return outcome


def refuse_standard_streams(models: list[str], output: Optional[str], report: Optional[str],
                            in_place: bool) -> None:
    """``-`` where it cannot apply: bad usage (OptionError), before any work."""
    from scatter_rewrite.errors import OptionError

    if STANDARD in models:
        if len(models) > 1:
            raise OptionError("- (standard input) is one model: give it alone, or name files")
        if in_place:
            raise OptionError("--in-place cannot replace standard input (-): use -o")
        if output is None:
            raise OptionError("a model read from standard input (-) has no name to write beside: "
                              "give -o OUT, or -o - for standard output")
    if output == STANDARD:
        if len(models) > 1 or any(Path(m).is_dir() for m in models if m != STANDARD):
            raise OptionError("-o - writes one model to standard output: give one model")
        if report == STANDARD:
            raise OptionError("-o - and --report - would both write to standard output: name a "
                              "file for one of them")


@contextlib.contextmanager
def standard_streams(models: list[str], output: Optional[str]):
    """Yields (models, output, shown) with ``-`` replaced by temporary files: the model read from
    standard input is saved into one, and the model written to standard output is written into
    one, then copied there (the model only: a result with external data is refused)."""
    if STANDARD not in models and output != STANDARD:
        yield models, output, {}
        return
    import tempfile

    _SHOWN.clear()
    with tempfile.TemporaryDirectory(prefix="scatter-rewrite-") as tmp:
        if STANDARD in models:
            models = [_save_standard_input(Path(tmp))]
        if output == STANDARD:
            (Path(tmp) / "out").mkdir()
            output = str(Path(tmp, "out", "stdout.onnx"))
            _SHOWN[output] = "-"
        yield models, output, _SHOWN
        if output in _SHOWN and Path(output).exists():
            _copy_to_standard_output(Path(output))


def _save_standard_input(tmp: Path) -> str:
    """The model piped into standard input, saved into ``tmp``; its file."""
    from scatter_rewrite.errors import ModelLoadError, OptionError

    stdin = getattr(sys.stdin, "buffer", sys.stdin)
    if stdin.isatty():
        raise OptionError("- reads a model from standard input, which is a terminal: "
                          "pipe a model into it")
    source = Path(tmp, "in", "stdin.onnx")
    source.parent.mkdir()
    source.write_bytes(stdin.read())
    if not source.stat().st_size:
        raise ModelLoadError("- (standard input): empty, no model")
    _SHOWN[str(source)] = "-"
    return str(source)


def _copy_to_standard_output(output: Path) -> None:
    """The model written into ``output`` (a file alone in its folder), copied to standard
    output."""
    import shutil

    from scatter_rewrite.errors import OptionError

    written = sorted(p.name for p in output.parent.iterdir())
    if written != [output.name]:
        raise OptionError("-o -: the result has external data (over 2 GiB), which "
                          "standard output cannot carry with the model: name a file "
                          "with -o")
    sys.stdout.flush()
    out = getattr(sys.stdout, "buffer", sys.stdout)
    with open(output, "rb") as f:
        shutil.copyfileobj(f, out)
    out.flush()
