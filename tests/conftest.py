"""What every test shares: a console of one width, and the fixtures several files use.

Rich sizes what it prints (the check table, --help) from ``COLUMNS`` when not on a terminal, and
the tests run the CLI in-process and in subprocesses that inherit the environment: pinned here, a
test reads the same lines whatever terminal, ``COLUMNS`` or CI log runs it (``.ci/run`` runs the
tests that print once more with ``COLUMNS`` unset and a long temporary path to prove it). 100, as
tests/readme_examples.py uses for the README's examples.
"""

from __future__ import annotations

from pathlib import Path

import os

import onnx
import pytest
from hypothesis import HealthCheck, settings

from scatter_rewrite.testing import scatter_model

CONSOLE_COLUMNS = "100"

# Hypothesis: the same examples on every run and machine (a failure in CI reproduces here), no
# deadline (2 shared cores make timings noise), no example database written into the checkout.
# Each test bounds its own max_examples. HYPOTHESIS_PROFILE=explore draws fresh examples, for a
# search run by hand.
settings.register_profile("repeatable", derandomize=True, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", deadline=None, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


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
