"""The scatter cases of onnxruntime's, PyTorch's and ONNX's own tests (``tests/helpers/upstream_scatter_cases.py``)
through ``prepare_for_tensorrt``: on the data types TensorRT's scatter lacks and the pass writes
through a wider integer (INT16/UINT8/UINT16/UINT32 on 10, INT16/UINT8/UINT16 on 8.6) nothing is
refused and the prepared model gives the upstream test's expected output bit for bit; on every
other type the refusals are exactly the types with no exact carrier, each named with its reason.

validate=False throughout: the judgement is the upstream expected output, not our validation."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator

import scatter_rewrite as sr
from scatter_rewrite.targets.tensorrt.parser import SCATTER_CARRIERS
from scatter_rewrite.readiness import check
from tests.helpers.equivalence import assert_same
from tests.helpers.upstream_scatter_cases import RETYPED, Case, all_cases, by_type

# The types written through a wider integer (the carriers' table, SCATTER_CARRIERS, must agree).
CARRIED = {"8.6": ("INT16", "UINT8", "UINT16"), "10": ("INT16", "UINT8", "UINT16", "UINT32")}
# The data types with no exact carrier, and the words of the refusal (scatter_data_blocker).
NO_CARRIER = {
    "10": {"UINT64": "no wider type it takes holds every value exactly",
           "STRING": "no wider type it takes holds every value exactly"},
    "8.6": {"UINT64": "no wider type it takes holds every value exactly",
            "STRING": "no wider type it takes holds every value exactly",
            "UINT32": "8.6 has no 64-bit integer to carry it exactly",
            "BFLOAT16": "TensorRT 8.6 has no bfloat16 type"},
}
def _output_of(model, case: Case) -> np.ndarray:
    """``model``'s output on the case's inputs: onnxruntime, or onnx.reference where onnxruntime
    lacks the kernel (float16 ScatterND reductions, bfloat16)."""
    feeds = {vi.name: value for vi, value in zip(model.graph.input, case.inputs)}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 4  # (its refusal is the answer here, not an error to print)
    try:
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        return session.run(None, feeds)[0]
    except Exception:  # (a kernel onnxruntime lacks)
        return ReferenceEvaluator(model).run(None, feeds)[0]


def test_carried_types_are_the_carriers_table():
    assert {v: {d.name for d in SCATTER_CARRIERS[v]} for v in CARRIED} == {
        v: set(types) for v, types in CARRIED.items()}


def test_the_set_as_the_module_counts_it():
    counts = collections.Counter(c.dtype for c in all_cases())
    assert len(all_cases()) == 626
    assert {t: counts[t] for t in RETYPED} == {"INT16": 77, "UINT8": 72, "UINT16": 73, "UINT32": 73}
    sources = {c.source.split()[0] for c in all_cases()}
    assert sources == {"onnxruntime/test/providers/cpu/tensor/scatter_op_test.cc",
                       "onnxruntime/test/providers/cpu/tensor/scatter_nd_op_test.cc",
                       "pytorch", "onnx.backend.test.case.node"}
    # every op, reduction and source is on every retyped type
    for dtype in RETYPED:
        kinds = {(c.op, c.reduction) for c in by_type([dtype])}
        assert {("Scatter", "none"), ("ScatterElements", "none"), ("ScatterND", "none"),
                ("TensorScatter", "none")} <= kinds, dtype
        assert {r for _, r in kinds} == {"none", "add", "mul", "max", "min"}, dtype


def test_the_expected_outputs_are_the_originals_in_onnxruntime():
    """The translation is right: onnxruntime (onnx.reference where it lacks the kernel) gives each
    case's expected output on the original model; integers, bool and strings exactly, floats as
    upstream compares them (within float32 rounding: its sums of 0.1 are written rounded)."""
    for case in all_cases():
        got = _output_of(case.model, case)
        if case.dtype in ("FLOAT", "DOUBLE", "FLOAT16", "BFLOAT16"):
            assert got.dtype == case.expected.dtype, case.source
            np.testing.assert_allclose(got.astype(np.float64), case.expected.astype(np.float64),
                                       rtol=1e-6, err_msg=case.source)
        else:
            assert_same(got, case.expected)


@pytest.mark.parametrize("version", ["10", "8.6"])
def test_carried_types_are_prepared_and_give_the_expected_output_bit_for_bit(version):
    wrong, refused, seen = [], [], collections.Counter()
    for case in by_type(CARRIED[version]):
        try:
            out = sr.prepare_for_tensorrt(case.model, trt_version=version, validate=False)
        except sr.ConversionError as error:
            refused.append((case.source, case.dtype, str(error)))
            continue
        seen[case.dtype] += 1
        got = _output_of(out, case)
        if got.dtype != case.expected.dtype or not np.array_equal(got, case.expected):
            wrong.append((case.source, case.dtype, case.expected.tolist(), got.tolist()))
    assert wrong == []
    assert refused == []
    assert set(seen) == set(CARRIED[version])


def _refusals(version: str, cases) -> dict:
    """Per data type: how many cases were prepared and how many refused, and each refusal's text."""
    refused, prepared, why = collections.Counter(), collections.Counter(), {}
    for case in cases:
        try:
            sr.prepare_for_tensorrt(case.model, trt_version=version, validate=False)
        except sr.ConversionError as error:
            refused[case.dtype] += 1
            why[(case.source, case.dtype)] = str(error)
        else:
            prepared[case.dtype] += 1
    return {"refused": refused, "prepared": prepared, "why": why}


@pytest.mark.parametrize("version", ["10", "8.6"])
def test_only_types_without_an_exact_carrier_are_refused(version):
    """Over the whole set, every type but the carried ones: every case of a type without an exact
    carrier is refused for its type, every other case is prepared."""
    cases = [c for c in all_cases() if c.dtype not in CARRIED[version]]
    found = _refusals(version, cases)
    total = collections.Counter(c.dtype for c in cases)
    want = {t: n for t, n in total.items() if t in NO_CARRIER[version]}
    assert dict(found["refused"]) == want
    assert set(NO_CARRIER[version]) <= set(total), "the set has a case of each type refused"
    for (source, dtype), why in found["why"].items():
        assert f"cannot prepare for TensorRT {version}: " in why, why
        assert f"{dtype} data: " in why and NO_CARRIER[version][dtype] in why, (source, why)


@pytest.mark.parametrize("version", ["8.6", "10", "11"])
@pytest.mark.parametrize("dtype", ["FLOAT", "UINT8"])
def test_a_reducing_scatternd_with_an_empty_index_tuple_is_prepared(version, dtype):
    """indices [2, 0]: every update reduces into the whole data (onnxruntime's
    ScatterND_zero_index_depth_adds_multiple_updates); 10/11 write it as the ScatterElements plugin
    on the data as one row, 8.6 lowers it as one tuple (0) into the data unsqueezed to one row.
    Validated, and ``check`` names the fix."""
    (case,) = [c for c in by_type([dtype])
               if c.source.endswith("ScatterND_zero_index_depth_adds_multiple_updates")]
    (finding,) = check(ir.serde.deserialize_model(case.model), f"tensorrt-{version}")
    assert finding.fix == f"scatter-rewrite tensorrt --trt-version {version}", finding
    out, outcome = sr.prepare_for_tensorrt(case.model, trt_version=version, validate=True,
                                           return_report=True)
    assert outcome.validation["max_abs_diff"] < (1e-6 if dtype == "FLOAT" else 1e-300)
    assert_same(_output_of(out, case), case.expected)
    if version == "8.6":  # no reducing scatter left: 8.6 ignores the reduction
        assert not any(n.op_type.startswith("Scatter") and any(a.name == "reduction" and a.s != b"none"
                                                               for a in n.attribute)
                       for n in out.graph.node)


def test_on_10_an_empty_index_tuple_the_plugin_cannot_take_is_lowered():
    """INT8 data (the ScatterElements plugin takes FP32/FP16/INT32/INT64 only): lowered as on 8.6."""
    (case,) = [c for c in by_type(["INT16"])
               if c.source.endswith("ScatterND_zero_index_depth_adds_multiple_updates")]
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    for vi in [model.graph.input[0], model.graph.input[2], model.graph.output[0]]:
        vi.type.tensor_type.elem_type = onnx.TensorProto.INT8
    out, outcome = sr.prepare_for_tensorrt(model, trt_version="10", validate=True, return_report=True)
    assert outcome.validation["max_abs_diff"] == 0.0
    assert "empty index tuple written as the tuple (0)" in str(outcome.passes)
    feeds = {vi.name: v.astype(np.int8) if v.dtype == np.int16 else v
             for vi, v in zip(model.graph.input, case.inputs)}
    got = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert_same(got, case.expected.astype(np.int8))
