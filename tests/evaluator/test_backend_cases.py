"""ONNX's own backend test cases for the scatter ops, run through our kernels."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest

from scatter_rewrite.evaluator import scatter, scatter_elements, scatter_nd, tensor_scatter
from tests.helpers.kernel_oracles import run_kernel

KERNELS = {
    "Scatter": scatter,
    "ScatterElements": scatter_elements,
    "ScatterND": scatter_nd,
    "TensorScatter": tensor_scatter,
}


def _kernel_node_cases():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # other ops' case generators warn about overflows
        cases = collect_testcases(None)
    return [c for c in cases if c.model.graph.node[0].op_type in KERNELS]


CASES = _kernel_node_cases()


def test_every_scatter_op_has_cases():
    assert {c.model.graph.node[0].op_type for c in CASES} == set(KERNELS)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_backend_case(case):
    node = case.model.graph.node[0]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
    for inputs, outputs in case.data_sets:
        got = run_kernel(KERNELS[node.op_type], list(inputs), **attrs, node_name=node.name)
        assert got.dtype == outputs[0].dtype
        np.testing.assert_array_equal(got, outputs[0], strict=True)
