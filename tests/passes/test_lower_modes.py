"""The lower pass beyond standard reductions: custom and TensorRT-plugin forms run in onnxruntime,
TensorScatter lowered for targets below 24, the CLI."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto

import scatter_rewrite as sr
from scatter_rewrite.graph import iter_nodes
from scatter_rewrite.testing import scatter_model
from scatter_rewrite.validate import run_onnxruntime
from tests.helpers.models import tensor_scatter_model
from tests.helpers.cli import invoke

ort.set_default_logger_severity(3)


def domain_ops(model: onnx.ModelProto) -> list[tuple[str, str]]:
    return [(n.domain, n.op_type) for n, _ in iter_nodes(ir.serde.deserialize_model(model))]


def _kw(op):
    return (dict(data_shape=(4, 5), indices_shape=(6, 5), axis=-2) if op == "ScatterElements"
            else dict(data_shape=(4, 5), indices_shape=(6, 1), updates_shape=(6, 5)))


# ---- custom-domain forms ---------------------------------------------------------------------


@pytest.mark.parametrize("where", ["main", "if", "function"])
@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.INT32, TensorProto.UINT8])
def test_custom_mode_runs_in_onnxruntime(op, dtype, where):
    model = scatter_model(op, opset=18, where=where, reduction="max", data_type=dtype, **_kw(op))
    lowered, outcome = sr.lower(model, opset=13, mode="custom", validate=True, return_report=True)
    onnx.checker.check_model(lowered, full_check=True)
    found = domain_ops(lowered)
    assert found.count(("ai.onnx.contrib", op)) == (2 if where == "if" else 1)
    assert ("", op) not in found
    assert {o.domain: o.version for o in lowered.opset_import}["ai.onnx.contrib"] == 1
    assert outcome.validation["checked_against"] == "onnxruntime on the original model"


def test_custom_mode_keeps_what_the_target_has_and_attributes():
    model = scatter_model("ScatterElements", opset=18, reduction="add", axis=1, data_shape=(4, 5), indices_shape=(4, 3))
    assert domain_ops(sr.lower(model, opset=16, mode="custom")) == [("", "ScatterElements")]
    lowered = sr.lower(model, opset=13, mode="custom")
    (node,) = lowered.graph.node
    assert {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute} == {"axis": 1, "reduction": b"add"}


@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
def test_tensorrt_plugin_form(op):
    model = scatter_model(op, opset=18, reduction="min", **_kw(op))
    lowered, outcome = sr.lower(model, opset=13, mode="tensorrt-plugin", validate=True, return_report=True)
    plugin = [n for n in lowered.graph.node if n.domain == "ai.onnx.contrib"]
    assert len(plugin) == 1 and plugin[0].op_type == "ScatterElements"  # ScatterND too: no TensorRT ScatterND reduction
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in plugin[0].attribute}
    assert attrs["reduction"] == b"min" and attrs["plugin_version"] == b"2" and attrs["plugin_namespace"] == b""
    assert attrs["axis"] == (-2 if op == "ScatterElements" else 0)
    assert outcome.validation["max_abs_diff"] == 0.0


def test_tensorrt_plugin_form_falls_back_for_types_the_plugin_lacks():
    """A dtype the plugin lacks gets the TensorRT-safe sorting network (static number of updates),
    else the TopK lowering, and the report says TensorRT's parser rejects that one."""
    from scatter_rewrite.passes.tensorrt_violations import tensorrt_violations

    model = scatter_model("ScatterElements", opset=18, reduction="max", data_type=TensorProto.DOUBLE)
    lowered, outcome = sr.lower(model, opset=13, mode="tensorrt-plugin", validate=True, return_report=True)
    assert all(d == "" for d, _ in domain_ops(lowered)) and ("", "TopK") not in domain_ops(lowered)
    assert "sorting network" in outcome.passes[0]["rewritten"][0]["detail"]
    assert tensorrt_violations(ir.serde.deserialize_model(lowered).graph, "8.6") == []
    dynamic = scatter_model("ScatterElements", opset=18, reduction="max", data_type=TensorProto.DOUBLE,
                            indices_shape=("n", 5))
    lowered, outcome = sr.lower(dynamic, opset=13, mode="tensorrt-plugin", validate=True, return_report=True)
    assert ("", "TopK") in domain_ops(lowered)
    assert "TensorRT's parser rejects" in outcome.passes[0]["rewritten"][0]["detail"]


# ---- TensorScatter ---------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [11, 13, 17, 23])
@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("with_indices", [True, False])
def test_tensor_scatter_lowered(mode, with_indices, opset):
    model = tensor_scatter_model(mode, with_indices, cache_shape=(2, 3, 6, 4), update_shape=(2, 3, 4, 4))
    lowered, outcome = sr.lower(model, opset=opset, validate=True, return_report=True)
    onnx.checker.check_model(lowered, full_check=True)
    assert ("", "TensorScatter") not in domain_ops(lowered) and ("", "ScatterElements") in domain_ops(lowered)
    assert {o.version for o in lowered.opset_import if o.domain == ""} == {opset}
    assert outcome.validation["max_abs_diff"] == 0.0


def test_tensor_scatter_wraps_and_other_axis():
    model = tensor_scatter_model("circular", True, axis=1, cache_shape=(3, 5, 2), update_shape=(3, 4, 2))
    lowered = sr.lower(model, opset=13)
    rng = np.random.default_rng(0)
    feeds = {"past": rng.standard_normal((3, 5, 2)).astype(np.float32),
             "update": rng.standard_normal((3, 4, 2)).astype(np.float32),
             "write_indices": np.array([0, 3, 9])}  # 3 and 9 wrap around max_len 5
    expected = run_onnxruntime(model.SerializeToString(), feeds)
    np.testing.assert_array_equal(run_onnxruntime(lowered.SerializeToString(), feeds)[0], expected[0])


@pytest.mark.parametrize("where", ["if", "function"])
def test_tensor_scatter_in_containers(where):
    model = tensor_scatter_model("linear", True, where=where, cache_shape=(2, 3, 6, 4), update_shape=(2, 3, 4, 4))
    lowered, outcome = sr.lower(model, opset=13, validate=True, return_report=True)
    assert len(outcome.passes[0]["rewritten"]) == (2 if where == "if" else 1)
    assert ("", "TensorScatter") not in domain_ops(lowered)


# ---- CLI -------------------------------------------------------------------------------------


def test_cli_lower(tmp_path):
    source = tmp_path / "m.onnx"
    onnx.save(scatter_model("ScatterND", opset=18, reduction="mul", **_kw("ScatterND")), source)
    result = invoke("lower", source, "--opset", "11", "-o", tmp_path / "out.onnx")
    assert result.exit_code == 0, result.output
    assert "PASSED" in result.output
    out = onnx.load(tmp_path / "out.onnx")
    assert {o.version for o in out.opset_import if o.domain == ""} == {11}
    beyond = onnx.defs.onnx_opset_version() + 1
    bad = invoke("lower", source, "--opset", beyond)
    assert bad.exit_code == 2 and "out of range" in bad.output and "Traceback" not in bad.output


@pytest.mark.parametrize("mode,domain", [("custom", "ai.onnx.contrib"), ("tensorrt-plugin", "ai.onnx.contrib")])
def test_cli_lower_modes(tmp_path, mode, domain):
    source = tmp_path / "m.onnx"
    onnx.save(scatter_model("ScatterElements", opset=18, reduction="max", **_kw("ScatterElements")), source)
    result = invoke("lower", source, "--opset", "13", "--mode", mode)
    assert result.exit_code == 0, result.output
    out = onnx.load(tmp_path / "m.lowered.onnx")
    (custom,) = [n for n in out.graph.node if n.domain == domain]
    attrs = {a.name for a in custom.attribute}
    assert ("plugin_version" in attrs) == (mode == "tensorrt-plugin")
    bad = invoke("lower", source, "--mode", "plugin")
    assert bad.exit_code == 2 and "tensorrt-plugin" in bad.output
