"""LiteRT through onnx2tf (tests/helpers/runtimes.py: onnx2tf, tensorflow and ai-edge-litert in a venv of
their own, built by tests/runtimes/setup_venvs.sh; skipped without it).

What onnx2tf does to scatters on its own, reproduced (refuses a reducing ScatterElements, turns a
reducing ScatterND into TFLite's summing SCATTER_ND, permutes a constant index vector fed to
Unsqueeze), and ``prepare --target litert`` then onnx2tf then LiteRT giving the original's outputs.
Converting takes about 10 s a model: the three facts run by default, the rest with -m slow.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

import scatter_rewrite
from tests.helpers.runtimes import (
    EXPORTS, Refused, constant_indices, disagreement, original_outputs, run_in, scatter_cases, sums_floats,
)
from scatter_rewrite.errors import ConversionError
from scatter_rewrite.testing import scatter_model
from tests.helpers import DATA
from tests.helpers.exports import load_export

RNG = np.random.default_rng(7)


def _prepared_runs_as_original(model, inputs, workdir) -> None:
    prepared = scatter_rewrite.prepare(model, target="litert", validate=True)
    assert not any(n.op_type.startswith(("Scatter", "TensorScatter")) for n in prepared.graph.node)
    expected = original_outputs(model, inputs)
    actual = run_in("litert", prepared, inputs, workdir)
    assert disagreement(model, expected, actual, sums_floats(model)) == []


def test_onnx2tf_refuses_a_reducing_scatter_elements_which_prepare_rewrites(tmp_path):
    model = scatter_model("ScatterElements", data_shape=(4, 5), indices_shape=(6, 5),
                          reduction="add")
    inputs = {"data": RNG.standard_normal((4, 5)).astype(np.float32),
              "indices": RNG.integers(0, 4, (6, 5)),
              "updates": RNG.standard_normal((6, 5)).astype(np.float32)}
    with pytest.raises(Refused, match=r"ScatterElements currently supports only reduction=\['none'\]"):
        run_in("litert", model, inputs, tmp_path / "original")
    _prepared_runs_as_original(model, inputs, tmp_path / "prepared")


def test_onnx2tf_sums_a_reducing_scatter_nd_which_prepare_rewrites(tmp_path):
    # add (and mul, max, min alike), converted without a word into TFLite's summing SCATTER_ND:
    # data * (1 - count) + sum(updates)
    model = scatter_model("ScatterND", data_shape=(4, 5), indices_shape=(6, 1),
                          updates_shape=(6, 5), reduction="add")
    indices = np.array([[0], [2], [0], [3], [0], [2]])
    inputs = {"data": RNG.standard_normal((4, 5)).astype(np.float32), "indices": indices,
              "updates": RNG.standard_normal((6, 5)).astype(np.float32)}
    (converted,) = run_in("litert", model, inputs, tmp_path / "original")
    count = np.bincount(indices[:, 0], minlength=4)[:, None].astype(np.float32)
    summed = np.zeros((4, 5), np.float32)
    np.add.at(summed, indices[:, 0], inputs["updates"])
    np.testing.assert_allclose(converted, inputs["data"] * (1 - count) + summed, rtol=1e-6,
                               atol=1e-6)
    assert disagreement(model, original_outputs(model, inputs), [converted], False) != []
    _prepared_runs_as_original(model, inputs, tmp_path / "prepared")


def _unsqueezed_arange_scatter() -> onnx.ModelProto:
    """ScatterND(data, Unsqueeze(arange(30), 1), updates): PyTorch's index_put with an arange."""
    graph = oh.make_graph(
        [oh.make_node("Unsqueeze", ["rows", "axis"], ["indices"]),
         oh.make_node("ScatterND", ["data", "indices", "updates"], ["output"])], "g",
        [oh.make_tensor_value_info("data", TensorProto.FLOAT, [30, 2]),
         oh.make_tensor_value_info("updates", TensorProto.FLOAT, [30, 2])],
        [oh.make_tensor_value_info("output", TensorProto.FLOAT, [30, 2])],
        initializer=[numpy_helper.from_array(np.arange(30, dtype=np.int64), "rows"),
                     numpy_helper.from_array(np.array([1], np.int64), "axis")])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


def test_onnx2tf_permutes_a_constant_index_vector_through_unsqueeze(tmp_path):
    model = _unsqueezed_arange_scatter()
    updates = np.repeat(np.arange(30, dtype=np.float32)[:, None], 2, axis=1)
    inputs = {"data": np.zeros((30, 2), np.float32), "updates": updates}
    (converted,) = run_in("litert", model, inputs, tmp_path / "original")
    # update row i lands on row order[i]: arange(30) came out as 0, 2, 3, ..., 29, 1
    order = np.array([0, *range(2, 30), 1])
    expected_wrong = np.empty_like(updates)
    expected_wrong[order] = updates
    np.testing.assert_array_equal(converted, expected_wrong)
    _prepared_runs_as_original(model, inputs, tmp_path / "prepared")


def _float_max_min_with_input_indices(model: onnx.ModelProto) -> bool:
    reductions = {a.s for n in model.graph.node for a in n.attribute if a.name == "reduction"}
    floats = model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    return bool(reductions & {b"max", b"min"}) and floats and any(
        i.name == "indices" for i in model.graph.input)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(scatter_cases()))
def test_every_scatter_form_prepared_for_litert_runs_exactly(name, tmp_path):
    model, inputs = scatter_cases()[name]
    if _float_max_min_with_input_indices(model):
        # no form onnx2tf converts exactly: refused, not written
        with pytest.raises(ConversionError, match="not prepared for litert"):
            scatter_rewrite.prepare(model, target="litert")
        return
    _prepared_runs_as_original(model, inputs, tmp_path)


@pytest.mark.slow
def test_the_sort_form_with_input_indices_runs_wrong_after_onnx2tf(tmp_path):
    # why litert refuses float max/min with indices as inputs: no-scatter's sort form, converted
    model, inputs = scatter_cases()["elements_max_axis0"]
    prepared = scatter_rewrite.prepare(model, target="no-scatter", validate=True)
    actual = run_in("litert", prepared, inputs, tmp_path)
    assert disagreement(model, original_outputs(model, inputs), actual, False) != []
    # with the same indices constant, it converts exactly (onnx2tf folds the index arithmetic)
    _prepared_runs_as_original(*constant_indices(model, inputs), tmp_path / "constant")


# Exports onnx2tf 1.29.24 cannot convert at all, whatever is done to their scatters: the original is
# refused too, or its .tflite fails to prepare (dynamic shape arithmetic, Concat of shapes, ...: errors
# in its converter, not wrong numbers). Both are asserted, so that a newer onnx2tf shows here.
ONNX2TF_REFUSES = frozenset({
    "torch/index_add_dynamo18",
    "torch/index_put_acc_dynamo18",
    "torch/label_smoothing_ts11",
    "torch_repair/bev_index_put_ts11",
    "torch_repair/bev_index_put_ts13",
    "torch_repair/bev_index_put_ts16",
    "torch_repair/bev_index_put_ts17",
    "torch_repair/bev_pool_ts17",
    "torch_repair/gnn_sum_ts13",
    "torch_repair/index_put_acc_ts11",
    "torch_repair/index_put_acc_ts17",
    "torch_repair/jagged_bag_sum_strict_ts13",
    "torch_repair/jagged_bag_sum_ts13",
    "torch_repair/pyg_mean_dynamo18",
    "torch_repair/pyg_mean_self_dynamo18",
    "torch_trt/index_put_ts16",
    "torch_trt/scatter_add_gnn_static_ts16",
    "torch_trt/scatter_add_gnn_ts16",
})


# Not done: onnx2tf converts these originals (a TorchScript scatter without reduction into zeros)
# but refuses their prepared mask form ("Output tensors of a Functional model must be the output of
# a TensorFlow Layer ... Found: [6 1]": a shape computation it folded to a constant).
PREPARED_REFUSED = {"torch_repair/degree_count_ts13", "torch_repair/index_add_ts13"}


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.xfail(strict=True, raises=Refused, reason=(
        "onnx2tf refuses the prepared mask form of this export (not done)")))
    if name in PREPARED_REFUSED else name for name in EXPORTS])
def test_real_exports_prepared_for_litert_run_as_onnxruntime(name, tmp_path):
    model, inputs, _ = load_export(DATA, name)
    try:
        prepared = scatter_rewrite.prepare(model, target="litert", validate=True)
    except ConversionError as e:
        # float max/min on input indices; an opset-9 Scatter (the forms need opset 11)
        assert "runs wrong after onnx2tf" in str(e) or "need opset >= 11" in str(e)
        return
    if name in ONNX2TF_REFUSES:
        for which, converted in (("original", model), ("prepared", prepared)):
            with pytest.raises(Refused):
                run_in("litert", converted, inputs, tmp_path / which)
        return
    expected = original_outputs(model, inputs)
    actual = run_in("litert", prepared, inputs, tmp_path)
    assert disagreement(model, expected, actual, True) == []
