"""Scatters on data types TensorRT's scatter lacks, written through a wider integer type it takes
(INT16/UINT8/UINT16 through INT32, UINT32 through INT64 on 10/11): the cases are ONNX's own
backend scatter cases (``onnx.backend.test``) retyped to each such type, and a corpus of every
op and reduction in a graph, an If and a function. Proven with validation on, and without it
against onnxruntime on the original at the type's limits (add/mul wrap around there). Where no
exact carrier exists (UINT32 on 8.6, UINT64, STRING) the node is refused with the reason, and
``check`` agrees."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import scatter_rewrite as sr
from scatter_rewrite.graph import iter_nodes
from scatter_rewrite.targets.tensorrt.parser import SCATTER_CARRIERS
from scatter_rewrite.readiness import check
from scatter_rewrite.testing import scatter_model
from tests.helpers.backend_cases import node_cases
from tests.helpers.models import scatter_nd_model

CARRIED = {"8.6": (TensorProto.INT16, TensorProto.UINT8, TensorProto.UINT16),
           "10": (TensorProto.INT16, TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32)}
NAME = TensorProto.DataType.Name


def _retyped_backend_cases(elem_type: int) -> list[tuple[str, onnx.ModelProto, list[np.ndarray]]]:
    """ONNX's backend cases of ScatterElements/ScatterND with data and updates of ``elem_type``
    (their values cast: the cases' floats are small integers)."""
    np_type = helper.tensor_dtype_to_np_dtype(elem_type)
    found = []
    for case in node_cases():
        if not any(n.op_type in ("ScatterElements", "ScatterND") for n in case.model.graph.node):
            continue
        model = onnx.ModelProto()
        model.CopyFrom(case.model)
        for vi in [model.graph.input[0], model.graph.input[2], *model.graph.output]:
            vi.type.tensor_type.elem_type = elem_type
        inputs, _ = case.data_sets[0]
        found.append((case.name, model, [inputs[0].astype(np_type), inputs[1],
                                         inputs[2].astype(np_type)]))
    return found


def _run_ort(model: onnx.ModelProto, feeds: list[np.ndarray]) -> np.ndarray:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in model.graph.input]
    return session.run(None, dict(zip(names, feeds)))[0]


def _near_limits(values: np.ndarray, seed: int) -> np.ndarray:
    """``values``' shape filled from the dtype's extremes and around them (sums and products
    there leave the type's range)."""
    info = np.iinfo(values.dtype)
    pool = np.array([info.min, info.min + 1, info.max, info.max - 1, info.max // 2 + 1, 0, 1, 2,
                     3], dtype=object)
    picked = np.random.default_rng(seed).choice(pool, size=values.shape)
    return np.asarray(picked.astype(np.int64) if info.max < 2**63 else picked, dtype=values.dtype)


def _scatter_types(model: onnx.ModelProto) -> set[str]:
    m = ir.serde.deserialize_model(model)
    return {n.inputs[0].dtype.name for n, _ in iter_nodes(m)
            if n.op_type in ("ScatterND", "ScatterElements") and n.inputs[0].dtype is not None}


@pytest.mark.parametrize("version", ["8.6", "10"])
def test_backend_cases_are_written_through_a_carrier_not_refused(version):
    """Every retyped case is prepared, validated bit for bit, and its scatters run on the
    carrier; check says FIXABLE with the verb's command, and READY-or-clean afterwards."""
    refused, cases = [], 0
    for elem_type in CARRIED[version]:
        wide = SCATTER_CARRIERS[version][ir.DataType(elem_type)].name
        for name, model, _ in _retyped_backend_cases(elem_type):
            cases += 1
            findings = check(ir.serde.deserialize_model(model), f"tensorrt-{version}")
            assert all(f.fix == f"scatter-rewrite tensorrt --trt-version {version}"
                       for f in findings if f.blocked), (name, findings)
            try:
                out, outcome = sr.prepare_for_tensorrt(model, trt_version=version, validate=True,
                                                       return_report=True)
            except sr.ConversionError as error:
                refused.append((name, NAME(elem_type), str(error)))
                continue
            assert outcome.validation["max_abs_diff"] == 0.0, name
            assert _scatter_types(out) <= {wide}, (name, _scatter_types(out))
            assert not any(f.blocked for f in check(ir.serde.deserialize_model(out),
                                                    f"tensorrt-{version}")), name
    assert cases == 14 * len(CARRIED[version])
    assert refused == []


@pytest.mark.parametrize("version", ["8.6", "10"])
@pytest.mark.parametrize("elem_type", [TensorProto.INT16, TensorProto.UINT8, TensorProto.UINT16,
                                       TensorProto.UINT32])
def test_without_validation_it_equals_onnxruntime_at_the_types_limits(version, elem_type):
    """validate=False: the prepared model, run in onnxruntime on values at the dtype's extremes
    (add/mul overflow and wrap around there), equals the original bit for bit."""
    if elem_type not in CARRIED[version]:
        pytest.skip("no exact carrier: see test_refused_where_no_exact_carrier_exists")
    for seed, (name, model, inputs) in enumerate(_retyped_backend_cases(elem_type)):
        out = sr.prepare_for_tensorrt(model, trt_version=version, validate=False)
        for trial in range(3):
            feeds = [_near_limits(inputs[0], 3 * seed + trial), inputs[1],
                     _near_limits(inputs[2], 3 * seed + trial + 100)]
            want, got = _run_ort(model, feeds), _run_ort(out, feeds)
            assert got.dtype == want.dtype and np.array_equal(got, want), (name, feeds, got, want)


REDUCTIONS = ("none", "add", "mul", "max", "min")


def _corpus_model(op: str, reduction: str, elem_type: int, where: str) -> onnx.ModelProto:
    extra = {} if reduction == "none" else {"reduction": reduction}
    if op == "ScatterND":
        return scatter_nd_model(reduction, data_type=elem_type, where=where)
    return scatter_model("ScatterElements", data_type=elem_type, where=where, axis=1,
                         data_shape=(4, 5), indices_shape=(3, 7) if where == "main" else (2, 5),
                         **extra)


@pytest.mark.parametrize("version", ["8.6", "10"])
@pytest.mark.parametrize("where", ["main", "if", "function"])
def test_every_op_and_reduction_in_graphs_ifs_and_functions(version, where):
    problems = {}
    for elem_type in CARRIED[version]:
        for op in ("ScatterElements", "ScatterND"):
            for reduction in REDUCTIONS:
                model = _corpus_model(op, reduction, elem_type, where)
                key = (NAME(elem_type), op, reduction)
                for finding in check(ir.serde.deserialize_model(model), f"tensorrt-{version}"):
                    if finding.fix is None:
                        problems[key] = ("check", finding.blockers)
                try:
                    _, outcome = sr.prepare_for_tensorrt(model, trt_version=version,
                                                         validate=True, return_report=True)
                except sr.ConversionError as error:
                    problems[key] = str(error)
                    continue
                if outcome.validation["max_abs_diff"] != 0.0:
                    problems[key] = outcome.validation
    assert problems == {}


@pytest.mark.parametrize("version, elem_type, phrase", [
    ("8.6", TensorProto.UINT32, "8.6 has no 64-bit integer to carry it exactly"),
    ("8.6", TensorProto.UINT64, "no wider type it takes holds every value exactly"),
    ("10", TensorProto.UINT64, "no wider type it takes holds every value exactly"),
    ("10", TensorProto.STRING, "no wider type it takes holds every value exactly"),
])
@pytest.mark.parametrize("reduction", ["none", "add"])
def test_refused_where_no_exact_carrier_exists(version, elem_type, phrase, reduction):
    if elem_type == TensorProto.STRING and reduction == "add":
        pytest.skip("no string add")
    model = _corpus_model("ScatterElements", reduction, elem_type, "main")
    with pytest.raises(sr.ConversionError, match=f"cannot prepare for TensorRT {version}: ") as refused:
        sr.prepare_for_tensorrt(model, trt_version=version, validate=False)
    (skip,) = refused.value.declined
    assert f"{NAME(elem_type)} data: not a type TensorRT {version}'s scatter takes" in skip.detail
    assert phrase in skip.detail and "'scatterelements_0'" in str(refused.value)
    (finding,) = check(ir.serde.deserialize_model(model), f"tensorrt-{version}")
    assert any(phrase in b for b in finding.blockers) and finding.fix is None


def test_add_and_mul_wrap_into_the_narrow_type_before_the_cast_back():
    """The Cast back never sees a value outside the narrow type (TensorRT's Cast docs do not say
    what it does with one): add/mul go through Mod in the carrier; max/min/none need nothing."""
    for reduction, wrapped in (("add", True), ("mul", True), ("max", False), ("none", False)):
        model = _corpus_model("ScatterElements", reduction, TensorProto.UINT8, "main")
        out = ir.serde.deserialize_model(sr.prepare_for_tensorrt(model, trt_version="10",
                                                                 validate=False))
        (back,) = [n for n in out.graph if n.op_type == "Cast" and n.outputs[0].name == "output"]
        via = back.inputs[0].producer()  # TensorRT converts UINT8 to and from FLOAT/HALF only
        assert via.op_type == "Cast" and via.attributes["to"].value == TensorProto.FLOAT
        producer = via.inputs[0].producer()
        assert (producer.op_type == "Mod") is wrapped, reduction
        if wrapped:
            assert producer.inputs[1].const_value.numpy() == 256
            assert producer.attributes["fmod"].value == 0


@pytest.mark.parametrize("elem_type, caveat", [(TensorProto.INT16, True), (TensorProto.UINT16, True),
                                               (TensorProto.UINT32, True), (TensorProto.UINT8, False)])
def test_check_and_the_report_say_what_tensorrt_still_cannot_hold(elem_type, caveat):
    """The scatter is fixed either way; TensorRT has no INT16/UINT16/UINT32 tensors at all, so the
    user is told the model's own values of that type must change (UINT8 is a TensorRT type)."""
    model = _corpus_model("ScatterND", "add", elem_type, "main")
    phrase = f"TensorRT has no {NAME(elem_type)} tensors"
    (finding,) = check(ir.serde.deserialize_model(model), "tensorrt-10")
    assert finding.fix == "scatter-rewrite tensorrt --trt-version 10"
    assert any(phrase in n for n in finding.notes) is caveat
    _, outcome = sr.prepare_for_tensorrt(model, trt_version="10", validate=False, return_report=True)
    details = " ".join(note["detail"] for step in outcome.passes for note in step["rewritten"])
    assert (phrase in details) is caveat and f"{NAME(elem_type)} data written through" in details


@pytest.mark.parametrize("version", ["8.6", "10"])
@pytest.mark.parametrize("elem_type", [TensorProto.UINT8, TensorProto.UINT32, TensorProto.UINT64])
def test_check_on_the_command_line_agrees_with_the_verb(version, elem_type, tmp_path):
    import json

    from tests.helpers.cli import invoke

    path = tmp_path / "m.onnx"
    onnx.save(_corpus_model("ScatterElements", "add", elem_type, "main"), path)
    checked = invoke("check", path, "--target", f"tensorrt-{version}", "--json")
    (report,) = json.loads(checked.stdout)["models"]
    done = invoke("tensorrt", path, "--trt-version", version, "-o", tmp_path / "out.onnx")
    carried = elem_type in CARRIED[version]
    assert (done.exit_code == 0) is carried and report["reachable"] is carried, done.stderr
    assert report["status"] == ("FIXABLE" if carried else "BLOCKED")
    if carried:
        assert "PASSED" in done.stdout.splitlines()[-1]
    else:
        assert done.stderr.splitlines()[-1] == f"scatter-rewrite: error: {report['dry_run']['error']}"


@pytest.mark.parametrize("version", ["8.6", "10"])
def test_uint8_is_converted_only_to_and_from_float(version):
    """NvInferRuntimeBase.h: kUINT8 converts to and from kFLOAT/kHALF only, so every Cast touching
    UINT8 has FLOAT on its other side, and no other node reads or writes UINT8 (types from ONNX
    shape inference on the result)."""
    for reduction in REDUCTIONS:
        model = _corpus_model("ScatterElements", reduction, TensorProto.UINT8, "main")
        out = onnx.shape_inference.infer_shapes(
            sr.prepare_for_tensorrt(model, trt_version=version, validate=False), strict_mode=True)
        graph = out.graph
        types = {vi.name: vi.type.tensor_type.elem_type
                 for vi in [*graph.input, *graph.output, *graph.value_info]}
        types.update({t.name: t.data_type for t in graph.initializer})
        for node in graph.node:
            touched = {types.get(v) for v in [*node.input, *node.output] if v}
            if node.op_type == "Cast" and TensorProto.UINT8 in touched:
                assert touched == {TensorProto.UINT8, TensorProto.FLOAT}, (reduction, node)
            else:
                assert TensorProto.UINT8 not in touched, (reduction, node)
