"""Exact equivalents inside a target's op table (passes/op_equivalents.py): an op the table lacks is
written with ops it has (Identity removed, IsNaN as Equal(x, x), CastLike as Cast, a constant
If inlined) where that is exact, and left as it is where it is not; onnxruntime gives the
original's outputs bit for bit, and Equal(x, x) is IsNaN's negation in every runtime here too."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnx_ir as ir
import pytest

from scatter_rewrite.passes.op_equivalents import write_within_table
from tests.helpers.equivalence import assert_bits, assert_same
from tests.helpers.models import op_types
from tests.helpers.runs import ort_run

HEADER = '<ir_version: 10, opset_import: ["" : {opset}{more}]>\n'


def _parsed(text: str, opset: int = 18, more: str = "") -> onnx.ModelProto:
    model = onnx.parser.parse_model(HEADER.format(opset=opset, more=more) + text)
    onnx.checker.check_model(model, full_check=True)
    return model


def _within_table(model: onnx.ModelProto, lacks: set[str]) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` after the rewrite for a table without ``lacks``; checked by onnx."""
    graph = ir.from_proto(model)
    done = write_within_table(graph, lambda op, scope: op not in lacks)
    written = ir.to_proto(graph)
    onnx.checker.check_model(written, full_check=True)
    return written, done


def _assert_outputs_unchanged(original, written, feeds) -> None:
    assert [o.name for o in written.graph.output] == [o.name for o in original.graph.output]
    for got, expected in zip(ort_run(written, feeds, optimize=False),
                             ort_run(original, feeds, optimize=False)):
        if got.dtype.kind == "f":
            assert_bits(got, expected)
        else:
            assert_same(got, expected)


X = np.array([1.5, -2.0, 0.0, 3.0], np.float32)


def test_identity_is_removed_and_a_graph_output_keeps_its_name():
    model = _parsed("""g (float[4] x) => (float[4] y) {
        a = Relu(x)
        b = Identity(a)
        c = Neg(b)
        y = Identity(c)
    }""")
    written, done = _within_table(model, {"Identity"})
    assert op_types(written) == ["Relu", "Neg"] and len(done) == 2
    _assert_outputs_unchanged(model, written, {"x": X})


def test_identity_in_an_if_branch_and_a_function_is_removed():
    model = _parsed("""g (float[4] x, bool c) => (float[4] z, float[4] w) {
        a = Relu(x)
        z = If(c) <then_branch = t () => (float[4] t1) { t0 = Neg(a)  t1 = Identity(t0) },
                   else_branch = e () => (float[4] e1) { e0 = Abs(a)  e1 = Identity(e0) }>
        w = local.F(x)
    }
    <domain: "local", opset_import: ["" : 18]>
    F (p) => (q) {
        r = Identity(p)
        q = Sigmoid(r)
    }""", more=', "local" : 1')
    written, _ = _within_table(model, {"Identity"})
    assert "Identity" not in op_types(written)
    for c in (True, False):
        _assert_outputs_unchanged(model, written, {"x": X, "c": np.array(c)})


KEPT = {
    # a graph input handed to an output
    "input to output": """g (float[4] x) => (float[4] y) { y = Identity(x) }""",
    # its input is an output too: renaming it would give two outputs one name
    "output to output": """g (float[4] x) => (float[4] a, float[4] y) {
        a = Relu(x)
        y = Identity(a)
    }""",
    # If branches returning a value of the enclosing graph
    "outer value out of a branch": """g (float[4] x, bool c) => (float[4] z) {
        a = Relu(x)
        z = If(c) <then_branch = t () => (float[4] t1) { t1 = Identity(a) },
                   else_branch = e () => (float[4] e1) { e1 = Identity(a) }>
    }""",
}


@pytest.mark.parametrize("name", sorted(KEPT))
def test_an_identity_that_must_stay_stays(name):
    model = _parsed(KEPT[name])
    written, done = _within_table(model, {"Identity"})
    assert done == [] and op_types(written) == op_types(model)
    feeds = {"x": X, "c": np.array(True)}
    _assert_outputs_unchanged(model, written, {k: v for k, v in feeds.items()
                                          if k in {i.name for i in model.graph.input}})


def test_onnx_irs_identity_elimination_names_two_outputs_alike():
    # why the rewrite has its own (onnx_ir 1.1.0): when it is fixed, use it
    from onnx_ir.passes.common import IdentityEliminationPass

    model = ir.from_proto(_parsed(KEPT["output to output"]))
    IdentityEliminationPass()(model)
    assert [v.name for v in model.graph.outputs] == ["y", "y"]


def test_a_function_input_handed_to_its_output_stays():
    model = _parsed("""g (float[4] x) => (float[4] w) { w = local.F(x) }
    <domain: "local", opset_import: ["" : 18]>
    F (p) => (q) { q = Identity(p) }""", more=', "local" : 1')
    written, done = _within_table(model, {"Identity"})
    assert done == [] and "Identity" in op_types(written)


NAN_INPUTS = {
    "h": np.array([1, np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 65504], np.float16),
    "f": np.array([1, np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 3.4e38], np.float32),
    "d": np.array([1, np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1e308], np.float64),
}


def _is_nan_model(opset: int = 18) -> onnx.ModelProto:
    """Per float type: Not(IsNaN(x)) (as the sort form writes it) and IsNaN(x) alone."""
    body = "\n".join(f"{t}n = IsNaN({t})  {t}c = Not({t}n)  {t}m = IsNaN({t})" for t in "hfd")
    outputs = ", ".join(f"bool[8] {t}c, bool[8] {t}m" for t in "hfd")
    return _parsed(f"g (float16[8] h, float[8] f, double[8] d) => ({outputs}) {{ {body} }}", opset)


@pytest.mark.parametrize("opset", [11, 13, 18, 20])
def test_is_nan_becomes_equal_of_x_and_x(opset):
    model = _is_nan_model(opset)
    written, done = _within_table(model, {"IsNaN"})
    # each Not(IsNaN(x)) one Equal; each lone IsNaN(x) Not(Equal(x, x))
    assert sorted(op_types(written)) == sorted(["Equal"] * 6 + ["Not"] * 3)
    assert len(done) == 6
    _assert_outputs_unchanged(model, written, NAN_INPUTS)


def test_is_nan_alone_stays_where_the_table_has_no_not():
    model = _is_nan_model()
    written, _ = _within_table(model, {"IsNaN", "Not"})
    assert sorted(op_types(written)) == sorted(["Equal"] * 3 + ["IsNaN"] * 3)
    _assert_outputs_unchanged(model, written, NAN_INPUTS)


def test_is_nan_stays_where_equal_takes_no_float_or_the_type_is_unknown():
    # opset 10: Equal takes no float
    model = _parsed("""g (float[4] x) => (bool[4] y) { n = IsNaN(x)  y = Not(n) }""", opset=10)
    assert _within_table(model, {"IsNaN"})[1] == []
    # opset 20: IsNaN takes float8 too, so an untyped value (in a function) is left
    model = _parsed("""g (float[4] x) => (bool[4] y) { y = local.F(x) }
    <domain: "local", opset_import: ["" : 20]>
    F (p) => (q) { n = IsNaN(p)  q = Not(n) }""", opset=20, more=', "local" : 1')
    assert _within_table(model, {"IsNaN"})[1] == []


def test_cast_like_becomes_cast_to_its_target_type():
    model = _parsed("""g (float[4] x, int32[1] like) => (int32[4] y, float16[4] z) {
        y = CastLike(x, like)
        h = Constant <value = float16[1] {0}> ()
        z = CastLike <saturate = 1> (x, h)
    }""", opset=19)
    written, done = _within_table(model, {"CastLike"})
    assert op_types(written) == ["Cast", "Cast"] and len(done) == 2  # (the Constant goes)
    tos = [next(a.i for a in n.attribute if a.name == "to") for n in written.graph.node]
    assert tos == [onnx.TensorProto.INT32, onnx.TensorProto.FLOAT16]
    assert [a.name for a in written.graph.node[1].attribute] == ["saturate", "to"]
    _assert_outputs_unchanged(model, written, {"x": np.array([1.9, -2.5, 7e4, 3], np.float32),
                                          "like": np.zeros(1, np.int32)})


def test_cast_like_to_a_type_unknown_stays():
    model = _parsed("""g (float[4] x, int32[1] like) => (int32[4] y) { y = local.F(x, like) }
    <domain: "local", opset_import: ["" : 18]>
    F (p, l) => (q) { q = CastLike(p, l) }""", more=', "local" : 1')
    assert _within_table(model, {"CastLike"})[1] == []


def test_a_sum_of_two_becomes_add_and_of_three_stays():
    model = _parsed("""g (float[4] x, float[1] b) => (float[4] y, float[4] z) {
        y = Sum(x, b)
        z = Sum(x, b, y)
    }""")
    written, done = _within_table(model, {"Sum"})
    assert op_types(written) == ["Add", "Sum"] and len(done) == 1
    _assert_outputs_unchanged(model, written, {"x": X, "b": np.array([0.1], np.float32)})


IF_MODEL = """g (float[4] x, bool c) => (float[4] y, float[4] z) {{
    k = Constant <value = bool {{{k}}}> ()
    y = If(k) <then_branch = t () => (float[4] t0) {{ t0 = Neg(x) }},
               else_branch = e () => (float[4] e0) {{ e0 = Abs(x) }}>
    z = If(c) <then_branch = t2 () => (float[4] t1) {{ t1 = Neg(x) }},
               else_branch = e2 () => (float[4] e1) {{ e1 = Abs(x) }}>
}}"""


@pytest.mark.parametrize("k", [0, 1])
def test_an_if_on_a_constant_is_inlined_and_one_on_an_input_stays(k):
    model = _parsed(IF_MODEL.format(k=k))
    written, _ = _within_table(model, {"If"})
    assert sorted(op_types(written)) == sorted(["If", "Neg" if k else "Abs", "Neg", "Abs"])
    _assert_outputs_unchanged(model, written, {"x": X, "c": np.array(False)})


def test_nothing_changes_where_the_table_has_every_op():
    for model in (_is_nan_model(), _parsed(KEPT["output to output"]),
                  _parsed(IF_MODEL.format(k=1))):
        written, done = _within_table(model, set())
        assert done == [] and op_types(written) == op_types(model)


@pytest.mark.parametrize("runtime", ["openvino", "tvm",
                                     pytest.param("litert", marks=pytest.mark.slow)])
def test_equal_of_x_and_x_is_not_is_nan_in_each_runtime(runtime, tmp_path):
    # IEEE: NaN is unequal to itself; a compiler that folded x == x to true would break it
    from tests.helpers.runtimes import original_outputs, run_in

    model = _is_nan_model()
    written, _ = _within_table(model, {"IsNaN"})
    expected = original_outputs(model, NAN_INPUTS)
    for got, want in zip(run_in(runtime, written, NAN_INPUTS, tmp_path), expected):
        assert_same(got, want)


def test_cast_takes_the_attributes_cast_like_has_at_every_opset():
    # why CastLike's attributes are copied onto the Cast as they are
    for opset in range(15, onnx.defs.onnx_opset_version() + 1):
        like = set(onnx.defs.get_schema("CastLike", opset).attributes)
        assert like == set(onnx.defs.get_schema("Cast", opset).attributes) - {"to"}, opset
