"""Oracles shared by the lowering tests (test_lower, test_tensorrt_lowering, testinline_if):
onnxruntime runs, the comparison validation uses, ONNX's own reduction backend cases, and the
expected output of a one-scatter model."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx.backend.test.case.node import collect_testcases

from scatter_rewrite.evaluator import scatter_elements, scatter_nd
from scatter_rewrite.validate import compare


def ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    return session.run(None, {k: v for k, v in feeds.items() if k in names})


def assert_same(expected, actual, float_reduction: bool):
    names = [f"out{i}" for i in range(len(expected))]
    _, failures = compare(names, list(expected), list(actual), float_reduction)
    assert not failures, failures


# ONNX's own backend cases with a reducing ScatterElements/ScatterND.
BACKEND_CASES = [c for c in collect_testcases() if c.model is not None
                 and any(n.op_type in ("ScatterElements", "ScatterND")
                         and any(a.name == "reduction" and a.s != b"none" for a in n.attribute)
                         for n in c.model.graph.node)]


def expected_outputs(model, feeds, op, attrs):
    """onnxruntime on the original; our evaluator where onnxruntime lacks the kernel (float16
    add/mul, bool max/min)."""
    try:
        return ort_run(model, feeds)
    except Exception:
        fn = scatter_elements if op == "ScatterElements" else scatter_nd
        return [fn(feeds["data"], feeds["indices"], feeds["updates"], **attrs)]
