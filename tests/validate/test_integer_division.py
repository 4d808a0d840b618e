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


def division_model(divisor: str, where: str = "main graph") -> onnx.ModelProto:
    """A GNN max aggregation whose destination index is ``INT64_MIN / divisor mod N``. ``divisor``:
    "input" (the graph input ``den``) or "computed" (``-1 - |den|``, which generation cannot see
    through: never 0, and -1 where ``den`` is 0). ``where`` the Div is: "main graph", "Loop body"
    (one trip, its operands from the main graph) or "function" (a model-local one)."""
    vi = oh.make_tensor_value_info
    const = lambda name, value: oh.make_node(  # noqa: E731
        "Constant", [], [name], value=oh.make_tensor(name, TensorProto.INT64, [], [value]))
    nodes = [const("lowest", int(LOWEST)), const("minus_one", -1), const("n", 8), const("axis", 1)]
    if divisor == "computed":
        nodes += [oh.make_node("Abs", ["den"], ["magnitude"]),
                  oh.make_node("Sub", ["minus_one", "magnitude"], ["divisor"])]
    operands = ["lowest", "divisor" if divisor == "computed" else "den"]
    functions = []
    if where == "main graph":
        nodes.append(oh.make_node("Div", operands, ["q"], name="index_div"))
    elif where == "Loop body":
        body = oh.make_graph(
            [oh.make_node("Identity", ["going"], ["going_on"]),
             oh.make_node("Div", operands, ["q_trip"], name="index_div")], "body",
            [vi("trip", TensorProto.INT64, []), vi("going", TensorProto.BOOL, [])],
            [vi("going_on", TensorProto.BOOL, []), vi("q_trip", TensorProto.INT64, [EDGES])])
        nodes += [const("trips", 1), const("first", 0),
                  oh.make_node("Loop", ["trips", ""], ["q_trips"], body=body, name="one_trip"),
                  oh.make_node("Gather", ["q_trips", "first"], ["q"], axis=0)]
    else:
        functions.append(oh.make_function(
            "local", "divide", ["a", "b"], ["c"], [oh.make_node("Div", ["a", "b"], ["c"], name="index_div")],
            [oh.make_opsetid("", 18)]))
        nodes.append(oh.make_node("divide", operands, ["q"], domain="local"))
    nodes += [oh.make_node("Mod", ["q", "n"], ["dst"]),
              oh.make_node("Unsqueeze", ["dst", "axis"], ["dst2"]),
              oh.make_node("Shape", ["msg"], ["msg_shape"]),
              oh.make_node("Expand", ["dst2", "msg_shape"], ["index"]),
              oh.make_node("ScatterElements", ["x", "index", "msg"], ["y"], axis=0, reduction="max")]
    graph = oh.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [8, 4]), vi("den", TensorProto.INT64, [EDGES]),
                                       vi("msg", TensorProto.FLOAT, [EDGES, 4])],
                          [vi("y", TensorProto.FLOAT, [8, 4])])
    imports = [oh.make_opsetid("", 18)] + [oh.make_opsetid("local", 1)] * bool(functions)
    return oh.make_model(graph, opset_imports=imports, ir_version=10, functions=functions)


WHERE = ["main graph", "Loop body", "function"]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("divisor", ["input", "computed"])
def test_validating_a_model_that_divides_by_an_input_never_traps(divisor, where, tmp_path: Path):
    """In a child process: a SIGFPE would take pytest down with it. (Before: "computed" died of
    SIGFPE, "input" ended UNRUNNABLE on onnxruntime's integer division by zero.)"""
    onnx.save(division_model(divisor, where), tmp_path / "m.onnx")
    done = subprocess.run([sys.executable, "-m", "scatter_rewrite.cli", "lower", "m.onnx", "--opset", "13",
                           "-o", "out.onnx"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode >= 0, f"killed by signal {-done.returncode}: {done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr
    # "input": generated positive; "computed": checked before each run, and the generated values
    # that would trap are replaced (den all 1: divisor -2) before onnxruntime runs the original
    assert done.returncode == 0, done.stderr
    assert "PASSED in onnxruntime" in done.stdout


@pytest.mark.parametrize("where", WHERE)
def test_the_check_finds_the_trapping_pair_and_nothing_else(where):
    model = division_model("computed", where)
    feeds = {"x": np.zeros((8, 4), np.float32), "den": np.full(EDGES, 5), "msg": np.zeros((EDGES, 4), np.float32)}
    assert trapping_division(model, feeds) is None
    feeds["den"][7] = 0  # INT64_MIN / (-1 - 0)
    said = trapping_division(model, feeds)
    assert said is not None and "Div 'index_div'" in said and str(LOWEST) in said
    place = {"main graph": "", "Loop body": " (in main graph > Loop 'one_trip' body)",
             "function": " (in function local::divide)"}[where]
    assert f"Div 'index_div'{place} would divide" in said, said
    model = division_model("input", where)
    assert trapping_division(model, feeds) is None  # a zero divisor: onnxruntime refuses it, it does not trap
    feeds["den"][:] = -1
    assert "Div 'index_div'" in trapping_division(model, feeds)
