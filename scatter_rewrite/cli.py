"""The ``scatter-rewrite`` command: parses, calls the pipeline, prints a short summary.

Every rewriting verb shares one shape, whose options are defined once below:
``scatter-rewrite VERB MODEL... [-o OUT] [--validate/--no-validate] [--inputs X.npz]
[--report R.json] [--in-place] [-q] [-v]``, the verbs and their own options built from their one
declaration (:mod:`scatter_rewrite.verbs`). ``-`` is standard input as MODEL, standard output as
OUT or R.json. Exit 0 on success, 1 for a model that fails (or is blocked, for ``check``), 2 on bad
usage (an unknown option or target, a value out of range or of the wrong type, options that exclude
each other: :class:`~scatter_rewrite.errors.OptionError`), each with one line on stderr (``-v`` adds
the traceback); 128 + N when stopped by signal N. Heavy imports (onnx, onnxruntime) happen inside
the commands so ``--help`` is instant.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import inspect
import json
import logging
import os
import signal
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
import typer.core
import typer.main
import typer.models

from scatter_rewrite.verbs import VERBS

__all__ = [
    "Stopped", "app", "main", "run_verb",
]


class _Command(typer.core.TyperCommand):
    """Usage line as the README writes it: typer 0.28 wraps a required argument's metavar in braces
    (``{MODEL...}``)."""

    def collect_usage_pieces(self, ctx):
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p
                for p in super().collect_usage_pieces(ctx)]


class Stopped(BaseException):
    """SIGINT, SIGTERM or SIGHUP arrived. Raised where the process is, so that every ``finally``
    runs: the staging folder of the model in progress (model_io.staged_save) is removed and nothing
    of that model is written. A BaseException: no ``except Exception`` of ours takes it for a
    failure."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name


_STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                      if hasattr(signal, name))


def _stop_deferred(signum: int) -> bool:
    """Whether a file is being staged or renamed into place, so the stop waits for its end
    (model_io); nothing is when model_io is not even imported yet."""
    model_io = sys.modules.get("scatter_rewrite.model_io")
    return model_io is not None and model_io.stop_deferred(signum)


def _raise_stopped(signum: int, frame: Any) -> None:
    if not _stop_deferred(signum):
        raise Stopped(signum)


def _stop_on_signals() -> None:
    for signum in _STOP_SIGNALS:
        signal.signal(signum, _raise_stopped)


class _App(typer.core.TyperGroup):
    """Bad usage (a missing argument, an unknown option or command, a value of the wrong type) is
    one line on stderr and exit 2, like every other failure, instead of Click's usage block or
    Typer's panel. No arguments at all still prints the help."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except Stopped as e:
            typer.echo(f"scatter-rewrite: error: {_stopped_message(e)}", err=True)
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


def _stopped_message(e: Stopped) -> str:
    """What a stop left: the outputs this process renamed into place before it (a model whose
    summary it cut short), else none of a model in progress (a batch's finished models, in its
    workers, are printed above)."""
    model_io = sys.modules.get("scatter_rewrite.model_io")
    written = [shown_paths(str(p)) for p in getattr(model_io, "WRITTEN_OUTPUTS", []) if p.exists()]
    if written:
        return (f"stopped by {e.name} once {', '.join(written)} was written: it is whole "
                "(validated as asked), though what the run prints and reports after it may be "
                "cut short")
    return (f"stopped by {e.name}: no output of a model in progress is left (models finished "
            "before it are written)")


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


# ---- the shared options, defined once -------------------------------------------------------
# Paths are taken as text: Path("") is "." (an empty $MODEL would rewrite every model below the
# current folder) and Path("out/") drops the slash that says "a folder".
def _nonempty(value):
    values = value if isinstance(value, (list, tuple)) else [value]
    if any(v is not None and not str(v).strip() for v in values):
        raise typer.BadParameter("an empty path")
    return value


_TEXT_TYPE = type(typer.main.get_click_type(annotation=str,
                                            parameter_info=typer.models.ParameterInfo()))


class _PathText(_TEXT_TYPE):
    """A path given as text (see above), with no type in the help's argument column (typer 0.28
    wrote ``<str>`` there)."""

    def get_metavar(self, param, ctx=None) -> str:
        return ""


Models = Annotated[list[str], typer.Argument(
    help="ONNX model files, or folders of them; - reads one model from standard input.",
    show_default=False, callback=_nonempty, metavar="MODEL...", click_type=_PathText())]
STANDARD = "-"  # as MODEL: standard input; as OUT or R.json: standard output


def _output(suffix: str) -> Any:
    return Annotated[Optional[str], typer.Option(
        "-o", "--output", help="Where to write (a folder when several models are given, or when "
        f"it ends with /; - for standard output). Default: beside the input as "
        f"<stem>.{suffix}.onnx.", callback=_nonempty, metavar="OUT")]


Validate = Annotated[bool, typer.Option(
    "--validate/--no-validate",
    help="Prove the rewrite in onnxruntime against the original; write nothing if it differs.")]
Inputs = Annotated[Optional[str], typer.Option(
    "--inputs", help="An .npz of model inputs to validate with, instead of generated ones.",
    callback=_nonempty, metavar="X.npz")]
Rtol = Annotated[Optional[float], typer.Option(
    "--rtol", help="Your own bound for float outputs: |rewritten - original| <= atol + rtol * "
    "|original| (default: exact, and float sums a rewrite reorders judged against a float64 "
    "evaluation).", metavar="R")]
Atol = Annotated[Optional[float], typer.Option(
    "--atol", help="With --rtol (either alone: the other is 0).", metavar="A")]
Report = Annotated[Optional[str], typer.Option(
    "--report", help="Write a JSON report of what was done (- for standard output, the summary "
    "then going to stderr).", callback=_nonempty, metavar="R.json")]
InPlace = Annotated[bool, typer.Option(
    "--in-place", help="Overwrite the input model (and its external data).")]
Verbose = Annotated[bool, typer.Option(
    "-v", "--verbose", help="Log each node rewritten; show tracebacks.")]
CheckVerbose = Annotated[bool, typer.Option(
    "-v", "--verbose", help="Show tracebacks and debug logs.")]
Quiet = Annotated[bool, typer.Option(
    "-q", "--quiet", help="Print nothing but warnings and errors (on stderr).")]


class Fail(Exception):
    """A user-facing failure the CLI has already explained."""


class _LineFormatter(logging.Formatter):
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
    """Each warning once: a library that reads the model twice (onnx_ir's loader warns of an invalid
    input on every read) says it once."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[tuple[str, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.getMessage())
        if key in self._seen:
            return False
        self._seen.add(key)
        return True


def _setup_logging(verbose: bool) -> None:
    if not verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_LineFormatter())
        handler.addFilter(_Once())
        logging.basicConfig(level=logging.WARNING, handlers=[handler])
        return
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("onnx_ir", "onnx", "onnxruntime"):
        logging.getLogger(noisy).setLevel(logging.INFO)


def _error(message: str, exc: BaseException | None, verbose: bool) -> None:
    if verbose and exc is not None:
        traceback.print_exception(exc, file=sys.stderr)
    typer.echo(f"scatter-rewrite: error: {message}", err=True)


def _exit_code(e: BaseException) -> int:
    """2 for bad usage (an option's value, options that exclude each other), 1 otherwise."""
    from scatter_rewrite.errors import OptionError

    return 2 if isinstance(e, OptionError) else 1


def _expand(models: list[Path], suffixes: list[str]) -> list[Path]:
    from scatter_rewrite.errors import ModelLoadError

    files: list[Path] = []
    for path in models:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.onnx")
                           if not any(p.name.endswith(f".{s}.onnx") for s in suffixes))
            if not found:
                raise ModelLoadError(f"{path}: the folder holds no .onnx model")
            files.extend(found)
        else:
            files.append(path)  # a missing file is reported by the loader, with the others going on
    return files


def _format(outcome: Any) -> str:
    from scatter_rewrite.pipeline import WRITTEN

    lines = [f"{outcome.input} -> {outcome.output}" if outcome.output else f"{outcome.input}"]
    for p in outcome.passes:
        if len(outcome.passes) > 1 and not (p["rewritten"] or p["skipped"] or p["notes"]):
            continue  # a step of a composite verb (tensorrt) with nothing to do: in --report
        lines.append(f"  {p['pass']}: {len(p['rewritten'])} rewritten, {len(p['skipped'])} left "
                     "alone")
        lines += [f"    rewrote {n['node']}: {n['detail']}" for n in p["rewritten"][:20]]
        if len(p["rewritten"]) > 20:
            lines.append(f"    ... and {len(p['rewritten']) - 20} more (see --report)")
        lines += [f"    left alone {n['node']}: {n['detail']}" for n in p["skipped"]]
        lines += [f"    {note}" for note in p["notes"]]
    v = outcome.validation
    if v:
        diff = f", max |difference| {v['max_abs_diff']:.3g}" if "tolerance" in v else ""
        tol = f", {v['tolerance']}" if "tolerance" in v else ""
        lines.append(f"  validation: {v['checked_against']}{tol}{diff}")
        if v.get("cross_check"):
            lines.append(f"    {v['cross_check']}")
    elif outcome.status == WRITTEN:
        lines.append("  validation: skipped (--no-validate)")
    if outcome.status == "UNCHANGED":
        lines.append("  nothing rewritten: the output is a copy of the input")
    if outcome.error:
        lines.append(f"  error: {outcome.error}")
    lines.append(f"{_status_said(outcome)}, {outcome.seconds:.2f} s"
                 if v and v.get("proven_in") and outcome.status in ("PASSED", "WRITTEN")
                 else f"{outcome.status} in {outcome.seconds:.2f} s")
    return "\n".join(lines)


def _status_said(outcome: Any) -> str:
    """The status of a validated model with the engine that proved it: ``PASSED in onnxruntime``,
    or WRITTEN saying what stood in for the runtime that cannot run here (the TensorRT plugin
    form)."""
    v = outcome.validation
    if v.get("stand_in"):
        return f"WRITTEN, checked in {v['proven_in']} ({v['stand_in']})"
    return f"{outcome.status} in {v['proven_in']}"


def _warn_not_ready(outcomes: list[Any], trt_version: str) -> None:
    """One stderr line per written model in which the tensorrt pass left scatters alone: the model
    is valid and equal to the input, but TensorRT rejects those nodes or computes them wrong (8.6
    ignores reductions), which PASSED alone would hide. The exit stays 0: the rewrite succeeded."""
    from scatter_rewrite.pipeline import SUCCEEDED

    for o in outcomes:
        written = o.status in SUCCEEDED
        left = sum(len(p["skipped"]) for p in o.passes if p["pass"] == "tensorrt") if written else 0
        if left:
            typer.echo(f"scatter-rewrite: warning: {left} scatter node(s) in {o.output} left that "
                       f"TensorRT {trt_version} rejects or computes wrong (reasons above; "
                       f"scatter-rewrite check {o.output} --target tensorrt-{trt_version})",
                       err=True)


def _write_report(path: Path, verb: str, outcomes: list[Any]) -> None:
    """Write the JSON report atomically (a temporary file beside it, renamed; an earlier report's
    permissions kept), or on standard output for ``-``; WriteError if that fails, with no
    temporary file left."""
    from scatter_rewrite.errors import WriteError
    from scatter_rewrite.model_io import replace_file
    from scatter_rewrite.verbs import VERBS as DECLARED

    verb = DECLARED[verb].command if verb in DECLARED else verb
    text = json.dumps({"verb": verb, "models": [o.to_dict() for o in outcomes]}, indent=2,
                      default=str)
    if str(path) == STANDARD:
        typer.echo(text)
        return
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        replace_file(tmp, path)
    except OSError as e:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise WriteError(f"--report {path}: could not write it ({e.strerror or e})") from e


def _check_report_path(report: Path, taken: dict[str, str]) -> None:
    """Before any work: --report names a file that can be written and that is not one of the run's
    models (``taken``: real path -> what it is) nor a file other than an earlier report."""
    from scatter_rewrite.errors import OptionError, WriteError

    if str(report) == STANDARD:
        return
    real = os.path.realpath(report)
    if real in taken:
        raise OptionError(f"--report {report} is {taken[real]}; name another file for the report")
    if report.is_dir():
        raise OptionError(f"--report {report} is a folder; name a .json file")
    if report.exists():
        try:
            with open(report, "rb") as f:
                head = f.read(64).lstrip()
        except OSError as e:
            raise OptionError(f"--report {report}: cannot open it ({e.strerror or e})") from e
        if head and not head.startswith(b"{"):
            raise OptionError(f"--report {report} exists and is not a JSON report; it would be "
                              "overwritten: name another file")
    folder = Path(os.path.abspath(report)).parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise WriteError(f"--report {report}: cannot write in {folder}")


def _plan_outputs(verb: Any, files: list[Path], output: Optional[Path], in_place: bool,
                  output_is_folder: bool) -> dict[str, str]:
    """Before any work: no two models write the same file, and none writes over a file another one
    reads, model or external data (two models sharing a data file and rewritten in place would each
    replace it with their own tensors). A model writing over its own input is the pipeline's to
    judge (--in-place does so; otherwise that model alone is refused), as is one it cannot resolve
    or read. Returns real path -> what it is (inputs, outputs and their data files), for the
    --report check."""
    from scatter_rewrite.errors import OptionError, ScatterRewriteError, WriteError
    from scatter_rewrite.model_io import input_data_files, unwritable_folder
    from scatter_rewrite.pipeline import output_data_name, resolve_output

    # real path -> (model reading it, what it is to that model)
    reads: dict[str, list[tuple[Path, str]]] = {}
    input_data: dict[Path, list[str]] = {}
    for f in files:
        try:
            # (from the file's bytes: only the rewrite parses the model)
            input_data[f] = input_data_files(f)
        except ScatterRewriteError:
            input_data[f] = []  # reported for that model alone, when it is loaded
        read = [(f, f"the input model {f}")] + [(f.parent / d, f"the external data file of {f}")
                                                for d in input_data[f]]
        for path, what in read:
            reads.setdefault(os.path.realpath(path), []).append((f, what))
    # In place, the way out is a data file of its own for each result; otherwise another name or
    # folder.
    hint = ("rewrite them without --in-place (each result then gets a data file of its own)"
            if in_place
            else "move one of them or write into another folder")
    # real path -> (model, the path it writes, what it is)
    writers: dict[str, tuple[Path, Path, str]] = {}
    for f in files:
        try:
            destination = resolve_output(f, verb, output, in_place, output_is_folder)
            data = destination.parent / output_data_name(f, destination, input_data[f], in_place)
        except ScatterRewriteError:
            continue  # reported for that model alone, the others going on
        blocked = unwritable_folder(destination)
        if blocked is not None:
            why = (f"no permission to write in {blocked}" if blocked.is_dir()
                   else f"{blocked} is not a folder")
            raise WriteError(f"cannot write {destination}: {why}; write the output elsewhere (-o)")
        # (The data file is written only when the result has external data; planned as if it had.)
        for target, what in ((destination, "the output"),
                             (data, "the external data file of the output")):
            real = os.path.realpath(target)
            if real not in writers:
                writers[real] = (f, target, what)
                continue
            other, _, other_what = writers[real]
            if what == other_what == "the output":
                raise OptionError(f"{other} and {f} would both be written to {destination}; "
                                  "rewrite them in separate runs or into different folders")
            if what != other_what:
                raise OptionError(f"{other} and {f} would both write {target} ({other_what} for "
                                  f"{other}, {what} "
                                  f"for {f}); {hint}")
            readers = {g for g, _ in reads.get(real, [])}
            shared = ", the data file they share" if {other, f} <= readers else ""
            raise OptionError(f"{other} and {f} would both write their external data to "
                              f"{target}{shared}; {hint}")
    taken = {real: readers[0][1] for real, readers in reads.items()}
    for real, (f, target, what) in writers.items():
        # (its own input: --in-place replaces it)
        others = [w for g, w in reads.get(real, []) if g != f]
        if others:
            raise OptionError(f"{what} for {f}, {target}, is {' and '.join(others)}; {hint}")
        taken.setdefault(real, f"{what} for {f}")
    return taken


def _unique(files: list[Path]) -> list[Path]:
    """The files, each once (a model named twice, or through two folders, is rewritten once)."""
    seen: set[str] = set()
    unique = []
    for f in files:
        real = os.path.realpath(f)
        if real not in seen:
            seen.add(real)
            unique.append(f)
    return unique


def run_verb(declared: Any, options: dict[str, Any], models: list[str], output: Optional[str],
             validate: bool, inputs: Optional[str], report: Optional[str], in_place: bool,
             verbose: bool, rtol: Optional[float] = None, atol: Optional[float] = None,
             quiet: bool = False) -> None:
    """Shared body of every rewriting verb (``declared``: its verbs.Verb, whose options these
    are)."""
    verb = declared.name
    _setup_logging(verbose)
    try:
        from scatter_rewrite.errors import ScatterRewriteError

        _refuse_standard_streams(models, output, report, in_place)
        aside = STANDARD in (output, report)  # the summary then goes to stderr
        with _standard_streams(models, output) as (models, output, shown):
            outcomes, several = _rewrite_all(declared, options, models, output, validate, inputs,
                                             report, in_place, verbose, rtol, atol,
                                             quiet, shown, aside)
    except ScatterRewriteError as e:
        _error(shown_paths(str(e)), e, verbose)
        raise typer.Exit(_exit_code(e)) from None
    except (typer.Exit, typer.BadParameter, Stopped):
        raise
    except Exception as e:  # a bug of ours: say so in one line; -v shows where
        _internal_error(e, verbose)
    from scatter_rewrite.pipeline import PASSED, SUCCEEDED, UNCHANGED, WRITTEN

    failed = [o for o in outcomes if o.status not in SUCCEEDED]
    if several and not quiet:
        # (PASSED, or WRITTEN under --no-validate; both if a batch ever mixes them)
        counts = {s: sum(o.status == s for o in outcomes) for s in (PASSED, WRITTEN)}
        counted = [f"{n} of {len(outcomes)} model(s) {s}" for s, n in counts.items()
                   if n or (s == PASSED and not counts[WRITTEN])]
        unchanged = [o.input for o in outcomes if o.status == UNCHANGED]
        said = (f", {len(unchanged)} unchanged (nothing to rewrite: {', '.join(unchanged)})"
                if unchanged else "")
        _say(", ".join(counted) + said, aside)
    if failed:
        for o in failed:
            error = str(o.error)
            said = error if error.startswith(o.input) else f"{o.input}: {error}"
            typer.echo(f"scatter-rewrite: error: {said}", err=True)
        # bad usage for one model of a batch is bad usage, as it is for a single model: the command
        # line needs fixing before any outcome means something
        raise typer.Exit(2 if any(o.bad_usage for o in failed) else 1)


def _say(text: str, aside: bool) -> None:
    """A line of the summary: on stdout, unless a model or the report goes there (``aside``)."""
    typer.echo(text, err=aside)


def _refuse_standard_streams(models: list[str], output: Optional[str], report: Optional[str],
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


# The temporary files that stand for standard input and output while a run reads or writes them
# (file -> the name to show), for messages and reports.
_SHOWN: dict[str, str] = {}


def shown_paths(text: str) -> str:
    """``text`` with the temporary files of standard input and output named as the user named
    them (``-``)."""
    for path, name in _SHOWN.items():
        text = text.replace(path, name)
    return text


@contextlib.contextmanager
def _standard_streams(models: list[str], output: Optional[str]):
    """Yields (models, output, shown) with ``-`` replaced by temporary files: the model read from
    standard input is saved into one, and the model written to standard output is written into
    one, then copied there (the model only: a result with external data is refused)."""
    if STANDARD not in models and output != STANDARD:
        yield models, output, {}
        return
    import shutil
    import tempfile

    from scatter_rewrite.errors import ModelLoadError, OptionError

    _SHOWN.clear()
    with tempfile.TemporaryDirectory(prefix="scatter-rewrite-") as tmp:
        if STANDARD in models:
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
            models = [str(source)]
        if output == STANDARD:
            (Path(tmp) / "out").mkdir()
            output = str(Path(tmp, "out", "stdout.onnx"))
            _SHOWN[output] = "-"
        yield models, output, _SHOWN
        if output in _SHOWN and Path(output).exists():
            written = sorted(p.name for p in Path(output).parent.iterdir())
            if written != [Path(output).name]:
                raise OptionError("-o -: the result has external data (over 2 GiB), which "
                                  "standard output cannot carry with the model: name a file "
                                  "with -o")
            sys.stdout.flush()
            out = getattr(sys.stdout, "buffer", sys.stdout)
            with open(output, "rb") as f:
                shutil.copyfileobj(f, out)
            out.flush()


def _rewrite_all(declared: Any, options: dict[str, Any], models: list[str],
                 output: Optional[str], validate: bool, inputs: Optional[str],
                 report: Optional[str], in_place: bool, verbose: bool, rtol: Optional[float],
                 atol: Optional[float], quiet: bool, shown: dict[str, str], aside: bool
                 ) -> tuple[list[Any], bool]:
    """Check the options, plan the outputs, rewrite each model, print each outcome and write the
    report; (outcomes, whether several models were given)."""
    verb = declared.name
    model_paths = [Path(m) for m in models]
    output_says_folder = output is not None and output.endswith(("/", os.sep))
    # Several MODEL arguments (or a folder) make -o a folder, even when they name one file twice.
    several = len(model_paths) > 1 or any(m.is_dir() for m in model_paths)
    if several and output is not None and output.endswith(".onnx") and not output_says_folder \
            and not Path(output).is_dir():
        raise typer.BadParameter(f"{output} names one model file, and several models are given: "
                                 "name a folder (ending with /) or rewrite them one at a time",
                                 param_hint="-o")
    from scatter_rewrite.errors import OptionError, ScatterRewriteError
    from scatter_rewrite.model_io import input_data_files
    from scatter_rewrite.pipeline import VERBS, rewrite_file, rewrite_file_reporting

    options = declared.bind(options, cli=True)
    with _flags_in_errors(declared):
        VERBS[verb].make_passes(**options)  # option errors surface before any work
    if in_place and output is not None:
        raise OptionError("--in-place and -o/--output exclude each other; pick one")
    output_path = Path(output) if output is not None else None
    report_path = Path(report) if report is not None else None
    files = _unique(_expand(model_paths, [v.suffix for v in VERBS.values()]))
    if output_path is not None and (several or output_says_folder) and output_path.exists() \
            and not output_path.is_dir():
        raise OptionError(f"-o {output}: with several models (or a trailing /) -o must name a "
                          "folder, and that is a file")
    if output in shown and input_data_files(files[0]):
        raise OptionError(f"-o -: {shown_paths(str(files[0]))} has external data, which standard "
                          "output cannot carry with the model: name a file with -o")
    folder_output = several or output_says_folder
    taken = _plan_outputs(VERBS[verb], files, output_path, in_place, folder_output)
    if report_path is not None:
        _check_report_path(report_path, taken)
    if rtol is not None or atol is not None or inputs:  # (validation's imports only then)
        from scatter_rewrite.validate import load_inputs, user_tolerance

        user_tolerance(rtol, atol)  # a bad bound is refused before any work
    kwargs = dict(options=options, output=output_path, output_is_folder=folder_output,
                  in_place=in_place, validate=validate,
                  inputs=load_inputs(inputs) if inputs else None, rtol=rtol, atol=atol)
    if len(files) == 1:
        started = time.perf_counter()
        try:
            with _pass_progress(files[0]) as progress, _flags_in_errors(declared):
                outcomes = [rewrite_file(verb, files[0], progress=progress, **kwargs)]
        except ScatterRewriteError as e:
            if report_path is not None:
                from scatter_rewrite.pipeline import Outcome

                failed_outcome = Outcome(str(files[0]), passes=getattr(e, "passes", []),
                                         error=str(e), verb=verb, options=options,
                                         seconds=time.perf_counter() - started)
                try:
                    _write_report(report_path, verb, [_shown(failed_outcome)])
                except ScatterRewriteError:
                    pass  # the model's error is the one to tell
            raise
    else:
        try:
            outcomes = _run_parallel(verb, files, kwargs, rewrite_file_reporting)
        except Stopped as e:  # the models finished before it: written, so said
            for outcome in getattr(e, "finished", []):
                if not quiet:
                    _say(_format(outcome), aside)
            raise
    outcomes = [_shown(o) for o in outcomes]
    for outcome in outcomes:
        if not quiet:
            _say(_format(outcome), aside)
    if verb == "tensorrt":
        _warn_not_ready(outcomes, options["trt_version"])
    elif verb == "prepare":  # (prepare --target tensorrt-X runs the tensorrt flow: the same warning)
        from scatter_rewrite.targets import get_target

        target = get_target(options["target"])
        if target.family == "tensorrt":
            _warn_not_ready(outcomes, target.name.split("-", 1)[1])
    if report_path is not None:
        _write_report(report_path, verb, outcomes)
    return outcomes, several


def _shown(outcome: Any) -> Any:
    """The outcome with standard input and output named ``-`` (see _standard_streams)."""
    if _SHOWN:
        outcome.input = shown_paths(outcome.input)
        outcome.output = outcome.output and shown_paths(outcome.output)
        outcome.error = outcome.error and shown_paths(outcome.error)
    return outcome


@contextlib.contextmanager
def _flags_in_errors(verb: Any):
    """An OptionError the library raises naming a Python parameter (``opset=9``), said with the
    verb's flag instead (``--opset 9``)."""
    from scatter_rewrite.errors import OptionError

    try:
        yield
    except OptionError as e:
        if e.parameter is None:
            raise
        raise OptionError(verb.cli_message(e), parameter=e.parameter) from e


@contextlib.contextmanager
def _pass_progress(model: Path):
    """On a terminal (stderr), a spinner naming the pass running on ``model`` (a long model would
    otherwise print nothing for seconds); elsewhere nothing. Yields the pipeline's progress
    callback."""
    # (rich's console is imported only where it may be a terminal: 30-70 ms)
    console = _stderr_console() if _may_be_terminal(sys.stderr) else None
    if console is None or not console.is_terminal:
        yield None
        return
    with console.status(f"{model}: loading", spinner="line") as status:
        yield lambda step: status.update(f"{model}: {step}")


def _internal_error(e: BaseException, verbose: bool):
    _error(f"internal error ({type(e).__name__}: {e}); rerun with -v and report it", e, verbose)
    raise typer.Exit(1) from None


def _run_parallel(verb: str, files: list[Path], kwargs: dict, worker) -> list[Any]:
    """The models in worker processes. Stopped by a signal, the models not started are cancelled and
    the workers stopped too (each removing its staging folder), before the signal goes on."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from rich.progress import Progress

    outcomes: dict[Path, Any] = {}
    pool = ProcessPoolExecutor(max_workers=min(len(files), os.cpu_count() or 1),
                               initializer=_worker_signals)
    try:
        with Progress(transient=True, console=_stderr_console()) as progress:
            task = progress.add_task(f"{verb}", total=len(files))
            futures = {pool.submit(_in_worker, worker, verb, str(f), kwargs): f for f in files}
            for future in as_completed(futures):
                outcomes[futures[future]] = future.result()
                progress.advance(task)
    except BaseException as e:
        pool.shutdown(wait=False, cancel_futures=True)
        for child in multiprocessing.active_children():
            child.terminate()  # (SIGTERM: the worker's handler stops its model cleanly)
        pool.shutdown(wait=True)
        if isinstance(e, Stopped):  # the models finished before it, in the order given
            e.finished = [outcomes[f] for f in files if f in outcomes]
        raise
    pool.shutdown()
    return [outcomes[f] for f in files]


_BUSY = False  # in a worker process: whether a model is in progress


def _worker_signals() -> None:
    """In a worker: a signal stops the model in progress cleanly (see Stopped); an idle worker
    exits."""

    def stop(signum: int, frame: Any) -> None:
        if not _BUSY:
            os._exit(128 + signum)
        if not _stop_deferred(signum):
            raise Stopped(signum)

    for signum in _STOP_SIGNALS:
        signal.signal(signum, stop)


def _in_worker(worker, verb: str, source: str, kwargs: dict) -> Any:
    global _BUSY
    _BUSY = True
    try:
        return worker(verb, source, kwargs)
    except Stopped as e:
        # Its model's staging folder is removed (the finally blocks ran): the worker ends here,
        # not back in the pool's loop, where it would wait for work that a stopping pool whose
        # other worker already exited never sends, and the parent would wait for it at exit.
        os._exit(128 + e.signum)
    finally:
        _BUSY = False


def _may_be_terminal(stream: Any) -> bool:
    """False where rich would plainly say the stream is no terminal (a pipe or a file, and no
    FORCE_COLOR or TTY_INTERACTIVE saying otherwise), without importing rich."""
    isatty = getattr(stream, "isatty", None)
    return bool((isatty is not None and isatty()) or os.environ.get("FORCE_COLOR")
                or os.environ.get("TTY_INTERACTIVE"))


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)


# ---- the verbs --------------------------------------------------------------------------------

_SHARED = [  # (name, annotation, default): every rewriting verb takes these, after its own options
    ("output", None, None), ("validate", Validate, True), ("inputs", Inputs, None),
    ("rtol", Rtol, None), ("atol", Atol, None), ("report", Report, None),
    ("in_place", InPlace, False), ("quiet", Quiet, False), ("verbose", Verbose, False),
]  # (output's annotation names the verb's suffix: _output)


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


def _cli_parameter(option: Any) -> tuple[inspect.Parameter, Any]:
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
    if option.kind is dict:
        annotation = Annotated[Optional[list[str]], typer.Option(option.cli_flag, **info)]
        return inspect.Parameter(option.name, kw, annotation=annotation, default=None), _dim_sizes
    annotation = Annotated[Optional[option.kind] if option.default is None else option.kind,
                           typer.Option(option.cli_flag, **info)]
    parameter = inspect.Parameter(option.name, kw, annotation=annotation, default=option.default)
    return parameter, lambda v: v


def _register(verb: Any) -> None:
    """The command of a declared verb (verbs.VERBS): MODEL..., its options, the shared ones."""
    kw = inspect.Parameter.KEYWORD_ONLY
    own = [_cli_parameter(o) for o in verb.options]
    parameters = ([inspect.Parameter("models", kw, annotation=Models)] + [p for p, _ in own]
                  + [inspect.Parameter(n, kw, annotation=a or _output(verb.suffix), default=d)
                     for n, a, d in _SHARED])
    converters = {p.name: convert for p, convert in own}

    def command(**kwargs: Any) -> None:
        shared = {name: kwargs.pop(name) for name, _, _ in _SHARED}
        models = kwargs.pop("models")
        options = {name: converters[name](value) for name, value in kwargs.items()}
        run_verb(verb, options, models, **shared)

    command.__signature__ = inspect.Signature(parameters)
    command.__doc__ = verb.summary
    command.__name__ = verb.name
    app.command(name=verb.command, cls=_Command)(command)


for _verb in VERBS.values():
    _register(_verb)


@app.command(name="check", cls=_Command)
def check(
    context: typer.Context,
    models: Models,
    target: Annotated[str, typer.Option(
        "--target", metavar="TARGET", help="tensorrt-8.6, tensorrt-10, tensorrt-11, opset-N (N "
        "from 9 to the highest the installed onnx defines), no-scatter, qnn, rknn, ort-cpu, ... "
        "(docs/targets.md).")] = "tensorrt-10",
    as_json: Annotated[bool, typer.Option("--json",
                                          help="Print the reports as JSON (for CI).")] = False,
    quiet: Quiet = False,
    verbose: CheckVerbose = False,
) -> None:
    """Check models (onnx.checker), each scatter node's readiness for a target and, by a dry run of
    the verb that reaches it (lower, tensorrt or prepare), every node's; 0 if READY, 1 otherwise."""
    _setup_logging(verbose)
    try:
        from scatter_rewrite.errors import OptionError, ScatterRewriteError
        from scatter_rewrite.readiness import check_report, parse_target

        parse_target(target)
        if STANDARD in models and len(models) > 1:
            raise OptionError("- (standard input) is one model: give it alone, or name files")
        with _standard_streams(models, None) as (models, _, _):
            # (every model of a folder, the verbs' outputs too: they are what one checks)
            files = _unique(_expand([Path(m) for m in models], []))
            reports = [check_report(f, target, name=shown_paths(str(f))) for f in files]
    except ScatterRewriteError as e:
        _error(str(e), e, verbose)
        raise typer.Exit(_exit_code(e)) from None
    except Exception as e:  # a bug of ours: one line; -v shows where
        _internal_error(e, verbose)
    if as_json:
        from scatter_rewrite.readiness import json_document

        typer.echo(json.dumps(json_document(reports, target), indent=2))
    elif not quiet:
        console = _check_console(context)
        for r in reports:
            _print_report(r, console)
    from scatter_rewrite.export_patterns import ACCUMULATE_NOTE_START
    from scatter_rewrite.passes.repair import REPAIR_NOTE

    for r in reports:
        suspects = sum(any(n.startswith(ACCUMULATE_NOTE_START) for n in f.notes)
                       for f in r.findings)
        if suspects:  # not a blocker (the model may mean it): what the export itself gets wrong
            named = f"{r.model}: " if len(reports) > 1 else ""
            typer.echo(f"scatter-rewrite: warning: {named}{suspects} scatter node(s) write "
                       "into zeros and are then added: the TorchScript export of an accumulating "
                       "op, wrong with repeated indices (see the notes)", err=True)
        repairable = sum(REPAIR_NOTE in f.notes for f in r.findings)
        if repairable:  # the nodes repair would change, and the command that does it
            typer.echo(f"scatter-rewrite: fix: scatter-rewrite repair {r.model} "
                       f"({repairable} node(s))", err=True)
        for note in r.notes:
            typer.echo(f"scatter-rewrite: note: {r.model}: {note}", err=True)
    not_ready = [r for r in reports if r.blocked]
    for r in not_ready:  # exit 1 says why in one line, like every other exit 1
        why = _not_ready_reason(r)
        _error(f"{r.model}: {why}" if len(reports) > 1 or r.invalid else why, None, verbose)
    if not_ready:
        raise typer.Exit(1)


def _check_console(context: typer.Context):
    """The console check prints to: as wide as the command's context says when it says
    (``CliRunner.invoke(..., terminal_width=80)``), else the terminal's (or COLUMNS)."""
    from rich.console import Console

    return Console(width=context.terminal_width)


def _not_ready_reason(report: Any) -> str:
    """Why a report is not READY, in one line."""
    from scatter_rewrite.readiness import FIXABLE, INVALID

    if report.status == INVALID:
        return report.invalid + (f"; {report.fix} makes it valid and ready" if report.fix else "")
    if report.status == FIXABLE:  # (what blocks it: stdout)
        return f"not ready for {report.target}; fix: {report.fix}"
    if report.dry_run is not None:
        return (f"blocked on {report.target}: {report.dry_run.command} refuses it: "
                f"{report.dry_run.error}")
    blocked = sum(f.blocked for f in report.findings)
    why = "; ".join([f"{blocked} of {len(report.findings)} node(s) blocked"] * bool(blocked)
                    + report.blockers)
    return f"blocked on {report.target} ({why}); no scatter-rewrite command reaches it"


def _print_report(report: Any, console: Any) -> None:
    from scatter_rewrite.graph import SCATTER_OPS
    from scatter_rewrite.readiness import FIXABLE, INVALID

    def say(text: str, whole: bool = False) -> None:  # whole: a command, copyable, never wrapped
        console.print(text, highlight=False, markup=False, soft_wrap=whole)

    if report.status == INVALID:  # (no rows: nothing of it is ready; the checker's reason on stderr)
        fix = f": {report.fix} makes it valid and ready" if report.fix else ""
        say(f"{report.model}: INVALID for {report.target} (fails onnx.checker){fix}", whole=True)
        return
    # (the model's path whole on its own line, as a table title would wrap it)
    say(f"{report.model}: readiness for {report.target}", whole=True)
    if report.findings:
        _print_findings(report.findings, console)
    else:
        say("no scatter node")
    for blocker in report.blockers:
        say(blocker)
    run = report.dry_run
    if run is not None and run.succeeded and run.would:
        say(f"a dry run of {run.command} would:")
        for line in run.would[:10]:
            say(f"  {line}")
        if len(run.would) > 10:
            say(f"  ... and {len(run.would) - 10} more (see --json)")
    elif run is not None and not run.succeeded and not any(run.command in b for f in report.findings
                                     for b in f.blockers):
        say(f"a dry run of {run.command} fails: {run.error}")  # (no node of the table says it)
    fixes: dict[str, int] = {}  # each fix command once, whole: copyable from a CI log
    for f in report.findings:
        if f.blocked and f.fix:
            fixes[f.fix] = fixes.get(f.fix, 0) + 1
    for fix, count in fixes.items():
        say(f"fix: {fix} ({count} node(s))", whole=True)
    if report.status == FIXABLE and (report.blockers or not fixes) and report.fix not in fixes:
        say(f"fix: {report.fix}", whole=True)  # (what the nodes' fixes do not cover: the opset)
    scatters = sum(f.op.split("::")[-1] in SCATTER_OPS for f in report.findings)
    blocked = sum(f.blocked for f in report.findings)
    # (the verdict, whole on one line: what a CI log is searched for)
    say(f"{report.model}: {report.status} for {report.target} ({scatters} scatter node(s), "
        f"{blocked} node(s) blocked as it is)", whole=True)


def _print_findings(findings: list, console: Any) -> None:
    from rich import box
    from rich.table import Table

    # Plain ASCII in a pipe or a CI log, where the box-drawing characters are three bytes each and
    # not every viewer draws them. Three columns, so that at 80 characters each is wider than its
    # longest word (a word is folded only when it is longer than its column can ever be).
    table = Table(show_lines=True, box=box.HEAVY_HEAD if console.is_terminal else box.ASCII)
    table.add_column("node", overflow="fold")
    table.add_column("blocks on target", overflow="fold")
    table.add_column("fix", overflow="fold")
    for f in findings:
        kinds = [_reduction_cell(f)] * (f.op.split("::")[-1] in ("ScatterElements", "ScatterND"))
        kinds += [f"data {f.data_type or '?'}"] + [f"indices {f.indices_type}"] * bool(f.indices_type)
        table.add_row(f"{f.node}\n{', '.join(kinds)}",
                      "\n".join(f.blockers + [f"note: {n}" for n in f.notes]) or "ready",
                      f.fix or ("-" if not f.blocked else "none known"))
    console.print(table)


def _reduction_cell(f) -> str:
    """"none" whether written or defaulted ("written" matters: TensorRT 10.0-10.8 rejects it on
    ScatterND); "-" for ops without a reduction (Scatter, TensorScatter)."""
    if f.op not in ("ScatterElements", "ScatterND"):
        return "-"
    return "none (written)" if f.reduction == "none" else f.reduction or "none"


def _stopped_after_the_run(signum: int, frame: Any) -> None:
    """A stop signal once the run is over (its outputs written, its lines printed), while the
    process exits: said, and the signal's exit status."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    os.write(2, f"scatter-rewrite: error: stopped by {signal.Signals(signum).name} after the run "
                "ended: what it printed above stands\n".encode())
    os._exit(128 + signum)


# Loaded on first use in the command's process: onnx_ir imports sympy, and its _symbolic_shapes
# reads sympy's functions at import, for symbolic shape arithmetic that a rewrite rarely does;
# otherwise 0.2 s and ~30 MiB of every run (benchmarks/RESULTS-fold.md).
_DEFERRED = ("sympy", "onnx_ir._symbolic_shapes")


class _OnFirstUse(types.ModuleType):
    """Stands in sys.modules for a module not loaded yet: ``import`` finds it (its ``__spec__`` is
    the real one's), and the first attribute it lacks loads the real module, which takes its
    place in sys.modules and lends this one its namespace. (importlib.util.LazyLoader does not
    do: Python 3.11's import statement reads ``__spec__`` of a module already in sys.modules, which
    loads a LazyLoader's module at once.)"""

    def __getattr__(self, attr: str) -> Any:
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        real = importlib.import_module(name)
        vars(self).update({k: v for k, v in vars(real).items() if k != "__spec__"})
        return getattr(real, attr)


def _defer_imports() -> None:
    """Each of _DEFERRED (a top-level module, or a top-level package's submodule) replaced by an
    _OnFirstUse until it is used. Only the command does this, never the library, which leaves a
    user's process as it is."""
    import importlib.machinery
    import importlib.util

    for name in _DEFERRED:
        if name in sys.modules:
            continue
        parent = name.rpartition(".")[0]
        if parent:  # (found without importing the package: find_spec of a top-level name)
            package = importlib.util.find_spec(parent)
            if package is None or not package.submodule_search_locations:
                continue
            spec = importlib.machinery.PathFinder.find_spec(name,
                                                            package.submodule_search_locations)
        else:
            spec = importlib.util.find_spec(name)
        if spec is None:
            continue
        stand_in = _OnFirstUse(name)
        stand_in.__spec__ = spec
        sys.modules[name] = stand_in


def main() -> None:
    _stop_on_signals()
    _defer_imports()
    try:
        # (also under python -m / -c: the name the messages and help use)
        app(prog_name="scatter-rewrite")
    finally:
        for signum in _STOP_SIGNALS:
            signal.signal(signum, _stopped_after_the_run)


if __name__ == "__main__":
    main()
