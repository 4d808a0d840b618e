"""A scatter reduction inside a Scan body (the scanned state is the scatter's data): every verb that
rewrites reductions rewrites it there, and validation proves the result equal to the original."""

from __future__ import annotations

import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto

import scatter_rewrite as sr
from scatter_rewrite.graph import iter_nodes

vi = oh.make_tensor_value_info


def scan_model(op: str, reduction: str, dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """acc [4, 3] carried through a Scan over ups [5, 2, 3]; each step scatters one [2, 3] slice into it."""
    if op == "ScatterElements":
        scatter = oh.make_node(op, ["acc_in", "idx", "u"], ["acc_out"], axis=0, reduction=reduction)
    else:
        scatter = oh.make_node(op, ["acc_in", "idx2", "u"], ["acc_out"], reduction=reduction)
    body = oh.make_graph([scatter, oh.make_node("Identity", ["acc_out"], ["y"])], "body",
                         [vi("acc_in", dtype, [4, 3]), vi("u", dtype, [2, 3])],
                         [vi("acc_out", dtype, [4, 3]), vi("y", dtype, [4, 3])])
    graph = oh.make_graph([oh.make_node("Scan", ["acc0", "ups"], ["acc", "ys"], body=body, num_scan_inputs=1)], "g",
                          [vi("acc0", dtype, [4, 3]), vi("ups", dtype, [5, 2, 3]), vi("idx", TensorProto.INT64, [2, 3]),
                           vi("idx2", TensorProto.INT64, [2, 1])],
                          [vi("acc", dtype, [4, 3]), vi("ys", dtype, [5, 4, 3])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


VERBS = {
    "lower 13": lambda m: sr.lower(m, opset=13, validate=True, return_report=True),
    "lower 13 custom": lambda m: sr.lower(m, opset=13, mode="custom", validate=True, return_report=True),
    "to_scatternd": lambda m: sr.to_scatternd(m, validate=True, return_report=True),
    "tensorrt 8.6": lambda m: sr.prepare_for_tensorrt(m, trt_version="8.6", validate=True, return_report=True),
    "tensorrt 10": lambda m: sr.prepare_for_tensorrt(m, trt_version="10", validate=True, return_report=True),
}


# What each verb leaves of the scatter in the body: (domain, op, reduction) of every scatter node.
# None: no reduction left in the default domain (lowered to standard ops).
LEFT = {
    ("ScatterElements", "max"): {"lower 13": None, "lower 13 custom": {("ai.onnx.contrib", "ScatterElements", "max")},
                                 "to_scatternd": {("", "ScatterND", "max")}, "tensorrt 8.6": None,
                                 "tensorrt 10": {("", "ScatterElements", "max")}},  # (its plugin runs it: kept)
    ("ScatterND", "add"): {"lower 13": None, "lower 13 custom": {("ai.onnx.contrib", "ScatterND", "add")},
                           "to_scatternd": {("", "ScatterND", "add")},  # (already one: kept)
                           "tensorrt 8.6": None, "tensorrt 10": {("", "ScatterElements", "add")}},  # (the plugin's form)
}


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("op, reduction", list(LEFT))
def test_a_reduction_in_a_scan_body_is_rewritten_and_validated(verb, op, reduction):
    model = scan_model(op, reduction)
    result, outcome = VERBS[verb](model)
    expected = LEFT[(op, reduction)][verb]
    rewritten = [r["node"] for p in outcome.passes for r in p["rewritten"] if r["node"].startswith(op)]
    if expected != {("", op, reduction)}:
        assert rewritten and all("Scan" in where for where in rewritten), outcome.passes
        assert outcome.validation["checked_against"].startswith("onnxruntime")
    left = {(n.domain, n.op_type, n.attributes["reduction"].value if "reduction" in n.attributes else "none")
            for n, _ in iter_nodes(ir.serde.deserialize_model(result)) if n.op_type in ("ScatterElements", "ScatterND")}
    if expected is None:
        assert all(r == "none" for d, _, r in left if d == ""), left
    else:
        assert left == expected
