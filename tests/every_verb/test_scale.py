"""Scale behaviour (not timing): external data kept, the 2 GiB switch, per-node opset conversion,
model-local functions, in-place rewrites of external-data models, idempotence on a 10k-node chain.

Speed and memory are measured by benchmarks/bench_scale.py, never here.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto

import scatter_rewrite.model_io as model_io
from scatter_rewrite import testing
from scatter_rewrite.pipeline import VERBS, check_model, rewrite_file, run_passes
from scatter_rewrite.validate import run_onnxruntime
from tests.helpers.models import weight_bytes


# The options a verb cannot run without (prepare needs a target: the scatter-free one rewrites
# every scatter, as the other verbs' defaults do theirs).
REQUIRED_OPTIONS = {"prepare": {"target": "no-scatter"}}
VERBS_COVERED = list(VERBS)


def _hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _external_locations(path: Path) -> dict[str, str]:
    model = onnx.load(str(path), load_external_data=False)
    return {
        t.name: next(e.value for e in t.external_data if e.key == "location")
        for t in model.graph.initializer
        if t.data_location == TensorProto.EXTERNAL
    }


def _inputs_for(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for the models built here: x random, idx a permutation slice per row."""
    rng = np.random.default_rng(seed)
    model = onnx.load(str(path), load_external_data=False)
    inputs = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name == "idx":  # Scatter axis=1 on [1, C]: unique in-range columns
            cols = next(d.dim_value for i in model.graph.input if i.name == "x" for d in i.type.tensor_type.shape.dim[1:])
            inputs[vi.name] = rng.choice(cols, size=shape[1], replace=False).reshape(shape).astype(np.int64)
        else:
            inputs[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return inputs


# --------------------------------------------------------------------------- external data


@pytest.fixture
def external_model(tmp_path: Path) -> Path:
    # 4 weights of 16 x 256 float32 (16 KiB each, above the 1 KiB external threshold).
    return testing.external_weights_model(tmp_path / "in", 4 * 16 * 256 * 4, rows=16)


def test_every_verb_builds_its_passes_from_its_defaults_and_required_options():
    for verb in VERBS_COVERED:
        assert VERBS[verb].make_passes(**REQUIRED_OPTIONS.get(verb, {})), verb


@pytest.mark.parametrize("verb", VERBS_COVERED)
def test_external_data_kept_through_every_verb(verb: str, external_model: Path, tmp_path: Path):
    data = external_model.parent / "big.weights"
    before = {p: _hash(p) for p in (external_model, data)}
    weights = weight_bytes(external_model)
    output = tmp_path / "out" / f"model.{verb}.onnx"
    outcome = rewrite_file(verb, external_model, options=REQUIRED_OPTIONS.get(verb), output=output)
    assert outcome.status == ("PASSED" if outcome.modified else "UNCHANGED")
    # The inputs are untouched, byte for byte.
    assert {p: _hash(p) for p in before} == before
    # The output keeps its weights external, in a file beside it, byte-identical.
    locations = _external_locations(output)
    assert set(weights) <= set(locations)  # (fold may add its result as one more)
    for location in set(locations.values()):
        assert (output.parent / location).is_file()
    after = weight_bytes(output)
    for name, data in weights.items():
        assert after[name] == data, name
    check_model(output)
    inputs = _inputs_for(external_model)
    for expected, actual in zip(run_onnxruntime(external_model, inputs), run_onnxruntime(output, inputs)):
        np.testing.assert_array_equal(actual, expected)


def test_in_place_on_external_data_model(external_model: Path, tmp_path: Path):
    pristine = shutil.copytree(external_model.parent, tmp_path / "pristine")
    weights = weight_bytes(external_model)
    outcome = rewrite_file("upgrade", external_model, in_place=True)
    assert outcome.status == "PASSED" and outcome.output == str(external_model)
    assert outcome.validation["checked_against"].startswith("onnxruntime")
    check_model(external_model)
    model = onnx.load(str(external_model), load_external_data=False)
    assert [n.op_type for n in model.graph.node].count("ScatterElements") == 2
    assert {o.domain: o.version for o in model.opset_import}[""] == 11
    for location in set(_external_locations(external_model).values()):
        assert (external_model.parent / location).is_file()
    after = weight_bytes(external_model)
    assert all(after[k] == v for k, v in weights.items())
    # No staging folder left behind, and the rewritten model computes what the original did.
    assert not [p for p in external_model.parent.iterdir() if p.name.startswith(".scatter-rewrite-")]
    inputs = _inputs_for(external_model)
    expected = run_onnxruntime(pristine / external_model.name, inputs)
    np.testing.assert_array_equal(run_onnxruntime(external_model, inputs)[0], expected[0])


def _inline_weights_model(path: Path) -> Path:
    """Opset-10 model with two inline 64 KiB weights feeding Add and a Scatter."""
    w0 = np.arange(4 * 4096, dtype=np.float32).reshape(4, 4096)
    w1 = -w0
    graph = oh.make_graph(
        [oh.make_node("Add", ["x", "W0"], ["a"]), oh.make_node("Add", ["a", "W1"], ["b"]),
         oh.make_node("Scatter", ["b", "idx", "upd"], ["y"], axis=1)],
        "inline",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4096]),
         oh.make_tensor_value_info("idx", TensorProto.INT64, [1, 4]),
         oh.make_tensor_value_info("upd", TensorProto.FLOAT, [1, 4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4096])],
        [onnx.numpy_helper.from_array(w0, "W0"), onnx.numpy_helper.from_array(w1, "W1")],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 10)])
    model.ir_version = 7
    onnx.save(model, path)
    return path


def test_inline_model_stays_inline_below_the_limit(tmp_path: Path):
    source = _inline_weights_model(tmp_path / "inline.onnx")
    output = tmp_path / "out.onnx"
    rewrite_file("upgrade", source, output=output)
    assert _external_locations(output) == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inline.onnx", "out.onnx"]


def test_proto_limit_switches_to_external_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # 128 KiB of weights over a 64 KiB "protobuf limit": written with external data, validated.
    monkeypatch.setattr(model_io, "PROTO_LIMIT_BYTES", 64 * 1024)
    source = _inline_weights_model(tmp_path / "inline.onnx")
    weights = weight_bytes(source)
    output = tmp_path / "out" / "inline.upgraded.onnx"
    outcome = rewrite_file("upgrade", source, output=output)
    assert outcome.validation["max_abs_diff"] == 0.0
    locations = _external_locations(output)
    assert set(locations) == {"W0", "W1"}
    assert set(locations.values()) == {model_io.data_file_name(output)}
    assert (output.parent / model_io.data_file_name(output)).is_file()
    after = weight_bytes(output)
    assert all(after[k] == v for k, v in weights.items())
    check_model(output)


@pytest.mark.slow
def test_over_2gib_of_in_memory_weights_written_with_external_data(tmp_path: Path):
    # 3 x 768 MiB of ir.Tensor weights: a single protobuf cannot hold them.
    arrays = [np.full((49152, 4096), k + 0.5, np.float32) for k in range(3)]
    for k, a in enumerate(arrays):
        a[:, 0] = np.arange(a.shape[0], dtype=np.float32) + k
    assert sum(a.nbytes for a in arrays) > 2**31
    x = ir.val("x", ir.DataType.FLOAT, [1, 4096])
    graph = ir.Graph([x], [], nodes=[], name="big", opset_imports={"": 18})
    prev = x
    for k, a in enumerate(arrays):
        w = ir.Value(name=f"W{k}", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(a.shape),
                     const_value=ir.Tensor(a, name=f"W{k}"))
        graph.register_initializer(w)
        node = ir.node("Add", [prev, w], num_outputs=1)
        graph.append(node)
        prev = node.outputs[0]
    prev.name = "y"
    graph.outputs.append(prev)
    model = ir.Model(graph, ir_version=8)
    output = model_io.save_model(model, tmp_path / "big.onnx")
    assert set(_external_locations(output)) == {"W0", "W1", "W2"}
    assert (tmp_path / model_io.data_file_name(output)).stat().st_size == sum(a.nbytes for a in arrays)
    loaded = model_io.load_model(output)
    for k, a in enumerate(arrays):
        tensor = loaded.graph.initializers[f"W{k}"].const_value
        assert isinstance(tensor, ir.ExternalTensor)
        assert np.array_equal(tensor.numpy(), a)
        tensor.release()


@pytest.mark.slow
def test_over_2gib_external_data_model_round_trips_through_upgrade(tmp_path: Path):
    source = testing.external_weights_model(tmp_path / "in", int(2.1 * 2**30))
    data = source.parent / "big.weights"
    before = {p: _hash(p) for p in (source, data)}
    output = tmp_path / "out" / "big.upgraded.onnx"
    rewrite_file("upgrade", source, output=output)  # validated in onnxruntime
    assert {p: _hash(p) for p in before} == before
    locations = _external_locations(output)
    assert set(locations.values()) == {model_io.data_file_name(output)}
    # Weights are written in declaration order, densely: the data file is the input's, byte for byte.
    assert _hash(output.parent / model_io.data_file_name(output)) == before[data]
    check_model(output)


# --------------------------------------------------------------------------- per-node conversion

# Attributes that become inputs on the way from opset 10: Clip/Pad at 11, Split/Squeeze/Unsqueeze/ReduceSum at 13.
_MOVED = {11: {"Clip": {"min", "max"}, "Pad": {"pads", "value"}},
          13: {"Clip": {"min", "max"}, "Pad": {"pads", "value"}, "Split": {"split"},
               "Squeeze": {"axes"}, "Unsqueeze": {"axes"}, "ReduceSum": {"axes"}}}


def _schema_change_block(k: int, prev: str) -> tuple[list[onnx.NodeProto], str]:
    """[2, 4, 6] -> [2, 4, 6] through ops whose schema changes between opset 10 and 13."""
    n = lambda *a, **kw: oh.make_node(*a, name=f"{a[0].lower()}_{k}_{len(nodes)}", **kw)  # noqa: E731
    nodes: list[onnx.NodeProto] = []
    nodes.append(n("Clip", [prev], [f"c{k}"], min=-0.5 - 0.01 * k, max=0.5 + 0.01 * k))
    nodes.append(n("Pad", [f"c{k}"], [f"p{k}"], pads=[0, 0, 1, 0, 0, 1], value=0.25))
    nodes.append(n("Split", [f"p{k}"], [f"s{k}a", f"s{k}b"], axis=2, split=[3, 5]))
    nodes.append(n("Unsqueeze", [f"s{k}a"], [f"u{k}"], axes=[0]))
    nodes.append(n("Squeeze", [f"u{k}"], [f"q{k}"], axes=[0]))
    nodes.append(n("ReduceSum", [f"s{k}b"], [f"r{k}"], axes=[2], keepdims=1))
    nodes.append(n("Add", [f"q{k}", f"r{k}"], [f"a{k}"]))
    nodes.append(n("Scatter", [f"a{k}", "sidx", "supd"], [f"sc{k}"], axis=2))
    nodes.append(n("Concat", [f"sc{k}", f"a{k}"], [f"o{k}"], axis=2))
    return nodes, f"o{k}"


def _schema_change_chain(blocks: int) -> onnx.ModelProto:
    nodes, prev = [], "x"
    for k in range(blocks):
        block, prev = _schema_change_block(k, prev)
        nodes += block
    nodes.append(oh.make_node("Identity", [prev], ["y"]))
    inits = [
        oh.make_tensor("sidx", TensorProto.INT64, [2, 4, 1], [2, 0, 1, 2, 0, 1, 2, 0]),
        oh.make_tensor("supd", TensorProto.FLOAT, [2, 4, 1], [9.0] * 8),
    ]
    graph = oh.make_graph(nodes, "schema_changes", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 6])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 6])], inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 10)])
    model.ir_version = 7
    onnx.checker.check_model(model, full_check=True)
    return model


def _assert_converted(nodes, target: int) -> None:
    for node in nodes:
        moved = _MOVED[target].get(node.op_type, set())
        names = {a.name for a in node.attribute}
        assert not names & moved, f"{node.op_type} still has {names & moved} at opset {target}"
    assert "Scatter" not in {node.op_type for node in nodes}


@pytest.mark.parametrize("target", [11, 13])
def test_per_node_conversion_of_ops_whose_schema_changes(tmp_path: Path, target: int):
    source = tmp_path / "chain.onnx"
    onnx.save(_schema_change_chain(60), source)  # 60 identical blocks: the converter cache is reused
    output = tmp_path / "chain.upgraded.onnx"
    outcome = rewrite_file("upgrade", source, output=output, options={"opset": target})
    assert outcome.validation["max_abs_diff"] == 0.0  # validated in onnxruntime by the pipeline
    check_model(output)
    model = onnx.load(str(output))
    assert {o.domain: o.version for o in model.opset_import}[""] == target
    _assert_converted(model.graph.node, target)
    assert sum(n.op_type == "ScatterElements" for n in model.graph.node) == 60
    names = {n.name for n in model.graph.node}
    assert {"clip_0_0", "pad_59_1", "reducesum_7_5"} <= names  # converted nodes keep their names
    # And on our own inputs, independently of the pipeline's validation.
    inputs = {"x": np.random.default_rng(3).standard_normal((2, 4, 6)).astype(np.float32) * 2}
    np.testing.assert_array_equal(run_onnxruntime(output, inputs)[0], run_onnxruntime(source, inputs)[0])


def test_the_converter_only_ever_sees_one_node_models(monkeypatch: pytest.MonkeyPatch):
    """Linear by construction: no whole-model conversion, one converter call per distinct node."""
    import onnx.version_converter

    seen: list[int] = []
    real = onnx.version_converter.convert_version

    def spy(model, target):
        seen.append(len(model.graph.node))
        return real(model, target)

    monkeypatch.setattr(onnx.version_converter, "convert_version", spy)
    model = ir.serde.deserialize_model(_schema_change_chain(200))  # 1,800 nodes
    (result,) = run_passes(model, VERBS["upgrade"].make_passes(opset=13))
    assert result.modified
    assert seen and set(seen) == {1}
    # Clip's bounds differ per block (200 signatures); the other converted ops (Pad, Split,
    # Unsqueeze, Squeeze, ReduceSum, Add, Concat, and the final Identity) repeat exactly. Seven of
    # them convert twice: typed in the first block (x is declared), untyped in the later ones (no
    # value_info, and a conversion fed an untyped input keeps none of the dtypes it guessed).
    assert len(seen) == 200 + 8 + 7
    _assert_converted(ir.serde.serialize_model(model).graph.node, 13)


def _block_calls_model() -> onnx.ModelProto:
    body = [
        oh.make_node("Unsqueeze", ["fx"], ["fu"], axes=[0]),
        oh.make_node("ReduceSum", ["fu"], ["fr"], axes=[0], keepdims=0),
        oh.make_node("Clip", ["fr"], ["fc"], min=-1.0, max=1.0),
        oh.make_node("Split", ["fc"], ["fa", "fb"], axis=1, split=[2, 2]),
        oh.make_node("Concat", ["fb", "fa"], ["fy"], axis=1),
    ]
    function = oh.make_function(testing.LOCAL_DOMAIN, "Block", ["fx"], ["fy"], body,
                                opset_imports=[oh.make_opsetid("", 10)])
    nodes = [
        oh.make_node("Block", ["x"], ["b1"], domain=testing.LOCAL_DOMAIN),
        oh.make_node("Block", ["b1"], ["b2"], domain=testing.LOCAL_DOMAIN),
        oh.make_node("Scatter", ["b2", "sidx", "supd"], ["y"], axis=1),
    ]
    graph = oh.make_graph(
        nodes, "calls", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        [oh.make_tensor("sidx", TensorProto.INT64, [3, 1], [3, 0, 2]),
         oh.make_tensor("supd", TensorProto.FLOAT, [3, 1], [7.0, 8.0, 9.0])],
    )
    model = oh.make_model(graph, functions=[function],
                          opset_imports=[oh.make_opsetid("", 10), oh.make_opsetid(testing.LOCAL_DOMAIN, 1)])
    model.ir_version = 8
    return model


def test_model_local_function_is_converted(tmp_path: Path):
    source = tmp_path / "function.onnx"
    onnx.save(_block_calls_model(), source)
    output = tmp_path / "function.upgraded.onnx"
    outcome = rewrite_file("upgrade", source, output=output, options={"opset": 13})
    assert outcome.validation["max_abs_diff"] == 0.0
    check_model(output)
    model = onnx.load(str(output))
    (function,) = model.functions
    assert {o.domain: o.version for o in function.opset_import}[""] == 13
    _assert_converted(function.node, 13)
    assert {"Unsqueeze", "ReduceSum", "Clip", "Split", "Concat"} <= {n.op_type for n in function.node}
    inputs = {"x": np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)}
    np.testing.assert_array_equal(run_onnxruntime(output, inputs)[0], run_onnxruntime(source, inputs)[0])


# --------------------------------------------------------------------------- idempotence at scale


def test_second_upgrade_of_a_10k_chain_changes_nothing(tmp_path: Path):
    source = tmp_path / "chain.onnx"
    onnx.save(testing.legacy_chain_model(10_000), source)
    first = rewrite_file("upgrade", source, output=tmp_path / "once.onnx", validate=False)
    assert len(first.passes[0]["rewritten"]) == 1_000
    second = rewrite_file("upgrade", tmp_path / "once.onnx", output=tmp_path / "twice.onnx")
    assert not any(p["modified"] for p in second.passes)
    assert second.passes[0]["rewritten"] == [] and second.passes[0]["notes"] == []
    assert second.status == "UNCHANGED" and second.validation is None  # (nothing to validate)
    once, twice = onnx.load(str(tmp_path / "once.onnx")), onnx.load(str(tmp_path / "twice.onnx"))
    assert [n.op_type for n in once.graph.node] == [n.op_type for n in twice.graph.node]
    assert len(twice.graph.node) == 10_000
