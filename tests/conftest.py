"""What every test shares: a console of one width, and the fixtures several files use.

Rich sizes what it prints (the check table, --help) from ``COLUMNS`` when not on a terminal, and
the tests run the CLI in-process and in subprocesses that inherit the environment: pinned here, a
test reads the same lines whatever terminal, ``COLUMNS`` or CI log runs it (``.ci/run`` runs the
suite once more with ``COLUMNS`` unset and a long temporary path to prove it). 100, as
tests/readme_examples.py uses for the README's examples.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from scatter_rewrite.testing import scatter_model

CONSOLE_COLUMNS = "100"


@pytest.fixture(autouse=True)
def _console_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", CONSOLE_COLUMNS)
    monkeypatch.delenv("LINES", raising=False)


@pytest.fixture
def legacy(tmp_path: Path) -> Path:
    """A file holding the deprecated Scatter (opset 13) in both branches of an If: what ``upgrade``
    rewrites, in a subgraph."""
    path = tmp_path / "legacy.onnx"
    onnx.save(scatter_model("Scatter", opset=13, where="if", axis=1), path)
    return path
