"""How rewritten models are saved: the external data file an in-place rewrite writes (the input's own
data file's name, replaced atomically; nothing touched when a check or validation fails), and the
switch to external data counting Constant node tensors (main graph, subgraphs, functions).

The 2 GiB protobuf limit is patched down (``model_io.PROTO_LIMIT_BYTES``): nothing here allocates it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto

import scatter_rewrite.model_io as model_io
from tests.helpers.wrong_passes import NegateScatterOutputs, Unregistered
from scatter_rewrite import testing
from scatter_rewrite.errors import OptionError
from scatter_rewrite.graph import iter_nodes
from scatter_rewrite.pipeline import VERBS, Verb, check_model, rewrite_file
from scatter_rewrite.verbs import upgrade_passes
from scatter_rewrite.validate import run_onnxruntime
from tests.helpers.cli import invoke
from tests.helpers.models import vi, weight_bytes

def _tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (hidden ones and staging folders included): relative path -> sha256."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _locations(path: Path) -> dict[str, str]:
    """tensor name -> external data location, for every external tensor (attributes included)."""
    model = onnx.load(str(path), load_external_data=False)
    return {t.name: next(e.value for e in t.external_data if e.key == "location")
            for t in model_io.proto_tensors(model) if t.data_location == TensorProto.EXTERNAL}


def _inputs(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for testing.external_weights_model: x random, idx unique in-range columns, upd random."""
    rng = np.random.default_rng(seed)
    model = onnx.load(str(path), load_external_data=False)
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in model.graph.input}
    cols = shapes["x"][1]
    return {"x": rng.standard_normal(shapes["x"]).astype(np.float32),
            "idx": rng.choice(cols, size=4, replace=False).reshape(1, 4).astype(np.int64),
            "upd": rng.standard_normal((1, 4)).astype(np.float32)}


def _assert_same_outputs(original: Path, rewritten: Path, inputs: dict[str, np.ndarray]) -> None:
    expected, actual = run_onnxruntime(original, inputs), run_onnxruntime(rewritten, inputs)
    assert len(expected) == len(actual)
    for e, a in zip(expected, actual):
        np.testing.assert_array_equal(a, e)


def _external_model(folder: Path, data_name: str) -> Path:
    """testing.external_weights_model (4 x 16 KiB float32 weights, opset 10 Scatter) named model.onnx,
    its weights in ``data_name`` (a file name, or a path inside the model's folder)."""
    (folder / data_name).parent.mkdir(parents=True, exist_ok=True)
    return testing.external_weights_model(folder, 4 * 16 * 256 * 4, rows=16, name="model.onnx", data_name=data_name)


def _move_to_file(model_path: Path, moves: dict[str, str]) -> None:
    """Move the external tensors named in ``moves`` into the given data files (appended), in place."""
    model = onnx.load(str(model_path), load_external_data=False)
    for tensor in model.graph.initializer:
        if tensor.name not in moves:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        with open(model_path.parent / info["location"], "rb") as f:
            f.seek(int(info["offset"]))
            data = f.read(int(info["length"]))
        with open(model_path.parent / moves[tensor.name], "ab") as f:
            offset = f.tell()
            f.write(data)
        for entry in tensor.external_data:
            entry.value = {"location": moves[tensor.name], "offset": str(offset), "length": str(len(data))}[entry.key]
    onnx.save(model, model_path)


# --------------------------------------------------------------------------- in place: the data file


@pytest.mark.parametrize("verb", ["upgrade", "fold"])
@pytest.mark.parametrize("data_name", ["weights.bin", "blobs/weights.bin"])
def test_in_place_reuses_the_inputs_data_file(tmp_path: Path, verb: str, data_name: str):
    source = _external_model(tmp_path / "m", data_name)
    pristine = shutil.copytree(source.parent, tmp_path / "pristine")
    weights = weight_bytes(source)
    before = _tree(source.parent)
    assert sorted(before) == sorted(["model.onnx", data_name])

    result = invoke(verb, source, "--in-place")
    assert result.exit_code == 0, result.output
    # Exactly the model and its one data file, both rewritten (no <model>.onnx.data, no staging left).
    after = _tree(source.parent)
    assert sorted(after) == sorted(before)
    assert after["model.onnx"] != before["model.onnx"]
    locations = _locations(source)
    assert set(weights) <= set(locations) and set(locations.values()) == {data_name}
    assert {k: v for k, v in weight_bytes(source).items() if k in weights} == weights
    check_model(source)
    _assert_same_outputs(pristine / "model.onnx", source, _inputs(pristine / "model.onnx"))
    assert "no longer referenced" not in result.output


def test_in_place_report_has_no_notes_when_the_data_file_is_reused(tmp_path: Path):
    source = _external_model(tmp_path, "weights.bin")
    outcome = rewrite_file("upgrade", source, in_place=True)
    assert outcome.status == "PASSED" and outcome.notes == []
    assert outcome.validation["checked_against"].startswith("onnxruntime")
    assert sorted(_tree(tmp_path)) == ["model.onnx", "weights.bin"]


@pytest.mark.parametrize("wrong", ["validation", "check"])
def test_failed_in_place_rewrite_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wrong: str):
    source = _external_model(tmp_path, "weights.bin")
    before = _tree(tmp_path)
    breaker = NegateScatterOutputs() if wrong == "validation" else Unregistered()
    monkeypatch.setitem(VERBS, "upgrade", Verb("upgrade", "upgraded", lambda opset=None: [*upgrade_passes(opset), breaker]))
    result = invoke("upgrade", source, "--in-place")
    assert result.exit_code == 1
    assert ("validation failed" if wrong == "validation" else "fails onnx.checker") in result.stderr
    assert _tree(tmp_path) == before  # byte-identical, nothing added, no staging folder left


def test_in_place_with_several_data_files_writes_one_and_leaves_the_others(tmp_path: Path):
    source = _external_model(tmp_path / "m", "a.bin")
    _move_to_file(source, {"W2": "b.bin", "W3": "b.bin"})
    assert set(_locations(source).values()) == {"a.bin", "b.bin"}
    pristine = shutil.copytree(source.parent, tmp_path / "pristine")
    weights = weight_bytes(source)
    before = _tree(source.parent)

    report = tmp_path / "report.json"
    # A real process, so that the warning reaches stderr through the CLI's own logging set-up.
    result = subprocess.run([sys.executable, "-m", "scatter_rewrite.cli", "upgrade", str(source), "--in-place",
                             "--report", str(report)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    after = _tree(source.parent)
    assert sorted(after) == ["a.bin", "b.bin", "model.onnx", "model.onnx.data"]
    assert after["a.bin"] == before["a.bin"] and after["b.bin"] == before["b.bin"]  # left, untouched
    assert set(_locations(source).values()) == {"model.onnx.data"}
    assert weight_bytes(source) == weights
    check_model(source)
    _assert_same_outputs(pristine / "model.onnx", source, _inputs(pristine / "model.onnx"))
    # The warning on stderr and the report's notes say what was left.
    assert "data file(s) a.bin, b.bin are no longer referenced" in result.stderr
    (note,) = json.loads(report.read_text())["models"][0]["notes"]
    assert "keeps all its external data in model.onnx.data" in note and "a.bin, b.bin" in note


def test_in_place_with_several_data_files_one_of_them_the_default_name(tmp_path: Path):
    source = _external_model(tmp_path, "model.onnx.data")
    _move_to_file(source, {"W1": "b.bin"})
    pristine = shutil.copytree(tmp_path, tmp_path.parent / "pristine")
    b_before = _tree(tmp_path)["b.bin"]
    outcome = rewrite_file("upgrade", source, in_place=True)
    assert sorted(_tree(tmp_path)) == ["b.bin", "model.onnx", "model.onnx.data"]
    assert _tree(tmp_path)["b.bin"] == b_before
    assert set(_locations(source).values()) == {"model.onnx.data"}
    (note,) = outcome.notes
    assert "keeps all its external data in model.onnx.data" in note and "data file(s) b.bin are" in note
    _assert_same_outputs(pristine / "model.onnx", source, _inputs(pristine / "model.onnx"))


def _constant_scatter_on_external_weight(folder: Path) -> Path:
    """y = x + ScatterElements(W, idx, upd, axis=1), W (16 x 64 float32) alone in weights.bin, idx and
    upd inline: fold folds the scatter and drops W, so the result has no external data."""
    folder.mkdir(parents=True, exist_ok=True)
    w = np.arange(16 * 64, dtype=np.float32).reshape(16, 64)
    idx = np.tile(np.array([[3, 0, 63, 17]], np.int64), (16, 1))
    upd = -np.ones((16, 4), np.float32)
    weight = onnx.numpy_helper.from_array(w, "W")
    graph = oh.make_graph(
        [oh.make_node("ScatterElements", ["W", "idx", "upd"], ["s"], axis=1), oh.make_node("Add", ["x", "s"], ["y"])],
        "fold_external", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [16, 64])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [16, 64])],
        [weight, onnx.numpy_helper.from_array(idx, "idx"), onnx.numpy_helper.from_array(upd, "upd")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.external_data_helper.convert_model_to_external_data(model, location="weights.bin", size_threshold=1024)
    onnx.save(model, folder / "model.onnx")
    assert _locations(folder / "model.onnx") == {"W": "weights.bin"}
    return folder / "model.onnx"


def test_in_place_ending_with_no_external_data_leaves_the_old_file_and_says_so(tmp_path: Path):
    source = _constant_scatter_on_external_weight(tmp_path / "m")
    pristine = shutil.copytree(source.parent, tmp_path / "pristine")
    before = _tree(source.parent)
    outcome = rewrite_file("fold", source, in_place=True)
    assert outcome.status == "PASSED" and outcome.validation["checked_against"].startswith("onnxruntime")
    after = _tree(source.parent)
    assert sorted(after) == ["model.onnx", "weights.bin"] and after["weights.bin"] == before["weights.bin"]
    assert _locations(source) == {}
    assert [n.op_type for n in onnx.load(str(source)).graph.node] == ["Add"]
    (note,) = outcome.notes
    assert "has no external data" in note and "weights.bin are no longer referenced" in note
    x = np.random.default_rng(1).standard_normal((16, 64)).astype(np.float32)
    _assert_same_outputs(pristine / "model.onnx", source, {"x": x})


# --------------------------------------------------------------------------- -o OUT: OUT.data, as before


def test_output_keeps_out_data_and_the_input_untouched(tmp_path: Path):
    source = _external_model(tmp_path / "m", "weights.bin")
    before = _tree(source.parent)
    out = tmp_path / "o" / "x.onnx"
    result = invoke("upgrade", source, "-o", out)
    assert result.exit_code == 0, result.output
    assert _tree(source.parent) == before
    assert sorted(_tree(out.parent)) == ["x.onnx", "x.onnx.data"]
    assert set(_locations(out).values()) == {"x.onnx.data"}
    _assert_same_outputs(source, out, _inputs(source))


@pytest.mark.parametrize("out", ["other.onnx", "other.onnx.data"])
def test_output_onto_the_inputs_data_file_is_refused(tmp_path: Path, out: str):
    # -o other.onnx would write other.onnx.data, where the input keeps its weights; -o other.onnx.data
    # would write the model itself there.
    source = _external_model(tmp_path, "other.onnx.data")
    before = _tree(tmp_path)
    result = invoke("upgrade", source, "-o", tmp_path / out)
    assert result.exit_code == 2 and "the input's external data file" in result.stderr
    assert _tree(tmp_path) == before
    with pytest.raises(OptionError):
        rewrite_file("upgrade", source, output=tmp_path / out)


# --------------------------------------------------------------------------- models sharing a data file


def _sharing_pair(folder: Path) -> tuple[Path, Path]:
    """a.onnx and b.onnx: y = x + ScatterElements(D, idx, upd, axis=1) then MatMul by W, D and W
    different in each, all their tensors in one weights.bin (b's appended after a's), as
    ``onnx.save(..., location="weights.bin")`` of two models into one folder writes them."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, scale in (("a", 1.0), ("b", 2.0)):
        tensors = [onnx.numpy_helper.from_array(np.arange(32 * 32, dtype=np.float32).reshape(32, 32) * scale, "W"),
                   onnx.numpy_helper.from_array(np.full((32, 32), scale, np.float32), "D"),
                   onnx.numpy_helper.from_array(np.array([[0, 1], [2, 0]], np.int64), "idx"),
                   onnx.numpy_helper.from_array(np.full((2, 2), -scale, np.float32), "upd")]
        graph = oh.make_graph(
            [oh.make_node("ScatterElements", ["D", "idx", "upd"], ["s"], axis=1), oh.make_node("Add", ["x", "s"], ["t"]),
             oh.make_node("MatMul", ["t", "W"], ["y"])], "shared",
            [oh.make_tensor_value_info("x", TensorProto.FLOAT, [32, 32])],
            [oh.make_tensor_value_info("y", TensorProto.FLOAT, [32, 32])], tensors)
        model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
        model.ir_version = 9
        onnx.save(model, folder / f"{name}.onnx", save_as_external_data=True, location="weights.bin", size_threshold=0)
        paths.append(folder / f"{name}.onnx")
    assert set(_locations(paths[0]).values()) == set(_locations(paths[1]).values()) == {"weights.bin"}
    return paths[0], paths[1]


def _x(seed: int = 0) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((32, 32)).astype(np.float32)}


@pytest.mark.parametrize("verb", ["fold", "upgrade"])
def test_two_models_sharing_a_data_file_in_place_are_refused(tmp_path: Path, verb: str):
    # Each used to replace weights.bin with its own tensors: "2 of 2 model(s) PASSED", both then reading
    # one model's weights (or one of them failing validation and left unloadable).
    a, b = _sharing_pair(tmp_path / "m")
    before = _tree(tmp_path)
    result = invoke(verb, a, b, "--in-place")
    assert result.exit_code == 2, result.output  # bad usage, before any work
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("scatter-rewrite: error:") and "Traceback" not in result.output
    assert f"{a} and {b} would both write their external data to {tmp_path / 'm' / 'weights.bin'}" in line
    assert "the data file they share" in line and "without --in-place" in line
    assert _tree(tmp_path) == before  # both models and the data file byte-identical, nothing added


def test_in_place_onto_a_data_file_another_model_also_reads_is_refused(tmp_path: Path):
    # b keeps its W in a file of its own too, so its in-place result goes to b.onnx.data; a's still
    # replaces weights.bin, where b reads D, idx and upd.
    a, b = _sharing_pair(tmp_path / "m")
    _move_to_file(b, {"W": "b_only.bin"})
    before = _tree(tmp_path)
    result = invoke("fold", a, b, "--in-place")
    assert result.exit_code == 2, result.output  # bad usage, before any work
    (line,) = result.stderr.strip().splitlines()
    assert (f"the external data file of the output for {a}, {tmp_path / 'm' / 'weights.bin'}, is the external "
            f"data file of {b}; rewrite them without --in-place") in line
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("where", ["beside", "folder"])
def test_two_models_sharing_a_data_file_are_rewritten_into_new_files(tmp_path: Path, where: str):
    a, b = _sharing_pair(tmp_path / "m")
    pristine = shutil.copytree(tmp_path / "m", tmp_path / "pristine")
    before = _tree(tmp_path / "m")
    out = tmp_path / "m" if where == "beside" else tmp_path / "out"
    result = invoke("fold", a, b, *([] if where == "beside" else ["-o", out]))
    assert result.exit_code == 0, result.output
    assert "2 models: 2 PASSED" in result.stdout
    assert {k: v for k, v in _tree(tmp_path / "m").items() if k in before} == before  # the inputs untouched
    for name in ("a", "b"):
        folded = out / f"{name}.folded.onnx"
        assert set(_locations(folded).values()) == {f"{name}.folded.onnx.data"}
        _assert_same_outputs(pristine / f"{name}.onnx", folded, _x())
    assert digest_outputs(out / "a.folded.onnx") != digest_outputs(out / "b.folded.onnx")


def digest_outputs(path: Path) -> bytes:
    return run_onnxruntime(path, _x())[0].tobytes()


def test_two_models_with_data_files_of_their_own_in_place(tmp_path: Path):
    a, b = _sharing_pair(tmp_path / "m")
    _move_to_file(a, {t: "a.bin" for t in ("W", "D", "idx", "upd")})
    _move_to_file(b, {t: "b.bin" for t in ("W", "D", "idx", "upd")})
    (tmp_path / "m" / "weights.bin").unlink()
    pristine = shutil.copytree(tmp_path / "m", tmp_path / "pristine")
    result = invoke("fold", a, b, "--in-place")
    assert result.exit_code == 0, result.output
    assert sorted(_tree(tmp_path / "m")) == ["a.bin", "a.onnx", "b.bin", "b.onnx"]
    for name in ("a", "b"):
        assert set(_locations(tmp_path / "m" / f"{name}.onnx").values()) == {f"{name}.bin"}
        assert [n.op_type for n in onnx.load(str(tmp_path / "m" / f"{name}.onnx")).graph.node] == ["Add", "MatMul"]
        _assert_same_outputs(pristine / f"{name}.onnx", tmp_path / "m" / f"{name}.onnx", _x())


def test_one_model_of_a_shared_pair_in_place_is_not_refused(tmp_path: Path):
    # The run cannot see b, which then reads a's new weights.bin: the README says to rewrite such
    # models together (refused in place) or without --in-place.
    a, _ = _sharing_pair(tmp_path / "m")
    pristine = shutil.copytree(tmp_path / "m", tmp_path / "pristine")
    result = invoke("fold", a, "--in-place")
    assert result.exit_code == 0, result.output
    _assert_same_outputs(pristine / "a.onnx", a, _x())


# --------------------------------------------------------------------------- input_data_files: from the bytes


def _with_external(model: onnx.ModelProto, folder: Path, location: str = "w.bin") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / "model.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location=location, size_threshold=0)
    return folder / "model.onnx"


@pytest.mark.parametrize("case", ["inline", "main", "if", "function", "several", "big-inline"])
def test_input_data_files_are_those_the_loaded_model_names(tmp_path: Path, case: str):
    if case == "inline":
        path = tmp_path / "model.onnx"
        onnx.save(_constant_model("main", 4096), path)
    elif case in ("main", "if", "function"):
        # Constant tensors (a subgraph's, a function's) are external data too.
        path = _with_external(_constant_model(case, 4096, with_initializer=True), tmp_path)
    elif case == "several":
        path = _external_model(tmp_path, "a.bin")
        (tmp_path / "sub").mkdir()
        _move_to_file(path, {"W1": "sub/b.bin", "W3": "c.bin"})
    else:
        path = tmp_path / "model.onnx"
        big_inline_model(path)  # 2 MiB inline: mapped by load_proto, its raw bytes skipped here
    expected = model_io.external_data_files(model_io.load_proto(path), path)
    assert model_io.input_data_files(path) == expected
    assert (expected == []) == (case in ("inline", "big-inline"))
    if case == "several":
        assert expected == ["a.bin", "sub/b.bin", "c.bin"]


def test_input_data_files_skip_big_inline_weights_unread(tmp_path: Path):
    # A big inline weight whose bytes read as an external data reference: not one (load_proto maps it).
    fake = b"\x0a\x08location\x12\x08fake.bin"
    raw = (fake * (2**20 // len(fake) + 1))[: 2**20]
    weights = oh.make_tensor("w", TensorProto.UINT8, [len(raw)], raw, raw=True)
    graph = oh.make_graph([oh.make_node("Identity", ["w"], ["y"])], "g", [],
                          [oh.make_tensor_value_info("y", TensorProto.UINT8, [len(raw)])], [weights])
    path = tmp_path / "m.onnx"
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]), path)
    parsed = []
    real_load = model_io.load_proto
    model_io.load_proto = lambda p: parsed.append(p) or real_load(p)
    try:
        assert model_io.input_data_files(path) == [] and parsed == []  # not even parsed
        # Small, the same bytes are found, and the model is parsed to see they are no reference.
        small = tmp_path / "small.onnx"
        onnx.save(oh.make_model(oh.make_graph(
            [oh.make_node("Identity", ["w"], ["y"])], "g", [], [oh.make_tensor_value_info("y", TensorProto.UINT8, [20])],
            [oh.make_tensor("w", TensorProto.UINT8, [20], fake, raw=True)]),
            opset_imports=[oh.make_opsetid("", 18)]), small)
        assert model_io.input_data_files(small) == [] and parsed == [small]
    finally:
        model_io.load_proto = real_load


def _value_named_location_model(dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """A Scatter (opset 10) whose data goes through values named 'location' and 'scaled': the bytes
    of a ValueInfoProto or a node input named 'location' read like an external data reference."""
    nodes = [oh.make_node("Identity", ["box"], ["location"]), oh.make_node("Mul", ["d", "location"], ["scaled"]),
             oh.make_node("Scatter", ["scaled", "i", "u"], ["y"], axis=0)]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("d", dtype, [4, 3]),
                                       oh.make_tensor_value_info("box", dtype, []),
                                       oh.make_tensor_value_info("i", TensorProto.INT64, [2, 3]),
                                       oh.make_tensor_value_info("u", dtype, [2, 3])],
                          [oh.make_tensor_value_info("y", dtype, [4, 3])],
                          value_info=[oh.make_tensor_value_info("location", dtype, [])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 10)])


def test_values_named_location_are_no_data_files(tmp_path: Path):
    # The audit's cases: a scalar 'location' crashed the plan (a NUL in the 'file name'), and two models
    # with a 'location' input to a node were refused in place for a phantom shared data file.
    for name, dtype in (("model.onnx", TensorProto.FLOAT), ("model_fp16.onnx", TensorProto.FLOAT16)):
        onnx.save(_value_named_location_model(dtype), tmp_path / name)
        assert model_io.input_data_files(tmp_path / name) == []
    result = invoke("upgrade", tmp_path, "--in-place")
    assert result.exit_code == 0, result.output
    assert all(n.op_type != "Scatter" for name in ("model.onnx", "model_fp16.onnx")
               for n in onnx.load(str(tmp_path / name)).graph.node)


def test_input_data_files_parse_a_reference_written_value_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = _external_model(tmp_path, "weights.bin")
    data = path.read_bytes()
    entry = b"\x0a\x08location\x12\x0bweights.bin"
    reordered = b"\x12\x0bweights.bin\x0a\x08location"  # value, then key: valid protobuf, no writer's order
    assert entry in data
    path.write_bytes(data.replace(entry, reordered))
    parsed = []
    monkeypatch.setattr(model_io, "load_proto", lambda p: parsed.append(p) or onnx.load(str(p), load_external_data=False))
    assert model_io.input_data_files(path) == ["weights.bin"] and parsed == [path]


# --------------------------------------------------------------------------- permissions of replaced files


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _umask_default() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@pytest.mark.parametrize("model_mode,data_mode", [(0o600, 0o640), (0o640, 0o600), (0o444, 0o400)],
                         ids=["0600-0640", "0640-0600", "0444-0400"])
def test_in_place_keeps_the_modes_of_the_model_and_its_data_file(tmp_path: Path, model_mode: int, data_mode: int):
    # They used to come back with the umask default (0644): a private model made readable by all.
    source = _external_model(tmp_path, "weights.bin")
    source.chmod(model_mode)
    (tmp_path / "weights.bin").chmod(data_mode)
    before = _tree(tmp_path)
    result = invoke("upgrade", source, "--in-place")
    assert result.exit_code == 0, result.output
    assert _tree(tmp_path)["model.onnx"] != before["model.onnx"]  # replaced, not left alone
    assert _mode(source) == model_mode and _mode(tmp_path / "weights.bin") == data_mode


def test_in_place_gives_a_new_data_file_the_mode_of_the_model_it_replaces(tmp_path: Path):
    # Two data files in: the result's weights go to a new model.onnx.data, which must not make the
    # weights of a private model readable by all (the old files stay, named in a warning).
    source = _external_model(tmp_path, "weights.bin")
    initializers = [t.name for t in onnx.load(str(source), load_external_data=False).graph.initializer
                    if t.data_location == onnx.TensorProto.EXTERNAL]
    _move_to_file(source, {initializers[0]: "other.bin"})
    source.chmod(0o600)
    result = invoke("upgrade", source, "--in-place")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "model.onnx.data").is_file() and _mode(tmp_path / "model.onnx.data") == 0o600
    assert _mode(source) == 0o600


def test_in_place_keeps_the_mode_of_a_model_without_external_data(tmp_path: Path):
    source = tmp_path / "private.onnx"
    onnx.save(testing.scatter_model("Scatter", opset=10), source)
    source.chmod(0o600)
    result = invoke("upgrade", source, "--in-place")
    assert result.exit_code == 0, result.output
    assert [n.op_type for n in onnx.load(str(source)).graph.node] == ["ScatterElements"]
    assert _mode(source) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["private.onnx"]


def test_output_onto_existing_files_keeps_their_modes_and_new_files_get_the_umask_default(tmp_path: Path):
    # As cp onto an existing file (it writes into it): the file keeps its mode; a new one is 0666 & ~umask.
    source = _external_model(tmp_path / "m", "weights.bin")
    source.chmod(0o600)
    (tmp_path / "m" / "weights.bin").chmod(0o600)
    new = tmp_path / "new" / "x.onnx"
    assert invoke("upgrade", source, "-o", new).exit_code == 0
    assert _mode(new) == _mode(tmp_path / "new" / "x.onnx.data") == _umask_default() != 0o600
    existing = tmp_path / "old" / "x.onnx"
    shutil.copytree(new.parent, existing.parent)
    existing.chmod(0o640)
    (existing.parent / "x.onnx.data").chmod(0o604)
    (existing.parent / "x.onnx.data").write_bytes(b"stale")
    result = invoke("upgrade", source, "-o", existing)
    assert result.exit_code == 0, result.output
    assert _mode(existing) == 0o640 and _mode(existing.parent / "x.onnx.data") == 0o604
    assert (existing.parent / "x.onnx.data").read_bytes() == (new.parent / "x.onnx.data").read_bytes()


def test_in_place_through_a_symlink_keeps_the_mode_of_the_file_it_named(tmp_path: Path):
    blob = tmp_path / "blobs" / "0123abcd"
    blob.parent.mkdir()
    onnx.save(testing.scatter_model("Scatter", opset=10), blob)
    blob.chmod(0o640)
    link = tmp_path / "model.onnx"
    link.symlink_to(blob)
    blob_before = blob.read_bytes()
    assert invoke("upgrade", link, "--in-place").exit_code == 0
    assert not link.is_symlink() and _mode(link) == 0o640  # a regular file now, as with sed -i
    assert blob.read_bytes() == blob_before and _mode(blob) == 0o640


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="only root may give files away")
def test_in_place_as_root_keeps_owner_and_group(tmp_path: Path):
    source = _external_model(tmp_path, "weights.bin")
    os.chown(source, 12345, 23456)
    os.chown(tmp_path / "weights.bin", 23456, 12345)
    assert invoke("upgrade", source, "--in-place").exit_code == 0
    assert (source.stat().st_uid, source.stat().st_gid) == (12345, 23456)
    assert ((tmp_path / "weights.bin").stat().st_uid, (tmp_path / "weights.bin").stat().st_gid) == (23456, 12345)


def test_replace_file_falls_back_to_the_group_where_the_owner_cannot_be_set(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch):
    old, new = tmp_path / "old", tmp_path / "new"
    old.write_bytes(b"old")
    new.write_bytes(b"new")
    old.chmod(0o640)
    calls = []
    real_stat = os.stat

    def other_owner(path, *args, **kwargs):  # the replaced file belongs to someone else
        result = real_stat(path, *args, **kwargs)
        if Path(path) == old:
            return os.stat_result((result.st_mode, *result[1:4], result.st_uid + 1, result.st_gid + 1, *result[6:]))
        return result

    def chown(path, uid, gid):
        calls.append((uid, gid))
        if uid != -1:
            raise PermissionError("not root")
        raise PermissionError("not in that group")  # best effort: ignored too

    monkeypatch.setattr(os, "stat", other_owner)
    monkeypatch.setattr(os, "chown", chown)
    expected_owner = real_stat(old).st_uid + 1, real_stat(old).st_gid + 1
    model_io.replace_file(new, old)
    assert calls == [expected_owner, (-1, expected_owner[1])]
    assert old.read_bytes() == b"new" and stat.S_IMODE(real_stat(old).st_mode) == 0o640 and not new.exists()


# --------------------------------------------------------------------------- Constant tensors count


LIMIT = 64 * 1024  # the patched "protobuf limit"


def _constant_model(where: str, constant_bytes: int, with_initializer: bool = False) -> onnx.ModelProto:
    """Opset 10: y = Scatter(x + C [+ W], idx, upd, axis=1), C a Constant node of ``constant_bytes``
    (float32 [16, n]) in the main graph, an If's then-branch or a local function; W an initializer
    of C's shape and size."""
    cols = constant_bytes // (16 * 4)
    c = np.arange(16 * cols, dtype=np.float32).reshape(16, cols) * np.float32(0.5)
    constant = oh.make_node("Constant", [], ["c"], value=onnx.numpy_helper.from_array(c, "C"))
    F = TensorProto.FLOAT
    inputs = [vi("x", F, [16, cols]), vi("idx", TensorProto.INT64, [16, 2]), vi("upd", F, [16, 2])]
    functions, opsets = [], [oh.make_opsetid("", 10)]
    if where == "main":
        nodes = [constant, oh.make_node("Add", ["x", "c"], ["a"])]
    elif where == "if":
        then = oh.make_graph([constant, oh.make_node("Add", ["x", "c"], ["t"])], "then", [], [vi("t", F, [16, cols])])
        other = oh.make_graph([oh.make_node("Identity", ["x"], ["e"])], "else", [], [vi("e", F, [16, cols])])
        inputs.append(vi("cond", TensorProto.BOOL, []))
        nodes = [oh.make_node("If", ["cond"], ["a"], then_branch=then, else_branch=other)]
    else:
        body = [constant, oh.make_node("Add", ["fx", "c"], ["fy"])]
        functions = [oh.make_function("local", "AddC", ["fx"], ["fy"], body, opset_imports=[oh.make_opsetid("", 10)])]
        opsets.append(oh.make_opsetid("local", 1))
        nodes = [oh.make_node("AddC", ["x"], ["a"], domain="local")]
    initializers = []
    if with_initializer:
        initializers.append(onnx.numpy_helper.from_array(np.full((16, cols), 0.25, np.float32), "W"))
        nodes.append(oh.make_node("Add", ["a", "W"], ["aw"]))
    nodes.append(oh.make_node("Scatter", ["aw" if with_initializer else "a", "idx", "upd"], ["y"], axis=1))
    graph = oh.make_graph(nodes, "constants", inputs, [vi("y", F, [16, cols])], initializers)
    model = oh.make_model(graph, opset_imports=opsets, functions=functions)
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _constant_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    cols = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    inputs = {"x": rng.standard_normal((16, cols)).astype(np.float32),
              "idx": np.stack([rng.choice(cols, size=2, replace=False) for _ in range(16)]).astype(np.int64),
              "upd": rng.standard_normal((16, 2)).astype(np.float32)}
    if any(i.name == "cond" for i in model.graph.input):
        inputs["cond"] = np.array(True)
    return inputs


def _constant_tensors(path: Path) -> list[onnx.TensorProto]:
    """The tensors of the nodes' attributes (the Constants'), subgraphs and functions included."""
    model = onnx.load(str(path), load_external_data=False)
    found, bodies = [], [model.graph, *model.functions]
    while bodies:
        for node in bodies.pop().node:
            for a in node.attribute:
                found.extend([a.t] if a.HasField("t") else [])
                bodies.extend([a.g] if a.HasField("g") else [])
                bodies.extend(a.graphs)
    return found


@pytest.mark.parametrize("where", ["main", "if", "function"])
def test_constant_tensors_over_the_limit_go_to_external_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             where: str):
    monkeypatch.setattr(model_io, "PROTO_LIMIT_BYTES", LIMIT)
    model = _constant_model(where, constant_bytes=2 * LIMIT)  # no initializer at all
    source = tmp_path / "in" / "model.onnx"
    source.parent.mkdir()
    onnx.save(model, source)
    out = tmp_path / "out" / "model.upgraded.onnx"
    outcome = rewrite_file("upgrade", source, output=out)  # validated in onnxruntime
    assert outcome.status == "PASSED" and outcome.validation["max_abs_diff"] == 0.0
    assert sorted(_tree(out.parent)) == ["model.upgraded.onnx", "model.upgraded.onnx.data"]
    # The Constant's tensor is in the data file, so the protobuf itself stays under the limit.
    (tensor,) = _constant_tensors(out)
    assert tensor.data_location == TensorProto.EXTERNAL
    assert _locations(out) == {"C": "model.upgraded.onnx.data"}
    assert out.stat().st_size < LIMIT < (out.parent / "model.upgraded.onnx.data").stat().st_size
    check_model(out)
    _assert_same_outputs(source, out, _constant_inputs(model))


def test_constants_and_initializers_are_summed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # 40 KiB of Constant + 40 KiB of initializer: each under the 64 KiB limit, together over it.
    monkeypatch.setattr(model_io, "PROTO_LIMIT_BYTES", LIMIT)
    model = _constant_model("main", constant_bytes=40 * 1024, with_initializer=True)
    source = tmp_path / "model.onnx"
    onnx.save(model, source)
    out = tmp_path / "out.onnx"
    rewrite_file("upgrade", source, output=out)
    assert _locations(out) == {"C": "out.onnx.data", "W": "out.onnx.data"}
    assert out.stat().st_size < LIMIT
    check_model(out)
    _assert_same_outputs(source, out, _constant_inputs(model))


@pytest.mark.parametrize("where", ["main", "function"])
def test_constant_tensors_under_the_limit_stay_inline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str):
    monkeypatch.setattr(model_io, "PROTO_LIMIT_BYTES", LIMIT)
    model = _constant_model(where, constant_bytes=LIMIT // 2)
    source = tmp_path / "model.onnx"
    onnx.save(model, source)
    out = tmp_path / "out.onnx"
    rewrite_file("upgrade", source, output=out)
    assert sorted(_tree(tmp_path)) == ["model.onnx", "out.onnx"]
    assert [t.data_location for t in _constant_tensors(out)] == [TensorProto.DEFAULT]
    _assert_same_outputs(source, out, _constant_inputs(model))


def test_saving_with_external_data_leaves_the_ir_model_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(model_io, "PROTO_LIMIT_BYTES", LIMIT)
    model = ir.serde.deserialize_model(_constant_model("if", constant_bytes=2 * LIMIT, with_initializer=True))
    (constant,) = [node for node, _ in iter_nodes(model) if node.op_type == "Constant"]
    attr, weight = constant.attributes["value"], model.graph.initializers["W"].const_value
    model_io.save_model(model, tmp_path / "saved.onnx")
    assert _locations(tmp_path / "saved.onnx") == {"C": "saved.onnx.data", "W": "saved.onnx.data"}
    assert constant.attributes["value"] is attr and model.graph.initializers["W"].const_value is weight
    assert not isinstance(attr.value, ir.ExternalTensor) and not isinstance(weight, ir.ExternalTensor)


# ---- the checker's view of a model with big inline weights ------------------------------------------

def big_inline_model(path: Path) -> None:
    weights = oh.make_tensor("w", TensorProto.FLOAT, [512, 1024], np.ones(512 * 1024, np.float32).tobytes(), raw=True)
    graph = oh.make_graph([oh.make_node("Add", ["x", "w"], ["y"])], "g",
                          [oh.make_tensor_value_info("x", TensorProto.FLOAT, [512, 1024])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [512, 1024])], [weights])
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]), path)


def test_checkable_uses_a_small_skeleton_beside_the_model(tmp_path):
    from scatter_rewrite._protowire import checkable

    path = tmp_path / "m.onnx"
    big_inline_model(path)
    with checkable(path) as target:
        assert Path(target).name == ".m.onnx.check.onnx" and Path(target).stat().st_size < 10_000
        onnx.checker.check_model(target, full_check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_checkable_checks_the_file_itself_where_the_skeleton_cannot_be_written(tmp_path, monkeypatch):
    """A read-only input folder (simulated: tests may run as root, who may write anywhere)."""
    import scatter_rewrite._protowire as protowire

    def refuse(*args, **kwargs):
        raise PermissionError("read-only folder")

    path = tmp_path / "m.onnx"
    big_inline_model(path)
    monkeypatch.setattr(protowire.onnx, "save", refuse)
    with protowire.checkable(path) as target:
        assert target == str(path)
        onnx.checker.check_model(target, full_check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def _every_kind_of_tensor_model() -> onnx.ModelProto:
    """A tensor in each place a TensorProto may be: a main-graph initializer and sparse initializer,
    a Constant in an If branch, an initializer of a Loop body inside that branch, and in a
    model-local function a Constant and an initializer of an If branch."""
    f = TensorProto.FLOAT

    def const(name: str) -> onnx.NodeProto:
        return oh.make_node("Constant", [], [name], value=oh.make_tensor(name, f, [1], [1.0]))

    loop_body = oh.make_graph(
        [oh.make_node("Identity", ["cond_in"], ["cond_out"]),
         oh.make_node("Add", ["loop_w", "loop_w"], ["loop_y"])], "loop_body",
        [oh.make_tensor_value_info("i", TensorProto.INT64, []),
         oh.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [oh.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         oh.make_tensor_value_info("loop_y", f, [1])],
        [oh.make_tensor("loop_w", f, [1], [2.0])])
    then_branch = oh.make_graph(
        [const("then_c"),
         oh.make_node("Loop", ["", "cond"], ["scan_out"], body=loop_body)], "then", [],
        [oh.make_tensor_value_info("scan_out", f, None)])
    else_branch = oh.make_graph([const("else_c")], "else", [],
                                    [oh.make_tensor_value_info("else_c", f, [1])])
    function_branch = oh.make_graph(
        [oh.make_node("Identity", ["fn_w"], ["fn_y"])], "fn_branch", [],
        [oh.make_tensor_value_info("fn_y", f, [1])], [oh.make_tensor("fn_w", f, [1], [3.0])])
    function = oh.make_function(
        "local", "F", ["c"], ["out"],
        [const("fn_c"),
         oh.make_node("If", ["c"], ["out"], then_branch=function_branch,
                      else_branch=function_branch)],
        [oh.make_opsetid("", 18)])
    sparse = oh.make_sparse_tensor(oh.make_tensor("sparse_values", f, [1], [4.0]),
                                   oh.make_tensor("sparse_indices", TensorProto.INT64, [1], [0]),
                                   [4])
    graph = oh.make_graph(
        [oh.make_node("If", ["cond"], ["y"], then_branch=then_branch, else_branch=else_branch),
         oh.make_node("F", ["cond"], ["z"], domain="local")], "main",
        [oh.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [oh.make_tensor_value_info("y", f, None), oh.make_tensor_value_info("z", f, None)],
        [oh.make_tensor("main_w", f, [1], [5.0])], sparse_initializer=[sparse])
    return oh.make_model(graph, functions=[function],
                             opset_imports=[oh.make_opsetid("", 18), oh.make_opsetid("local", 1)])


def test_proto_tensors_sees_every_graph_body_and_function():
    names = [t.name for t in model_io.proto_tensors(_every_kind_of_tensor_model())]
    # (onnx.helper writes a node's attributes sorted by name: else_branch first)
    assert names == ["main_w", "sparse_values", "sparse_indices", "else_c", "then_c", "loop_w",
                     "fn_c", "fn_w", "fn_w"]  # the function's If has the one branch twice


def test_external_data_in_a_function_branch_is_found(tmp_path: Path):
    model = _every_kind_of_tensor_model()
    tensor = next(t for t in model_io.proto_tensors(model) if t.name == "fn_w")
    assert not model_io.has_external_data(model)
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.float_data[:]
    tensor.external_data.add(key="location", value="fn.bin")
    assert model_io.has_external_data(model)
    assert model_io.external_data_files(model, tmp_path / "m.onnx") == ["fn.bin"]
