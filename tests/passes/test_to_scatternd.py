"""to_scatternd: every ScatterElements becomes an exactly equivalent ScatterND."""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto
from onnx.backend.test.case.node import collect_testcases

import scatter_rewrite as sr
from scatter_rewrite.graph import attr
from scatter_rewrite.passes.to_scatternd import ToScatterNDPass
from scatter_rewrite.testing import scatter_model
from tests.helpers.models import op_types, scatter_nodes, scatter_reshaped_at_run_time
from tests.helpers.runs import ort_run


# onnxruntime on one thread: float sums in one order
run = functools.partial(ort_run, threads=1)


def expected_scatter_elements(data, indices, updates, axis, reduction="none"):
    """A loop-per-element oracle straight from the spec (independent of the pass and of ORT)."""
    out = data.copy()
    axis %= data.ndim
    ops = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
    for pos in np.ndindex(indices.shape):
        target = list(pos)
        target[axis] = int(indices[pos]) % data.shape[axis]
        target = tuple(target)
        out[target] = updates[pos] if reduction == "none" else ops[reduction](out[target], updates[pos])
    return out


# ---- ONNX's backend cases ------------------------------------------------------------------

BACKEND_CASES = [c for c in collect_testcases() if c.model is not None
                 and {n.op_type for n in c.model.graph.node} & {"ScatterElements", "ScatterND"}]


def test_backend_cases_were_found():
    names = {c.name for c in BACKEND_CASES}
    assert "test_scatter_elements_with_negative_indices" in names and "test_scatter_elements_with_reduction_max" in names


@pytest.mark.parametrize("case", BACKEND_CASES, ids=lambda c: c.name)
def test_backend_case(case):
    rewritten = sr.to_scatternd(case.model)
    onnx.checker.check_model(rewritten, full_check=True)
    ops = op_types(rewritten)
    assert "ScatterElements" not in ops and "ScatterND" in ops
    inputs, expected = case.data_sets[0]
    feeds = {i.name: v for i, v in zip(rewritten.graph.input, inputs)}
    for got, want in zip(run(rewritten, feeds), expected):
        np.testing.assert_array_equal(got, want)  # exact: even add/mul, ScatterND applies updates in the same order


# ---- reductions, dtypes, int32 indices, negative axis ---------------------------------------

@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_reductions_every_axis(reduction, axis):
    rng = np.random.default_rng(abs(axis) * 7 + len(reduction))
    data_shape, indices_shape = (3, 4, 5), [2, 3, 4]
    model = scatter_model("ScatterElements", opset=18, data_shape=data_shape, indices_shape=indices_shape,
                          axis=axis, reduction=reduction)
    rewritten = sr.to_scatternd(model)
    (node,) = scatter_nodes(rewritten)
    assert node.op_type == "ScatterND" and attr(node, "reduction", "none") == reduction
    assert ("reduction" in node.attributes) == (reduction != "none")
    size = data_shape[axis]
    if reduction == "none":  # unique along the axis: a permutation per column, negatives included
        keys = rng.random([size] + [d for i, d in enumerate(indices_shape) if i != axis % 3]).argsort(axis=0)
        indices = np.moveaxis(keys[: indices_shape[axis]], 0, axis % 3) - size * (rng.random(indices_shape) < 0.5)
    else:
        indices = rng.integers(-size, size, size=indices_shape)
    data = rng.integers(-5, 5, size=data_shape).astype(np.float32)
    updates = rng.integers(-5, 5, size=indices_shape).astype(np.float32)
    feeds = {"data": data, "indices": indices.astype(np.int64), "updates": updates}
    want = expected_scatter_elements(data, indices, updates, axis, reduction)
    np.testing.assert_array_equal(run(rewritten, feeds)[0], want)
    np.testing.assert_array_equal(run(model, feeds)[0], want)


@pytest.mark.parametrize("data_type", [TensorProto.BOOL, TensorProto.INT8, TensorProto.UINT8, TensorProto.UINT16,
                                       TensorProto.INT32, TensorProto.INT64, TensorProto.FLOAT16, TensorProto.DOUBLE,
                                       TensorProto.STRING, TensorProto.COMPLEX64, TensorProto.BFLOAT16])
@pytest.mark.parametrize("indices_type", [TensorProto.INT32, TensorProto.INT64])
def test_dtypes_and_int32_indices(data_type, indices_type):
    model = scatter_model("ScatterElements", opset=18, data_type=data_type, indices_type=indices_type, axis=-1)
    rewritten, outcome = sr.to_scatternd(model, validate=True, return_report=True)
    onnx.checker.check_model(rewritten, full_check=True)
    assert "ScatterElements" not in op_types(rewritten)
    casts_indices = any(n.op_type == "Cast" and n.input[0] == "indices" for n in rewritten.graph.node)
    assert casts_indices == (indices_type == TensorProto.INT32)
    assert outcome.validation["max_abs_diff"] == 0.0


@pytest.mark.parametrize("reduction", ["add", "mul"])
@pytest.mark.parametrize("data_type", [TensorProto.FLOAT, TensorProto.INT32, TensorProto.DOUBLE])
def test_float_reductions_validated(reduction, data_type):
    model = scatter_model("ScatterElements", opset=16, data_shape=(6, 3), indices_shape=(9, 3), data_type=data_type,
                          reduction=reduction)
    _, outcome = sr.to_scatternd(model, validate=True, return_report=True)
    assert outcome.validation["checked_against"] == "onnxruntime on the original model"


def test_max_below_opset_18_is_left_alone():
    """The TorchScript exporter writes ScatterElements(max) at opset 16; ScatterND has max only from 18."""
    model = scatter_model("ScatterElements", opset=16, reduction="max")
    rewritten, outcome = sr.to_scatternd(model, return_report=True)
    assert op_types(rewritten) == ["ScatterElements"]
    (skip,) = outcome.passes[0]["skipped"]
    assert "only from opset 18" in skip["detail"] and "scatter_rewrite.upgrade(model, opset=18) first" in skip["detail"]


# ---- static, dynamic and constant indices ----------------------------------------------------

def test_static_shape_uses_a_constant_grid():
    model = scatter_model("ScatterElements", opset=13, data_shape=(4, 5, 6), indices_shape=(2, 5, 3), axis=1)
    rewritten = sr.to_scatternd(model)
    assert op_types(rewritten) == ["Less", "Cast", "Mul", "Add", "Unsqueeze", "Concat", "ScatterND"]
    grids = {i.name: onnx.numpy_helper.to_array(i) for i in rewritten.graph.initializer if "grid" in i.name}
    assert sorted(g.shape for g in grids.values()) == [(2, 5, 3, 1), (2, 5, 3, 1)]


def test_dynamic_shape_uses_a_runtime_grid():
    model = scatter_model("ScatterElements", opset=18, data_shape=("N", "C", 6), indices_shape=("M", "K", 2), axis=2)
    rewritten, outcome = sr.to_scatternd(model, validate=True, return_report=True)
    ops = op_types(rewritten)
    assert ops.count("Range") == 2 and ops.count("Expand") == 2 and "ScatterND" in ops
    assert "run-time grid" in outcome.passes[0]["rewritten"][0]["detail"]


def test_constant_indices_become_constant_coordinates():
    model = scatter_model("ScatterElements", opset=18, data_shape=(4, 3), indices_shape=(2, 3), axis=0)
    indices = np.array([[0, -1, 2], [-4, 1, 3]], np.int64)
    model.graph.initializer.append(onnx.numpy_helper.from_array(indices, "indices"))
    del model.graph.input[1]
    rewritten = sr.to_scatternd(model)
    assert op_types(rewritten) == ["ScatterND"]
    coords = {i.name: onnx.numpy_helper.to_array(i) for i in rewritten.graph.initializer}
    (grid,) = [v for k, v in coords.items() if "coords" in k]
    np.testing.assert_array_equal(grid[..., 0], [[0, 3, 2], [0, 1, 3]])
    data, updates = np.arange(12, dtype=np.float32).reshape(4, 3), -np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(run(rewritten, {"data": data, "updates": updates})[0],
                                  expected_scatter_elements(data, indices, updates, 0))


def test_constant_index_out_of_range_is_an_error():
    model = scatter_model("ScatterElements", opset=18, data_shape=(4, 3), indices_shape=(1, 3))
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array([[0, 4, 1]], np.int64), "indices"))
    del model.graph.input[1]
    with pytest.raises(sr.IndexOutOfRangeError, match="out of range for axis 0 of size 4"):
        sr.to_scatternd(model)


def test_unknown_rank_is_left_alone():
    model = scatter_reshaped_at_run_time()  # (ranks unknown)
    rewritten, outcome = sr.to_scatternd(model, return_report=True)
    assert op_types(rewritten) == ["Reshape", "Reshape", "Reshape", "ScatterElements", "ReduceSum"]
    assert "rank of data/indices is unknown" in outcome.passes[0]["skipped"][0]["detail"]


# ---- containers ------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["if", "loop", "function"])
@pytest.mark.parametrize("reduction", ["none", "add"])
def test_containers(where, reduction):
    model = scatter_model("ScatterElements", opset=18, where=where, axis=-1, reduction=reduction,
                          data_type=TensorProto.INT32)
    rewritten, outcome = sr.to_scatternd(model, validate=True, return_report=True)
    onnx.checker.check_model(rewritten, full_check=True)
    ops = op_types(rewritten)
    assert "ScatterElements" not in ops and ops.count("ScatterND") == (2 if where == "if" else 1)
    assert outcome.validation["max_abs_diff"] == 0.0
    if where == "function":  # rank from the call site, shapes at run time
        assert "run-time grid" in outcome.passes[0]["rewritten"][0]["detail"]
    else:  # constants inside a subgraph are Constant nodes, not subgraph initializers
        assert "Constant" in ops and len(rewritten.graph.initializer) == 0


# ---- ScatterND's explicit reduction="none" -----------------------------------------------------

@pytest.mark.parametrize("where", ["main", "if", "function"])
def test_scatternd_explicit_none_loses_the_attribute(where):
    model = scatter_model("ScatterND", opset=18, data_shape=(4, 5), indices_shape=(2, 1), updates_shape=(2, 5),
                          where=where, reduction="none")
    rewritten, outcome = sr.to_scatternd(model, validate=True, return_report=True)
    nodes = scatter_nodes(rewritten)
    assert nodes and all(n.op_type == "ScatterND" and "reduction" not in n.attributes for n in nodes)
    assert all('reduction="none" dropped' in r["detail"] for r in outcome.passes[0]["rewritten"])


def test_scatternd_with_a_real_reduction_is_kept():
    model = scatter_model("ScatterND", opset=18, data_shape=(4, 5), indices_shape=(2, 1), updates_shape=(2, 5),
                          reduction="add")
    result = ToScatterNDPass()(ir.serde.deserialize_model(model))
    assert not result.modified
    (node,) = [n for n in result.model.graph]
    assert attr(node, "reduction") == "add"


# ---- idempotence and model kinds -------------------------------------------------------------

def test_idempotent():
    model = ir.serde.deserialize_model(scatter_model("ScatterElements", opset=18, where="function", reduction="mul"))
    assert ToScatterNDPass()(model).modified
    second = ToScatterNDPass()(model)
    assert not second.modified and not second.rewritten and not second.skipped


def test_names_do_not_clash():
    """Two scatters with the same node name get distinct helper values."""
    model = scatter_model("ScatterElements", opset=18, axis=1)
    second = onnx.NodeProto()
    second.CopyFrom(model.graph.node[0])
    second.input[0], second.output[0] = "output", "output2"
    model.graph.node.append(second)
    model.graph.output[0].name = "output2"
    rewritten, outcome = sr.to_scatternd(model, validate=True, return_report=True)
    onnx.checker.check_model(rewritten, full_check=True)
    assert op_types(rewritten).count("ScatterND") == 2


# ---- hypothesis: original vs rewritten in onnxruntime ----------------------------------------

@st.composite
def scatter_configs(draw):
    rank = draw(st.integers(1, 5))
    data_shape = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    axis = draw(st.integers(-rank, rank - 1))
    reduction = draw(st.sampled_from(["none", "none", "add", "max", "min", "mul"]))
    indices_shape = [draw(st.integers(1, d)) for d in data_shape]
    if reduction != "none":  # duplicates welcome: more updates than rows along the axis
        indices_shape[axis] = draw(st.integers(1, 2 * data_shape[axis]))
    dynamic = draw(st.booleans())
    indices_type = draw(st.sampled_from([TensorProto.INT32, TensorProto.INT64]))
    seed = draw(st.integers(0, 2**16))
    return rank, data_shape, indices_shape, axis, reduction, dynamic, indices_type, seed


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scatter_configs())
def test_differential(case):
    rank, data_shape, indices_shape, axis, reduction, dynamic, indices_type, seed = case
    rng = np.random.default_rng(seed)
    shape_of = (lambda prefix, s: [f"{prefix}{i}" for i in range(len(s))]) if dynamic else (lambda _, s: s)
    model = scatter_model("ScatterElements", opset=18, data_shape=shape_of("d", data_shape),
                          indices_shape=shape_of("i", indices_shape), indices_type=indices_type, axis=axis,
                          reduction=reduction, data_type=TensorProto.INT64)
    rewritten = sr.to_scatternd(model, validate=False)  # (judged below, against the spec)
    assert "ScatterElements" not in op_types(rewritten)
    size, a = data_shape[axis], axis % rank
    if reduction == "none":
        others = [d for i, d in enumerate(indices_shape) if i != a]
        keys = rng.random([size] + others).argsort(axis=0)[: indices_shape[a]]
        indices = np.moveaxis(keys, 0, a)
    else:
        indices = rng.integers(0, size, size=indices_shape)
    indices = np.where(rng.random(indices_shape) < 0.4, indices - size, indices)
    feeds = {"data": rng.integers(-9, 9, size=data_shape), "indices": indices.astype(onnx.helper.tensor_dtype_to_np_dtype(indices_type)),
             "updates": rng.integers(-9, 9, size=indices_shape)}
    want = expected_scatter_elements(feeds["data"], indices, feeds["updates"], axis, reduction)
    np.testing.assert_array_equal(run(model, feeds)[0], want)
    np.testing.assert_array_equal(run(rewritten, feeds)[0], want)


@pytest.mark.parametrize("op, verb", [("Scatter", "upgrade(model)"),
                                      ("TensorScatter", "lower(model, opset=N)")])
def test_other_scatter_ops_are_reported_not_silently_kept(op, verb):
    if op == "Scatter":
        model = scatter_model("Scatter", opset=10, axis=1)
    else:
        node = onnx.helper.make_node("TensorScatter", ["cache", "update"], ["out"], axis=-2)
        vi = onnx.helper.make_tensor_value_info
        model = onnx.helper.make_model(onnx.helper.make_graph(
            [node], "g", [vi("cache", onnx.TensorProto.FLOAT, [1, 8, 4]), vi("update", onnx.TensorProto.FLOAT, [1, 2, 4])],
            [vi("out", onnx.TensorProto.FLOAT, [1, 8, 4])]), opset_imports=[onnx.helper.make_opsetid("", 24)])
    out, outcome = sr.to_scatternd(model, return_report=True)
    (skip,) = outcome.passes[0]["skipped"]
    assert skip["node"].startswith(op) and f"scatter_rewrite.{verb} first" in skip["detail"]
    assert [n.op_type for n in out.graph.node] == [op]
