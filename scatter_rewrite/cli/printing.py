"""What a rewriting verb prints: each model's summary (per pass, nodes rewritten and left alone
with the reasons, the validation, the status line with the time), a batch's count by status, the
warning of a model TensorRT will still refuse, and on a terminal a spinner naming the pass in
progress and a batch's progress."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import typer

__all__ = ["BatchProgress", "batch_progress", "batch_summary", "format_outcome", "may_be_terminal", "pass_progress", "say",
           "status_counts", "stderr_console", "warn_not_ready"]


def say(text: str, aside: bool) -> None:
    """A line of the summary: on stdout, unless a model or the report goes there (``aside``)."""
    typer.echo(text, err=aside)


def format_outcome(outcome: Any) -> str:
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
        lines += [f"    {v[key]}" for key in ("cross_check", "in_runtime", "onnxruntime_note")
                  if v.get(key)]
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


def batch_summary(outcomes: list[Any]) -> str:
    """The line after a batch's models: how many models, counted by status
    (``4 models: 2 PASSED, 1 UNCHANGED, 1 FAILED``), and which were unchanged."""
    from scatter_rewrite.pipeline import UNCHANGED

    said = status_counts([o.status for o in outcomes])
    unchanged = [o.input for o in outcomes if o.status == UNCHANGED]
    if unchanged:
        said += f" (unchanged: nothing to rewrite in {', '.join(unchanged)})"
    return said


# Every status a model of a batch may end in, in the order a summary counts them: the rewriting
# verbs' (pipeline.Outcome.status), then check's (readiness.CheckReport.status).
STATUS_ORDER = ("PASSED", "WRITTEN", "UNCHANGED", "UNRUNNABLE", "FAILED",
                "READY", "FIXABLE", "BLOCKED", "INVALID", "UNREADABLE")


def status_counts(statuses: list[str]) -> str:
    """``3 models: 2 READY, 1 UNREADABLE``: every status that occurs, counted."""
    order = list(STATUS_ORDER) + sorted(set(statuses) - set(STATUS_ORDER))
    counted = [f"{statuses.count(s)} {s}" for s in order if s in statuses]
    return f"{len(statuses)} model{'s' * (len(statuses) != 1)}: {', '.join(counted)}"


def warn_not_ready(outcomes: list[Any], trt_version: str) -> None:
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


@contextlib.contextmanager
def pass_progress(model: Path):
    """On a terminal (stderr), a spinner naming the pass running on ``model`` (a long model would
    otherwise print nothing for seconds); elsewhere nothing. Yields the pipeline's progress
    callback."""
    # (rich's console is imported only where it may be a terminal: 30-70 ms)
    console = stderr_console() if may_be_terminal(sys.stderr) else None
    if console is None or not console.is_terminal:
        yield None
        return
    with console.status(f"{model}: loading", spinner="line") as status:
        yield lambda step: status.update(f"{model}: {step}")


class BatchProgress:
    """A batch's progress on a terminal (stderr), one line redrawn in place: the verb, the models
    done of the total, the time elapsed and the models in progress (``lower 1/4 models 0:00:03
    big.onnx``); erased once the batch ends, when the summary says the rest. A context manager;
    :meth:`started` and :meth:`finished` name a model."""

    def __init__(self, verb: str, total: int, console: Any):
        from rich.progress import MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(TextColumn("{task.description}"), MofNCompleteColumn(),
                                  TextColumn("models"), TimeElapsedColumn(),
                                  TextColumn("{task.fields[current]}"),
                                  console=console, transient=True)
        self._task = self._progress.add_task(verb, total=total, current="")
        self._current: list[str] = []

    @property
    def task(self) -> Any:
        """The rich task: ``completed``, ``total``, ``fields["current"]``."""
        return self._progress.tasks[0]

    def started(self, model: str) -> None:
        self._current.append(model)
        self._update()

    def finished(self, model: str) -> None:
        if model in self._current:
            self._current.remove(model)
        self._progress.advance(self._task)
        self._update()

    def _update(self) -> None:
        self._progress.update(self._task, current=", ".join(self._current))

    def __enter__(self) -> BatchProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.stop()


def batch_progress(verb: str, total: int, quiet: bool) -> BatchProgress | None:
    """The progress display of a batch, on a terminal (stderr) and without -q; else None."""
    if quiet or not may_be_terminal(sys.stderr):
        return None
    console = stderr_console()
    return BatchProgress(verb, total, console) if console.is_terminal else None


def may_be_terminal(stream: Any) -> bool:
    """False where rich would plainly say the stream is no terminal (a pipe or a file, and no
    FORCE_COLOR or TTY_INTERACTIVE saying otherwise), without importing rich."""
    isatty = getattr(stream, "isatty", None)
    return bool((isatty is not None and isatty()) or os.environ.get("FORCE_COLOR")
                or os.environ.get("TTY_INTERACTIVE"))


def stderr_console():
    from rich.console import Console

    return Console(stderr=True)
