"""Validation where onnxruntime and onnx.reference meet: our custom-domain scatters failing inside
onnxruntime (an error, never an abort), the proof run in one engine when onnxruntime cannot run one
of the two models, and the element types onnxruntime's Python binding returns as raw bytes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import numpy_helper as nh

import scatter_rewrite as sr
from scatter_rewrite import validate as validation
from scatter_rewrite.validate import compare, plan_validation, run_onnxruntime, validate

ort.set_default_logger_severity(3)


def vi(name, dtype, shape):
    return oh.make_tensor_value_info(name, dtype, shape)


def run_python(code: str) -> subprocess.CompletedProcess:
    """``code`` in its own process: an abort there (SIGABRT, -6) fails the test instead of pytest."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)


def assert_one_line_error(done: subprocess.CompletedProcess, *needles: str) -> None:
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scatter-rewrite: error:"), done.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]


# ---- our custom-domain scatters in onnxruntime: indices out of range -------------------------------

def custom_max_model(path: Path, *, through_add: bool = False) -> Path:
    """``lower --mode custom`` of an opset-18 ScatterElements max (dynamic sizes, negative axis),
    saved at ``path``. ``through_add``: the indices pass through an Add, which the plan does not
    follow, so generated indices are arbitrary there."""
    first = [oh.make_node("Add", ["i", "zero"], ["i2"])] if through_add else []
    node = oh.make_node("ScatterElements", ["d", "i2" if through_add else "i", "u"], ["y"], axis=-1, reduction="max")
    graph = oh.make_graph(first + [node], "g", [vi("d", TensorProto.FLOAT, ["N", 3]), vi("i", TensorProto.INT64, ["E", 3]),
                                                vi("u", TensorProto.FLOAT, ["E", 3])],
                          [vi("y", TensorProto.FLOAT, ["N", 3])],
                          [nh.from_array(np.array(0, np.int64), "zero")] if through_add else [])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=9)
    lowered = sr.lower(model, opset=13, mode="custom")
    assert [(n.domain, n.op_type) for n in lowered.graph.node][-1] == ("ai.onnx.contrib", "ScatterElements")
    onnx.save(lowered, path)
    return path


def test_lowering_a_custom_lowered_model_again_validates(tmp_path):
    """The audit's abort: the second lower's generated indices did not respect the custom-domain
    scatter's bounds (arbitrary values), and its IndexOutOfRangeError aborted the process."""
    model = custom_max_model(tmp_path / "c13.onnx")
    done = subprocess.run([sys.executable, "-m", "scatter_rewrite.cli", "lower", str(model), "--opset", "11",
                           "--mode", "custom", "-o", str(tmp_path / "c11.onnx")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "validation: onnxruntime on the original model" in done.stdout
    onnx.checker.check_model(str(tmp_path / "c11.onnx"), full_check=True)


def test_user_indices_out_of_range_at_a_custom_scatter_are_one_line_not_an_abort(tmp_path):
    model = custom_max_model(tmp_path / "c13.onnx")
    bad = tmp_path / "bad.npz"
    np.savez(bad, d=np.zeros((4, 3), np.float32), i=np.array([[0, 1, -5]]), u=np.ones((1, 3), np.float32))
    done = subprocess.run([sys.executable, "-m", "scatter_rewrite.cli", "lower", str(model), "--opset", "11",
                           "--mode", "custom", "--inputs", str(bad), "-o", str(tmp_path / "c11.onnx")],
                          capture_output=True, text=True, timeout=300)
    assert_one_line_error(done, "--inputs: the original model cannot run on them", "index -5 is out of range")
    assert not (tmp_path / "c11.onnx").exists()


def test_generated_indices_out_of_range_at_a_custom_scatter_are_one_line_not_an_abort(tmp_path):
    """Indices through an Add get arbitrary values (the README says so): the run fails, cleanly."""
    model = custom_max_model(tmp_path / "c13.onnx", through_add=True)
    done = subprocess.run([sys.executable, "-m", "scatter_rewrite.cli", "lower", str(model), "--opset", "11",
                           "--mode", "custom", "-o", str(tmp_path / "c11.onnx")], capture_output=True, text=True,
                          timeout=300)
    assert_one_line_error(done, "generated validation inputs put an index out of range")


def test_custom_scatter_failures_through_the_python_api(tmp_path):
    """sr.lower raises ValidationError; run_onnxruntime raises the kernel's own error; a session run
    without custom_ops.run logs it and returns the data unchanged: none of them aborts."""
    model = custom_max_model(tmp_path / "c13.onnx")
    done = run_python(f"""
        import logging, numpy as np, onnx, onnxruntime as ort
        import scatter_rewrite as sr
        from scatter_rewrite import custom_ops
        from scatter_rewrite.validate import run_onnxruntime
        feeds = dict(d=np.arange(12, dtype=np.float32).reshape(4, 3), i=np.array([[0, 1, -5]]),
                     u=np.full((1, 3), 99, np.float32))
        try:
            sr.lower(onnx.load({str(model)!r}), opset=11, mode="custom", validate=True, inputs=feeds)
        except sr.ValidationError as e:
            print("api:", e)
        try:
            run_onnxruntime({str(model)!r}, feeds)
        except sr.IndexOutOfRangeError as e:
            print("run:", e)
        feeds["i"] = np.array([[0, 1, -1]])
        print("fine:", run_onnxruntime({str(model)!r}, feeds)[0][0].tolist())
        feeds["i"] = np.array([[0, 1, -5]])
        logging.basicConfig()
        options = ort.SessionOptions()
        custom_ops.register(options)
        session = ort.InferenceSession({str(model)!r}, options, providers=["CPUExecutionProvider"])
        print("direct:", (session.run(None, feeds)[0] == feeds["d"]).all())
    """)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    lines = done.stdout.splitlines()
    assert lines[0].startswith("api: --inputs: the original model cannot run on them") and "-5" in lines[0]
    assert lines[1].startswith("run: ") and "index -5 is out of range" in lines[1]
    assert lines[2] == "fine: [99.0, 99.0, 99.0]"
    assert lines[3] == "direct: True"
    assert "ai.onnx.contrib::ScatterElements failed" in done.stderr and "custom_ops.run" in done.stderr


# ---- element types onnxruntime returns as raw bytes ----------------------------------------------

EIGHT_BIT_AND_LESS = {"f8e4m3fn": (TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn),
                      "f8e5m2": (TensorProto.FLOAT8E5M2, ml_dtypes.float8_e5m2),
                      "f4e2m1": (TensorProto.FLOAT4E2M1, ml_dtypes.float4_e2m1fn)}


def constant_model(values: np.ndarray, dtype: int) -> onnx.ModelProto:
    tensor = nh.from_array(values, "y")
    graph = oh.make_graph([], "g", [], [vi("y", dtype, list(values.shape))], [tensor])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 24)])
    model.ir_version = 11
    return model


@pytest.mark.parametrize("shape", [(3,), (2, 4, 2), (5, 3)])
@pytest.mark.parametrize("name", ["f8e4m3fn", "f4e2m1"])
def test_onnxruntime_outputs_come_back_as_the_declared_element_type(name, shape):
    """onnxruntime returns float8e4m3fn as uint8, float4e2m1 packed into the start of a uint8 array
    of the element count: run_onnxruntime gives the ml_dtypes array onnx.reference gives."""
    dtype, np_type = EIGHT_BIT_AND_LESS[name]
    values = (np.arange(np.prod(shape)) % 7 * 0.5 - 1.5).astype(np.float32).reshape(shape).astype(np_type)
    (got,) = run_onnxruntime(constant_model(values, dtype).SerializeToString(), {})
    assert got.dtype == np.dtype(np_type) and got.shape == shape
    np.testing.assert_array_equal(got.view(np.uint8), values.view(np.uint8))


def tensor_scatter_model(dtype: int, np_type) -> onnx.ModelProto:
    """An opset-24 TensorScatter of constants (fold folds it), NaN and -0.0 in the cache rows it keeps."""
    cache = np.array([np.nan, -0.0, 1, 2, 3, 4, -6, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5], np.float32).reshape(2, 4, 2)
    if np_type == ml_dtypes.float4_e2m1fn:
        cache[0, 0, 0] = -0.0  # (no NaN in float4e2m1)
    update = np.ones((2, 1, 2), np.float32)
    graph = oh.make_graph(
        [oh.make_node("TensorScatter", ["cache", "update", "write"], ["y"], axis=-2)], "g", [],
        [vi("y", dtype, [2, 4, 2])],
        [nh.from_array(cache.astype(np_type), "cache"), nh.from_array(update.astype(np_type), "update"),
         nh.from_array(np.array([1, 3], np.int64), "write")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 24)])
    model.ir_version = 11
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize("name", sorted(EIGHT_BIT_AND_LESS))
def test_fold_of_a_tensor_scatter_on_eight_bit_and_smaller_floats_validates(name):
    """onnxruntime has no TensorScatter-24 kernel: the original runs in onnx.reference, the folded
    initializer in onnxruntime (float8e4m3fn, float4e2m1) or, where onnxruntime's binding has no NumPy
    type for it (float8e5m2), in onnx.reference too."""
    dtype, np_type = EIGHT_BIT_AND_LESS[name]
    folded, outcome = sr.fold(tensor_scatter_model(dtype, np_type), validate=True, return_report=True)
    assert not folded.graph.node
    v = outcome.validation
    assert v["tolerance"] == "exact (bit for bit)" and v["max_abs_diff"] == 0.0
    assert "onnxruntime cannot run" in v["checked_against"]


@pytest.mark.parametrize("np_type", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e8m0fnu,
                                     ml_dtypes.float4_e2m1fn, ml_dtypes.bfloat16])
def test_bit_exact_comparison_of_ml_dtypes_floats(np_type):
    """NaN positions match and the sign of zero counts, whichever NumPy kind ml_dtypes gives the
    type (float8_e5m2 is "f", the others "V", where == took NaN for a difference and -0.0 for +0.0)."""
    finfo = ml_dtypes.finfo(np_type)
    has_nan = np.isnan(np.array(np.nan, np.float32).astype(np_type))
    has_negative_zero = np.signbit(np.array(-0.0, np.float32).astype(np_type).astype(np.float32))
    values = np.array([np.nan if has_nan else 1.0, -0.0, float(finfo.max)], np.float32).astype(np_type)
    assert compare(["y"], [values], [values.copy()], False)[1] == []
    other = values.copy()  # +0.0 for -0.0 (float8e8m0, with no zero, took -0.0 for NaN: 2.0 for it)
    other[1] = np.array(0.0 if has_negative_zero else 2.0, np.float32).astype(np_type)
    [failure] = compare(["y"], [values], [other], False)[1]
    assert failure.startswith("output 'y': not bit-exact")
