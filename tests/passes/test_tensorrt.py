"""The tensorrt flow: upgrade, fold, lower TensorScatter, make every scatter TensorRT-ready."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto

import scatter_rewrite as sr
from scatter_rewrite.readiness import check
from scatter_rewrite.graph import attr, iter_nodes
from scatter_rewrite.passes.tensorrt import TensorRTPass
from scatter_rewrite.passes.tensorrt_violations import tensorrt_violations
from scatter_rewrite.verbs import tensorrt_passes
from scatter_rewrite.testing import scatter_model
from tests.helpers.models import scatter_nd_model, scatter_nodes, tensor_scatter_model
from tests.helpers.runs import ort_run
from tests.helpers.cli import invoke
from tests.helpers.exports import load_export


def prepare(model, version, **kw):
    out, outcome = sr.prepare_for_tensorrt(model, trt_version=version, validate=True, return_report=True, **kw)
    onnx.checker.check_model(out, full_check=True)
    return out, outcome


def pass_report(outcome, name="tensorrt") -> dict:
    (report,) = [p for p in outcome.passes if p["pass"] == name]
    return report


# ---- reduction none: ScatterElements -> ScatterND, the attribute dropped ------------------------------

@pytest.mark.parametrize("version", ["8.6", "10"])
@pytest.mark.parametrize("where", ["main", "if", "loop", "function"])
def test_none_becomes_scatternd_everywhere(version, where):
    model = scatter_model("ScatterElements", opset=13, where=where, axis=-1, indices_type=TensorProto.INT32)
    out, outcome = prepare(model, version)
    nodes = scatter_nodes(out)
    assert nodes and all(n.op_type == "ScatterND" and not n.attributes for n in nodes)
    assert outcome.validation["max_abs_diff"] == 0.0
    assert not any(f.blocked for f in check(ir.serde.deserialize_model(out), f"tensorrt-{version}"))


@pytest.mark.parametrize("version", ["8.6", "10"])
def test_more_updates_than_rows_passes_through_nd(version):
    """IScatterLayer's ELEMENT mode asserts indices.d[i] <= data.d[i] (NVIDIA/TensorRT#3650); ND mode does not."""
    model = scatter_model("ScatterElements", opset=18, data_shape=(3, 8), indices_shape=(3, 6), axis=1)
    out, _ = prepare(model, version)
    (node,) = scatter_nodes(out)
    assert node.op_type == "ScatterND"


@pytest.mark.parametrize("version", ["8.6", "10"])
def test_explicit_none_dropped(version):
    out, outcome = prepare(scatter_nd_model("none", indices_shape=(3, 1), updates_shape=(3, 5, 3)), version)
    (node,) = scatter_nodes(out)
    assert node.op_type == "ScatterND" and "reduction" not in node.attributes
    assert 'reduction="none" dropped' in pass_report(outcome)["rewritten"][0]["detail"]


def test_deprecated_scatter_upgraded_then_scatternd():
    out, outcome = prepare(scatter_model("Scatter", opset=10, axis=1), "8.6")
    assert [n.op_type for n in scatter_nodes(out)] == ["ScatterND"]
    assert pass_report(outcome, "upgrade")["rewritten"]


def test_constant_scatter_is_folded():
    model = scatter_model("ScatterElements", opset=18, data_shape=(4, 3), indices_shape=(1, 3))
    for name, array in (("indices", np.array([[0, 3, 1]], np.int64)), ("updates", np.ones((1, 3), np.float32))):
        model.graph.initializer.append(onnx.numpy_helper.from_array(array, name))
    del model.graph.input[1:]
    add = oh.make_node("Add", ["output", "data"], ["sum"])
    model.graph.node.append(add)
    model.graph.output[0].name = "sum"
    model.graph.node[0].input[0] = "base"
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.zeros((4, 3), np.float32), "base"))
    out, outcome = prepare(model, "10")
    assert scatter_nodes(out) == []
    assert pass_report(outcome, "fold")["rewritten"]


# ---- reductions on TensorRT 10 -----------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_trt10_scatter_elements_reduction_kept_with_int64_indices(reduction):
    model = scatter_model("ScatterElements", opset=18, data_shape=(4, 5), indices_shape=(7, 5), reduction=reduction,
                          indices_type=TensorProto.INT32, data_type=TensorProto.INT32)
    out, outcome = prepare(model, "10")
    (node,) = scatter_nodes(out)
    assert node.op_type == "ScatterElements" and attr(node, "reduction") == reduction
    assert node.inputs[1].producer().op_type == "Cast"  # the plugin takes INT64 indices only
    assert outcome.validation["max_abs_diff"] == 0.0


def test_trt10_int64_reduction_needs_nothing():
    model = ir.serde.deserialize_model(scatter_model("ScatterElements", opset=18, reduction="add"))
    result = TensorRTPass("10")(model)
    assert not result.modified and not result.skipped


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("shapes", [
    ((4, 5, 3), (6, 2), (6, 3)),  # k=2: rows are the last dim
    ((4, 5, 3), (2, 3, 1), (2, 3, 5, 3)),  # k=1, batched indices
    ((4, 5), (7, 2), (7,)),  # k=rank: single elements
])
def test_trt10_scatternd_reduction_becomes_scatter_elements(reduction, shapes):
    data_shape, indices_shape, updates_shape = shapes
    model = scatter_nd_model(reduction, data_shape=data_shape, indices_shape=indices_shape,
                             updates_shape=updates_shape, data_type=TensorProto.FLOAT)
    out, outcome = prepare(model, "10")
    (node,) = scatter_nodes(out)
    assert node.op_type == "ScatterElements" and attr(node, "axis") == 0 and attr(node, "reduction") == reduction
    assert "checked_against" in outcome.validation
    assert not any(f.blocked for f in check(ir.serde.deserialize_model(out), "tensorrt-10"))


def test_trt10_scatternd_reduction_dynamic_shapes():
    model = scatter_nd_model("add", data_shape=("N", 5, 3), indices_shape=("M", 2), updates_shape=("M", 3),
                             data_type=TensorProto.INT64)
    out, outcome = prepare(model, "10")
    assert [n.op_type for n in scatter_nodes(out)] == ["ScatterElements"]
    assert outcome.validation["max_abs_diff"] == 0.0


def test_trt10_scatternd_reduction_in_function():
    model = scatter_model("ScatterND", opset=18, data_shape=(4, 5), indices_shape=(3, 1), updates_shape=(3, 5),
                          reduction="max", where="function")
    out, outcome = prepare(model, "10")
    # the function's values are untyped; the call site gives the index tuple length (borrowed for the pass)
    (done,) = pass_report(outcome)["rewritten"]
    assert "function local::ScatterFn" in done["node"] and "ScatterElements(axis=0, reduction=max)" in done["detail"]
    assert outcome.validation["tolerance"] == "exact (bit for bit)"
    assert not any(f.blocked for f in check(ir.serde.deserialize_model(out), "tensorrt-10"))


def test_trt10_plugin_dtype_missing_is_lowered_tensorrt_safe():
    model = scatter_model("ScatterElements", opset=18, reduction="add", data_type=TensorProto.DOUBLE)
    out, outcome = prepare(model, "10")
    ops = [n.op_type for n, _ in iter_nodes(ir.serde.deserialize_model(out))]
    assert [n.op_type for n in scatter_nodes(out)] == ["ScatterND"] and not {"TopK", "NonZero"} & set(ops)
    assert_parser_takes(out, "10")
    (done,) = pass_report(outcome)["rewritten"]
    assert "data type DOUBLE" in done["detail"] and "TensorRT-safe" in done["detail"]
    assert "checked_against" in outcome.validation
    assert not any(f.blocked for f in check(ir.serde.deserialize_model(out), "tensorrt-10"))


def test_trt10_plugin_dtype_missing_and_dynamic_count_is_left_alone_with_the_reason(tmp_path):
    model = scatter_model("ScatterElements", opset=18, reduction="add", data_type=TensorProto.DOUBLE,
                          data_shape=(4, 5), indices_shape=("e", 5))
    with pytest.raises(sr.ConversionError, match="cannot prepare for TensorRT 10: ") as refused:
        prepare(model, "10")
    (skip,) = refused.value.declined
    assert "data type DOUBLE" in skip.detail and "number of updates is not static" in skip.detail
    assert "fix e to the size you run: fix_dims={'e': SIZE}" in str(refused.value)  # in Python
    onnx.save(model, tmp_path / "m.onnx")
    said = invoke("tensorrt", tmp_path / "m.onnx", "--no-validate").stderr  # and on the command line
    assert "--fix-dim e=SIZE" in said and "fix_dims" not in said and "NAME" not in said


def assert_parser_takes(model: onnx.ModelProto, version: str) -> None:
    """Nothing in ``model`` TensorRT ``version``'s parser is known to reject: audited ops and types,
    and Loops (the network lowering's) whose carried values keep their shape."""
    graph = ir.serde.deserialize_model(model).graph
    assert tensorrt_violations(list(graph), version) == []
    assert any(n.op_type == "Loop" for n in graph)


# ---- reductions on TensorRT 8.6: silently ignored, so lowered TensorRT-safely or reported -------------

@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
def test_trt86_reductions_are_lowered_to_what_trt_accepts(op):
    model = (scatter_model("ScatterElements", opset=18, reduction="max") if op == "ScatterElements"
             else scatter_nd_model("mul"))
    out, outcome = prepare(model, "8.6")
    (node,) = scatter_nodes(out)
    assert node.op_type == "ScatterND" and "reduction" not in node.attributes
    ops = {n.op_type for n, _ in iter_nodes(ir.serde.deserialize_model(out))}
    assert not {"TopK", "NonZero", "If"} & ops
    assert_parser_takes(out, "8.6")
    (done,) = pass_report(outcome)["rewritten"]
    assert "NVIDIA/TensorRT#3750" in done["detail"] and "TensorRT-safe" in done["detail"]
    assert not any(f.blocked for f in check(ir.serde.deserialize_model(out), "tensorrt-8.6"))


@pytest.mark.parametrize("where", ["main", "function"])
@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
def test_trt86_reductions_with_a_dynamic_count_are_reported_not_emitted_in_a_form_trt_rejects(op, where):
    model = (scatter_model("ScatterElements", opset=18, reduction="max", data_shape=(4, 5), indices_shape=("e", 5),
                           where=where)
             if op == "ScatterElements"
             else scatter_nd_model("mul", indices_shape=("m", 2), updates_shape=("m", 3), where=where))
    with pytest.raises(sr.ConversionError) as refused:  # nothing TensorRT 8.6 would get wrong is written
        prepare(model, "8.6")
    (skip,) = refused.value.declined
    assert "NVIDIA/TensorRT#3750" in skip.detail and "number of updates is not static" in skip.detail
    (finding,) = check(ir.serde.deserialize_model(model), "tensorrt-8.6")
    dim = "e" if op == "ScatterElements" else "m"
    assert finding.blocked and finding.fix == f"scatter-rewrite tensorrt --trt-version 8.6 --fix-dim {dim}=SIZE"
    fixed, outcome = prepare(model, "8.6", fix_dims={dim: 7})  # the fix check names, validated
    assert pass_report(outcome)["rewritten"] and not pass_report(outcome)["skipped"]
    assert not any(f.blocked for f in check(ir.serde.deserialize_model(fixed), "tensorrt-8.6"))


def test_uint64_is_reported():
    model = scatter_model("ScatterElements", opset=18, data_type=TensorProto.UINT64)
    with pytest.raises(sr.ConversionError, match="cannot prepare for TensorRT 10: .*UINT64 data"):
        prepare(model, "10")


# ---- TensorScatter ------------------------------------------------------------------------------------

@pytest.mark.parametrize("version, opset", [("10", 20), ("8.6", 17)])
def test_tensor_scatter_lowered(version, opset):
    model = tensor_scatter_model()
    feeds = {"past": np.random.default_rng(0).standard_normal((2, 3, 8, 4)).astype(np.float32),
             "update": np.ones((2, 3, 2, 4), np.float32), "write_indices": np.array([1, 6], np.int64)}
    out, outcome = prepare(model, version, inputs=feeds)
    assert [n.op_type for n in scatter_nodes(out)] == ["ScatterND"]
    assert {o.version for o in out.opset_import if o.domain == ""} == {opset}
    assert outcome.validation["max_abs_diff"] == 0.0


# ---- the restriction check and options ------------------------------------------------------------------

def test_tensorrt_violations():
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([5]))
    k_const = ir.node("Constant", [], {"value": ir.tensor(np.array([2], np.int64))}).outputs[0]
    assert tensorrt_violations([ir.node("TopK", [x, k_const], num_outputs=2)], "8.6") == []
    k_run = ir.node("Size", [x]).outputs[0]
    (v,) = tensorrt_violations([ir.node("TopK", [x, k_run], num_outputs=2)], "10")
    assert "K is computed at run time" in v
    inner = ir.Graph([], [], nodes=[ir.node("Compress", [x, x])], name="body")
    assert tensorrt_violations([ir.node("If", [x], {"then_branch": inner, "else_branch": inner})], "10")


@pytest.mark.parametrize("version", ["9", "7.0", "12"])
def test_unknown_version(version):
    with pytest.raises(sr.OptionError, match=f"^trt_version='{version}' is unknown"):
        tensorrt_passes(version)


def test_idempotent():
    model = ir.serde.deserialize_model(scatter_model("ScatterElements", opset=18, where="if"))
    for p in tensorrt_passes("10"):
        p(model)
    assert not any(p(model).modified for p in tensorrt_passes("10"))


# ---- CLI ----------------------------------------------------------------------------------------------

def test_cli(tmp_path):
    source, target = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(scatter_model("Scatter", opset=10, where="loop", axis=1), source)
    result = invoke("tensorrt", source, "-o", target, "--trt-version", "8.6")
    assert result.exit_code == 0, result.output
    assert "tensorrt: 1 rewritten, 0 left alone" in result.stdout and "PASSED" in result.stdout
    assert [n.op_type for n in scatter_nodes(onnx.load(target))] == ["ScatterND"]
    result = invoke("check", target, "--target", "tensorrt-8.6")
    assert result.exit_code == 0, result.output


# ---- PyTorch exports (tests/data/torch_trt/make.py made them; torch is not needed here) ---------------

TORCH = Path(__file__).parents[1] / "data" / "torch_trt"
# model -> flow -> (scatter ops after the flow, as "Op" or "Op(reduction)"; blocked on the TensorRT target)
TORCH_EXPECTED = {
    "scatter_ts16": {"to_scatternd": ["ScatterND"], "10": ["ScatterND"], "8.6": ["ScatterND"]},
    "scatter_add_gnn_ts16": {"to_scatternd": ["ScatterND(add)"], "10": ["ScatterElements(add)"],
                             "8.6": None},  # dynamic edge count: 8.6 would ignore the add, refused
    "scatter_amax_ts16": {"to_scatternd": ["ScatterElements(max)"], "10": ["ScatterElements(max)"],
                          "8.6": ["ScatterND"]},  # its rank-hiding Ifs inlined, then lowered TensorRT-safely
    "index_put_ts16": {"to_scatternd": ["ScatterND"], "10": ["ScatterND"], "8.6": ["ScatterND"]},
    "index_put_dynamo18": {"to_scatternd": ["ScatterND(add)", "ScatterND"], "10": ["ScatterElements(add)", "ScatterND"],
                           "8.6": ["ScatterND", "ScatterND"]},  # the add lowered TensorRT-safely
}


@pytest.mark.parametrize("user_inputs", [True, False], ids=["feeds", "generated"])
@pytest.mark.parametrize("flow", ["to_scatternd", "10", "8.6"])
@pytest.mark.parametrize("name", sorted(TORCH_EXPECTED))
def test_pytorch_exports(name, flow, user_inputs):
    """Validated on PyTorch's inputs or on generated ones (index_put's index reaches ScatterND through
    an Unsqueeze), then compared with PyTorch's eager outputs."""
    model, feeds, pytorchs = load_export(TORCH, name)
    expected = [pytorchs[o.name] for o in model.graph.output]
    options = {"validate": True, "inputs": feeds if user_inputs else None}
    if flow == "to_scatternd":
        out = sr.to_scatternd(model, **options)
    elif TORCH_EXPECTED[name][flow] is None:
        with pytest.raises(sr.ConversionError, match="number of updates is not static"):
            sr.prepare_for_tensorrt(model, trt_version=flow, **options)
        return
    else:
        out = sr.prepare_for_tensorrt(model, trt_version=flow, **options)
    found = [n.op_type + (f"({attr(n, 'reduction')})" if attr(n, "reduction", "none") != "none" else "")
             for n in scatter_nodes(out)]
    assert sorted(found) == sorted(TORCH_EXPECTED[name][flow])
    assert all("reduction" not in n.attributes for n in scatter_nodes(out) if n.op_type == "ScatterND"
               and attr(n, "reduction") == "none")
    for got, want in zip(ort_run(out, feeds), expected):  # against PyTorch's eager result
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-6, atol=1e-6)
    if flow != "to_scatternd":
        blocked = any(f.blocked for f in check(ir.serde.deserialize_model(out), f"tensorrt-{flow}"))
        reductions_left = any("(" in op for op in found)
        assert blocked == (flow == "8.6" and reductions_left)


def tensor_scatter_then_max(idx_rows="1") -> onnx.ModelProto:
    cache_update = [oh.make_node("TensorScatter", ["cache", "update"], ["kv"], axis=-2),
                    oh.make_node("ScatterElements", ["kv", "idx", "upd"], ["out"], axis=0, reduction="max")]
    rows = 1 if idx_rows == "1" else idx_rows
    graph = oh.make_graph(
        cache_update, "g",
        [oh.make_tensor_value_info("cache", TensorProto.FLOAT, [1, 8, 4]),
         oh.make_tensor_value_info("update", TensorProto.FLOAT, [1, 2, 4]),
         oh.make_tensor_value_info("idx", TensorProto.INT64, [rows, 8, 4]),
         oh.make_tensor_value_info("upd", TensorProto.FLOAT, [rows, 8, 4])],
        [oh.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8, 4])],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 24)])


def test_tensor_scatter_lowered_with_max_made_tensorrt_safe_first():
    """Moving to opset 17 would make LowerPass sort the max with a run-time TopK: it is lowered with
    the sorting network first, then the TensorScatter and the model go to opset 17."""
    out, outcome = prepare(tensor_scatter_then_max(), "8.6")
    assert [n.op_type for n in scatter_nodes(out)] == ["ScatterND", "ScatterND"]
    assert {o.version for o in out.opset_import if o.domain == ""} == {17}
    ops = {n.op_type for n, _ in iter_nodes(ir.serde.deserialize_model(out))}
    assert not {"TopK", "NonZero"} & ops
    assert_parser_takes(out, "8.6")
    assert "TensorRT-safe" in pass_report(outcome, "lower-tensorscatter")["rewritten"][0]["detail"]
    assert outcome.validation["max_abs_diff"] == 0.0
    assert not any(f.blocked for f in check(ir.serde.deserialize_model(out), "tensorrt-8.6"))


def test_tensor_scatter_not_lowered_when_the_max_cannot_be_made_tensorrt_safe():
    with pytest.raises(sr.ConversionError) as refused:
        sr.prepare_for_tensorrt(tensor_scatter_then_max(idx_rows="r"), trt_version="8.6")
    (skip,) = refused.value.declined
    assert skip.node.startswith("TensorScatter")
    assert "cannot be lowered TensorRT-safely" in skip.detail and "number of updates is not static" in skip.detail


@pytest.mark.parametrize("version, source, expected", [("8.6", 18, 17), ("10", 21, 20), ("10", 18, 18)])
def test_model_moved_to_the_parsers_highest_opset(version, source, expected):
    model = scatter_model("ScatterElements", opset=source, data_shape=(4, 5), indices_shape=(2, 5), axis=1)
    out, outcome = sr.prepare_for_tensorrt(model, trt_version=version, validate=True, return_report=True)
    onnx.checker.check_model(out, full_check=True)
    assert out.opset_import[0].version == expected
    notes = pass_report(outcome, "opset-cap")["notes"]
    assert (f"-> {expected}" in notes[0]) if source != expected else not notes


def test_opset_kept_when_a_reduction_stays():
    """A max with a dynamic update count cannot be lowered TensorRT-safely: the model stays at 18
    (ScatterElements max does not exist at 17) and the report says why."""
    model = scatter_model("ScatterElements", opset=18, reduction="max", data_shape=(4, 5), indices_shape=("n", 5))
    with pytest.raises(sr.ConversionError, match="number of updates is not static"):
        sr.prepare_for_tensorrt(model, trt_version="8.6")
    assert any(f.blocked for f in check(ir.serde.deserialize_model(model), "tensorrt-8.6"))
    # The cap alone, after a flow that left the reduction: it refuses too, rather than stay at 18.
    from scatter_rewrite.passes.tensorrt_opset_cap import CapOpsetPass

    with pytest.raises(sr.ConversionError, match="the model is at opset 18 .* keeps a reduction opset 17 lacks"):
        CapOpsetPass("8.6")(ir.serde.deserialize_model(model))


@pytest.mark.parametrize("op, trt_version, left", [("ScatterElements", "8.6", True), ("ScatterElements", "10", False),
                                                    ("ScatterND", "8.6", True), ("ScatterND", "10", True)])
def test_a_custom_domain_reduction_tensorrt_would_get_wrong_is_reported_left_alone(op, trt_version, left):
    # (TensorRT would ignore or reject the node: the flow refuses, nothing is written.)
    shapes = dict(indices_shape=(2, 3)) if op == "ScatterElements" else dict(indices_shape=(2, 1), updates_shape=(2, 3))
    model = scatter_model(op, opset=18, data_shape=(4, 3), reduction="max", **shapes)
    # (max below 18: a custom-domain node; the plugin form for ScatterElements, the custom one for ScatterND)
    lowered = sr.lower(model, opset=17, mode="tensorrt-plugin" if op == "ScatterElements" else "custom")
    assert [n.domain for n in lowered.graph.node if n.op_type == op] == ["ai.onnx.contrib"]
    if left:
        with pytest.raises(sr.ConversionError) as refused:
            sr.prepare_for_tensorrt(lowered, trt_version=trt_version)
        (skipped,) = refused.value.declined
        assert "which TensorRT's parser imports as ONNX" in skipped.detail
        assert "run it on the model before it was lowered" in skipped.detail
    else:
        _, outcome = sr.prepare_for_tensorrt(lowered, trt_version=trt_version, return_report=True)
        (trt,) = [p for p in outcome.passes if p["pass"] == "tensorrt"]
        assert trt["skipped"] == []


def test_an_opset_cap_that_stops_at_a_later_node_leaves_the_model_as_it_was():
    """ReduceMax-18 converts to 17, Pad-18 with axes callers may override (an initializer that is also a
    graph input) does not: the cap is refused with the reason, and the ReduceMax must not be left
    half-moved (it took 'axes' as an attribute while the model stayed at 18, which onnx.checker rejects).
    (Constant axes have a Pad-13 form now.)"""
    from onnx import numpy_helper

    nodes = [oh.make_node("ScatterElements", ["x", "i", "u"], ["s"], axis=1),
             oh.make_node("ReduceMax", ["s", "ax"], ["r"], keepdims=1),
             oh.make_node("Pad", ["s", "pads", "", "pax"], ["p"])]
    inits = [numpy_helper.from_array(np.zeros((2, 1, 4), np.int64), "i"),
             numpy_helper.from_array(np.ones((2, 1, 4), np.float32), "u"),
             numpy_helper.from_array(np.array([1], np.int64), "ax"),
             numpy_helper.from_array(np.array([1, 1], np.int64), "pads"),
             numpy_helper.from_array(np.array([2], np.int64), "pax")]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
                                       oh.make_tensor_value_info("pax", TensorProto.INT64, [1])],
                          [oh.make_tensor_value_info("r", TensorProto.FLOAT, [2, 1, 4]),
                           oh.make_tensor_value_info("p", TensorProto.FLOAT, [2, 3, 6])], inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    model.ir_version = 9
    with pytest.raises(sr.ConversionError, match="the model is at opset 18 .* cannot move there: .*Pad"):
        sr.prepare_for_tensorrt(model, trt_version="8.6", validate=True)
    # The cap given this model alone refuses before changing it: no ReduceMax half-moved.
    from scatter_rewrite.passes.tensorrt_opset_cap import CapOpsetPass

    given = ir.serde.deserialize_model(model)
    with pytest.raises(sr.ConversionError):
        CapOpsetPass("8.6")(given)
    after = ir.serde.serialize_model(given)
    onnx.checker.check_model(after, full_check=True)
    assert [n.op_type for n in after.graph.node] == ["ScatterElements", "ReduceMax", "Pad"]
    assert after.opset_import[0].version == 18 and len(after.graph.node[1].input) == 2  # axes still an input
