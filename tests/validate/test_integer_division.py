"""Validation never runs an integer Div that traps: onnxruntime's int32/int64 Div of the type's
lowest value by -1 raises SIGFPE (x86's idiv), which kills the process, so a model whose index
arithmetic divides by an input-derived value must not be run there on generated (or given) inputs
that make it INT_MIN / -1. Generated divisor inputs are positive; a divisor computed from them is
checked in onnx.reference (NumPy's integer division does not trap) before onnxruntime runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto

from scatter_rewrite.validate.engines import trapping_division

LOWEST = np.iinfo(np.int64).min
EDGES = 4096  # each edge draws its own divisor: one that is -1 among them is all but certain


def division_model(divisor: str) -> onnx.ModelProto:
    """A GNN max aggregation whose destination index is ``INT64_MIN / divisor mod N``. ``divisor``:
    "input" (the graph input ``den``) or "computed" (``-1 - |den|``, which generation cannot see
    through: never 0, and -1 where ``den`` is 0)."""
    vi = oh.make_tensor_value_info
    const = lambda name, value: oh.make_node(  # noqa: E731
        "Constant", [], [name], value=oh.make_tensor(name, TensorProto.INT64, [], [value]))
    nodes = [const("lowest", int(LOWEST)), const("minus_one", -1), const("n", 8), const("axis", 1)]
    if divisor == "computed":
        nodes += [oh.make_node("Abs", ["den"], ["magnitude"]),
                  oh.make_node("Sub", ["minus_one", "magnitude"], ["divisor"])]
    nodes += [oh.make_node("Div", ["lowest", "divisor" if divisor == "computed" else "den"], ["q"],
                           name="index_div"),
              oh.make_node("Mod", ["q", "n"], ["dst"]),
              oh.make_node("Unsqueeze", ["dst", "axis"], ["dst2"]),
              oh.make_node("Shape", ["msg"], ["msg_shape"]),
              oh.make_node("Expand", ["dst2", "msg_shape"], ["index"]),
              oh.make_node("ScatterElements", ["x", "index", "msg"], ["y"], axis=0, reduction="max")]
    graph = oh.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [8, 4]), vi("den", TensorProto.INT64, [EDGES]),
                                       vi("msg", TensorProto.FLOAT, [EDGES, 4])],
                          [vi("y", TensorProto.FLOAT, [8, 4])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=10)


@pytest.mark.parametrize("divisor", ["input", "computed"])
def test_validating_a_model_that_divides_by_an_input_never_traps(divisor, tmp_path: Path):
    """In a child process: a SIGFPE would take pytest down with it. (Before: "computed" died of
    SIGFPE, "input" ended UNRUNNABLE on onnxruntime's integer division by zero.)"""
    onnx.save(division_model(divisor), tmp_path / "m.onnx")
    done = subprocess.run([sys.executable, "-m", "scatter_rewrite.cli", "lower", "m.onnx", "--opset", "13",
                           "-o", "out.onnx"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode >= 0, f"killed by signal {-done.returncode}: {done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr
    # "input": generated positive; "computed": checked before each run, and the generated values
    # that would trap are replaced (den all 1: divisor -2) before onnxruntime runs the original
    assert done.returncode == 0, done.stderr
    assert "PASSED in onnxruntime" in done.stdout


def test_the_check_finds_the_trapping_pair_and_nothing_else():
    model = division_model("computed")
    feeds = {"x": np.zeros((8, 4), np.float32), "den": np.full(EDGES, 5), "msg": np.zeros((EDGES, 4), np.float32)}
    assert trapping_division(model, feeds) is None
    feeds["den"][7] = 0  # INT64_MIN / (-1 - 0)
    said = trapping_division(model, feeds)
    assert said is not None and "Div 'index_div'" in said and str(LOWEST) in said
    model = division_model("input")
    assert trapping_division(model, feeds) is None  # a zero divisor: onnxruntime refuses it, it does not trap
    feeds["den"][:] = -1
    assert "Div 'index_div'" in trapping_division(model, feeds)
