"""The ``scatter-rewrite`` command: parses, calls the pipeline, prints a short summary.

Every rewriting verb shares one shape, whose options are defined once (:mod:`.options`):
``scatter-rewrite VERB MODEL... [-o OUT] [--validate/--no-validate] [--inputs X.npz]
[--report R.json] [--in-place] [-q] [-v]``, the verbs and their own options built from their one
declaration (:mod:`scatter_rewrite.verbs`). ``-`` is standard input as MODEL, standard output as
OUT or R.json. Exit 0 on success, 1 for a model that fails (or is blocked, for ``check``), 2 on bad
usage (an unknown option or target, a value out of range or of the wrong type, options that exclude
each other: :class:`~scatter_rewrite.errors.OptionError`), each with one line on stderr (``-v`` adds
the traceback); 128 + N when stopped by signal N. Heavy imports (onnx, onnxruntime) happen inside
the commands so ``--help`` is instant.

The parts, by concept: :mod:`.app` (the Typer app, bad usage, ``main``), :mod:`.options` (the
shared options, and a declared option's Typer parameter), :mod:`.rewriting` (the rewriting verbs'
commands and their one body), :mod:`.check` (``check`` and its report), :mod:`.files` (the files a
run reads and writes, planned before any work; the JSON report), :mod:`.streams` (``-`` as
standard input and output), :mod:`.printing` (a rewrite's summary, the spinner), :mod:`.messages`
(log lines, errors, exit codes), :mod:`.batch` (several models in worker processes),
:mod:`.signals` (stopping cleanly), :mod:`.lazy_imports` (what start-up does not load).
"""

from __future__ import annotations

from scatter_rewrite.cli.app import app, main
# (each registers its commands on app, the rewriting verbs first: the order of the help)
from scatter_rewrite.cli import rewriting, check  # noqa: E402,F401  isort: skip
from scatter_rewrite.cli.rewriting import run_verb
from scatter_rewrite.cli.signals import Stopped

__all__ = [
    "Stopped", "app", "main", "run_verb",
]
