"""The TorchScript exporter's accumulating scatters: zeros -> Scatter/ScatterElements/ScatterND
(no reduction) -> Add, which counts a repeated index once where PyTorch sums
(docs/pytorch-exporters.md). No rewrite can see the model is wrong, so
``check`` notes it on the node and warns, and every rewriting verb warns, exit codes unchanged.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import onnx_ir as ir
import pytest

from scatter_rewrite.readiness import check
from scatter_rewrite.export_patterns import ACCUMULATE_NOTE_START, accumulate_export_notes
from tests.helpers.models import accumulate_model
from tests.helpers.cli import invoke

DATA = Path(__file__).parent / "data"


def notes_of(model: onnx.ModelProto) -> list[str]:
    return accumulate_export_notes(ir.serde.deserialize_model(model))


@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND", "Scatter"])
@pytest.mark.parametrize("zeros", ["constant", "constant_of_shape", "cast", "initializer"])
def test_zeros_scatter_add_is_noted(op, zeros):
    notes = notes_of(accumulate_model(op, zeros=zeros))
    assert len(notes) == 1
    assert notes[0].startswith(f"{op} 'scatter_0'") and ACCUMULATE_NOTE_START in notes[0]
    assert "'accumulate_0'" in notes[0] and "dynamo=True" in notes[0]


@pytest.mark.parametrize("where", ["if", "function"])
def test_noted_in_subgraphs_and_functions(where):
    notes = notes_of(accumulate_model(where=where))
    assert len(notes) == (2 if where == "if" else 1)
    assert all(ACCUMULATE_NOTE_START in n for n in notes)
    assert all(("branch" in n) if where == "if" else ("function" in n) for n in notes), notes


@pytest.mark.parametrize("change", [dict(zeros="nonzero"), dict(zeros="input_initializer"), dict(consumer="Mul"),
                                    dict(reduction="add"), dict(reduction="none", zeros="nonzero")])
def test_other_scatters_are_not_noted(change):
    assert notes_of(accumulate_model(**change)) == []


def test_explicit_none_is_the_same_pattern():
    assert len(notes_of(accumulate_model(reduction="none"))) == 1


def test_check_notes_without_blocking(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(accumulate_model(), path)
    [finding] = check(ir.load(path), "opset-18")
    assert not finding.blocked and any(ACCUMULATE_NOTE_START in n for n in finding.notes)
    result = invoke("check", path, "--target", "opset-18", "--json")
    assert result.exit_code == 0, result.output
    (report,) = json.loads(result.stdout)["models"]  # stdout stays JSON alone; the warning is on stderr
    assert any(ACCUMULATE_NOTE_START in n for n in report["findings"][0]["notes"])
    assert result.stderr.startswith("scatter-rewrite: warning: 1 scatter node(s) write into zeros")


@pytest.mark.parametrize("verb", ["upgrade", "fold", "lower", "tensorrt"])
def test_every_verb_reports_it(tmp_path, verb):
    path = tmp_path / "m.onnx"
    onnx.save(accumulate_model("ScatterND"), path)
    report = tmp_path / "r.json"
    result = invoke(verb, path, "--report", report)
    assert result.exit_code == 0, result.output
    [model] = json.loads(report.read_text())["models"]
    [note] = [n for n in model["notes"] if ACCUMULATE_NOTE_START in n]
    assert note.startswith("ScatterND 'scatter_0'")


def test_the_warning_is_one_stderr_line(tmp_path):
    """A real process: the warning reaches stderr through the CLI's own logging set-up, in the
    form of every other line the tool prints there."""
    path = tmp_path / "m.onnx"
    onnx.save(accumulate_model(), path)
    result = subprocess.run([sys.executable, "-m", "scatter_rewrite.cli", "lower", str(path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"scatter-rewrite: warning: {path}: ScatterElements 'scatter_0' (opset 18, main graph) "
                           f"{ACCUMULATE_NOTE_START}")
    assert "PASSED" in result.stdout


def test_clean_model_has_no_warning(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(accumulate_model(reduction="add"), path)
    result = invoke("lower", path, "--opset", "13")
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr


def test_committed_exports_flag_only_the_torchscript_accumulate_forms():
    """The committed exports (tests/data/torch*/): TorchScript at opset 16 and dynamo at 18 give
    ScatterElements/ScatterND with a reduction for scatter_add, index_add and index_put_: none is
    noted; nor is plain scatter or index_put_ without accumulate (not added to). Every export in
    torch_repair/ (the accumulate forms ``repair`` fixes) is noted once per accumulation."""
    paths = sorted(p for p in DATA.glob("torch*/*.onnx") if p.parent.name != "torch_repair")
    assert len(paths) >= 10
    for path in paths:
        assert notes_of(onnx.load(path)) == [], path.name
    chains = {"voxel_centroid": 2, "sparse_conv": 3, "qwen2_moe_block": 8, "olmoe_block": 8}
    for path in sorted(DATA.glob("torch_repair/*_ts*.onnx")):  # (a chain per accumulation)
        expected = next((n for k, n in chains.items() if path.name.startswith(k)), 1)
        assert len(notes_of(onnx.load(path))) == expected, path.name


def test_real_torchscript_exports_are_noted(tmp_path):
    torch = pytest.importorskip("torch")

    class ScatterAdd(torch.nn.Module):
        def forward(self, x, idx, src):
            return x.scatter_add(1, idx, src)

    class IndexAdd(torch.nn.Module):
        def forward(self, x, idx, src):
            return x.index_add(0, idx, src)

    class IndexPutAccumulate(torch.nn.Module):
        def forward(self, x, idx, src):
            y = x.clone()
            y.index_put_((idx,), src, accumulate=True)
            return y

    x = torch.randn(10, 4)
    cases = [(ScatterAdd(), (x, torch.randint(0, 4, (10, 3)), torch.randn(10, 3)), 13),
             (ScatterAdd(), (x, torch.randint(0, 4, (10, 3)), torch.randn(10, 3)), 9),
             (IndexAdd(), (x, torch.randint(0, 10, (6,)), torch.randn(6, 4)), 13),
             (IndexPutAccumulate(), (x, torch.randint(0, 10, (6,)), torch.randn(6, 4)), 13)]
    for i, (module, args, opset) in enumerate(cases):
        path = tmp_path / f"{i}.onnx"
        torch.onnx.export(module, args, str(path), opset_version=opset, dynamo=False)
        assert len(notes_of(onnx.load(path))) == 1, (type(module).__name__, opset)
    path = tmp_path / "scatter_add_16.onnx"
    torch.onnx.export(ScatterAdd(), cases[0][1], str(path), opset_version=16, dynamo=False)
    assert notes_of(onnx.load(path)) == []  # ScatterElements(reduction="add"): right
