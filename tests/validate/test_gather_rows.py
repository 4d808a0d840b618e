"""A GNN's ``dst = edge_index[1]`` (a Gather by one constant position on axis 0 of an [2, E] graph
input), expanded over the features and scattered without reduction: the generated edge_index keeps
that row free of repeats (the scatter's contract) and the other row only in range, so that
validation, and repair's bit-for-bit proof, compare on inputs whose result is defined."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto

import scatter_rewrite as sr
from scatter_rewrite.validate import plan_validation

ort.set_default_logger_severity(3)
FEATURES = 4


def _edge_scatter(nodes: int = 10, edges: int = 8, row: int = 1, one_position: bool = False,
                  int32: bool = False, op: str = "ScatterElements", opset: int = 13,
                  accumulate: bool = True, x_rows: int | None = None) -> onnx.ModelProto:
    """``x + ScatterElements(zeros [N, F], dst[:, None].expand(-1, F), x[src])`` with src, dst the
    rows 0 and ``row`` of the input edge_index [2, E] (TorchScript's scatter_add without reduction,
    ``accumulate``), picked by ``Gather(edge_index, row)`` or, with ``one_position``, by
    ``Squeeze(Gather(edge_index, [row]))``; ``int32``: edge_index is int32, cast to int64 first;
    ``x_rows``: x has that many rows instead of N (only without ``accumulate``)."""
    edge_type = TensorProto.INT32 if int32 else TensorProto.INT64
    inputs = [oh.make_tensor_value_info("x", TensorProto.FLOAT, [x_rows or nodes, FEATURES]),
              oh.make_tensor_value_info("edge_index", edge_type, [2, edges])]
    zeros = oh.make_tensor("zeros", TensorProto.FLOAT, [nodes, FEATURES], [0.0] * nodes * FEATURES)
    edge_list = "edge_index64" if int32 else "edge_index"
    graph_nodes = [oh.make_node("Cast", ["edge_index"], [edge_list], to=TensorProto.INT64)] * int32
    graph_nodes += [oh.make_node("Gather", [edge_list, "zero"], ["src"], axis=0),
                    oh.make_node("Gather", ["x", "src"], ["messages"], axis=0)]
    if one_position:
        graph_nodes += [oh.make_node("Gather", [edge_list, "row_list"], ["dst_row"], axis=0),
                        oh.make_node("Squeeze", ["dst_row", "axis_0"], ["dst"])]
    else:
        graph_nodes += [oh.make_node("Gather", [edge_list, "row"], ["dst"], axis=0)]
    unsqueeze = (oh.make_node("Unsqueeze", ["dst", "axis_1"], ["dst_column"]) if opset >= 13
                 else oh.make_node("Unsqueeze", ["dst"], ["dst_column"], axes=[1]))
    graph_nodes += [unsqueeze,
                    oh.make_node("Shape", ["messages"], ["messages_shape"]),
                    oh.make_node("Expand", ["dst_column", "messages_shape"], ["targets"]),
                    oh.make_node("Constant", [], ["zeros"], value=zeros),
                    oh.make_node(op, ["zeros", "targets", "messages"], ["written"], axis=0)]
    graph_nodes += [oh.make_node("Add", ["x", "written"], ["aggregated"])] * accumulate
    output = "aggregated" if accumulate else "written"
    initializers = [oh.make_tensor("axis_0", TensorProto.INT64, [1], [0]),
                    oh.make_tensor("axis_1", TensorProto.INT64, [1], [1]),
                    oh.make_tensor("zero", TensorProto.INT64, [], [0]),
                    oh.make_tensor("row", TensorProto.INT64, [], [row]),
                    oh.make_tensor("row_list", TensorProto.INT64, [1], [row])]
    graph = oh.make_graph(graph_nodes, "edge_scatter", inputs,
                          [oh.make_tensor_value_info(output, TensorProto.FLOAT, [nodes, FEATURES])],
                          initializers)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 7
    onnx.checker.check_model(model, full_check=True)
    return model


def _rows(model: onnx.ModelProto, row: int = 1) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The generated edge_index's src row and the row scattered by, as the slots they reach (each
    in range: of x's rows, of the scatter's), and the plan's notes."""
    the_plan = plan_validation(ir.serde.deserialize_model(model))
    nodes = model.graph.output[0].type.tensor_type.shape.dim[0].dim_value
    sources = the_plan.inputs["x"].shape[0]
    edge_index = the_plan.inputs["edge_index"].astype(np.int64)
    picked = []
    for values, bound in ((edge_index[0], sources), (edge_index[row], nodes)):
        assert values.min() >= -bound and values.max() < bound
        picked.append(np.where(values < 0, values + bound, values))
    return picked[0], picked[1], the_plan.notes


FORMS = {
    "row 1": {},
    "row -1": {"row": -1},
    "a 1-element position, squeezed": {"one_position": True},
    "an int32 edge list cast first": {"int32": True},
}


@pytest.mark.parametrize("form", FORMS)
def test_the_scattered_row_is_unique_and_repair_validates(form):
    model = _edge_scatter(**FORMS[form])
    _src, dst, notes = _rows(model, FORMS[form].get("row", 1))
    assert len(set(dst.tolist())) == dst.size, dst
    assert not any("may repeat" in note for note in notes)
    repaired = sr.repair(model, validate=True)  # the bit-for-bit proof needs dst without repeats
    # Repaired: repeated targets sum (small integers in float32: exact in any order).
    x = np.arange(10 * FEATURES, dtype=np.float32).reshape(10, FEATURES)
    edge_index = np.array([[0, 1, 2, 3, 4, 5, 6, 7], [2, 2, 2, 0, 9, 9, 1, 3]])
    edge_index = edge_index.astype(np.int32 if FORMS[form].get("int32") else np.int64)
    src, dst = edge_index  # (row -1 of two is row 1)
    expected = x.copy()
    np.add.at(expected, dst, x[src])
    session = ort.InferenceSession(repaired.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"x": x, "edge_index": edge_index})
    np.testing.assert_array_equal(got, expected)


def test_only_the_scattered_row_is_held_unique():
    """More edges than x has rows (x[src] reads some twice, as it may) but fewer than the scatter's
    targets: src in range of x, dst unique in range of the scatter, no note that targets may
    repeat (each row has its own bound; the whole edge_index held to x's would have to repeat)."""
    model = _edge_scatter(nodes=10, edges=8, x_rows=5, accumulate=False)
    src, dst, notes = _rows(model)
    assert len(set(dst.tolist())) == 8 and len(set(src.tolist())) <= 5
    assert not any("may repeat" in note for note in notes)
    the_plan = plan_validation(ir.serde.deserialize_model(model))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    session.run(None, the_plan.inputs)  # onnxruntime rejects an index out of range


def test_more_edges_than_nodes_is_reported_not_failed():
    """E > N: no unique row exists; the plan's notes say the targets may repeat, and repair still
    validates (its bit-for-bit proof is not run, as for separate src/dst inputs)."""
    model = _edge_scatter(nodes=6, edges=8)
    _src, dst, notes = _rows(model)
    assert any("edge_index[1] has 8 indices along the scatter axis for 6 slots" in note
               and "may repeat" in note for note in notes)
    sr.repair(model, validate=True)


def test_upgrade_validates_a_scatter_fed_by_the_row():
    """The deprecated Scatter (opset 10) fed by edge_index[1]: the row is unique, so the upgraded
    ScatterElements is compared where its result is defined."""
    model = _edge_scatter(op="Scatter", opset=10, accumulate=False)
    _src, dst, _notes = _rows(model)
    assert len(set(dst.tolist())) == dst.size
    upgraded = sr.upgrade(model, validate=True)
    assert "Scatter" not in {n.op_type for n in upgraded.graph.node}


def test_lower_validates_a_scatter_fed_by_the_row():
    model = _edge_scatter(opset=18)
    _src, dst, _notes = _rows(model)
    assert len(set(dst.tolist())) == dst.size
    lowered = sr.lower(model, opset=13, validate=True)
    assert {o.version for o in lowered.opset_import if o.domain in ("", "ai.onnx")} == {13}
