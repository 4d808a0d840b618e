"""``tensorrt --fix-dim NAME=SIZE``: a reduction whose number of updates is dynamic is lowered for
TensorRT 8.6 once that dimension is fixed, and validated on inputs of that size."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto

import scatter_rewrite as sr
from scatter_rewrite.readiness import check
from scatter_rewrite.evaluator import scatter_elements
from scatter_rewrite.model_io import load_model
from scatter_rewrite.testing import scatter_model

from tests.helpers.models import gnn_model
from scatter_rewrite.validate import run_onnxruntime
from tests.helpers.cli import invoke

ROWS, FEATURES = 10, 3



def scatter_ops(model: onnx.ModelProto) -> list[tuple[str, str]]:
    found = []
    for node in model.graph.node:
        if node.op_type.startswith("Scatter"):
            reduction = next((a.s.decode() for a in node.attribute if a.name == "reduction"), "none")
            found.append((node.op_type, reduction))
    return found


@pytest.mark.parametrize("reduction", ["add", "max"])
def test_cli_fixes_the_edge_count_and_lowers_for_tensorrt_86(tmp_path, reduction):
    source, out, report = tmp_path / "gnn.onnx", tmp_path / "gnn.trt.onnx", tmp_path / "r.json"
    onnx.save(gnn_model(reduction, nodes=ROWS, edges="E", feats=FEATURES, expand_to="shape"), source)
    before = source.read_bytes()

    left = invoke("tensorrt", source, "--trt-version", "8.6", "-o", tmp_path / "no.onnx")
    assert left.exit_code == 1 and not (tmp_path / "no.onnx").exists(), left.output
    assert "number of updates is not static" in left.stderr and "--fix-dim" in left.stderr
    assert not check(load_model(source), "tensorrt-8.6")[0].fix is None  # check names the fix

    done = invoke("tensorrt", source, "--trt-version", "8.6", "--fix-dim", "E=40", "-o", out, "--report", report)
    assert done.exit_code == 0, done.output
    assert source.read_bytes() == before
    lowered = onnx.load(out)
    assert scatter_ops(lowered) == [("ScatterND", "none")]  # the one unique-target ScatterND of the network
    dims = {v.name: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim] for v in lowered.graph.input}
    assert dims["dst"] == [40] and dims["msg"] == [40, FEATURES]
    validation = json.loads(report.read_text())["models"][0]["validation"]
    assert validation and "max_abs_diff" in validation  # proven in onnxruntime on E = 40 inputs
    assert invoke("check", out, "--target", "tensorrt-8.6").exit_code == 0

    rng = np.random.default_rng(1)
    x = rng.standard_normal((ROWS, FEATURES)).astype(np.float32)
    dst = rng.integers(-ROWS, ROWS, 40)
    msg = rng.standard_normal((40, FEATURES)).astype(np.float32)
    (y,) = run_onnxruntime(str(out), {"x": x, "dst": dst, "msg": msg})
    index = np.broadcast_to(dst[:, None], msg.shape)
    expected = scatter_elements(x, index, msg, axis=0, reduction=reduction)
    if reduction == "max":
        np.testing.assert_array_equal(y, expected)
    else:
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("where", ["if", "function"])
def test_api_fixes_dims_seen_in_subgraphs_and_functions(where):
    model = scatter_model("ScatterElements", opset=18, reduction="min", data_shape=(6, 4),
                          indices_shape=("n", 4), where=where)
    with pytest.raises(sr.ConversionError, match="number of updates is not static"):
        sr.prepare_for_tensorrt(model, trt_version="8.6")
    lowered = sr.prepare_for_tensorrt(model, trt_version="8.6", fix_dims={"n": 5}, validate=True)
    assert not any(n.op_type == "ScatterElements" for g in _graphs(lowered) for n in g.node)


def _graphs(model: onnx.ModelProto):
    yield model.graph
    for node in model.graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield a.g
    for function in model.functions:
        yield function


def test_unknown_dimension_name_is_a_one_line_error_and_writes_nothing(tmp_path):
    source = tmp_path / "gnn.onnx"
    onnx.save(gnn_model("add", nodes=ROWS, edges="E", feats=FEATURES, expand_to="shape"), source)
    result = invoke("tensorrt", source, "--trt-version", "8.6", "--fix-dim", "N=40")
    assert result.exit_code == 2  # an option the model does not fit: bad usage
    assert "no model input has a dimension named 'N'" in result.output and "are: E" in result.output
    assert "--fix-dim: no model input" in result.output  # (the pass says dim_sizes: the flag here)
    assert "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gnn.onnx"]


@pytest.mark.parametrize("bad", ["E", "E=", "E=0", "E=-3", "E=x", "=4"])
def test_malformed_fix_dim_is_bad_usage(tmp_path, bad):
    source = tmp_path / "gnn.onnx"
    onnx.save(gnn_model("add", nodes=ROWS, edges="E", feats=FEATURES, expand_to="shape"), source)
    result = invoke("tensorrt", source, "--fix-dim", bad)
    assert result.exit_code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gnn.onnx"]


def test_shape_arithmetic_is_folded_and_nothing_else():
    """Expand to Concat(Gather(Shape(x), 0), [3]): static once E is fixed. The float weight's Reshape
    and an integer computation that reads no shape stay as they are."""
    import onnx_ir as ir
    from onnx import numpy_helper

    from scatter_rewrite.passes.fix_dims import FixDimsPass

    vi = oh.make_tensor_value_info
    ints = {"zero": [0], "three": [3], "pair": [2, 3]}
    graph = oh.make_graph([
        oh.make_node("Shape", ["x"], ["sx"]),
        oh.make_node("Gather", ["sx", "zero"], ["rows"], axis=0),
        oh.make_node("Concat", ["rows", "three"], ["target"], axis=0),
        oh.make_node("Expand", ["row", "target"], ["grid"]),
        oh.make_node("Reshape", ["w", "pair"], ["w2"]),
        oh.make_node("Sub", ["pair", "zero"], ["pair2"]),
        oh.make_node("Reshape", ["w2", "pair2"], ["w3"], allowzero=0),
    ], "g", [vi("x", TensorProto.FLOAT, ["E", 3]), vi("row", TensorProto.FLOAT, [1, 3])],
        [vi("grid", TensorProto.FLOAT, None), vi("w3", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.arange(6, dtype=np.float32), "w")]
        + [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in ints.items()])
    model = ir.serde.deserialize_model(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]))
    result = FixDimsPass({"E": 4})(model)
    ops = [n.op_type for n in model.graph]
    assert "Shape" not in ops and "Concat" not in ops and "Gather" not in ops  # folded into 'target'
    assert model.graph.initializers["target"].const_value.numpy().tolist() == [4, 3]
    grid = next(n for n in model.graph if n.op_type == "Expand").outputs[0]
    assert list(grid.shape) == [4, 3]
    assert ops.count("Reshape") == 2 and "Sub" in ops  # the weight's constant Reshapes: no shape arithmetic
    assert any("1 shape computation(s) folded" in note for note in result.notes), result.notes


def test_torchscript_expand_shape_reading_no_shape_is_folded_and_lowered_for_86():
    """TorchScript writes ``dst.unsqueeze(1).expand(-1, F)``'s shape as ``Where(Equal(c, Mul(ConstantOfShape,
    -1)), ConstantOfShape, c)``: all constant, no Shape read, so ONNX inference leaves the scatter's
    indices [E, ?], and the updates cut to their shape too. As a shape operand it is folded once E is
    fixed, and the reduction is lowered."""
    vi, T = oh.make_tensor_value_info, TensorProto
    const = lambda name, values, shape=None: oh.make_node(  # noqa: E731
        "Constant", [], [name], value=oh.make_tensor(name, T.INT64, [len(values)] if shape is None else shape, values))
    graph = oh.make_graph([
        const("axes", [1]), oh.make_node("Unsqueeze", ["dst", "axes"], ["dst2"]),
        const("rank", [2]), oh.make_node("ConstantOfShape", ["rank"], ["ones"],
                                         value=oh.make_tensor("v", T.INT64, [1], [1])),
        const("minus_one", [-1], []), oh.make_node("Mul", ["ones", "minus_one"], ["minus_ones"]),
        const("wanted", [-1, FEATURES]), oh.make_node("Equal", ["wanted", "minus_ones"], ["keep"]),
        oh.make_node("Where", ["keep", "ones", "wanted"], ["target"]),
        oh.make_node("Expand", ["dst2", "target"], ["index"]),
        # the updates are cut to the indices' shape, as TorchScript writes scatter_add_
        oh.make_node("Shape", ["index"], ["index_shape"]), const("starts", [0, 0]),
        oh.make_node("Slice", ["msg", "starts", "index_shape"], ["updates"]),
        oh.make_node("ScatterElements", ["x", "index", "updates"], ["y"], axis=0, reduction="add", name="aggregate"),
    ], "ts_gnn", [vi("x", T.FLOAT, [ROWS, FEATURES]), vi("dst", T.INT64, ["E"]), vi("msg", T.FLOAT, ["E", FEATURES])],
        [vi("y", T.FLOAT, [ROWS, FEATURES])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 16)])
    assert check(ir.serde.deserialize_model(model), "tensorrt-8.6")[0].fix == "scatter-rewrite tensorrt --trt-version 8.6 --fix-dim E=SIZE"
    fixed = sr.prepare_for_tensorrt(model, trt_version="8.6", fix_dims={"E": 7}, validate=True)
    assert scatter_ops(fixed) == [("ScatterND", "none")]
    assert not [f for f in check(ir.serde.deserialize_model(fixed), "tensorrt-8.6") if f.blocked]


def test_a_topk_length_computed_from_constants_is_folded_and_its_outputs_made_static():
    # the forms' K is Reshape(Size(...)); once the op table step has made the Size a Constant,
    # only K being a length operand lets the sorted rows' shape (and a Shape of it) be static
    from scatter_rewrite.passes.fix_dims import settle_shapes

    model = ir.from_proto(onnx.parser.parse_model("""
    <ir_version: 10, opset_import: ["" : 18]>
    g (float[7] x) => (float[N] v, int64[N] i) {
        n = Constant <value = int64 {5}> ()
        one = Constant <value = int64[1] {1}> ()
        k = Reshape(n, one)
        v, i = TopK(x, k)
    }"""))
    assert settle_shapes(model) == 1
    (topk,) = [node for node in model.graph if node.op_type == "TopK"]
    assert [list(v.shape) for v in topk.outputs] == [[5], [5]]


def nonzero_scatter(rows="n") -> onnx.ModelProto:
    """A ScatterND add whose rows are those NonZero finds in ``keep``: its number of updates is
    counted from the data, whatever the size of the inputs."""
    nodes = [
        oh.make_node("NonZero", ["keep"], ["nz"], name="where_kept"),
        oh.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0], name="rows_kept"),
        oh.make_node("GatherND", ["u", "idx"], ["upd"], name="kept_updates"),
        oh.make_node("ScatterND", ["x", "idx", "upd"], ["y"], reduction="add", name="accumulate"),
    ]
    graph = oh.make_graph(
        nodes, "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [rows, 3]),
         oh.make_tensor_value_info("keep", TensorProto.BOOL, [rows]),
         oh.make_tensor_value_info("u", TensorProto.FLOAT, [rows, 3])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [rows, 3])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


@pytest.mark.parametrize("where", [None, "if", "function"])
def test_the_refusal_names_the_dimension_that_fixes_the_count(tmp_path, where):
    kw = {"where": where} if where else {}
    model = scatter_model("ScatterElements", opset=18, reduction="min", data_shape=(6, 4),
                          indices_shape=("n", 4), **kw)
    with pytest.raises(sr.ConversionError) as refused:
        sr.prepare_for_tensorrt(model, trt_version="8.6")
    assert "fix n to the size you run: fix_dims={'n': SIZE}" in str(refused.value)
    assert "NAME" not in str(refused.value)
    source = tmp_path / "m.onnx"
    onnx.save(gnn_model("add", nodes=ROWS, edges="E", feats=FEATURES, expand_to="shape"), source)
    said = invoke("tensorrt", source, "--trt-version", "8.6", "-o", tmp_path / "no.onnx")
    assert said.exit_code == 1 and "--fix-dim E=SIZE" in said.stderr and "NAME" not in said.stderr
    (finding,) = check(load_model(source), "tensorrt-8.6")
    assert finding.fix == "scatter-rewrite tensorrt --trt-version 8.6 --fix-dim E=SIZE"


@pytest.mark.parametrize("rows", ["n", 6])
def test_a_count_nonzero_finds_offers_no_fix_dim(tmp_path, rows):
    source = tmp_path / "m.onnx"
    onnx.save(nonzero_scatter(rows), source)
    said = invoke("tensorrt", source, "--trt-version", "8.6", "-o", tmp_path / "no.onnx")
    assert said.exit_code == 1 and not (tmp_path / "no.onnx").exists()
    assert "it counts what NonZero 'where_kept' finds in the data, so no --fix-dim makes it static" \
        in said.stderr
    assert "--fix-dim n" not in said.stderr and "NAME" not in said.stderr
    (finding,) = check(load_model(source), "tensorrt-8.6")
    assert finding.fix is None and not any("SIZE" in n for n in finding.notes)
    if rows == "n":  # and indeed: fixing the one named dimension leaves the count dynamic
        with pytest.raises(sr.ConversionError, match="no fix_dims= makes it static"):
            sr.prepare_for_tensorrt(onnx.load(source), trt_version="8.6", fix_dims={"n": 6})


def test_shapes_inferred_again_leave_a_sequence_a_sequence(caplog):
    # dynamo's EmbeddingBag: SequenceEmpty -> Loop -> ConcatFromSequence. Re-inference types what
    # was untyped, tensors only: a sequence typed as a tensor of its elements would make every
    # later inference fail (and the written model invalid)
    from pathlib import Path

    from scatter_rewrite.passes.fix_dims import settle_shapes
    from scatter_rewrite.type_inference import serialize_without_weights

    path = Path(__file__).resolve().parents[1] / "data" / "torch" / "embedding_bag_max_dynamo18.onnx"
    model = ir.load(path)
    sequences = [v for node in model.graph if node.op_type in ("SequenceEmpty", "Loop")
                 for v in node.outputs[:1]]
    with caplog.at_level("WARNING"):
        settle_shapes(model)
        settle_shapes(model)
    assert sequences and all(not isinstance(v.type, ir.TensorType) for v in sequences)
    onnx.shape_inference.infer_shapes(serialize_without_weights(model), check_type=True,
                                      strict_mode=True)
    assert not [r for r in caplog.records if "nference" in r.getMessage()]
