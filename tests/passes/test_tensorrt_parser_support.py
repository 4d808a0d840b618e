"""Every node ``scatter-rewrite tensorrt`` writes is one TensorRT's ONNX parser of that
version documents, with the data types it gets, and ``check`` reports what the parser would reject.

The authority is the one table in :mod:`scatter_rewrite.targets.tensorrt.parser` (onnx-tensorrt
docs/operators.md and the TensorRT operator docs, cited there). The corpus below runs the whole
flow for 8.6 and 10; the types of every value come from ONNX shape inference on the result (local
functions inlined), independent of the types the passes record. What this corpus caught:

* BOOL scatter data: no TensorRT scatter takes BOOL (Scatter.html: 8.6 int8/int32/float16/float32;
  10.x adds int64/bfloat16). ScatterElements(none) became ScatterND(BOOL) and ScatterND(BOOL) stayed;
  both are now written through INT32 (Cast, ScatterND, Cast back), and ``check`` reports BOOL data.
* BFLOAT16 on 8.6 (TensorRT 8 has no bfloat16) and types with no exact carrier (UINT32 on 8.6,
  UINT64, ...) were rewritten (or lowered) into nodes the parser cannot take; now left alone with
  the reason, and ``check`` blocks them with no fix (INT16/UINT8/UINT16/UINT32 are written through
  a wider integer: tests/passes/test_tensorrt_carriers.py).
* INT8 reductions: the sorting-network lowering flattened/gathered/concatenated INT8 (8.6's table has
  no INT8 Flatten; 10.x lists INT8 for Cast and the scatter layer only); it now casts to INT32 first.
* ``tensorrt_violations`` checked op names only; it now checks each op's data type against the table.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.inliner
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto

import scatter_rewrite as sr
from scatter_rewrite.readiness import check
from scatter_rewrite.graph import iter_nodes
from scatter_rewrite.passes.lowering import network_reduce as net
from scatter_rewrite.passes.lowering import segment_reduce as seg
from scatter_rewrite.targets.tensorrt.parser import PARSER_MAX_OPSET, SUPPORTED_TYPES, unsupported_type
from scatter_rewrite.passes.tensorrt import scatter_data_blocker
from scatter_rewrite.passes.tensorrt_violations import tensorrt_violations
from scatter_rewrite.testing import constant_scatter_model, scatter_model
from tests.helpers.models import scatter_nd_model

VERSIONS = ("8.6", "10")
DT = ir.DataType


# ---- what the result holds, typed by ONNX shape inference --------------------------------------------

CONSTANT_TYPES = {"value_int": TensorProto.INT64, "value_ints": TensorProto.INT64, "value_float": TensorProto.FLOAT,
                  "value_floats": TensorProto.FLOAT}


def typed_nodes(model: onnx.ModelProto):
    """(node, opset, {value name: element type}) for every node of ``model`` (subgraphs included; local
    functions inlined first, so their nodes are typed too)."""
    inlined = onnx.inliner.inline_local_functions(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(inlined, strict_mode=True, data_prop=True)
    except onnx.shape_inference.InferenceError:  # an export declaring shapes inference refutes (onnx.checker
        inferred = onnx.shape_inference.infer_shapes(inlined, data_prop=True)  # fails it): what it can type
    types: dict[str, int] = {}
    found = []

    def collect(graph):
        for vi in [*graph.input, *graph.output, *graph.value_info]:
            if vi.type.tensor_type.elem_type:
                types[vi.name] = vi.type.tensor_type.elem_type
        types.update({t.name: t.data_type for t in graph.initializer})
        for node in graph.node:
            if node.op_type == "Constant":
                (a,) = node.attribute
                types[node.output[0]] = a.t.data_type if a.name == "value" else CONSTANT_TYPES[a.name]
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    collect(a.g)

    def walk(graph):
        for node in graph.node:
            found.append(node)
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)

    collect(inferred.graph)
    walk(inferred.graph)
    opset = next(o.version for o in inferred.opset_import if o.domain == "")
    return [(n, opset, types) for n in found]


def checked_types(node: onnx.NodeProto, types: dict) -> list[DT]:
    """The element types the table constrains for ``node`` (as parser.typed_inputs says)."""
    if node.op_type == "Constant":
        names = [node.output[0]]
    else:
        names = [node.input[i] for i in ((1, 2) if node.op_type == "Where" else (0,)) if i < len(node.input)]
    out = [DT(types[n]) for n in names if n and n in types]
    if node.op_type == "Cast":
        out.append(DT(next(a.i for a in node.attribute if a.name == "to")))
    return out


def not_documented(model: onnx.ModelProto, version: str) -> list[str]:
    found = []
    for node, opset, types in typed_nodes(model):
        if node.domain not in ("", "ai.onnx"):
            found.append(f"{node.domain}::{node.op_type}")
        elif node.op_type not in SUPPORTED_TYPES[version]:
            found.append(f"{node.op_type} (not in the table)")
        else:
            found += [why for t in checked_types(node, types) if (why := unsupported_type(node.op_type, t, version))]
        if opset > PARSER_MAX_OPSET[version]:
            found.append(f"{node.op_type} at opset {opset}")
    return sorted(set(found))


# ---- the corpus: what the tensorrt flow handles, with data types every version's scatter takes ----------

F, F16, I8, I32, I64, B, F64 = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT8, TensorProto.INT32,
                                TensorProto.INT64, TensorProto.BOOL, TensorProto.DOUBLE)


def elements(dtype=F, reduction=None, opset=18, itype=I64, **kw):
    kw.setdefault("data_shape", (4, 5, 3))
    kw.setdefault("indices_shape", (6, 5, 3))
    extra = {} if reduction is None else {"reduction": reduction}
    return scatter_model("ScatterElements", opset=opset, data_type=dtype, indices_type=itype, axis=kw.pop("axis", 0),
                         **kw, **extra)


REDUCTIONS = ("add", "mul", "max", "min")
label = TensorProto.DataType.Name


def tensor_scatter(mode: str) -> onnx.ModelProto:
    vi = oh.make_tensor_value_info
    node = oh.make_node("TensorScatter", ["cache", "update", "write"], ["out"], axis=-2, mode=mode, name="kv")
    graph = oh.make_graph([node], "g", [vi("cache", F, [2, 3, 8, 4]), vi("update", F, [2, 3, 2, 4]),
                                        vi("write", I64, [2])], [vi("out", F, [2, 3, 8, 4])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 24)])


CORPUS = {
    "none rank 1": lambda: elements(data_shape=(7,), indices_shape=(3,)),
    "none axis -1 int32 indices": lambda: elements(itype=I32, axis=-1, indices_shape=(4, 5, 2)),
    "none rank 5": lambda: elements(data_shape=(2, 3, 2, 3, 2), indices_shape=(2, 3, 2, 2, 2), axis=3),
    "none more updates than rows": lambda: elements(data_shape=(3, 8), indices_shape=(3, 6), axis=1),
    "none dynamic": lambda: elements(data_shape=("N", 5), indices_shape=("E", 5)),
    "none zero-size data": lambda: elements(data_shape=(4, 0), indices_shape=(2, 0)),
    "nd explicit none": lambda: scatter_nd_model("none"),
    "deprecated Scatter": lambda: scatter_model("Scatter", opset=10, axis=1),
    "constant scatter": lambda: constant_scatter_model("ScatterElements", data=np.zeros((3, 4), np.float32),
                                                       indices=np.array([[0, 1, 2, 0]]),
                                                       updates=np.ones((1, 4), np.float32), axis=0),
    "TensorScatter linear": lambda: tensor_scatter("linear"),
    "TensorScatter circular": lambda: tensor_scatter("circular"),
    "max at opset 16 (TorchScript)": lambda: elements(reduction="max", opset=16),
    "add dynamic data dims": lambda: scatter_nd_model("add", data_shape=("a", "b", 3)),
    "min no updates": lambda: elements(reduction="min", indices_shape=(0, 5, 3)),
    **{f"none {label(t)}": (lambda t=t: elements(t)) for t in (F16, I8, I64, B, F64)},
    **{f"nd none {label(t)}": (lambda t=t: scatter_nd_model(data_type=t)) for t in (I32, B)},
    # every data type with two reductions (one per op), every reduction on floats and integers
    **{f"{name} {r} {label(t)}": (lambda make=make, r=r, t=t: make(t, r))
       for name, make, shift in (("elements", elements, 0), ("nd", lambda t, r: scatter_nd_model(r, data_type=t), 2))
       for i, t in enumerate((F, F16, I8, I32, I64, B, F64)) for r in [REDUCTIONS[(i + shift) % 4]]},
    "elements max in if": lambda: elements(F, "max", where="if"),
    "nd add in loop": lambda: scatter_nd_model("add", data_type=I8, where="loop"),
    "elements none in function": lambda: elements(B, where="function"),
    "nd max in function": lambda: scatter_nd_model("max", data_type=B, where="function"),
}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_node_the_flow_writes_is_in_the_table(version):
    """One run over the compact corpus per version: the result holds only (op, data type) pairs the
    parser documents, at an opset it documents, and check finds nothing to block."""
    problems = {}
    for name, make, fix_dims in [(n, m, None) for n, m in CORPUS.items()] + [
            ("add with --fix-dim E=6", lambda: elements(I32, "add", indices_shape=("E", 5, 3)), {"E": 6})]:
        out = sr.prepare_for_tensorrt(make(), trt_version=version, fix_dims=fix_dims,
                                      validate=False)  # (the form; its proof: the tests below)
        found = not_documented(out, version)
        found += [b for f in check(ir.serde.deserialize_model(out), f"tensorrt-{version}") for b in f.blockers]
        if found:
            problems[name] = found
    assert problems == {}


@pytest.mark.parametrize("version", VERSIONS)
def test_pytorch_exports_gain_only_documented_nodes(version):
    """The exporter models (with nodes of their own) gain nothing the table lacks."""
    from pathlib import Path

    data = Path(__file__).parents[1] / "data"
    for path in sorted(data.glob("*/*.onnx")):
        model = onnx.load(path)
        try:
            out = sr.prepare_for_tensorrt(model, trt_version=version, validate=False)  # (the form)
        except sr.ConversionError:
            continue  # refused: nothing written, so nothing gained (the refusals: test_check_agrees_with_verbs)
        # what the export itself holds stays (8.6: its ConstantOfShape on INT64, which 8.x documents for FP32)
        gained = set(not_documented(out, version)) - set(not_documented(model, version))
        assert gained == set(), (path.name, gained)


# ---- the fixes, proven in onnxruntime ------------------------------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("make", [lambda w: elements(B, where=w, axis=2, indices_shape=(4, 5, 2)),
                                  lambda w: scatter_nd_model(data_type=B, where=w),
                                  lambda w: scatter_nd_model("none", data_type=B, where=w)],
                         ids=["elements", "nd", "nd explicit none"])
@pytest.mark.parametrize("where", ["main", "if", "function"])
def test_bool_scatter_is_written_through_int32(version, make, where):
    model = make(where)
    for before in check(ir.serde.deserialize_model(model), f"tensorrt-{version}"):
        assert any(b.startswith("BOOL data") for b in before.blockers)
        assert before.fix == f"scatter-rewrite tensorrt --trt-version {version}"
    out, outcome = sr.prepare_for_tensorrt(model, trt_version=version, validate=True, return_report=True)
    assert outcome.validation["max_abs_diff"] == 0.0
    scatters = [n for n, _ in iter_nodes(ir.serde.deserialize_model(out))
                if n.op_type in ("Scatter", "ScatterElements", "ScatterND")]
    assert [n.op_type for n in scatters] == ["ScatterND"] * len(scatters) and scatters
    assert all(not n.attributes for n in scatters)
    assert not_documented(out, version) == []
    assert not any(f.blocked for f in check(ir.serde.deserialize_model(out), f"tensorrt-{version}"))


@pytest.mark.parametrize("version", VERSIONS)
def test_int8_reduction_touches_int8_only_in_three_casts(version):
    model = elements(I8, "add", indices_shape=(9, 5, 3))
    out, outcome = sr.prepare_for_tensorrt(model, trt_version=version, validate=True, return_report=True)
    assert outcome.validation["max_abs_diff"] == 0.0
    int8 = [n.op_type for n, _, types in typed_nodes(out) if any(types.get(v) == I8 for v in [*n.input, *n.output])]
    assert int8 == ["Cast"] * 3  # data and updates to INT32, the result back


def test_the_network_lowering_writes_small_integers_through_int32():
    m = ir.serde.deserialize_model(elements(I8, "max"))
    node = next(n for n in m.graph if n.op_type == "ScatterElements")
    nodes, out = net.lower_reduction_network(node, 17, seg.Names())
    assert out.dtype == DT.INT8 and out.producer().op_type == "Cast"
    touching = {n.op_type for n in nodes for v in [*n.inputs, *n.outputs] if v is not None and v.dtype == DT.INT8}
    assert touching == {"Cast"}


@pytest.mark.parametrize("version, dtype, phrase", [
    ("8.6", TensorProto.BFLOAT16, "TensorRT 8.6 has no bfloat16"),
    ("8.6", TensorProto.UINT32, "UINT32 data: not a type TensorRT 8.6's scatter takes"),
    ("10", TensorProto.UINT64, "UINT64 data: not a type TensorRT 10's scatter takes"),
])
@pytest.mark.parametrize("reduction", [None, "add"])
def test_types_tensorrt_lacks_are_refused_and_checked(version, dtype, phrase, reduction):
    model = elements(dtype, reduction)
    with pytest.raises(sr.ConversionError, match=f"cannot prepare for TensorRT {version}: ") as refused:
        sr.prepare_for_tensorrt(model, trt_version=version)
    (skip,) = refused.value.declined
    assert phrase in skip.detail
    (finding,) = check(ir.serde.deserialize_model(model), f"tensorrt-{version}")
    assert any(phrase in b for b in finding.blockers) and finding.fix is None


def test_bfloat16_is_still_prepared_for_10():
    model = elements(TensorProto.BFLOAT16, "max")
    out = sr.prepare_for_tensorrt(model, trt_version="10", validate=False)  # (the form, not its proof)
    assert "ScatterElements" not in {n.op_type for n in out.graph.node}
    assert not_documented(out, "10") == []
    assert scatter_data_blocker(DT.BFLOAT16, "10") is None


# ---- the table and the checker ---------------------------------------------------------------------------

@pytest.mark.parametrize("version, op, dtype, ok", [
    # the parser casts INT64 to INT32 on 8.x (docs/operators.md; onnx2trt_utils convertDtype)
    ("8.6", "Range", DT.INT64, True), ("8.6", "Max", DT.INT64, True), ("8.6", "Mod", DT.INT64, True),
    ("8.6", "Where", DT.DOUBLE, True),
    # what the 8.5/8.6 table and importer leave out
    ("8.6", "CumSum", DT.INT64, False), ("8.6", "ReduceMax", DT.INT32, False), ("8.6", "Flatten", DT.INT8, False),
    ("8.6", "Range", DT.FLOAT16, False), ("8.6", "Cast", DT.BFLOAT16, False), ("8.6", "Add", DT.BOOL, False),
    ("8.6", "ScatterND", DT.BOOL, False), ("8.6", "ScatterND", DT.INT8, True),
    # 10.x: INT64 and BF16 are native; INT8 only where the TensorRT operator docs list it
    ("10", "CumSum", DT.INT64, False), ("10", "Mod", DT.INT64, True), ("10", "Gather", DT.INT8, False),
    ("10", "Cast", DT.INT8, True), ("10", "ScatterND", DT.BOOL, False), ("10", "ScatterND", DT.BFLOAT16, True),
    ("10", "Not", DT.INT32, False),
])
def test_table_entries(version, op, dtype, ok):
    assert (unsupported_type(op, dtype, version) is None) == ok


def test_violations_check_data_types_through_untyped_values():
    x = ir.Value(name="x", type=ir.TensorType(DT.INT8), shape=ir.Shape([4, 2]))
    flat = ir.node("Flatten", [x], {"axis": 1})
    assert any("Flatten on INT8" in v for v in tensorrt_violations([flat], "8.6"))
    # a comparison's untyped output is BOOL: And takes it, Add does not
    y = ir.Value(name="y", type=ir.TensorType(DT.FLOAT), shape=ir.Shape([3]))
    less = ir.node("Less", [y, y])
    assert tensorrt_violations([less, ir.node("And", [less.outputs[0], less.outputs[0]])], "8.6") == []
    added = ir.node("Add", [less.outputs[0], less.outputs[0]])
    assert "Add on BOOL" in " ".join(tensorrt_violations([less, added], "10"))
    assert "Cast on BFLOAT16" in " ".join(tensorrt_violations([ir.node("Cast", [y], {"to": DT.BFLOAT16})], "8.6"))
    assert "not in the operator table" in tensorrt_violations([ir.node("Trilu", [y])], "10")[0]


def test_the_lowering_is_declined_when_it_would_emit_an_undocumented_type():
    """The violation check is the backstop of lower_tensorrt_safe: a lowering at opset 13 with a
    dynamic data shape reshapes through CumSum/ReduceMax on INT64, which 8.6 documents for floats only."""
    m = ir.serde.deserialize_model(scatter_nd_model("add", data_type=F, opset=18, data_shape=("a", "b", 3)))
    node = next(n for n in m.graph if n.op_type == "ScatterND")
    nodes, _ = net.lower_reduction_network(node, 13, seg.Names())
    found = tensorrt_violations(nodes, "8.6")
    assert any(v.startswith("CumSum on INT64") for v in found)
    assert any(v.startswith("ReduceMax on INT64") for v in found)


@pytest.mark.parametrize("version, dtype, noted", [("8.6", I64, "casts INT64 data down to INT32"), ("10", I64, None),
                                                   ("10", F64, "casts DOUBLE data down to FLOAT")])
def test_check_notes_the_parsers_own_narrowing(version, dtype, noted):
    (finding,) = check(ir.serde.deserialize_model(scatter_nd_model(data_type=dtype, opset=17)), f"tensorrt-{version}")
    assert not finding.blocked
    assert any(noted in n for n in finding.notes) if noted else not any("casts" in n for n in finding.notes)
