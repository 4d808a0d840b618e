"""The command line as a user runs it, in-process (typer's ``CliRunner``), and what it leaves on disk:

- ``invoke(*args, **kwargs)``: ``scatter-rewrite ARGS`` (paths and numbers as strings), the
  runner's keywords (``input``, ``env``, ``terminal_width``, ...) passed through;
- ``save(model, path)``: a model written where a command will read it, its path;
- ``tree(folder)``: every file and folder below ``folder`` (hidden ones included), each file's
  digest and modification time: equal before and after a run when the run touched nothing there.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import onnx
from typer.testing import CliRunner

from scatter_rewrite.cli import app

runner = CliRunner()


def invoke(*args, **kwargs):
    return runner.invoke(app, [str(a) for a in args], **kwargs)


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path)
    return path


def tree(folder: Path) -> dict[str, tuple[str, int]]:
    return {str(p.relative_to(folder)): ((hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
                                         if p.is_file() else ("folder", 0))
            for p in sorted(folder.rglob("*"))}
