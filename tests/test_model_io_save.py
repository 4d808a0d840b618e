"""How rewritten models are saved: the external data file an in-place rewrite writes (the input's own
data file's name, replaced atomically; nothing touched when a check or validation fails), and the
switch to external data counting Constant node tensors (main graph, subgraphs, functions).

The 2 GiB protobuf limit is patched down (``model_io.PROTO_LIMIT_BYTES``): nothing here allocates it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto
from typer.testing import CliRunner

import scatter_rewrite.model_io as model_io
from _wrong_passes import NegateScatterOutputs
from scatter_rewrite import testing
from scatter_rewrite.cli import app
from scatter_rewrite.errors import OptionError
from scatter_rewrite.graph import iter_nodes
from scatter_rewrite.passes.base import ScatterPass
from scatter_rewrite.passes.upgrade import UpgradePass
from scatter_rewrite.pipeline import VERBS, Verb, check_model, rewrite_file
from scatter_rewrite.validate import run_onnxruntime

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def _tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (hidden ones and staging folders included): relative path -> sha256."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _locations(path: Path) -> dict[str, str]:
    """tensor name -> external data location, for every external tensor (attributes included)."""
    from onnx.external_data_helper import _get_all_tensors

    model = onnx.load(str(path), load_external_data=False)
    return {t.name: next(e.value for e in t.external_data if e.key == "location")
            for t in _get_all_tensors(model) if t.data_location == TensorProto.EXTERNAL}


def _weights(path: Path) -> dict[str, bytes]:
    model = onnx.load(str(path), load_external_data=True)
    return {t.name: onnx.numpy_helper.to_array(t).tobytes() for t in model.graph.initializer if t.name.startswith("W")}


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


class Unregistered(ScatterPass):
    """An invalid rewrite on purpose: an Add becomes an op no opset has (onnx.checker must catch it)."""

    name = "unregistered-op"

    def run(self, model):
        for node, scope in iter_nodes(model):
            if node.op_type == "Add":
                node.op_type = "NoSuchOp"
                self.rewrote(node, scope, "-> NoSuchOp (invalid on purpose)")
                return


# --------------------------------------------------------------------------- in place: the data file


@pytest.mark.parametrize("verb", ["upgrade", "fold"])
@pytest.mark.parametrize("data_name", ["weights.bin", "blobs/weights.bin"])
def test_in_place_reuses_the_inputs_data_file(tmp_path: Path, verb: str, data_name: str):
    source = _external_model(tmp_path / "m", data_name)
    pristine = shutil.copytree(source.parent, tmp_path / "pristine")
    weights = _weights(source)
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
    assert {k: v for k, v in _weights(source).items() if k in weights} == weights
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
    monkeypatch.setitem(VERBS, "upgrade", Verb("upgrade", "upgraded", lambda opset=None: [UpgradePass(opset), breaker]))
    result = invoke("upgrade", source, "--in-place")
    assert result.exit_code == 1
    assert ("validation failed" if wrong == "validation" else "fails onnx.checker") in result.stderr
    assert _tree(tmp_path) == before  # byte-identical, nothing added, no staging folder left


def test_in_place_with_several_data_files_writes_one_and_leaves_the_others(tmp_path: Path):
    source = _external_model(tmp_path / "m", "a.bin")
    _move_to_file(source, {"W2": "b.bin", "W3": "b.bin"})
    assert set(_locations(source).values()) == {"a.bin", "b.bin"}
    pristine = shutil.copytree(source.parent, tmp_path / "pristine")
    weights = _weights(source)
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
    assert _weights(source) == weights
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
    assert result.exit_code == 1 and "the input's external data file" in result.stderr
    assert _tree(tmp_path) == before
    with pytest.raises(OptionError):
        rewrite_file("upgrade", source, output=tmp_path / out)


# --------------------------------------------------------------------------- Constant tensors count


LIMIT = 64 * 1024  # the patched "protobuf limit"


def _constant_model(where: str, constant_bytes: int, with_initializer: bool = False) -> onnx.ModelProto:
    """Opset 10: y = Scatter(x + C [+ W], idx, upd, axis=1), C a Constant node of ``constant_bytes``
    (float32 [16, n]) in the main graph, an If's then-branch or a local function; W an initializer
    of C's shape and size."""
    cols = constant_bytes // (16 * 4)
    c = np.arange(16 * cols, dtype=np.float32).reshape(16, cols) * np.float32(0.5)
    constant = oh.make_node("Constant", [], ["c"], value=onnx.numpy_helper.from_array(c, "C"))
    vi = lambda name, shape, t=TensorProto.FLOAT: oh.make_tensor_value_info(name, t, shape)  # noqa: E731
    inputs = [vi("x", [16, cols]), vi("idx", [16, 2], TensorProto.INT64), vi("upd", [16, 2])]
    functions, opsets = [], [oh.make_opsetid("", 10)]
    if where == "main":
        nodes = [constant, oh.make_node("Add", ["x", "c"], ["a"])]
    elif where == "if":
        then = oh.make_graph([constant, oh.make_node("Add", ["x", "c"], ["t"])], "then", [], [vi("t", [16, cols])])
        other = oh.make_graph([oh.make_node("Identity", ["x"], ["e"])], "else", [], [vi("e", [16, cols])])
        inputs.append(vi("cond", [], TensorProto.BOOL))
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
    graph = oh.make_graph(nodes, "constants", inputs, [vi("y", [16, cols])], initializers)
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
    from onnx.external_data_helper import _get_attribute_tensors

    return list(_get_attribute_tensors(onnx.load(str(path), load_external_data=False)))


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
