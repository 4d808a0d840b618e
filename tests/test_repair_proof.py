"""repair_proof: the repaired model equals the original bit for bit where no index repeats, and the
evaluator's computation of the intended accumulation where indices repeat; a wrong repair fails."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import onnx
import onnx_ir as ir
import pytest
from tests.helpers.models import accumulate_model

from scatter_rewrite.errors import ValidationError
from scatter_rewrite.model_io import save_model
from scatter_rewrite.passes.repair import find_sites
from scatter_rewrite.repair_proof import prove_repair
from scatter_rewrite.verbs import repair_passes

DATA = Path(__file__).parent / "data" / "torch_repair"


def repair_to(source: Path, destination: Path, reduction: str = "add") -> Path:
    model = ir.load(source)
    if reduction == "add":  # repair's passes (an opset-9 export is upgraded first, as the verb does)
        results = [step(model) for step in repair_passes()]
        assert results[-1].modified
    else:  # a wrong repair: the chain's scatter reducing with another reduction
        for site in find_sites(model)[0]:
            site.scatter.attributes["reduction"] = ir.AttrString("reduction", reduction)
    return save_model(model, destination)


@pytest.mark.parametrize("name", ["scatter_add_ts9", "index_put_acc_ts11", "gnn_sum_ts13",
                                  "bev_pool_ts17"])
def test_committed_exports_are_proven(name, tmp_path):
    source = DATA / f"{name}.onnx"
    proof = prove_repair(source, repair_to(source, tmp_path / "repaired.onnx"))
    assert proof["with_repeated_indices"]["original_differs"]  # the inputs did repeat an index
    assert proof["with_repeated_indices"]["max_abs_diff"] <= 1e-5


@pytest.mark.parametrize("op,opset", [("ScatterElements", 18), ("ScatterND", 13)])
def test_without_repeats_the_repair_is_bit_exact(op, opset, tmp_path):
    model = accumulate_model(op)  # 3 updates into 4 rows: unique indices exist
    model.opset_import[0].version = opset
    onnx.save(model, tmp_path / "original.onnx")
    repaired = repair_to(tmp_path / "original.onnx", tmp_path / "r.onnx")
    proof = prove_repair(tmp_path / "original.onnx", repaired)
    assert proof["without_repeated_indices"]["tolerance"] == "exact (bit for bit)"
    assert proof["without_repeated_indices"]["max_abs_diff"] == 0.0


@pytest.mark.parametrize("reduction,fails", [
    ("mul", "not bit-exact"),  # differs where no index repeats
    ("max", "not bit-exact"),
    ("none", "does not compute the intended accumulation"),  # the export itself
])
def test_a_wrong_repair_fails_the_proof(reduction, fails, tmp_path):
    model = accumulate_model("ScatterElements")
    onnx.save(model, tmp_path / "original.onnx")
    wrong = repair_to(tmp_path / "original.onnx", tmp_path / "wrong.onnx", reduction)
    with pytest.raises(ValidationError, match=fails):
        prove_repair(tmp_path / "original.onnx", wrong)


def test_computed_indices_that_always_repeat_are_proven_against_what_pytorch_computed(tmp_path):
    """A MoE router's top-2 experts of 6 tokens: 12 counts into 4 experts always repeat, whatever
    the inputs; the plan for the original's contract cannot avoid it, so those inputs are judged
    against the intended model, not bit for bit against the export."""
    source = DATA / "moe_router_ts13.onnx"
    proof = prove_repair(source, repair_to(source, tmp_path / "repaired.onnx"))
    assert proof["without_repeated_indices"]["checked_against"].startswith("nothing")
    assert proof["with_repeated_indices"]["original_differs"]


def shifted_model(updates: int = 6) -> onnx.ModelProto:
    """zeros.scatter_add(0, i + shift, v) + x: in range only for the shifts the caller picks."""
    h = onnx.helper
    zeros = onnx.numpy_helper.from_array(np.zeros(4, np.float32))
    nodes = [h.make_node("Constant", [], ["zeros"], value=zeros),
             h.make_node("Add", ["i", "shift"], ["idx"]),
             h.make_node("ScatterElements", ["zeros", "idx", "v"], ["written"], axis=0),
             h.make_node("Add", ["x", "written"], ["y"])]
    graph = h.make_graph(nodes, "shifted", [
        h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4]),
        h.make_tensor_value_info("i", onnx.TensorProto.INT64, [updates]),
        h.make_tensor_value_info("shift", onnx.TensorProto.INT64, []),
        h.make_tensor_value_info("v", onnx.TensorProto.FLOAT, [updates])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])


def test_the_users_inputs_prove_where_generated_ones_put_an_index_out_of_range(tmp_path):
    onnx.save(shifted_model(), tmp_path / "original.onnx")
    repaired = repair_to(tmp_path / "original.onnx", tmp_path / "repaired.onnx")
    with pytest.raises(ValidationError, match="inputs=, or validate=False"):
        prove_repair(tmp_path / "original.onnx", repaired)
    inputs = {"x": np.ones(4, np.float32), "i": np.array([0, 1, 1, 2, 2, 2]),
              "shift": np.array(1), "v": np.arange(6, dtype=np.float32)}
    proof = prove_repair(tmp_path / "original.onnx", repaired, inputs=inputs)
    assert proof["with_repeated_indices"]["user_inputs"]
    assert proof["with_repeated_indices"]["original_differs"]
    assert any("proven on the inputs= given" in note for note in proof["notes"])
    wrong = repair_to(tmp_path / "original.onnx", tmp_path / "wrong.onnx", "mul")
    with pytest.raises(ValidationError):
        prove_repair(tmp_path / "original.onnx", wrong, inputs=inputs)


def test_the_users_inputs_are_judged_bit_for_bit_where_no_index_repeats(tmp_path):
    onnx.save(shifted_model(updates=3), tmp_path / "original.onnx")
    inputs = {"x": np.ones(4, np.float32), "i": np.array([0, 3, 1]), "shift": np.array(0),
              "v": np.array([-1.5, 2, -3], np.float32)}  # max(0, -1.5) is no -1.5
    repaired = repair_to(tmp_path / "original.onnx", tmp_path / "repaired.onnx")
    proof = prove_repair(tmp_path / "original.onnx", repaired, inputs=inputs)
    assert proof["without_repeated_indices"]["tolerance"] == "exact (bit for bit)"
    assert not proof["with_repeated_indices"]["original_differs"]  # nothing repeated anywhere
    wrong = repair_to(tmp_path / "original.onnx", tmp_path / "wrong.onnx", "max")
    # (a reduction its opset lacks: onnxruntime refuses the model, having every kernel, which is a
    # failure, never a reason to judge it in onnx.reference, which reads the attribute anyway)
    with pytest.raises(ValidationError, match="onnxruntime cannot run the repaired model"):
        prove_repair(tmp_path / "original.onnx", wrong, inputs=inputs)


def counted_model() -> onnx.ModelProto:
    """zeros.scatter_add(0, i, v) + x, and x reshaped to (1 + number of x above 10,): the original
    runs only where 3 of the 4 x are above 10, as a trace runs only on inputs like its example."""
    h = onnx.helper
    zeros = onnx.numpy_helper.from_array(np.zeros(4, np.float32))
    ten = onnx.numpy_helper.from_array(np.array(10, np.float32))
    axes = onnx.numpy_helper.from_array(np.array([0], np.int64))
    nodes = [h.make_node("Constant", [], ["zeros"], value=zeros),
             h.make_node("ScatterElements", ["zeros", "i", "v"], ["written"], axis=0),
             h.make_node("Add", ["x", "written"], ["y"]),
             h.make_node("Constant", [], ["ten"], value=ten),
             h.make_node("Greater", ["x", "ten"], ["big"]),
             h.make_node("Cast", ["big"], ["ones"], to=onnx.TensorProto.INT64),
             h.make_node("Constant", [], ["axes"], value=axes),
             h.make_node("ReduceSum", ["ones", "axes"], ["count"], keepdims=1),
             h.make_node("Constant", [], ["one"], value=onnx.numpy_helper.from_array(
                 np.array([1], np.int64))),
             h.make_node("Add", ["count", "one"], ["size"]),
             h.make_node("Reshape", ["x", "size"], ["z"], name="reshape_by_count")]
    graph = h.make_graph(nodes, "counted", [
        h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4]),
        h.make_tensor_value_info("i", onnx.TensorProto.INT64, [6]),
        h.make_tensor_value_info("v", onnx.TensorProto.FLOAT, [6])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4]),
         h.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None)])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])


def test_inputs_the_original_fails_on_are_refused_by_name_or_left_to_the_users(tmp_path):
    onnx.save(counted_model(), tmp_path / "original.onnx")
    repaired = repair_to(tmp_path / "original.onnx", tmp_path / "repaired.onnx")
    with pytest.raises(ValidationError, match=r"the original model fails on every input generated "
                       r"\(Reshape 'reshape_by_count' fails: The input tensor cannot be reshaped "
                       r"to the requested shape. Input shape:\{4\}, requested shape:\{1\}\): pass "
                       "inputs it runs on with inputs="):
        prove_repair(tmp_path / "original.onnx", repaired)
    inputs = {"x": np.array([11, 12, 0, 13], np.float32), "i": np.array([0, 1, 1, 2, 2, 2]),
              "v": np.arange(6, dtype=np.float32)}
    proof = prove_repair(tmp_path / "original.onnx", repaired, inputs=inputs)
    assert proof["with_repeated_indices"]["user_inputs"]
    assert proof["with_repeated_indices"]["original_differs"]


def test_the_evaluator_names_the_node_an_op_fails_in():
    from scatter_rewrite.evaluator.reference_ops import NodeFailure
    from scatter_rewrite.validate.engines import run_reference

    h = onnx.helper
    axes = onnx.numpy_helper.from_array(np.array([0], np.int64))
    graph = h.make_graph([h.make_node("Constant", [], ["axes"], value=axes),
                          h.make_node("Squeeze", ["x", "axes"], ["y"], name="squeeze_rows")],
                         "squeeze", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    with pytest.raises(NodeFailure, match=r"Squeeze 'squeeze_rows': ValueError: axis 0 of its "
                       r"input, shape \[2, 3\], has size 2, not 1"):
        run_reference(model, {"x": np.zeros((2, 3), np.float32)})
