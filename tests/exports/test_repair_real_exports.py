"""``repair`` on real layers whose scatter indices are computed inside the model and repeat
(tests/data/torch_repair/make.py, ``export_real_layers``): a MoE router's and a sort-by-expert
layer's expert counts, a jagged bag sum with segment ids from ``cumsum``, a 2-D BEV
``index_put_(accumulate=True)`` at opsets 11, 13, 16 and 17, PyG's mean aggregation (dynamo) and a
float16 voxel centroid. onnxruntime on each export differs from PyTorch; after ``repair``, validated
with and without the user's inputs, it gives PyTorch's outputs. A wrong repair fails the proof."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from tests.helpers.wrong_passes import RepairIntoMax, RepairOffByOne

import scatter_rewrite as sr
from scatter_rewrite.errors import ValidationError
from scatter_rewrite.passes.repair import typed_sites
from tests.helpers.runs import ort_outputs
from tests.helpers.exports import export_arrays, load_export

DATA = Path(__file__).parents[1] / "data" / "torch_repair"
REAL = {  # name: the options repair needs
    "moe_router_ts9": {},  # Scatter: moved to opset 11 first
    "moe_router_ts11": {},
    "moe_router_ts13": {},
    "moe_sort_ts13": {},
    "jagged_bag_sum_ts13": {},
    "jagged_bag_sum_strict_ts13": {},
    "bev_index_put_ts11": {},
    "bev_index_put_ts13": {},
    "bev_index_put_ts16": {},
    "bev_index_put_ts17": {},
    "pyg_mean_dynamo18": {},
    "pyg_mean_self_dynamo18": {"assume": "scatter-reduce-mean"},
    "voxel_centroid_fp16_ts16": {},
    "voxel_centroid_fp16_ts17": {},
    "sparse_conv_ts11": {},  # three index_add_ chained, each Add reading the previous one
    "sparse_conv_ts17": {},
}
# transformers' sparse MoE blocks (export_moe_blocks): each expert's index_add_ into the tokens it
# routes to, whose indices do not repeat; the export runs only on inputs that hit every expert.
MOE_BLOCKS = ["qwen2_moe_block_ts11", "qwen2_moe_block_ts17", "olmoe_block_ts11",
              "olmoe_block_ts17"]


def assert_pytorchs(actual: dict, expected: dict) -> None:
    for name, want in expected.items():
        tolerance = 1e-2 if want.dtype == np.float16 else 1e-5  # validation's float16 bound
        np.testing.assert_allclose(actual[name].astype(np.float64), want.astype(np.float64),
                                   rtol=tolerance, atol=tolerance, err_msg=name)


def differs(actual: dict, expected: dict) -> bool:
    return any(not np.allclose(actual[k].astype(np.float64), v.astype(np.float64), rtol=1e-2,
                               atol=1e-2) for k, v in expected.items())


@pytest.mark.parametrize("name", REAL)
def test_onnxruntime_on_the_export_differs_from_pytorch(name):
    inputs, expected = export_arrays(DATA, name)
    assert differs(ort_outputs(onnx.load(DATA / f"{name}.onnx"), inputs), expected)


@pytest.mark.parametrize("user_inputs", [False, True], ids=["generated", "with-inputs"])
@pytest.mark.parametrize("name", REAL)
def test_repair_validates_and_gives_pytorchs_outputs(name, user_inputs):
    inputs, expected = export_arrays(DATA, name)
    repaired, report = sr.repair(onnx.load(DATA / f"{name}.onnx"), validate=True,
                                 inputs=inputs if user_inputs else None, return_report=True,
                                 **REAL[name])
    assert report.status == "PASSED"
    repeated = report.validation["with_repeated_indices"]
    assert repeated["original_differs"] and repeated["user_inputs"] == user_inputs
    assert_pytorchs(ort_outputs(repaired, inputs), expected)
    onnx.checker.check_model(repaired, full_check=True)


@pytest.mark.parametrize("validate,user_inputs", [(True, False), (True, True), (False, False)],
                         ids=["generated", "with-inputs", "unvalidated"])
@pytest.mark.parametrize("name", MOE_BLOCKS)
def test_moe_blocks_are_repaired_proven_and_give_pytorchs_outputs(name, validate, user_inputs):
    """The proof draws inputs again where the original fails on them (an expert missed: the
    export's Split of the experts hit fails) rather than stop on them."""
    inputs, expected = export_arrays(DATA, name)
    repaired, report = sr.repair(onnx.load(DATA / f"{name}.onnx"), validate=validate,
                                 inputs=inputs if user_inputs else None, return_report=True)
    assert report.status == ("PASSED" if validate else "WRITTEN")
    [result] = report.passes
    assert len(result["rewritten"]) == 8 and not result["skipped"]  # one per expert
    assert_pytorchs(ort_outputs(repaired, inputs), expected)


@pytest.mark.parametrize("name", REAL)
def test_each_repaired_node_says_what_it_recognized_and_assumed(name):
    sites = typed_sites(ir.load(DATA / f"{name}.onnx"), REAL[name].get("assume"))[0]
    _, report = sr.repair(onnx.load(DATA / f"{name}.onnx"), return_report=True, **REAL[name])
    [result] = report.passes
    assert not result["skipped"]
    # (an opset-9 export's Scatter -> ScatterElements is upgrade's line, absorbed)
    said = [str(note) for note in result["rewritten"] if "recognized " in str(note)]
    assert len(said) == len(sites) >= 1
    assert all("; assumed " in text for text in said)
    if REAL[name]:
        assert all("(asked: assume='scatter-reduce-mean')" in text for text in said)


def test_the_name_only_mean_is_left_with_its_warning_unless_assumed():
    path = DATA / "pyg_mean_self_dynamo18.onnx"
    _, report = sr.repair(onnx.load(path), return_report=True)
    assert not report.modified
    assert any("scatter_rewrite.repair(model, assume='scatter-reduce-mean')" in note
               for note in report.notes)


def test_float16_accumulations_run_in_onnxruntimes_cpu_provider():
    repaired = sr.repair(onnx.load(DATA / "voxel_centroid_fp16_ts16.onnx"))
    reducing = [n for n in repaired.graph.node if n.op_type in ("ScatterElements", "ScatterND")
                and any(a.name == "reduction" and a.s != b"none" for a in n.attribute)]
    assert reducing == []  # lowered: onnxruntime's CPU provider has no float16 scatter add
    inputs, expected = export_arrays(DATA, "voxel_centroid_fp16_ts16")
    assert_pytorchs(ort_outputs(repaired, inputs), expected)


@pytest.mark.parametrize("wrong,name", [
    (RepairIntoMax, "bev_index_put_ts16"),  # the wrong reduction
    (RepairIntoMax, "pyg_mean_dynamo18"),  # the mean's sums and counts reducing with max
    (RepairOffByOne, "moe_router_ts13"),  # every expert count one too many
    (RepairOffByOne, "moe_sort_ts13"),
])
@pytest.mark.parametrize("user_inputs", [False, True], ids=["generated", "with-inputs"])
def test_a_wrong_repair_fails_validation(wrong, name, user_inputs):
    inputs, _ = export_arrays(DATA, name)
    with pytest.raises(ValidationError):
        sr.rewrite(onnx.load(DATA / f"{name}.onnx"), [wrong()], validate=True,
                   inputs=inputs if user_inputs else None)


# (but the two whose declared shapes neither onnx.checker nor onnxruntime accept:
# test_torchscript_shapes.py)
UNLOADABLE = {"scatter_amax_feeds_add_ts18", "scatter_amax_functions_ts18"}
CORRECT = sorted(p.stem for p in (Path(__file__).parents[1] / "data" / "torch").glob("*.onnx")
                 if p.stem not in UNLOADABLE)


@pytest.mark.parametrize("name", CORRECT)
def test_a_correct_export_is_bit_identical_in_output_under_repair(name):
    """The committed exports in tests/data/torch compute what PyTorch did: repair changes
    nothing in their outputs."""
    original, inputs, _ = load_export(Path(__file__).parents[1] / "data" / "torch", name)
    repaired = sr.repair(original, validate=True)
    before, after = ort_outputs(original, inputs), ort_outputs(repaired, inputs)
    for key, value in before.items():
        np.testing.assert_array_equal(after[key], value)


@pytest.mark.parametrize("name", MOE_BLOCKS)
def test_moe_blocks_repaired_on_the_command_line_with_the_exports_inputs(name, tmp_path):
    from tests.helpers.cli import invoke

    inputs, expected = export_arrays(DATA, name)
    np.savez(tmp_path / "feeds.npz", **inputs)
    written = tmp_path / "repaired.onnx"
    done = invoke("repair", DATA / f"{name}.onnx", "--inputs", tmp_path / "feeds.npz",
                  "-o", written)
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines()[-1].startswith("PASSED in onnxruntime, ")
    assert_pytorchs(ort_outputs(written, inputs), expected)


def test_a_moe_block_no_generated_input_routes_is_refused_by_its_node_asking_for_inputs(
        tmp_path, monkeypatch):
    """Generated inputs that send every token to the same experts (all zeros: equal router
    logits): the trace's Split of the experts hit fails on each, and the refusal is one line
    naming the user's node and --inputs, never an internal error."""
    from scatter_rewrite import validate
    from tests.helpers.cli import invoke

    planned = validate.plan_validation

    def routed_alike(model, *args, inputs=None, **kwargs):
        plan = planned(model, *args, inputs=inputs, **kwargs)
        if inputs is None:
            plan.inputs = {k: np.zeros_like(v) for k, v in plan.inputs.items()}
        return plan

    monkeypatch.setattr(validate, "plan_validation", routed_alike)
    written = tmp_path / "repaired.onnx"
    done = invoke("repair", DATA / "qwen2_moe_block_ts11.onnx", "-o", written)
    assert done.exit_code == 1 and not written.exists()
    [line] = done.stderr.splitlines()
    assert line.startswith("scatter-rewrite: error: the original model fails on every input "
                           "generated (Split '/experts/Split' fails: "), line
    assert line.endswith("pass inputs it runs on with --inputs, or --no-validate")
    assert "internal error" not in done.output
