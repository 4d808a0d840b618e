"""Generated inputs that reach an op's argument (an axis, a shape, class indices, pads, a divisor)
get values the op takes, so that the original model runs on them as on a real input; in the main
graph, in a Loop body and in a model-local function."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto

from scatter_rewrite.model_io import deserialize
from scatter_rewrite.validate.engines import run_onnxruntime
from scatter_rewrite.validate.inputs import plan_validation

F, I = TensorProto.FLOAT, TensorProto.INT64


def one_op(op: str, data_shape: list, argument: tuple[str, int, list], opset: int = 18,
           extra: list | None = None, attributes: dict | None = None,
           data_type: int = F) -> onnx.ModelProto:
    """``op`` on data ``x`` and the graph input ``a`` (its name, type, shape) at its position."""
    name, elem, shape = argument
    inputs = ["x", name] + (extra or [])
    graph = oh.make_graph(
        [oh.make_node(op, inputs, ["y"], **(attributes or {}))], op.lower(),
        [oh.make_tensor_value_info("x", data_type, data_shape),
         oh.make_tensor_value_info(name, elem, shape)],
        [oh.make_tensor_value_info("y", data_type, None)])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def planned_and_run(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The planned inputs, after checking the original runs on them in onnxruntime."""
    plan = plan_validation(deserialize(model))
    run_onnxruntime(model.SerializeToString(), plan.inputs)
    return plan.inputs


CASES = {
    "cumsum_axis": (one_op("CumSum", [2, 3, 4], ("axis", I, [])), "axis"),
    "squeeze_axes": (one_op("Squeeze", [3, 1, 4, 1], ("axes", I, [2])), "axes"),
    "unsqueeze_axes": (one_op("Unsqueeze", [3, 4], ("axes", I, [3])), "axes"),
    "reduce_sum_axes": (one_op("ReduceSum", [2, 3, 4], ("axes", I, [2])), "axes"),
    "reduce_max_axes": (one_op("ReduceMax", [2, 3, 4], ("axes", I, [3])), "axes"),
    "reshape_shape": (one_op("Reshape", [2, 3, 4], ("shape", I, [3])), "shape"),
    "reshape_other_rank": (one_op("Reshape", [2, 3, 4], ("shape", I, [2])), "shape"),
    "pad_pads": (one_op("Pad", [3, 4], ("pads", I, [4]), attributes={"mode": "reflect"}), "pads"),
    "mod_divisor": (one_op("Mod", [3, 4], ("b", TensorProto.INT32, [3, 4]),
                           data_type=TensorProto.INT32), "b"),
    "nll_target": (one_op("NegativeLogLikelihoodLoss", [3, 5], ("t", I, [3])), "t"),
    "softmax_ce_target": (one_op("SoftmaxCrossEntropyLoss", [3, 5, 2], ("t", I, [3, 2])), "t"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_original_runs_on_generated_arguments(case):
    model, argument = CASES[case]
    inputs = planned_and_run(model)
    assert argument in inputs


def test_axes_are_unique_in_range_and_some_negative():
    inputs = planned_and_run(one_op("ReduceSum", [2, 3, 4, 5], ("axes", I, [4])))["axes"]
    normalized = inputs % 4
    assert sorted(normalized.tolist()) == [0, 1, 2, 3]
    squeezed = planned_and_run(one_op("Squeeze", [3, 1, 4, 1], ("axes", I, [2])))["axes"] % 4
    assert sorted(squeezed.tolist()) == [1, 3]  # (the dims of size 1)


def test_class_indices_lie_within_the_classes():
    target = planned_and_run(one_op("NegativeLogLikelihoodLoss", [40, 5], ("t", I, [40])))["t"]
    assert target.min() >= 0 and target.max() < 5


def test_slice_axes_and_steps():
    graph = oh.make_graph(
        [oh.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])], "slice",
        [oh.make_tensor_value_info("x", F, [4, 6]),
         oh.make_tensor_value_info("starts", I, [2]), oh.make_tensor_value_info("ends", I, [2]),
         oh.make_tensor_value_info("axes", I, [2]), oh.make_tensor_value_info("steps", I, [2])],
        [oh.make_tensor_value_info("y", F, None)])
    inputs = planned_and_run(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)]))
    assert sorted((inputs["axes"] % 2).tolist()) == [0, 1] and (inputs["steps"] != 0).all()


def test_an_axis_read_in_a_loop_body():
    body = oh.make_graph(
        [oh.make_node("CumSum", ["x_in", "axis"], ["x_out"]),
         oh.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [oh.make_tensor_value_info("i", I, []), oh.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         oh.make_tensor_value_info("x_in", F, [2, 3, 4])],
        [oh.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         oh.make_tensor_value_info("x_out", F, [2, 3, 4])])
    graph = oh.make_graph(
        [oh.make_node("Constant", [], ["trip"], value=oh.make_tensor("trip", I, [], [2])),
         oh.make_node("Constant", [], ["cond"], value=oh.make_tensor("cond", TensorProto.BOOL, [], [1])),
         oh.make_node("Loop", ["trip", "cond", "x"], ["y"], body=body)], "loop",
        [oh.make_tensor_value_info("x", F, [2, 3, 4]), oh.make_tensor_value_info("axis", I, [])],
        [oh.make_tensor_value_info("y", F, [2, 3, 4])])
    inputs = planned_and_run(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 14)]))
    assert -3 <= int(inputs["axis"]) < 3


def test_an_axis_read_in_a_local_function():
    function = oh.make_function(
        "local", "cumulate", ["d", "k"], ["o"], [oh.make_node("CumSum", ["d", "k"], ["o"])],
        [oh.make_opsetid("", 14)])
    graph = oh.make_graph(
        [oh.make_node("cumulate", ["x", "axis"], ["y"], domain="local")], "calls",
        [oh.make_tensor_value_info("x", F, [2, 3, 4, 5]), oh.make_tensor_value_info("axis", I, [])],
        [oh.make_tensor_value_info("y", F, [2, 3, 4, 5])])
    model = oh.make_model(graph, functions=[function],
                          opset_imports=[oh.make_opsetid("", 14), oh.make_opsetid("local", 1)])
    inputs = planned_and_run(model)
    assert -4 <= int(inputs["axis"]) < 4
