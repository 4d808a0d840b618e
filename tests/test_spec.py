"""Scatter nodes that break their op's schema (spec.py): every verb says so in one user-error line
naming the node, and ``check`` blocks them, instead of an internal error from whatever read them."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx.defs
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto
from onnx import numpy_helper as nh

import scatter_rewrite as sr
from scatter_rewrite.readiness import check
from scatter_rewrite.errors import InvalidModelError
from scatter_rewrite.graph import SCATTER_OPS
from scatter_rewrite.passes.fold import FoldPass
from scatter_rewrite.spec import check_scatter_proto
from tests.helpers.cli import invoke

# op -> (opset, data, second input, third input, valid attributes)
_OPS = {
    "ScatterElements": (18, np.arange(12, dtype=np.float32).reshape(3, 4), np.array([[0, 1], [2, 0]], np.int64),
                        np.full((2, 2), -1, np.float32), {"axis": 1, "reduction": "add"}),
    "ScatterND": (18, np.arange(12, dtype=np.float32).reshape(3, 4), np.array([[0, 1], [2, 0]], np.int64),
                  np.full((2,), -1, np.float32), {"reduction": "add"}),
    "Scatter": (10, np.arange(12, dtype=np.float32).reshape(3, 4), np.array([[0, 1], [2, 0]], np.int64),
                np.full((2, 2), -1, np.float32), {"axis": 1}),
    # (past_cache, update, write_indices)
    "TensorScatter": (24, np.zeros((2, 4, 3), np.float32), np.ones((2, 1, 3), np.float32), np.array([1, 0], np.int64),
                      {"axis": 1, "mode": "circular"}),
}

# name -> (op, how the node is broken, what the error says)
MALFORMED = {
    "axis float": ("ScatterElements", {"axis": 1.0}, "attribute 'axis' is FLOAT, where ScatterElements-18 takes INT"),
    "axis string": ("ScatterElements", {"axis": "1"}, "attribute 'axis' is STRING, where ScatterElements-18 takes INT"),
    "axis ints": ("Scatter", {"axis": [1]}, "attribute 'axis' is INTS, where Scatter-9 takes INT"),
    "reduction int": ("ScatterND", {"reduction": 3}, "attribute 'reduction' is INT, where ScatterND-18 takes STRING"),
    "mode int": ("TensorScatter", {"mode": 1}, "attribute 'mode' is INT, where TensorScatter-24 takes STRING"),
    "unknown attribute": ("ScatterElements", {"foo": 1},
                          "unknown attribute 'foo' (ScatterElements-18 has axis, reduction)"),
    "two inputs": ("ScatterElements", {"inputs": 2},
                   "2 input(s), where ScatterElements-18 takes 3 (data, indices, updates)"),
    "four inputs": ("TensorScatter", {"inputs": 4},
                    "4 input(s), where TensorScatter-24 takes 2 to 3 (past_cache, update, write_indices)"),
    "two outputs": ("ScatterND", {"outputs": 2}, "2 output(s), where ScatterND-18 has 1"),
    "empty updates": ("ScatterElements", {"empty": 2},
                      "input 2 (updates) is empty, where ScatterElements-18 requires it"),
    "empty past_cache": ("TensorScatter", {"empty": 0},
                         "input 0 (past_cache) is empty, where TensorScatter-24 requires it"),
    # values the schema's types allow and the op does not define
    "reduction unknown": ("ScatterND", {"reduction": "sum"},
                          "reduction 'sum' is not one of none, add, mul, max, min (the ONNX spec defines no other)"),
    "mode unknown": ("TensorScatter", {"mode": "ring"},
                     "mode 'ring' is not one of linear, circular (onnxruntime rejects it)"),
    "axis out of range": ("ScatterElements", {"axis": -3},
                          "axis=-3 is out of range for rank 2 (allowed -2..1; onnxruntime rejects it)"),
    "batch axis": ("TensorScatter", {"axis": -3}, "axis=-3 is the batch dimension 0"),
}


def malformed_model(name: str, constant: bool) -> tuple[onnx.ModelProto, str]:
    """One scatter node named 'sc', broken as MALFORMED[name] says, whose inputs are initializers
    (``constant``) or graph inputs; and the error it should give."""
    op, broken, message = MALFORMED[name]
    opset, *arrays, attributes = _OPS[op]
    names = ["d", "i", "u"]
    broken = dict(broken)
    count, empty, outputs = broken.pop("inputs", 3), broken.pop("empty", None), broken.pop("outputs", 1)
    inputs = (names + names)[:count]
    if empty is not None:
        inputs[empty] = ""
    values = [nh.from_array(a, n) for n, a in zip(names, arrays)]
    graph_inputs = [] if constant else [oh.make_tensor_value_info(v.name, v.data_type, list(v.dims)) for v in values]
    outs = ["y", "z"][:outputs]
    node = oh.make_node(op, inputs, outs, name="sc", **{**attributes, **broken})
    graph = oh.make_graph([node], "g", graph_inputs,
                          [oh.make_tensor_value_info(o, TensorProto.FLOAT, list(arrays[0].shape)) for o in outs],
                          initializer=values if constant else [])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 11 if opset > 21 else 10
    return model, f"{op} 'sc' (opset {opset}, main graph): {message}"


def assert_one_user_error(result, *needles: str) -> None:
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scatter-rewrite: error:"), result.stderr
    assert "internal error" not in lines[0] and "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]


VERBS = [["upgrade"], ["upgrade", "--no-validate"], ["fold"], ["fold", "--no-validate"], ["lower"],
         ["lower", "--mode", "custom", "--no-validate"], ["tensorrt", "--trt-version", "8.6"],
         ["tensorrt", "--trt-version", "10", "--no-validate"]]


@pytest.mark.parametrize("constant", [True, False], ids=["constant", "graph inputs"])
@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_every_verb_names_the_malformed_node(tmp_path, name, constant):
    model, expected = malformed_model(name, constant)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    for verb in VERBS:
        out = tmp_path / "out.onnx"
        result = invoke(verb[0], path, "-o", out, *verb[1:])
        assert_one_user_error(result, expected, "fix the exporter or the model")
        assert not out.exists(), verb


@pytest.mark.parametrize("validate", [False, True])
@pytest.mark.parametrize("name", ["axis float", "two inputs", "two outputs", "empty updates"])
def test_the_python_api_raises_invalid_model_error(name, validate):
    model, expected = malformed_model(name, constant=True)
    for verb in (sr.upgrade, sr.fold, sr.lower, sr.to_scatternd, sr.prepare_for_tensorrt):
        with pytest.raises(InvalidModelError) as raised:
            verb(model, validate=validate)
        assert expected in str(raised.value), verb


def test_a_pass_run_on_its_own_refuses_the_node_too():
    """The passes are onnx_ir passes: used without the pipeline, they check before reading a node."""
    model, expected = malformed_model("axis float", constant=True)
    with pytest.raises(InvalidModelError, match="attribute 'axis' is FLOAT"):
        FoldPass()(ir.serde.deserialize_model(model))


def test_nested_and_specialized_nodes_are_named_where_they_are():
    base, _ = malformed_model("axis float", constant=True)
    scatter = base.graph.node[0]
    then = oh.make_graph([scatter], "then", [], [oh.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])])
    other = oh.make_graph([oh.make_node("Identity", ["d"], ["e"])], "else", [],
                          [oh.make_tensor_value_info("e", TensorProto.FLOAT, [3, 4])])
    branch = oh.make_node("If", ["c"], ["out"], name="cond", then_branch=then, else_branch=other)
    nested = oh.make_model(oh.make_graph([branch], "g", [oh.make_tensor_value_info("c", TensorProto.BOOL, [])],
                                         [oh.make_tensor_value_info("out", TensorProto.FLOAT, [3, 4])],
                                         initializer=list(base.graph.initializer)),
                           opset_imports=[oh.make_opsetid("", 18)], ir_version=10)
    where = r"ScatterElements 'sc' \(opset 18, main graph > If 'cond' then_branch\)"
    with pytest.raises(InvalidModelError, match=where + ": attribute 'axis' is FLOAT"):
        sr.fold(nested, validate=True)

    # axis = @ax in a function, and a call binding ax=1.0: the copy the call gets is checked as any scatter.
    inner = oh.make_node("ScatterElements", ["d", "i", "u"], ["o"], name="inner", reduction="add")
    inner.attribute.append(oh.make_attribute_ref("axis", onnx.AttributeProto.INT))
    inner.attribute[-1].ref_attr_name = "ax"
    function = oh.make_function("local", "F", ["d", "i", "u"], ["o"], [inner], [oh.make_opsetid("", 18)],
                                attributes=["ax"])
    call = oh.make_node("F", ["d", "i", "u"], ["y"], domain="local", ax=1.0)
    called = oh.make_model(oh.make_graph([call], "g", [], [oh.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
                                         initializer=list(base.graph.initializer)),
                           opset_imports=[oh.make_opsetid("", 18), oh.make_opsetid("local", 1)],
                           functions=[function], ir_version=10)
    for verb in (sr.lower, sr.to_scatternd, lambda m: sr.prepare_for_tensorrt(m, trt_version="8.6")):
        with pytest.raises(InvalidModelError, match=r"ScatterElements 'inner' \(opset 18, function local::F\): "
                                                     "attribute 'axis' is FLOAT"):
            verb(called)


def test_schema_valid_nodes_are_not_flagged():
    """Optional inputs omitted, defaults left out, a reference to a function attribute of the right
    type: all valid."""
    no_write_indices = oh.make_node("TensorScatter", ["d", "u"], ["y"])
    bare = oh.make_node("ScatterElements", ["d", "i", "u"], ["y"])
    referenced = oh.make_node("ScatterElements", ["d", "i", "u"], ["y"])
    referenced.attribute.append(oh.make_attribute_ref("axis", onnx.AttributeProto.INT))
    for node, opset in ((no_write_indices, 24), (bare, 11), (referenced, 18)):
        check_scatter_proto(node, opset, "main graph")  # raises if not
    broken = oh.make_node("ScatterElements", ["d", "i", "u"], ["y"], reduction="add")  # (reduction: from 16)
    with pytest.raises(InvalidModelError, match=r"unknown attribute 'reduction' \(ScatterElements-13 has axis\)"):
        check_scatter_proto(broken, 13, "main graph")
    # and through a verb: TensorScatter without write_indices folds
    cache, update = np.zeros((2, 4, 3), np.float32), np.ones((2, 1, 3), np.float32)
    model = oh.make_model(oh.make_graph([no_write_indices], "g", [],
                                        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 3])],
                                        initializer=[nh.from_array(cache, "d"), nh.from_array(update, "u")]),
                          opset_imports=[oh.make_opsetid("", 24)], ir_version=11)
    folded = sr.fold(model, validate=True)
    assert [n.op_type for n in folded.graph.node] == []


# ---- check: the node is blocked with the reason, no fix; the others are judged as before ----------

@pytest.mark.parametrize("target", ["tensorrt-10", "tensorrt-8.6", "opset-13", "opset-24"])
@pytest.mark.parametrize("name", ["reduction unknown", "axis out of range", "mode unknown"])
def test_check_blocks_an_undefined_attribute_value(name, target):
    model, expected = malformed_model(name, constant=False)
    (finding,) = check(ir.serde.deserialize_model(model), target)
    assert finding.blocked and finding.fix is None
    assert finding.blockers == [f"malformed: {expected.split(': ', 1)[1]}"]


@pytest.mark.parametrize("target", ["tensorrt-10", "tensorrt-8.6", "opset-13", "opset-24"])
@pytest.mark.parametrize("name", ["axis float", "reduction int", "two inputs", "two outputs", "empty updates",
                                  "unknown attribute"])
def test_check_blocks_a_malformed_node_with_the_reason(name, target):
    model, expected = malformed_model(name, constant=False)
    problem = expected.split(": ", 1)[1]
    (finding,) = check(ir.serde.deserialize_model(model), target)
    assert finding.blocked and finding.fix is None
    assert finding.blockers == [f"malformed: {problem} (onnx.checker and onnxruntime reject it)"]
    assert finding.reduction in (None, "add")  # never the malformed value (reduction=3 read as a string)


def test_check_cli_reports_the_malformed_node_among_the_others(tmp_path):
    model, _ = malformed_model("reduction int", constant=False)
    good = oh.make_node("ScatterND", ["d", "i", "u"], ["y2"], name="good")
    model.graph.node.append(good)
    model.graph.output.append(oh.make_tensor_value_info("y2", TensorProto.FLOAT, [3, 4]))
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    result = invoke("check", path, "--target", "tensorrt-10", "--json")
    # onnx.checker names the node: the model is INVALID, with no rows (none of it is ready)
    assert_one_user_error(result, "fails onnx.checker", "'sc : reduction'")
    (report,) = json.loads(result.stdout)["models"]
    assert report["status"] == "INVALID" and report["findings"] == [] and report["fix"] is None
    # the finding, as check() reads the node (scatter_rewrite.check on a model the checker passes)
    by_node = {f.node: f for f in check(ir.serde.deserialize_model(model), "tensorrt-10")}
    bad = by_node["ScatterND 'sc' (opset 18, main graph)"]
    assert bad.blocked and bad.fix is None and "attribute 'reduction' is INT" in bad.blockers[0]
    assert by_node["ScatterND 'good' (opset 18, main graph)"].blocked is False


@pytest.mark.parametrize("op", sorted(SCATTER_OPS))
def test_the_scatter_forms_table_is_what_onnx_defs_says_at_every_opset(op):
    """spec.py reads the scatter ops' schemas from its own table (onnx's schema registry costs ~7 MiB
    on first use, before the fold's peak): every opset it covers must read as onnx.defs does."""
    from scatter_rewrite import spec

    for opset in range(1, min(spec.FORMS_CHECKED_UP_TO, onnx.defs.onnx_opset_version()) + 1):
        for exact in (False, True):
            assert spec._form(op, opset, exact) == spec.form_from_schema(op, opset, exact), (op, opset, exact)
