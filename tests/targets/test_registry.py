"""The target registry (scatter_rewrite/targets) and prepare --target for the targets that are
existing verbs (tensorrt-X, opset-N) and for ort-cpu: float16/bfloat16 reductions onnxruntime's
CPU provider lacks, made runnable there exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from typer.testing import CliRunner

import scatter_rewrite
from scatter_rewrite.cli import app
from scatter_rewrite.errors import OptionError
from scatter_rewrite.targets import ScatterSupport, Target, get_target, register_target, targets
from tests.helpers.models import gnn_model, scatters_left
from tests.helpers.runs import ort_run

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_every_target_says_where_its_facts_come_from_and_how_to_get_there():
    found = targets()
    for name in ("tensorrt-8.6", "tensorrt-10", "tensorrt-11", "opset-13", "no-scatter", "qnn",
                 "rknn", "ort-cpu", "ort-web", "litert", "mnn", "openvino", "openvino-npu", "tvm"):
        assert name in found
    for target in found.values():
        assert target.sources, target.name
        low, high = target.opsets
        assert high is None or low <= high
    assert get_target(" QNN ").name == "qnn"
    assert get_target("opset-10").fix_verb is None  # (lower reaches 11 and above)
    assert get_target("opset-13").fix_verb == ("lower", {"opset": 13})
    assert get_target("tensorrt-8.6").fix_verb == ("tensorrt", {"trt_version": "8.6"})
    assert get_target("rknn").fix_verb == ("prepare", {"target": "rknn"})
    with pytest.raises(OptionError, match="no-scatter, qnn, rknn"):
        get_target("hexagon")
    with pytest.raises(AssertionError, match="registered twice"):
        register_target(Target("qnn", "no-scatter", "again", (11, None), ()))


def test_support_tables_read_as_published():
    trt86, trt10, ort_cpu = (get_target(n) for n in ("tensorrt-8.6", "tensorrt-10", "ort-cpu"))
    assert not trt86.supports("ScatterElements", "add", "FLOAT", "INT64")  # NVIDIA/TensorRT#3750
    assert trt10.supports("ScatterElements", "add", "FLOAT", "INT64")  # the plugin
    assert not trt10.supports("ScatterElements", "add", "FLOAT", "INT32")
    assert not trt10.supports("ScatterND", "max", "FLOAT", "INT64")
    assert not ort_cpu.supports("ScatterElements", "add", "FLOAT16", "INT64")
    assert ort_cpu.supports("ScatterElements", "max", "FLOAT16", "INT64")
    assert not ort_cpu.supports("ScatterND", "max", "FLOAT16", "INT64")
    assert all(get_target(n).scatter_free for n in ("no-scatter", "qnn", "rknn"))
    assert ScatterSupport("ScatterND", frozenset({"none"})).runs("ScatterND", "none", None, None)


@pytest.mark.parametrize("target, verb", [
    ("tensorrt-10", ["tensorrt", "--trt-version", "10"]),
    ("tensorrt-8.6", ["tensorrt", "--trt-version", "8.6"]),
    ("opset-13", ["lower", "--opset", "13"]),
])
def test_prepare_for_a_verbs_target_writes_what_the_verb_writes(target, verb, tmp_path):
    model = ROOT / "models/gnn_add_opset17.onnx"
    a, b = tmp_path / "prepared.onnx", tmp_path / "verb.onnx"
    assert runner.invoke(app, ["prepare", str(model), "--target", target, "-o", str(a),
                               "--no-validate"]).exit_code == 0
    assert runner.invoke(app, [verb[0], str(model), *verb[1:], "-o", str(b),
                               "--no-validate"]).exit_code == 0
    assert a.read_bytes() == b.read_bytes()


# A GNN sum aggregation as dynamo exports it: x[src] scattered into x's rows at dst through
# Expand(Unsqueeze(dst)); its data type float16 is what onnxruntime's CPU provider lacks.
GNN_SUM = dict(nodes="N", edges="E", feats=16, messages="gathered", expand_to="shape")

def test_ort_cpu_makes_a_float16_gnn_sum_run_in_onnxruntime():
    model = gnn_model("add", dtype=T.FLOAT16, **GNN_SUM)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((50, 16)).astype(np.float16),
             "src": rng.integers(0, 50, 400), "dst": rng.integers(-50, 50, 400)}
    with pytest.raises(Exception, match="MLFloat16 data type is not supported"):
        ort_run(model, feeds)
    prepared, report = scatter_rewrite.prepare(model, target="ort-cpu", validate=True,
                                               return_report=True)
    assert report.status == "PASSED"
    (note,) = report.passes[0]["rewritten"]
    assert "sort + segmented add + ScatterND(none)" in note["detail"]
    (y,) = ort_run(prepared, feeds)
    x = feeds["x"].astype(np.float64)
    expected = x.copy()
    np.add.at(expected, feeds["dst"] % 50, x[feeds["src"]])
    # summed in float32 and rounded once: within a float16 rounding of the exact sum
    assert np.allclose(y.astype(np.float64), expected, rtol=2 ** -10, atol=2 ** -10 * 8)
    assert scatter_rewrite.check(prepared, target="ort-cpu").status == "READY"
    assert scatter_rewrite.check(model, target="ort-cpu").status == "FIXABLE"


def test_ort_web_is_prepared_as_ort_cpu_its_kernels_compiled_to_wasm():
    model = gnn_model("add", dtype=T.FLOAT16, **GNN_SUM)
    web, cpu = get_target("ort-web"), get_target("ort-cpu")
    assert web.runs == cpu.runs and web.onnxruntime and web.family == cpu.family
    for validate in (True, False):
        prepared = scatter_rewrite.prepare(model, target="ort-web", validate=validate)
        assert prepared == scatter_rewrite.prepare(model, target="ort-cpu", validate=validate)
    assert scatter_rewrite.check(prepared, target="ort-web").status == "READY"
    assert scatter_rewrite.check(model, target="ort-web").status == "FIXABLE"


@pytest.mark.parametrize("verb", ["prepare", "check"])
def test_ncnn_is_refused_by_name_with_the_reason(verb, tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(gnn_model("add", **GNN_SUM), model)
    result = runner.invoke(app, [verb, str(model), "--target", "ncnn", "-o", str(tmp_path / "o.onnx")]
                           if verb == "prepare" else [verb, str(model), "--target", "ncnn"])
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.output.splitlines() if line.strip()]
    assert "ncnn" in line and "pnnx" in line and "TopK" in line and "unknown" not in line
    assert not (tmp_path / "o.onnx").exists()
    with pytest.raises(OptionError, match="no scatter-rewrite form runs in ncnn"):
        scatter_rewrite.prepare(gnn_model("add", **GNN_SUM), target="ncnn")


def test_ort_cpu_writes_bfloat16_scatter_free_and_leaves_what_it_runs():
    model = gnn_model("add", dtype=T.BFLOAT16, **GNN_SUM)
    prepared, report = scatter_rewrite.prepare(model, target="ort-cpu", validate=True,
                                               return_report=True)
    assert not scatters_left(prepared)  # (no bfloat16 scatter at all in onnxruntime's CPU EP)
    assert "scatter-free" in report.passes[0]["rewritten"][0]["detail"]
    float32 = gnn_model("add", dtype=T.FLOAT, **GNN_SUM)
    _, unchanged = scatter_rewrite.prepare(float32, target="ort-cpu", return_report=True)
    assert unchanged.status == "UNCHANGED"


def test_ort_cpu_on_the_repaired_float16_voxel_centroid(tmp_path):
    """The TorchScript voxel-centroid export (float16 index_put_ accumulate, counted once per
    repeated index): repaired, it runs in onnxruntime's CPU provider: check says READY and
    prepare has nothing left to do."""
    export = ROOT / "tests/data/torch_repair/voxel_centroid_fp16_ts17.onnx"
    repaired = scatter_rewrite.repair(str(export), output=str(tmp_path / "r.onnx"), validate=True)
    assert scatter_rewrite.check(repaired, target="ort-cpu").status == "READY"
    _, report = scatter_rewrite.prepare(repaired, target="ort-cpu",
                                        output=str(tmp_path / "p.onnx"), return_report=True)
    assert report.status == "UNCHANGED"
    arrays = np.load(export.with_suffix(".npz"))
    feeds = {k[3:]: arrays[k] for k in arrays.files if k.startswith("in_")}
    ort_run(onnx.load(str(tmp_path / "p.onnx")), feeds)  # runs


def test_prepare_command_line(tmp_path):
    model = ROOT / "models/gnn_max_opset18.onnx"
    out = tmp_path / "npu.onnx"
    done = runner.invoke(app, ["prepare", str(model), "--target", "no-scatter", "-o", str(out)])
    assert done.exit_code == 0, done.stderr
    assert "PASSED" in done.stdout and not scatters_left(onnx.load(out))
    # (float max: only the sort form, whose TopK rknn-toolkit2 does not convert)
    refused = runner.invoke(app, ["prepare", str(model), "--target", "rknn", "-o", str(out)])
    assert refused.exit_code == 1 and "needs TopK, which rknn-toolkit2" in refused.stderr
    bad = runner.invoke(app, ["prepare", str(model), "--target", "rknn", "--fix-dim", "N=4",
                              "-o", str(tmp_path / "x.onnx")])
    assert bad.exit_code == 2 and "--fix-dim does not apply to --target rknn" in bad.stderr
    assert not (tmp_path / "x.onnx").exists()
    missing = runner.invoke(app, ["prepare", str(model)])
    assert missing.exit_code == 2 and "prepare needs --target" in missing.stderr


@pytest.mark.slow
def test_check_is_blocked_with_the_size_where_prepare_refuses_by_the_bound(tmp_path):
    """A sum aggregation into 20000 rows of 256 features: of 40000 updates, its cheapest exact
    scatter-free form (sort) holds 177 MiB at once, within the default bound; of 100000, 353 MiB:
    check says BLOCKED, with prepare's reason, as prepare refuses, and names the bound that would
    accept it."""
    from scatter_rewrite.testing import scatter_model

    fits = scatter_model("ScatterND", reduction="add", data_shape=(20000, 256),
                         indices_shape=(40000, 1), updates_shape=(40000, 256))
    above = scatter_model("ScatterND", reduction="add", data_shape=(20000, 256),
                          indices_shape=(100000, 1), updates_shape=(100000, 256))
    for model, name in ((fits, "fits"), (above, "above")):
        onnx.save(model, tmp_path / f"{name}.onnx")
    assert scatter_rewrite.check(str(tmp_path / "fits.onnx"), target="no-scatter").status == "FIXABLE"
    report = scatter_rewrite.check(str(tmp_path / "above.onnx"), target="no-scatter")
    assert report.status == "BLOCKED"
    assert "sort form: 353 MiB held at once" in report.dry_run.error
    assert "--max-intermediate-mib 354" in report.dry_run.error  # (as its command says it)
    done = runner.invoke(app, ["prepare", str(tmp_path / "above.onnx"), "--target", "no-scatter",
                               "--no-validate"])
    assert done.exit_code == 1
    assert done.stderr.splitlines()[-1] == f"scatter-rewrite: error: {report.dry_run.error}"
    checked = runner.invoke(app, ["check", str(tmp_path / "above.onnx"), "--target", "no-scatter"])
    assert "--max-intermediate-mib 354" in checked.output and "max_intermediate_mib" not in checked.output
    assert not (tmp_path / "above.prepared.onnx").exists()
