"""Several models at once, in worker processes, with a progress bar; a stop signal cancels the
models not started and stops the workers cleanly."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from scatter_rewrite.cli.printing import stderr_console
from scatter_rewrite.cli.signals import STOP_SIGNALS, Stopped, stop_deferred

__all__ = ["run_parallel"]


def run_parallel(verb: str, files: list[Path], kwargs: dict, worker) -> list[Any]:
    """The models in worker processes. Stopped by a signal, the models not started are cancelled and
    the workers stopped too (each removing its staging folder), before the signal goes on."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from rich.progress import Progress

    outcomes: dict[Path, Any] = {}
    pool = ProcessPoolExecutor(max_workers=min(len(files), os.cpu_count() or 1),
                               initializer=_worker_signals)
    try:
        with Progress(transient=True, console=stderr_console()) as progress:
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
        if not stop_deferred(signum):
            raise Stopped(signum)

    for signum in STOP_SIGNALS:
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
