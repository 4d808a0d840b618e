"""What a command imports: the heavy modules a run does not need stay out of the process.

`fold --no-validate` must not load onnxruntime (validation's) nor pydantic (typer 0.29 and later
import it for every command): either takes the fold of a 64 MiB scatter past twice the model's
size in memory (benchmarks/RESULTS-fold.md).
"""

from __future__ import annotations

import json
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


def test_fold_without_validation_loads_neither_onnxruntime_nor_pydantic(tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(constant_scatter_model("ScatterElements", data=np.zeros((4, 4), np.float32),
                                     indices=np.zeros((1, 4), np.int64),
                                     updates=np.ones((1, 4), np.float32)), model)
    code, modules = _modules_after("fold", str(model), "-o", str(tmp_path / "out.onnx"), "--no-validate")
    assert code in (0, None)
    assert (tmp_path / "out.onnx").exists()
    assert "onnx" in modules  # it did run the fold
    assert "onnxruntime" not in modules
    assert "pydantic" not in modules


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
    """The stand-in is the real sympy at first use: a symbolic dimension's arithmetic works."""
    script = ("import sys\n"
              "from scatter_rewrite.cli.lazy_imports import defer_imports\n"
              "defer_imports()\n"
              "import onnx_ir as ir, sympy\n"
              "assert 'sympy.core' not in sys.modules\n"
              "print(ir.SymbolicDim('N') * 2 + 1, sympy.Symbol('x') + 1)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2*N", "+", "1", "x", "+", "1"], done.stdout
