"""``scatter-rewrite repair`` and ``scatter_rewrite.repair``: the report names each repair, the
exporter behaviour and the PyTorch issue; its proof replaces the proof of equality; ``check`` lists
the nodes repair would change with the fix command; no other verb changes a model's results."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from tests.helpers.models import accumulate_model

import scatter_rewrite as sr
from scatter_rewrite.readiness import check
from tests.helpers.runs import ort_run
from tests.helpers.exports import export_arrays
from tests.helpers.cli import invoke

DATA = Path(__file__).parent / "data" / "torch_repair"


def copied_export(name: str, tmp_path: Path) -> tuple[Path, dict[str, np.ndarray], np.ndarray]:
    """The committed export copied into ``tmp_path`` (the verb writes beside it), its inputs and
    PyTorch's output."""
    inputs, pytorchs = export_arrays(DATA, name)
    return Path(shutil.copy(DATA / f"{name}.onnx", tmp_path / f"{name}.onnx")), inputs, pytorchs["y"]


def test_cli_repairs_and_reports(tmp_path):
    path, inputs, expected = copied_export("index_put_acc_ts11", tmp_path)
    before = path.read_bytes()
    report = tmp_path / "r.json"
    result = invoke("repair", path, "--report", report)
    assert result.exit_code == 0, result.output
    assert "pytorch/pytorch#61034, #111159" in result.stdout and "repair's proof" in result.stdout
    assert "into zeros" not in result.stderr  # the repaired node is no longer warned about
    [outcome] = json.loads(report.read_text())["models"]
    assert outcome["validation"]["with_repeated_indices"]["original_differs"]
    assert outcome["validation"]["without_repeated_indices"]["tolerance"] == "exact (bit for bit)"
    repaired = ort_run(tmp_path / "index_put_acc_ts11.repaired.onnx", inputs)[0]
    np.testing.assert_allclose(repaired, expected, rtol=1e-5, atol=1e-5)
    assert path.read_bytes() == before


def test_only_the_repaired_nodes_lose_the_export_warning(tmp_path):
    path, _, _ = copied_export("index_put_acc_ts11", tmp_path)
    _, kept = sr.upgrade(str(path), output=tmp_path / "u.onnx", return_report=True)
    assert any("writes into zeros" in note for note in kept.notes)
    _, repaired = sr.repair(str(path), validate=True, return_report=True)
    assert not any("writes into zeros" in note for note in repaired.notes)
    shared = tmp_path / "shared.onnx"  # a lookalike repair leaves: still warned about
    model = accumulate_model("ScatterElements")
    model.graph.output.append(onnx.helper.make_tensor_value_info(
        model.graph.node[1].output[0], onnx.TensorProto.FLOAT, [4, 5]))
    onnx.save(model, shared)
    _, left = sr.repair(str(shared), return_report=True)
    assert not left.modified and any("writes into zeros" in note for note in left.notes)


def test_cli_leaves_a_lookalike_with_its_reason(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(accumulate_model(zeros="nonzero"), path)
    result = invoke("repair", path)
    assert result.exit_code == 0, result.output
    assert "left alone ScatterElements 'scatter_0'" in result.stdout
    assert "not all zeros" in result.stdout
    assert "nothing rewritten" in result.stdout


def test_api_on_every_model_kind(tmp_path):
    path, inputs, expected = copied_export("scatter_add_ts13", tmp_path)
    proto = onnx.load(path)
    repaired, outcome = sr.repair(proto, validate=True, return_report=True)
    assert isinstance(repaired, onnx.ModelProto)
    assert outcome.validation["with_repeated_indices"]["original_differs"]
    np.testing.assert_allclose(ort_run(repaired, inputs)[0], expected, rtol=1e-5, atol=1e-5)
    model = ir.serde.deserialize_model(proto)
    assert isinstance(sr.repair(model), ir.Model)
    assert [n.op_type for n in model.graph] == ["Constant", "ScatterElements", "Add"]  # not mutated
    written = sr.repair(str(path), validate=True)
    assert written.endswith("scatter_add_ts13.repaired.onnx")


def test_check_lists_what_repair_changes(tmp_path):
    path, _, _ = copied_export("gnn_sum_ts13", tmp_path)
    [finding] = check(ir.load(path), "opset-13")
    assert finding.fix == "scatter-rewrite repair" and not finding.blocked
    result = invoke("check", path, "--target", "opset-13", "--json")
    assert result.exit_code == 0, result.output
    assert f"fix: scatter-rewrite repair {path} (1 node(s))" in result.stderr


def test_check_does_not_offer_repair_for_a_lookalike(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(accumulate_model(zeros="nonzero", reduction=None), path)
    assert all(f.fix != "scatter-rewrite repair" for f in check(ir.load(path), "opset-18"))


@pytest.mark.parametrize("verb,options", [("upgrade", {}), ("fold", {}), ("lower", {"opset": 13}),
                                          ("to_scatternd", {}), ("prepare_for_tensorrt", {})])
def test_no_other_verb_changes_the_results(verb, options, tmp_path):
    path, inputs, expected = copied_export("index_add_ts13", tmp_path)
    proto = onnx.load(path)
    rewritten = getattr(sr, verb)(proto, **options)
    result = ort_run(rewritten, inputs)[0]
    np.testing.assert_array_equal(result, ort_run(proto, inputs)[0])  # the export's result
    assert not np.allclose(result, expected, rtol=1e-5, atol=1e-5)  # not PyTorch's


def repaired_on_users_inputs(path, inputs: dict, tmp_path) -> dict:
    """`repair MODEL --inputs X.npz --report R.json` succeeds; its proof where indices repeat."""
    np.savez(tmp_path / "inputs.npz", **inputs)
    report = tmp_path / "r.json"
    result = invoke("repair", path, "--inputs", tmp_path / "inputs.npz", "--report", report)
    assert result.exit_code == 0, result.output
    return json.loads(report.read_text())["models"][0]["validation"]["with_repeated_indices"]


def test_cli_proves_on_the_users_inputs_too(tmp_path):
    path, inputs, _ = copied_export("bev_pool_ts17", tmp_path)
    repeated = repaired_on_users_inputs(path, inputs, tmp_path)
    assert repeated["user_inputs"] and repeated["original_differs"] and repeated["draws"] == 0


def test_cli_rtol_atol_bound_the_proof_with_repeats(tmp_path):
    path, _, _ = copied_export("scatter_add_ts13", tmp_path)
    report = tmp_path / "r.json"
    result = invoke("repair", path, "--rtol", "1e-3", "--report", report)
    assert result.exit_code == 0, result.output
    validation = json.loads(report.read_text())["models"][0]["validation"]
    said = validation["with_repeated_indices"]["tolerance"]
    assert said == "float outputs within the given rtol=0.001, atol=0.0"


def test_the_repair_proof_follows_the_repair_pass_whichever_verb_runs_it(tmp_path):
    """A pipeline of one's own holding RepairPass is proven as repair is (its results are meant
    to change where indices repeat), and a verb named "repair" running other passes is held to
    equality."""
    from scatter_rewrite.passes import RepairPass, ToScatterNDPass

    path, inputs, expected = copied_export("scatter_add_ts13", tmp_path)
    proto = onnx.load(path)
    repaired, outcome = sr.rewrite(proto, [RepairPass()], validate=True, return_report=True)
    assert outcome.validation["with_repeated_indices"]["original_differs"]
    np.testing.assert_allclose(ort_run(repaired, inputs)[0], expected, rtol=1e-5, atol=1e-5)

    _, outcome = sr.rewrite(onnx.load(path), [ToScatterNDPass()], verb="repair", validate=True,
                            return_report=True)
    assert outcome.passes[0]["rewritten"]
    assert "with_repeated_indices" not in outcome.validation
    assert outcome.validation["checked_against"] == "onnxruntime on the original model"


def test_cli_assume_names_what_it_assumed(tmp_path):
    path, inputs, _ = copied_export("pyg_mean_self_dynamo18", tmp_path)
    np.savez(tmp_path / "inputs.npz", **inputs)
    report = tmp_path / "r.json"
    result = invoke("repair", path, "--inputs", tmp_path / "inputs.npz", "--report", report)
    assert result.exit_code == 0 and "UNCHANGED" in result.stdout  # only the name says mean
    [outcome] = json.loads(report.read_text())["models"]
    assert any("--assume scatter-reduce-mean" in note for note in outcome["notes"])
    result = invoke("repair", path, "--assume", "scatter-reduce-mean", "--inputs", tmp_path / "inputs.npz")
    assert result.exit_code == 0, result.output
    assert "assumed (asked: --assume scatter-reduce-mean)" in result.stdout
    result = invoke("repair", path, "--assume", "scatter-reduce-max")
    assert result.exit_code != 0 and "Traceback" not in result.output


def test_cli_proves_computed_indices_on_the_users_inputs(tmp_path):
    """A jagged bag sum's segment ids come from cumsum(lengths) and repeat: proven against what
    PyTorch computed on the user's inputs, which it then gives."""
    path, inputs, expected = copied_export("jagged_bag_sum_ts13", tmp_path)
    repeated = repaired_on_users_inputs(path, inputs, tmp_path)
    assert repeated["user_inputs"] and repeated["original_differs"]
    repaired = ort_run(tmp_path / "jagged_bag_sum_ts13.repaired.onnx", inputs)[0]
    np.testing.assert_allclose(repaired, expected, rtol=1e-5, atol=1e-5)
