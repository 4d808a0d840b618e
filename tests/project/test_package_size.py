"""No module of the package over 800 lines and no function over 80, so that each can be read
whole."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "scatter_rewrite"
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 800, 80


def modules():
    return sorted(PACKAGE.rglob("*.py"))


def name(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_no_module_over_800_lines():
    long = {name(p) for p in modules() if p.read_text().count("\n") > MAX_MODULE_LINES}
    assert long == set()


def test_no_function_over_80_lines():
    long = set()
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                long.add((name(path), node.name))
    assert long == set()
