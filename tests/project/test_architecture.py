"""docs/architecture.md maps the package: every module is named there, and every module it names
exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "scatter_rewrite"
PAGE = ROOT / "docs" / "architecture.md"
# Directories whose modules the page names by the directory and the rule its files follow.
NAMED_BY_DIRECTORY = {"opset/forms"}


def mapped_modules() -> list[str]:
    return sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
                  if p.name not in ("__init__.py", "__main__.py"))


def code_spans() -> set[str]:
    return set(re.findall(r"`([^`\n]+)`", PAGE.read_text()))


def names_of(module: str) -> set[str]:
    """How the page may name ``module``: its path in the package, its file name or its stem."""
    file_name = module.rsplit("/", 1)[-1]
    return {module, f"scatter_rewrite/{module}", file_name, file_name[:-3]}


def test_every_module_is_named_on_the_architecture_page():
    spans = code_spans()
    missing = [m for m in mapped_modules()
               if m.rsplit("/", 1)[0] not in NAMED_BY_DIRECTORY and not names_of(m) & spans]
    assert missing == []


def test_every_module_the_page_names_exists():
    """A span ending in ``.py`` or ``/`` (a placeholder like ``<name>.py`` aside) is a module or a
    package of scatter_rewrite/, or a path of the repository (``models/``)."""
    files = [p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")]
    packages = {p.relative_to(PACKAGE).as_posix() + "/" for p in PACKAGE.rglob("*") if p.is_dir()
                and (p / "__init__.py").exists()}
    named = {s.removeprefix("scatter_rewrite/") for s in code_spans()
             if re.fullmatch(r"[\w/]+(\.py|/)", s) and not (ROOT / s).exists()}
    unknown = sorted(s for s in named
                     if not (s in packages or any(f == s or f.endswith("/" + s) for f in files)))
    assert unknown == []
