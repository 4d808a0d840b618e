"""The TensorRT-safe lowering of scatter reductions (sorting network + segmented scan, each a Loop, +
one ScatterND): exact in onnxruntime, only ops TensorRT 8.6 accepts, static shapes, Loops TensorRT's
ILoop takes, a node count that does not grow with the updates, and the tensorrt flow around it."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator

import scatter_rewrite as sr
from tests.helpers.equivalence import assert_validation_accepts
from tests.helpers.runs import BACKEND_CASES, expected_outputs, ort_run
from tests.helpers.models import gnn_model
from scatter_rewrite.readiness import check
from scatter_rewrite.evaluator import scatter_elements
from scatter_rewrite.errors import IndexOutOfRangeError
from scatter_rewrite.evaluator.reference_ops import CORRECTED_OPS, make_evaluator
from scatter_rewrite.graph import attr, iter_nodes
from scatter_rewrite.passes.lowering import network_reduce as net
from scatter_rewrite.passes.lowering import segment_reduce as seg
from scatter_rewrite.passes.tensorrt_violations import tensorrt_violations
from scatter_rewrite.testing import scatter_model
from tests.helpers.shapes import elements_shapes, nd_shapes
from tests.helpers.cli import invoke
from tests.helpers.exports import load_export

ort.set_default_logger_severity(3)

DTYPES = {
    TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.DOUBLE: np.float64,
    TensorProto.INT32: np.int32, TensorProto.INT64: np.int64, TensorProto.INT8: np.int8, TensorProto.BOOL: np.bool_,
}
# max/min edge cases: NaN, both zeros, infinities, ties
SPECIAL = np.array([np.nan, -0.0, 0.0, -0.0, 1.5, -1.5, np.inf, -np.inf, 1.5, np.nan])
FORBIDDEN = {"TopK", "NonZero", "If", "Scan", "Unique", "Compress"}


def lower_network(model: onnx.ModelProto, opset: int | None = None) -> tuple[onnx.ModelProto, list[ir.Node]]:
    """Every reducing scatter of the main graph replaced by the network lowering (built for ``opset``,
    default the model's); also returns the emitted nodes."""
    m = ir.serde.deserialize_model(model)
    emitted = []
    for node in [n for n in m.graph if n.op_type in ("ScatterElements", "ScatterND")
                 and attr(n, "reduction", "none") != "none"]:
        at = opset or m.opset_imports[""]
        assert net.network_blocker(node, at) is None
        nodes, out = net.lower_reduction_network(node, at, seg.Names({v.name for v in m.graph.inputs}))
        ir.convenience.replace_nodes_and_values(m.graph, node, [node], nodes, [node.outputs[0]], [out])
        emitted += nodes
    return ir.serde.serialize_model(m), emitted


def assert_tensorrt_safe(lowered: onnx.ModelProto, emitted: list[ir.Node], static: bool) -> None:
    assert tensorrt_violations(emitted, "8.6") == [] and tensorrt_violations(emitted, "10") == []
    ops = {n.op_type for n in emitted}
    assert not FORBIDDEN & ops, FORBIDDEN & ops
    assert not any(n.op_type in ("ScatterND", "ScatterElements") and "reduction" in n.attributes for n in emitted)
    onnx.checker.check_model(lowered, full_check=True)
    assert_fixed_shape_loops(lowered, [n for n in emitted if n.op_type == "Loop"])
    if static:  # every intermediate shape is known: nothing TensorRT must size at run time
        inferred = onnx.shape_inference.infer_shapes(lowered, strict_mode=True)
        values = list(inferred.graph.value_info) + list(inferred.graph.output)
        assert len(values) >= len([o for n in emitted for o in n.outputs])
        for vi in values:
            dims = vi.type.tensor_type.shape.dim
            assert vi.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims), vi


def assert_fixed_shape_loops(lowered: onnx.ModelProto, loops: list[ir.Node]) -> None:
    """Every Loop of the lowering is one TensorRT's ILoop takes: a constant trip count, no ``cond``
    (the parser would add a kWHILE limit), and each carried value of one shape in every iteration,
    as ONNX shape inference finds it in the body (the declared body output shapes are cleared
    first, so inference has to derive them)."""
    assert all(n.inputs[1] is None and seg.const_value(n.inputs[0]) is not None for n in loops)
    names = {n.outputs[0].name for n in loops}
    proto = onnx.ModelProto()
    proto.CopyFrom(lowered)
    found = [n for n in proto.graph.node if n.op_type == "Loop" and n.output[0] in names]
    assert len(found) == len(loops)
    for node in found:
        for out in node.attribute[0].g.output:
            out.type.tensor_type.ClearField("shape")
    inferred = {n.output[0]: n for n in onnx.shape_inference.infer_shapes(proto).graph.node}
    for node in found:
        body = next(a.g for a in inferred[node.output[0]].attribute if a.name == "body")
        for before, after in zip(body.input[2:], body.output[1:]):
            assert after.type.tensor_type.HasField("shape"), after
            assert before.type.tensor_type.shape == after.type.tensor_type.shape, (before, after)


def reference_run(model: onnx.ModelProto, feeds: dict) -> list:
    """``model`` in onnx.reference, with the corrected Loop: onnx.reference's runs no iteration
    when the Loop's ``cond`` input is empty (``while cond and ...`` on None), which the lowering's
    Loops leave empty for TensorRT."""
    return ReferenceEvaluator(model, new_ops=[CORRECTED_OPS["Loop"]]).run(None, feeds)


def values(rng, shape, dtype, reduction) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind == "f":
        if reduction in ("max", "min"):
            return rng.choice(SPECIAL, size=shape).astype(dtype)
        out = rng.uniform(-2, 2, size=shape)
        out[rng.random(shape) < 0.2] = -0.0
        return out.astype(dtype)
    info = np.iinfo(dtype)
    if reduction in ("add", "mul"):  # the whole range: wrap-around must match
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
    return rng.integers(-3, 3, size=shape, endpoint=True).astype(dtype)


def index_values(rng, shape, bound: int, spread: int) -> np.ndarray:
    """Indices in [-bound, bound) from ``spread`` distinct targets (few: many duplicates), both signs."""
    targets = rng.integers(0, bound, size=max(1, spread))
    chosen = rng.choice(targets, size=shape)
    return np.where(rng.random(shape) < 0.5, chosen - bound, chosen).astype(np.int64)


def run_case(op, model, feeds, attrs, dtype, opset=None, static=True):
    lowered, emitted = lower_network(model, opset)
    assert_tensorrt_safe(lowered, emitted, static)
    float_reduction = attrs["reduction"] in ("add", "mul") and np.dtype(DTYPES[dtype]).kind == "f"
    assert_validation_accepts(expected_outputs(model, feeds, op, attrs), ort_run(lowered, feeds), float_reduction)


# ---- ONNX's own backend cases ----------------------------------------------------------------------

def test_backend_cases_found():
    assert "scatter_elements_with_duplicate_indices" in " ".join(c.name for c in BACKEND_CASES)


@pytest.mark.parametrize("case", BACKEND_CASES, ids=lambda c: c.name)
def test_backend_case(case):
    lowered, emitted = lower_network(case.model)
    assert_tensorrt_safe(lowered, emitted, static=True)
    inputs, want = case.data_sets[0]
    feeds = {i.name: v for i, v in zip(lowered.graph.input, inputs)}
    for got, w in zip(ort_run(lowered, feeds), want):
        np.testing.assert_allclose(got, w, rtol=1e-6)
    # and through the whole tensorrt flow for 8.6 (validated in onnxruntime)
    out = sr.prepare_for_tensorrt(case.model, trt_version="8.6", validate=True)
    assert not FORBIDDEN & {n.op_type for n in out.graph.node}
    for got, w in zip(ort_run(out, feeds), want):
        np.testing.assert_allclose(got, w, rtol=1e-6)


# ---- differential: original vs lowered in onnxruntime ----------------------------------------------

common = dict(
    dtype=st.sampled_from(sorted(DTYPES)),
    reduction=st.sampled_from(["add", "mul", "max", "min"]),
    opset=st.sampled_from([11, 17, 18]),  # below 12 the sort moves keys with arithmetic, not Min/Max
    spread=st.integers(1, 6),
    seed=st.integers(0, 2**31 - 1),
)


@settings(max_examples=70, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=elements_shapes(max_rank=4, max_along_axis=9),
       index_type=st.sampled_from([TensorProto.INT64, TensorProto.INT32]), **common)
def test_scatter_elements_differential(case, index_type, dtype, reduction, opset, spread, seed):
    data_shape, idx_shape, axis = case
    rng = np.random.default_rng(seed)
    model = scatter_model("ScatterElements", opset=18, data_type=dtype, indices_type=index_type, axis=axis,
                          reduction=reduction, data_shape=data_shape, indices_shape=idx_shape)
    feeds = {"data": values(rng, data_shape, DTYPES[dtype], reduction),
             "indices": index_values(rng, idx_shape, data_shape[axis], spread).astype(
                 np.int32 if index_type == TensorProto.INT32 else np.int64),
             "updates": values(rng, idx_shape, DTYPES[dtype], reduction)}
    run_case("ScatterElements", model, feeds, {"axis": axis, "reduction": reduction}, dtype, opset)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=nd_shapes(max_rank=4), **common)
def test_scatter_nd_differential(case, dtype, reduction, opset, spread, seed):
    data_shape, idx_shape, upd_shape = case
    rng = np.random.default_rng(seed)
    k = idx_shape[-1]
    model = scatter_model("ScatterND", opset=18, data_type=dtype, reduction=reduction, data_shape=data_shape,
                          indices_shape=idx_shape, updates_shape=upd_shape)
    columns = [index_values(rng, idx_shape[:-1] + [1], data_shape[j], spread) for j in range(k)]
    feeds = {"data": values(rng, data_shape, DTYPES[dtype], reduction), "indices": np.concatenate(columns, axis=-1),
             "updates": values(rng, upd_shape, DTYPES[dtype], reduction)}
    run_case("ScatterND", model, feeds, {"reduction": reduction}, dtype, opset)



@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("nodes", [7, "n"], ids=["static", "dynamic-nodes"])
def test_gnn_sorts_row_keys_only(reduction, nodes):
    """The GNN pattern: the network sorts the E edge keys (not E x F elements), rows move together;
    a dynamic number of graph nodes (data rows) comes from Shape ops."""
    model = gnn_model(reduction, nodes=nodes, edges=37, feats=5)
    lowered, emitted = lower_network(model)
    assert_tensorrt_safe(lowered, emitted, static=nodes == 7)
    sort, scan = [n for n in emitted if n.op_type == "Loop"]
    steps = 6 * 7 // 2  # a 64-wide bitonic network (37 keys padded)
    assert seg.const_value(sort.inputs[0]) == steps and seg.const_value(scan.inputs[0]) == 6
    # keys only (not 37 x 5 elements); the scan: the sorted rows and the identity row
    assert {tuple(v.shape) for v in attr(sort, "body").inputs[2:]} == {(64,)}
    assert {tuple(v.shape) for v in attr(scan, "body").inputs[2:]} == {(38, 5)}  # rows, NaN flags
    rng = np.random.default_rng(3)
    feeds = {"x": rng.choice(SPECIAL, (7, 5)).astype(np.float32), "dst": rng.integers(-7, 7, 37),
             "msg": rng.choice(SPECIAL, (37, 5)).astype(np.float32)}
    if reduction in ("add", "mul"):
        feeds = {**feeds, "x": rng.standard_normal((7, 5)).astype(np.float32),
                 "msg": rng.standard_normal((37, 5)).astype(np.float32)}
    assert_validation_accepts(ort_run(model, feeds), ort_run(lowered, feeds), reduction in ("add", "mul"))


def test_one_int32_sort_key_where_the_pairs_fit():
    """(key, position) pairs move through the network as one int32 key * N + position where every
    pair fits (static data rows), else as pairs: both sort the same (the differential tests)."""
    assert net.fits_one_sort_key(2**31 // 64 - 1, 64) and not net.fits_one_sort_key(2**31 // 64, 64)
    for nodes, carried in ((7, 1), ("n", 2)):  # static rows: one key; dynamic rows: pairs
        _, emitted = lower_network(gnn_model("max", nodes=nodes, edges=37, feats=5))
        sort = next(n for n in emitted if n.op_type == "Loop")
        assert len(sort.inputs) - 2 == carried
        assert [n.op_type for n in emitted].count("Div") == (1 if carried == 1 else 0)
        body_ops = [n.op_type for n in attr(sort, "body")]
        # the pair form breaks key ties on positions: a second Less, an Equal
        assert body_ops.count("Less") == 1 + carried and body_ops.count("Equal") == carried - 1


def test_network_steps():
    """The bitonic network's steps: for each block size 2k, the mirror step then half-cleaners."""
    assert net.network_steps(1) == []
    assert net.network_steps(2) == [(1, False)]
    assert net.network_steps(8) == [(1, False), (2, True), (1, False), (4, True), (2, False),
                                    (1, False)]
    assert len(net.network_steps(2**15)) == 15 * 16 // 2


def test_nan_and_signed_zero_rules_exactly():
    """The sequences where onnxruntime's fold is not associative: NaN after a larger value, NaN data,
    -0.0/+0.0 ties (the later one wins), a long run (the scan's every step)."""
    for reduction in ("max", "min"):
        model = scatter_model("ScatterElements", opset=18, data_shape=[8], indices_shape=[30], reduction=reduction)
        feeds = {
            "data": np.array([np.nan, 1, -1, -1, 0, -0.0, 5, 5], np.float32),
            "indices": np.array([0, 1, 2, 2, 3, 3, 4, 5, 6, 6, 7, 7, 7] + [7] * 17),
            "updates": np.array([3, np.nan, np.nan, 2, -0.0, 0.0, -0.0, 0.0, np.nan, 7, 9, np.nan, 1]
                                + [-0.0, 0.0] * 8 + [-0.0], np.float32),
        }
        run_case("ScatterElements", model, feeds, {"axis": 0, "reduction": reduction}, TensorProto.FLOAT)
        # and on a runtime whose Where copies -0.0 exactly (onnxruntime's does not: Builder.select)
        lowered, _ = lower_network(model)
        assert_validation_accepts(ort_run(model, feeds), reference_run(lowered, feeds), float_reduction=False)


def test_bfloat16_in_the_reference_evaluator():
    """onnxruntime lacks bfloat16 kernels: both models run in onnx.reference, bit for bit for max."""
    model = scatter_model("ScatterElements", opset=18, data_shape=[5, 3], indices_shape=[9, 3], reduction="max",
                          data_type=TensorProto.BFLOAT16)
    rng = np.random.default_rng(0)
    feeds = {"data": rng.choice(SPECIAL, (5, 3)).astype(ml_dtypes.bfloat16), "indices": rng.integers(-5, 5, (9, 3)),
             "updates": rng.choice(SPECIAL, (9, 3)).astype(ml_dtypes.bfloat16)}
    lowered, emitted = lower_network(model, opset=13)
    assert tensorrt_violations(emitted, "10") == []
    want = [scatter_elements(feeds["data"], feeds["indices"], feeds["updates"], axis=0, reduction="max")]
    assert_validation_accepts(want, reference_run(lowered, feeds), float_reduction=False)


def test_bfloat16_sorting_network_longer_than_64_is_validated_in_the_reference_evaluator():
    """A bfloat16 max for TensorRT 10 (no plugin for bfloat16) becomes a sorting network whose
    GatherElements run along the 100 updates; only onnx.reference runs bfloat16 graph inputs, and
    its own GatherElements (np.choose) takes at most 64 choices: validation evaluates it."""
    model = gnn_model("max", dtype=TensorProto.BFLOAT16, nodes=10, edges=100)
    prepared = sr.prepare_for_tensorrt(model, trt_version="10")
    rng = np.random.default_rng(3)
    feeds = {"x": rng.choice(SPECIAL, (10, 8)).astype(ml_dtypes.bfloat16),
             "dst": rng.integers(-10, 10, 100),
             "msg": rng.choice(SPECIAL, (100, 8)).astype(ml_dtypes.bfloat16)}
    index = np.broadcast_to(feeds["dst"][:, None], (100, 8))
    want = [scatter_elements(feeds["x"], index, feeds["msg"], axis=0, reduction="max")]
    assert_validation_accepts(want, make_evaluator(prepared).run(None, feeds), float_reduction=False)


def test_the_reference_gather_elements_takes_any_axis_length_and_refuses_out_of_range():
    data = np.arange(2 * 100, dtype=np.float32).reshape(2, 100)
    indices = np.array([[99, -1, 0, 64], [-100, 70, 3, 99]])
    node = oh.make_node("GatherElements", ["d", "i"], ["y"], axis=1, name="gather")
    vi = oh.make_tensor_value_info
    graph = oh.make_graph([node], "g", [vi("d", TensorProto.FLOAT, [2, 100]), vi("i", TensorProto.INT64, [2, 4])],
                          [vi("y", TensorProto.FLOAT, [2, 4])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    got = make_evaluator(model).run(None, {"d": data, "i": indices})[0]
    np.testing.assert_array_equal(got, np.take_along_axis(data, indices % 100, axis=1))
    with pytest.raises(IndexOutOfRangeError, match="GatherElements node 'gather': index 100 is out of range"):
        make_evaluator(model).run(None, {"d": data, "i": np.full((2, 4), 100)})


def test_no_updates_and_one_update():
    for count in (0, 1):
        model = scatter_model("ScatterElements", opset=18, data_shape=[4, 2], indices_shape=[count, 2], reduction="max")
        feeds = {"data": np.arange(8, dtype=np.float32).reshape(4, 2), "indices": np.full((count, 2), -1, np.int64),
                 "updates": np.full((count, 2), 9, np.float32)}
        run_case("ScatterElements", model, feeds, {"axis": 0, "reduction": "max"}, TensorProto.FLOAT)


def test_dynamic_data_shape_uses_shape_ops():
    model = scatter_model("ScatterND", opset=18, data_shape=["a", "b", 3], indices_shape=[6, 2], updates_shape=[6, 3],
                          reduction="add", data_type=TensorProto.INT32)
    rng = np.random.default_rng(0)
    feeds = {"data": rng.integers(-9, 9, (4, 5, 3)).astype(np.int32),
             "indices": np.stack([rng.integers(-4, 4, 6), rng.integers(-5, 5, 6)], axis=1),
             "updates": rng.integers(-9, 9, (6, 3)).astype(np.int32)}
    run_case("ScatterND", model, feeds, {"reduction": "add"}, TensorProto.INT32, static=False)


# ---- what the lowering declines --------------------------------------------------------------------

@pytest.mark.parametrize("make, phrase", [
    (lambda: scatter_model("ScatterElements", opset=18, reduction="add", indices_shape=["e", 5]),
     "number of updates is not static"),
    (lambda: scatter_model("ScatterND", opset=18, reduction="add", data_shape=[4, 5], indices_shape=[3, "k"],
                           updates_shape=[3, 5]), "index tuple length"),
    (lambda: scatter_model("ScatterElements", opset=18, reduction="max", data_type=TensorProto.STRING),
     "STRING"),
    (lambda: scatter_model("ScatterND", opset=18, reduction="add", data_shape=[2**31 - 2**20, 1],
                           indices_shape=[2**20 + 1, 1], updates_shape=[2**20 + 1, 1]), "exceed int32"),
])
def test_blockers(make, phrase):
    model = ir.serde.deserialize_model(make())
    node = next(n for n in model.graph if n.op_type.startswith("Scatter"))
    reason = net.network_blocker(node, 17)
    assert reason is not None and phrase in reason


# ---- the restriction check -------------------------------------------------------------------------

def test_violations_topk_k_limit_loop_shapes_nonzero():
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([5000]))

    def topk(k):
        const = ir.node("Constant", [], {"value": ir.tensor(np.array([k], np.int64))}).outputs[0]
        return [ir.node("TopK", [x, const], num_outputs=2)]

    assert tensorrt_violations(topk(3840), "8.6") == tensorrt_violations(topk(3840), "10") == []
    assert "K <= 3840" in tensorrt_violations(topk(3841), "8.6")[0]
    assert "K <= 3840" in tensorrt_violations(topk(3841), "10")[0]
    flags = ir.Value(name="flags", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([4]))
    assert "NonZero on BOOL" in tensorrt_violations([ir.node("NonZero", [flags])], "8.6")[0]
    assert tensorrt_violations([ir.node("NonZero", [x])], "8.6") == []
    # the standard lowering's Loop carries keys/values that shrink every round: detected
    model = ir.serde.deserialize_model(scatter_model("ScatterElements", opset=18, reduction="add"))
    node = next(iter(model.graph))
    nodes, _ = seg.lower_reduction(node, 17, seg.Names())
    found = tensorrt_violations(nodes, "10")
    assert any("Loop carried value" in v for v in found) and any("run time" in v for v in found)
    # a Loop whose carried value keeps its shape is fine
    it = ir.Value(name="i", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([]))
    cond = ir.Value(name="c", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([]))
    acc = ir.Value(name="acc", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([5000]))
    step = ir.node("Add", [acc, acc])
    body = ir.Graph([it, cond, acc], [cond, step.outputs[0]], nodes=[step], name="body")
    assert tensorrt_violations([ir.node("Loop", [None, cond, x], {"body": body})], "8.6") == []


# ---- the tensorrt flow -------------------------------------------------------------------------------

@pytest.mark.parametrize("version", ["8.6", "10"])
@pytest.mark.parametrize("where", ["if", "loop"])
def test_subgraphs_lowered_and_clean(version, where):
    model = scatter_model("ScatterElements", opset=17, where=where, reduction="add", data_type=TensorProto.INT8,
                          data_shape=(4, 5), indices_shape=(6, 5))
    out, outcome = sr.prepare_for_tensorrt(model, trt_version=version, validate=True, return_report=True)
    assert outcome.validation["max_abs_diff"] == 0.0
    ops = [n.op_type for n, _ in iter_nodes(ir.serde.deserialize_model(out))]
    assert "ScatterElements" not in ops and not {"TopK", "NonZero"} & set(ops)
    assert not any(f.blocked for f in check(ir.serde.deserialize_model(out), f"tensorrt-{version}"))


def test_function_lowered_with_the_types_its_call_site_gives():
    model = scatter_model("ScatterElements", opset=18, where="function", reduction="max")
    (before,) = check(ir.serde.deserialize_model(model), "tensorrt-8.6")
    assert before.blocked and before.fix == "scatter-rewrite tensorrt --trt-version 8.6"
    out, outcome = sr.prepare_for_tensorrt(model, trt_version="8.6", return_report=True, validate=True)
    (report,) = [p for p in outcome.passes if p["pass"] == "tensorrt"]
    (done,) = report["rewritten"]
    assert "function local::ScatterFn" in done["node"] and "TensorRT-safe" in done["detail"]
    assert outcome.validation["tolerance"] == "exact (bit for bit)"
    assert not any(f.blocked for f in check(ir.serde.deserialize_model(out), "tensorrt-8.6"))


def test_function_called_with_two_update_counts_left_alone_with_the_reason():
    """The network is built for one count: call sites that disagree leave it dynamic in the body."""
    model = scatter_model("ScatterElements", opset=18, where="function", reduction="max",
                          data_shape=(4, 5), indices_shape=(2, 5))
    vi = oh.make_tensor_value_info
    model.graph.input.extend([vi("indices2", TensorProto.INT64, [3, 5]), vi("updates2", TensorProto.FLOAT, [3, 5])])
    model.graph.node.append(oh.make_node("ScatterFn", ["data", "indices2", "updates2"], ["output2"],
                                         domain="local", name="call_1"))
    model.graph.output.append(vi("output2", TensorProto.FLOAT, [4, 5]))
    with pytest.raises(sr.ConversionError, match="cannot prepare for TensorRT 8.6: .*number of updates is not "
                                                 "static") as refused:
        sr.prepare_for_tensorrt(model, trt_version="8.6", validate=True)
    (skip,) = refused.value.declined
    assert "number of updates is not static" in skip.detail
    (finding,) = check(ir.serde.deserialize_model(model), "tensorrt-8.6")
    assert finding.blocked and finding.fix is None


def test_idempotent():
    model = ir.serde.deserialize_model(scatter_model("ScatterND", opset=18, reduction="min", data_shape=(4, 5),
                                                     indices_shape=(6, 1), updates_shape=(6, 5)))
    from scatter_rewrite.verbs import tensorrt_passes

    assert any([p(model).modified for p in tensorrt_passes("8.6")])  # every pass runs (no short-circuit)
    assert model.opset_imports[""] == 17  # TensorRT 8.6's parser documents opsets up to 17
    assert not any([p(model).modified for p in tensorrt_passes("8.6")])


def test_check_clean_after_tensorrt_8_6_cli(tmp_path):
    source, target = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(gnn_model("max", nodes=9, edges=40, feats=4), source)
    result = invoke("check", source, "--target", "tensorrt-8.6", "--json")
    assert result.exit_code == 1
    (finding,) = json.loads(result.stdout)["models"][0]["findings"]
    assert finding["fix"] == "scatter-rewrite tensorrt --trt-version 8.6"
    result = invoke("tensorrt", source, "-o", target, "--trt-version", "8.6")
    assert result.exit_code == 0, result.output
    assert "PASSED" in result.stdout
    result = invoke("check", target, "--target", "tensorrt-8.6")
    assert result.exit_code == 0, result.output


# ---- PyTorch exports (tests/data/torch_trt/make.py) against PyTorch's saved outputs -----------------

TORCH = Path(__file__).parents[1] / "data" / "torch_trt"


def torch_case(name: str):
    """The export, its inputs and PyTorch's outputs in the order of the model's."""
    model, feeds, pytorchs = load_export(TORCH, name)
    return model, feeds, [pytorchs[o.name] for o in model.graph.output]


@pytest.mark.parametrize("name", ["scatter_add_gnn_static_ts16", "index_put_dynamo18", "scatter_amax_ts16"])
def test_pytorch_exports_on_8_6(name):
    model, feeds, want = torch_case(name)
    out, outcome = sr.prepare_for_tensorrt(model, trt_version="8.6", validate=True, inputs=feeds, return_report=True)
    assert outcome.validation["checked_against"] == "onnxruntime on the original model"
    (report,) = [p for p in outcome.passes if p["pass"] == "tensorrt"]
    found = [n for n, _ in iter_nodes(ir.serde.deserialize_model(out))]
    assert not FORBIDDEN - {"If"} & {n.op_type for n in found}
    assert not any(attr(n, "reduction", "none") != "none" for n in found if n.op_type.startswith("Scatter")), report
    assert any("TensorRT-safe" in r["detail"] for r in report["rewritten"]), report
    session = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, w in zip(session.run(None, feeds), want):  # against PyTorch's eager result
        np.testing.assert_allclose(got.reshape(w.shape), w, rtol=1e-6, atol=1e-6)
    assert not any(f.blocked for f in check(ir.serde.deserialize_model(out), "tensorrt-8.6"))


def test_pytorch_gnn_export_with_dynamic_edges_is_lowered_once_the_edge_count_is_fixed():
    """TorchScript computes the update shapes at run time (Shape -> Gather -> Concat -> Expand,
    Slice to Shape(...)): fixing num_edges alone makes them static once that arithmetic is folded."""
    model, feeds, want = torch_case("scatter_add_gnn_ts16")
    with pytest.raises(sr.ConversionError, match="number of updates is not static"):
        sr.prepare_for_tensorrt(model, trt_version="8.6")
    (finding,) = check(ir.serde.deserialize_model(model), "tensorrt-8.6")
    assert finding.blocked and finding.fix == "scatter-rewrite tensorrt --trt-version 8.6 --fix-dim num_edges=SIZE"

    edges = feeds["dst"].shape[0]
    fixed, outcome = sr.prepare_for_tensorrt(model, trt_version="8.6", fix_dims={"num_edges": edges},
                                             validate=True, inputs=feeds, return_report=True)
    (report,) = [p for p in outcome.passes if p["pass"] == "tensorrt"]
    assert report["rewritten"] and not report["skipped"]
    assert not FORBIDDEN & {n.op_type for n in fixed.graph.node}
    assert outcome.validation["checked_against"] == "onnxruntime on the original model"
    assert not any(f.blocked for f in check(ir.serde.deserialize_model(fixed), "tensorrt-8.6"))
    (got,) = ort_run(fixed, feeds)
    np.testing.assert_allclose(got, want[0], rtol=1e-5, atol=1e-5)  # PyTorch's own output


# ---- size: far beyond what a TopK sort could take on TensorRT (K <= 3840) -----------------------

@pytest.mark.parametrize("reduction", ["add", pytest.param("max", marks=pytest.mark.slow)])
def test_200000_updates_on_20000x64(reduction):
    model = gnn_model(reduction, nodes=20000, edges=200000, feats=64)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((20000, 64)).astype(np.float32), "dst": rng.integers(-20000, 20000, 200000),
             "msg": rng.standard_normal((200000, 64)).astype(np.float32)}
    out, outcome = sr.prepare_for_tensorrt(model, trt_version="8.6", validate=True, inputs=feeds, return_report=True)
    ops = [n.op_type for n in out.graph.node]
    assert not FORBIDDEN & set(ops) and "ScatterElements" not in ops
    assert ops.count("ScatterND") == 1
    assert outcome.validation["checked_against"] == "onnxruntime on the original model"


# ---- size: the TensorRT 8.6 form's node count does not grow with the number of updates ----------

GNN_EXPORTS = Path(__file__).parents[1] / "data" / "torch"


def top_level_counts(model: onnx.ModelProto, feeds: dict | None = None) -> tuple[int, int]:
    """(nodes of ``tensorrt --trt-version 8.6``, nodes of ``lower --opset 13``) in the main graph,
    as benchmarks/bench_torchscript.py counts them; both results validated."""
    trt = sr.prepare_for_tensorrt(model, trt_version="8.6", validate=True, inputs=feeds)
    lowered = sr.lower(model, opset=13, validate=True, inputs=feeds)
    loops = [n for n in ir.serde.deserialize_model(trt).graph if n.op_type == "Loop"]
    assert_fixed_shape_loops(trt, loops)
    return len(trt.graph.node), len(lowered.graph.node)


@pytest.mark.parametrize("name", ["gnn_max_layer_ts17", "gnn_max_layer_dynamo18"])
def test_tensorrt_8_6_form_within_twice_lower_opset_13_on_the_gnn_exports(name):
    model, feeds, _ = load_export(GNN_EXPORTS, name)
    trt, lowered = top_level_counts(model, feeds)
    assert trt <= 2 * lowered, (trt, lowered)


def test_tensorrt_8_6_form_size_does_not_grow_with_the_updates():
    """The synthetic GNN max layer (E updates onto E / 10 rows of 64 features): a few thousand
    updates (a network of 78 steps) and 300 (45 steps) give the same node count, within 2x that of
    ``lower --opset 13``; both carry one int32 sort key."""
    counts = []
    for edges in (300, 3000):
        model = gnn_model("max", nodes=edges // 10, edges=edges, feats=64)
        rng = np.random.default_rng(edges)
        feeds = {"x": rng.choice(SPECIAL, (edges // 10, 64)).astype(np.float32),
                 "dst": rng.integers(-(edges // 10), edges // 10, edges),
                 "msg": rng.choice(SPECIAL, (edges, 64)).astype(np.float32)}
        counts.append(top_level_counts(model, feeds))
    (small, small_lowered), (large, large_lowered) = counts
    assert small == large and large <= 2 * large_lowered, counts


def test_network_loop_bodies_use_only_ops_tensorrt_takes():
    """Every op of the Loop bodies (pair and one-key sorts, the scan with NaN flags, bool data) is
    in the audited table of both TensorRT versions with a type it lists, and the check walks into
    the bodies (a body op it does not know is reported)."""
    from scatter_rewrite.targets.tensorrt.parser import SUPPORTED_TYPES

    body_ops = set()
    for nodes, dtype in ((7, TensorProto.FLOAT), ("n", TensorProto.FLOAT), (7, TensorProto.BOOL)):
        _, emitted = lower_network(gnn_model("max", nodes=nodes, edges=37, feats=5, dtype=dtype))
        loops = [n for n in emitted if n.op_type == "Loop"]
        assert len(loops) == 2
        for loop in loops:
            body = list(attr(loop, "body"))
            body_ops |= {n.op_type for n in body}
            for version in ("8.6", "10"):
                assert tensorrt_violations(body, version) == []
    assert {"GatherElements", "Mod", "Xor", "Gather"} <= body_ops
    assert body_ops <= set(SUPPORTED_TYPES["8.6"]) & set(SUPPORTED_TYPES["10"]), body_ops
    _, emitted = lower_network(gnn_model("max", nodes=7, edges=37, feats=5))
    loop = next(n for n in emitted if n.op_type == "Loop")
    body = attr(loop, "body")
    first = next(iter(body))
    shifted = ir.node("BitShift", [first.outputs[0], first.outputs[0]], {"direction": "LEFT"})
    body.insert_after(first, shifted)
    assert any("BitShift" in v for v in tensorrt_violations([loop], "8.6"))


def test_check_sees_through_the_rank_hiding_if():
    """TorchScript wraps scatter_reduce in Ifs on a constant condition that hide the rank: check gives
    the fix because the tensorrt pass inlines them (and says so in its notes)."""
    model, feeds, _ = torch_case("scatter_amax_ts16")
    (finding,) = [f for f in check(ir.serde.deserialize_model(model), "tensorrt-8.6") if f.op == "ScatterElements"]
    assert finding.blocked and finding.fix == "scatter-rewrite tensorrt --trt-version 8.6"
    out, outcome = sr.prepare_for_tensorrt(model, trt_version="8.6", return_report=True)
    (report,) = [p for p in outcome.passes if p["pass"] == "tensorrt"]
    assert any("If" in note for note in report["notes"])
    assert "If" not in [n.op_type for n in out.graph.node]
