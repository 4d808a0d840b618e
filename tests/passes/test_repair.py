"""The repair pass on small models built in code: the TorchScript accumulating chain (zeros ->
scatter without reduction -> Add) gets ``reduction="add"`` (lowered below opset 16) in the main
graph, an If's branches and a model-local function; every lookalike stays as it is, its reason
reported; a second run changes nothing."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from tests.helpers.models import accumulate_model

from scatter_rewrite.verbs import VERBS
from scatter_rewrite.passes.repair import RepairPass
from tests.helpers.runs import ort_run

ort.set_default_logger_severity(3)
X = np.arange(20, dtype=np.float32).reshape(4, 5) / 8
UPDATES = np.array([[1, 2, 3, 4, 5], [10, 20, 30, 40, 50], [100, 200, 300, 400, 500]], np.float32)


def at_opset(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """``model`` declaring ``opset`` for the default domain (its nodes mean the same there)."""
    for imports in [model.opset_import] + [f.opset_import for f in model.functions]:
        for entry in imports:
            if entry.domain == "":
                entry.version = opset
    return model


def repaired(model: onnx.ModelProto):
    """The repair verb's passes (an upgrade first below opset 11) on ``model``; their result."""
    working = ir.serde.deserialize_model(model)
    (steps,) = VERBS["repair"].make_passes()
    result = steps(working)
    proto = ir.serde.serialize_model(working)
    onnx.checker.check_model(proto, full_check=True)
    return proto, result


def ort_run_on_x(model: onnx.ModelProto, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
    """``model``'s first output on X (``cond`` true where the model has one)."""
    return ort_run(model, {"x": X, "indices": indices, "updates": updates, "cond": np.array(True)})[0]


def repeated(op: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Indices writing rows 1, 1, 3 (row 1 twice), and what PyTorch's accumulation gives."""
    rows = np.array([1, 1, 3])
    expected = X.copy()
    np.add.at(expected, rows, UPDATES)
    if op == "ScatterND":
        return rows[:, None], UPDATES, expected
    return np.repeat(rows[:, None], 5, axis=1), UPDATES, expected


@pytest.mark.parametrize("where", ["main", "if", "function"])
@pytest.mark.parametrize("op,opset", [("ScatterElements", 18), ("ScatterND", 16),
                                      ("ScatterElements", 13), ("ScatterND", 11), ("Scatter", 9)])
@pytest.mark.parametrize("zeros", ["constant", "constant_of_shape", "initializer"])
def test_the_accumulating_chain_is_repaired(op, opset, zeros, where):
    if zeros == "initializer" and where != "main":
        zeros = "cast"  # (an If branch or a function holds no initializer)
    model = at_opset(accumulate_model(op, zeros=zeros, where=where), opset)
    proto, result = repaired(model)
    chains = 2 if where == "if" else 1
    repairs = [n for n in result.rewritten if "reduction='add'" in n.detail]
    assert result.modified and len(repairs) == chains and not result.skipped
    assert len(result.rewritten) == chains * (2 if op == "Scatter" else 1)  # (upgraded first)
    assert all("pytorch/pytorch#61034" in n.detail for n in repairs)
    indices, updates, expected = repeated(op)
    np.testing.assert_allclose(ort_run_on_x(proto, indices, updates), expected, rtol=1e-6, atol=0)
    assert not RepairPass()(ir.serde.deserialize_model(proto)).modified  # idempotent


def test_opset_16_keeps_one_reducing_scatter():
    proto, _ = repaired(at_opset(accumulate_model("ScatterElements"), 16))
    [scatter] = [n for n in proto.graph.node if n.op_type == "ScatterElements"]
    assert onnx.helper.get_attribute_value(scatter.attribute[0]) == b"add"
    assert [n.op_type for n in proto.graph.node] == ["Constant", "ScatterElements", "Add"]


@pytest.mark.parametrize("case,reason", [
    ({"zeros": "nonzero"}, "not all zeros"),
    ({"zeros": "input_initializer"}, "not all zeros"),
    ({"reduction": "add"}, "already reduces (reduction='add')"),
    ({"reduction": "max"}, "already reduces (reduction='max')"),
])
@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
def test_lookalikes_stay_with_the_reason(op, case, reason):
    model = accumulate_model(op, **case)
    proto, result = repaired(model)
    assert not result.modified and not result.rewritten
    assert [reason in n.detail for n in result.skipped] == [True]
    assert [n.op_type for n in proto.graph.node] == [n.op_type for n in model.graph.node]


def test_an_add_reading_a_broadcast_tensor_stays():
    model = accumulate_model("ScatterElements")
    del model.graph.input[0].type.tensor_type.shape.dim[0]  # x: [5], broadcast over the zeros' rows
    proto, result = repaired(model)
    assert not result.modified and "a broadcast" in result.skipped[0].detail
    assert proto.graph.node[1].op_type == "ScatterElements" and not proto.graph.node[1].attribute


def test_an_add_reading_a_tensor_of_unknown_shape_stays():
    model = accumulate_model("ScatterElements")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"  # [n, 5] + zeros [4, 5]
    _, result = repaired(model)
    assert not result.modified and "cannot be certain" in result.skipped[0].detail


def test_an_add_reading_another_tensor_than_the_zeros_are_shaped_by_stays():
    model = accumulate_model("ScatterND", zeros="constant_of_shape")
    w = onnx.helper.make_tensor_value_info("w", onnx.TensorProto.FLOAT, ["n", 5])
    model.graph.input.append(w)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "m"
    model.graph.node[-1].input[0] = "w"  # zeros shaped by x, added to w
    _, result = repaired(model)
    assert not result.modified and "cannot be certain" in result.skipped[0].detail


def test_a_scatter_result_read_twice_stays():
    model = accumulate_model("ScatterElements")
    model.graph.node.append(onnx.helper.make_node("Neg", ["scattered"], ["n"]))
    n = onnx.helper.make_tensor_value_info("n", onnx.TensorProto.FLOAT, [4, 5])
    model.graph.output.append(n)
    _, result = repaired(model)
    assert not result.modified and "read by more than the Add" in result.skipped[0].detail


def test_a_scatter_into_zeros_feeding_no_add_is_no_lookalike():
    _, result = repaired(accumulate_model("ScatterElements", consumer="Mul"))
    assert not result.modified and not result.skipped


def test_a_scatter_into_a_computed_tensor_is_no_lookalike():
    model = accumulate_model("ScatterElements")
    # the scatter now writes into x, not into a constant
    model.graph.node[0].CopyFrom(onnx.helper.make_node("Identity", ["x"], ["z"]))
    _, result = repaired(model)
    assert not result.modified and not result.skipped
