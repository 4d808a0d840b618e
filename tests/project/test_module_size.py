"""No module of the package over 600 lines, so that each can be read whole."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "scatter_rewrite"
MAX_MODULE_LINES = 600


def lines(path: Path) -> int:
    return path.read_text().count("\n")


def test_no_module_over_600_lines():
    over = {p.relative_to(PACKAGE).as_posix(): lines(p) for p in PACKAGE.rglob("*.py")
            if lines(p) > MAX_MODULE_LINES}
    assert over == {}
