"""Each module of the package declares its interface in ``__all__``, and the other modules of the
package use only that: no module reaches into another's private helpers."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import scatter_rewrite

PACKAGE = Path(scatter_rewrite.__file__).parent
SOURCES = sorted(PACKAGE.rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p) for p in SOURCES}


def _cross_module_uses(path: Path) -> set[tuple[str, str]]:
    """(module, name) for every name this file takes from another module of the package, whether
    by ``from module import name`` or as ``alias.name`` on an imported module."""
    me = _module_name(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    uses, aliases = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in MODULES:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in MODULES:
                    aliases[alias.asname or alias.name] = full
                elif node.module != me:
                    uses.add((node.module, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in MODULES:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and aliases.get(node.value.id, me) != me):
            uses.add((aliases[node.value.id], node.attr))
    return uses


@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_module_declares_an_interface_that_resolves(module: str):
    loaded = importlib.import_module(module)
    names = list(loaded.__all__)
    assert len(set(names)) == len(names), f"{module}.__all__ repeats a name"
    for name in names:
        assert hasattr(loaded, name), f"{module}.__all__ names {name}, which it does not define"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_use_only_each_others_declared_interface(path: Path):
    outside = [f"{module}.{name}" for module, name in sorted(_cross_module_uses(path))
               if name not in importlib.import_module(module).__all__]
    assert not outside, f"{path.name} uses names other modules do not export: {outside}"
