"""A short run of the public API and the command on whatever dependency releases are installed.

    python tests/api_smoke.py    # exit 0 when every check holds, 1 (with what failed) otherwise

Builds small scatter models with ``scatter_rewrite.testing``, runs ``upgrade``, ``lower``,
``prepare``, ``fold`` and ``check`` with validation on and off, and checks each result in
onnxruntime; then ``scatter-rewrite --version`` and one rewrite through the command. ``.ci/run``
runs it where pip installed the newest release of every dependency (beside transformers and
onnxscript), where the suite itself is not run. Uses only the installed package and its
dependencies, not pytest.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import scatter_rewrite
from scatter_rewrite.testing import constant_scatter_model, scatter_model

def op_types_in(model: onnx.ModelProto) -> set[str]:
    """Op types of the main graph and of every subgraph and local function (as tests/helpers/
    models.py's ``op_types``, which a script run from a fresh clone does not import)."""
    found: set[str] = set()

    def visit(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            found.add(node.op_type)
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    visit(attribute.g)
                for sub in attribute.graphs:
                    visit(sub)

    visit(model.graph)
    for function in model.functions:
        for node in function.node:
            found.add(node.op_type)
    return found


def feeds_for(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Inputs for the ``scatter_model`` graphs used here: data [4, 5], indices [2, 5] (repeated
    within each column, so that a reduction combines), updates [2, 5], and ``cond`` for an If."""
    rng = np.random.default_rng(0)
    feeds = {
        "data": rng.standard_normal((4, 5)).astype(np.float32),
        "indices": np.array([[0, 1, 2, 3, 0], [0, 1, 2, 3, 0]], np.int64),
        "updates": rng.standard_normal((2, 5)).astype(np.float32),
        "cond": np.array(True),
    }
    names = {i.name for i in model.graph.input}
    return {k: v for k, v in feeds.items() if k in names}


def run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def check_upgrade(validate: bool) -> None:
    # opset 10's Scatter in an If: onnxruntime runs the result, not the original
    original = scatter_model("Scatter", opset=10, where="if", axis=0)
    upgraded, outcome = scatter_rewrite.upgrade(original, opset=13, validate=validate,
                                                return_report=True)
    expect(isinstance(upgraded, onnx.ModelProto), f"upgrade returned {type(upgraded).__name__}")
    expect("Scatter" not in op_types_in(upgraded) and "ScatterElements" in op_types_in(upgraded),
           f"upgrade left {sorted(op_types_in(upgraded))}")
    expect(outcome.status == ("PASSED" if validate else "WRITTEN"), f"upgrade: {outcome.status}")
    expect(original.opset_import[0].version == 10, "upgrade changed the model it was given")
    onnx.checker.check_model(upgraded, full_check=True)
    run(upgraded, feeds_for(upgraded))


def check_lower(validate: bool) -> None:
    # a max reduction (opset 18) inside a Loop body, lowered to opset 13
    original = scatter_model("ScatterElements", opset=18, where="loop", axis=0, reduction="max")
    lowered = scatter_rewrite.lower(original, opset=13, validate=validate)
    expect({i.version for i in lowered.opset_import if i.domain in ("", "ai.onnx")} == {13},
           f"lower: opset {[(i.domain, i.version) for i in lowered.opset_import]}")
    feeds = feeds_for(original)
    expected, got = run(original, feeds), run(lowered, feeds)
    expect(all(np.array_equal(e, g) for e, g in zip(expected, got)),
           "lower: the lowered model's output differs from the original's")


def check_prepare(validate: bool) -> None:
    # an add reduction in a model-local function, written without any scatter
    original = scatter_model("ScatterElements", opset=18, where="function", axis=0,
                             reduction="add")
    prepared = scatter_rewrite.prepare(original, target="no-scatter", validate=validate)
    expect(not {"Scatter", "ScatterElements", "ScatterND"} & op_types_in(prepared),
           f"prepare no-scatter left {sorted(op_types_in(prepared))}")
    feeds = feeds_for(original)
    expected, got = run(original, feeds), run(prepared, feeds)
    expect(all(np.allclose(e, g, rtol=1e-5, atol=1e-6) for e, g in zip(expected, got)),
           "prepare: the prepared model's output differs from the original's")


def check_fold(validate: bool) -> None:
    # a constant scatter in an If branch: it becomes an initializer; y = x + scatter(...)
    data = np.arange(20, dtype=np.float32).reshape(4, 5)
    indices = np.array([[0, 1, 2, 3, 0], [0, 1, 2, 3, 0]], np.int64)
    updates = np.ones((2, 5), np.float32)
    original = constant_scatter_model(data=data, indices=indices, updates=updates, where="if",
                                      axis=0, reduction="add")
    folded = scatter_rewrite.fold(original, validate=validate)
    expect(not {"Scatter", "ScatterElements", "ScatterND"} & op_types_in(folded),
           f"fold left {sorted(op_types_in(folded))}")
    onnx.checker.check_model(folded, full_check=True)
    names = {i.name for i in original.graph.input}
    feeds = {"x": np.zeros((4, 5), np.float32), "cond": np.array(True)}
    feeds = {k: v for k, v in feeds.items() if k in names}
    expected, got = run(original, feeds), run(folded, feeds)
    expect(all(np.array_equal(e, g) for e, g in zip(expected, got)),
           "fold: the folded model's output differs from the original's")


def check_check() -> None:
    model = scatter_model("ScatterElements", opset=18, axis=0, reduction="max")
    blocked = scatter_rewrite.check(model, target="opset-13")
    expect(blocked.status == "FIXABLE", f"check opset-13: {blocked.status}")
    ready = scatter_rewrite.check(model, target="opset-18")
    expect(ready.status == "READY", f"check opset-18: {ready.status}")


def check_api_argument_errors() -> None:
    model = scatter_model("ScatterElements", opset=18, axis=0)
    try:
        scatter_rewrite.lower(12345)
    except TypeError:
        pass
    else:
        raise AssertionError("lower(12345) did not raise TypeError")
    try:
        scatter_rewrite.lower(model, validate="no")
    except TypeError:
        pass
    else:
        raise AssertionError('lower(model, validate="no") did not raise TypeError')


def check_command(folder: Path) -> None:
    # run in ``folder``, so that ``-m`` finds the installed package, not a source tree in the cwd
    command = [sys.executable, "-m", "scatter_rewrite"]
    # the console script installed beside this Python (the venv need not be activated)
    script = shutil.which("scatter-rewrite", path=str(Path(sys.executable).parent))
    expect(script is not None, f"no scatter-rewrite command beside {sys.executable}")
    version = subprocess.run([*command, "--version"], capture_output=True, text=True, cwd=folder)
    expect(version.returncode == 0 and scatter_rewrite.__version__ in version.stdout,
           f"--version: exit {version.returncode}: {version.stdout}{version.stderr}")
    installed = subprocess.run([script, "--version"], capture_output=True, text=True, cwd=folder)
    expect(installed.returncode == 0 and version.stdout == installed.stdout,
           f"scatter-rewrite --version: exit {installed.returncode}: {installed.stderr}")
    source, target = folder / "gnn_max.onnx", folder / "gnn_max.lowered.onnx"
    onnx.save(scatter_model("ScatterElements", opset=18, axis=0, reduction="max"), source)
    result = subprocess.run([script, "lower", str(source), "--opset", "13"],
                            capture_output=True, text=True, cwd=folder)
    expect(result.returncode == 0 and "PASSED" in result.stdout + result.stderr,
           f"scatter-rewrite lower: exit {result.returncode}: {result.stdout}{result.stderr}")
    expect("Traceback" not in result.stderr, f"scatter-rewrite lower printed a traceback: "
                                            f"{result.stderr}")
    lowered = onnx.load(target)
    expect({i.version for i in lowered.opset_import if i.domain in ("", "ai.onnx")} == {13},
           "scatter-rewrite lower: the written model is not at opset 13")
    bad = subprocess.run([script, "lower", str(folder / "missing.onnx")],
                         capture_output=True, text=True, cwd=folder)
    expect(bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1,
           f"scatter-rewrite lower of a missing file: not a one-line error, exit "
           f"{bad.returncode}: {bad.stderr}")


def main() -> int:
    checks = [(f"{name}(validate={validate})", lambda f=function, v=validate: f(v))
              for name, function in (("upgrade", check_upgrade), ("lower", check_lower),
                                     ("prepare", check_prepare), ("fold", check_fold))
              for validate in (True, False)]
    checks += [("check", check_check), ("API argument errors", check_api_argument_errors)]
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        checks.append(("command", lambda: check_command(Path(tmp))))
        for name, function in checks:
            try:
                function()
            except Exception:
                failed.append(name)
                print(f"api_smoke: {name} FAILED", file=sys.stderr)
                traceback.print_exc()
    versions = ", ".join(f"{m.__name__} {m.__version__}" for m in (onnx, ort, np))
    if failed:
        print(f"api_smoke: {len(failed)} of {len(checks)} failed ({versions}): {', '.join(failed)}",
              file=sys.stderr)
        return 1
    print(f"api_smoke: {len(checks)} checks passed ({versions})")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("COLUMNS", "100")
    sys.exit(main())
