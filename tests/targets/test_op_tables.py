"""Each non-TensorRT target's published ONNX op table (scatter_rewrite/targets/op_tables/*.json,
ort-cpu's from onnxruntime's kernel registry): check --target T blocks a node outside it, on every
node of the model (main graph, If branches, functions), and prepare --target T refuses it, both
naming the source; what prepare writes stays inside the table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto as T
from typer.testing import CliRunner

import scatter_rewrite
from scatter_rewrite.cli import app
from scatter_rewrite.errors import ScatterRewriteError
from scatter_rewrite.model_io import load_proto, to_ir
from scatter_rewrite.passes.op_support import unsupported_nodes
from scatter_rewrite.targets import get_target, targets
from scatter_rewrite.testing import LOCAL_DOMAIN, scatter_model, wrap

ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted(ROOT.glob("models/*.onnx")) + sorted(ROOT.glob("tests/data/**/*.onnx"))
TABLED = ("qnn", "rknn", "litert", "mnn", "openvino", "openvino-npu", "tvm", "ort-cpu")
# Names a table publishes that are no ONNX op: the runtime's own, or ops ONNX removed
NOT_ONNX = {
    "litert": {"FusedConv", "Input", "Inverse", "QLinearAdd", "QLinearConcat", "QLinearLeakyRelu",
               "QLinearMul", "QLinearSigmoid", "QLinearSoftmax", "ScaleAndTranslate"},
    "openvino": {"ATen", "Affine", "ConstantFill", "Crop", "ImageScaler", "IsFinite",
                 "SimplifiedLayerNormalization"},
    "tvm": {"AllClassNMS", "BiasGelu", "EmbedLayerNormalization", "FastGelu", "MatMulInteger16",
            "SkipLayerNormalization"},
    "mnn": {"ATan", "ATen", "Erfc", "Erfinv", "Expm1", "GridSampler", "LayerNorm", "Log1p",
            "raster_grad", "texture", "texture_mipmap"},
    "qnn": set(), "rknn": set(),
}
QNN_SOURCE = "onnxruntime/core/providers/qnn/builder/op_builder_factory.cc"
runner = CliRunner()


def test_every_target_but_tensorrt_opset_and_no_scatter_has_a_cited_table():
    untabled = {name for name, t in targets().items() if t.ops is None}
    assert untabled == {"no-scatter"} | {n for n in targets() if n.startswith(("tensorrt-", "opset-"))}
    for name in TABLED:
        table = get_target(name).ops()
        assert table.source and table.version and table.retrieved, name
        assert table.url.startswith("https://"), name
        assert len(table.ops) > 60, name


@pytest.mark.parametrize("name", sorted(NOT_ONNX))
def test_a_stored_table_holds_onnx_op_names_and_its_provenance(name):
    data = json.loads((ROOT / f"scatter_rewrite/targets/op_tables/{name}.json").read_text())
    assert {"target", "source", "url", "version", "retrieved", "ops"} <= set(data)
    default = {op for op in data["ops"] if "::" not in op}
    # (a name mistyped from the source is no ONNX op: it fails here)
    assert {op for op in default if not onnx.defs.has(op)} == NOT_ONNX[name]


def test_a_table_reads_opset_bounds_and_domains_as_published():
    rknn, tvm, openvino, qnn = (get_target(n).ops() for n in ("rknn", "tvm", "openvino", "qnn"))
    assert rknn.lacks("", "Add", 19) is None
    assert "at opset 20" in rknn.lacks("", "Add", 20)  # "the corresponding ONNX opset is 19"
    assert openvino.lacks("", "Range", 11) is None
    assert "at opset 10" in openvino.lacks("", "Range", 10)  # (OpenVINO's converter: from 11)
    assert openvino.lacks("com.microsoft", "Gelu", 1) is None
    assert "com.microsoft::Sampling" in openvino.lacks("com.microsoft", "Sampling", 1)
    assert tvm.lacks("com.microsoft", "BiasGelu", 1) is None  # (TVM ignores the domain)
    assert qnn.lacks("ai.onnx", "TopK", 18) is None
    assert "TensorScatter is not in tvm's" in tvm.lacks("", "TensorScatter", 24)
    ort = get_target("ort-cpu").ops()
    assert ort.lacks("", "ScatterElements", 18) is None
    assert ort.lacks("", "Gelu", 20) is None  # (no kernel: run through its function body)
    assert "ImageDecoder" in ort.lacks("", "ImageDecoder", 20)


def _one_hot_model(where: str) -> onnx.ModelProto:
    """OneHot, which the QNN execution provider has no builder for, in the main graph, both If
    branches or a model-local function."""
    node = oh.make_node("OneHot", ["indices", "depth", "values"], ["out"], name="one_hot")
    inputs = [oh.make_tensor_value_info("indices", T.INT64, [3]),
              oh.make_tensor_value_info("depth", T.INT64, []),
              oh.make_tensor_value_info("values", T.FLOAT, [2])]
    parts = wrap(node, inputs, oh.make_tensor_value_info("out", T.FLOAT, [3, "depth"]), where,
                 18)
    imports = [oh.make_opsetid("", 18)] + ([oh.make_opsetid(LOCAL_DOMAIN, 1)]
                                           if parts.get("functions") else [])
    model = oh.make_model(parts["graph"], opset_imports=imports,
                          functions=parts.get("functions", []))
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize("where", ["main", "if", "function"])
def test_an_op_outside_qnns_table_blocks_check_and_prepare_naming_the_source(where, tmp_path):
    path = tmp_path / "one_hot.onnx"
    onnx.save(_one_hot_model(where), path)
    checked = runner.invoke(app, ["check", str(path), "--target", "qnn", "--json"])
    (report,) = json.loads(checked.stdout)["models"]
    assert report["status"] == "BLOCKED" and checked.exit_code == 1
    found = [f for f in report["findings"] if f["op"] == "OneHot"]
    assert len(found) == (2 if where == "if" else 1)  # (both branches)
    for finding in found:
        (blocker,) = finding["blockers"]
        assert "OneHot is not in qnn's published support (" in blocker and QNN_SOURCE in blocker
    out = tmp_path / "out.onnx"
    done = runner.invoke(app, ["prepare", str(path), "--target", "qnn", "-o", str(out)])
    assert done.exit_code == 1 and not out.exists()
    assert done.stderr.splitlines()[-1] == f"scatter-rewrite: error: {report['dry_run']['error']}"
    assert QNN_SOURCE in done.stderr
    # (in an If, the If goes first: QNN's execution provider has no control flow either)
    assert ("If 'if_0'" if where == "if" else "OneHot 'one_hot'") in done.stderr


def test_a_static_scatter_is_prepared_for_qnn_within_its_table(tmp_path):
    """The form's Range and Shape over static sizes are folded to constants: QNN's table has
    neither."""
    path = tmp_path / "scatter.onnx"
    onnx.save(scatter_model("ScatterElements", reduction="add", axis=0), path)
    checked = runner.invoke(app, ["check", str(path), "--target", "qnn", "--json"])
    assert json.loads(checked.stdout)["models"][0]["status"] == "FIXABLE"
    out = tmp_path / "out.onnx"
    done = runner.invoke(app, ["prepare", str(path), "--target", "qnn", "-o", str(out)])
    assert done.exit_code == 0, done.stderr
    prepared = load_proto(out)
    assert unsupported_nodes(to_ir(prepared, out), get_target("qnn").ops()) == []
    assert not {"Range", "Shape", "Size"} & {n.op_type for n in prepared.graph.node}


def _op_types(model: onnx.ModelProto) -> set[str]:
    found = set()

    def walk(nodes):
        for node in nodes:
            found.add(node.op_type)
            for a in node.attribute:
                for graph in [a.g] * a.HasField("g") + list(a.graphs):
                    walk(graph.node)

    walk(model.graph.node)
    for function in model.functions:
        walk(function.node)
    return found - {f.name for f in model.functions}


# Where the forms themselves write an op outside the table on some committed model (so prepare
# refuses it for that reason): QNN and RKNN have no Range, Shape or Size, which the forms need where
# sizes are dynamic; RKNN no ReduceProd (the mask form's mul) nor CumSum (rows reshaped back to a
# dynamic shape below opset 14: graph.reshape_like). (The sort form's IsNaN, which QNN lacks,
# becomes Equal(x, x).)
FORMS_OUTSIDE = {"qnn": {"Range", "Shape", "Size"},
                 "rknn": {"Range", "Shape", "Size", "ReduceProd", "CumSum"}}
# Ops a table lacks that prepare writes exactly with ops the table has (passes/op_equivalents.py):
# never the reason for a refusal of a committed model (Identity and If may be: an Identity that
# hands a function's input to its output, an If on a run-time condition)
WRITTEN_WITHIN = {"qnn": {"CastLike", "IsNaN"}, "rknn": {"CastLike"}}
CASES = [pytest.param(model, target, id=f"{model.relative_to(ROOT)}-{target}",
                      marks=() if model.parent.name == "models" else pytest.mark.slow)
         for model in MODELS for target in TABLED]


@pytest.mark.parametrize("model, target", CASES)
def test_what_prepare_writes_is_in_the_targets_table(model, target, tmp_path):
    out = tmp_path / "out.onnx"
    table = get_target(target).ops()
    try:
        scatter_rewrite.prepare(str(model), target=target, validate=False, output=out)
    except ScatterRewriteError as e:
        declined = getattr(e, "declined", [])
        if not any("published support" in note.detail for note in declined):
            return  # (refused for another reason: a form above the bound, the sort form, ...)
        assert all(table.url in note.detail for note in declined)
        # each op it refuses is one the original holds, or one the forms need that T lacks
        refused = {note.node.split()[0] for note in declined}
        original = _op_types(load_proto(model))
        assert refused <= original | FORMS_OUTSIDE.get(target, set()), declined
        assert not refused & WRITTEN_WITHIN.get(target, set()), declined
        return
    prepared = load_proto(out)
    assert unsupported_nodes(to_ir(prepared, out), table) == []


# Committed exports of each kind (GNN layers, LLaMA-style attention, scatter_reduce, BEV pooling,
# MoE routing, label smoothing), each run in LiteRT, OpenVINO and TVM as exported and as prepared for
# that runtime (its forms, before the table is asked): what the runtime runs, its table must not
# block. NOTHING_RUNS: the pairs where the runtime refuses both (onnx2tf and TVM refuse these
# originals, and onnx2tf the GNN max layer prepared for litert as much).
RUN_HERE = ("torch/gnn_max_layer_dynamo18", "torch/llama_tiny_ts17",
            "torch/scatter_reduce_sum_dynamo18", "torch_repair/bev_pool_ts17",
            "torch_repair/moe_router_ts13", "torch/label_smoothing_ts11")
NOTHING_RUNS = {("litert", "torch/gnn_max_layer_dynamo18"), ("litert", "torch/llama_tiny_ts17"),
                ("litert", "torch/label_smoothing_ts11"),
                ("tvm", "torch/gnn_max_layer_dynamo18"), ("tvm", "torch/llama_tiny_ts17")}


def _as_exported_and_prepared(runtime: str, model: onnx.ModelProto):
    yield "original", model
    try:  # the target's passes without the op table's step
        yield "prepared", scatter_rewrite.rewrite(model, get_target(runtime).passes(),
                                                  validate=False, verb="prepare")
    except ScatterRewriteError:
        pass


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["litert", "openvino", "tvm"])
@pytest.mark.parametrize("name", RUN_HERE)
def test_a_table_does_not_block_an_export_its_runtime_runs(runtime, name, tmp_path):
    from tests.helpers import DATA
    from tests.helpers.exports import load_export
    from tests.helpers.runtimes import Refused, run_in

    model, inputs, _ = load_export(DATA, name)
    ran = []
    for which, candidate in _as_exported_and_prepared(runtime, model):
        try:
            run_in(runtime, candidate, inputs, tmp_path / which)
        except Refused:
            continue  # (the runtime refuses it: its table may say anything)
        ran.append(which)
        path = tmp_path / f"{which}.onnx"
        onnx.save(candidate, path)
        assert unsupported_nodes(to_ir(load_proto(path), path), get_target(runtime).ops()) == []
    assert bool(ran) is ((runtime, name) not in NOTHING_RUNS), ran


# Committed exports qnn refused (before the equivalents) for ops its table lacks but has an exact
# equivalent of: Identity (torch.clone), CastLike, the forms' IsNaN (float max/min), and the forms'
# Shape of the sorted rows, static once the TopK's length is folded
EQUIVALENTS_WITHIN_QNN = ("torch/view_layer_dynamo18", "torch/mp_layer_dynamo18",
                          "torch/scatter_reduce_amax_ts16", "torch/scatter_reduce_amin_dynamo18")


@pytest.mark.parametrize("name", EQUIVALENTS_WITHIN_QNN)
def test_qnn_prepares_exports_whose_ops_outside_its_table_have_exact_equivalents(name):
    from tests.helpers import DATA

    path = DATA / f"{name}.onnx"
    prepared, outcome = scatter_rewrite.prepare(load_proto(path), target="qnn", validate=True,
                                                return_report=True)
    assert outcome.status == "PASSED", outcome.error  # (onnxruntime: bit for bit, max/min)
    assert unsupported_nodes(to_ir(prepared, path), get_target("qnn").ops()) == []


def test_rknn_moves_an_export_above_opset_19_down_to_it():
    # rknn-toolkit2 2.3.2 converts opsets up to 19; dynamo's default export writes 20 and up
    from tests.helpers import DATA
    from tests.helpers.models import model_opset

    path = DATA / "torch/view_layer_dynamodefault.onnx"
    original = load_proto(path)
    assert model_opset(original) > 19
    prepared, outcome = scatter_rewrite.prepare(original, target="rknn", validate=True,
                                                return_report=True)
    assert outcome.status == "PASSED", outcome.error
    assert model_opset(prepared) == 19
    assert unsupported_nodes(to_ir(prepared, path), get_target("rknn").ops()) == []


@pytest.mark.parametrize("runtime", ["openvino", "tvm",
                                     pytest.param("litert", marks=pytest.mark.slow)])
def test_qnns_float_max_min_keep_nan_and_signed_zeros_in_each_runtime(runtime, tmp_path):
    # its sort form tells NaN by Equal(x, x) (QNN has no IsNaN): no NPU here, the other runtimes
    from tests.helpers.runtimes import (
        disagreement, original_outputs, run_in, signed_zeros_and_nan,
    )

    model, inputs = signed_zeros_and_nan(nan=True)
    prepared = scatter_rewrite.prepare(model, target="qnn", validate=True)
    assert "IsNaN" not in _op_types(prepared) and "Equal" in _op_types(prepared)
    expected = original_outputs(model, inputs)
    actual = run_in(runtime, prepared, inputs, tmp_path)
    assert disagreement(model, expected, actual, False) == []
    assert all(np.array_equal(np.signbit(e), np.signbit(a)) for e, a in zip(expected, actual))
