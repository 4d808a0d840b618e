"""The ``scatter-rewrite`` command: parses, calls the pipeline, prints a short summary.

Every rewriting verb shares one shape, whose options are defined once below:
``scatter-rewrite VERB MODEL... [-o OUT] [--validate/--no-validate] [--inputs X.npz]
[--report R.json] [--in-place] [-v]``. Exit 0 on success, 1 on a user error or failed validation
(one line on stderr; ``-v`` adds the traceback), 2 on bad usage. Heavy imports (onnx, onnxruntime)
happen inside the commands so ``--help`` is instant.
"""

from __future__ import annotations

import enum
import functools
import inspect
import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

app = typer.Typer(
    name="scatter-rewrite",
    help="Rewrite ONNX scatter operators: upgrade deprecated Scatter, fold constant scatters, "
    "lower reductions for older opsets, prepare for TensorRT. Every rewrite is validated in onnxruntime.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Rewrite ONNX scatter operators; see each command's --help."""


# ---- the shared options, defined once -------------------------------------------------------
Models = Annotated[list[Path], typer.Argument(help="ONNX model files, or folders of them.", show_default=False)]
Output = Annotated[Optional[Path], typer.Option(
    "-o", "--output", help="Where to write (a folder when several models are given). "
    "Default: beside the input as <stem>.<verb>.onnx.")]
Validate = Annotated[bool, typer.Option(
    "--validate/--no-validate", help="Prove the rewrite in onnxruntime against the original; write nothing if it differs.")]
Inputs = Annotated[Optional[Path], typer.Option(
    "--inputs", help="An .npz of model inputs to validate with, instead of generated ones.")]
Report = Annotated[Optional[Path], typer.Option("--report", help="Write a JSON report of what was done.")]
InPlace = Annotated[bool, typer.Option("--in-place", help="Overwrite the input model (and its external data).")]
Verbose = Annotated[bool, typer.Option("-v", "--verbose", help="Log each node rewritten; show tracebacks.")]


class Fail(Exception):
    """A user-facing failure the CLI has already explained."""


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    if verbose:
        for noisy in ("onnx_ir", "onnx", "onnxruntime"):
            logging.getLogger(noisy).setLevel(logging.INFO)


def _error(message: str, exc: BaseException | None, verbose: bool) -> None:
    if verbose and exc is not None:
        traceback.print_exception(exc, file=sys.stderr)
    typer.echo(f"scatter-rewrite: error: {message}", err=True)


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
    lines = [f"{outcome.input} -> {outcome.output}" if outcome.output else f"{outcome.input}"]
    for p in outcome.passes:
        lines.append(f"  {p['pass']}: {len(p['rewritten'])} rewritten, {len(p['skipped'])} left alone")
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
    elif outcome.status == "PASSED":
        lines.append("  validation: skipped (--no-validate)")
    if outcome.error:
        lines.append(f"  error: {outcome.error}")
    lines.append(f"{outcome.status} in {outcome.seconds:.2f} s")
    return "\n".join(lines)


def _write_report(path: Path, verb: str, outcomes: list[Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"verb": verb, "models": [o.to_dict() for o in outcomes]}, indent=2, default=str))
    os.replace(tmp, path)


def run_verb(verb: str, options: dict[str, Any], models: list[Path], output: Optional[Path], validate: bool,
             inputs: Optional[Path], report: Optional[Path], in_place: bool, verbose: bool) -> None:
    """Shared body of every rewriting verb."""
    _setup_logging(verbose)
    try:
        from scatter_rewrite.errors import OptionError, ScatterRewriteError
        from scatter_rewrite.pipeline import VERBS, rewrite_file, rewrite_file_reporting
        from scatter_rewrite.validate import load_inputs

        VERBS[verb].make_passes(**options)  # option errors surface before any work
        files = _expand(models, [v.suffix for v in VERBS.values()])
        several = len(files) > 1 or any(m.is_dir() for m in models)
        if several and output is not None and output.exists() and not output.is_dir():
            raise OptionError(f"-o {output}: with several models -o must name a folder")
        kwargs = dict(options=options, output=output, output_is_folder=several, in_place=in_place,
                      validate=validate, inputs=load_inputs(inputs) if inputs else None)
        if not several:
            started = time.perf_counter()
            try:
                outcomes = [rewrite_file(verb, files[0], **kwargs)]
            except ScatterRewriteError as e:
                if report:
                    from scatter_rewrite.pipeline import Outcome

                    _write_report(report, verb, [Outcome(str(files[0]), error=str(e), seconds=time.perf_counter() - started)])
                raise
        else:
            outcomes = _run_parallel(verb, files, kwargs, rewrite_file_reporting)
    except ScatterRewriteError as e:
        _error(str(e), e, verbose)
        raise typer.Exit(1) from None
    except Exception as e:  # a bug of ours: say so in one line; -v shows where
        _error(f"internal error ({type(e).__name__}: {e}); rerun with -v and report it", e, verbose)
        raise typer.Exit(1) from None
    for outcome in outcomes:
        typer.echo(_format(outcome))
    if report:
        _write_report(report, verb, outcomes)
    failed = [o for o in outcomes if o.status != "PASSED"]
    if several:
        typer.echo(f"{len(outcomes) - len(failed)} of {len(outcomes)} model(s) PASSED")
    if failed:
        for o in failed:
            typer.echo(f"scatter-rewrite: error: {o.input}: {o.error}", err=True)
        raise typer.Exit(1)


def _run_parallel(verb: str, files: list[Path], kwargs: dict, worker) -> list[Any]:
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from rich.progress import Progress

    outcomes: dict[Path, Any] = {}
    with ProcessPoolExecutor(max_workers=min(len(files), os.cpu_count() or 1)) as pool, \
            Progress(transient=True, console=_stderr_console()) as progress:
        task = progress.add_task(f"{verb}", total=len(files))
        futures = {pool.submit(worker, verb, str(f), kwargs): f for f in files}
        for future in as_completed(futures):
            outcomes[futures[future]] = future.result()
            progress.advance(task)
    return [outcomes[f] for f in files]


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)


# ---- the verbs --------------------------------------------------------------------------------

_SHARED = [  # (name, annotation, default): every rewriting verb takes these, after its own options
    ("output", Output, None), ("validate", Validate, True), ("inputs", Inputs, None),
    ("report", Report, None), ("in_place", InPlace, False), ("verbose", Verbose, False),
]


def rewriting_verb(verb: str):
    """Register a rewriting verb. The decorated function takes the verb's own options and returns
    them as the pass options; the MODEL... argument and the shared options are added here, once."""

    def decorate(own_options):
        kw = inspect.Parameter.KEYWORD_ONLY
        own = [p.replace(kind=kw) for p in inspect.signature(own_options, eval_str=True).parameters.values()]
        parameters = ([inspect.Parameter("models", kw, annotation=Models)] + own
                      + [inspect.Parameter(n, kw, annotation=a, default=d) for n, a, d in _SHARED])

        @functools.wraps(own_options)
        def command(**kwargs: Any) -> None:
            shared = {name: kwargs.pop(name) for name, _, _ in _SHARED}
            models = kwargs.pop("models")
            run_verb(verb, own_options(**kwargs), models, **shared)

        command.__signature__ = inspect.Signature(parameters)
        del command.__wrapped__  # Typer must see the new signature, not the wrapped one
        return app.command(name=verb)(command)

    return decorate


@rewriting_verb("upgrade")
def upgrade(
    opset: Annotated[Optional[int], typer.Option(help="Target default-domain opset (>= 11). Default: the model's own if >= 11, else 11.")] = None,
) -> dict:
    """Upgrade deprecated Scatter to ScatterElements (main graph, subgraphs, functions)."""
    return {"opset": opset}


@rewriting_verb("fold")
def fold(
    size_limit: Annotated[Optional[int], typer.Option("--size-limit", help="Leave scatters whose result exceeds BYTES unfolded.", metavar="BYTES")] = None,
) -> dict:
    """Fold scatters whose inputs are all constant into initializers (our NumPy evaluator)."""
    return {"size_limit": size_limit}


class LowerMode(str, enum.Enum):
    standard = "standard"
    custom = "custom"
    tensorrt_plugin = "tensorrt-plugin"


@rewriting_verb("lower")
def lower(
    opset: Annotated[int, typer.Option(help="Target default-domain opset, 11 to 23.")] = 13,
    mode: Annotated[LowerMode, typer.Option(
        help="standard: exact standard ops; custom: ai.onnx.contrib nodes (docs/custom-ops.md); "
             "tensorrt-plugin: the form TensorRT 10's ScatterElements plugin takes.")] = LowerMode.standard,
) -> dict:
    """Lower scatter reductions and TensorScatter that an older opset lacks."""
    return {"opset": opset, "mode": mode.value}


class TrtVersion(str, enum.Enum):
    v8_6 = "8.6"
    v10 = "10"


def _dim_sizes(values: Optional[list[str]]) -> dict[str, int]:
    sizes = {}
    for text in values or []:
        name, _, size = text.partition("=")
        if not name or not size.strip().isdigit() or int(size) < 1:
            raise typer.BadParameter(f"{text!r}: expected NAME=SIZE, a symbolic dimension name and a positive integer",
                                     param_hint="--fix-dim")
        sizes[name] = int(size)
    return sizes


@rewriting_verb("tensorrt")
def tensorrt(
    trt_version: Annotated[TrtVersion, typer.Option("--trt-version", help="The TensorRT version to prepare for.")] = TrtVersion.v10,
    fix_dim: Annotated[Optional[list[str]], typer.Option(
        "--fix-dim", metavar="NAME=SIZE",
        help="Fix the symbolic input dimension NAME to SIZE first (repeatable): on TensorRT 8.6 a reduction "
             "with a dynamic number of updates is lowered only once that number is static.")] = None,
) -> dict:
    """Prepare every scatter for TensorRT: upgrade, fold, lower, ScatterElements -> ScatterND."""
    return {"trt_version": trt_version.value, "fix_dims": _dim_sizes(fix_dim)}


@app.command(name="check")
def check(
    model: Annotated[Path, typer.Argument(help="The ONNX model to inspect.", show_default=False)],
    target: Annotated[str, typer.Option("--target", help="tensorrt-10, tensorrt-8.6 or opset-N.")] = "tensorrt-10",
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as JSON (for CI).")] = False,
    verbose: Verbose = False,
) -> None:
    """Report every scatter node's readiness for a target; exit 1 if any is blocked (writes nothing)."""
    _setup_logging(verbose)
    try:
        from scatter_rewrite.check import check as run_check
        from scatter_rewrite.errors import ScatterRewriteError
        from scatter_rewrite.model_io import load_model

        findings = run_check(load_model(model), target)
    except ScatterRewriteError as e:
        _error(str(e), e, verbose)
        raise typer.Exit(1) from None
    blocked = [f for f in findings if f.blocked]
    if as_json:
        typer.echo(json.dumps({"model": str(model), "target": target, "blocked": len(blocked),
                               "findings": [f.to_dict() for f in findings]}, indent=2))
    else:
        _print_findings(str(model), target, findings)
    if blocked:
        raise typer.Exit(1)


def _print_findings(model: str, target: str, findings: list) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"{model}: scatter readiness for {target}", show_lines=True)
    for column in ("node", "reduction", "dtypes (data / indices)", "blocks on target", "fix"):
        table.add_column(column, overflow="fold")
    for f in findings:
        table.add_row(f.node, f.reduction or "-", f"{f.data_type or '?'} / {f.indices_type or '-'}",
                      "\n".join(f.blockers + [f"note: {n}" for n in f.notes]) or "ready",
                      f.fix or ("-" if not f.blocked else "none known"))
    console.print(table)
    blocked = sum(f.blocked for f in findings)
    console.print(f"{len(findings)} scatter node(s), {blocked} blocked on {target}: "
                  + ("BLOCKED" if blocked else "READY"), highlight=False)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
