"""The PyG-style max layer as PyTorch's two exporters write it (tests/data/torch/make_gnn_layer.py):
both exports get the same row-key lowering (one sort key per edge, not per element), and every
rewrite's result in onnxruntime is PyTorch's own output, bit for bit (max)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import scatter_rewrite as sr
from scatter_rewrite.graph import iter_nodes
from scatter_rewrite.passes.lowering.network_reduce import padded_size
from scatter_rewrite.passes.lowering.segment_reduce import row_counts
from scatter_rewrite.type_inference import borrow_inferred_types, restore_types
from scatter_rewrite.validate import run_onnxruntime
from tests.helpers.exports import load_export

DATA = Path(__file__).parents[1] / "data" / "torch"
EXPORTS = ["gnn_max_layer_ts17", "gnn_max_layer_dynamo18"]
NODES, EDGES, FEATURES = 6, 24, 8  # make_gnn_layer.py's sizes
VERBS = {
    "lower --opset 13": (sr.lower, {"opset": 13}),
    "tensorrt --trt-version 8.6": (sr.prepare_for_tensorrt, {"trt_version": "8.6"}),
    "tensorrt": (sr.prepare_for_tensorrt, {"trt_version": "10"}),
}


def test_the_exports_are_what_the_tests_are_about():
    ts, _, pytorchs = load_export(DATA, EXPORTS[0])
    ops = [n.op_type for n in ts.graph.node]
    assert ops.count("If") == 2 and "Unsqueeze" in ops and "Expand" in ops  # the rank-0 wrapper
    shape = next(n for n in ts.graph.node if n.op_type == "Shape")  # expand_as: Shape(updates)
    assert next(n for n in ts.graph.node if n.op_type == "Expand").input[1] == shape.output[0]
    declared = [d.dim_value for d in ts.graph.output[0].type.tensor_type.shape.dim]
    assert declared == [NODES * FEATURES]  # a false claim
    assert pytorchs["y"].shape == (NODES, FEATURES)
    dynamo, _, _ = load_export(DATA, EXPORTS[1])
    assert "If" not in [n.op_type for n in dynamo.graph.node]


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("name", EXPORTS)
def test_every_verb_gives_pytorchs_output(name, verb):
    model, feeds, pytorchs = load_export(DATA, name)
    function, options = VERBS[verb]
    rewritten = function(model, validate=True, inputs=feeds, **options)
    onnx.checker.check_model(rewritten, full_check=True)
    got = run_onnxruntime(rewritten.SerializeToString(), feeds)[0]
    np.testing.assert_array_equal(got, pytorchs["y"])


def scaled_torchscript_export(nodes: int, features: int):
    """The committed TorchScript export with N x F data (its zeros Constant as big as real ones),
    the same 24 edges, and what PyTorch's layer gives (max of x[src] * scale into zeros)."""
    model, feeds, _ = load_export(DATA, EXPORTS[0])
    rng = np.random.default_rng(0)
    for value in list(model.graph.input) + list(model.graph.output):
        dims = value.type.tensor_type.shape.dim
        if value.name == "x":
            dims[0].dim_value, dims[1].dim_value = nodes, features
        if value.name == "y":
            dims[0].dim_value = nodes * features  # the export's flat claim
    edges = feeds["edge_src"].shape[0]
    for node in model.graph.node:  # the branches' declared outputs, as the exporter writes them
        for branch in (a.g for a in node.attribute if a.HasField("g")):
            for out in branch.output:
                dims = out.type.tensor_type.shape.dim
                flat = [nodes * features, edges * features, edges * features]
                full = [(nodes, features), (edges, features), (edges, features)]
                k = list(branch.output).index(out)
                if len(dims) == 1:
                    dims[0].dim_value = flat[k] if len(branch.output) == 3 else nodes * features
                else:
                    dims[0].dim_value, dims[1].dim_value = full[k]
    zeros = next(n for n in model.graph.node if n.op_type == "Constant"
                 and onnx.numpy_helper.to_array(n.attribute[0].t).ndim == 2)
    zeros.attribute[0].t.CopyFrom(onnx.numpy_helper.from_array(
        np.zeros((nodes, features), np.float32), zeros.attribute[0].t.name))
    (scale,) = model.graph.initializer
    scale_values = rng.standard_normal(features).astype(np.float32)
    scale.CopyFrom(onnx.numpy_helper.from_array(scale_values, scale.name))
    feeds = {"x": rng.standard_normal((nodes, features)).astype(np.float32),
             "edge_src": rng.integers(0, nodes, feeds["edge_src"].shape),
             "edge_dst": rng.integers(0, nodes, feeds["edge_dst"].shape)}
    expected = np.zeros((nodes, features), np.float32)
    np.maximum.at(expected, feeds["edge_dst"], feeds["x"][feeds["edge_src"]] * scale_values)
    return model, feeds, {"y": expected}


@pytest.mark.parametrize("size", ["committed", "zeros Constant over 4 KiB"])
def test_tensorrt_10_leaves_the_torchscript_wrapper_its_parser_folds(size):
    """On TensorRT 10 the plugin takes the max scatter as it is, and TensorRT's parser imports only
    the branch an If with a constant condition takes: nothing to rewrite, so nothing to validate.
    On 8.6 the reduction is lowered, which needs the rank the wrapper hides: inlined there. (With
    a big zeros Constant, the shape-only copy the decision reads must not look refused.)"""
    model, feeds, pytorchs = load_export(DATA, EXPORTS[0]) if size == "committed" else (
        scaled_torchscript_export(64, 32))
    result, report = sr.prepare_for_tensorrt(model, trt_version="10", validate=True, inputs=feeds,
                                             return_report=True)
    assert report.status == "UNCHANGED"
    assert [n.op_type for n in result.graph.node] == [n.op_type for n in model.graph.node]
    lowered, report = sr.prepare_for_tensorrt(model, trt_version="8.6", validate=True,
                                              inputs=feeds, return_report=True)
    assert "If" not in [n.op_type for n in lowered.graph.node]
    assert any("else_branch inlined" in note for p in report.passes for note in p["notes"])
    np.testing.assert_array_equal(run_onnxruntime(lowered.SerializeToString(), feeds)[0], pytorchs["y"])


def lowered_node_count(name: str, verb: str) -> int:
    model, feeds, _ = load_export(DATA, name)
    function, options = VERBS[verb]
    _, outcome = function(model, validate=True, inputs=feeds, return_report=True, **options)
    (note,) = [note for p in outcome.passes for note in p.get("rewritten", [])
               if "ScatterElements" in note["node"]]
    return int(re.search(r"(\d+) (?:TensorRT-safe )?standard nodes", note["detail"]).group(1))


@pytest.mark.parametrize("verb", ["lower --opset 13", "tensorrt --trt-version 8.6"])
def test_both_exports_get_the_same_row_key_lowering(verb):
    counts = [lowered_node_count(name, verb) for name in EXPORTS]
    assert counts[0] == counts[1], counts
    if verb == "lower --opset 13":
        assert counts[0] == 56  # (per-element keys add a Range/Reshape per other dimension)


@pytest.mark.parametrize("name", EXPORTS)
def test_the_tensorrt_network_sorts_one_key_per_edge(name):
    """The sorting network's width is the padded number of keys: 32 for 24 edge rows, where one
    key per element (24 x 8) would need 256."""
    model, feeds, _ = load_export(DATA, name)
    rewritten = sr.prepare_for_tensorrt(model, trt_version="8.6", validate=True, inputs=feeds)
    ir_model = ir.serde.deserialize_model(rewritten)
    limits = set()
    for node, _ in iter_nodes(ir_model):
        if node.op_type == "Range" and node.inputs[1].const_value is None:
            producer = node.inputs[1].producer()
            if producer is not None and producer.op_type == "Constant":
                limits.add(int(producer.attributes["value"].value.numpy()))
    assert padded_size(EDGES) in limits and padded_size(EDGES * FEATURES) not in limits, limits


# The forms both exporters write for a row-constant index (``index.unsqueeze(-1).expand_as(src)``,
# ``index.view(-1, 1).expand(-1, F)``), ahead of ScatterElements(axis=0) on [N, F] data.
INDEX_FORMS = {
    "Unsqueeze, Expand to a constant shape": """
        axes = Constant<value = int64[1] {-1}>()
        col = Unsqueeze(dst, axes)
        shape = Constant<value = int64[2] {24, 8}>()
        idx = Expand(col, shape)""",
    "Unsqueeze, Expand to the updates' Shape, through the wrapper's Identity": """
        axes = Constant<value = int64[1] {-1}>()
        col = Unsqueeze(dst, axes)
        shape = Shape(src)
        expanded = Expand(col, shape)
        idx = Identity(expanded)""",
    "Reshape to [-1, 1], Expand to TorchScript's Where(Equal(size, -1)) sizes": """
        column = Constant<value = int64[2] {-1, 1}>()
        col = Reshape(dst, column)
        sizes = Constant<value = int64[2] {-1, 8}>()
        minus = Constant<value = int64[2] {-1, -1}>()
        unknown = Equal(sizes, minus)
        two = Constant<value = int64[1] {2}>()
        ones = ConstantOfShape<value = int64[1] {1}>(two)
        shape = Where(unknown, ones, sizes)
        idx = Expand(col, shape)""",
}


@pytest.mark.parametrize("form", INDEX_FORMS)
def test_a_row_constant_index_is_recognized_in_every_exporter_form(form):
    text = f"""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[6, 8] data, int64[24] dst, float[24, 8] src) => (float[6, 8] y) {{
        {INDEX_FORMS[form]}
        y = ScatterElements<axis = 0, reduction = "max">(data, idx, src)
    }}"""
    model = ir.serde.deserialize_model(onnx.parser.parse_model(text))
    borrowed = borrow_inferred_types(model)
    try:
        scatter = next(node for node in model.graph if node.op_type == "ScatterElements")
        assert row_counts(scatter) == (EDGES, NODES, FEATURES)  # rows of 8, not 24 x 8 elements
    finally:
        restore_types(borrowed)
    rng = np.random.default_rng(0)
    feeds = {"data": rng.standard_normal((6, 8)).astype(np.float32),
             "dst": rng.integers(-6, 6, 24).astype(np.int64),
             "src": rng.standard_normal((24, 8)).astype(np.float32)}
    proto = onnx.parser.parse_model(text)
    expected = run_onnxruntime(proto.SerializeToString(), feeds)[0]
    for function, options in VERBS.values():
        rewritten = function(proto, validate=True, inputs=feeds, **options)
        got = run_onnxruntime(rewritten.SerializeToString(), feeds)[0]
        np.testing.assert_array_equal(got, expected)


def test_the_view_expand_spelling_with_dynamic_edges_gets_row_keys_too():
    """``edge_dst.view(-1, 1).expand(-1, F)`` by TorchScript with a dynamic edge count: a Reshape to
    [-1, 1], an Expand to sizes out of a Where(Equal(sizes, -1)) chain, zeros whose row width is a
    Gather of the updates' Shape, and the If wrapper's outputs declared with dims named after it.
    lower finds the row keys through all of it (one key per edge: a per-element key would add a
    Range/Reshape/Mul/Add for the feature coordinate); tensorrt once the edge count is
    fixed builds the static export's network but for the two nodes (a Reshape and its shape) that
    flattened the reshaped edge vector again: its keys are read as that vector."""
    model, feeds, pytorchs = load_export(DATA, "gnn_max_view_expand_ts17")
    assert model.graph.input[1].type.tensor_type.shape.dim[0].dim_param == "num_edges"
    ops = [n.op_type for n in model.graph.node]
    assert {"Reshape", "Where", "ConstantOfShape", "Expand", "If"} <= set(ops)
    lowered, outcome = sr.lower(model, opset=13, validate=True, inputs=feeds, return_report=True)
    np.testing.assert_array_equal(run_onnxruntime(lowered.SerializeToString(), feeds)[0], pytorchs["y"])
    (note,) = [n for p in outcome.passes for n in p.get("rewritten", []) if "Scatter" in n["node"]]
    assert note["detail"].startswith("-> 60 standard nodes"), note
    trt, outcome = sr.prepare_for_tensorrt(model, trt_version="8.6", fix_dims={"num_edges": EDGES},
                                           validate=True, inputs=feeds, return_report=True)
    np.testing.assert_array_equal(run_onnxruntime(trt.SerializeToString(), feeds)[0], pytorchs["y"])
    (note,) = [n for p in outcome.passes for n in p.get("rewritten", []) if "Scatter" in n["node"]]
    count = int(re.search(r"(\d+) TensorRT-safe", note["detail"]).group(1))
    assert count == lowered_node_count("gnn_max_layer_ts17", "tensorrt --trt-version 8.6") - 2
