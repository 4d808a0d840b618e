"""The CLI contract and the API boundary under adversarial use (an audit's regression tests).

Every failure here must be: exit 1 with exactly one line on stderr (no traceback), or exit 2 for
bad usage; nothing written, no staging or temporary file left, and the inputs' bytes unchanged.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import scatter_rewrite as sr
from tests.helpers.wrong_passes import NegateScatterOutputs
from scatter_rewrite.errors import ModelLoadError
from scatter_rewrite.pipeline import VERBS, Verb, rewrite_file_reporting
from scatter_rewrite.testing import constant_scatter_model, external_weights_model, scatter_model
from scatter_rewrite.verbs import upgrade_passes
from tests.helpers.cli import invoke, save, tree

# verb, the model it has work on, its options
VERB_CASES = {
    "upgrade": (lambda: scatter_model("Scatter", opset=13, where="if", axis=1), []),
    "fold": (lambda: constant_scatter_model(data=np.zeros((4, 5), np.float32), indices=np.array([[0, 1, 2, 3, 0]]),
                                            updates=np.ones((1, 5), np.float32), axis=0), []),
    "lower": (lambda: scatter_model("ScatterElements", opset=18, reduction="max"), ["--opset", "13"]),
    "tensorrt": (lambda: scatter_model("ScatterElements", opset=18, reduction="add"), ["--trt-version", "8.6"]),
}
SUFFIX = {"upgrade": "upgraded", "fold": "folded", "lower": "lowered", "tensorrt": "tensorrt"}


def assert_one_line_failure(result, *needles: str, code: int = 1) -> str:
    """One line on stderr, exit ``code``: 1 for a model that fails, 2 for bad usage."""
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scatter-rewrite: error:"), result.stderr
    assert "Traceback" not in result.output and "internal error" not in lines[0], lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# ---- --report -----------------------------------------------------------------------------------

@pytest.mark.parametrize("verb", list(VERB_CASES))
def test_report_onto_the_input_model_is_refused(tmp_path: Path, verb: str):
    make, options = VERB_CASES[verb]
    source = save(make(), tmp_path / "m.onnx")
    before = tree(tmp_path)
    result = invoke(verb, source, "--report", source, *options)
    assert_one_line_failure(result, "--report", "input model", code=2)
    assert tree(tmp_path) == before  # the model was overwritten by the JSON report before


def test_report_onto_the_output_is_refused(legacy: Path, tmp_path: Path):
    before = tree(tmp_path)
    out = tmp_path / "out.onnx"
    assert_one_line_failure(invoke("upgrade", legacy, "-o", out, "--report", out), "--report", "output", code=2)
    assert tree(tmp_path) == before


@pytest.mark.parametrize("where", ["folder", "under a file", "not a report"])
def test_report_that_cannot_be_written_fails_before_any_work(legacy: Path, tmp_path: Path, where: str):
    (tmp_path / "folder").mkdir()
    (tmp_path / "notes.txt").write_text("my notes\n")
    report = {"folder": tmp_path / "folder", "under a file": tmp_path / "notes.txt" / "r.json",
              "not a report": tmp_path / "notes.txt"}[where]
    before = tree(tmp_path)
    # a folder or another file there: bad usage; a folder one cannot write in: a failure
    code = 1 if where == "under a file" else 2
    assert_one_line_failure(invoke("upgrade", legacy, "--report", report), "--report", code=code)
    assert tree(tmp_path) == before  # no model, no .tmp file


def test_report_in_a_new_folder_and_an_earlier_report_are_written(legacy: Path, tmp_path: Path):
    report = tmp_path / "reports" / "r.json"
    assert invoke("upgrade", legacy, "--report", report).exit_code == 0
    assert json.loads(report.read_text())["models"][0]["status"] == "PASSED"
    result = invoke("upgrade", legacy, "--report", report, "-o", tmp_path / "again.onnx")
    assert result.exit_code == 0, result.output  # an earlier report is overwritten
    assert json.loads(report.read_text())["models"][0]["output"] == str(tmp_path / "again.onnx")


# ---- -o ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("verb", list(VERB_CASES))
def test_output_with_a_trailing_slash_is_a_folder(tmp_path: Path, verb: str):
    make, options = VERB_CASES[verb]
    source = save(make(), tmp_path / "m.onnx")
    result = invoke(verb, source, "-o", f"{tmp_path / 'out'}/", *options)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out").is_dir()  # was: a model file named "out"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [f"m.{SUFFIX[verb]}.onnx"]


def test_several_models_writing_the_same_output_are_refused(legacy: Path, tmp_path: Path):
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        shutil.copy(legacy, tmp_path / sub / "m.onnx")
    before = tree(tmp_path)
    for args in ([tmp_path / "a" / "m.onnx", tmp_path / "b" / "m.onnx"], [tmp_path / "a", tmp_path / "b"]):
        result = invoke("upgrade", *args, "-o", tmp_path / "out")
        assert_one_line_failure(result, "would both be written to", code=2)
        assert tree(tmp_path) == before  # one used to overwrite the other, both reported PASSED


def test_an_output_that_is_another_input_is_refused(legacy: Path, tmp_path: Path):
    other = tmp_path / "legacy.upgraded.onnx"
    shutil.copy(legacy, other)
    before = tree(tmp_path)
    assert_one_line_failure(invoke("upgrade", legacy, other), "is the input model", code=2)
    assert tree(tmp_path) == before  # legacy.upgraded.onnx, an input, was overwritten


def test_one_model_named_twice_is_rewritten_once_and_o_stays_a_folder(legacy: Path, tmp_path: Path):
    out = tmp_path / "out"
    result = invoke("upgrade", legacy, tmp_path / "." / "legacy.onnx", "-o", out)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["legacy.upgraded.onnx"]


def test_in_place_with_output_and_several_models_is_one_line(legacy: Path, tmp_path: Path):
    other = save(scatter_model("Scatter", opset=10), tmp_path / "other.onnx")
    before = tree(tmp_path)
    assert_one_line_failure(invoke("upgrade", legacy, other, "--in-place", "-o", tmp_path / "o"), "--in-place", code=2)
    assert tree(tmp_path) == before


@pytest.mark.parametrize("args", [["upgrade", ""], ["upgrade", "{m}", "-o", ""], ["upgrade", "{m}", "--report", ""],
                                  ["upgrade", "{m}", "--inputs", ""], ["check", ""]])
def test_an_empty_path_is_bad_usage(legacy: Path, tmp_path: Path, args: list[str], monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)  # Path("") is ".": an empty $MODEL rewrote every model below the folder
    before = tree(tmp_path)
    result = invoke(*[a.replace("{m}", str(legacy)) for a in args])
    assert result.exit_code == 2, result.output
    assert tree(tmp_path) == before


@pytest.mark.parametrize("output", ["file/out.onnx", "new/sub/out.onnx"])
def test_output_that_cannot_be_written_or_fails_validation_leaves_no_folder(
        legacy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str):
    (tmp_path / "file").write_text("a file where a folder is needed\n")
    monkeypatch.setitem(VERBS, "upgrade", Verb("upgrade", "upgraded",
                                               lambda opset=None: [*upgrade_passes(opset), NegateScatterOutputs()]))
    before = tree(tmp_path)
    assert_one_line_failure(invoke("upgrade", legacy, "-o", tmp_path / output))
    assert tree(tmp_path) == before  # new/ and new/sub/ were left behind


# ---- --inputs ---------------------------------------------------------------------------------

def _good_inputs() -> dict[str, np.ndarray]:
    return dict(data=np.zeros((4, 5), np.float32), indices=np.array([[0, 1, 2, 3, 0], [1, 2, 3, 0, 1]]),
                updates=np.ones((2, 5), np.float32))


@pytest.mark.parametrize("verb", ["upgrade", "lower", "tensorrt"])
@pytest.mark.parametrize("name,value,expected", [
    ("data", np.zeros((4, 5), np.float64), "'data' is float64 [4, 5]; the model declares float32 [4, 5]"),
    ("indices", np.array([[0, 1, 2, 3, 0], [1, 2, 3, 0, 1]], np.int32), "'indices' is int32"),
    ("data", np.zeros((3, 3), np.float32), "'data' is float32 [3, 3]"),
    ("data", np.zeros(20, np.float32), "'data' is float32 [20]"),
])
def test_inputs_of_the_wrong_dtype_or_shape_are_named(tmp_path: Path, verb: str, name: str, value, expected: str):
    make, options = VERB_CASES[verb]
    source = save(make(), tmp_path / "m.onnx")
    arrays = _good_inputs() | {name: value} | ({"cond": np.array(True)} if verb == "upgrade" else {})
    np.savez(tmp_path / "x.npz", **arrays)
    before = tree(tmp_path)
    # lower/tensorrt with int32 indices: "internal error (RuntimeTypeError ...)"; upgrade: PASSED on them
    assert_one_line_failure(invoke(verb, source, "--inputs", tmp_path / "x.npz", *options), "--inputs", expected)
    assert tree(tmp_path) == before


def test_inputs_with_an_index_out_of_range_say_it_is_the_inputs(legacy: Path, tmp_path: Path):
    arrays = _good_inputs() | {"indices": np.array([[0, 1, 2, 3, 9], [1, 2, 3, 0, 1]]), "cond": np.array(True)}
    np.savez(tmp_path / "x.npz", **arrays)
    before = tree(tmp_path)
    assert_one_line_failure(invoke("upgrade", legacy, "--inputs", tmp_path / "x.npz"), "--inputs", "index 9")
    assert tree(tmp_path) == before


def _run_cli(*args) -> subprocess.CompletedProcess:
    """The command in its own process: its warnings reach stderr through its own logging set-up
    (the batch's from its worker processes too)."""
    return subprocess.run([sys.executable, "-m", "scatter_rewrite", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def test_extra_inputs_are_ignored_with_a_warning_naming_them(legacy: Path, tmp_path: Path):
    np.savez(tmp_path / "x.npz", **_good_inputs(), cond=np.array(True), idx=np.zeros(3))
    result = _run_cli("upgrade", legacy, "--inputs", tmp_path / "x.npz", "--report", tmp_path / "r.json")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"scatter-rewrite: warning: {legacy}: --inputs has 1 entry that the model does not take as "
        "an input, ignored: idx"], result.stderr
    model = json.loads((tmp_path / "r.json").read_text())["models"][0]
    assert any("ignored: idx" in n for n in model["validation"]["notes"]), model
    assert model["notes"] == [
        "--inputs has 1 entry that the model does not take as an input, ignored: idx"]


def test_extra_inputs_are_named_for_each_model_of_a_batch(legacy: Path, tmp_path: Path):
    """The same --inputs for two models: each warning names what that model does not take (cond
    feeds the If of one of them only)."""
    plain = save(scatter_model("Scatter", opset=10), tmp_path / "plain.onnx")
    np.savez(tmp_path / "x.npz", **_good_inputs(), cond=np.array(True), idx=np.zeros(3))
    result = _run_cli("upgrade", legacy, plain, "--inputs", tmp_path / "x.npz", "-o",
                  tmp_path / "out", "-q")
    assert result.returncode == 0, result.stderr
    said = "that the model does not take as an input, ignored:"
    assert sorted(result.stderr.splitlines()) == [
        f"scatter-rewrite: warning: {legacy}: --inputs has 1 entry {said} idx",
        f"scatter-rewrite: warning: {plain}: --inputs has 2 entries {said} cond, idx"]


def test_a_command_says_its_flags_in_warnings_and_the_api_its_parameters_after_it(
        legacy: Path, tmp_path: Path, caplog):
    inputs = {**_good_inputs(), "cond": np.array(True), "idx": np.zeros(3)}
    np.savez(tmp_path / "x.npz", **inputs)
    with caplog.at_level(logging.WARNING, logger="scatter_rewrite"):
        assert invoke("upgrade", legacy, "--inputs", tmp_path / "x.npz", "-o",
                      tmp_path / "a.onnx").exit_code == 0
        said_by_the_command = [r.getMessage() for r in caplog.records]
        caplog.clear()
        sr.upgrade(str(legacy), inputs=inputs, output=str(tmp_path / "b.onnx"))
    ignored = "has 1 entry that the model does not take as an input, ignored: idx"
    assert said_by_the_command == [f"{legacy}: --inputs {ignored}"]
    assert [r.getMessage() for r in caplog.records] == [f"{legacy}: inputs= {ignored}"]


def test_inputs_and_a_tolerance_without_validation_are_a_warning_with_their_flags(
        legacy: Path, tmp_path: Path, caplog):
    np.savez(tmp_path / "x.npz", **_good_inputs(), cond=np.array(True))
    with caplog.at_level(logging.WARNING, logger="scatter_rewrite"):
        result = invoke("upgrade", legacy, "--no-validate", "--inputs", tmp_path / "x.npz",
                        "--rtol", "0.1")
    assert result.exit_code == 0, result.output
    assert [r.getMessage() for r in caplog.records] == [
        f"{legacy}: --inputs, --rtol are not used: --no-validate skips the validation they are "
        "for"]


@pytest.mark.parametrize("kind", ["npy", "truncated", "text", "missing"])
def test_inputs_that_are_not_an_npz_are_bad_usage_in_one_line(legacy: Path, tmp_path: Path, kind: str):
    target = tmp_path / "x.npz"
    if kind == "npy":
        np.save(tmp_path / "x.npy", np.zeros(3))
        os.replace(tmp_path / "x.npy", target)
    elif kind == "truncated":
        np.savez(target, **_good_inputs())
        target.write_bytes(target.read_bytes()[:100])
    elif kind == "text":
        target.write_text("data = [1, 2, 3]\n")
    before = tree(tmp_path)
    assert_one_line_failure(invoke("upgrade", legacy, "--inputs", target),
                            "cannot read it as a .npz archive", code=2)
    assert tree(tmp_path) == before


# ---- external data ----------------------------------------------------------------------------

def _break(folder: Path, how: str) -> None:
    data = folder / "big.weights"
    if how == "truncated":
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 3])
    elif how == "empty":
        data.write_bytes(b"")
    elif how == "a folder":
        data.unlink()
        data.mkdir()
    elif how == "hard-linked":
        os.link(data, folder / "copy.weights")
    elif how == "symlink out":
        (folder / "elsewhere").mkdir()
        os.replace(data, folder / "elsewhere" / "w.bin")
        (folder / "model").mkdir()
        os.replace(folder / "big.onnx", folder / "model" / "big.onnx")
        os.symlink("../elsewhere/w.bin", folder / "model" / "big.weights")
    elif how == "outside":
        model = onnx.load(folder / "big.onnx", load_external_data=False)
        for tensor in model.graph.initializer:
            for entry in tensor.external_data:
                if entry.key == "location":
                    entry.value = "../big.weights"
        (folder / "model").mkdir()
        onnx.save(model, folder / "model" / "big.onnx")
        (folder / "big.onnx").unlink()


@pytest.mark.parametrize("verb", list(VERB_CASES))
@pytest.mark.parametrize("how,needle", [("truncated", "truncated"), ("empty", "truncated"), ("a folder", "not a file"),
                                        ("hard-linked", "hard links"), ("symlink out", "symlink"),
                                        ("outside", "outside the model's folder")])
def test_broken_external_data_is_one_line(tmp_path: Path, verb: str, how: str, needle: str):
    external_weights_model(tmp_path, 16 * 1024, opset=10 if verb == "upgrade" else 13)
    _break(tmp_path, how)
    model = tmp_path / "model" / "big.onnx" if how in ("symlink out", "outside") else tmp_path / "big.onnx"
    before = tree(tmp_path)
    for extra in ([], ["--no-validate"], ["--in-place", "--no-validate"]):
        # was: "internal error (OSError: External data file ... is shorter than expected ...)" and the like
        assert_one_line_failure(invoke(verb, model, *extra, *VERB_CASES[verb][1]), needle)
        assert tree(tmp_path) == before
    assert_one_line_failure(invoke("check", model), needle)


def _big_inline_model(path: Path) -> Path:
    """A constant scatter on a 1.2 MiB inline weight: load_proto maps it from the model file itself."""
    return save(constant_scatter_model(data=np.zeros((1024, 300), np.float32), indices=np.array([[0, 1, 2, 3, 0]]),
                                       updates=np.ones((1, 5), np.float32), axis=0), path)


def _linked_model(tmp_path: Path, link: str) -> tuple[Path, Path]:
    """snapshot/model.onnx linked to blobs/abc, as a Hugging Face hub cache has it: (blob, model)."""
    (tmp_path / "blobs").mkdir()
    (tmp_path / "snapshot").mkdir()
    blob = _big_inline_model(tmp_path / "blobs" / "abc")
    model = tmp_path / "snapshot" / "model.onnx"
    if link == "hard link":
        os.link(blob, model)
    else:
        os.symlink("../blobs/abc", model)
    return blob, model


@pytest.mark.parametrize("link", ["symlink into another folder", "hard link"])
def test_a_linked_model_file_with_big_inline_weights_is_rewritten(tmp_path: Path, link: str):
    """A Hugging Face hub snapshot links model.onnx to ../../blobs/<hash>: the weights mapped from the
    model file itself tripped onnx_ir's external-data containment checks (an internal error)."""
    blob, model = _linked_model(tmp_path, link)
    before = tree(tmp_path / "blobs")
    result = invoke("fold", model)
    assert result.exit_code == 0, result.output
    folded = onnx.load(tmp_path / "snapshot" / "model.folded.onnx")
    assert not any(n.op_type.startswith("Scatter") for n in folded.graph.node)
    assert tree(tmp_path / "blobs") == before


@pytest.mark.parametrize("link", ["symlink into another folder", "hard link"])
def test_in_place_on_a_linked_model_replaces_the_link_not_what_it_links_to(tmp_path: Path, link: str):
    """As ``sed -i`` does: the path named becomes a regular file with the result; the file it linked
    to (a hub cache's blob, named by its content's hash) keeps its content."""
    blob, model = _linked_model(tmp_path, link)
    before = tree(tmp_path / "blobs")
    result = invoke("fold", model, "--in-place")
    assert result.exit_code == 0, result.output
    assert model.is_file() and not model.is_symlink() and os.stat(model).st_nlink == 1
    assert not any(n.op_type.startswith("Scatter") for n in onnx.load(model).graph.node)
    assert tree(tmp_path / "blobs") == before
    assert any(n.op_type == "ScatterElements" for n in onnx.load(blob).graph.node)
    assert sorted(p.name for p in (tmp_path / "snapshot").iterdir()) == ["model.onnx"]


# ---- internal errors stay one line ----------------------------------------------------------------

def test_check_internal_error_is_one_line(legacy: Path, monkeypatch: pytest.MonkeyPatch):
    import scatter_rewrite.readiness as check_module

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(check_module, "check", broken)
    result = invoke("check", legacy)
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "internal error (RuntimeError: boom)" in lines[0] and "Traceback" not in result.output


def test_a_worker_internal_error_is_an_outcome_not_a_lost_run(legacy: Path, monkeypatch: pytest.MonkeyPatch):
    def broken(**options):
        raise RuntimeError("boom")

    monkeypatch.setitem(VERBS, "upgrade", Verb("upgrade", "upgraded", broken))
    outcome = rewrite_file_reporting("upgrade", str(legacy), {"options": {}, "validate": False})
    assert outcome.status == "FAILED" and "internal error (RuntimeError: boom)" in outcome.error


# ---- the API ----------------------------------------------------------------------------------

def test_api_str_path_returns_a_str_and_a_path_a_path(legacy: Path):
    out = sr.upgrade(str(legacy))
    assert isinstance(out, str) and out == str(legacy.with_name("legacy.upgraded.onnx"))
    assert isinstance(sr.upgrade(legacy, output=legacy.with_name("b.onnx")), Path)


@pytest.mark.parametrize("verb", ["upgrade", "fold", "lower", "prepare_for_tensorrt"])
def test_api_ir_model_with_external_data_validates(tmp_path: Path, verb: str):
    """ir.load keeps external weights on disk: validation saved both models to a temporary folder
    without them and failed ('should be stored in .../big.weights, but it is not regular file')."""
    path = external_weights_model(tmp_path, 16 * 1024, opset=10)
    before = tree(tmp_path)
    model = ir.load(path)
    kwargs = {"lower": {"opset": 13}, "prepare_for_tensorrt": {"trt_version": "8.6"}}.get(verb, {})
    out, outcome = getattr(sr, verb)(model, validate=True, return_report=True, **kwargs)
    assert isinstance(out, ir.Model) and outcome.status == "PASSED"
    assert any(p["rewritten"] for p in outcome.passes)
    assert "onnx" in outcome.validation["checked_against"]  # run, not skipped
    assert tree(tmp_path) == before


def test_api_proto_with_unreachable_external_data_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = external_weights_model(tmp_path / "model", 16 * 1024, opset=10)
    proto = onnx.load(path, load_external_data=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelLoadError, match="not found from the current folder"):
        sr.upgrade(proto, validate=True)
    monkeypatch.chdir(tmp_path / "model")  # relative to the current folder, it is found
    out = sr.upgrade(proto, validate=True)
    assert isinstance(out, onnx.ModelProto)


@pytest.mark.parametrize("verb,kwargs,scatter", [
    ("upgrade", {}, "Scatter"), ("lower", {"opset": 13}, "ScatterElements"),
    ("to_scatternd", {}, "ScatterElements"), ("prepare_for_tensorrt", {"trt_version": "8.6"}, "ScatterElements"),
])
def test_api_graphsurgeon_graph_with_a_scatter_inside_an_if(verb: str, kwargs: dict, scatter: str):
    import onnx_graphsurgeon as gs

    opset = 10 if scatter == "Scatter" else 18
    attrs = {"axis": 1} if scatter == "Scatter" else {"reduction": "add"} if verb != "to_scatternd" else {}
    graph = gs.import_onnx(scatter_model(scatter, opset=opset, where="if", **attrs))
    before = gs.export_onnx(graph).SerializeToString()
    out = getattr(sr, verb)(graph, validate=True, **kwargs)
    assert isinstance(out, gs.Graph) and out is not graph
    assert gs.export_onnx(graph).SerializeToString() == before  # the input graph is not mutated
    (if_node,) = [n for n in out.nodes if n.op == "If"]
    inner = [node for branch in ("then_branch", "else_branch") for node in if_node.attrs[branch].nodes]
    if verb in ("upgrade", "to_scatternd"):  # the op itself is gone from both branches
        assert scatter not in [n.op for n in inner] and len(inner) >= 2
    else:  # no reduction left in either branch
        assert not [n for n in inner if n.attrs.get("reduction", "none") != "none"]
        assert len(inner) > 2
    onnx.checker.check_model(gs.export_onnx(out), full_check=True)


def test_report_onto_the_outputs_data_file_is_refused(tmp_path: Path):
    source = external_weights_model(tmp_path / "model", 16 * 1024, opset=10)
    out = tmp_path / "out.onnx"
    before = tree(tmp_path)
    assert_one_line_failure(invoke("upgrade", source, "-o", out, "--report", f"{out}.data"), "external data file", code=2)
    assert tree(tmp_path) == before


def test_checker_failure_of_a_symlinked_input_is_not_blamed_on_the_rewrite(tmp_path: Path):
    """fold leaves a deprecated Scatter at opset 13 alone: the input fails onnx.checker the same way. With
    the model file a symlink into another folder and a big inline weight, the input's check used to fail
    differently (its weights referenced through the link's name), so the rewrite was blamed."""
    import onnx.helper as oh
    from onnx import TensorProto

    weight = oh.make_tensor("W", TensorProto.FLOAT, [1024, 300], np.zeros(1024 * 300, np.float32).tobytes(), raw=True)
    nodes = [oh.make_node("Gather", ["W", "k"], ["row"], axis=0), oh.make_node("Scatter", ["x", "i", "u"], ["y"], axis=1)]
    vi = oh.make_tensor_value_info
    graph = oh.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [1, 300]), vi("i", TensorProto.INT64, [1, 2]),
                                       vi("u", TensorProto.FLOAT, [1, 2])],
                          [vi("y", TensorProto.FLOAT, [1, 300]), vi("row", TensorProto.FLOAT, [1, 300])],
                          [weight, oh.make_tensor("k", TensorProto.INT64, [1], [0])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    model.ir_version = 8
    (tmp_path / "blobs").mkdir()
    (tmp_path / "snapshot").mkdir()
    save(model, tmp_path / "blobs" / "abc")
    os.symlink("../blobs/abc", tmp_path / "snapshot" / "model.onnx")
    before = tree(tmp_path)
    assert_one_line_failure(invoke("fold", tmp_path / "snapshot" / "model.onnx"), "fails onnx.checker before any rewrite")
    assert tree(tmp_path) == before


def _sparse_constant_model() -> onnx.ModelProto:
    sparse = onnx.helper.make_sparse_tensor(onnx.helper.make_tensor("v", onnx.TensorProto.FLOAT, [2], [1.0, 2.0]),
                                            onnx.helper.make_tensor("i", onnx.TensorProto.INT64, [2], [0, 3]), [4])
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Constant", [], ["c"], sparse_value=sparse), onnx.helper.make_node("Add", ["x", "c"], ["y"])],
        "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])])
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)])


def test_a_sparse_constant_is_one_clear_line_in_the_cli_and_a_scatter_rewrite_error_in_the_api(tmp_path):
    """onnx_ir cannot read sparse tensors: the message says so (it was 'Error calling _deserialize_graph
    with: g' in the CLI, and a raw onnx_ir SerdeError from the API)."""
    from scatter_rewrite.errors import ModelLoadError

    path = tmp_path / "sparse.onnx"
    onnx.save(_sparse_constant_model(), path)
    assert_one_line_failure(invoke("fold", path), "holds a sparse tensor")
    with pytest.raises(ModelLoadError, match="holds a sparse tensor"):
        sr.fold(_sparse_constant_model())


def test_an_internal_error_names_the_node_it_was_working_on(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch):
    """A bug of ours in a pass, on the user's scatter: the one line names that node."""
    from tests.helpers.models import accumulate_model

    import scatter_rewrite.passes.repair as repair_module

    def broken(self, node, *args):
        raise RuntimeError("boom")

    monkeypatch.setattr(repair_module.RepairPass, "_repair", broken)
    onnx.save(accumulate_model(), tmp_path / "acc.onnx")
    result = invoke("repair", tmp_path / "acc.onnx")
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert lines == ["scatter-rewrite: error: internal error at ScatterElements 'scatter_0' "
                     "(RuntimeError: boom); rerun with -v and report it"]
