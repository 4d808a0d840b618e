"""Stopping cleanly: SIGINT, SIGTERM or SIGHUP become :class:`Stopped`, raised where the process
is, so that no model is left half written; a signal once the run is over only sets the exit
status."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Any

__all__ = ["STOP_SIGNALS", "Stopped", "raise_if_stopped", "stop_deferred", "stop_on_signals",
           "stop_seen", "stopped_after_the_run", "stopped_message"]


class Stopped(BaseException):
    """SIGINT, SIGTERM or SIGHUP arrived. Raised where the process is, so that every ``finally``
    runs: the staging folder of the model in progress (model_io.staged_save) is removed and nothing
    of that model is written. A BaseException: no ``except Exception`` of ours takes it for a
    failure."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name


STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                     if hasattr(signal, name))


def stop_deferred(signum: int) -> bool:
    """Whether a file is being staged or renamed into place, so the stop waits for its end
    (model_io); nothing is when model_io is not even imported yet."""
    model_io = sys.modules.get("scatter_rewrite.model_io")
    return model_io is not None and model_io.stop_deferred(signum)


# The first stop signal this process had. Its Stopped, raised wherever Python was, can be lost:
# C code that clears the errors it meets (an extension module's import, say) swallows it, and the
# run would go on to write its model. So the rename into place asks again (raise_if_stopped).
_seen: int | None = None


def stop_seen(signum: int) -> None:
    global _seen
    if _seen is None:
        _seen = signum


def raise_if_stopped() -> None:
    """Stopped, if a stop signal came (model_io runs this before it renames a model into place)."""
    if _seen is not None:
        raise Stopped(_seen)


def _raise_stopped(signum: int, frame: Any) -> None:
    stop_seen(signum)
    if not stop_deferred(signum):
        raise Stopped(signum)


def stop_on_signals() -> None:
    global _seen
    _seen = None
    for signum in STOP_SIGNALS:
        signal.signal(signum, _raise_stopped)


def stopped_message(e: Stopped) -> str:
    """What a stop left: the outputs this process renamed into place before it (a model whose
    summary it cut short), else none of a model in progress (a batch's finished models, in its
    workers, are printed above)."""
    from scatter_rewrite.cli.streams import shown_paths

    model_io = sys.modules.get("scatter_rewrite.model_io")
    written = [shown_paths(str(p)) for p in getattr(model_io, "WRITTEN_OUTPUTS", []) if p.exists()]
    if written:
        return (f"stopped by {e.name} once {', '.join(written)} was written: it is whole "
                "(validated as asked), though what the run prints and reports after it may be "
                "cut short")
    return (f"stopped by {e.name}: no output of a model in progress is left (models finished "
            "before it are written)")


def stopped_after_the_run(signum: int, frame: Any) -> None:
    """A stop signal once the run is over (its outputs written, its lines printed), while the
    process exits: said, and the signal's exit status."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    os.write(2, f"scatter-rewrite: error: stopped by {signal.Signals(signum).name} after the run "
                "ended: what it printed above stands\n".encode())
    os._exit(128 + signum)
