"""PyTorch dynamo exports (tests/data/torch/make_opset_moves.py) moved down by the command line:
``lower --opset 13``, ``lower --opset 11`` and ``tensorrt --trt-version 8.6`` take them (Reshape
with allowzero=1, Shape with start/end, Reduce axes from a Reshape of a constant, Max on int64) and
the results give PyTorch's own outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from scatter_rewrite.validate import run_onnxruntime
from tests.helpers.cli import invoke
from tests.helpers.exports import export_arrays

DATA = Path(__file__).parents[1] / "data" / "torch"
EXPORTS = [
    "mp_layer_dynamodefault",
    "mp_layer_dynamo18",
    "mp_layer_dynamo18_dynamic",
    "view_layer_dynamodefault",
    "view_layer_dynamo18",
    "view_layer_dynamo18_dynamic",
]
COMMANDS = {
    "lower-13": (["lower", "--opset", "13"], 13),
    "lower-11": (["lower", "--opset", "11"], 11),
    "tensorrt-8.6": (["tensorrt", "--trt-version", "8.6"], None),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("name", EXPORTS)
def test_dynamo_export_moved_down_gives_pytorchs_outputs(tmp_path, name, command):
    args, opset = COMMANDS[command]
    out = tmp_path / f"{name}.onnx"
    result = invoke(args[0], DATA / f"{name}.onnx", *args[1:], "-o", out)
    if (name, command) == ("mp_layer_dynamo18_dynamic", "tensorrt-8.6"):
        # its reduction has a dynamic number of updates: 8.6 would ignore it, and it cannot be lowered
        assert result.exit_code == 1 and not out.exists(), result.output
        assert "number of updates is not static" in result.stderr
        return
    assert result.exit_code == 0, result.output
    model = onnx.load(out)
    version = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    assert version == opset if opset is not None else version <= 17
    feeds, pytorchs = export_arrays(DATA, name)
    got = run_onnxruntime(str(out), feeds)[0]
    np.testing.assert_allclose(got, pytorchs["y"], rtol=1e-5, atol=1e-6)


def test_the_exports_use_what_the_move_must_handle():
    """(So that the tests above test the forms: an export that changed would pass them emptily.)"""
    view = onnx.load(DATA / "view_layer_dynamo18_dynamic.onnx")
    assert any(
        n.op_type == "Reshape" and any(a.name == "allowzero" and a.i == 1 for a in n.attribute)
        for n in view.graph.node
    )
    assert any(
        n.op_type == "Shape" and any(a.name in ("start", "end") for a in n.attribute)
        for n in view.graph.node
    )
    mp = onnx.load(DATA / "mp_layer_dynamo18_dynamic.onnx")
    assert not isinstance(mp.graph.input[1].type.tensor_type.shape.dim[1].dim_value or None, int)
    default = onnx.load(DATA / "view_layer_dynamodefault.onnx")
    assert next(o.version for o in default.opset_import if o.domain == "") > 18
