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
from scatter_rewrite.validate import engines
from scatter_rewrite.validate import compare, plan_validation, run_onnxruntime, validate
from tests.helpers.models import gnn_sum, vi
from tests.helpers.cli import invoke, save
from scatter_rewrite.testing import scatter_model

ort.set_default_logger_severity(3)


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
    lowered = sr.lower(model, opset=13, mode="custom", validate=False)  # (a model to test with)
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
    assert_one_line_error(done, "the original model cannot run on the inputs given (--inputs)",
                          "index -5 is out of range")
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
    assert lines[0].startswith("api: the original model cannot run on the inputs given (inputs=)")
    assert "-5" in lines[0]
    assert lines[1].startswith("run: ") and "index -5 is out of range" in lines[1]
    assert lines[2] == "fine: [99.0, 99.0, 99.0]"
    assert lines[3] == "direct: True"
    assert "ai.onnx.contrib::ScatterElements failed" in done.stderr and "custom_ops.run" in done.stderr


# ---- the proof in one engine --------------------------------------------------------------------

def legacy_scatter_then_matmul(opset: int = 13) -> onnx.ModelProto:
    """The deprecated Scatter at opset 13 (onnxruntime rejects it) followed by a float MatMul, whose
    NumPy and MLAS results differ in the last bits."""
    rng = np.random.default_rng(9)
    nodes = [oh.make_node("Scatter", ["d", "i", "u"], ["s"], axis=1),
             oh.make_node("Flatten", ["s"], ["f"]),
             oh.make_node("MatMul", ["f", "W"], ["y"])]
    graph = oh.make_graph(nodes, "g", [vi("d", TensorProto.FLOAT, [2, 3, 4, 4]), vi("i", TensorProto.INT64, [2, 2, 4, 4]),
                                       vi("u", TensorProto.FLOAT, [2, 2, 4, 4])],
                          [vi("y", TensorProto.FLOAT, [2, 5])],
                          [nh.from_array(rng.standard_normal((48, 5)).astype(np.float32), "W")])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=7)


def test_upgrade_with_a_matmul_after_the_scatter_is_proven_in_one_engine():
    """The audit's case: onnx.reference's MatMul (original) against onnxruntime's (rewritten)
    failed bit for bit. Both run in onnx.reference now, bit for bit; onnxruntime runs the rewritten
    model too, within the float tolerance of onnx.reference's results, and the summary says so."""
    model = legacy_scatter_then_matmul()
    upgraded, outcome = sr.upgrade(model, validate=True, return_report=True)
    v = outcome.validation
    assert "for both models (onnxruntime cannot run the original" in v["checked_against"]
    assert v["tolerance"] == "exact (bit for bit)" and v["max_abs_diff"] == 0.0
    assert v["cross_check"].startswith("onnxruntime runs the rewritten model too, and agrees with onnx.reference on "
                                       "it: float outputs within float32: rtol=1e-05, atol=1e-05")
    onnx.checker.check_model(upgraded, full_check=True)


def test_the_cli_prints_the_cross_check(tmp_path):
    path = tmp_path / "legacy.onnx"
    onnx.save(legacy_scatter_then_matmul(), path)
    result = invoke("upgrade", path)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    at = next(k for k, line in enumerate(lines) if line.startswith("  validation: onnx.reference"))
    assert lines[at + 1].startswith("    onnxruntime runs the rewritten model too")


@pytest.mark.parametrize("op", ["Sigmoid", "Softmax"])
def test_a_rewritten_model_only_onnx_reference_runs_is_proven_against_the_original_there(op,
                                                                                         monkeypatch):
    """The other way round: onnxruntime runs the float16 original, not the rewritten model (here
    made to lack a kernel for it), and onnxruntime's float16 Sigmoid/Softmax after the scatter rounds
    otherwise than NumPy's. Both models run in onnx.reference; onnxruntime's results on the original
    are compared with onnx.reference's within the float16 tolerance."""
    real = engines.run_onnxruntime

    def lacks_a_kernel_for_the_rewritten(model, inputs, threads=0):
        if str(model) == "the rewritten model":  # (the API's, held in memory)
            raise RuntimeError("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an "
                               "implementation for ScatterND(18) node with name ''")
        return real(model, inputs, threads)

    monkeypatch.setattr(engines, "run_onnxruntime", lacks_a_kernel_for_the_rewritten)
    # (and its registry says so: validation never reads a kernel's absence from an error's text)
    monkeypatch.setattr(engines, "kernels_onnxruntime_lacks", lambda model: [engines.Lack("ScatterND (faked)")])
    nodes = [oh.make_node("ScatterElements", ["d", "i", "u"], ["s"], axis=0, reduction="max"),
             oh.make_node("Abs", ["s"], ["a"]), oh.make_node(op, ["a"], ["y"])]
    graph = oh.make_graph(nodes, "g", [vi("d", TensorProto.FLOAT16, [8, 64]), vi("i", TensorProto.INT64, [4, 64]),
                                       vi("u", TensorProto.FLOAT16, [4, 64])], [vi("y", TensorProto.FLOAT16, [8, 64])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=9)
    _, outcome = sr.lower(model, opset=13, validate=True, return_report=True)
    v = outcome.validation
    assert v["onnxruntime_cannot_run"] == "ScatterND (faked)"
    # (written for a runtime at opset 13: the proof judges it, onnxruntime's lack is a note)
    assert outcome.status == "PASSED" and "ScatterND (faked)" in v["onnxruntime_note"]
    assert v["checked_against"].startswith("onnxruntime on the original model, onnx.reference")
    assert v["checked_against"].endswith(" and on the original") and v["max_abs_diff"] == 0.0
    assert v["cross_check"].startswith("onnxruntime runs the original model too")
    assert "float16: rtol=0.01, atol=0.01" in v["cross_check"]


@pytest.fixture
def legacy_paths(tmp_path):
    model = legacy_scatter_then_matmul()
    paths = tmp_path / "original.onnx", tmp_path / "rewritten.onnx"
    onnx.save(model, paths[0])
    onnx.save(sr.upgrade(model), paths[1])
    return paths, plan_validation(ir.serde.deserialize_model(model))


def test_onnxruntime_far_from_onnx_reference_on_the_rewritten_model_is_reported_not_failed(legacy_paths, monkeypatch):
    """The cross-check measures, it does not judge: the proof is the comparison in one engine, and
    engines round differently (an audit's MatMul with K=768 differed by 6e-5, a Conv by 5e-5)."""
    (original, rewritten), plan = legacy_paths
    real = engines.run_onnxruntime

    def off_by_a_bit(model, inputs, threads=0):
        return [o + np.float32(1e-3) for o in real(model, inputs, threads)]

    monkeypatch.setattr(engines, "run_onnxruntime", off_by_a_bit)
    result = validate(original, rewritten, plan)
    assert result.max_abs_diff == 0.0  # the proof, in onnx.reference
    assert result.cross_check.startswith("onnxruntime runs the rewritten model too; its outputs differ from "
                                         "onnx.reference's by up to 0.001 (the engines' float ops round differently")


def test_upgrade_with_a_wide_matmul_after_the_scatter_passes():
    """K=768: onnxruntime's MatMul and NumPy's differ by ~6e-5, beyond float32's 1e-5; the rename is
    still proven (bit for bit, in onnx.reference) and written."""
    rng = np.random.default_rng(3)
    nodes = [oh.make_node("Scatter", ["d", "i", "u"], ["s"], axis=0), oh.make_node("MatMul", ["s", "W"], ["y"])]
    graph = oh.make_graph(nodes, "g", [vi("d", TensorProto.FLOAT, [16, 768]), vi("i", TensorProto.INT64, [4, 768]),
                                       vi("u", TensorProto.FLOAT, [4, 768])], [vi("y", TensorProto.FLOAT, [16, 64])],
                          [nh.from_array(rng.standard_normal((768, 64)).astype(np.float32), "W")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)], ir_version=8)
    _, outcome = sr.upgrade(model, validate=True, return_report=True)
    v = outcome.validation
    assert "for both models" in v["checked_against"] and v["max_abs_diff"] == 0.0
    assert v["cross_check"].startswith("onnxruntime runs the rewritten model too")


def test_a_rewritten_model_onnxruntime_refuses_for_another_reason_fails(tmp_path):
    """onnxruntime cannot run the original (the deprecated Scatter) and refuses the rewritten model
    for a reason of its own (an input retyped to int32): a rewrite onnxruntime cannot run, whatever
    onnx.reference says of it."""
    from tests.helpers.wrong_passes import UpgradeAndRetypeIndices

    with pytest.raises(sr.ValidationError, match="onnxruntime cannot run the rewritten model"):
        sr.rewrite(legacy_scatter_then_matmul(), passes=[UpgradeAndRetypeIndices()], validate=True)


def test_a_rewritten_model_onnx_reference_cannot_run_is_compared_across_engines(legacy_paths, monkeypatch):
    """Where onnx.reference cannot run the rewritten model, onnxruntime's results on it are the
    proof's other side (as before), bit for bit, and the summary says which engine ran which.
    (Whether NumPy's and onnxruntime's MatMul agree depends on the CPU: zero inputs make every
    product zero in both, and the one-ulp step below is the difference to catch.)"""
    (original, rewritten), plan = legacy_paths
    real_reference, real_ort = engines.run_reference, engines.run_onnxruntime
    plan.inputs["d"] = np.zeros_like(plan.inputs["d"])
    plan.inputs["u"] = np.zeros_like(plan.inputs["u"])

    def not_the_rewritten(model, inputs):
        if Path(model) == rewritten:
            raise NotImplementedError("no kernel")
        return real_reference(model, inputs)

    def one_ulp_up(model, inputs, threads=0):
        return [np.nextafter(o, np.float32(np.inf)) for o in real_ort(model, inputs, threads)]

    monkeypatch.setattr(engines, "run_reference", not_the_rewritten)
    result = validate(original, rewritten, plan)
    assert result.checked_against.endswith("onnxruntime on the rewritten one (onnx.reference cannot)")
    assert result.cross_check == "" and result.max_abs_diff == 0.0
    monkeypatch.setattr(engines, "run_onnxruntime", one_ulp_up)
    with pytest.raises(sr.ValidationError, match="not bit-exact"):
        validate(original, rewritten, plan)


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


def constant_tensor_scatter_model(dtype: int, np_type) -> onnx.ModelProto:
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
    folded, outcome = sr.fold(constant_tensor_scatter_model(dtype, np_type), validate=True, return_report=True)
    assert not folded.graph.node
    v = outcome.validation
    assert v["tolerance"] == "exact (bit for bit)" and v["max_abs_diff"] == 0.0
    if name == "f8e5m2":
        assert "onnxruntime cannot run either" in v["checked_against"]
    else:
        assert v["cross_check"].startswith("onnxruntime runs the rewritten model too, and agrees with onnx.reference "
                                           "on it: exact (bit for bit)")


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


# ---- a --mode custom result must load where its users run it ------------------------------------

def test_a_custom_model_onnxruntime_cannot_load_fails_validation(monkeypatch):
    """Without our ops registered, onnxruntime cannot load a --mode custom result: validation fails
    and says why, instead of proving the model in onnx.reference alone."""
    from scatter_rewrite import custom_ops

    monkeypatch.setattr(custom_ops, "register", lambda options: None)
    with pytest.raises(sr.ValidationError) as caught:
        sr.lower(gnn_sum(dtype=TensorProto.FLOAT), opset=13, mode="custom", validate=True)
    message = str(caught.value)
    assert message.startswith("onnxruntime cannot load the rewritten model with "
                              "scatter_rewrite.custom_ops.register")
    assert "mode='standard'" in message and "validate=False" in message  # (the API's words)
    assert "--" not in message


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE])
def test_a_custom_model_that_passes_validation_loads_in_onnxruntime(dtype):
    """PASSED means the written model loads and runs in onnxruntime with custom_ops.register (a
    float16 GNN printed PASSED, checked in onnx.reference alone, and did not load); where the custom
    op lacks the type, validation fails saying so."""
    try:
        lowered = sr.lower(gnn_sum(dtype=dtype), opset=13, mode="custom", validate=True)
    except sr.ValidationError as e:
        assert str(e).startswith("onnxruntime cannot load the rewritten model with "
                                 "scatter_rewrite.custom_ops"), e
        return
    np_type = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    feeds = {"d": np.ones((10, 4), np_type), "i": np.zeros((3, 4), np.int64),
             "u": np.ones((3, 4), np_type)}
    (y,) = run_onnxruntime(lowered.SerializeToString(), feeds)
    np.testing.assert_array_equal(y[0], np.full(4, 4, np_type))


# ---- what onnxruntime lacks: its kernel registry, and the messages it alone tells ---------------

def one_scatter_file(path: Path, dtype: int, reduction: str = "none", opset: int = 18) -> Path:
    """``scatter_model``'s ScatterElements on [4, 3] data along axis 0 (inputs ``scatter_inputs``)."""
    return save(scatter_model(data_shape=(4, 3), indices_shape=(2, 3), axis=0, reduction=reduction,
                              data_type=dtype, opset=opset), path)


def test_missing_kernels_are_read_from_onnxruntimes_registry(tmp_path, monkeypatch):
    path = one_scatter_file(tmp_path / "m.onnx", TensorProto.FLOAT)
    assert engines.undeclared_kernels(path) == []
    registry = engines._cpu_kernels()
    without_float = {op: [(lo, hi, {p: t - {"tensor(float)"} for p, t in c.items()})
                          for lo, hi, c in kernels] for op, kernels in registry.items()}
    monkeypatch.setattr(engines, "_cpu_kernels", lambda: without_float)
    assert engines.undeclared_kernels(path) == ["ScatterElements(18, float)"]
    without_scatter = {k: v for k, v in registry.items() if k != "ScatterElements"}
    monkeypatch.setattr(engines, "_cpu_kernels", lambda: without_scatter)
    assert engines.undeclared_kernels(path) == ["ScatterElements(18)"]


ORT = f"onnxruntime {ort.__version__}"


def scatter_inputs(dtype) -> dict[str, np.ndarray]:
    """In-range inputs of ``one_scatter_file``'s model."""
    return {"data": np.zeros((4, 3), dtype), "indices": np.array([[0, 1, 2], [3, 2, 1]]),
            "updates": np.ones((2, 3), dtype)}


def runs_in_onnxruntime(path: Path, inputs: dict) -> bool:
    try:
        run_onnxruntime(path, inputs)
    except Exception:
        return False
    return True


SCATTER_TYPES = [TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.BFLOAT16,
                 TensorProto.INT8, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8,
                 TensorProto.BOOL, TensorProto.STRING]


def scatter_between_casts(path: Path, op: str, reduction: str, dtype: int) -> tuple[Path, dict]:
    """One ``op`` on ``dtype`` data; a type the Python binding cannot pass (bfloat16) is cast to
    inside from float inputs and back to a float output, so that only the kernel is judged."""
    cast = dtype == TensorProto.BFLOAT16
    fed = TensorProto.FLOAT if cast else dtype
    nodes = [oh.make_node("Cast", [n], [f"{n}_t"], to=dtype) for n in ("d", "u")] if cast else []
    d, u = ("d_t", "u_t") if cast else ("d", "u")
    axis = {"axis": 0} if op == "ScatterElements" else {}
    nodes.append(oh.make_node(op, [d, "i", u], ["y_t" if cast else "y"], reduction=reduction, **axis))
    nodes += [oh.make_node("Cast", ["y_t"], ["y"], to=fed)] if cast else []
    index_shape = [2, 3] if op == "ScatterElements" else [2, 1]
    graph = oh.make_graph(nodes, "g", [vi("d", fed, [4, 3]), vi("i", TensorProto.INT64, index_shape),
                                       vi("u", fed, [2, 3])], [vi("y", fed, [4, 3])])
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=9), path)
    np_type = object if fed == TensorProto.STRING else oh.tensor_dtype_to_np_dtype(fed)
    inputs = {"d": np.zeros((4, 3)).astype(str).astype(np_type) if np_type is object else np.zeros((4, 3), np_type),
              "i": np.array([[0, 1, 2], [3, 2, 1]]) if op == "ScatterElements" else np.array([[0], [3]]),
              "u": np.ones((2, 3)).astype(str).astype(np_type) if np_type is object else np.ones((2, 3), np_type)}
    return path, inputs


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
def test_what_onnxruntime_lacks_for_a_scatter_is_declared_not_read_from_its_errors(op, reduction, tmp_path):
    """Every element type: onnxruntime runs the scatter exactly when kernels_onnxruntime_lacks (its
    registry and the reductions its kernels refuse, REDUCTIONS_REFUSED) finds nothing."""
    for dtype in SCATTER_TYPES:
        path, inputs = scatter_between_casts(tmp_path / f"{dtype}.onnx", op, reduction, dtype)
        lacks = engines.kernels_onnxruntime_lacks(path)
        name = TensorProto.DataType.Name(dtype)
        assert runs_in_onnxruntime(path, inputs) == (not lacks), f"{ORT}, {op} {reduction} {name}: {lacks}"


def test_a_reduction_onnxruntime_refuses_on_many_index_tuples_is_refused_without_killing_the_process():
    """ScatterND raises its refusal from inside its parallel loop: with worker threads that killed
    the process (SIGSEGV or SIGFPE, onnxruntime 1.32: within two fresh sessions at 4096 tuples).
    Validation's runs and the session that tries sizes get the refusal as an error every time."""
    done = run_python("""
        import numpy as np, onnx_ir as ir
        from onnx import TensorProto
        from scatter_rewrite.testing import scatter_model
        from scatter_rewrite.validate.engines import run_onnxruntime
        from scatter_rewrite.validate.trial import OriginalSession
        n = 4096
        model = scatter_model("ScatterND", data_shape=(n, 64), indices_shape=(n, 1),
                              updates_shape=(n, 64), data_type=TensorProto.BOOL, reduction="max")
        feeds = {"data": np.zeros((n, 64), bool), "indices": np.arange(n).reshape(n, 1),
                 "updates": np.ones((n, 64), bool)}
        refused = "while running ScatterND node"  # (its reason, cut after 200 characters)
        for _ in range(20):
            try:
                run_onnxruntime(model.SerializeToString(), feeds)
                raise SystemExit("onnxruntime ran it")
            except Exception as e:
                assert refused in str(e), e
            assert refused in OriginalSession(ir.serde.deserialize_model(model)).failure(feeds)
        """)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
def test_onnxruntime_runs_one_thread_exactly_where_a_scatter_kernel_may_refuse(op, reduction):
    """Declared by REDUCTIONS_REFUSED, every type; a data type not known may be refused too."""
    for dtype in SCATTER_TYPES:
        model = ir.serde.deserialize_model(scatter_model(op, data_type=dtype, reduction=reduction))
        refused = REDUCTIONS_REFUSED_NAMES.get((op, reduction), ())
        assert engines.may_refuse_in_parallel(model) == (dtype in refused), (op, reduction, dtype)
        model.graph.node(0).inputs[0].dtype = None
        assert engines.may_refuse_in_parallel(model) == bool(refused), (op, reduction)


REDUCTIONS_REFUSED_NAMES = {key: {t.value for t in types}
                            for key, types in engines.REDUCTIONS_REFUSED.items()}


class _SessionMade(Exception):
    """Raised instead of making a session: what its options were is all a test needs."""


def test_the_tests_sessions_of_a_reduction_onnxruntime_may_refuse_have_one_thread(tmp_path,
                                                                                  monkeypatch):
    """The test helpers' sessions follow validation's rule (engines.session_threads): a kernel's
    refusal in its parallel loop can kill the process (pytest with it), so one thread there; the
    default (0: onnxruntime's) elsewhere, or the threads asked."""
    from tests.helpers import backend_cases, runs

    made = []

    def recording(source, options=None, *args, **kwargs):
        made.append((options.intra_op_num_threads, options.inter_op_num_threads))
        raise _SessionMade

    refused = scatter_model("ScatterND", reduction="max", data_type=TensorProto.BOOL)
    taken = scatter_model("ScatterND", reduction="max")
    onnx.save(refused, tmp_path / "refused.onnx")
    assert [engines.session_threads(m, 4) for m in
            (refused, refused.SerializeToString(), tmp_path / "refused.onnx", taken)] == [1, 1, 1, 4]
    monkeypatch.setattr(ort, "InferenceSession", recording)
    for run in (lambda m: runs.ort_run(m, {}), lambda m: runs.ort_run(m, {}, threads=2),
                backend_cases._session):
        for model in (refused, taken):
            with pytest.raises(_SessionMade):
                run(model)
    assert [intra for intra, _ in made] == [1, 0, 1, 2, 1, 0]


def test_missing_reductions_name_the_node_op_and_type_and_the_lowering_that_runs_them(tmp_path):
    path = one_scatter_file(tmp_path / "m.onnx", TensorProto.FLOAT16, "add", opset=16)
    (lack,) = engines.kernels_onnxruntime_lacks(path)
    assert str(lack) == ("ScatterElements 'scatterelements_0' (opset 16, main graph): no float16 reduction='add' "
                         "in its CPU kernel")
    assert lack.fix == engines.LOWER_TO_RUN == "scatter_rewrite.lower(model, opset=13)"
    from scatter_rewrite.verbs import spoken

    assert spoken(lack.fix, {}) == "scatter-rewrite lower --opset 13"  # (the command line's)
    lowered = tmp_path / "lowered.onnx"
    onnx.save(sr.lower(onnx.load(path), opset=13, validate=False), lowered)
    assert engines.kernels_onnxruntime_lacks(lowered) == []
    assert runs_in_onnxruntime(lowered, scatter_inputs(np.float16))


ELEMENT_TYPES = [t for t in TensorProto.DataType.values() if t not in (
    TensorProto.UNDEFINED, TensorProto.STRING, TensorProto.FLOAT4E2M1, TensorProto.INT4,
    TensorProto.UINT4)] + [TensorProto.FLOAT4E2M1, TensorProto.INT4]
ELEMENT_TYPES = [t for t in ELEMENT_TYPES if oh.tensor_dtype_to_np_dtype(t) is not None]


@pytest.mark.parametrize("dtype", sorted(set(ELEMENT_TYPES)), ids=TensorProto.DataType.Name)
def test_the_types_onnxruntimes_python_binding_passes_are_declared(dtype, tmp_path):
    """A graph input (and output) of each type through Identity: onnxruntime runs it exactly when
    kernels_onnxruntime_lacks finds nothing (its registry, PASSED_IN/PASSED_OUT)."""
    for where in ("input", "output"):
        path = tmp_path / f"{where}.onnx"
        if where == "input":
            graph = oh.make_graph([oh.make_node("Identity", ["x"], ["y"])], "g", [vi("x", dtype, [2])],
                                  [vi("y", dtype, [2])])
            inputs = {"x": np.zeros(2, oh.tensor_dtype_to_np_dtype(dtype))}
        else:
            value = oh.make_tensor("c", dtype, [2], [0, 0])
            graph = oh.make_graph([oh.make_node("Constant", [], ["c"], value=value),
                                   oh.make_node("Identity", ["c"], ["y"])], "g", [], [vi("y", dtype, [2])])
            inputs = {}
        onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 23)], ir_version=11), path)
        lacks = engines.kernels_onnxruntime_lacks(path)
        assert runs_in_onnxruntime(path, inputs) == (not lacks), f"{ORT}, {where}: {lacks}"


@pytest.mark.parametrize("op", ["Add", "Mul", "Neg", "Relu", "MatMul"])
def test_float16_ops_onnxruntime_runs_on_their_float_kernels_are_not_lacking(op, tmp_path):
    """Its registry has no float16 Add (and more): it casts such nodes to float when it loads."""
    names = ["a", "b"][:1 if op in ("Neg", "Relu") else 2]
    graph = oh.make_graph([oh.make_node(op, names, ["y"])], "g", [vi(n, TensorProto.FLOAT16, [3, 3]) for n in names],
                          [vi("y", TensorProto.FLOAT16, [3, 3])])
    path = tmp_path / "m.onnx"
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 16)], ir_version=8), path)
    assert engines.kernels_onnxruntime_lacks(path) == []
    assert runs_in_onnxruntime(path, {n: np.ones((3, 3), np.float16) for n in names})


def test_a_graph_onnxruntime_refuses_for_another_reason_is_not_a_kernel_it_lacks(tmp_path):
    path = one_scatter_file(tmp_path / "m.onnx", TensorProto.FLOAT)
    out_of_range = np.array([[0, 1, 2], [9, 2, 1]])
    assert not runs_in_onnxruntime(path, {**scatter_inputs(np.float32), "indices": out_of_range})
    assert engines.kernels_onnxruntime_lacks(path) == []


def test_a_dynamo_gnn_export_gathering_rows_with_gathernd_validates_without_user_inputs(tmp_path):
    """dynamo writes ``x[src]`` as GatherND(x, Unsqueeze(Expand(src), -1)): the generated ``src``
    must stay within x's rows, or the original itself cannot run and nothing can be validated."""
    import numpy as np
    import onnx_ir as ir

    import scatter_rewrite as sr
    from scatter_rewrite.validate import plan_validation

    path = Path(__file__).parents[1] / "data" / "torch" / "gnn_max_layer_dynamo18.onnx"
    model = ir.load(path)
    assert "GatherND" in {n.op_type for n in model.graph}
    plan = plan_validation(model)
    rows = model.graph.inputs[0].shape[0]
    src = plan.inputs["edge_src"]
    assert src.min() >= -rows and src.max() < rows
    lowered, outcome = sr.lower(str(path), opset=13, output=str(tmp_path / "out.onnx"),
                                validate=True, return_report=True)
    assert outcome.status == "PASSED" and Path(lowered).is_file()
    assert np.array_equal(src, plan_validation(ir.load(path)).inputs["edge_src"])  # (seeded)
