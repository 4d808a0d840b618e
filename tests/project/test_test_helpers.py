"""One name, one meaning in the tests: a function defined at module level in two test files is a
twin helper, and twins drift into different meanings under one name (``assert_same`` had three
bodies, ``gnn_model`` four). A helper two files need lives once in tests/helpers/ (tests/README.md
lists them); a fixture two files need, in tests/conftest.py; anything else gets a name that says
what it builds.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# Not test code, and run where tests.helpers cannot be imported: the scripts that made the committed
# exports (tests/data/*/make*.py, run alone against pinned PyTorch versions).
OUTSIDE = {"data"}
# Names that mean the same wherever they are defined: pytest collects test_* functions by name, a
# test's name being its own (its node id is file::name); ``main`` is a script's entry point
# (``python -m tests.helpers.fold_fuzz``, tests/readme_examples.py).
ALLOWED = re.compile(r"test_\w*|main")


def checked_files(root: Path = TESTS) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if p.relative_to(root).parts[0] not in OUTSIDE)


def twins(files: list[Path], root: Path = TESTS) -> dict[str, list[str]]:
    """Each function name defined at module level in more than one of ``files`` (outside
    ``ALLOWED``), with the files that define it."""
    where = defaultdict(list)
    for path in files:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not ALLOWED.fullmatch(node.name):
                where[node.name].append(str(path.relative_to(root)))
    return {name: paths for name, paths in sorted(where.items()) if len(paths) > 1}


def imports_of_test_modules(files: list[Path], root: Path = TESTS) -> list[str]:
    """Each import of a test module (``tests.<...>.test_*``) by one of ``files``, anywhere in it: a test
    file takes what it shares from tests/helpers/, never from another test file."""
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            found += [f"{path.relative_to(root)}:{node.lineno} imports {name}" for name in names
                      if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_")]
    return found


def test_no_function_name_is_defined_in_two_test_files():
    found = twins(checked_files())
    assert not found, "one name, one meaning (tests/README.md, Shared code):\n" + "\n".join(
        f"{name}: {', '.join(paths)}" for name, paths in found.items())


def test_no_test_file_imports_another():
    found = imports_of_test_modules(checked_files())
    assert not found, "\n".join(found)


def test_a_twin_is_found_and_the_allowed_names_are_not(tmp_path: Path):
    (tmp_path / "a.py").write_text("def load(): ...\ndef test_x(): ...\ndef main(): ...\n"
                                   "async def _run(): ...\nclass C:\n    def load(self): ...\n")
    (tmp_path / "b.py").write_text("import pytest\n\n@pytest.fixture\ndef load(): ...\n"
                                   "def test_x(): ...\ndef main(): ...\nasync def _run(): ...\n"
                                   "def loader(): ...\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "make.py").write_text("def load(): ...\n")
    files = checked_files(tmp_path)
    assert [p.name for p in files] == ["a.py", "b.py"]
    assert twins(files, tmp_path) == {"_run": ["a.py", "b.py"], "load": ["a.py", "b.py"]}


def test_an_import_of_a_test_module_is_found(tmp_path: Path):
    (tmp_path / "a.py").write_text("def test_a():\n    from tests.targets.test_b import helper\n"
                                   "import tests.helpers.models\nfrom tests.helpers import DATA\n")
    assert imports_of_test_modules([tmp_path / "a.py"], tmp_path) == ["a.py:2 imports tests.targets.test_b"]
