"""Several models at once, in worker processes, with a progress display on a terminal; a stop
signal cancels the models not started and stops the workers cleanly.

In the parent, a stop signal during the batch only sets a flag, which the loop waiting for the
workers reads: no exception is raised inside the executor's or multiprocessing's own code (a
Stopped raised there, halfway through closing a pipe, could leave a closed descriptor to be
closed or written again: ``OSError: [Errno 9] Bad file descriptor`` instead of the stop's
message). The workers are then stopped in order and Stopped is raised from one known place.

A worker waiting for work is stopped with SIGKILL, not SIGTERM: it holds nothing of a model, and
once onnxruntime has started its threads in it, a SIGTERM may reach one of them, so that the
thread waiting for work (blocked on the pool's lock) never runs the handler and the batch never
ends. The workers tell the parent each model they start, so the parent knows which
ones wait: those whose last model's outcome the parent has (nothing of it is still being sent)
or that never had one."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from pathlib import Path
from typing import Any

from scatter_rewrite.cli.signals import STOP_SIGNALS, Stopped, stop_deferred, stop_seen

__all__ = ["run_parallel"]

logger = logging.getLogger("scatter_rewrite")
_POLL_SECONDS = 0.1  # how often the parent looks at a stop flag and the models started
# How long a stopped worker whose model's outcome the pool lost (another worker's exit broke the
# pool) may take to end before it is killed: one with a model in progress ends at its handler
# within moments; one that had just ended its model may wait for work, never running it.
_LOST_SECONDS = 30


def run_parallel(verb: str, files: list[Path], kwargs: dict, worker, progress: Any = None
                 ) -> list[Any]:
    """The models in worker processes, in the order given. ``progress``: a
    :class:`~scatter_rewrite.cli.printing.BatchProgress` told of each model started and finished
    (None: nothing shown). Stopped by a signal, the models not started are cancelled and the
    workers stopped too (each removing its staging folder); Stopped is then raised, its
    ``finished`` the outcomes of the models finished before it."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    outcomes: dict[Path, Any] = {}
    workers = _Workers(multiprocessing.SimpleQueue(), progress)
    pool = ProcessPoolExecutor(max_workers=min(len(files), os.cpu_count() or 1),
                               initializer=_worker_signals, initargs=(workers.queue,))
    with _StopFlag() as stop:  # (also while the pool stops: a second signal is not raised in it)
        try:
            with progress if progress is not None else contextlib.nullcontext():
                futures = {pool.submit(_in_worker, worker, verb, str(f), kwargs): f
                           for f in files}
                pending = set(futures)
                workers.futures = {str(f): future for future, f in futures.items()}
                while pending and stop.signum is None:
                    done, pending = wait(pending, timeout=_POLL_SECONDS,
                                         return_when=FIRST_COMPLETED)
                    workers.read()
                    for future in sorted(done, key=lambda f: files.index(futures[f])):
                        outcomes[futures[future]] = future.result()
                        logger.debug("%s: finished (%d of %d)", futures[future], len(outcomes),
                                     len(files))
                        if progress is not None:
                            progress.finished(str(futures[future]))
        except BaseException:
            _stop_pool(pool, workers)
            raise
        if stop.signum is None:
            pool.shutdown()
            return [outcomes[f] for f in files]
        _stop_pool(pool, workers)
        stopped = Stopped(stop.signum)
        stopped.finished = [outcomes[f] for f in files if f in outcomes]  # in the order given
    raise stopped


def _stop_pool(pool: Any, workers: _Workers) -> None:
    """The models not started cancelled, the workers stopped, the pool shut down. Those with a
    model in progress first, with SIGTERM (the handler stops the model cleanly, its staging folder
    removed); only then those waiting for work, with SIGKILL (see above): one killed earlier would
    break the pool, whose futures would then all seem done."""
    import multiprocessing

    children = multiprocessing.active_children()
    pool.shutdown(wait=False, cancel_futures=True)
    workers.read()
    import time

    busy = [child for child in children if not workers.waits(child.pid)]
    for child in busy:
        child.terminate()
    signalled = time.monotonic()
    while alive := [c for c in busy if c.is_alive()]:
        alive[0].join(_POLL_SECONDS)
        lost = time.monotonic() - signalled > _LOST_SECONDS
        for child in alive:  # one that ended its model before its handler ran now waits
            if child.is_alive() and (workers.waits(child.pid)
                                     or lost and workers.lost(child.pid)):
                child.kill()
    for child in children:
        if child.is_alive():
            child.kill()
    pool.shutdown(wait=True)


class _StopFlag:
    """While the batch runs in the parent: a stop signal is recorded (the first one) instead of
    raised; the handlers before it are put back after."""

    signum: int | None = None

    def __enter__(self) -> _StopFlag:
        self._before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
        for s in STOP_SIGNALS:
            signal.signal(s, self._record)
        return self

    def _record(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum

    def __exit__(self, *exc: Any) -> None:
        for s, handler in self._before.items():
            signal.signal(s, handler)


class _Workers:
    """What the workers say on ``queue``: each model they start (told to ``progress``), by process
    id, so that :meth:`waits` tells one with a model in progress from one waiting for work."""

    def __init__(self, queue: Any, progress: Any):
        self.queue, self.progress = queue, progress
        self.futures: dict[str, Any] = {}  # each model's future, by its path as given
        self._model: dict[int, str] = {}  # the last model each worker started

    def read(self) -> None:
        while not self.queue.empty():
            pid, source = self.queue.get()
            self._model[pid] = source
            if self.progress is not None:
                self.progress.started(source)

    def waits(self, pid: int | None) -> bool:
        """Whether the worker ``pid`` has no model in progress: it never started one, or the
        pool has its last one's outcome (so nothing of it is still being sent)."""
        if pid not in self._model:
            return True
        future = self.futures.get(self._model[pid])  # (None: started, not known here yet)
        return future is not None and future.done() and not _lost(future)

    def lost(self, pid: int | None) -> bool:
        """Whether the pool, broken by another worker's exit, failed the worker's model without
        its outcome."""
        future = self.futures.get(self._model.get(pid))
        return future is not None and future.done() and _lost(future)


def _lost(future: Any) -> bool:
    from concurrent.futures import BrokenExecutor

    return not future.cancelled() and isinstance(future.exception(), BrokenExecutor)


_BUSY = False  # in a worker process: whether a model is in progress
_STARTED: Any = None  # in a worker process: where it says each model it starts


def _worker_signals(started: Any) -> None:
    """In a worker: a signal stops the model in progress cleanly (see Stopped); an idle worker
    exits."""
    global _STARTED
    _STARTED = started

    def stop(signum: int, frame: Any) -> None:
        if not _BUSY:
            os._exit(128 + signum)
        stop_seen(signum)
        if not stop_deferred(signum):
            raise Stopped(signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)


def _in_worker(worker, verb: str, source: str, kwargs: dict) -> Any:
    global _BUSY
    # (before the model is busy: a stop while the parent is told exits the worker at once; the
    # parent reads no more of this queue once it stops)
    _STARTED.put((os.getpid(), source))
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
