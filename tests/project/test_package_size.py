"""No function of the package over 80 lines, so that each can be read whole (modules:
test_module_size.py)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "scatter_rewrite"
MAX_FUNCTION_LINES = 80


def modules():
    return sorted(PACKAGE.rglob("*.py"))


def name(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_no_function_over_80_lines():
    long = set()
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                long.add((name(path), node.name))
    assert long == set()
