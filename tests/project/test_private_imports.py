"""No code of the project uses a private name of a third-party module (onnx, onnx_ir, typer...),
which a new release may remove without notice: neither imports (``from onnx.x import _y``,
``import onnx_ir._z``, ``from typer._click import ...``), nor attributes of an imported module
(``typer.main._x``, ``ir._core``), nor such a module's dotted name as a string (a ``sys.modules``
key). Our own ``_private`` names and the standard library's are not this test's concern."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKED = sorted([*(ROOT / "scatter_rewrite").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py"),
                  *(ROOT / "tests").rglob("*.py"), *(ROOT / ".ci").glob("*.py")])
# Top-level names that are ours: the package, the tests, and the benchmarks' scripts, which import
# each other by file name (``from _timed import ...``).
OWN = {"scatter_rewrite", "tests", "benchmarks",
       *(p.stem for p in (ROOT / "benchmarks").glob("*.py"))}
DOTTED = re.compile(r"[A-Za-z_]\w*(\.\w+)+")


def _third_party(dotted: str) -> bool:
    root = dotted.split(".")[0]
    return root not in OWN and root not in sys.stdlib_module_names


def _private_part(dotted: str) -> str | None:
    """The first private component after the top-level name (``_x``, not ``__version__``)."""
    return next((part for part in dotted.split(".")[1:]
                 if part.startswith("_") and not (part.startswith("__") and part.endswith("__"))),
                None)


def _quoted_names(tree: ast.AST) -> list[ast.Constant]:
    """The string constants of ``tree`` that are dotted names (a ``sys.modules`` key, an
    ``import_module`` argument, "module.attribute" for monkeypatch.setattr, a table of modules to
    defer...), except a class's ``__module__`` given in a dict (a test's fake of another package's
    class names the module it mimics without using it)."""
    described = {id(value) for node in ast.walk(tree) if isinstance(node, ast.Dict)
                 for key, value in zip(node.keys, node.values)
                 if isinstance(key, ast.Constant) and key.value == "__module__"}
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and DOTTED.fullmatch(node.value) and id(node) not in described]


def private_uses(source: str) -> list[str]:
    """Each use of a third-party private name in ``source``: ``line: what``."""
    tree = ast.parse(source)
    found: list[str] = []
    modules: dict[str, str] = {}  # local name -> the third-party dotted name it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _third_party(alias.name):
                    if _private_part(alias.name):
                        found.append(f"{node.lineno}: import {alias.name}")
                    # (`import a.b` binds a; `import a.b as c` binds c to a.b)
                    bound = alias.name if alias.asname else alias.name.split(".")[0]
                    modules[alias.asname or bound] = bound
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if not _third_party(node.module):
                continue
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if _private_part(full):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
                modules[alias.asname or alias.name] = full
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            chain, value = [node.attr], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in modules:
                full = ".".join([modules[value.id], *reversed(chain)])
                if _private_part(full) and not _private_part(modules[value.id]):
                    found.append(f"{node.lineno}: {value.id}.{'.'.join(reversed(chain))}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
              and len(node.args) >= 2
              and isinstance(node.args[0], ast.Name) and node.args[0].id in modules
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _private_part(f"{modules[node.args[0].id]}.{node.args[1].value}")):
            target, name = node.args[0].id, node.args[1].value
            found.append(f"{node.lineno}: {node.func.id}({target}, {name!r})")
    for node in _quoted_names(tree):
        if _third_party(node.value) and _private_part(node.value):
            found.append(f"{node.lineno}: {node.value!r}")
    # (an attribute chain is visited at each of its levels: each use once)
    return sorted(set(found), key=lambda line: (int(line.split(":")[0]), line))


@pytest.mark.parametrize("path", CHECKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_name_of_a_third_party_module(path: Path):
    uses = private_uses(path.read_text(encoding="utf-8"))
    assert not uses, f"{path.relative_to(ROOT)} uses private names of other packages: {uses}"


@pytest.mark.parametrize("source, expected", [
    ("from onnx.external_data_helper import _get_all_tensors",
     ["1: from onnx.external_data_helper import _get_all_tensors"]),
    ("import onnx_ir._core", ["1: import onnx_ir._core"]),
    ("from typer._click import Context", ["1: from typer._click import Context"]),
    ("import typer.main\ntyper.main._x()", ["2: typer.main._x"]),
    ("import onnx_ir as ir\nir._core.Node", ["2: ir._core", "2: ir._core.Node"]),
    ("from onnx import helper\nhelper._private", ["2: helper._private"]),
    ("import sys\nsys.modules['onnx_ir._symbolic_shapes'] = None",
     ["2: 'onnx_ir._symbolic_shapes'"]),
    ("import typer\ngetattr(typer, '_hidden')", ["2: getattr(typer, '_hidden')"]),
    ("import importlib\nimportlib.import_module('onnx._mapping')", ["2: 'onnx._mapping'"]),
    ("monkeypatch.setattr('typer.main._get_command', None)", ["1: 'typer.main._get_command'"]),
    # what is allowed: our own private names, the standard library's, dunders, plain public use
    ("from scatter_rewrite import _protowire\nimport scatter_rewrite.evaluator._common", []),
    ("from _timed import measure", []),
    ("import sys\nsys._getframe()", []),
    ("import onnx\nonnx.__version__\nonnx.helper.make_node", []),
    ("x = object()\nx._private", []),
    ("DEFERRED = ('sympy', 'onnx_ir._symbolic_shapes')", ["1: 'onnx_ir._symbolic_shapes'"]),
    ("fake = type('P', (), {'__module__': 'torch.onnx._internal.exporter'})", []),
    ("message = 'see onnx_ir._core for why'", []),
])
def test_the_check_finds_what_it_should(source: str, expected: list[str]):
    assert private_uses(source) == expected
