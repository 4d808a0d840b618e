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
