"""The options every rewriting verb shares, defined once, and the Typer parameter of each option a
verb declares (:class:`scatter_rewrite.verbs.Option`).

Paths are taken as text: Path("") is "." (an empty $MODEL would rewrite every model below the
current folder) and Path("out/") drops the slash that says "a folder".
"""

from __future__ import annotations

import enum
import inspect
from typing import Annotated, Any, Optional

import typer

from scatter_rewrite.verbs import SHARED_FLAGS

__all__ = [
    "Atol", "CheckVerbose", "InPlace", "Inputs", "Models", "Quiet", "Report", "Rtol", "SHARED",
    "STANDARD", "Validate", "Verbose", "cli_parameter", "output_option",
]


def _nonempty(value):
    values = value if isinstance(value, (list, tuple)) else [value]
    if any(v is not None and not str(v).strip() for v in values):
        raise typer.BadParameter("an empty path")
    return value


Models = Annotated[list[str], typer.Argument(
    help="ONNX model files, or folders of them; - reads one model from standard input.",
    show_default=False, callback=_nonempty, metavar="MODEL...")]
STANDARD = "-"  # as MODEL: standard input; as OUT or R.json: standard output


def output_option(suffix: str) -> Any:
    """-o/--output, whose help names the verb's output suffix."""
    return Annotated[Optional[str], typer.Option(
        SHARED_FLAGS["output"], "--output", help="Where to write (a folder when several models are "
        f"given, or when it ends with /; - for standard output). Default: beside the input as "
        f"<stem>.{suffix}.onnx.", callback=_nonempty, metavar="OUT")]


# The flags of the parameters the API takes too are declared once, with them (verbs.SHARED_FLAGS).
Validate = Annotated[bool, typer.Option(
    f"{SHARED_FLAGS['validate']}/--no-{SHARED_FLAGS['validate'].lstrip('-')}",
    help="Prove the rewrite in onnxruntime against the original; write nothing if it differs.")]
Inputs = Annotated[Optional[str], typer.Option(
    SHARED_FLAGS["inputs"],
    help="An .npz of model inputs to validate with, instead of generated ones.",
    callback=_nonempty, metavar="X.npz")]
Rtol = Annotated[Optional[float], typer.Option(
    SHARED_FLAGS["rtol"], help="Your own bound for float outputs: |rewritten - original| <= atol + "
    "rtol * |original| (default: exact, and float sums a rewrite reorders judged against a float64 "
    "evaluation).", metavar="R")]
Atol = Annotated[Optional[float], typer.Option(
    SHARED_FLAGS["atol"], help=f"With {SHARED_FLAGS['rtol']} (either alone: the other is 0).",
    metavar="A")]
Report = Annotated[Optional[str], typer.Option(
    "--report", help="Write a JSON report of what was done (- for standard output, the summary "
    "then going to stderr).", callback=_nonempty, metavar="R.json")]
InPlace = Annotated[bool, typer.Option(
    SHARED_FLAGS["in_place"], help="Overwrite the input model (and its external data).")]
Verbose = Annotated[bool, typer.Option(
    "-v", "--verbose", help="Log each node rewritten; show tracebacks.")]
CheckVerbose = Annotated[bool, typer.Option(
    "-v", "--verbose", help="Show tracebacks and debug logs.")]
Quiet = Annotated[bool, typer.Option(
    "-q", "--quiet", help="Print nothing but warnings and errors (on stderr).")]

SHARED = [  # (name, annotation, default): every rewriting verb takes these, after its own options
    ("output", None, None), ("validate", Validate, True), ("inputs", Inputs, None),
    ("rtol", Rtol, None), ("atol", Atol, None), ("report", Report, None),
    ("in_place", InPlace, False), ("quiet", Quiet, False), ("verbose", Verbose, False),
]  # (output's annotation names the verb's suffix: output_option)


def _dim_sizes(values: Optional[list[str]]) -> Optional[dict[str, int]]:
    if values is None:
        return None
    sizes = {}
    for text in values:
        name, _, size = text.partition("=")
        if not name or not size.strip().isdigit() or int(size) < 1:
            raise typer.BadParameter(f"{text!r}: expected NAME=SIZE, a symbolic dimension name and "
                                     "a positive integer", param_hint="--fix-dim")
        sizes[name] = int(size)
    return sizes


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a whole number") from None


def cli_parameter(option: Any) -> tuple[inspect.Parameter, Any]:
    """The Typer parameter for a declared option (verbs.Option), and how its value becomes the
    option's (an enum's value; NAME=SIZE texts a dict)."""
    kw = inspect.Parameter.KEYWORD_ONLY
    info = dict(help=option.help, metavar=option.metavar)
    if option.choices:
        choices = enum.Enum(f"{option.name.title().replace('_', '')}Choice",
                            {c: c for c in option.choices}, type=str)
        annotation = Annotated[choices, typer.Option(option.cli_flag, **info)]
        default = None if option.default is None else choices(option.default)
        parameter = inspect.Parameter(option.name, kw, annotation=annotation, default=default)
        return parameter, lambda v: None if v is None else v.value
    if option.kind is bool:  # --flag/--no-flag
        annotation = Annotated[bool, typer.Option(
            f"{option.cli_flag}/--no-{option.cli_flag.removeprefix('--')}", help=option.help)]
        parameter = inspect.Parameter(option.name, kw, annotation=annotation,
                                      default=option.default)
        return parameter, lambda v: v
    if option.kind is dict:
        annotation = Annotated[Optional[list[str]], typer.Option(option.cli_flag, **info)]
        return inspect.Parameter(option.name, kw, annotation=annotation, default=None), _dim_sizes
    if option.kind is int:  # (typer 0.29's own message does not name the value)
        info["parser"] = _whole_number
    annotation = Annotated[Optional[option.kind] if option.default is None else option.kind,
                           typer.Option(option.cli_flag, **info)]
    parameter = inspect.Parameter(option.name, kw, annotation=annotation, default=option.default)
    return parameter, lambda v: v
