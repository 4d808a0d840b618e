"""A node a pass or an opset move writes carries the user's node it was written for
(``graph.WRITTEN_FOR``): a later pass that refuses it names that node, never the name onnx_ir
gave the new one (``node_Not_12``); no mark reaches a written or returned model. And a refusal of
several nodes names every one (``passes.base.every_node``)."""

from __future__ import annotations

import re

import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto

import scatter_rewrite as sr
from scatter_rewrite.errors import ConversionError
from scatter_rewrite.graph import WRITTEN_FOR, describe, iter_nodes
from scatter_rewrite.passes.base import NAMED_AT_MOST, NodeNote, every_node
from scatter_rewrite.passes.float_comparisons import FloatComparisonsPass
from scatter_rewrite.passes.move_opset import MoveOpsetPass
from scatter_rewrite.passes.op_support import OpSupportPass
from scatter_rewrite.passes.repair import RepairPass
from scatter_rewrite.passes.upgrade import upgrade_steps
from scatter_rewrite.testing import scatter_model

from tests.helpers.cli import invoke
from tests.helpers.models import accumulate_model


def one_op_model(op: str, shape: list, opset: int, out_type: int = TensorProto.FLOAT,
                 count: int = 1) -> onnx.ModelProto:
    """``count`` nodes ``op`` (named ``<op>_<k>``), each on the float input ``x`` of ``shape``."""
    vi = oh.make_tensor_value_info
    nodes = [oh.make_node(op, ["x"], [f"y{k}"], name=f"{op.lower()}_{k}") for k in range(count)]
    graph = oh.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, shape)],
                          [vi(f"y{k}", out_type, shape) for k in range(count)])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def quoted_names(message: str) -> list[str]:
    """The node names a message quotes, as graph.describe writes them."""
    return re.findall(r"\b[A-Z][A-Za-z]+ '([^']+)' \(opset", message)


def refusal(proto: onnx.ModelProto, passes: list) -> str:
    model = ir.serde.deserialize_model(proto)
    with pytest.raises(ConversionError) as caught:
        for p in passes:
            p(model)
    return str(caught.value)


# (what made the refused node, the model, the passes (the last refuses), the user's node the
# refusal must name as the one the refused node was written for)
PRODUCERS = {
    "upgrade": (lambda: scatter_model("Scatter", opset=10),
                lambda: [upgrade_steps(), OpSupportPass("rknn")],
                "ScatterElements written for Scatter 'scatter_0' (opset 10, main graph)"),
    "repair in place": (lambda: accumulate_model(opset=16),
                        lambda: [RepairPass(), OpSupportPass("rknn")],
                        "ScatterElements written for ScatterElements 'scatter_0' (opset 16, main graph)"),
    "repair lowered": (lambda: accumulate_model(opset=13),
                       lambda: [RepairPass(), OpSupportPass("rknn")],
                       "Loop written for ScatterElements 'scatter_0' (opset 13, main graph)"),
    "float comparisons": (lambda: one_op_model("IsNaN", [3], 13, TensorProto.BOOL),
                          lambda: [FloatComparisonsPass("mnn"), OpSupportPass("rknn")],
                          "Not written for IsNaN 'isnan_0' (opset 13, main graph)"),
    "opset form": (lambda: one_op_model("Trilu", ["n", "n"], 14),
                   lambda: [MoveOpsetPass(13), OpSupportPass("rknn")],
                   "Not written for Trilu 'trilu_0' (opset 14, main graph)"),
    "opset function body": (lambda: one_op_model("Gelu", ["n", 3], 20),
                            lambda: [MoveOpsetPass(19), OpSupportPass("qnn")],
                            "Erf written for Gelu 'gelu_0' (opset 20, main graph)"),
    "a constant folded for a table": (lambda: one_op_model("Swish", ["n", 3], 24),
                                      lambda: [MoveOpsetPass(23), OpSupportPass("rknn")],
                                      "Constant written for Swish 'swish_0' (opset 24, main graph)"),
}


@pytest.mark.parametrize("producer", PRODUCERS)
def test_a_later_refusal_names_the_users_node_a_refused_node_was_written_for(producer):
    build, passes, named = PRODUCERS[producer]
    proto = build()
    message = refusal(proto, passes())
    assert named in message, message
    own = {node.name for node, _ in iter_nodes(ir.serde.deserialize_model(proto))}
    assert quoted_names(message) and set(quoted_names(message)) <= own, message
    assert "node_" not in message, message


def test_every_node_an_opset_move_splices_in_is_marked():
    """Celu-12 at opset 11: its ONNX function body, spliced in by the converter's path; each node
    is described by the Celu it was written for."""
    vi = oh.make_tensor_value_info
    graph = oh.make_graph([oh.make_node("Celu", ["x"], ["y"], name="celu_0", alpha=2.0)], "g",
                          [vi("x", TensorProto.FLOAT, [2, 3])], [vi("y", TensorProto.FLOAT, [2, 3])])
    model = ir.serde.deserialize_model(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 12)]))
    MoveOpsetPass(11)(model)
    said = [describe(node, scope) for node, scope in iter_nodes(model)]
    assert "Celu" not in {node.op_type for node, _ in iter_nodes(model)} and len(said) > 2
    assert all(s.endswith(" written for Celu 'celu_0' (opset 12, main graph)") for s in said), said


def marks(proto: onnx.ModelProto) -> list[str]:
    """Every WRITTEN_FOR mark in the model: main graph, subgraphs, functions."""
    return [node.metadata_props[WRITTEN_FOR] for node, _ in iter_nodes(ir.serde.deserialize_model(proto))
            if WRITTEN_FOR in node.metadata_props]


# (the model, the verb) whose rewrite writes nodes of each producer above
WRITTEN = {
    "upgrade and lower": (lambda: scatter_model("Scatter", opset=10), ["lower", "--opset", "13"]),
    "repair lowered": (lambda: accumulate_model(opset=13), ["repair"]),
    "float comparisons": (lambda: one_op_model("IsNaN", [3], 13, TensorProto.BOOL),
                          ["prepare", "--target", "mnn", "--no-runtime-proof"]),
    "opset form": (lambda: one_op_model("Trilu", ["n", "n"], 14), ["lower", "--opset", "13"]),
}


@pytest.mark.parametrize("case", WRITTEN)
def test_no_mark_reaches_the_written_model(tmp_path, case):
    build, verb = WRITTEN[case]
    source, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(build(), source)
    result = invoke(*verb, source, "--no-validate", "-o", out)
    assert result.exit_code == 0, result.output
    written = onnx.load(out)
    assert written.graph.node and marks(written) == []


def test_no_mark_reaches_the_model_the_api_returns():
    returned = sr.repair(accumulate_model(opset=13), validate=False)
    assert len(returned.graph.node) > 10 and marks(returned) == []


# ---- a refusal of several nodes names them all -----------------------------------------------

def test_every_node_is_named_up_to_the_limit_then_counted():
    notes = [NodeNote(f"Abs 'a{k}' (opset 13, main graph)", "not in the table") for k in range(12)]
    said = every_node(notes)
    assert [f"a{k}" for k in range(NAMED_AT_MOST)] == quoted_names(said)
    assert said.endswith(": not in the table (and 2 more)") and said.count("not in the table") == 1
    assert every_node(notes[:2]) == ("Abs 'a0' (opset 13, main graph) and Abs 'a1' (opset 13, "
                                     "main graph): not in the table")


def test_nodes_refused_for_different_reasons_keep_each_reason():
    notes = [NodeNote("A 'a' (opset 13, main graph)", "one"), NodeNote("B 'b' (opset 13, main graph)", "two"),
             NodeNote("C 'c' (opset 13, main graph)", "one")]
    assert every_node(notes) == ("A 'a' (opset 13, main graph) and C 'c' (opset 13, main graph): one; "
                                 "B 'b' (opset 13, main graph): two")


def test_the_same_name_twice_is_said_once_with_its_count():
    notes = [NodeNote("NonZero written for X 'x' (opset 13, main graph)", "why")] * 2
    assert every_node(notes) == "NonZero written for X 'x' (opset 13, main graph) (x2): why"


def test_a_refusal_on_the_command_line_names_every_node(tmp_path):
    source = tmp_path / "m.onnx"
    onnx.save(one_op_model("Trilu", ["n", "n"], 14, count=3), source)
    result = invoke("prepare", "--target", "rknn", source, "--no-validate", "-o", tmp_path / "out.onnx")
    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()
    assert set(quoted_names(line)) == {"trilu_0", "trilu_1", "trilu_2"} and "more)" not in line, line


def sequence_building_loop() -> onnx.ModelProto:
    """A Loop appending ``x + i`` to a sequence that a ConcatFromSequence reads (opset 13)."""
    vi, FLOAT = oh.make_tensor_value_info, TensorProto.FLOAT
    body = oh.make_graph(
        [oh.make_node("Cast", ["i"], ["i_f"], name="count", to=FLOAT),
         oh.make_node("Add", ["x", "i_f"], ["row"], name="row"),
         oh.make_node("SequenceInsert", ["rows_in", "row"], ["rows_out"], name="append"),
         oh.make_node("Identity", ["cond_in"], ["cond_out"], name="again")],
        "body", [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []),
                 onnx.ValueInfoProto(name="rows_in")],
        [vi("cond_out", TensorProto.BOOL, []), onnx.ValueInfoProto(name="rows_out")])
    graph = oh.make_graph(
        [oh.make_node("SequenceEmpty", [], ["empty"], name="empty", dtype=FLOAT),
         oh.make_node("Constant", [], ["true"], name="true", value=oh.make_tensor("t", TensorProto.BOOL, [], [True])),
         oh.make_node("Loop", ["n", "true", "empty"], ["rows"], body=body, name="user_loop"),
         oh.make_node("ConcatFromSequence", ["rows"], ["y"], name="concat", axis=0)],
        "g", [vi("n", TensorProto.INT64, []), vi("x", FLOAT, [2, 3])], [vi("y", FLOAT, [None, 3])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])


def test_a_loops_sequence_moved_to_a_scan_output_marks_only_what_it_wrote():
    """The Loop keeps its name and its body (the user's nodes, unmarked); what the move wrote (the
    scan output's Identity, the concatenation's nodes) is marked with the node it replaced."""
    model = ir.serde.deserialize_model(sequence_building_loop())
    MoveOpsetPass(11)(model)
    said = {(node.op_type, node.name): describe(node, scope) for node, scope in iter_nodes(model)}
    assert said[("Loop", "user_loop")] == "Loop 'user_loop' (opset 11, main graph)"
    assert said[("Add", "row")].startswith("Add 'row' (opset 11, main graph > Loop 'user_loop'")
    written = [text for (op, name), text in said.items() if " written for " in text]
    assert "ConcatFromSequence" not in {op for op, _ in said} and written
    assert all(text.endswith((" written for Loop 'user_loop' (opset 13, main graph)",
                              " written for ConcatFromSequence 'concat' (opset 13, main graph)"))
               for text in written), written
    assert any(text.startswith("Identity written for Loop") for text in written), written
