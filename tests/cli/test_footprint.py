"""What a command imports: the heavy modules a run does not need stay out of the process.

`fold --no-validate` must not load onnxruntime (validation's), which takes the fold of a 64 MiB
scatter past twice the model's size in memory (benchmarks/RESULTS-fold.md). pydantic comes only
with typer 0.29 and later, which import it to parse any command's arguments
(benchmarks/RESULTS-cli-start.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx

from scatter_rewrite.testing import constant_scatter_model

RUN_AND_LIST_MODULES = """
import json, sys
from scatter_rewrite.cli import main
sys.argv = ["scatter-rewrite", *sys.argv[1:]]
try:
    main()
except SystemExit as e:
    code = e.code
# (a stand-in for a module not loaded yet, cli/lazy_imports.py's _OnFirstUse, is not a module
# loaded)
loaded = [name for name, module in sys.modules.items() if type(module).__name__ != "_OnFirstUse"]
print(json.dumps({"code": code, "modules": sorted(loaded)}))
"""


def _modules_after(*argv: str, full: bool = False) -> tuple[int, set[str]]:
    """The exit code and the modules loaded (top-level names, or ``full`` names) by a run."""
    done = subprocess.run([sys.executable, "-c", RUN_AND_LIST_MODULES, *argv],
                          capture_output=True, text=True, check=True)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return report["code"], {name if full else name.split(".")[0] for name in report["modules"]}


def _tiny_model(tmp_path) -> str:
    model = tmp_path / "m.onnx"
    onnx.save(constant_scatter_model("ScatterElements", data=np.zeros((4, 4), np.float32),
                                     indices=np.zeros((1, 4), np.int64),
                                     updates=np.ones((1, 4), np.float32)), model)
    return str(model)


def test_fold_without_validation_does_not_load_onnxruntime(tmp_path):
    code, modules = _modules_after("fold", _tiny_model(tmp_path), "-o", str(tmp_path / "out.onnx"),
                                   "--no-validate")
    assert code in (0, None)
    assert (tmp_path / "out.onnx").exists()
    assert "onnx" in modules  # it did run the fold
    assert "onnxruntime" not in modules


# Who imports pydantic first: the file of the import statement (the innermost frame outside
# the import machinery and this finder) when pydantic's spec is first looked for.
RUN_AND_NAME_PYDANTIC_IMPORTER = """
import json, sys, traceback
importers = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "pydantic" and not importers:
            frames = [f.filename for f in traceback.extract_stack()[:-1]]
            importers.append(next(f for f in reversed(frames) if not f.startswith("<frozen")))
        return None
sys.meta_path.insert(0, Watch())
from scatter_rewrite.cli import main
sys.argv = ["scatter-rewrite", *sys.argv[1:]]
try:
    main()
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "importer": importers[0] if importers else None}))
"""


def test_only_typer_imports_pydantic_and_only_from_0_29(tmp_path):
    """typer 0.29 and later coerce every parameter that is not a flag through a pydantic
    TypeAdapter, with no public way around it (benchmarks/RESULTS-cli-start.md measures the
    cost); before 0.29 no pydantic at all. Never our own code."""
    from importlib.metadata import version

    import typer

    done = subprocess.run([sys.executable, "-c", RUN_AND_NAME_PYDANTIC_IMPORTER, "fold",
                           _tiny_model(tmp_path), "-o", str(tmp_path / "out.onnx"), "--no-validate"],
                          capture_output=True, text=True, check=True)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["code"] in (0, None) and (tmp_path / "out.onnx").exists()
    if tuple(int(p) for p in version("typer").split(".")[:2]) < (0, 29):
        assert report["importer"] is None
    else:
        typer_folder = os.path.dirname(typer.__file__)
        assert report["importer"] and report["importer"].startswith(typer_folder + os.sep), report


def test_validated_fold_does_load_onnxruntime(tmp_path):
    """The check above is not vacuous: the same run with validation imports onnxruntime."""
    model = tmp_path / "m.onnx"
    onnx.save(constant_scatter_model("ScatterElements", data=np.zeros((4, 4), np.float32),
                                     indices=np.zeros((1, 4), np.int64),
                                     updates=np.ones((1, 4), np.float32)), model)
    code, modules = _modules_after("fold", str(model), "-o", str(tmp_path / "out.onnx"))
    assert code in (0, None)
    assert "onnxruntime" in modules


SCHEMA_LOOKUPS_BEFORE_THE_FOLD = """
import json, sys
import onnx.defs
from scatter_rewrite.passes import fold
lookups, seen = [], []
get_schema = onnx.defs.get_schema
def counted(*args, **kwargs):
    lookups.append(args[0] if args else "?")
    return get_schema(*args, **kwargs)
onnx.defs.get_schema = counted
compute = fold.FoldPass._compute
def computing(self, *args, **kwargs):
    seen.append(list(lookups))
    return compute(self, *args, **kwargs)
fold.FoldPass._compute = computing
from scatter_rewrite.cli import main
sys.argv = ["scatter-rewrite", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(json.dumps(seen))
"""


def test_fold_looks_up_no_onnx_schema_before_it_computes(tmp_path):
    """onnx builds every op's schema on the first lookup (~7 MiB): before the fold's peak, that took
    the 64 MiB benchmark past twice the model's size. The scatter checks read spec.py's table."""
    model = tmp_path / "m.onnx"
    onnx.save(constant_scatter_model("ScatterElements", data=np.zeros((4, 4), np.float32),
                                     indices=np.zeros((1, 4), np.int64),
                                     updates=np.ones((1, 4), np.float32)), model)
    done = subprocess.run([sys.executable, "-c", SCHEMA_LOOKUPS_BEFORE_THE_FOLD, "fold", str(model), "-o",
                           str(tmp_path / "out.onnx"), "--no-validate"], capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == [[]]  # one scatter computed, no schema looked up before it


def test_help_and_version_import_neither_onnx_nor_the_passes():
    """The verbs' declaration the commands are built from (verbs.py) is read without onnx."""
    for argv in (["--help"], ["lower", "--help"], ["--version"]):
        code, modules = _modules_after(*argv)
        assert code in (0, None), argv
        assert not modules & {"onnx", "onnx_ir", "onnxruntime", "numpy"}, (argv, modules)


def test_fold_without_validation_loads_no_validation_sympy_or_rich_console(tmp_path):
    """What a fold's start-up no longer pays (benchmarks/RESULTS-fold.md): sympy, which onnx_ir
    imports for symbolic shape arithmetic (stood in for until used), validation's modules, and
    rich's console where stderr is no terminal."""
    model = tmp_path / "m.onnx"
    onnx.save(constant_scatter_model("ScatterElements", data=np.zeros((4, 4), np.float32),
                                     indices=np.zeros((1, 4), np.int64),
                                     updates=np.ones((1, 4), np.float32)), model)
    code, modules = _modules_after("fold", str(model), "-o", str(tmp_path / "out.onnx"),
                                   "--no-validate", full=True)
    assert code in (0, None) and (tmp_path / "out.onnx").exists()
    assert "onnx_ir" in modules
    assert not {m for m in modules if m.startswith("sympy.")}
    assert not {m for m in modules if m.startswith("scatter_rewrite.validate")}
    assert "rich.console" not in modules


def test_sympy_loads_when_a_rewrite_does_use_it():
    """The stand-in is the real sympy at first use: a symbolic dimension's arithmetic and the
    functions its expressions may call (which onnx_ir reads from sympy while it is imported: the
    forwarders) work, sympy's own classes are the real ones, and onnx_ir keeps its own loader."""
    script = ("import sys\n"
              "from scatter_rewrite.cli.lazy_imports import defer_imports\n"
              "defer_imports()\n"
              "import onnx_ir as ir, sympy\n"
              "assert 'sympy.core' not in sys.modules\n"
              "assert type(ir.__loader__).__module__ != 'scatter_rewrite.cli.lazy_imports'\n"
              "print(ir.SymbolicDim('N') * 2 + 1, sympy.Symbol('x') + 1)\n"
              "print(ir.SymbolicDim('max(N, 2) + min(M, 3) + floor(K / 2) + Mod(L, 4)') * 1)\n"
              "print(isinstance(sympy.Symbol('y'), sympy.Expr), ir.SymbolicDim(sympy.Symbol('y') * 3))\n"
              "import sympy.core.numbers\n"
              "print(type(sys.modules['sympy']).__name__)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "2*N + 1 x + 1", "Mod(L, 4) + floor(K/2) + Max(2, N) + Min(3, M)", "True 3*y", "module",
    ], done.stdout


def test_deferral_leaves_a_process_that_has_onnx_ir_as_it_is():
    """A process that imported onnx_ir (or sympy) before the command runs keeps the real modules."""
    script = ("import sys, onnx_ir\n"
              "from scatter_rewrite.cli.lazy_imports import defer_imports\n"
              "hooks = list(sys.meta_path)\n"
              "defer_imports()\n"
              "print(type(sys.modules['sympy']).__name__, sys.meta_path == hooks)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["module", "True"], done.stdout
