"""The layering docs/architecture.md states, checked over every import of the package (module-level
and inside functions): a module imports its own layer, the layers to its right and the shared
modules only."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "scatter_rewrite"
# Left to right, as docs/architecture.md draws them; a layer is a top-level module or package of
# scatter_rewrite ("scatter_rewrite": the package's __init__).
LAYERS = [
    {"scatter_rewrite", "__main__", "cli", "api"},
    {"readiness"},
    {"pipeline", "checking"},
    {"verbs"},
    {"repair_proof"},
    {"validate"},
    {"passes"},
    {"targets"},
    {"opset"},
    {"shared"},
    {"evaluator"},
]
# Importable from every layer; they themselves import each other and evaluator/ only.
SHARED = {"graph", "limits", "errors", "spec", "type_inference", "model_io", "_protowire", "in_memory",
          "ort_folding", "index_tuples", "said",
          "export_patterns", "custom_ops", "testing"}
def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    relative = Path(*name.split("."))
    return (PACKAGE.parent / relative).with_suffix(".py").exists() \
        or (PACKAGE.parent / relative / "__init__.py").exists()


def imports(path: Path) -> set[str]:
    """Every scatter_rewrite module ``path`` imports, wherever the import statement is."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            for alias in node.names:  # `from package import module` imports the module
                found.add(f"{base}.{alias.name}" if is_module(f"{base}.{alias.name}") else base)
    return {m for m in found if m == "scatter_rewrite" or m.startswith("scatter_rewrite.")}


def layer(module: str) -> str:
    top = module.split(".")[1] if "." in module else "scatter_rewrite"
    return "shared" if top in SHARED else top


def position(module: str) -> int:
    return next(i for i, names in enumerate(LAYERS) if layer(module) in names)


def violations() -> set[tuple[str, str]]:
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = module_name(path)
        for imported in imports(path):
            if layer(imported) == layer(importer) and layer(imported) != "shared":
                continue
            if layer(imported) == "shared" and layer(importer) != "shared":
                continue
            if position(importer) > position(imported):
                found.add((importer.removeprefix("scatter_rewrite."),
                           imported.removeprefix("scatter_rewrite.")))
    return found


def test_every_top_level_module_has_a_layer():
    tops = {p.stem if p.suffix else p.name for p in PACKAGE.iterdir()
            if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").exists()}
    placed = set().union(*LAYERS) | SHARED
    assert tops - placed == set()


def test_no_import_against_the_layering():
    assert violations() == set()


def import_cycles() -> list[list[str]]:
    """The package's import cycles (strongly connected groups of modules), counting every import
    statement, at module level or inside a function."""
    graph = {module_name(p): imports(p) for p in sorted(PACKAGE.rglob("*.py"))}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(module: str) -> None:  # (Tarjan's strongly connected components)
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph[module]:
            if other not in graph or other == module:
                continue
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in graph:
        if module not in index:
            visit(module)
    return cycles


def test_no_import_cycle_in_the_package():
    assert import_cycles() == []
