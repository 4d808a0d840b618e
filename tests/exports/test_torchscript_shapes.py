"""TorchScript exports whose declared shapes are false, which onnxruntime refuses to load
(tests/data/torch/make_torchscript_shapes.py). The verbs that inline TorchScript's rank-0 If
wrapper make those shapes checkable: they correct them (and say so) and write a model onnxruntime
runs with PyTorch's results.

``scatter_amax_functions_ts18`` (``export_modules_as_functions``): one local function per module
type, whose ScatterElements reads its axis from the function's attribute, and shapes declared from
one call for the other. Each call also gets its own copy of the function.
``scatter_amax_feeds_add_ts18``: the Add after the wrapper is declared [10, 40] for [10, 4].
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_ir as ir
import pytest

import scatter_rewrite as sr
from scatter_rewrite.readiness import check
from scatter_rewrite.validate import run_onnxruntime
from tests.helpers.exports import load_export

DATA = Path(__file__).parents[1] / "data" / "torch"
NAME = "scatter_amax_functions_ts18"


def test_the_export_is_what_the_tests_below_are_about():
    model, feeds, _ = load_export(DATA, NAME)
    (function,) = model.functions
    (scatter,) = [n for n in function.node if n.op_type == "ScatterElements"]
    assert [a.ref_attr_name for a in scatter.attribute if a.name == "axis"] == ["inferred::ScatterElements_axis"]
    with pytest.raises(Exception, match="Inferred shape and existing shape differ"):
        run_onnxruntime(model.SerializeToString(), feeds)


VERBS = {
    "lower 13": lambda m, **kw: sr.lower(m, opset=13, **kw),
    "lower 17": lambda m, **kw: sr.lower(m, opset=17, **kw),
    "tensorrt 8.6": lambda m, **kw: sr.prepare_for_tensorrt(m, trt_version="8.6", **kw),
    "tensorrt 10": lambda m, **kw: sr.prepare_for_tensorrt(m, trt_version="10", **kw),
    "to_scatternd": lambda m, **kw: sr.to_scatternd(m, **kw),
}


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_gives_each_call_its_function_and_runs_in_onnxruntime(verb):
    model, feeds, pytorchs = load_export(DATA, NAME)
    torch_out = [pytorchs[o.name] for o in model.graph.output]
    result, outcome = VERBS[verb](model, validate=True, return_report=True)
    assert outcome.validation["max_abs_diff"] == 0.0  # (the original through onnx.reference: ORT refuses it)
    assert "onnx.reference" in outcome.validation["checked_against"]
    assert sorted(f.name for f in result.functions) == ["Agg", "Agg__2"]
    notes = [n for p in outcome.passes for n in p["notes"]]
    assert any("specialized per binding as Agg (inferred::ScatterElements_axis=0, 1 call(s)); "
               "Agg__2 (inferred::ScatterElements_axis=1, 1 call(s))" in n for n in notes), notes
    assert any("declared shape(s) the rewrite showed false, corrected" in n for n in notes), notes
    for got, expected in zip(run_onnxruntime(result.SerializeToString(), feeds), torch_out):
        np.testing.assert_array_equal(got, expected)
    if verb == "to_scatternd":  # (the wrapper inlined, so each copy's rank is known)
        assert [sorted({n.op_type for n in f.node} & {"ScatterElements", "ScatterND", "If"})
                for f in result.functions] == [["ScatterND"], ["ScatterND"]]
    if verb.startswith("tensorrt"):
        target = "tensorrt-" + verb.split()[1]
        assert not [f for f in check(ir.serde.deserialize_model(result), target) if f.blocked]
        if target == "tensorrt-8.6":  # (whose reductions must be lowered, for which the axis must be known)
            assert [f for f in check(ir.serde.deserialize_model(model), target) if f.blocked]


@pytest.mark.parametrize("verb", VERBS)
def test_an_op_declared_from_the_wrong_branch_of_the_wrapper_is_corrected(verb):
    model, feeds, pytorchs = load_export(DATA, "scatter_amax_feeds_add_ts18")
    torch_out = [pytorchs[o.name] for o in model.graph.output]
    with pytest.raises(Exception, match="Incompatible dimensions"):
        run_onnxruntime(model.SerializeToString(), feeds)
    result, outcome = VERBS[verb](model, validate=True, return_report=True)
    assert outcome.validation["max_abs_diff"] == 0.0
    notes = [n for p in outcome.passes for n in p["notes"]]
    assert any("'y' declared [10, 40], is [10, 4]" in n for n in notes), notes
    assert [d.dim_value for d in result.graph.output[0].type.tensor_type.shape.dim] == [10, 4]
    (got,) = run_onnxruntime(result.SerializeToString(), feeds)
    np.testing.assert_array_equal(got, torch_out[0])
    if verb == "to_scatternd":
        assert {n.op_type for n in result.graph.node} & {"ScatterElements", "ScatterND", "If"} == {"ScatterND"}


@pytest.mark.parametrize("mode", ["custom", "tensorrt-plugin"])
@pytest.mark.parametrize("name", [NAME, "scatter_amax_feeds_add_ts18"])
def test_custom_node_lowering_inlines_the_wrapper_too(name, mode):
    # A custom node needs no rank, but the wrapper left in place keeps the branches' declarations of
    # the other call's shapes, which onnx.checker and onnxruntime reject.
    model, feeds, pytorchs = load_export(DATA, name)
    torch_out = [pytorchs[o.name] for o in model.graph.output]
    result, outcome = sr.lower(model, opset=13, mode=mode, validate=True, return_report=True)
    assert outcome.validation["max_abs_diff"] == 0.0
    bodies = [result.graph.node] + [f.node for f in result.functions]
    assert not [n for body in bodies for n in body if n.op_type == "If"]
    assert [n.domain for body in bodies for n in body if n.op_type == "ScatterElements"] == \
        ["ai.onnx.contrib"] * (2 if name == NAME else 1)  # (one per call)
    # The shapes after a custom node are inferred too (in a function as in the main graph), and the
    # export's false ones corrected: [40] and [10, 40] for [10, 4].
    assert [[d.dim_value for d in o.type.tensor_type.shape.dim] for o in result.graph.output] == \
        [list(t.shape) for t in torch_out]
    notes = [n for p in outcome.passes for n in p["notes"]]
    assert any("declared shape(s) the rewrite showed false, corrected" in n for n in notes), notes
    for got, expected in zip(run_onnxruntime(result.SerializeToString(), feeds), torch_out):
        np.testing.assert_array_equal(got, expected)
