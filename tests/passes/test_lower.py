"""The lower pass: reductions lowered to exact standard ops at opsets 11-17, proven in onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator

import scatter_rewrite as sr
from tests.helpers.equivalence import assert_validation_accepts
from tests.helpers.runs import BACKEND_CASES, expected_outputs, ort_run, run_with_later_first_ties
from tests.helpers.models import gnn_model, op_types
from scatter_rewrite.errors import ConversionError, OptionError
from scatter_rewrite.passes.lower import LowerPass
from scatter_rewrite.testing import scatter_model
from tests.helpers.shapes import elements_shapes, nd_shapes

ort.set_default_logger_severity(3)

DTYPES = {
    TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64, TensorProto.FLOAT16: np.float16,
    TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8, TensorProto.INT16: np.int16,
    TensorProto.UINT16: np.uint16, TensorProto.INT32: np.int32, TensorProto.UINT32: np.uint32,
    TensorProto.INT64: np.int64, TensorProto.UINT64: np.uint64, TensorProto.BOOL: np.bool_,
}
# Values that make max/min hard: ties of -0.0/+0.0, NaN in data and updates, infinities.
FLOAT_POOL = np.array([np.nan, -0.0, 0.0, 1.0, -1.0, 2.5, np.inf, -np.inf, 1.0, -0.0])


# ---- ONNX's own backend cases --------------------------------------------------------------

def test_backend_reduction_cases_were_found():
    names = " ".join(c.name for c in BACKEND_CASES)
    for want in ("scatter_elements_with_reduction_max", "scatter_elements_with_reduction_min",
                 "scatternd_add", "scatternd_multiply", "scatternd_max", "scatternd_min"):
        assert want in names


@pytest.mark.parametrize("opset", [11, 13, 16, 17])
@pytest.mark.parametrize("case", BACKEND_CASES, ids=lambda c: c.name)
def test_backend_case_lowered(case, opset):
    lowered = sr.lower(case.model, opset=opset)
    onnx.checker.check_model(lowered, full_check=True)
    assert {o.version for o in lowered.opset_import if o.domain in ("", "ai.onnx")} == {opset}
    reductions = [n for n in lowered.graph.node if n.op_type in ("ScatterElements", "ScatterND")
                  and any(a.name == "reduction" and a.s != b"none" for a in n.attribute)]
    kept = {a.s for r in reductions for a in r.attribute if a.name == "reduction"}
    assert all(opset >= 16 and k in (b"add", b"mul") for k in kept)  # only what the target has
    inputs, expected = case.data_sets[0]
    feeds = {i.name: v for i, v in zip(lowered.graph.input, inputs)}
    for got, want in zip(ort_run(lowered, feeds), expected):
        np.testing.assert_allclose(got, want, rtol=1e-6)


# ---- differential: original vs lowered in onnxruntime ----------------------------------------


def _lowering_values(rng, shape, dtype, reduction):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        if reduction in ("max", "min"):
            return rng.choice(FLOAT_POOL, size=shape).astype(dtype)
        values = rng.standard_normal(shape)
        values[rng.random(shape) < 0.1] = 0.0
        return values.astype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    info = np.iinfo(dtype)
    if reduction in ("add", "mul"):  # full range: wrap-around must match
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
    return rng.integers(max(info.min, -4), min(info.max, 4), size=shape, endpoint=True, dtype=dtype)


common = dict(
    dtype=st.sampled_from(sorted(DTYPES)),
    reduction=st.sampled_from(["add", "mul", "max", "min"]),
    opset=st.sampled_from([11, 13, 16, 17]),
    dynamic=st.booleans(),
    index_type=st.sampled_from([TensorProto.INT64, TensorProto.INT32]),
    seed=st.integers(0, 2**31 - 1),
)


def _symbolic(shape, prefix):
    return [f"{prefix}{i}" for i in range(len(shape))]


def _check_lowered(op, model, feeds, attrs, opset, reduction, dtype):
    lowered = sr.lower(model, opset=opset)
    onnx.checker.check_model(lowered, full_check=True)
    ops = op_types(lowered)
    if opset >= (16 if reduction in ("add", "mul") else 18):
        assert ops == [op]  # kept: the target has this reduction
        return
    assert "TopK" in ops and op not in ops[-1:]
    assert_validation_accepts(expected_outputs(model, feeds, op, attrs), ort_run(lowered, feeds),
                float_reduction=reduction in ("add", "mul") and np.dtype(DTYPES[dtype]).kind == "f")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=elements_shapes(max_rank=3, max_along_axis=7), **common)
def test_scatter_elements_differential(case, dtype, reduction, opset, dynamic, index_type, seed):
    data_shape, idx_shape, axis = case
    rng = np.random.default_rng(seed)
    model = scatter_model(
        "ScatterElements", opset=18, data_type=dtype, indices_type=index_type, axis=axis, reduction=reduction,
        data_shape=_symbolic(data_shape, "d") if dynamic else data_shape,
        indices_shape=_symbolic(idx_shape, "i") if dynamic else idx_shape,
    )
    bound = data_shape[axis]
    feeds = {
        "data": _lowering_values(rng, data_shape, DTYPES[dtype], reduction),
        "indices": rng.integers(-bound, bound, size=idx_shape).astype(DTYPES[index_type]),
        "updates": _lowering_values(rng, idx_shape, DTYPES[dtype], reduction),
    }
    _check_lowered("ScatterElements", model, feeds, {"axis": axis, "reduction": reduction}, opset, reduction, dtype)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=nd_shapes(max_rank=3), **{**common, "index_type": st.just(TensorProto.INT64)})  # ScatterND: int64 only
def test_scatter_nd_differential(case, dtype, reduction, opset, dynamic, index_type, seed):
    data_shape, idx_shape, upd_shape = case
    rng = np.random.default_rng(seed)
    model = scatter_model(
        "ScatterND", opset=18, data_type=dtype, indices_type=index_type, reduction=reduction,
        data_shape=_symbolic(data_shape, "d") if dynamic else data_shape,
        indices_shape=(_symbolic(idx_shape[:-1], "b") + idx_shape[-1:]) if dynamic else idx_shape,
        updates_shape=_symbolic(upd_shape, "u") if dynamic else upd_shape,
    )
    k = idx_shape[-1]
    bounds = np.array(data_shape[:k])
    indices = rng.integers(-bounds, bounds, size=idx_shape).astype(DTYPES[index_type])
    feeds = {
        "data": _lowering_values(rng, data_shape, DTYPES[dtype], reduction),
        "indices": indices,
        "updates": _lowering_values(rng, upd_shape, DTYPES[dtype], reduction),
    }
    _check_lowered("ScatterND", model, feeds, {"reduction": reduction}, opset, reduction, dtype)


def test_nan_rules_match_onnxruntime_exactly():
    """The sequences where onnxruntime's fold is not associative: NaN after a larger value,
    NaN data, -0.0/+0.0 ties (the later one wins)."""
    for reduction in ("max", "min"):
        model = scatter_model("ScatterElements", opset=18, data_shape=["n"], indices_shape=["m"], reduction=reduction)
        feeds = {
            "data": np.array([np.nan, 1, -1, -1, 0, -0.0, 5, 5], np.float32),
            "indices": np.array([0, 1, 2, 2, 3, 3, 4, 5, 6, 6, 7, 7, 7]),
            "updates": np.array([3, np.nan, np.nan, 2, -0.0, 0.0, -0.0, 0.0, np.nan, 7, 9, np.nan, 1], np.float32),
        }
        lowered = sr.lower(model, opset=13)
        expected = ort_run(model, feeds)
        assert_validation_accepts(expected, ort_run(lowered, feeds), float_reduction=False)
        # and on a runtime whose Where copies -0.0 exactly (onnxruntime's does not, see select())
        assert_validation_accepts(expected, ReferenceEvaluator(lowered).run(None, feeds), float_reduction=False)


@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
@pytest.mark.parametrize("reduction", ["max", "min", "add"])
def test_the_lowering_is_exact_under_either_topk_tie_rule(op, reduction):
    """The sort's keys are distinct (key * n + position): a runtime whose TopK puts the later of
    equal values first (OpenVINO's) computes the lowered model as onnxruntime does, NaN and signed
    zeros included; with the plain keys its max/min came out otherwise."""
    values = np.array([np.nan, 1, -1, 2, 0, -0.0, 5, 3, 3, 0.0, -0.0, 7], np.float32)
    rng = np.random.default_rng(3)
    shapes = {"ScatterElements": dict(data_shape=["n"], indices_shape=["m"]),
              "ScatterND": dict(data_shape=["n"], indices_shape=["m", 1], updates_shape=["m"])}[op]
    model = scatter_model(op, opset=18, reduction=reduction, **shapes)
    lowered = sr.lower(model, opset=13, validate=False)
    for _ in range(5):
        indices = rng.integers(-4, 4, 24)
        feeds = {"data": rng.choice(values, 4), "updates": rng.choice(values, 24),
                 "indices": indices if op == "ScatterElements" else indices[:, None]}
        expected = ort_run(model, feeds)
        actual = run_with_later_first_ties(lowered, feeds)
        if reduction == "add":
            assert_validation_accepts(expected, actual, float_reduction=True)
        else:
            assert expected[0].tobytes() == actual[0].tobytes(), (feeds, expected, actual)


def test_many_duplicates_and_a_long_run():
    """One key hit 1000 times (10 rounds), others once: exact for max, tight for add."""
    rng = np.random.default_rng(1)
    for reduction in ("max", "add"):
        model = scatter_model("ScatterElements", opset=18, data_shape=[50, 3], indices_shape=["e", 3], reduction=reduction)
        indices = np.concatenate([np.full((1000, 3), 7), rng.integers(-50, 50, (200, 3))])
        rng.shuffle(indices)
        feeds = {"data": rng.standard_normal((50, 3)).astype(np.float32), "indices": indices,
                 "updates": rng.standard_normal(indices.shape).astype(np.float32)}
        lowered = sr.lower(model, opset=13)
        assert_validation_accepts(ort_run(model, feeds), ort_run(lowered, feeds), float_reduction=reduction == "add")


def test_no_updates():
    model = scatter_model("ScatterElements", opset=18, data_shape=[4, 2], indices_shape=["e", 2], reduction="max")
    lowered = sr.lower(model, opset=13)
    feeds = {"data": np.arange(8, dtype=np.float32).reshape(4, 2), "indices": np.zeros((0, 2), np.int64),
             "updates": np.zeros((0, 2), np.float32)}
    np.testing.assert_array_equal(ort_run(lowered, feeds)[0], feeds["data"])


# ---- the GNN shape: only the E row keys are sorted ------------------------------------------



@pytest.mark.parametrize("reduction", ["max", "min", "add", "mul"])
def test_gnn_rows_sorted_not_elements(reduction):
    model = gnn_model(reduction)
    lowered, outcome = sr.lower(model, opset=13, validate=True, return_report=True)
    assert outcome.validation["checked_against"] == "onnxruntime on the original model"
    # The sort sees one key per edge: its input is the Expand of dst to [E, 1], not [E, F].
    rng = np.random.default_rng(0)
    n, e = 30, 200
    feeds = {"x": rng.standard_normal((n, 8)).astype(np.float32), "dst": rng.integers(-n, n, e),
             "msg": rng.standard_normal((e, 8)).astype(np.float32)}
    feeds["msg"][rng.random((e, 8)) < 0.05] = np.nan
    assert_validation_accepts(ort_run(model, feeds), ort_run(lowered, feeds), float_reduction=reduction in ("add", "mul"))
    # the original Expand to [E, F] is gone (dead after lowering); only the [E, 1] one of dst remains (the
    # other Expand puts the rows back in the data's dynamic shape below opset 14: Builder.reshape_like)
    assert "index" not in {o for n in lowered.graph.node for o in n.output}
    assert [n.input[0] for n in lowered.graph.node if n.op_type == "Expand"].count("dst2") == 1
    topk = [node for node in lowered.graph.node if node.op_type == "TopK"]
    assert len(topk) == 1
    probe = onnx.helper.make_tensor_value_info(topk[0].input[0], TensorProto.INT64, None)
    lowered.graph.output.append(probe)
    keys = ort_run(lowered, feeds)[-1]
    assert keys.shape == (e,)


# ---- model-level behaviour -------------------------------------------------------------------


@pytest.mark.parametrize("where", ["main", "if", "function"])
@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
def test_containers_validated(where, op):
    kw = (dict(data_shape=(4, 5), indices_shape=(6, 5), axis=-2) if op == "ScatterElements"
          else dict(data_shape=(4, 5), indices_shape=(6, 1), updates_shape=(6, 5)))
    for reduction, opset in (("max", 11), ("mul", 13)):
        model = scatter_model(op, opset=18, where=where, reduction=reduction, **kw)
        lowered, outcome = sr.lower(model, opset=opset, validate=True, return_report=True)
        onnx.checker.check_model(lowered, full_check=True)
        assert len(outcome.passes[0]["rewritten"]) == (2 if where == "if" else 1)
        assert outcome.validation["checked_against"] == "onnxruntime on the original model"
        assert "reduction" not in str([n for n in op_types(lowered) if n in ("ScatterElements",)])
        if where == "function":  # function values stay untyped, as they came
            assert not lowered.functions[0].value_info


@pytest.mark.parametrize("opset", [11, 13, 16])
def test_loop_body_validated(opset):
    # testing.wrap's Loop body holds Identity-16, which onnx.version_converter cannot take below 16:
    # opset.py keeps it (Identity-13 accepts it unchanged).
    model = scatter_model("ScatterND", opset=18, where="loop", data_shape=(4, 5), indices_shape=(6, 1),
                          updates_shape=(6, 5), reduction="min")
    lowered, outcome = sr.lower(model, opset=opset, validate=True, return_report=True)
    onnx.checker.check_model(lowered, full_check=True)
    assert lowered.opset_import[0].version == opset
    assert len(outcome.passes[0]["rewritten"]) == 1
    assert "Loop 'loop_0' body" in outcome.passes[0]["rewritten"][0]["node"]


def test_supported_reductions_are_kept_and_none_only_converted():
    add = scatter_model("ScatterElements", opset=18, reduction="add")
    kept, outcome = sr.lower(add, opset=16, return_report=True)
    assert op_types(kept) == ["ScatterElements"] and outcome.passes[0]["rewritten"] == []
    none = scatter_model("ScatterElements", opset=18, reduction="none")
    converted = sr.lower(none, opset=13)
    assert op_types(converted) == ["ScatterElements"]
    assert not converted.graph.node[0].attribute or all(a.name != "reduction" for a in converted.graph.node[0].attribute)
    assert converted.opset_import[0].version == 13
    onnx.checker.check_model(converted, full_check=True)


def test_idempotent():
    model = scatter_model("ScatterElements", opset=18, reduction="max")
    once = sr.lower(model, opset=13)
    twice, outcome = sr.lower(once, opset=13, return_report=True)
    assert outcome.passes[0]["modified"] is False
    assert onnx.helper.printable_graph(once.graph) == onnx.helper.printable_graph(twice.graph)


@pytest.mark.parametrize("opset", [10, onnx.defs.onnx_opset_version() + 1, 0, -3])
def test_opset_out_of_range(opset):
    with pytest.raises(OptionError, match=rf"^opset={opset} is out of range"):
        LowerPass(opset=opset)  # (named by the parameter; the command line says --opset)


def test_unknown_mode():
    with pytest.raises(OptionError, match="^mode='fast' is unknown"):
        LowerPass(opset=13, mode="fast")


def test_unlowerable_node_is_named():
    model = scatter_model("ScatterElements", opset=18, reduction="max", data_type=TensorProto.STRING)
    with pytest.raises(ConversionError, match=r"ScatterElements 'scatterelements_0'.*STRING"):
        sr.lower(model, opset=13)


def test_bfloat16_lowered_in_the_reference_evaluator():
    """onnxruntime lacks bfloat16 kernels: validation compares both models in onnx.reference."""
    model = scatter_model("ScatterElements", opset=18, reduction="max", data_type=TensorProto.BFLOAT16)
    lowered, outcome = sr.lower(model, opset=13, validate=True, return_report=True)
    assert "onnx.reference" in outcome.validation["checked_against"]
    assert outcome.validation["max_abs_diff"] == 0.0


@pytest.mark.parametrize("source", [10, 13])
def test_deprecated_scatter_is_upgraded_on_the_way(source):
    """lower on a model still carrying Scatter (opset 10, or the invalid one at 13): it becomes
    ScatterElements, reported with the lowering, and the result is valid at the target."""
    model = scatter_model("Scatter", opset=source, where="if", axis=1)
    lowered, outcome = sr.lower(model, opset=13, validate=True, return_report=True)
    onnx.checker.check_model(lowered, full_check=True)
    assert "Scatter" not in op_types(lowered)
    rewritten = outcome.passes[0]["rewritten"]
    assert len(rewritten) == 2 and all(r["detail"] == "-> ScatterElements(axis=1)" for r in rewritten)


@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
@pytest.mark.parametrize("reduction", ["add", "max"])
def test_an_out_of_range_index_fails_the_lowered_graph_as_it_fails_the_original(op, reduction):
    """Normalizing a negative index adds the size; one below -size, out of range, came out a valid
    negative one that the final ScatterND wrapped (silently writing the last row). It must fail."""
    axis = {"axis": 0} if op == "ScatterElements" else {}
    model = scatter_model(op, opset=18, data_shape=(4, 3), indices_shape=(2, 3) if axis else (2, 1),
                          updates_shape=(2, 3), reduction=reduction, **axis)
    lowered = sr.lower(model, opset=13)
    for index, in_range in [(-4, True), (-1, True), (3, True), (-5, False), (-8, False), (-9, False), (4, False)]:
        rows = [[0, 1, 2], [index, 0, 1]] if axis else [[0], [index]]
        feeds = {"data": np.zeros((4, 3), np.float32), "indices": np.array(rows, np.int64),
                 "updates": np.arange(6, dtype=np.float32).reshape(2, 3)}
        if in_range:
            assert_validation_accepts(ort_run(model, feeds), ort_run(lowered, feeds), float_reduction=reduction == "add")
        else:
            for m in (model, lowered):
                with pytest.raises(Exception, match="INVALID_ARGUMENT|out of bounds|out of range"):
                    ort_run(m, feeds)
