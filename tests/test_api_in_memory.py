"""The API on a model held in memory without validation: nothing is saved, the caller's model is
untouched (its weights shared, not copied), the checker judges the result in memory, and the
result is the one a call on the model's file writes."""

from __future__ import annotations

import tempfile

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import scatter_rewrite as sr
from scatter_rewrite import api, checking, model_io, pipeline
from scatter_rewrite.errors import InvalidModelError
from scatter_rewrite.testing import external_weights_model, scatter_model


def _refuse_files(patch: pytest.MonkeyPatch) -> None:
    """Every way the API saves a model or makes a temporary folder raises."""
    def refused(*args, **kwargs):
        raise AssertionError("a file was written for a call on a model in memory")

    for module, name in ((model_io, "save_model"), (api, "save_model"),
                         (model_io, "staged_save"), (pipeline, "staged_save"),
                         (tempfile, "mkdtemp"), (tempfile, "TemporaryDirectory"),
                         (onnx, "save"), (onnx, "save_model"), (ir, "save")):
        patch.setattr(module, name, refused)


def _max_model(rows: int = 64, cols: int = 256) -> onnx.ModelProto:
    """One ScatterElements max at opset 18 into ``data + weight`` (a [rows, cols] float32
    initializer)."""
    model = scatter_model("ScatterElements", opset=18, data_shape=(rows, cols),
                          indices_shape=(4, cols), reduction="max", axis=0)
    model.graph.initializer.append(onnx.numpy_helper.from_array(
        np.arange(rows * cols, dtype=np.float32).reshape(rows, cols), "weight"))
    model.graph.node.insert(0, onnx.helper.make_node("Add", ["data", "weight"], ["summed"],
                                                     name="add_weight"))
    model.graph.node[1].input[0] = "summed"
    return model


def _serialized(model: ir.Model | onnx.ModelProto) -> bytes:
    proto = ir.serde.serialize_model(model) if isinstance(model, ir.Model) else model
    return proto.SerializeToString(deterministic=True)


def _assert_same_model(got: ir.Model | onnx.ModelProto, path) -> None:
    """``got`` (a result in memory) is the model written at ``path``: nodes, weights' values,
    inputs, outputs, opsets."""
    written = onnx.load(str(path))
    if isinstance(got, ir.Model):
        values = {n: v.const_value.numpy() for n, v in got.graph.initializers.items()}
        got = ir.serde.serialize_model(got)  # (its external weights as references: not read)
    else:
        values = {t.name: onnx.numpy_helper.to_array(t) for t in got.graph.initializer}
    assert list(got.graph.node) == list(written.graph.node)
    assert sorted(values) == sorted(t.name for t in written.graph.initializer)
    for tensor in written.graph.initializer:
        np.testing.assert_array_equal(values[tensor.name], onnx.numpy_helper.to_array(tensor))
    assert list(got.graph.input) == list(written.graph.input)
    assert list(got.graph.output) == list(written.graph.output)
    assert list(got.opset_import) == list(written.opset_import)


def test_an_ir_model_is_lowered_without_a_file_and_left_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    onnx.save(_max_model(), path)
    from_file = sr.lower(path, opset=13, validate=False, output=tmp_path / "out.onnx")
    model = ir.load(path)
    before = _serialized(model)
    weight = model.graph.initializers["weight"].const_value
    with monkeypatch.context() as patch:
        _refuse_files(patch)
        lowered, report = sr.lower(model, opset=13, validate=False, return_report=True)
    assert isinstance(lowered, ir.Model) and lowered is not model
    assert report.status == "WRITTEN" and report.input == report.output == "<in memory>"
    assert lowered.opset_imports[""] == 13
    assert not [n for n in lowered.graph if n.attributes.get("reduction") is not None]
    assert _serialized(model) == before
    assert model.graph.initializers["weight"].const_value is weight  # (shared, not copied)
    assert lowered.graph.initializers["weight"].const_value is weight
    _assert_same_model(lowered, from_file)


def test_an_ir_model_with_external_weights_keeps_them_unread(tmp_path, monkeypatch):
    """ir.load of a model whose weights are in an external file: the result's weights are the
    same file-backed tensors, and the checker runs from any working folder."""
    path = external_weights_model(tmp_path / "in", 1 << 20)
    from_file = sr.upgrade(path, validate=False, output=tmp_path / "out.onnx")
    model = ir.load(path)
    before = _serialized(model)
    weights = {n: v.const_value for n, v in model.graph.initializers.items()}
    assert isinstance(weights["W0"], ir.ExternalTensor)
    monkeypatch.chdir(tmp_path)  # (not the model's folder)
    with monkeypatch.context() as patch:
        _refuse_files(patch)
        upgraded = sr.upgrade(model, validate=False)
    assert [n.op_type for n in upgraded.graph if "Scatter" in n.op_type] == ["ScatterElements"] * 2
    assert _serialized(model) == before
    assert all(upgraded.graph.initializers[n].const_value is t for n, t in weights.items())
    _assert_same_model(upgraded, from_file)


def test_a_model_proto_is_lowered_without_a_file_and_left_as_it_was(tmp_path, monkeypatch):
    proto = _max_model()
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    from_file = sr.lower(path, opset=13, validate=False, output=tmp_path / "out.onnx")
    before = proto.SerializeToString(deterministic=True)
    with monkeypatch.context() as patch:
        _refuse_files(patch)
        lowered = sr.lower(proto, opset=13, validate=False)
    assert isinstance(lowered, onnx.ModelProto) and lowered is not proto
    assert proto.SerializeToString(deterministic=True) == before
    _assert_same_model(lowered, from_file)


def test_a_graphsurgeon_graph_is_lowered_without_a_file_and_left_as_it_was(tmp_path, monkeypatch):
    gs = pytest.importorskip("onnx_graphsurgeon")
    proto = _max_model()
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    from_file = sr.lower(path, opset=13, validate=False, output=tmp_path / "out.onnx")
    graph = gs.import_onnx(proto)
    before = gs.export_onnx(graph).SerializeToString(deterministic=True)
    with monkeypatch.context() as patch:
        _refuse_files(patch)
        lowered = sr.lower(graph, opset=13, validate=False)
    assert isinstance(lowered, gs.Graph) and lowered is not graph
    assert gs.export_onnx(graph).SerializeToString(deterministic=True) == before
    exported = gs.export_onnx(lowered)
    assert [n.op_type for n in exported.graph.node] == \
        [n.op_type for n in onnx.load(str(from_file)).graph.node]
    values = {t.name: onnx.numpy_helper.to_array(t) for t in exported.graph.initializer}
    np.testing.assert_array_equal(values["weight"], onnx.numpy_helper.to_array(
        proto.graph.initializer[-1]))


def _legacy_and_constant_scatter() -> onnx.ModelProto:
    """A deprecated Scatter at opset 13 (fails the checker; fold leaves it) and a constant
    ScatterElements (folded)."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Scatter", ["x", "i", "u"], ["y"], axis=0),
             helper.make_node("ScatterElements", ["c", "ci", "cu"], ["z"])]
    inits = [numpy_helper.from_array(np.zeros(4, np.float32), "c"),
             numpy_helper.from_array(np.array([1], np.int64), "ci"),
             numpy_helper.from_array(np.ones(1, np.float32), "cu")]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "g", [vi("x", TensorProto.FLOAT, [4]), vi("i", TensorProto.INT64, [1]),
                     vi("u", TensorProto.FLOAT, [1])],
        [vi("y", TensorProto.FLOAT, [4]), vi("z", TensorProto.FLOAT, [4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_checker_failure_the_input_had_is_said_so_in_memory(monkeypatch):
    with monkeypatch.context() as patch:
        _refuse_files(patch)
        with pytest.raises(InvalidModelError) as e:
            sr.fold(_legacy_and_constant_scatter(), validate=False)
    assert str(e.value).startswith("the model given fails onnx.checker before any rewrite"), e.value
    assert "scatter_rewrite.upgrade(model)" in str(e.value)


class _BreakingPass(ir.passes.InPlacePass):
    """Gives the first node an attribute its schema lacks (the checker rejects it)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        node = next(iter(model.graph))
        node.attributes["no_such_attribute"] = ir.AttrInt64("no_such_attribute", 1)
        return ir.passes.PassResult(model, modified=True)


def test_a_result_the_checker_rejects_is_refused_in_memory(monkeypatch):
    model = ir.serde.deserialize_model(_max_model())
    with monkeypatch.context() as patch:
        _refuse_files(patch)
        with pytest.raises(InvalidModelError, match="^the rewritten model fails onnx.checker: "):
            sr.rewrite(model, [_BreakingPass()], validate=False)
    assert "no_such_attribute" not in next(iter(model.graph)).attributes


def test_the_checked_proto_declares_big_weights_as_inputs_and_keeps_the_model():
    model = ir.serde.deserialize_model(_max_model())
    small = ir.Value(name="shape", const_value=ir.tensor(np.array([64, 256], np.int64)))
    model.graph.register_initializer(small)
    before = _serialized(model)
    proto = checking.checkable_proto(model)
    assert [t.name for t in proto.graph.initializer] == ["shape"]
    declared = next(i for i in proto.graph.input if i.name == "weight")
    assert [d.dim_value for d in declared.type.tensor_type.shape.dim] == [64, 256]
    assert proto.ByteSize() < 4096
    assert _serialized(model) == before
    assert checking.checker_failure_in_memory(model) is None


def test_a_validated_call_on_an_ir_model_writes_no_file_and_proves_it(monkeypatch):
    model = ir.serde.deserialize_model(_max_model())
    before = _serialized(model)
    with monkeypatch.context() as patch:
        _refuse_files(patch)
        lowered, report = sr.lower(model, opset=13, return_report=True)
    assert report.status == "PASSED" and report.validation["proven_in"] == "onnxruntime"
    assert report.validation["checked_against"] == "onnxruntime on the original model"
    assert _serialized(model) == before
    assert lowered.opset_imports[""] == 13


def test_a_validated_call_on_external_weights_reads_them_where_they_are(tmp_path, monkeypatch):
    """ir.load-ed weights in an external file, validated from another working folder: both
    sessions get them as they are mapped, and nothing is written."""
    path = external_weights_model(tmp_path / "in", 1 << 20)
    from_file = sr.upgrade(path, output=tmp_path / "out.onnx")
    model = ir.load(path)
    before = _serialized(model)
    monkeypatch.chdir(tmp_path)
    with monkeypatch.context() as patch:
        _refuse_files(patch)
        upgraded, report = sr.upgrade(model, return_report=True)
    assert report.status == "PASSED", report.error
    assert _serialized(model) == before
    _assert_same_model(upgraded, from_file)


def test_a_held_model_hands_its_big_weights_to_onnxruntime_apart():
    """As OrtValues over the model's own arrays; one of a type NumPy lacks (bfloat16) stays in the
    protobuf."""
    import ml_dtypes

    from scatter_rewrite.validate.held import Held

    model = ir.serde.deserialize_model(_max_model())
    model.graph.register_initializer(ir.Value(name="b16", const_value=ir.Tensor(
        np.zeros(1024, ml_dtypes.bfloat16), dtype=ir.DataType.BFLOAT16)))
    data, weights = Held(model).session_parts()
    assert sorted(weights) == ["weight"]
    assert weights["weight"].numpy().tobytes() == \
        model.graph.initializers["weight"].const_value.numpy().tobytes()
    kept = {t.name: t for t in onnx.ModelProto.FromString(data).graph.initializer}
    assert len(kept["b16"].raw_data) == 2048 and not kept["b16"].external_data
    assert kept["weight"].external_data and not kept["weight"].raw_data
    assert len(data) < 4096 + 2048  # (the 64 KiB weight is not in the protobuf)


@pytest.mark.parametrize("kind", ["ModelProto", "graphsurgeon"])
def test_a_validated_call_on_a_proto_or_graph_writes_no_file(kind, monkeypatch):
    proto = _max_model()
    if kind == "graphsurgeon":
        gs = pytest.importorskip("onnx_graphsurgeon")
        given = gs.import_onnx(proto)
        before = gs.export_onnx(given).SerializeToString(deterministic=True)
    else:
        given, before = proto, proto.SerializeToString(deterministic=True)
    with monkeypatch.context() as patch:
        _refuse_files(patch)
        lowered, report = sr.lower(given, opset=13, return_report=True)
    assert report.status == "PASSED" and type(lowered) is type(given)
    after = (gs.export_onnx(given) if kind == "graphsurgeon" else given)
    assert after.SerializeToString(deterministic=True) == before


@pytest.mark.parametrize("verb", ["lower", "litert"])
def test_validation_reads_the_constants_of_a_model_in_memory_without_changing_them(verb):
    """Planning validation reads each Constant's tensor; onnx_ir's get_const_tensor names it after
    its output, which changed the ModelProto given and the returned model (a name onnx2tf then
    converts wrongly): validated or not, the same bytes, and the input as it was."""
    from pathlib import Path

    from tests.helpers.exports import load_export

    model, inputs, _ = load_export(Path(__file__).parent / "data", "torch/mp_layer_dynamo18")
    assert any(n.op_type == "Constant" for n in model.graph.node)
    given = model.SerializeToString()

    def run(validate: bool) -> onnx.ModelProto:
        if verb == "lower":
            return sr.lower(model, opset=13, validate=validate, **({"inputs": inputs} if validate else {}))
        return sr.prepare(model, target="litert", validate=validate,
                          **({"inputs": inputs} if validate else {}))

    unvalidated, validated = run(False), run(True)
    assert validated.SerializeToString() == unvalidated.SerializeToString()
    assert model.SerializeToString() == given
