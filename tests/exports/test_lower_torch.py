"""The lower pass on models PyTorch exported (tests/data/torch/make.py), against PyTorch's outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest

import scatter_rewrite as sr
from scatter_rewrite.errors import ConversionError
from scatter_rewrite.graph import attr, iter_nodes
from scatter_rewrite.passes.lowering.segment_reduce import lower_reduction, reduction_blocker
from scatter_rewrite.validate import run_onnxruntime
from tests.helpers.exports import load_export

ort.set_default_logger_severity(3)
DATA = Path(__file__).parents[1] / "data" / "torch"


def reductions(model: onnx.ModelProto) -> list[str]:
    return [attr(n, "reduction", "none") for n, _ in iter_nodes(ir.serde.deserialize_model(model))
            if n.op_type in ("ScatterElements", "ScatterND") and n.domain == ""]


@pytest.mark.parametrize("opset", [11, 13, 16, 17])
@pytest.mark.parametrize("reduce", ["amax", "amin", "sum", "prod"])
def test_scatter_reduce_dynamo(reduce, opset):
    model, feeds, pytorchs = load_export(DATA, f"scatter_reduce_{reduce}_dynamo18")
    assert reductions(model) == [{"amax": "max", "amin": "min", "sum": "add", "prod": "mul"}[reduce]]
    lowered, outcome = sr.lower(model, opset=opset, validate=True, inputs=feeds, return_report=True)
    onnx.checker.check_model(lowered, full_check=True)
    kept = reduce in ("sum", "prod") and opset >= 16
    assert reductions(lowered) == (reductions(model) if kept else ["none"])
    got = run_onnxruntime(lowered.SerializeToString(), feeds)[0]
    if reduce in ("amax", "amin"):
        np.testing.assert_array_equal(got, pytorchs["y"])
    else:
        np.testing.assert_allclose(got, pytorchs["y"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [11, 13, 16, 17])
def test_gnn_max_inside_torch_cond(opset):
    """torch.cond -> If; the max aggregation inside a branch is lowered, and the model's other ops
    (Mul-14, Constant-13, ReduceSum-13...) are taken down to the target too."""
    model, feeds, pytorchs = load_export(DATA, "gnn_amax_cond_dynamo18")
    lowered, outcome = sr.lower(model, opset=opset, validate=True, inputs=feeds, return_report=True)
    onnx.checker.check_model(lowered, full_check=True)
    assert lowered.opset_import[0].version == opset
    (note,) = outcome.passes[0]["rewritten"]
    assert "If" in note["node"] and "max" in note["detail"]
    np.testing.assert_array_equal(run_onnxruntime(lowered.SerializeToString(), feeds)[0], pytorchs["y"])


@pytest.mark.parametrize("user_inputs", [True, False], ids=["feeds", "generated"])
@pytest.mark.parametrize("opset", [11, 13, 16, 17])
@pytest.mark.parametrize("name", ["index_put_acc_dynamo18", "index_add_dynamo18"])
def test_index_put_and_index_add(name, opset, user_inputs):
    """ScatterND(add) from index_put(accumulate=True)/index_add: lowered below 16, kept at 16/17; the
    model's Shape-15/Constant-13/... nodes are taken to the target. Validated on PyTorch's inputs, or
    on generated ones (the index reaches ScatterND through Unsqueeze and Concat)."""
    model, feeds, pytorchs = load_export(DATA, name)
    lowered, outcome = sr.lower(model, opset=opset, validate=True, inputs=feeds if user_inputs else None,
                                return_report=True)
    assert ("user inputs" in outcome.validation["notes"]) == user_inputs
    onnx.checker.check_model(lowered, full_check=True)
    assert lowered.opset_import[0].version == opset
    assert reductions(lowered) == (["add"] if opset >= 16 else ["none"])
    np.testing.assert_allclose(run_onnxruntime(lowered.SerializeToString(), feeds)[0], pytorchs["y"],
                               rtol=1e-5, atol=1e-6)


def test_index_put_lowered_in_place_with_lower_reduction():
    """lower_reduction on its own (what the tensorrt pass reuses), spliced into the opset-18 model."""
    model, feeds, pytorchs = load_export(DATA, "index_put_acc_dynamo18")
    working = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(model))  # lower_reduction reads dtypes
    (node, scope), = [(n, s) for n, s in iter_nodes(working) if n.op_type == "ScatterND"]
    assert attr(node, "reduction") == "add" and reduction_blocker(node, 13) is None
    nodes, out = lower_reduction(node, 13)
    ir.convenience.replace_nodes_and_values(scope.body, node, [node], nodes, [node.outputs[0]], [out])
    proto = ir.serde.serialize_model(working)
    onnx.checker.check_model(proto, full_check=True)
    assert reductions(proto) == ["none"]
    np.testing.assert_allclose(run_onnxruntime(proto.SerializeToString(), feeds)[0], pytorchs["y"],
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [11, 13, 16, 17])
def test_torchscript_rank_zero_wrapper_is_inlined_and_lowered(opset):
    """TorchScript wraps scatter_reduce in two Ifs on "is x rank 0?" (Equal(Size(Shape(x)), 0)); x's
    rank is known, so the pass inlines both (their else branches) and lowers the max it then sees.
    The export declares y float[12] for the [4, 3] result (onnxruntime without graph optimizations
    refuses to run it; with the defaults validation uses, it runs the original); the pass replaces
    that declaration by the inferred [4, 3] and says so, and y then equals PyTorch's bit for bit."""
    model, feeds, pytorchs = load_export(DATA, "scatter_reduce_amax_ts16")
    assert [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == [12]
    lowered, outcome = sr.lower(model, opset=opset, validate=True, inputs=feeds, return_report=True)
    onnx.checker.check_model(lowered, full_check=True)
    assert lowered.opset_import[0].version == opset
    assert outcome.validation["checked_against"] == "onnxruntime on the original model"  # (no fallback)
    notes = outcome.passes[0]["notes"]
    assert [n.split(":")[0] for n in notes if "_branch inlined" in n] == [
        "If '/If' (opset 16, main graph)", "If '/If_1' (opset 16, main graph)"]
    assert any("'y'" in n and "declared [12]" in n and "[4, 3]" in n for n in notes)
    assert [d.dim_value for d in lowered.graph.output[0].type.tensor_type.shape.dim] == [4, 3]
    assert reductions(lowered) == ["none"]
    names = {n.name for n, _ in iter_nodes(ir.serde.deserialize_model(lowered))}
    assert not {"/If", "/If_1", "/Equal", "/Size", "/Shape"} & names
    got = run_onnxruntime(lowered.SerializeToString(), feeds)[0]
    assert got.shape == pytorchs["y"].shape
    np.testing.assert_array_equal(got, pytorchs["y"])


def test_torchscript_wrapper_on_an_unknown_rank_is_still_declined():
    """With x's rank unknown, "is x rank 0?" is a run-time question: the Ifs stay, the scatter's rank
    stays unknown, and the pass names the node and why."""
    model, _, _ = load_export(DATA, "scatter_reduce_amax_ts16")
    model.graph.input[0].type.tensor_type.ClearField("shape")
    with pytest.raises(ConversionError, match=r"ScatterElements '/ScatterElements' \(opset 16, main graph\).*rank"):
        sr.lower(model, opset=13)
