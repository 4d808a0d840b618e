"""The rewriting verbs' commands, each built from its declaration
(:data:`scatter_rewrite.verbs.VERBS`) with the shared options, and their one body,
:func:`run_verb`: check the options, plan the files, rewrite each model (several in worker
processes), print each outcome, write the report."""

from __future__ import annotations

import contextlib
import inspect
import os
import time
from pathlib import Path
from typing import Any, Optional

import typer

from scatter_rewrite.cli.app import Command, app
from scatter_rewrite.cli.batch import run_parallel
from scatter_rewrite.cli.files import (
    check_report_path, expand_each, plan_outputs, unique, write_report,
)
from scatter_rewrite.cli.messages import (
    error, exit_code, internal_error, setup_logging, warnings_said_with_flags,
)
from scatter_rewrite.cli.options import SHARED, STANDARD, Models, cli_parameter, output_option
from scatter_rewrite.cli.printing import (
    batch_progress, batch_summary, format_outcome, pass_progress, say, warn_not_ready,
)
from scatter_rewrite.cli.signals import Stopped, raise_if_stopped
from scatter_rewrite.cli.streams import (
    refuse_standard_streams, shown, shown_paths, standard_streams,
)
from scatter_rewrite.verbs import VERBS

__all__ = ["run_verb"]


def _register(verb: Any) -> None:
    """The command of a declared verb (verbs.VERBS): MODEL..., its options, the shared ones."""
    kw = inspect.Parameter.KEYWORD_ONLY
    own = [cli_parameter(o) for o in verb.options]
    parameters = ([inspect.Parameter("models", kw, annotation=Models)] + [p for p, _ in own]
                  + [inspect.Parameter(n, kw, annotation=a or output_option(verb.suffix), default=d)
                     for n, a, d in SHARED])
    converters = {p.name: convert for p, convert in own}

    def command(**kwargs: Any) -> None:
        shared = {name: kwargs.pop(name) for name, _, _ in SHARED}
        models = kwargs.pop("models")
        options = {name: converters[name](value) for name, value in kwargs.items()}
        run_verb(verb, options, models, **shared)

    command.__signature__ = inspect.Signature(parameters)
    command.__doc__ = verb.summary
    command.__name__ = verb.name
    app.command(name=verb.command, cls=Command)(command)


def run_verb(declared: Any, options: dict[str, Any], models: list[str], output: Optional[str],
             validate: bool, inputs: Optional[str], report: Optional[str], in_place: bool,
             verbose: bool, rtol: Optional[float] = None, atol: Optional[float] = None,
             quiet: bool = False) -> None:
    """Shared body of every rewriting verb (``declared``: its verbs.Verb, whose options these
    are)."""
    setup_logging(verbose)
    with warnings_said_with_flags(declared.cli_text):
        _run(declared, options, models, output, validate, inputs, report, in_place, verbose, rtol,
             atol, quiet)


def _run(declared: Any, options: dict[str, Any], models: list[str], output: Optional[str],
         validate: bool, inputs: Optional[str], report: Optional[str], in_place: bool,
         verbose: bool, rtol: Optional[float], atol: Optional[float], quiet: bool) -> None:
    try:
        from scatter_rewrite import model_io
        from scatter_rewrite.errors import ScatterRewriteError

        if raise_if_stopped not in model_io.BEFORE_RENAME:
            model_io.BEFORE_RENAME.append(raise_if_stopped)

        refuse_standard_streams(models, output, report, in_place)
        aside = STANDARD in (output, report)  # the summary then goes to stderr
        with standard_streams(models, output) as (models, output, streams):
            outcomes, several = _rewrite_all(declared, options, models, output, validate, inputs,
                                             report, in_place, rtol, atol, quiet, streams, aside)
    except ScatterRewriteError as e:
        error(shown_paths(str(e)), e, verbose)
        raise typer.Exit(exit_code(e)) from None
    except (typer.Exit, typer.BadParameter, Stopped):
        raise
    except Exception as e:  # a bug of ours: say so in one line; -v shows where
        internal_error(e, verbose)
    from scatter_rewrite.pipeline import SUCCEEDED

    failed = [o for o in outcomes if o.status not in SUCCEEDED]
    if several and not quiet:
        say(batch_summary(outcomes), aside)
    if failed:
        for o in failed:
            said = str(o.error)
            said = said if said.startswith(o.input) else f"{o.input}: {said}"
            typer.echo(f"scatter-rewrite: error: {said}", err=True)
        # bad usage for one model of a batch is bad usage, as it is for a single model: the command
        # line needs fixing before any outcome means something
        raise typer.Exit(2 if any(o.bad_usage for o in failed) else 1)


def _rewrite_all(declared: Any, options: dict[str, Any], models: list[str],
                 output: Optional[str], validate: bool, inputs: Optional[str],
                 report: Optional[str], in_place: bool, rtol: Optional[float],
                 atol: Optional[float], quiet: bool, streams: dict[str, str], aside: bool
                 ) -> tuple[list[Any], bool]:
    """Check the options, plan the outputs, rewrite each model, print each outcome and write the
    report; (outcomes, whether several models were given). ``streams``: the temporary files that
    stand for standard input and output (:func:`.streams.standard_streams`)."""
    model_paths = [Path(m) for m in models]
    output_says_folder = output is not None and output.endswith(("/", os.sep))
    several = _several_models(model_paths, output, output_says_folder)
    options = _checked_options(declared, options, in_place, output)
    output_path = Path(output) if output is not None else None
    report_path = Path(report) if report is not None else None
    folder_output = several or output_says_folder
    files, without_models = _planned_files(declared, model_paths, output, output_path,
                                           folder_output, in_place, report_path, streams)
    with _flags_in_errors(declared):
        loaded = _validation_inputs(inputs, rtol, atol)
    kwargs = dict(options=options, output=output_path, output_is_folder=folder_output,
                  in_place=in_place, validate=validate, inputs=loaded, rtol=rtol, atol=atol)
    if len(files) == 1 and not without_models:
        outcomes = [_rewrite_one(declared, files[0], kwargs, report_path)]
    else:
        outcomes = _rewrite_several(declared.name, files, kwargs, quiet, aside)
    from scatter_rewrite.pipeline import UNREADABLE, Outcome

    outcomes += [Outcome(str(folder), status=UNREADABLE, error=str(e), verb=declared.name,
                         options=options) for folder, e in without_models]
    outcomes = [shown(o) for o in outcomes]
    for outcome in outcomes:
        if not quiet:
            say(format_outcome(outcome), aside)
    _warn_what_tensorrt_rejects(declared.name, options, outcomes)
    if report_path is not None:
        write_report(report_path, declared.name, outcomes)
    return outcomes, several


def _several_models(model_paths: list[Path], output: Optional[str],
                    output_says_folder: bool) -> bool:
    """Whether several models are given: several MODEL arguments (or a folder) make -o a folder,
    even when they name one file twice; -o naming one .onnx file is then bad usage."""
    several = len(model_paths) > 1 or any(m.is_dir() for m in model_paths)
    if several and output is not None and output.endswith(".onnx") and not output_says_folder \
            and not Path(output).is_dir():
        raise typer.BadParameter(f"{output} names one model file, and several models are given: "
                                 "name a folder (ending with /) or rewrite them one at a time",
                                 param_hint="-o")
    return several


def _checked_options(declared: Any, options: dict[str, Any], in_place: bool,
                     output: Optional[str]) -> dict[str, Any]:
    """The verb's options bound to their declaration, refused before any work if the verb's passes
    cannot take them (said with the verb's flags), or if -o and --in-place are both given."""
    from scatter_rewrite.errors import OptionError

    options = declared.bind(options, cli=True)
    with _flags_in_errors(declared):
        declared.make_passes(**options)  # option errors surface before any work
    if in_place and output is not None:
        raise OptionError("--in-place and -o/--output exclude each other; pick one")
    return options


def _planned_files(declared: Any, model_paths: list[Path], output: Optional[str],
                   output_path: Optional[Path], folder_output: bool, in_place: bool,
                   report_path: Optional[Path], streams: dict[str, str]
                   ) -> tuple[list[Path], list[tuple[Path, Exception]]]:
    """The model files to rewrite, once their outputs and the report are known not to collide
    with each other or with what the run reads (:func:`.files.plan_outputs`), and the folders
    named that hold none (each an UNREADABLE model of the batch; with no model at all, the run is
    refused)."""
    from scatter_rewrite.errors import OptionError
    from scatter_rewrite.model_io import input_data_files

    files, without_models = expand_each(model_paths, [v.suffix for v in VERBS.values()])
    files = unique(files)
    if not files:
        raise without_models[0][1]
    if output_path is not None and folder_output and output_path.exists() \
            and not output_path.is_dir():
        raise OptionError(f"-o {output}: with several models (or a trailing /) -o must name a "
                          "folder, and that is a file")
    if output in streams and input_data_files(files[0]):
        raise OptionError(f"-o -: {shown_paths(str(files[0]))} has external data, which standard "
                          "output cannot carry with the model: name a file with -o")
    taken = plan_outputs(declared, files, output_path, in_place, folder_output)
    if report_path is not None:
        check_report_path(report_path, taken)
    return files, without_models


def _validation_inputs(inputs: Optional[str], rtol: Optional[float],
                       atol: Optional[float]) -> Optional[dict]:
    """The user's --inputs, loaded, after --rtol/--atol are checked: a bad bound is refused
    before any work. (Validation's modules are imported only then.)"""
    if rtol is None and atol is None and not inputs:
        return None
    from scatter_rewrite.validate import load_inputs, user_tolerance

    user_tolerance(rtol, atol)
    return load_inputs(inputs) if inputs else None


def _rewrite_one(declared: Any, file: Path, kwargs: dict, report_path: Optional[Path]) -> Any:
    """One model, with a spinner on a terminal. If it fails, the report says so (its error is the
    one told, even if the report cannot be written)."""
    from scatter_rewrite.errors import ScatterRewriteError
    from scatter_rewrite.pipeline import rewrite_file

    started = time.perf_counter()
    try:
        with pass_progress(file) as progress, _flags_in_errors(declared):
            return rewrite_file(declared.name, file, progress=progress, **kwargs)
    except ScatterRewriteError as e:
        if report_path is not None:
            from scatter_rewrite.pipeline import Outcome, failed_status

            failed_outcome = Outcome(str(file), passes=getattr(e, "passes", []), error=str(e),
                                     status=failed_status(e),
                                     verb=declared.name, options=kwargs["options"],
                                     seconds=time.perf_counter() - started)
            try:
                write_report(report_path, declared.name, [shown(failed_outcome)])
            except ScatterRewriteError:
                pass  # the model's error is the one to tell
        raise


def _rewrite_several(verb: str, files: list[Path], kwargs: dict, quiet: bool,
                     aside: bool) -> list[Any]:
    """The models in worker processes; stopped by a signal, those finished before it are said
    (they are written)."""
    from scatter_rewrite.pipeline import rewrite_file_reporting

    try:
        return run_parallel(verb, files, kwargs, rewrite_file_reporting,
                            progress=batch_progress(verb, len(files), quiet))
    except Stopped as e:
        for outcome in getattr(e, "finished", []):
            if not quiet:
                say(format_outcome(shown(outcome)), aside)
        raise


def _warn_what_tensorrt_rejects(verb: str, options: dict[str, Any], outcomes: list[Any]) -> None:
    """After tensorrt, or prepare for a TensorRT target (which runs the tensorrt flow): the
    warning of a written model with scatters TensorRT still rejects."""
    if verb == "tensorrt":
        warn_not_ready(outcomes, options["trt_version"])
    elif verb == "prepare":
        from scatter_rewrite.targets import get_target

        target = get_target(options["target"])
        if target.family == "tensorrt":
            warn_not_ready(outcomes, target.name.split("-", 1)[1])


@contextlib.contextmanager
def _flags_in_errors(verb: Any):
    """An error the library raises naming Python parameters (``opset=9``, ``validate=False``),
    said with the flags instead (``--opset 9``, ``--no-validate``: verbs.Verb.cli_message)."""
    from scatter_rewrite.errors import OptionError, ScatterRewriteError

    try:
        yield
    except OptionError as e:
        said = verb.cli_message(e)
        if said == str(e):
            raise
        raise OptionError(said, parameter=e.parameter) from e
    except ScatterRewriteError as e:
        said = verb.cli_message(e)  # (parameters it names, functions it calls)
        if said != str(e):
            e.args = (said,)  # (the same error: its type, cause and report)
        raise


for _verb in VERBS.values():
    _register(_verb)
