"""repair_proof: the repaired model equals the original bit for bit where no index repeats, and the
evaluator's computation of the intended accumulation where indices repeat; a wrong repair fails."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx_ir as ir
import pytest
from test_exporter_patterns import accumulate_model

from scatter_rewrite.errors import ValidationError
from scatter_rewrite.model_io import save_model
from scatter_rewrite.passes.repair import RepairPass, find_sites
from scatter_rewrite.repair_proof import prove_repair

DATA = Path(__file__).parent / "data" / "torch_repair"


def repair_to(source: Path, destination: Path, reduction: str = "add") -> Path:
    model = ir.load(source)
    if reduction == "add":
        assert RepairPass()(model).modified
    else:  # a wrong repair: the chain's scatter reducing with another reduction
        for site in find_sites(model)[0]:
            site.scatter.attributes["reduction"] = ir.AttrString("reduction", reduction)
    return save_model(model, destination)


@pytest.mark.parametrize("name", ["scatter_add_ts9", "index_put_acc_ts11", "gnn_sum_ts13",
                                  "bev_pool_ts17"])
def test_committed_exports_are_proven(name, tmp_path):
    source = DATA / f"{name}.onnx"
    proof = prove_repair(source, repair_to(source, tmp_path / "repaired.onnx"))
    assert proof["with_repeated_indices"]["original_differs"]  # the inputs did repeat an index
    assert proof["with_repeated_indices"]["max_abs_diff"] <= 1e-5


@pytest.mark.parametrize("op,opset", [("ScatterElements", 18), ("ScatterND", 13)])
def test_without_repeats_the_repair_is_bit_exact(op, opset, tmp_path):
    model = accumulate_model(op)  # 3 updates into 4 rows: unique indices exist
    model.opset_import[0].version = opset
    onnx.save(model, tmp_path / "original.onnx")
    repaired = repair_to(tmp_path / "original.onnx", tmp_path / "r.onnx")
    proof = prove_repair(tmp_path / "original.onnx", repaired)
    assert proof["without_repeated_indices"]["tolerance"] == "exact (bit for bit)"
    assert proof["without_repeated_indices"]["max_abs_diff"] == 0.0


@pytest.mark.parametrize("reduction,fails", [
    ("mul", "not bit-exact"),  # differs where no index repeats
    ("max", "not bit-exact"),
    ("none", "does not compute the intended accumulation"),  # the export itself
])
def test_a_wrong_repair_fails_the_proof(reduction, fails, tmp_path):
    model = accumulate_model("ScatterElements")
    onnx.save(model, tmp_path / "original.onnx")
    wrong = repair_to(tmp_path / "original.onnx", tmp_path / "wrong.onnx", reduction)
    with pytest.raises(ValidationError, match=fails):
        prove_repair(tmp_path / "original.onnx", wrong)
