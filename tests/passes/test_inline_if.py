"""Inlining Ifs whose condition is constant (scatter_rewrite.passes.inline_if), on its own and in the
lower pass: TorchScript's rank-0 wrapper around scatter_reduce, in the main graph, a Loop body and a
model-local function; Ifs on run-time values and Ifs unrelated to a scatter are left alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as nh
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto

import scatter_rewrite as sr
from tests.helpers.runs import ort_run  # onnxruntime with its defaults, as the other lower tests run it
from scatter_rewrite.errors import ConversionError
from scatter_rewrite.graph import attr, iter_nodes
from scatter_rewrite.passes.inline_if import inline_constant_ifs, scatter_of_unknown_rank
from scatter_rewrite.passes.fold import ConstantChains
from scatter_rewrite.validate import run_onnxruntime
from tests.helpers.models import vi
from tests.helpers.exports import load_export

ort.set_default_logger_severity(3)
TORCH_TRT = Path(__file__).parents[1] / "data" / "torch_trt"
FLOAT, INT64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def inline(model: onnx.ModelProto, **kwargs) -> tuple[onnx.ModelProto, list[str]]:
    working = ir.serde.deserialize_model(model)
    messages = inline_constant_ifs(working, **kwargs)
    return ir.serde.serialize_model(working), messages


def node_names(model: onnx.ModelProto) -> list[str]:
    return [n.name for n, _ in iter_nodes(ir.serde.deserialize_model(model))]


def scatter_reductions(model: onnx.ModelProto) -> list[str]:
    return [attr(n, "reduction", "none") for n, _ in iter_nodes(ir.serde.deserialize_model(model))
            if n.op_type in ("ScatterElements", "ScatterND") and n.domain == ""]


# ---- TorchScript's rank-0 wrapper, built by hand -------------------------------------------------

def torchscript_wrapper(x: str, idx: str, src: str, y: str, p: str, reduction: str = "max") -> list[onnx.NodeProto]:
    """What ``torch.onnx.export(dynamo=False)`` emits for ``x.scatter_reduce(0, idx, src, reduce)``
    (tests/data/torch/scatter_reduce_amax_ts16.onnx), node names prefixed with ``p``. The branch
    outputs are declared without a shape, so the If outputs have no rank."""
    minus_one = oh.make_node("Constant", [], [f"{p}m1"], value=nh.from_array(np.array([-1], np.int64)))
    then_graph = oh.make_graph(
        [minus_one] + [oh.make_node("Reshape", [v, f"{p}m1"], [f"{p}flat_{v}"]) for v in (x, idx, src)],
        f"{p}then", [], [vi(f"{p}flat_{x}", FLOAT, None), vi(f"{p}flat_{idx}", INT64, None),
                         vi(f"{p}flat_{src}", FLOAT, None)])
    else_graph = oh.make_graph(
        [oh.make_node("Identity", [v], [f"{p}same_{v}"]) for v in (x, idx, src)],
        f"{p}else", [], [vi(f"{p}same_{x}", FLOAT, None), vi(f"{p}same_{idx}", INT64, None),
                         vi(f"{p}same_{src}", FLOAT, None)])
    squeeze = oh.make_graph([oh.make_node("Squeeze", [f"{p}scattered"], [f"{p}squeezed"])], f"{p}then1", [],
                            [vi(f"{p}squeezed", FLOAT, None)])
    keep = oh.make_graph([oh.make_node("Identity", [f"{p}scattered"], [f"{p}kept"])], f"{p}else1", [],
                         [vi(f"{p}kept", FLOAT, None)])
    return [
        oh.make_node("Shape", [x], [f"{p}shape"]),
        oh.make_node("Size", [f"{p}shape"], [f"{p}rank"]),
        oh.make_node("Constant", [], [f"{p}zero"], value=nh.from_array(np.array(0, np.int64))),
        oh.make_node("Equal", [f"{p}rank", f"{p}zero"], [f"{p}is_scalar"]),
        oh.make_node("If", [f"{p}is_scalar"], [f"{p}d", f"{p}i", f"{p}u"], name=f"{p}If",
                     then_branch=then_graph, else_branch=else_graph),
        oh.make_node("ScatterElements", [f"{p}d", f"{p}i", f"{p}u"], [f"{p}scattered"], name=f"{p}Scatter",
                     axis=0, reduction=reduction),
        oh.make_node("If", [f"{p}is_scalar"], [y], name=f"{p}If_1", then_branch=squeeze, else_branch=keep),
    ]


def wrapper_model(x_shape=(4, 3), n=9, reduction="max", opset=16) -> onnx.ModelProto:
    graph = oh.make_graph(torchscript_wrapper("x", "idx", "src", "y", "w_", reduction), "ts",
                          [vi("x", FLOAT, x_shape), vi("idx", INT64, [n, 3]), vi("src", FLOAT, [n, 3])],
                          [vi("y", FLOAT, x_shape)])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def wrapper_feeds(rows=4, n=9, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((rows, 3)).astype(np.float32),
            "idx": rng.integers(-rows, rows, (n, 3)).astype(np.int64),  # repeated and negative
            "src": rng.standard_normal((n, 3)).astype(np.float32)}


def expected_amax(feeds: dict) -> np.ndarray:
    out = feeds["x"].copy()
    np.maximum.at(out, (feeds["idx"] % out.shape[0], np.arange(3)[None, :].repeat(len(feeds["idx"]), 0)),
                  feeds["src"])
    return out


# ---- the helper on its own -------------------------------------------------------------------

def test_wrapper_becomes_its_else_branch_and_computes_the_same():
    model = wrapper_model()
    feeds = wrapper_feeds()
    inlined, messages = inline(model)
    assert [m.split(":")[0] for m in messages[:2]] == ["If 'w_If' (opset 16, main graph)",
                                                         "If 'w_If_1' (opset 16, main graph)"]
    assert all("always false -> else_branch inlined" in m for m in messages)
    ops = [n.op_type for n in inlined.graph.node]
    assert ops == ["Identity", "Identity", "Identity", "ScatterElements", "Identity"]  # condition nodes gone
    assert [o.name for o in inlined.graph.output] == ["y"]
    onnx.checker.check_model(inlined, full_check=True)
    np.testing.assert_array_equal(ort_run(inlined, feeds)[0], ort_run(model, feeds)[0])
    np.testing.assert_array_equal(ort_run(inlined, feeds)[0], expected_amax(feeds))
    assert inline(inlined) == (inlined, [])  # idempotent: nothing left to inline


def test_rank_known_with_dynamic_dims_is_enough():
    """Size(Shape(x)) is x's rank: constant although every dim of x is dynamic."""
    model = wrapper_model(x_shape=["N", "C"])
    model.graph.input[1].type.tensor_type.shape.dim[0].dim_param = "E"
    model.graph.input[2].type.tensor_type.shape.dim[0].dim_param = "E"
    inlined, messages = inline(model)
    assert len([m for m in messages if "_branch inlined" in m]) == 2
    assert "If" not in [n.op_type for n in inlined.graph.node]
    feeds = wrapper_feeds(rows=6, n=11, seed=1)
    np.testing.assert_array_equal(ort_run(inlined, feeds)[0], expected_amax(feeds))


def test_constant_chains_read_only_what_shape_and_size_need():
    model = ir.serde.deserialize_model(oh.make_model(oh.make_graph(
        [oh.make_node("Shape", ["x"], ["s"]), oh.make_node("Size", ["s"], ["r"]),
         oh.make_node("Shape", ["x"], ["tail"], start=1), oh.make_node("Size", ["x"], ["count"])],
        "g", [vi("x", FLOAT, ["N", 3])], [vi("s", INT64, None), vi("r", INT64, None), vi("tail", INT64, None),
                                         vi("count", INT64, None)]), opset_imports=[oh.make_opsetid("", 16)]))
    chains = ConstantChains()
    s, r, tail, count = model.graph.outputs
    assert chains.why_not(r) is None and chains.evaluate(r, 16) == 2
    assert chains.why_not(tail) is None and chains.evaluate(tail, 16).tolist() == [3]
    assert "dynamic shape" in chains.why_not(s) and "dynamic shape" in chains.why_not(count)


def test_unknown_rank_leaves_the_wrapper_alone():
    model = wrapper_model(x_shape=None)
    inlined, messages = inline(model)
    assert messages == [] and node_names(inlined) == node_names(model)


@pytest.mark.parametrize("how", ["graph input", "overridable initializer", "computed from an input"])
def test_condition_known_only_at_run_time_is_not_inlined(how):
    branch = lambda name, op: oh.make_graph([oh.make_node(op, ["x"], [f"{name}_o"])], name, [],  # noqa: E731
                                            [vi(f"{name}_o", FLOAT, [3])])
    nodes, inputs, inits = [], [vi("x", FLOAT, [3])], []
    if how == "graph input":
        inputs.append(vi("c", BOOL, []))
    elif how == "overridable initializer":  # a default callers may replace: not a constant
        inputs.append(vi("c", BOOL, []))
        inits.append(nh.from_array(np.array(True), "c"))
    else:
        inputs.append(vi("flag", FLOAT, [2]))
        nodes += [oh.make_node("ReduceSum", ["flag"], ["total"], keepdims=0),
                  oh.make_node("Constant", [], ["zero"], value=nh.from_array(np.array(0, np.float32))),
                  oh.make_node("Greater", ["total", "zero"], ["c"])]
    nodes.append(oh.make_node("If", ["c"], ["y"], name="cond", then_branch=branch("t", "Neg"),
                              else_branch=branch("e", "Abs")))
    model = oh.make_model(oh.make_graph(nodes, "g", inputs, [vi("y", FLOAT, [3])], inits),
                          opset_imports=[oh.make_opsetid("", 16)])
    inlined, messages = inline(model)
    assert messages == [] and "cond" in node_names(inlined)


def wrapper_model_with_an_unrelated_constant_if() -> onnx.ModelProto:
    """The wrapper model plus a constant If 'unrelated' (output z) that touches no scatter."""
    model = wrapper_model()
    then = oh.make_graph([oh.make_node("Neg", ["x"], ["t"])], "ut", [], [vi("t", FLOAT, [4, 3])])
    other = oh.make_graph([oh.make_node("Abs", ["x"], ["e"])], "ue", [], [vi("e", FLOAT, [4, 3])])
    model.graph.node.extend([
        oh.make_node("Constant", [], ["always"], value=nh.from_array(np.array(True))),
        oh.make_node("If", ["always"], ["z"], name="unrelated", then_branch=then, else_branch=other)])
    model.graph.output.append(vi("z", FLOAT, [4, 3]))
    return model


def test_near_selects_only_ifs_around_a_scatter_of_unknown_rank():
    """What the tensorrt pass can pass as ``near``: the wrapper goes, an unrelated constant If stays."""
    model = wrapper_model_with_an_unrelated_constant_if()
    inlined, messages = inline(model, near=scatter_of_unknown_rank)
    assert [m.split(":")[0] for m in messages] == ["If 'w_If' (opset 16, main graph)", "If 'w_If_1' (opset 16, main graph)"]
    assert "unrelated" in node_names(inlined) and "w_If" not in node_names(inlined)
    everything, _ = inline(model)
    assert "unrelated" not in node_names(everything)


def _graph_with(nodes, outputs, inits=()):
    return oh.make_model(oh.make_graph(nodes, "g", [vi("x", FLOAT, [3])], outputs, list(inits)),
                         opset_imports=[oh.make_opsetid("", 16)])


@pytest.mark.parametrize("source", ["Constant", "initializer", "Not(Constant)"])
def test_constant_condition_sources(source):
    """True from a Constant, an initializer that is no graph input, or a chain over a Constant."""
    nodes, inits = [], []
    if source == "initializer":
        inits.append(nh.from_array(np.array(True), "c"))
    elif source == "Constant":
        nodes.append(oh.make_node("Constant", [], ["c"], value=nh.from_array(np.array(True))))
    else:
        nodes += [oh.make_node("Constant", [], ["f"], value=nh.from_array(np.array([False]))),
                  oh.make_node("Not", ["f"], ["c"])]
    then = oh.make_graph([oh.make_node("Neg", ["x"], ["t_o"])], "t", [], [vi("t_o", FLOAT, [3])])
    other = oh.make_graph([oh.make_node("Abs", ["x"], ["e_o"])], "e", [], [vi("e_o", FLOAT, [3])])
    nodes.append(oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other))
    model = _graph_with(nodes, [vi("y", FLOAT, [3])], inits)
    inlined, (message,) = inline(model)
    assert "always true -> then_branch inlined" in message
    assert [n.op_type for n in inlined.graph.node] == ["Neg"] and not inlined.graph.initializer
    assert inlined.graph.node[0].output == ["y"]
    x = np.array([1.5, -2.0, 0.0], np.float32)
    np.testing.assert_array_equal(ort_run(inlined, {"x": x})[0], -x)


def test_branch_initializer_outer_value_and_name_clash():
    """The taken branch has an initializer (moves to the main graph), returns an outer value
    directly (an Identity keeps the output's name), and defines a name that a sibling If's branch
    also defines (renamed: names are global in ONNX)."""
    then = oh.make_graph([oh.make_node("Add", ["x", "w"], ["t"])], "then", [],
                         [vi("t", FLOAT, [3]), vi("x", FLOAT, [3])], [nh.from_array(np.full(3, 2, np.float32), "w")])
    other = oh.make_graph([oh.make_node("Abs", ["x"], ["e"])], "else", [], [vi("e", FLOAT, [3]), vi("e", FLOAT, [3])])
    sibling_then = oh.make_graph([oh.make_node("Neg", ["x"], ["t"])], "st", [], [vi("t", FLOAT, [3])])
    sibling_else = oh.make_graph([oh.make_node("Abs", ["x"], ["z"])], "se", [], [vi("z", FLOAT, [3])])
    nodes = [oh.make_node("Constant", [], ["c"], value=nh.from_array(np.array(True))),
             oh.make_node("If", ["c"], ["y", "y2"], name="constant", then_branch=then, else_branch=other),
             oh.make_node("If", ["flag"], ["y3"], name="runtime", then_branch=sibling_then, else_branch=sibling_else)]
    model = oh.make_model(oh.make_graph(nodes, "g", [vi("x", FLOAT, [3]), vi("flag", BOOL, [])],
                                        [vi("y", FLOAT, [3]), vi("y2", FLOAT, [3]), vi("y3", FLOAT, [3])]),
                          opset_imports=[oh.make_opsetid("", 16)])
    inlined, messages = inline(model)
    assert len(messages) == 1 and "If 'constant'" in messages[0]
    assert [o.name for o in inlined.graph.output] == ["y", "y2", "y3"]
    assert [i.name for i in inlined.graph.initializer] == ["w"]
    assert [n.op_type for n in inlined.graph.node] == ["Add", "Identity", "If"]
    assert inlined.graph.node[0].output == ["y"] and inlined.graph.node[1].input == ["x"]
    onnx.checker.check_model(inlined, full_check=True)
    # onnxruntime refuses the original (a branch returns an outer value directly); the result runs.
    x = np.array([1.5, -2.0, 0.0], np.float32)
    for flag in (True, False):
        y, y2, y3 = ort_run(inlined, {"x": x, "flag": np.array(flag)})
        np.testing.assert_array_equal(y, x + 2)
        np.testing.assert_array_equal(y2, x)
        np.testing.assert_array_equal(y3, -x if flag else np.abs(x))


def test_branch_value_renamed_when_its_name_is_taken():
    then = oh.make_graph([oh.make_node("Neg", ["x"], ["t"]), oh.make_node("Abs", ["t"], ["t2"])], "then", [],
                         [vi("t2", FLOAT, [3])])
    other = oh.make_graph([oh.make_node("Abs", ["x"], ["e"])], "else", [], [vi("e", FLOAT, [3])])
    sibling_then = oh.make_graph([oh.make_node("Sin", ["x"], ["t"])], "st", [], [vi("t", FLOAT, [3])])
    sibling_else = oh.make_graph([oh.make_node("Cos", ["x"], ["z"])], "se", [], [vi("z", FLOAT, [3])])
    nodes = [oh.make_node("Constant", [], ["c"], value=nh.from_array(np.array(True))),
             oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
             oh.make_node("If", ["flag"], ["y3"], then_branch=sibling_then, else_branch=sibling_else)]
    model = oh.make_model(oh.make_graph(nodes, "g", [vi("x", FLOAT, [3]), vi("flag", BOOL, [])],
                                        [vi("y", FLOAT, [3]), vi("y3", FLOAT, [3])]),
                          opset_imports=[oh.make_opsetid("", 16)])
    inlined, _ = inline(model)
    assert inlined.graph.node[0].output == ["t_1"] and inlined.graph.node[1].input == ["t_1"]
    onnx.checker.check_model(inlined, full_check=True)
    feeds = {"x": np.array([1.5, -2.0, 0.0], np.float32), "flag": np.array(True)}
    for got, want in zip(ort_run(inlined, feeds), ort_run(model, feeds)):
        np.testing.assert_array_equal(got, want)


def test_nested_constant_ifs_come_up_round_by_round():
    inner_then = oh.make_graph([oh.make_node("Neg", ["x"], ["n"])], "it", [], [vi("n", FLOAT, [3])])
    inner_else = oh.make_graph([oh.make_node("Abs", ["x"], ["a"])], "ie", [], [vi("a", FLOAT, [3])])
    outer_then = oh.make_graph(
        [oh.make_node("Constant", [], ["c2"], value=nh.from_array(np.array(False))),
         oh.make_node("If", ["c2"], ["inner_out"], name="inner", then_branch=inner_then, else_branch=inner_else),
         oh.make_node("Sin", ["inner_out"], ["o"])], "ot", [], [vi("o", FLOAT, [3])])
    outer_else = oh.make_graph([oh.make_node("Cos", ["x"], ["k"])], "oe", [], [vi("k", FLOAT, [3])])
    model = _graph_with([oh.make_node("Constant", [], ["c"], value=nh.from_array(np.array(True))),
                         oh.make_node("If", ["c"], ["y"], name="outer", then_branch=outer_then,
                                      else_branch=outer_else)], [vi("y", FLOAT, [3])])
    inlined, messages = inline(model)
    assert [m.split(":")[0] for m in messages] == ["If 'outer' (opset 16, main graph)",
                                                    "If 'inner' (opset 16, main graph)"]
    assert [n.op_type for n in inlined.graph.node] == ["Abs", "Sin"]
    x = np.array([1.5, -2.0, 0.0], np.float32)
    np.testing.assert_array_equal(ort_run(inlined, {"x": x})[0], ort_run(model, {"x": x})[0])


def test_inside_a_function_the_branch_initializer_becomes_a_constant():
    then = oh.make_graph([oh.make_node("Add", ["a", "w"], ["t"])], "then", [], [vi("t", FLOAT, [3])],
                         [nh.from_array(np.full(3, 2, np.float32), "w")])
    other = oh.make_graph([oh.make_node("Abs", ["a"], ["e"])], "else", [], [vi("e", FLOAT, [3])])
    function = oh.make_function(
        "local", "F", ["a"], ["b"],
        [oh.make_node("Constant", [], ["c"], value=nh.from_array(np.array(True))),
         oh.make_node("If", ["c"], ["b"], name="in_function", then_branch=then, else_branch=other)],
        opset_imports=[oh.make_opsetid("", 16)])
    model = oh.make_model(oh.make_graph([oh.make_node("F", ["x"], ["y"], domain="local")], "g",
                                        [vi("x", FLOAT, [3])], [vi("y", FLOAT, [3])]),
                          opset_imports=[oh.make_opsetid("", 16), oh.make_opsetid("local", 1)], functions=[function])
    inlined, (message,) = inline(model)
    assert message.startswith("If 'in_function' (opset 16, function local::F)")
    assert [n.op_type for n in inlined.functions[0].node] == ["Constant", "Add"]
    assert list(inlined.functions[0].output) == ["b"] and inlined.functions[0].node[1].output == ["b"]
    onnx.checker.check_model(inlined, full_check=True)
    x = np.array([1.5, -2.0, 0.0], np.float32)
    np.testing.assert_array_equal(ort_run(inlined, {"x": x})[0], x + 2)


# ---- in the lower pass -----------------------------------------------------------------------

def loop_model() -> onnx.ModelProto:
    """The wrapper inside a Loop body: the scatter max runs once per iteration on the carried value."""
    body = oh.make_graph(
        [oh.make_node("Identity", ["cond_in"], ["cond_out"])] + torchscript_wrapper("acc", "idx", "src", "acc_out", "b_"),
        "body", [vi("it", INT64, []), vi("cond_in", BOOL, []), vi("acc", FLOAT, [4, 3])],
        [vi("cond_out", BOOL, []), vi("acc_out", FLOAT, None)])
    graph = oh.make_graph(
        [oh.make_node("Constant", [], ["go"], value=nh.from_array(np.array(True))),
         oh.make_node("Loop", ["trips", "go", "x"], ["y"], name="loop", body=body)], "g",
        [vi("x", FLOAT, [4, 3]), vi("idx", INT64, [9, 3]), vi("src", FLOAT, [9, 3]), vi("trips", INT64, [])],
        [vi("y", FLOAT, [4, 3])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 16)])


def wrapper_in_function_model() -> onnx.ModelProto:
    """The wrapper inside a model-local function: ranks are known only at the call site."""
    function = oh.make_function("local", "ScatterMax", ["x", "idx", "src"], ["y"],
                                torchscript_wrapper("x", "idx", "src", "y", "f_"),
                                opset_imports=[oh.make_opsetid("", 16)])
    graph = oh.make_graph(
        [oh.make_node("ScatterMax", ["x", "idx", "src"], ["y"], domain="local", name="call")], "g",
        [vi("x", FLOAT, [4, 3]), vi("idx", INT64, [9, 3]), vi("src", FLOAT, [9, 3])], [vi("y", FLOAT, [4, 3])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 16), oh.make_opsetid("local", 1)],
                         functions=[function])


@pytest.mark.parametrize("opset", [11, 13, 16, 17])
@pytest.mark.parametrize("where", ["main graph", "Loop body", "function"])
def test_lower_inlines_the_wrapper(where, opset):
    model = {"main graph": wrapper_model, "Loop body": loop_model, "function": wrapper_in_function_model}[where]()
    feeds = wrapper_feeds(seed=opset) | {"trips": np.array(3, np.int64)}
    lowered, outcome = sr.lower(model, opset=opset, validate=True, inputs=feeds, return_report=True)
    onnx.checker.check_model(lowered, full_check=True)
    notes = outcome.passes[0]["notes"]
    inlined = [n for n in notes if "_branch inlined" in n]
    assert len(inlined) == 2 and all("always false -> else_branch inlined" in n for n in inlined)
    scope = {"main graph": "main graph", "Loop body": "Loop 'loop' body", "function": "function local::ScatterMax"}
    assert all(scope[where] in n for n in inlined)
    (rewritten,) = outcome.passes[0]["rewritten"]
    assert "Scatter" in rewritten["node"] and "standard nodes" in rewritten["detail"]
    assert scatter_reductions(lowered) == ["none"]
    assert not {"w_If", "w_If_1", "b_If", "b_If_1", "f_If", "f_If_1"} & set(node_names(lowered))
    expected = expected_amax(feeds)
    if where == "Loop body":  # max is idempotent: three rounds give what one gives
        expected = expected_amax(feeds | {"x": expected})
    np.testing.assert_array_equal(run_onnxruntime(lowered.SerializeToString(), feeds)[0], expected)


def test_lower_leaves_a_constant_if_that_has_nothing_to_do_with_a_scatter():
    """The policy: only Ifs that feed, or read, a scatter that cannot be lowered as it stands."""
    model = wrapper_model_with_an_unrelated_constant_if()
    feeds = wrapper_feeds()
    lowered, outcome = sr.lower(model, opset=13, validate=True, inputs=feeds, return_report=True)
    names = node_names(lowered)
    assert "unrelated" in names and "w_If" not in names and "w_If_1" not in names
    assert not any("unrelated" in n for n in outcome.passes[0]["notes"])
    y, z = run_onnxruntime(lowered.SerializeToString(), feeds)
    np.testing.assert_array_equal(y, expected_amax(feeds))
    np.testing.assert_array_equal(z, -feeds["x"])


def test_lower_leaves_the_wrapper_when_the_scatter_needs_no_lowering():
    """add exists at opset 16: nothing to lower, so nothing is inlined."""
    model = wrapper_model(reduction="add")
    lowered, outcome = sr.lower(model, opset=16, validate=True, inputs=wrapper_feeds(), return_report=True)
    assert {"w_If", "w_If_1"} <= set(node_names(lowered))
    assert not any("inlined" in n for n in outcome.passes[0]["notes"])
    assert scatter_reductions(lowered) == ["add"]


def test_lower_still_declines_a_wrapper_on_an_unknown_rank():
    model = wrapper_model(x_shape=None)
    with pytest.raises(ConversionError, match=r"ScatterElements 'w_Scatter' \(opset 16, main graph\).*rank"):
        sr.lower(model, opset=13)


# ---- the TorchScript exports that the tensorrt tests also read -------------------------------

@pytest.mark.parametrize("opset", [11, 13, 16, 17])
@pytest.mark.parametrize("name", ["scatter_amax_ts16", "scatter_add_gnn_ts16"])
def test_torch_trt_ts16_exports_lower(name, opset):
    model, feeds, pytorchs = load_export(TORCH_TRT, name)
    want = pytorchs[model.graph.output[0].name]
    lowered, outcome = sr.lower(model, opset=opset, validate=True, inputs=feeds, return_report=True)
    onnx.checker.check_model(lowered, full_check=True)
    assert lowered.opset_import[0].version == opset
    got = run_onnxruntime(lowered.SerializeToString(), feeds)[0]
    inlined = [n for n in outcome.passes[0]["notes"] if "_branch inlined" in n]
    if name == "scatter_amax_ts16":
        # The export declares y float[12] for a [3, 4] result; the pass replaces the declaration.
        assert len(inlined) == 2
        assert [d.dim_value for d in lowered.graph.output[0].type.tensor_type.shape.dim] == list(want.shape)
        assert any("declared [12]" in n for n in outcome.passes[0]["notes"])
        assert scatter_reductions(lowered) == ["none"]
        np.testing.assert_array_equal(got, want)
    else:  # no If in this export: nothing inlined; add kept at 16/17
        assert inlined == []
        assert scatter_reductions(lowered) == (["add"] if opset >= 16 else ["none"])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
