"""The files a run reads and writes, settled before any work: the models named (folders expanded,
each model once), where each result and its external data go, where the report goes; and the
JSON report itself."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

import typer

from scatter_rewrite.cli.options import STANDARD

__all__ = ["check_report_path", "expand", "expand_each", "plan_outputs", "unique", "write_report"]


def expand(models: list[Path], suffixes: list[str]) -> list[Path]:
    """The model files: each folder's .onnx files below it (but the verbs' outputs, named by
    ``suffixes``), each file as named."""
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


def expand_each(models: list[Path], suffixes: list[str]
                ) -> tuple[list[Path], list[tuple[Path, Exception]]]:
    """:func:`expand` of each model named: (the model files, the folders holding none, each with
    its error), so that such a folder is reported alone, the other models going on."""
    from scatter_rewrite.errors import ModelLoadError

    files: list[Path] = []
    without_models: list[tuple[Path, Exception]] = []
    for path in models:
        try:
            files += expand([path], suffixes)
        except ModelLoadError as e:
            without_models.append((path, e))
    return files, without_models


def unique(files: list[Path]) -> list[Path]:
    """The files, each once (a model named twice, or through two folders, is rewritten once)."""
    seen: set[str] = set()
    kept = []
    for f in files:
        real = os.path.realpath(f)
        if real not in seen:
            seen.add(real)
            kept.append(f)
    return kept


def _reads(files: list[Path]) -> tuple[dict[str, list[tuple[Path, str]]], dict[Path, list[str]]]:
    """(real path -> (model reading it, what it is to that model), model -> its external data
    files)."""
    from scatter_rewrite.errors import ScatterRewriteError
    from scatter_rewrite.model_io import input_data_files

    reads: dict[str, list[tuple[Path, str]]] = {}
    input_data: dict[Path, list[str]] = {}
    for f in files:
        try:
            # (from the file's bytes: only the rewrite parses the model)
            input_data[f] = input_data_files(f)
        except ScatterRewriteError:
            input_data[f] = []  # reported for that model alone, when it is loaded
        read = [(f, f"the input model {f}")] + [(f.parent / d, f"the external data file of {f}")
                                                for d in input_data[f]]
        for path, what in read:
            reads.setdefault(os.path.realpath(path), []).append((f, what))
    return reads, input_data


def plan_outputs(verb: Any, files: list[Path], output: Optional[Path], in_place: bool,
                 output_is_folder: bool) -> dict[str, str]:
    """Before any work: no two models write the same file, and none writes over a file another one
    reads, model or external data (two models sharing a data file and rewritten in place would each
    replace it with their own tensors). A model writing over its own input is the pipeline's to
    judge (--in-place does so; otherwise that model alone is refused), as is one it cannot resolve
    or read. Returns real path -> what it is (inputs, outputs and their data files), for the
    --report check."""
    from scatter_rewrite.errors import OptionError, ScatterRewriteError, WriteError
    from scatter_rewrite.model_io import unwritable_folder
    from scatter_rewrite.pipeline import output_data_name, resolve_output

    reads, input_data = _reads(files)
    # In place, the way out is a data file of its own for each result; otherwise another name or
    # folder.
    hint = ("rewrite them without --in-place (each result then gets a data file of its own)"
            if in_place
            else "move one of them or write into another folder")
    # real path -> (model, the path it writes, what it is)
    writers: dict[str, tuple[Path, Path, str]] = {}
    for f in files:
        try:
            destination = resolve_output(f, verb, output, in_place, output_is_folder)
            data = destination.parent / output_data_name(f, destination, input_data[f], in_place)
        except ScatterRewriteError:
            continue  # reported for that model alone, the others going on
        blocked = unwritable_folder(destination)
        if blocked is not None:
            why = (f"no permission to write in {blocked}" if blocked.is_dir()
                   else f"{blocked} is not a folder")
            raise WriteError(f"cannot write {destination}: {why}; write the output elsewhere (-o)")
        # (The data file is written only when the result has external data; planned as if it had.)
        for target, what in ((destination, "the output"),
                             (data, "the external data file of the output")):
            real = os.path.realpath(target)
            if real not in writers:
                writers[real] = (f, target, what)
                continue
            other, _, other_what = writers[real]
            if what == other_what == "the output":
                raise OptionError(f"{other} and {f} would both be written to {destination}; "
                                  "rewrite them in separate runs or into different folders")
            if what != other_what:
                raise OptionError(f"{other} and {f} would both write {target} ({other_what} for "
                                  f"{other}, {what} "
                                  f"for {f}); {hint}")
            readers = {g for g, _ in reads.get(real, [])}
            shared = ", the data file they share" if {other, f} <= readers else ""
            raise OptionError(f"{other} and {f} would both write their external data to "
                              f"{target}{shared}; {hint}")
    taken = {real: readers[0][1] for real, readers in reads.items()}
    for real, (f, target, what) in writers.items():
        # (its own input: --in-place replaces it)
        others = [w for g, w in reads.get(real, []) if g != f]
        if others:
            raise OptionError(f"{what} for {f}, {target}, is {' and '.join(others)}; {hint}")
        taken.setdefault(real, f"{what} for {f}")
    return taken


def check_report_path(report: Path, taken: dict[str, str]) -> None:
    """Before any work: --report names a file that can be written and that is not one of the run's
    models (``taken``: real path -> what it is) nor a file other than an earlier report."""
    from scatter_rewrite.errors import OptionError, WriteError

    if str(report) == STANDARD:
        return
    real = os.path.realpath(report)
    if real in taken:
        raise OptionError(f"--report {report} is {taken[real]}; name another file for the report")
    if report.is_dir():
        raise OptionError(f"--report {report} is a folder; name a .json file")
    if report.exists():
        try:
            with open(report, "rb") as f:
                head = f.read(64).lstrip()
        except OSError as e:
            raise OptionError(f"--report {report}: cannot open it ({e.strerror or e})") from e
        if head and not head.startswith(b"{"):
            raise OptionError(f"--report {report} exists and is not a JSON report; it would be "
                              "overwritten: name another file")
    folder = Path(os.path.abspath(report)).parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise WriteError(f"--report {report}: cannot write in {folder}")


def write_report(path: Path, verb: str, outcomes: list[Any]) -> None:
    """Write the JSON report atomically (a temporary file beside it, renamed; an earlier report's
    permissions kept), or on standard output for ``-``; WriteError if that fails, with no
    temporary file left."""
    from scatter_rewrite.errors import WriteError
    from scatter_rewrite.model_io import replace_file
    from scatter_rewrite.verbs import VERBS as DECLARED

    verb = DECLARED[verb].command if verb in DECLARED else verb
    text = json.dumps({"verb": verb, "models": [o.to_dict() for o in outcomes]}, indent=2,
                      default=str)
    if str(path) == STANDARD:
        typer.echo(text)
        return
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        replace_file(tmp, path)
    except OSError as e:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise WriteError(f"--report {path}: could not write it ({e.strerror or e})") from e
