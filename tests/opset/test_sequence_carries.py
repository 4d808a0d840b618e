"""A sequence a Loop builds, moved to opset 11 as the Loop's scan output
(scatter_rewrite/opset/sequence_carries.py): every axis and new_axis of the ConcatFromSequence that
reads it gives the original's values, and what the form cannot take is refused, naming the Loop."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import scatter_rewrite
from scatter_rewrite.errors import ScatterRewriteError
from scatter_rewrite.validate import run_onnxruntime

FLOAT, INT64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64


def _sequence_loop(axis: int, new_axis: int, x_dims=(2, 3), reader: str = "ConcatFromSequence"):
    """``n`` iterations appending ``x + i`` to a sequence, which ``reader`` reads after the Loop."""
    body = oh.make_graph(
        [oh.make_node("Cast", ["i"], ["i_f"], to=FLOAT),
         oh.make_node("Add", ["x", "i_f"], ["row"]),
         oh.make_node("SequenceInsert", ["rows_in", "row"], ["rows_out"]),
         oh.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [oh.make_tensor_value_info("i", INT64, []), oh.make_tensor_value_info("cond_in", 9, []),
         onnx.ValueInfoProto(name="rows_in")],  # (untyped, as exporters write it)
        [oh.make_tensor_value_info("cond_out", 9, []),
         onnx.ValueInfoProto(name="rows_out")])
    after = (oh.make_node("ConcatFromSequence", ["rows"], ["y"], axis=axis, new_axis=new_axis)
             if reader == "ConcatFromSequence" else oh.make_node("SequenceLength", ["rows"], ["y"]))
    graph = oh.make_graph(
        [oh.make_node("SequenceEmpty", [], ["empty"], dtype=FLOAT),
         oh.make_node("Constant", [], ["true"], value=oh.make_tensor("t", 9, [], [True])),
         oh.make_node("Loop", ["n", "true", "empty"], ["rows"], body=body, name="user_loop"),
         after],
        "g", [oh.make_tensor_value_info("n", INT64, []),
              oh.make_tensor_value_info("x", FLOAT, list(x_dims))],
        [oh.make_tensor_value_info("y", FLOAT, [None] * (2 + new_axis))
         if reader == "ConcatFromSequence" else oh.make_tensor_value_info("y", INT64, [])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])


CASES = [(0, 0), (1, 0), (-1, 0), (-2, 0), (0, 1), (1, 1), (2, 1), (-1, 1), (-3, 1)]


@pytest.mark.parametrize(("axis", "new_axis"), CASES)
def test_every_axis_gives_the_sequences_concatenation(tmp_path, axis, new_axis):
    model = _sequence_loop(axis, new_axis)
    moved = scatter_rewrite.lower(model, opset=11, validate=False)
    assert moved.opset_import[0].version == 11
    loop = next(n for n in moved.graph.node if n.op_type == "Loop")
    assert len(loop.input) == 2 and len(loop.output) == 1  # the carry gone, one scan output
    onnx.checker.check_model(moved, full_check=True)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for n in (1, 4):
        feeds = {"n": np.array(n, np.int64), "x": x}
        want = np.stack([x + i for i in range(n)], axis=axis) if new_axis else \
            np.concatenate([x + i for i in range(n)], axis=axis)
        np.testing.assert_array_equal(run_onnxruntime(model.SerializeToString(), feeds)[0], want)
        np.testing.assert_array_equal(run_onnxruntime(moved.SerializeToString(), feeds)[0], want)


def test_validated_move_passes():
    moved = scatter_rewrite.lower(_sequence_loop(1, 0), opset=11)
    assert moved.opset_import[0].version == 11


def test_a_size_not_known_along_the_axis_is_refused_by_the_loops_name():
    """(A scan output needs one shape: rows of a dynamic length cannot be stacked.)"""
    with pytest.raises(ScatterRewriteError, match=r"Loop 'user_loop'.*cannot move to opset 11.*"
                                                  r"size along axis 0 is not known"):
        scatter_rewrite.lower(_sequence_loop(0, 0, x_dims=("N", 3)), opset=11, validate=False)
    # along the static axis, or stacked, the same rows move
    scatter_rewrite.lower(_sequence_loop(1, 0, x_dims=("N", 3)), opset=11, validate=False)
    scatter_rewrite.lower(_sequence_loop(0, 1, x_dims=("N", 3)), opset=11, validate=False)


def test_a_sequence_read_by_another_op_is_refused():
    with pytest.raises(ScatterRewriteError, match=r"Loop 'user_loop'.*read by other nodes than "
                                                  r"ConcatFromSequence"):
        scatter_rewrite.lower(_sequence_loop(0, 0, reader="SequenceLength"), opset=11, validate=False)


def test_at_opset_13_the_loop_keeps_its_sequence():
    moved = scatter_rewrite.lower(_sequence_loop(0, 0), opset=13, validate=False)
    assert "SequenceEmpty" in {n.op_type for n in moved.graph.node}
