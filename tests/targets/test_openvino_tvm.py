"""OpenVINO's CPU plugin and Apache TVM (Relax) run every scatter exactly, so ``prepare --target
openvino``/``tvm`` leaves them alone and rewrites only TensorScatter, which neither loads; the
prepared models run there as onnxruntime runs the originals (tests/helpers/runtimes.py: each runtime in its
own venv, built by tests/runtimes/setup_venvs.sh; skipped without it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto

import scatter_rewrite
from tests.helpers.runtimes import (
    BEV_REPEATS_CELLS, EXPORTS, Refused, combined, disagreement, one_feature_row_per_cell,
    original_outputs, run_in, scatter_cases, signed_zeros_and_nan, sums_floats,
)
from scatter_rewrite.testing import scatter_model
from tests.helpers.exports import load_export
from tests.helpers.models import op_types

RUNTIMES = ("openvino", "tvm")
DATA = Path(__file__).parents[1] / "data"


def _assert_runs_as_original(runtime: str, original: onnx.ModelProto, prepared: onnx.ModelProto,
                             inputs: dict, workdir: Path, float_sums: bool) -> None:
    expected = original_outputs(original, inputs)
    actual = run_in(runtime, prepared, inputs, workdir)
    assert disagreement(original, expected, actual, float_sums) == []


@pytest.mark.parametrize("float_sums", [False, True], ids=["bit-exact", "float-sums"])
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_every_scatter_form_runs_exactly_and_prepare_leaves_it(runtime, float_sums, tmp_path):
    # every reduction, both ScatterElements axes and ScatterND, int32/negative indices, int64
    # data, indices as initializers: one model side by side, one runtime call
    cases = {name: case for name, case in scatter_cases().items()
             if sums_floats(case[0]) == float_sums}
    model, inputs = combined(cases)
    prepared = scatter_rewrite.prepare(model, target=runtime, validate=True)
    assert sorted(op_types(prepared)) == sorted(op_types(model))
    _assert_runs_as_original(runtime, model, prepared, inputs, tmp_path, float_sums)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_deprecated_scatter_runs_exactly(runtime, tmp_path):
    model = scatter_model("Scatter", opset=9, data_shape=(4, 5), indices_shape=(2, 5), axis=0)
    rng = np.random.default_rng(1)
    inputs = {"data": rng.standard_normal((4, 5)).astype(np.float32),
              "indices": np.array([[0, 1, 2, 3, 0], [3, 2, 1, 0, 1]], np.int64),
              "updates": rng.standard_normal((2, 5)).astype(np.float32)}
    _assert_runs_as_original(runtime, model, model, inputs, tmp_path / "original", False)
    prepared = scatter_rewrite.prepare(model, target=runtime, validate=True)
    assert op_types(prepared) == ["Scatter"]  # both run it: left alone
    _assert_runs_as_original(runtime, model, prepared, inputs, tmp_path / "prepared", False)


def _tensor_scatter() -> tuple[onnx.ModelProto, dict]:
    graph = oh.make_graph(
        [oh.make_node("TensorScatter", ["past", "update", "write_indices"], ["present"])], "kv",
        [oh.make_tensor_value_info("past", TensorProto.FLOAT, [2, 6, 3]),
         oh.make_tensor_value_info("update", TensorProto.FLOAT, [2, 2, 3]),
         oh.make_tensor_value_info("write_indices", TensorProto.INT64, [2])],
        [oh.make_tensor_value_info("present", TensorProto.FLOAT, [2, 6, 3])])
    rng = np.random.default_rng(2)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 24)]), {
        "past": rng.standard_normal((2, 6, 3)).astype(np.float32),
        "update": rng.standard_normal((2, 2, 3)).astype(np.float32),
        "write_indices": np.array([1, 3], np.int64)}


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_tensor_scatter_is_refused_there_and_prepared_without_matmul(runtime, tmp_path):
    model, inputs = _tensor_scatter()
    with pytest.raises(Refused, match="TensorScatter"):
        run_in(runtime, model, inputs, tmp_path / "original")
    prepared = scatter_rewrite.prepare(model, target=runtime, validate=True)
    # the precision guard: no form written for these runtimes uses MatMul (OpenVINO's CPU plugin
    # may run it in bf16)
    assert not {"TensorScatter", "MatMul", "Gemm"} & set(op_types(prepared))
    _assert_runs_as_original(runtime, model, prepared, inputs, tmp_path / "prepared", False)


# committed real exports (GNN aggregations, point-cloud/BEV pooling, MoE routing, index_add):
# a few in the default run, all with -m slow
SAMPLE = ("torch/gnn_max_layer_dynamo18", "torch_repair/bev_pool_ts17",
          "torch_repair/moe_router_ts13")
# What TVM 0.27's Relax frontend refuses in these exports, the original as much as the prepared
# model (both asserted): Constant nodes with value_ints/value_float ("no value in Constant"), a TopK
# whose k is computed, an opset-9 export it cannot read, and ScatterElements max at opset 16/17, which TorchScript writes although
# ONNX defines max from opset 18 only (TVM's ScatterElements-16 takes none/add/mul, as the spec);
# in some of them TVM first refuses a Size of a shape.
MAX_BEFORE_18 = "reductions are supported, but got max|Size cannot handle ShapeExpr inputs"
TVM_REFUSES = {
    "torch/gnn_gelu_layernorm_dynamo20": "no value in Constant",
    "torch/gnn_max_layer_dynamo18": "no value in Constant",
    "torch/gnn_max_layer_ts17": MAX_BEFORE_18,
    "torch/gnn_max_view_expand_ts17": MAX_BEFORE_18,
    "torch/index_add_dynamo18": "no value in Constant",
    "torch/index_put_acc_dynamo18": "no value in Constant",
    "torch/mp_layer_dynamo18": "no value in Constant",
    "torch/mp_layer_dynamo18_dynamic": "no value in Constant",
    "torch/mp_layer_dynamodefault": "no value in Constant",
    "torch/scatter_reduce_amax_ts16": MAX_BEFORE_18,
    "torch_repair/moe_sort_ts13": "TopK k must be a constant",
    # transformers' MoE blocks: each expert's token list is squeezed from a dynamic extent
    **{f"torch_repair/{block}_block_ts{opset}": "Squeeze axis 0 has a symbolic extent"
       for block in ("olmoe", "qwen2_moe") for opset in (11, 17)},
    "torch_repair/moe_router_ts9": "Cannot cast <class 'NoneType'> to list of Expr",
    "torch_repair/pyg_mean_dynamo18": "no value in Constant",
    "torch_repair/pyg_mean_self_dynamo18": "no value in Constant",
    "torch_trt/scatter_amax_ts16": MAX_BEFORE_18,
}


def _export_params():
    return [pytest.param(runtime, name, marks=() if name in SAMPLE and runtime == "openvino"
                         else pytest.mark.slow)
            for runtime in RUNTIMES for name in EXPORTS]


@pytest.mark.parametrize(("runtime", "name"), _export_params())
def test_real_exports_prepared_run_as_onnxruntime(runtime, name, tmp_path):
    model, inputs, _ = load_export(DATA, name)
    if name in BEV_REPEATS_CELLS:
        inputs = one_feature_row_per_cell(inputs)
    prepared = scatter_rewrite.prepare(model, target=runtime)
    if runtime == "tvm" and name in TVM_REFUSES:
        for which, converted in (("original", model), ("prepared", prepared)):
            with pytest.raises(Refused, match=TVM_REFUSES[name]):
                run_in(runtime, converted, inputs, tmp_path / which)
        return
    _assert_runs_as_original(runtime, model, prepared, inputs, tmp_path, True)


@pytest.mark.parametrize("float_sums", [False, True], ids=["bit-exact", "float-sums"])
def test_openvino_npu_forms_have_no_scatter_and_run_exactly(float_sums, tmp_path):
    # no NPU here: the forms run on OpenVINO's CPU plugin, whose TopK orders equal values otherwise
    # than ONNX (the sort form's keys are distinct) and whose Greater is true on NaN on some CPUs
    cases = {name: case for name, case in scatter_cases().items()
             if sums_floats(case[0]) == float_sums}
    model, inputs = combined(cases)
    prepared = scatter_rewrite.prepare(model, target="openvino-npu", validate=True)
    assert not {op for op in op_types(prepared) if "Scatter" in op}
    assert "TopK" in op_types(prepared)  # the sort form among them
    _assert_runs_as_original("openvino", model, prepared, inputs, tmp_path, float_sums)


def test_openvino_npu_float_max_min_keep_nan_and_signed_zeros(tmp_path):
    # the order among NaN, -0.0 and +0.0 that onnxruntime's fold gives, through OpenVINO's TopK
    model, inputs = signed_zeros_and_nan(nan=True)
    prepared = scatter_rewrite.prepare(model, target="openvino-npu", validate=True)
    expected = original_outputs(model, inputs)
    actual = run_in("openvino", prepared, inputs, tmp_path)
    assert disagreement(model, expected, actual, False) == []
    assert all(np.array_equal(np.signbit(e), np.signbit(a)) for e, a in zip(expected, actual))


def test_openvino_less_is_false_on_nan_where_greater_may_not_be(tmp_path):
    # why the forms compare with Less only (ONNX: a comparison with NaN is false): the CPU
    # plugin's Greater is true on NaN on some CPUs (an Intel Xeon) and right on others, as the
    # kernel the CPU takes decides; its Less is right on each
    graph = oh.make_graph(
        [oh.make_node("Greater", ["a", "b"], ["greater"]),
         oh.make_node("Less", ["a", "b"], ["less"])],
        "compare", [oh.make_tensor_value_info(x, TensorProto.FLOAT, [3]) for x in "ab"],
        [oh.make_tensor_value_info(x, TensorProto.BOOL, [3]) for x in ("greater", "less")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    inputs = {"a": np.array([np.nan, 1, 2], np.float32), "b": np.array([1, np.nan, 1], np.float32)}
    np.testing.assert_array_equal(original_outputs(model, inputs)[0], [False, False, True])
    greater, less = run_in("openvino", model, inputs, tmp_path)
    np.testing.assert_array_equal(less, [False, False, False])
    assert greater[2]  # (no NaN: right on every CPU)
    assert greater[:2].tolist() in ([False, False], [True, True])  # (right, or true on NaN)


def test_openvino_topk_does_not_keep_equal_keys_in_index_order(tmp_path):
    # ONNX's TopK puts equal values lower index first; the sort form gives it distinct keys
    # 1,000 keys of 4 values: an unstable sort keeps every tie in order by chance only, so the fact
    # holds whatever kernel the CPU takes (12 keys did not ensure that)
    n = 1000
    keys = np.random.default_rng(0).permutation(np.arange(n) % 4).astype(np.int64)
    graph = oh.make_graph(
        [oh.make_node("TopK", ["keys", "k"], ["values", "order"], largest=0)], "topk",
        [oh.make_tensor_value_info("keys", TensorProto.INT64, [n])],
        [oh.make_tensor_value_info("values", TensorProto.INT64, [n]),
         oh.make_tensor_value_info("order", TensorProto.INT64, [n])],
        initializer=[onnx.numpy_helper.from_array(np.array([n], np.int64), "k")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    stable = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(original_outputs(model, {"keys": keys})[1], stable)
    order = run_in("openvino", model, {"keys": keys}, tmp_path)[1]
    assert not np.array_equal(order, stable)
    np.testing.assert_array_equal(keys[order], keys[stable])  # a sort all the same
