"""``upgrade`` done on the parsed file (passes/upgrade.py: upgrade_proto), which the pipeline takes
for flat graphs where the upgrade is only renames and the export holds no pattern a note names
(pipeline.parsed_form): the same model and report as the IR path, and the IR path for everything
else."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto

import scatter_rewrite.pipeline as pipeline
from scatter_rewrite.errors import InvalidModelError
from scatter_rewrite.testing import external_weights_model, legacy_chain_model, scatter_model

PROTO_PATH_MODELS = {
    "chain opset 10": lambda: legacy_chain_model(300),
    "opset 9": lambda: scatter_model("Scatter", opset=9, axis=1),
    "opset 13, deprecated Scatter": lambda: scatter_model("Scatter", opset=13, axis=-1),
    "int32 indices, int8 data": lambda: scatter_model("Scatter", opset=10, indices_type=TensorProto.INT32,
                                                      data_type=TensorProto.INT8),
    "dynamic shapes": lambda: scatter_model("Scatter", opset=10, data_shape=("n", 5), indices_shape=("m", 5), axis=-2),
    "nothing to rename": lambda: scatter_model("ScatterElements", opset=13),
}


def both_paths(tmp_path, model: onnx.ModelProto, monkeypatch, **options):
    source = tmp_path / "m.onnx"
    onnx.save(model, source)
    fast = pipeline.rewrite_file("upgrade", source, options=options, output=tmp_path / "fast.onnx", validate=False)
    with monkeypatch.context() as patch:
        patch.setattr(pipeline, "parsed_form", lambda *_: None)  # the IR path, always
        ir_path = pipeline.rewrite_file("upgrade", source, options=options, output=tmp_path / "ir.onnx",
                                        validate=False)
    return fast, ir_path, onnx.load(tmp_path / "fast.onnx"), onnx.load(tmp_path / "ir.onnx")


def node_summaries(model: onnx.ModelProto) -> list:
    return [(n.op_type, n.name, list(n.input), list(n.output), [(a.name, onnx.helper.get_attribute_value(a)) for a in n.attribute])
            for n in model.graph.node]


@pytest.fixture
def ir_forbidden(monkeypatch):
    def refuse(*_):
        raise AssertionError("the IR path was taken")

    monkeypatch.setattr(pipeline, "to_ir", refuse)


# Every model with every target opset at or above its own (below would be a downgrade).
CASES = [(name, opset) for name, make in PROTO_PATH_MODELS.items() for opset in (None, 11, 13)
         if opset is None or opset >= make().opset_import[0].version]


@pytest.mark.parametrize("name, opset", CASES)
def test_same_model_and_report_as_the_ir_path(tmp_path, monkeypatch, name, opset):
    fast, ir_path, a, b = both_paths(tmp_path, PROTO_PATH_MODELS[name](), monkeypatch, opset=opset)
    assert fast.passes == ir_path.passes
    assert node_summaries(a) == node_summaries(b)
    assert [(o.domain, o.version) for o in a.opset_import] == [(o.domain, o.version) for o in b.opset_import]
    assert a.ir_version == b.ir_version
    onnx.checker.check_model(a, full_check=True)


def test_the_chain_never_reaches_the_ir(tmp_path, ir_forbidden):
    source = tmp_path / "chain.onnx"
    onnx.save(legacy_chain_model(1000), source)
    outcome = pipeline.rewrite_file("upgrade", source, output=tmp_path / "out.onnx", validate=False)
    (result,) = outcome.passes
    assert len(result["rewritten"]) == 100 and result["notes"] == ["default-domain opset 10 -> 11 (0 other node(s) converted)"]
    out = onnx.load(tmp_path / "out.onnx")
    assert {n.op_type for n in out.graph.node} == {"Add", "Mul", "ScatterElements"}


@pytest.mark.parametrize("make", [
    lambda tmp: scatter_model("Scatter", opset=10, where="if"),  # a subgraph
    lambda tmp: scatter_model("Scatter", opset=10, where="function"),  # a local function
    lambda tmp: onnx.load(external_weights_model(tmp, 1 << 16)),  # external data
], ids=["if", "function", "external data"])
def test_other_models_take_the_ir_path(tmp_path, ir_forbidden, make):
    source = tmp_path / "m.onnx"
    model = make(tmp_path)
    onnx.save(model, source)
    with pytest.raises(AssertionError, match="IR path"):
        pipeline.rewrite_file("upgrade", source, output=tmp_path / "out.onnx", validate=False)


def test_a_node_whose_schema_changes_takes_the_ir_path(tmp_path, ir_forbidden):
    """Relu's schema is the same at 10 and 11 and changes at 13: going to 13 needs the converter."""
    model = scatter_model("Scatter", opset=10)
    model.graph.node.append(onnx.helper.make_node("Relu", ["output"], ["z"]))
    model.graph.output.append(onnx.helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 5]))
    source = tmp_path / "m.onnx"
    onnx.save(model, source)
    pipeline.rewrite_file("upgrade", source, options={"opset": 11}, output=tmp_path / "a.onnx", validate=False)
    with pytest.raises(AssertionError, match="IR path"):
        pipeline.rewrite_file("upgrade", source, options={"opset": 13}, output=tmp_path / "b.onnx", validate=False)


def test_an_accumulating_export_takes_the_ir_path(tmp_path, ir_forbidden):
    """Only the IR path computes the export's notes: a scatter read by an Add may have one."""
    model = scatter_model("Scatter", opset=10)
    model.graph.node.append(onnx.helper.make_node("Add", ["output", "output"], ["z"]))
    model.graph.output.append(onnx.helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 5]))
    source = tmp_path / "m.onnx"
    onnx.save(model, source)
    with pytest.raises(AssertionError, match="IR path"):
        pipeline.rewrite_file("upgrade", source, output=tmp_path / "out.onnx", validate=False)


def test_validation_writes_what_the_parsed_form_writes(tmp_path):
    """Validation reads the original's IR for its plan; the written model is the parsed form's."""
    source = tmp_path / "m.onnx"
    onnx.save(scatter_model("Scatter", opset=10), source)
    checked = pipeline.rewrite_file("upgrade", source, output=tmp_path / "a.onnx", validate=True)
    written = pipeline.rewrite_file("upgrade", source, output=tmp_path / "b.onnx", validate=False)
    assert (checked.status, written.status) == ("PASSED", "WRITTEN")
    assert checked.passes == written.passes
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()


@pytest.mark.parametrize("make, message", [
    (lambda: scatter_model("Scatter", opset=10, axis=2), "axis=2 is out of range for rank 2"),
    (lambda: scatter_model("Scatter", opset=10, indices_shape=(2, 3), updates_shape=(2, 4)), "differs from updates"),
    (lambda: scatter_model("Scatter", opset=10, data_type=TensorProto.BFLOAT16), "needs ScatterElements-13"),
])
def test_same_errors(tmp_path, make, message):
    source = tmp_path / "m.onnx"
    onnx.save(make(), source)
    errors = []
    for form in (pipeline.parsed_form, lambda *_: None):  # the parsed file's, the IR's
        with pytest.MonkeyPatch.context() as patch, pytest.raises(InvalidModelError, match=message) as e:
            patch.setattr(pipeline, "parsed_form", form)
            pipeline.rewrite_file("upgrade", source, output=tmp_path / "out.onnx", validate=False)
        errors.append(str(e.value))
    assert errors[0] == errors[1]
    assert not (tmp_path / "out.onnx").exists()
