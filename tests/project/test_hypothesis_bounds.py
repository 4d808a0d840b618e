"""Property tests run the same bounded examples everywhere: the profile tests/conftest.py loads is
derandomized, and every @given test bounds its examples (the default run stays within its time)."""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import settings

TESTS = Path(__file__).parents[1]


def _name(decorator: ast.expr) -> str:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")


def test_the_loaded_profile_is_derandomized_without_a_deadline():
    assert settings().derandomize and settings().deadline is None and settings().database is None


def test_every_given_test_bounds_its_examples():
    unbounded = []
    for path in sorted(TESTS.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            names = [_name(d) for d in node.decorator_list]
            if "given" not in names:
                continue
            bounded = any(
                _name(d) == "settings" and isinstance(d, ast.Call)
                and any(k.arg == "max_examples" for k in d.keywords)
                for d in node.decorator_list
            )
            if not bounded:
                unbounded.append(f"{path.relative_to(TESTS)}::{node.name}")
    assert unbounded == []
