"""What a rewriting verb prints: each model's summary (per pass, nodes rewritten and left alone
with the reasons, the validation, the status line with the time), a batch's count, the warning of
a model TensorRT will still refuse, and on a terminal a spinner naming the pass in progress."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import typer

__all__ = ["batch_summary", "format_outcome", "may_be_terminal", "pass_progress", "say",
           "stderr_console", "warn_not_ready"]


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


def batch_summary(outcomes: list[Any]) -> str:
    """The line after a batch's models: how many PASSED (or WRITTEN under --no-validate; both if a
    batch ever mixes them), and which were unchanged."""
    from scatter_rewrite.pipeline import PASSED, UNCHANGED, WRITTEN

    counts = {s: sum(o.status == s for o in outcomes) for s in (PASSED, WRITTEN)}
    counted = [f"{n} of {len(outcomes)} model(s) {s}" for s, n in counts.items()
               if n or (s == PASSED and not counts[WRITTEN])]
    unchanged = [o.input for o in outcomes if o.status == UNCHANGED]
    said = (f", {len(unchanged)} unchanged (nothing to rewrite: {', '.join(unchanged)})"
            if unchanged else "")
    return ", ".join(counted) + said


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


def may_be_terminal(stream: Any) -> bool:
    """False where rich would plainly say the stream is no terminal (a pipe or a file, and no
    FORCE_COLOR or TTY_INTERACTIVE saying otherwise), without importing rich."""
    isatty = getattr(stream, "isatty", None)
    return bool((isatty is not None and isatty()) or os.environ.get("FORCE_COLOR")
                or os.environ.get("TTY_INTERACTIVE"))


def stderr_console():
    from rich.console import Console

    return Console(stderr=True)
