"""The CLI contract shared by every rewriting verb, exercised through `upgrade`."""

from __future__ import annotations

import hashlib
import json
import stat

import numpy as np
import onnx
import pytest

from scatter_rewrite.errors import InvalidModelError
from scatter_rewrite.testing import scatter_model
from tests.helpers.cli import invoke

def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_upgrade_writes_beside_the_input(legacy):
    before = digest(legacy)
    result = invoke("upgrade", legacy)
    assert result.exit_code == 0, result.output
    out = legacy.with_name("legacy.upgraded.onnx")
    onnx.checker.check_model(str(out), full_check=True)
    assert digest(legacy) == before
    assert "upgrade: 2 rewritten, 0 left alone" in result.stdout
    assert "validation: onnx.reference" in result.stdout  # ORT cannot run the invalid original
    assert result.stdout.strip().splitlines()[-1].startswith("PASSED")


def test_output_report_and_inputs(legacy, tmp_path):
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, data=np.zeros((4, 5), np.float32), indices=np.array([[0, 1, 2, 3, 0], [1, 2, 3, 0, 1]]),
             updates=np.ones((2, 5), np.float32), cond=np.array(True))
    out, report = tmp_path / "out" / "model.onnx", tmp_path / "report.json"
    result = invoke("upgrade", legacy, "-o", out, "--report", report, "--inputs", inputs, "--opset", "16")
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    (entry,) = data["models"]
    assert data["verb"] == "upgrade" and entry["status"] == "PASSED" and entry["output"] == str(out)
    assert len(entry["passes"][0]["rewritten"]) == 2
    assert entry["validation"]["notes"] == ["user inputs"]
    assert {o.version for o in onnx.load(out).opset_import if o.domain == ""} == {16}


def test_inputs_missing_a_name_is_an_error(legacy, tmp_path):
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, data=np.zeros((4, 5), np.float32))
    result = invoke("upgrade", legacy, "--inputs", inputs)
    assert result.exit_code == 1
    assert "lacks the model input(s) indices, updates, cond" in result.stderr
    assert not legacy.with_name("legacy.upgraded.onnx").exists()


def test_no_validate_says_written_never_passed(legacy):
    result = invoke("upgrade", legacy, "--no-validate")
    assert result.exit_code == 0 and "validation: skipped" in result.stdout
    assert result.stdout.splitlines()[-1].startswith("WRITTEN in ")
    assert "PASSED" not in result.stdout


def test_in_place(legacy):
    result = invoke("upgrade", legacy, "--in-place")
    assert result.exit_code == 0, result.output
    assert [n.op_type for n in onnx.load(legacy).graph.node] == ["If"]
    assert not list(legacy.parent.glob(".scatter-rewrite-*"))  # no staging left behind


def test_an_earlier_report_is_replaced_keeping_its_mode(legacy):
    report = legacy.with_name("report.json")
    report.write_text("{}")
    report.chmod(0o600)
    assert invoke("upgrade", legacy, "--report", report).exit_code == 0
    assert json.loads(report.read_text())["verb"] == "upgrade"
    assert stat.S_IMODE(report.stat().st_mode) == 0o600


def test_output_equal_to_input_needs_in_place(legacy):
    result = invoke("upgrade", legacy, "-o", legacy)
    assert result.exit_code == 2
    assert result.stderr == (f"scatter-rewrite: error: {legacy} is the input model: write the "
                             "output elsewhere (-o), or replace the input (--in-place)\n")


def test_second_run_changes_nothing(legacy):
    first = legacy.with_name("legacy.upgraded.onnx")
    assert invoke("upgrade", legacy).exit_code == 0
    result = invoke("upgrade", first, "-o", legacy.with_name("again.onnx"))
    assert result.exit_code == 0
    assert "0 rewritten" in result.stdout and "nothing rewritten" in result.stdout
    assert result.stdout.rstrip().splitlines()[-1].startswith("UNCHANGED in ")


# ---- bad input: one line on stderr, exit 1, nothing written, input untouched ----------------

def _bad_files(tmp_path):
    good = scatter_model("Scatter", opset=10).SerializeToString()
    files = {
        "empty": b"",
        "not onnx": b"this is not a model\n" * 10,
        "truncated": good[: len(good) // 2],
    }
    paths = {}
    for name, content in files.items():
        p = tmp_path / f"{name.replace(' ', '_')}.onnx"
        p.write_bytes(content)
        paths[name] = p
    bad_axis = tmp_path / "bad_axis.onnx"
    onnx.save(scatter_model("Scatter", opset=10, axis=5), bad_axis)
    paths["invalid model"] = bad_axis
    return paths


@pytest.mark.parametrize("kind,message", [
    ("empty", "the file is empty"),
    ("not onnx", "not a readable ONNX model"),
    ("truncated", "ONNX model"),
    ("invalid model", "axis=5 is out of range for rank 2"),
])
def test_bad_model_files(tmp_path, kind, message):
    path = _bad_files(tmp_path)[kind]
    before = digest(path)
    result = invoke("upgrade", path)
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scatter-rewrite: error:"), result.stderr
    assert message in lines[0]
    assert "Traceback" not in result.output
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in _bad_files(tmp_path).values())


@pytest.mark.parametrize("kind,status", [("empty", "UNREADABLE"), ("not onnx", "UNREADABLE"),
                                         ("truncated", "UNREADABLE"), ("invalid model", "FAILED")])
def test_the_report_of_a_bad_model_file_says_whether_it_could_be_read(tmp_path, kind, status):
    path = _bad_files(tmp_path)[kind]
    result = invoke("upgrade", path, "--report", tmp_path / "r.json")
    assert result.exit_code == 1, result.output
    (model,) = json.loads((tmp_path / "r.json").read_text())["models"]
    assert model["status"] == status and model["output"] is None
    assert model["error"] in result.stderr


def test_a_batch_summary_counts_the_models_by_status(tmp_path):
    """One model of each status a batch may end in but UNRUNNABLE: the summary counts each, and
    each model's own last line says its status."""
    files = _bad_files(tmp_path)
    legacy = tmp_path / "legacy.onnx"
    onnx.save(scatter_model("Scatter", opset=10), legacy)
    ready = tmp_path / "ready.onnx"
    onnx.save(scatter_model("ScatterElements", opset=16, reduction="add"), ready)
    missing = tmp_path / "missing.onnx"
    models = [legacy, ready, files["invalid model"], files["empty"], missing]
    result = invoke("upgrade", *models, "--no-validate", "-o", tmp_path / "out", "--report",
                    tmp_path / "r.json")
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines()[-1] == (
        f"5 models: 1 WRITTEN, 1 UNCHANGED, 1 FAILED, 2 UNREADABLE (unchanged: nothing to rewrite "
        f"in {ready})")
    statuses = ["WRITTEN", "UNCHANGED", "FAILED", "UNREADABLE", "UNREADABLE"]
    report = json.loads((tmp_path / "r.json").read_text())["models"]
    assert [(m["input"], m["status"]) for m in report] == list(zip(map(str, models), statuses))
    last_lines = [line.split(" in ")[0] for line in result.stdout.splitlines()
                  if line.split(" ")[0] in statuses]
    assert last_lines == statuses
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "legacy.upgraded.onnx", "ready.upgraded.onnx"]


def test_a_folder_without_models_is_an_unreadable_entry_of_a_batch_and_alone_refused(tmp_path,
                                                                                     legacy):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = invoke("upgrade", empty, legacy, "-o", tmp_path / "out", "--report",
                    tmp_path / "r.json")
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines()[-1] == "2 models: 1 PASSED, 1 UNREADABLE"
    assert result.stderr == f"scatter-rewrite: error: {empty}: the folder holds no .onnx model\n"
    report = json.loads((tmp_path / "r.json").read_text())["models"]
    assert [(m["input"], m["status"]) for m in report] == [(str(legacy), "PASSED"),
                                                           (str(empty), "UNREADABLE")]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["legacy.upgraded.onnx"]
    alone = invoke("upgrade", empty, "-o", tmp_path / "alone")
    assert alone.exit_code == 1 and alone.stdout == ""
    assert alone.stderr == f"scatter-rewrite: error: {empty}: the folder holds no .onnx model\n"
    assert not (tmp_path / "alone").exists()


def test_o_creates_the_folders_it_names_and_a_failed_run_leaves_none(tmp_path, legacy):
    deep = tmp_path / "new" / "deeper" / "x.onnx"
    assert invoke("upgrade", legacy, "-o", deep).exit_code == 0
    onnx.checker.check_model(str(deep), full_check=True)
    several = tmp_path / "batch" / "out"
    other = tmp_path / "other.onnx"
    onnx.save(scatter_model("Scatter", opset=10), other)
    assert invoke("upgrade", legacy, other, "-o", f"{several}/").exit_code == 0
    assert sorted(p.name for p in several.iterdir()) == ["legacy.upgraded.onnx",
                                                         "other.upgraded.onnx"]
    refused = _bad_files(tmp_path)["invalid model"]
    assert invoke("upgrade", refused, "-o", tmp_path / "none" / "x.onnx").exit_code == 1
    assert not (tmp_path / "none").exists()


def test_missing_file(tmp_path):
    result = invoke("upgrade", tmp_path / "nope.onnx")
    assert result.exit_code == 1 and "no such file" in result.stderr and "Traceback" not in result.output


def test_verbose_shows_the_traceback(tmp_path):
    result = invoke("upgrade", tmp_path / "nope.onnx", "-v")
    assert result.exit_code == 1 and "Traceback" in result.stderr


def test_bad_option_value_is_bad_usage(legacy):
    result = invoke("upgrade", legacy, "--opset", "7")
    assert result.exit_code == 2 and "--opset 7 is out of range" in result.stderr
    assert not legacy.with_name("legacy.upgraded.onnx").exists()


def test_bad_usage_exits_2(legacy):
    assert invoke("upgrade").exit_code == 2
    assert invoke("upgrade", legacy, "--opset", "eleven").exit_code == 2
    assert invoke("frobnicate", legacy).exit_code == 2


# ---- several models at once -----------------------------------------------------------------

def test_folder_in_parallel_one_failure_does_not_stop_the_others(tmp_path):
    src, out = tmp_path / "models", tmp_path / "out"
    src.mkdir()
    for opset in (9, 10, 13):
        onnx.save(scatter_model("Scatter", opset=opset, where="function"), src / f"m{opset}.onnx")
    (src / "broken.onnx").write_bytes(b"")
    result = invoke("upgrade", src, "-o", out)
    assert result.exit_code == 1
    assert result.stdout.splitlines()[-1] == "4 models: 3 PASSED, 1 UNREADABLE"
    assert sorted(p.name for p in out.iterdir()) == ["m10.upgraded.onnx", "m13.upgraded.onnx", "m9.upgraded.onnx"]
    assert "broken.onnx" in result.stderr and "empty" in result.stderr
    for p in out.iterdir():
        onnx.checker.check_model(str(p), full_check=True)


def test_several_files_all_pass(tmp_path):
    paths = []
    for opset in (10, 11):
        p = tmp_path / f"m{opset}.onnx"
        onnx.save(scatter_model("Scatter", opset=opset), p)
        paths.append(p)
    result = invoke("upgrade", *paths)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == "2 models: 2 PASSED"
    assert all(p.with_name(p.stem + ".upgraded.onnx").exists() for p in paths)


def test_checker_failure_the_input_already_has_is_not_blamed_on_the_rewrite(legacy):
    """fold leaves a non-constant deprecated Scatter at opset 13 as it is: the model fails the checker
    as the input did, and the message says so and names the verb that fixes it."""
    before = digest(legacy)
    result = invoke("fold", legacy)
    assert result.exit_code == 1
    assert "fails onnx.checker before any rewrite" in result.output
    assert "scatter-rewrite upgrade" in result.output
    assert sorted(p.name for p in legacy.parent.iterdir()) == ["legacy.onnx"]
    assert digest(legacy) == before


def test_an_input_failing_the_checker_otherwise_than_its_rewrite_is_named_first(tmp_path, monkeypatch):
    """The same fault may read differently once nodes moved: the message says the input already
    fails onnx.checker, not that the rewrite broke it."""
    from scatter_rewrite import checking

    source, rewritten = tmp_path / "in.onnx", tmp_path / "out.onnx"
    monkeypatch.setattr(checking, "checker_failure",
                        lambda path: "Incompatible dimensions" if path.name == "in.onnx" else "(4) vs (40)")
    with pytest.raises(InvalidModelError, match=r"in\.onnx fails onnx\.checker before any rewrite "
                                                r"\(Incompatible dimensions\), and so does the rewritten model: \(4\) vs \(40\)"):
        checking.check_model(rewritten, source)
    monkeypatch.setattr(checking, "checker_failure",
                        lambda path: None if path.name == "in.onnx" else "(4) vs (40)")
    with pytest.raises(InvalidModelError, match=r"^the rewritten model fails onnx\.checker: \(4\) vs \(40\)$"):
        checking.check_model(rewritten, source)


def test_tensorrt_refuses_a_scatter_it_cannot_make_ready_and_lists_only_the_models_float_tolerance(tmp_path):
    """A dynamic-count reduction on 8.6 cannot be lowered (TensorRT would ignore the reduction): exit 1,
    one line on stderr, nothing written; with the count fixed it passes, within float32's tolerance."""
    source, out = tmp_path / "m.onnx", tmp_path / "m.trt.onnx"
    onnx.save(scatter_model("ScatterElements", opset=18, data_shape=(8, 4), indices_shape=("E", 4),
                            reduction="add", axis=0), source)
    result = invoke("tensorrt", source, "--trt-version", "8.6", "-o", out)
    assert result.exit_code == 1 and not out.exists(), result.output
    assert result.stderr.count("\n") == 1 and "number of updates is not static" in result.stderr
    fixed = invoke("tensorrt", source, "--trt-version", "8.6", "--fix-dim", "E=5", "-o", out)
    assert fixed.exit_code == 0 and out.exists(), fixed.output
    assert "float32: rtol=1e-05" in fixed.stdout and "float16" not in fixed.stdout
    ready = invoke("tensorrt", source, "--trt-version", "10", "-o", tmp_path / "m10.onnx")
    assert ready.exit_code == 0 and ready.stderr == "", ready.stderr


def test_a_declared_shape_conflict_the_rewrite_exposes_gets_a_hint(tmp_path, monkeypatch):
    from scatter_rewrite import checking

    failure = ("[ShapeInferenceError] Inference error(s): (op_type:Loop): [ShapeInferenceError] Inferred shape "
               "and existing shape differ in dimension 2: (5) vs (4)")
    monkeypatch.setattr(checking, "checker_failure",
                        lambda path: None if path.name == "in.onnx" else failure)
    with pytest.raises(InvalidModelError, match=r"differ in dimension 2: \(5\) vs \(4\); a shape the model declares"):
        checking.check_model(tmp_path / "out.onnx", tmp_path / "in.onnx")


def test_the_python_api_names_the_model_given_not_its_temporary_copy():
    """A checker failure the input already had, through the API: the message names the model the
    caller gave, not the temporary file validation saved it to."""
    from onnx import TensorProto, helper, numpy_helper

    import scatter_rewrite as sr

    nodes = [
        helper.make_node("Scatter", ["x", "i", "u"], ["y"], axis=0),  # deprecated at 13: fails the checker
        helper.make_node("ScatterElements", ["c", "ci", "cu"], ["z"]),  # constant: folded
    ]
    inits = [numpy_helper.from_array(np.zeros(4, np.float32), "c"),
             numpy_helper.from_array(np.array([1], np.int64), "ci"),
             numpy_helper.from_array(np.ones(1, np.float32), "cu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
                                           helper.make_tensor_value_info("i", TensorProto.INT64, [1]),
                                           helper.make_tensor_value_info("u", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(sr.ScatterRewriteError) as e:
        sr.fold(model, validate=True)
    assert str(e.value).startswith("the model given fails onnx.checker before any rewrite"), str(e.value)
    assert "scatter-rewrite" not in str(e.value) and "scatter_rewrite.upgrade(model)" in str(e.value)
