"""Moving a model down to an opset where one of its ops has no version at all (Gelu-20,
LayerNormalization-17, Celu-12, Mish-18): the op is replaced by its ONNX function body (the spec's
own definition of it), whose nodes are converted in turn (opset.py: _function_body_model).

What a PyTorch 2.13 dynamo export (opset 20 by default) carries besides its scatters: without this,
``lower --opset 13`` and ``tensorrt --trt-version 8.6`` stopped at "No Previous Version of Gelu".
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto

import scatter_rewrite as sr
from scatter_rewrite.errors import ConversionError
from scatter_rewrite.opset import convert_opset, since_version
from tests.helpers.runs import ort_run
from tests.helpers.cli import invoke
from tests.helpers.exports import load_export

F = TensorProto.FLOAT


def activation_model(op: str, opset: int, where: str = "main", dtype: int = F, reduction: str = "max",
                     **attrs) -> onnx.ModelProto:
    """y = op(x) * 1 + ScatterElements(reduction=max) of x: a function op beside a scatter that
    ``lower`` rewrites. where: "main", "if" (the op in both branches) or "function"."""
    shape = [4, 6]
    x = oh.make_tensor_value_info("x", dtype, shape)
    idx = oh.make_tensor_value_info("idx", TensorProto.INT64, [2, 6])
    upd = oh.make_tensor_value_info("upd", dtype, [2, 6])
    y = oh.make_tensor_value_info("y", dtype, shape)
    inputs = ["x"] if op != "LayerNormalization" else ["x", "scale", "bias"]
    inits = []
    if op == "LayerNormalization":
        np_type = onnx.helper.tensor_dtype_to_np_dtype(dtype)
        inits = [onnx.numpy_helper.from_array(np.linspace(0.5, 1.5, 6).astype(np_type), "scale"),
                 onnx.numpy_helper.from_array(np.linspace(-1, 1, 6).astype(np_type), "bias")]
    act = oh.make_node(op, inputs, ["a"], name="act_0", **attrs)
    scatter = oh.make_node("ScatterElements", ["a", "idx", "upd"], ["y"], name="scatter_0", axis=0, reduction=reduction)
    functions, opsets = [], [oh.make_opsetid("", opset)]
    if where == "main":
        graph = oh.make_graph([act, scatter], "main", [x, idx, upd], [y], inits)
    elif where == "if":
        branches = []
        for branch in ("then", "else"):
            node = oh.make_node(op, inputs, [f"y_{branch}"], name=f"act_{branch}", **attrs)
            branches.append(oh.make_graph([node], branch, [], [oh.make_tensor_value_info(f"y_{branch}", dtype, shape)]))
        graph = oh.make_graph(
            [oh.make_node("If", ["cond"], ["a"], then_branch=branches[0], else_branch=branches[1]), scatter],
            "main", [x, idx, upd, oh.make_tensor_value_info("cond", TensorProto.BOOL, [])], [y], inits)
    else:
        body = oh.make_node(op, [f"f_{i}" for i in inputs], ["f_out"], **attrs)
        functions = [oh.make_function("local", "Act", [f"f_{i}" for i in inputs], ["f_out"], [body],
                                      opset_imports=opsets)]
        call = oh.make_node("Act", inputs, ["a"], domain="local", name="call_0")
        graph = oh.make_graph([call, scatter], "main", [x, idx, upd], [y], inits)
        opsets = opsets + [oh.make_opsetid("local", 1)]
    model = oh.make_model(graph, opset_imports=opsets, functions=functions)
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return model


def activation_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    dtype = onnx.helper.tensor_dtype_to_np_dtype(model.graph.input[0].type.tensor_type.elem_type)
    out = {"x": (rng.standard_normal((4, 6)) * 3).astype(dtype), "idx": rng.integers(-4, 4, (2, 6)),
           "upd": rng.standard_normal((2, 6)).astype(dtype)}
    if any(i.name == "cond" for i in model.graph.input):
        out["cond"] = np.array(True)
    return out


def ops_of(model: onnx.ModelProto) -> set[str]:
    return {n.op_type for n, _ in sr.graph.iter_nodes(ir.serde.deserialize_model(model))}


# (op, the model's opset, attributes): a max scatter needs opset 18, so older ops (Celu-12) sit in
# an opset-18 model.
CASES = [("Gelu", 20, {}), ("Gelu", 20, {"approximate": "tanh"}), ("LayerNormalization", 18, {}),
         ("LayerNormalization", 17, {"axis": 1, "epsilon": 1e-3}), ("Mish", 18, {}), ("Celu", 18, {}),
         ("Celu", 18, {"alpha": 2.5})]


@pytest.mark.parametrize("op,opset,attrs", CASES, ids=[f"{c[0]}-{c[1]}-{'-'.join(map(str, c[2].values()))}" for c in CASES])
@pytest.mark.parametrize("target", [11, 13])
def test_lowered_below_the_op_equals_the_original(op, opset, attrs, target):
    model = activation_model(op, opset, **attrs)
    lowered, report = sr.lower(model, opset=target, validate=True, return_report=True)
    assert lowered.opset_import[0].version == target
    if since_version(op, target) is not None:  # (Celu-12 at 13: converted as any node, not expanded)
        assert op in ops_of(lowered) and report.validation["tolerance"] == "exact (bit for bit)"
        return
    assert op not in ops_of(lowered) and "CastLike" not in ops_of(lowered)  # (CastLike exists from 15 only)
    onnx.checker.check_model(lowered, full_check=True)
    for seed in range(3):
        inputs = activation_inputs(model, seed)
        np.testing.assert_allclose(ort_run(lowered, inputs)[0], ort_run(model, inputs)[0], rtol=1e-5, atol=1e-5)
    notes = [n for p in report.passes for n in p["notes"]]
    assert any(f"replaced by their ONNX function bodies: {op} x1" in n for n in notes), notes
    # A max scatter alone would be compared bit for bit: the body's float rounding is what allows the
    # tolerance, and the validation summary says so.
    assert report.validation["tolerance"].startswith("float outputs within float32")
    assert any(f"{op} replaced by its ONNX function body" in n for n in report.validation["notes"])


def test_celu_alpha_reaches_the_body():
    """Celu's body refers to its ``alpha``: the value written on the node, else Celu's default (1.0),
    not the default of the body op that reads it."""
    inputs = activation_inputs(activation_model("Celu", 18))
    results = {}
    for alpha in (None, 1.0, 2.5):
        model = activation_model("Celu", 18, **({} if alpha is None else {"alpha": alpha}))
        results[alpha] = ort_run(sr.lower(model, opset=11), inputs)[0]
        np.testing.assert_allclose(results[alpha], ort_run(model, inputs)[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(results[None], results[1.0])
    assert not np.allclose(results[1.0], results[2.5])


@pytest.mark.parametrize("where", ["if", "function"])
def test_in_subgraphs_and_functions(where):
    model = activation_model("Gelu", 20, where=where)
    lowered = sr.lower(model, opset=13)
    assert "Gelu" not in ops_of(lowered) and "Erf" in ops_of(lowered)
    assert all(i.version == 13 for f in lowered.functions for i in f.opset_import if i.domain == "")
    inputs = activation_inputs(model)
    np.testing.assert_allclose(ort_run(lowered, inputs)[0], ort_run(model, inputs)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype,said,reference", [(TensorProto.DOUBLE, "float64", True),
                                                   (TensorProto.FLOAT16, "float16", False)])
def test_double_and_float16(dtype, said, reference):
    """onnxruntime has no double Erf: validation runs that lowered model in onnx.reference (with our
    kernels), and says so."""
    model = activation_model("Gelu", 20, dtype=dtype)
    lowered, report = sr.lower(model, opset=13, validate=True, return_report=True)
    assert "Gelu" not in ops_of(lowered) and "Erf" in ops_of(lowered)
    assert ("onnx.reference" in report.validation["checked_against"]) == reference
    assert report.validation["tolerance"].startswith(f"float outputs within {said}")


def test_an_op_whose_attribute_refers_to_the_function_is_not_expanded():
    """Its value is known at a call site only, and the body would need it: a clear error."""
    model = activation_model("Celu", 18, where="function", reduction="none")
    body = model.functions[0].node[0]
    body.attribute.append(onnx.AttributeProto(name="alpha", ref_attr_name="a", type=onnx.AttributeProto.FLOAT))
    model.functions[0].attribute.append("a")
    model.graph.node[0].attribute.append(oh.make_attribute("a", 2.0))
    with pytest.raises(ConversionError, match="cannot convert Celu"):
        convert_opset(ir.serde.deserialize_model(model), 11)


def test_max_only_model_without_expansion_stays_bit_exact():
    model = activation_model("Relu", 18)
    _, report = sr.lower(model, opset=13, validate=True, return_report=True)
    assert report.validation["tolerance"] == "exact (bit for bit)"


def test_tensorrt_86_caps_a_gelu_export_at_17(tmp_path):
    """TensorRT 8.6's parser documents opsets up to 17: the Gelu-20 export now gets there."""
    model = activation_model("Gelu", 20)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    out, report = tmp_path / "out.onnx", tmp_path / "r.json"
    result = invoke("tensorrt", path, "--trt-version", "8.6", "-o", out, "--report", report)
    assert result.exit_code == 0, result.output
    written = onnx.load(out)
    assert written.opset_import[0].version == 17 and "Gelu" not in ops_of(written)
    notes = [n for p in json.loads(report.read_text())["models"][0]["passes"] for n in p["notes"]]
    assert any("Gelu x1" in n and "documents opsets up to 17" in n for n in notes), notes


# ---- a real export: PyTorch 2.13's dynamo exporter at its default opset (tests/data/torch/make_default_opset.py)

EXPORT = Path(__file__).parents[1] / "data" / "torch" / "gnn_gelu_layernorm_dynamo20"


@pytest.mark.parametrize("verb,options,opset", [("lower", {"opset": 13}, 13), ("tensorrt", {"trt_version": "8.6"}, 17)])
def test_default_opset_dynamo_export_matches_pytorch(verb, options, opset):
    model, inputs, pytorchs = load_export(EXPORT.parent, EXPORT.name)
    run_verb = {"lower": sr.lower, "tensorrt": sr.prepare_for_tensorrt}[verb]
    rewritten, report = run_verb(model, validate=True, inputs=inputs, return_report=True, **options)
    assert rewritten.opset_import[0].version == opset
    ops = ops_of(rewritten)
    assert not ops & {"Gelu", "LayerNormalization" if opset < 17 else "Gelu", "CastLike" if opset < 15 else "Gelu"}
    reductions = {n.attribute[0].s for n in rewritten.graph.node
                  if n.op_type.startswith("Scatter") and n.attribute and n.attribute[0].name == "reduction"}
    assert reductions <= {b"none"}  # both reductions lowered (13, 11: the opset lacks them; 8.6 ignores them)
    np.testing.assert_allclose(ort_run(rewritten, inputs)[0], pytorchs["y"], rtol=1e-5, atol=1e-5)
    assert "function bodies: " in " ".join(n for p in report.passes for n in p["notes"])


def test_default_opset_dynamo_export_to_11_takes_max_of_int64_as_where():
    """Below 12, Max takes float types only; this export takes the Max of int64 shape values, which
    on integers is Where(Greater(a, b), a, b): exact, no lossy cast."""
    model, inputs, pytorchs = load_export(EXPORT.parent, EXPORT.name)
    lowered = sr.lower(model, opset=11, validate=True, inputs=inputs)
    assert "Max" not in ops_of(lowered)
    np.testing.assert_allclose(ort_run(lowered, inputs)[0], pytorchs["y"], rtol=1e-5, atol=1e-5)


def test_cast_like_alone_stays_bit_exact():
    """CastLike (opset 15) going to 13 becomes its body, one Cast: exact, so a max scatter's model is
    still validated bit for bit."""
    x = oh.make_tensor_value_info("x", TensorProto.DOUBLE, [4, 6])
    like = oh.make_tensor_value_info("like", F, [1])
    idx = oh.make_tensor_value_info("idx", TensorProto.INT64, [2, 6])
    upd = oh.make_tensor_value_info("upd", F, [2, 6])
    nodes = [oh.make_node("CastLike", ["x", "like"], ["a"]),
             oh.make_node("ScatterElements", ["a", "idx", "upd"], ["y"], axis=0, reduction="max")]
    model = oh.make_model(oh.make_graph(nodes, "main", [x, like, idx, upd], [oh.make_tensor_value_info("y", F, [4, 6])]),
                          opset_imports=[oh.make_opsetid("", 18)])
    model.ir_version = 10
    lowered, report = sr.lower(model, opset=13, validate=True, return_report=True)
    assert "CastLike" not in ops_of(lowered) and "Cast" in ops_of(lowered)
    assert report.validation["tolerance"] == "exact (bit for bit)"
    assert any("function bodies: CastLike x1" in n and "round" not in n for p in report.passes for n in p["notes"])


# ---- bodies of different sizes in one model: the dims a splice writes never claim two sizes equal

def two_layer_norms_model(opset: int, rows: str) -> onnx.ModelProto:
    """A CLIP-like pair: LayerNormalization over text [B, S, 8] and over image [B, T, 8], S and T
    dynamic. rows: "dims" (the norms read the inputs), "reshape" (each input flattened to [-1, 8]
    first, rows of no declared size) or "function" (one model-local function holding the norm,
    called for each)."""
    d = 8
    rng = np.random.default_rng(3)
    inits = [onnx.numpy_helper.from_array(rng.standard_normal(d).astype(np.float32), n)
             for n in ("s_text", "b_text", "s_image", "b_image")]
    nodes, functions, imports = [], [], [oh.make_opsetid("", opset)]
    if rows == "reshape":
        inits.append(onnx.numpy_helper.from_array(np.array([-1, d], np.int64), "rows"))
        nodes += [oh.make_node("Reshape", [x, "rows"], [f"{x}_rows"]) for x in ("text", "image")]
    if rows == "function":
        norm = oh.make_node("LayerNormalization", ["fx", "fs", "fb"], ["fy"], axis=-1, epsilon=1e-5)
        functions = [oh.make_function("local", "Norm", ["fx", "fs", "fb"], ["fy"], [norm],
                                      opset_imports=[oh.make_opsetid("", opset)])]
        imports.append(oh.make_opsetid("local", 1))
    source = {"text": "text_rows", "image": "image_rows"} if rows == "reshape" else {
        "text": "text", "image": "image"}
    for x in ("text", "image"):
        norm_op = ("Norm", "local") if rows == "function" else ("LayerNormalization", "")
        attrs = {} if rows == "function" else {"axis": -1, "epsilon": 1e-5}
        nodes += [oh.make_node(norm_op[0], [source[x], f"s_{x}", f"b_{x}"], [f"{x}_norm"],
                               domain=norm_op[1], **attrs),
                  oh.make_node("Mul", [f"{x}_norm", f"{x}_norm"], [f"{x}_out"])]
    shapes = ([None, d], [None, d]) if rows == "reshape" else (["B", "S", d], ["B", "T", d])
    graph = oh.make_graph(
        nodes, "clip_like",
        [oh.make_tensor_value_info("text", F, ["B", "S", d]),
         oh.make_tensor_value_info("image", F, ["B", "T", d])],
        [oh.make_tensor_value_info("text_out", F, shapes[0]),
         oh.make_tensor_value_info("image_out", F, shapes[1])], inits)
    model = oh.make_model(graph, opset_imports=imports, functions=functions)
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def run_as_a_user_does(model: onnx.ModelProto, inputs: dict) -> list[np.ndarray]:
    """onnxruntime with default session options: graph optimizations and memory reuse on."""
    session = ort.InferenceSession(model.SerializeToString(), ort.SessionOptions(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


@pytest.mark.parametrize("rows", ["dims", "reshape", "function"])
@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("target", [11, 13, 16])
def test_two_layer_norms_of_different_row_counts_run_in_onnxruntime(opset, rows, target):
    """Each LayerNormalization becomes its body: the bodies' values must not share a symbolic dim
    (ONNX inference names unknown dims unk__0, unk__1... afresh in each body), else onnxruntime
    plans one buffer for both and fails at run time ("Shape mismatch attempting to re-use
    buffer")."""
    model = two_layer_norms_model(opset, rows)
    lowered = sr.lower(model, opset=target, validate=False)
    assert "LayerNormalization" not in ops_of(lowered)
    rng = np.random.default_rng(0)
    for s, t in ((51, 33), (33, 51), (3, 70)):
        inputs = {"text": rng.standard_normal((2, s, 8)).astype(np.float32),
                  "image": rng.standard_normal((2, t, 8)).astype(np.float32)}
        for got, want in zip(run_as_a_user_does(lowered, inputs), run_as_a_user_does(model, inputs)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
