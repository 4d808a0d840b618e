"""``scatter-rewrite check``: each model's readiness for a target
(:mod:`scatter_rewrite.readiness`), printed as a table per model (or JSON), with the warnings,
fixes and notes on stderr and the reason of a model not READY in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from scatter_rewrite.cli.app import Command, app
from scatter_rewrite.cli.files import expand, unique
from scatter_rewrite.cli.messages import error, exit_code, internal_error, setup_logging
from scatter_rewrite.cli.options import STANDARD, CheckVerbose, Models, Quiet
from scatter_rewrite.cli.printing import status_counts
from scatter_rewrite.cli.streams import shown_paths, standard_streams
from scatter_rewrite.limits import DEFAULT_CHECK_TARGET
from scatter_rewrite.targets import TARGETS_HELP

__all__ = ["check"]


@app.command(name="check", cls=Command)
def check(
    context: typer.Context,
    models: Models,
    target: Annotated[str, typer.Option(
        "--target", metavar="TARGET", help=f"{TARGETS_HELP}.")] = DEFAULT_CHECK_TARGET,
    as_json: Annotated[bool, typer.Option("--json",
                                          help="Print the reports as JSON (for CI).")] = False,
    quiet: Quiet = False,
    verbose: CheckVerbose = False,
) -> None:
    """Check each model's readiness for a target; exit 0 if every model is READY, 1 otherwise.

    onnx.checker, each scatter node, and a dry run of the verb that reaches the target (lower,
    tensorrt or prepare) on every node."""
    setup_logging(verbose)
    try:
        from scatter_rewrite.errors import ScatterRewriteError

        reports = _reports(models, target)
    except ScatterRewriteError as e:
        from scatter_rewrite.said import message_of
        from scatter_rewrite.verbs import spoken

        error(spoken(message_of(e), {"target": "--target"}), e, verbose)
        raise typer.Exit(exit_code(e)) from None
    except Exception as e:  # a bug of ours: one line; -v shows where
        internal_error(e, verbose)
    if as_json:
        from scatter_rewrite.readiness.report import json_document

        typer.echo(json.dumps(json_document(reports, target), indent=2))
    elif not quiet:
        console = _check_console(context)
        for r in reports:
            if r.unreadable is None or len(reports) > 1:  # (one model: its error line alone)
                _print_report(r, console)
        if len(reports) > 1:
            typer.echo(status_counts([r.status for r in reports]))
    _warn_fix_and_note(reports)
    not_ready = [r for r in reports if r.blocked]
    for r in not_ready:  # exit 1 says why in one line, like every other exit 1
        why = _not_ready_reason(r)
        named = (len(reports) > 1 or r.invalid) and not why.startswith(r.model)
        error(f"{r.model}: {why}" if named else why, None, verbose)
    if not_ready:
        raise typer.Exit(1)


def _reports(models: list[str], target: str) -> list[Any]:
    """The readiness report of each model (every model of a folder, the verbs' outputs too: they
    are what one checks); a folder holding none is an UNREADABLE report saying so, as a model that
    cannot be read is (:func:`_report`)."""
    from scatter_rewrite.errors import OptionError, ScatterRewriteError
    from scatter_rewrite.readiness import parse_target
    from scatter_rewrite.readiness.report import CheckReport

    parse_target(target)
    if STANDARD in models and len(models) > 1:
        raise OptionError("- (standard input) is one model: give it alone, or name files")
    with standard_streams(models, None) as (models, _, _):
        entries: list[Any] = []  # each model file, in order, or a folder's report
        for m in models:
            try:
                entries += expand([Path(m)], [])
            except ScatterRewriteError as e:  # a folder without models: its own entry
                entries.append(CheckReport(shown_paths(m), target, unreadable=shown_paths(str(e))))
        kept = {id(f) for f in unique([e for e in entries if isinstance(e, Path)])}
        return [_report(e, target) if isinstance(e, Path) else e for e in entries
                if not isinstance(e, Path) or id(e) in kept]


def _report(file: Path, target: str) -> Any:
    """The readiness report of one model; a model that cannot be read is an UNREADABLE report
    saying why, so that the others are still checked and reported."""
    from scatter_rewrite.errors import OptionError, ScatterRewriteError
    from scatter_rewrite.readiness import check_report
    from scatter_rewrite.readiness.report import CheckReport

    name = shown_paths(str(file))
    try:
        return check_report(file, target, name=name)
    except OptionError:
        raise  # bad usage, whichever model shows it
    except ScatterRewriteError as e:
        return CheckReport(name, target, unreadable=shown_paths(str(e)))


def _warn_fix_and_note(reports: list[Any]) -> None:
    """On stderr, for each model: a warning of the TorchScript export's accumulating pattern, the
    repair command for the nodes it would change, and the report's notes."""
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


def _check_console(context: typer.Context):
    """The console check prints to: as wide as the command's context says when it says
    (``CliRunner.invoke(..., terminal_width=80)``), else the terminal's (or COLUMNS)."""
    from rich.console import Console

    return Console(width=context.terminal_width)


def _not_ready_reason(report: Any) -> str:
    """Why a report is not READY, in one line."""
    from scatter_rewrite.readiness.report import FIXABLE, INVALID

    if report.unreadable is not None:
        return report.unreadable
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
    from scatter_rewrite.readiness.report import FIXABLE, INVALID

    def say(text: str, whole: bool = False) -> None:  # whole: a command, copyable, never wrapped
        console.print(text, highlight=False, markup=False, soft_wrap=whole)

    if report.unreadable is not None:  # (the reason on stderr too, as every exit 1 says it)
        why = report.unreadable.removeprefix(f"{report.model}: ")
        say(f"{report.model}: UNREADABLE: {why}", whole=True)
        return

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
