"""The verb that brings a model to a ``check`` target, as the target declares it
(:func:`target_verb`, :func:`fix_command`), and its dry run on the model (:func:`dry_run`): the
verb run as the command line runs it with --no-validate, its output thrown away, its refusal or
what it would do kept for the report (:class:`scatter_rewrite.readiness.report.DryRun`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

from scatter_rewrite.errors import internal_error_message
from scatter_rewrite.readiness.report import DryRun
from scatter_rewrite.said import Said
from scatter_rewrite.verbs import spoken

__all__ = ["dry_run", "fix_command", "target_name", "target_verb"]

logger = logging.getLogger("scatter_rewrite")


def target_name(kind: str, version) -> str:
    """The registered target's name for :func:`parse_target`'s (kind, version)."""
    return f"{kind}-{version}" if kind in ("tensorrt", "opset") else str(version)


def target_verb(kind: str, version) -> tuple[str, dict] | None:
    """The verb that brings a model to the target, with its options, as the target declares it
    (:mod:`scatter_rewrite.targets`): ``lower --opset N`` for opset-N (N >= 11, the lowest lower
    reaches), ``tensorrt --trt-version X`` for tensorrt-X, ``prepare --target T`` for the others;
    None where no verb does."""
    from scatter_rewrite.targets import get_target

    found = get_target(target_name(kind, version)).fix_verb
    return None if found is None else (found[0], dict(found[1]))


def fix_command(kind: str, version, fix_dims: list[str] | None = None) -> Said | None:
    """:func:`target_verb` as the call a finding names (``fix_dims``: with those dimensions fixed
    first, to a SIZE the user picks), which the command line says as its command."""
    from scatter_rewrite.verbs import VERBS, command

    found = target_verb(kind, version)
    if found is None:
        return None
    options = VERBS[found[0]].bind(found[1], cli=True)
    given = {name: options[name] for name in found[1]}
    return command(found[0], **given, **({"fix_dims": dict.fromkeys(fix_dims, "SIZE")}
                                         if fix_dims else {}))


def dry_run(path: str | os.PathLike, kind: str, version, invalid: bool = False,
            fix_dims: dict[str, int] | None = None) -> DryRun | None:
    """The target's verb (:func:`target_verb`) on the model file at ``path`` (``fix_dims``: with
    those dimensions fixed first, the command saying ``--fix-dim NAME=SIZE``), as the command line
    runs it with --no-validate (:func:`scatter_rewrite.pipeline.rewrite_model`: the same passes, the
    same opset move and its self-check, onnx.checker on the result), its output written to a
    temporary folder that is removed; None where no verb reaches the target. ``invalid``: the
    model fails onnx.checker, and whatever stops the verb on it is its refusal (an internal error
    too, said as such)."""
    import tempfile

    from scatter_rewrite.errors import ScatterRewriteError
    from scatter_rewrite.model_io import data_file_name, external_data_files, load_proto, to_ir
    from scatter_rewrite.pipeline import rewrite_model, unrunnable_unvalidated
    from scatter_rewrite.verbs import VERBS

    found = target_verb(kind, version)
    if found is None:
        return None
    name, given = found
    verb = VERBS[name]
    options = verb.bind(given | ({"fix_dims": fix_dims} if fix_dims else {}), cli=True)
    run = DryRun(spoken(fix_command(kind, version, list(fix_dims or ())), {}))
    source = Path(path)
    try:
        proto = load_proto(source)
        external = bool(external_data_files(proto, source))
        model = to_ir(proto, source)
        del proto
        with tempfile.TemporaryDirectory(prefix="scatter-rewrite-check-") as tmp:
            destination = Path(tmp, "dry-run.onnx")
            outcome = rewrite_model(model, verb.make_passes(**options), source, destination,
                                    verb=name, options=options, validate=False,
                                    external=external, data_name=data_file_name(destination))
            # (the status a validated run then gives: UNRUNNABLE is a failure too)
            unrunnable = (unrunnable_unvalidated(name, options, destination)
                          if outcome.modified else None)
        if unrunnable is not None:
            run.error = spoken(unrunnable, {})
            return run
    except ScatterRewriteError as e:
        # (said as the command line says it, as run.command is: --max-intermediate-mib 354)
        run.error = verb.cli_message(e)
        run.declined = [dataclasses.replace(note, detail=verb.cli_message(
            ScatterRewriteError(note.detail)))
            for note in getattr(e, "declined", [])]
        return run
    except Exception as e:
        if not invalid:
            raise  # a bug of ours, on a valid model
        logger.debug("%s: the dry run stopped on the invalid model", path, exc_info=True)
        run.error = internal_error_message(e, "internal error on the invalid model", "")
        return run
    for p in outcome.passes:
        run.would += [f"{p['pass']}: rewrote {n['node']}: {verb.cli_text(n['detail'])}"
                      for n in p["rewritten"]]
        run.would += [f"{p['pass']}: {verb.cli_text(note)}" for note in p["notes"]]
    return run
