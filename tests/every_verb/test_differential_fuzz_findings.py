"""Regressions for what a randomized differential run of every verb found.

Each model is the minimized reproducer of one finding; each test fails on the code before its fix
(except the custom-domain form of the first, which builds no Loop and always passed).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto as TP

import scatter_rewrite as sr
from scatter_rewrite.validate import plan_validation
from tests.helpers.models import vi
from tests.helpers.runs import validation_ort_run


def _in_a_function(body: list, inputs: list, outputs: list, function_outputs: list[str], opset: int) -> onnx.ModelProto:
    names = [i.name for i in inputs]
    function = oh.make_function("local", "F", names, function_outputs, body, opset_imports=[oh.make_opsetid("", opset)])
    graph = oh.make_graph([oh.make_node("F", names, [o.name for o in outputs], domain="local", name="call")],
                          "g", inputs, outputs)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset), oh.make_opsetid("local", 1)],
                          functions=[function])
    model.ir_version = 8 if opset < 21 else 10
    return model


@pytest.mark.parametrize("mode", ["standard", "custom", "tensorrt-plugin"])
def test_lower_chained_reductions_in_a_function(mode):
    # Two reductions chained in one function: lowering the first left its output untyped before the
    # second was lowered, whose Loop body then had an untyped input (SerdeError, an internal error).
    body = [oh.make_node("ScatterElements", ["d", "i0", "u0"], ["s0"], reduction="add", name="sc0"),
            oh.make_node("ScatterElements", ["s0", "i1", "u1"], ["s1"], reduction="max", name="sc1")]
    inputs = [vi("d", TP.FLOAT, [4]), vi("i0", TP.INT64, [3]), vi("u0", TP.FLOAT, [3]),
              vi("i1", TP.INT64, [3]), vi("u1", TP.FLOAT, [3])]
    model = _in_a_function(body, inputs, [vi("y", TP.FLOAT, [4])], ["s1"], 18)
    feeds = {"d": np.arange(4, dtype=np.float32), "i0": np.array([0, 0, -1]), "u0": np.ones(3, np.float32),
             "i1": np.array([1, 1, 2]), "u1": np.array([5, 7, -1], np.float32)}
    lowered, outcome = sr.lower(model, opset=13, mode=mode, validate=True, inputs=feeds, return_report=True)
    onnx.checker.check_model(lowered, full_check=True)
    assert len(outcome.passes[0]["rewritten"]) == 2, outcome.passes[0]
    function_ops = [n.op_type for n in lowered.functions[0].node]
    assert "ScatterElements" not in function_ops or mode != "standard"
    if mode == "standard":  # (the custom forms run with their registered kernels inside validation)
        np.testing.assert_array_equal(validation_ort_run(lowered, feeds)[0], np.array([2, 7, 2, 4], np.float32))


def _chain_in_loop() -> onnx.ModelProto:
    body = oh.make_graph(
        [oh.make_node("ScatterElements", ["carried_in", "i0", "u0"], ["s0"], axis=0, name="sc0"),
         oh.make_node("ScatterElements", ["s0", "i1", "u1"], ["s1"], axis=1, name="sc1"),
         oh.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [vi("iter", TP.INT64, []), vi("cond_in", TP.BOOL, []), vi("carried_in", TP.FLOAT, None)],
        [vi("cond_out", TP.BOOL, []), vi("s1", TP.FLOAT, None)])
    nodes = [oh.make_node("Constant", [], ["trip"], value=oh.make_tensor("t", TP.INT64, [], [2])),
             oh.make_node("Constant", [], ["true"], value=oh.make_tensor("b", TP.BOOL, [], [True])),
             oh.make_node("Loop", ["trip", "true", "data"], ["y"], body=body, name="loop")]
    graph = oh.make_graph(nodes, "g", [vi("data", TP.FLOAT, [3, 5]), vi("i0", TP.INT64, [1, 5]), vi("u0", TP.FLOAT, [1, 5]),
                                       vi("i1", TP.INT64, [3, 2]), vi("u1", TP.FLOAT, [3, 2])], [vi("y", TP.FLOAT, [3, 5])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    model.ir_version = 7
    return model


def _chain_in_function() -> onnx.ModelProto:
    body = [oh.make_node("ScatterND", ["d", "i0", "u0"], ["s0"], name="sc0"),
            oh.make_node("ScatterND", ["s0", "i1", "u1"], ["s1"], name="sc1")]
    inputs = [vi("d", TP.FLOAT, [6, 3]), vi("i0", TP.INT64, [2, 1]), vi("u0", TP.FLOAT, [2, 3]),
              vi("i1", TP.INT64, [4, 2]), vi("u1", TP.FLOAT, [4])]
    return _in_a_function(body, inputs, [vi("y", TP.FLOAT, [6, 3])], ["s1"], 13)


def _cast_constant_in_function() -> onnx.ModelProto:
    body = [oh.make_node("Constant", [], ["c"], value=oh.make_tensor("cv", TP.INT64, [5], [1, 2, 3, 4, 5])),
            oh.make_node("Cast", ["c"], ["d"], to=TP.UINT8),
            oh.make_node("ScatterElements", ["d", "i", "u"], ["s"], name="sc")]
    return _in_a_function(body, [vi("i", TP.INT64, [3]), vi("u", TP.UINT8, [3])], [vi("y", TP.UINT8, [5])], ["s"], 13)


@pytest.mark.parametrize("build", [_chain_in_loop, _chain_in_function, _cast_constant_in_function])
def test_validation_bounds_indices_of_scatters_whose_data_shape_inference_misses(build):
    # The second scatter of a chain in a Loop body or a function (and a scatter on a Cast constant
    # in a function) reads data whose shape ONNX shape inference does not give: its index inputs got
    # no contract, out-of-range values were generated, and every validated verb blamed the model
    # ("index 14 is out of range").
    model = build()
    onnx.checker.check_model(model, full_check=True)
    for seed in range(5):
        plan = plan_validation(ir.serde.deserialize_model(model), seed=seed)
        validation_ort_run(model, plan.inputs)  # the original runs on them: every index is in range
    converted = sr.to_scatternd(model, validate=True)
    onnx.checker.check_model(converted, full_check=True)


@pytest.mark.parametrize("elem_type, values", [(TP.BOOL, [False, True]), (TP.INT32, [3, -4]), (TP.UINT8, [7, 9])])
@pytest.mark.parametrize("verb", ["upgrade", "lower"])
def test_opset_move_with_an_untyped_non_float_constant(verb, elem_type, values):
    # A Reshape (or a scatter) reading a Constant's untyped output of a non-float type: the one-node
    # model handed to onnx.version_converter declared that input float beside its own bool/int
    # initializer, and the converter refused ('Inferred elem type differs'): ConversionError on a
    # valid model moving from opset 13 to 16.
    nodes = [oh.make_node("Constant", [], ["f"], value=oh.make_tensor("fv", elem_type, [2], values)),
             oh.make_node("Constant", [], ["sh"], value=oh.make_tensor("shv", TP.INT64, [1], [2])),
             oh.make_node("Reshape", ["f", "sh"], ["r"]),
             oh.make_node("Constant", [], ["i"], value=oh.make_tensor("iv", TP.INT64, [1], [1])),
             oh.make_node("Slice", ["r", "i", "sh"], ["r1"]),
             oh.make_node("ScatterElements", ["x", "i", "r1"], ["y"], name="sc")]
    graph = oh.make_graph(nodes, "g", [vi("x", elem_type, [2])], [vi("y", elem_type, [2]), vi("r", elem_type, [2])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model, full_check=True)
    result = getattr(sr, verb)(model, opset=16, validate=True)
    onnx.checker.check_model(result, full_check=True)
    assert {o.domain: o.version for o in result.opset_import}[""] == 16


@pytest.mark.parametrize("where", ["if", "loop"])
def test_custom_float16_form_in_a_subgraph_runs_in_onnxruntime(where):
    # The custom node computes on float32 between Casts (onnxruntime-extensions' Python ops take no
    # float16), so the lowered If/Loop body loads and runs in onnxruntime, and validation compares
    # it there with the original (onnxruntime runs float16 min).
    from scatter_rewrite.testing import scatter_model

    model = scatter_model("ScatterElements", opset=18, data_shape=(3, 4), indices_shape=(2, 4),
                          data_type=TP.FLOAT16, where=where, axis=0, reduction="min")
    lowered, outcome = sr.lower(model, opset=13, mode="custom", validate=True, return_report=True)
    onnx.checker.check_model(lowered, full_check=True)
    checked = outcome.validation["checked_against"]
    assert checked == "onnxruntime on the original model", checked


def test_validation_bounds_indices_of_a_function_scatter_whose_data_is_built_there():
    """The data is a Reshape of constants inside the function, where ONNX shape inference does not
    go: its shape comes from inferring the body with the call's input types (out-of-range indices
    were generated and the valid model refused with IndexOutOfRangeError)."""
    body = [oh.make_node("Constant", [], ["f"], value=oh.make_tensor("fv", TP.FLOAT, [6], [0, 1, 2, 3, 4, 5])),
            oh.make_node("Constant", [], ["sh"], value=oh.make_tensor("shv", TP.INT64, [2], [2, 3])),
            oh.make_node("Reshape", ["f", "sh"], ["d"]),
            oh.make_node("ScatterElements", ["d", "i", "u"], ["s"], axis=1)]
    model = _in_a_function(body, [vi("i", TP.INT64, [2, 2]), vi("u", TP.FLOAT, [2, 2])],
                            [vi("y", TP.FLOAT, [2, 3])], ["s"], 13)
    for seed in range(5):
        indices = plan_validation(ir.serde.deserialize_model(model), seed=seed).inputs["i"]
        assert indices.min() >= -3 and indices.max() < 3
    out, outcome = sr.to_scatternd(model, validate=True, return_report=True)
    assert outcome.validation["max_abs_diff"] == 0.0
