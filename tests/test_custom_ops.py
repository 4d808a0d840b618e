"""The custom-domain ops of ``lower --mode custom`` in onnxruntime: float16 and bfloat16 models,
which onnxruntime-extensions' Python ops cannot take as they are, load and run once lowered."""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator

import scatter_rewrite as sr
from scatter_rewrite import custom_ops
from tests.helpers.models import gnn_model

N_NODES, N_EDGES, FEATURES = 6, 40, 3
# messages x[src] summed (or max-ed) into dst, the edge index expanded along the features
AGGREGATION = dict(nodes=N_NODES, edges=N_EDGES, feats=FEATURES, messages="gathered", expand_to="shape")



def gnn_inputs(x_dtype) -> dict[str, np.ndarray]:
    # Quarters: every sum is exact in float16, bfloat16 and float32, so a lowering that sums in
    # float32 and one that rounds after each update must agree bit for bit.
    rng = np.random.default_rng(3)
    x = (rng.integers(-16, 16, (N_NODES, FEATURES)) / 4).astype(x_dtype)
    return {"x": x, "src": rng.integers(0, N_NODES, N_EDGES),
            "dst": rng.integers(-N_NODES, N_NODES, N_EDGES)}


def run_with_custom_ops(model: onnx.ModelProto, inputs: dict) -> np.ndarray:
    options = ort.SessionOptions()
    custom_ops.register(options)
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return custom_ops.run(session, inputs)[0]


def custom_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.domain == custom_ops.DOMAIN]


@pytest.mark.parametrize("reduction", ["add", "max"])
def test_float16_gnn_lowered_with_custom_ops_runs_in_onnxruntime(reduction):
    model = gnn_model(reduction, dtype=TensorProto.FLOAT16, **AGGREGATION)
    inputs = gnn_inputs(np.float16)
    lowered, outcome = sr.lower(model, opset=13, mode="custom", validate=True, return_report=True)
    onnx.checker.check_model(lowered, full_check=True)
    (node,) = custom_nodes(lowered)
    assert node.op_type == "ScatterElements"
    assert [n.op_type for n in lowered.graph.node].count("Cast") == 3  # data, updates, result
    [rewritten] = outcome.passes[0]["rewritten"]
    assert "on float32, cast from and back to float16" in rewritten["detail"]  # the report says so
    got = run_with_custom_ops(lowered, inputs)
    expected = ReferenceEvaluator(model).run(None, inputs)[0]  # onnxruntime has no such kernel
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got.view(np.uint16), expected.view(np.uint16))


@pytest.mark.parametrize("reduction", ["add", "min"])
def test_bfloat16_gnn_lowered_with_custom_ops_runs_in_onnxruntime(reduction):
    """onnxruntime's Python binding passes no bfloat16: the model takes float32 and casts."""
    model = gnn_model(reduction, dtype=TensorProto.BFLOAT16, **AGGREGATION, outer_type=TensorProto.FLOAT)
    inputs = gnn_inputs(np.float32)
    lowered = sr.lower(model, opset=13, mode="custom", validate=True)
    onnx.checker.check_model(lowered, full_check=True)
    assert len(custom_nodes(lowered)) == 1
    got = run_with_custom_ops(lowered, inputs)
    expected = ReferenceEvaluator(model).run(None, inputs)[0]
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))
    # the same as the scatter done in bfloat16 itself
    x = inputs["x"].astype(ml_dtypes.bfloat16)
    index = np.broadcast_to(inputs["dst"][:, None], (N_EDGES, FEATURES))
    ufunc = np.add if reduction == "add" else np.minimum
    ufunc.at(x, (index, np.arange(FEATURES)), x[inputs["src"]].copy())
    np.testing.assert_array_equal(got, x.astype(np.float32))


def test_float32_custom_node_is_not_cast():
    lowered = sr.lower(gnn_model("add", dtype=TensorProto.FLOAT, **AGGREGATION), opset=13, mode="custom")
    assert "Cast" not in [n.op_type for n in lowered.graph.node]
    (node,) = custom_nodes(lowered)
    assert node.input[0] == "x"


@pytest.mark.parametrize("mode", ["standard", "custom"])
@pytest.mark.parametrize("elem_type", [TensorProto.FLOAT16, TensorProto.BFLOAT16])
def test_half_float_sum_in_a_float32_graph_validates(elem_type, mode):
    """The original rounds each half-float update, the lowered graph its float32 sum once: the
    float32 output is judged by the rounding of the type the sum is computed in, not float32's."""
    lowered = sr.lower(gnn_model("add", dtype=elem_type, **AGGREGATION, outer_type=TensorProto.FLOAT), opset=13,
                       mode=mode, validate=True)
    onnx.checker.check_model(lowered, full_check=True)


def test_registering_the_ops_imports_no_part_of_onnxruntime_extensions_it_does_not_need():
    """onnxruntime-extensions' __init__ imports its converters (onnxruntime_extensions.cvt), hence
    transformers and, when installed, torch: seconds and hundreds of MiB per ``lower --mode
    custom``. Registering runs none of it; a later ``import onnxruntime_extensions`` still gets the
    whole package, with the same library and op declarations."""
    script = (
        "import sys, onnxruntime as ort\n"
        "from scatter_rewrite import custom_ops\n"
        "custom_ops.register(ort.SessionOptions())\n"
        "print(sorted(m for m in ('onnxruntime_extensions', 'onnxruntime_extensions.cvt', "
        "'transformers', 'torch') if m in sys.modules))\n"
        "import onnxruntime_extensions as ext\n"
        "print(ext.get_library_path() == custom_ops._library_path(custom_ops._extensions_ops()), "
        "callable(ext.onnx_op), ext.PyCustomOpDef is custom_ops._extensions_ops().PyCustomOpDef)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "True True True"], done.stdout
