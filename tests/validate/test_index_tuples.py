"""Generated validation inputs respect ScatterND index tuples built with Concat, as PyTorch's
exporters build them for index_put/index_add (tests/data/*/make.py made the exports)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto

import scatter_rewrite as sr
from scatter_rewrite.errors import ScatterRewriteError
from scatter_rewrite.graph import attr, iter_nodes
from scatter_rewrite.testing import scatter_model
from scatter_rewrite.validate import plan_validation, validate

from tests.helpers.models import function_model

ort.set_default_logger_severity(3)
DATA = Path(__file__).parents[1] / "data"
EXPORTS = ["torch/index_put_acc_dynamo18", "torch/index_add_dynamo18", "torch_trt/index_put_dynamo18",
           "torch_trt/index_put_ts16"]


def plan(model: onnx.ModelProto):
    return plan_validation(ir.serde.deserialize_model(model))


def self_validated(model: onnx.ModelProto, inputs: dict, tmp_path: Path):
    """The original against itself on ``inputs``: onnxruntime must run it (it rejects an index out of range)."""
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    the_plan = plan(model)
    the_plan.inputs.update(inputs)
    return validate(path, path, the_plan)


def assert_unique_tuples(*components: tuple[np.ndarray, int]) -> None:
    """Index tuples (values mod their bound, so -1 and bound-1 are the same slot) are all distinct."""
    tuples = np.stack(np.broadcast_arrays(*[np.mod(v, bound) for v, bound in components]), axis=-1).reshape(-1, len(components))
    assert len({tuple(t) for t in tuples.tolist()}) == len(tuples)


# ---- PyTorch exports: index_put / index_add -> ScatterND(data, Concat(Unsqueeze(i)) or Unsqueeze(i), ...) ----

@pytest.mark.parametrize("name", EXPORTS)
def test_exports_get_in_range_indices(name, tmp_path):
    model = onnx.load(DATA / f"{name}.onnx")
    rows = next(i for i in model.graph.input if i.name == "x").type.tensor_type.shape.dim[0].dim_value
    (scatter,) = [n for n, _ in iter_nodes(ir.serde.deserialize_model(model)) if n.op_type == "ScatterND"]
    the_plan = plan(model)
    i = the_plan.inputs["i"]
    assert i.min() >= -rows and i.max() < rows, i
    if attr(scatter, "reduction", "none") == "none":
        assert_unique_tuples((i, rows))
    assert any("generated for i" in note for note in the_plan.notes)
    result = self_validated(model, {}, tmp_path)
    assert result.checked_against == "onnxruntime on the original model"


# (export, flow) pairs where the flow rewrites something, so the result is validated.
FLOWS = [(name, "lower-17") for name in EXPORTS] + [
    ("torch/index_put_acc_dynamo18", "tensorrt-10"), ("torch/index_add_dynamo18", "tensorrt-10"),
    ("torch_trt/index_put_dynamo18", "tensorrt-10"), ("torch_trt/index_put_dynamo18", "tensorrt-8.6"),
    ("torch_trt/index_put_dynamo18", "to_scatternd"),
]


def run_flow(model: onnx.ModelProto, flow: str):
    if flow == "lower-17":
        return sr.lower(model, opset=17, validate=True, return_report=True)
    if flow == "to_scatternd":
        return sr.to_scatternd(model, validate=True, return_report=True)
    return sr.prepare_for_tensorrt(model, trt_version=flow.split("-")[1], validate=True, return_report=True)


@pytest.mark.parametrize("name, flow", FLOWS)
def test_exports_validated_without_user_inputs(name, flow):
    _, outcome = run_flow(onnx.load(DATA / f"{name}.onnx"), flow)
    assert outcome.validation is not None, "the flow rewrote nothing: no validation ran"
    assert outcome.validation["checked_against"] == "onnxruntime on the original model"
    assert any("generated for i" in note for note in outcome.validation["notes"])


# ---- hand-built: ScatterND(data, Concat(Unsqueeze(i0, -1), Unsqueeze(i1, -1), axis=-1), updates) ---------

def concat_model(reduction: str, data_shape=(3, 7, 2), n=5, *, normalize=False, broadcast=False,
                 also_into: int | None = None) -> onnx.ModelProto:
    """``x[i0, i1] = upd`` as PyTorch exports it: tuples (i0, i1) index data dims 0 and 1.

    normalize: i1 is int32, Cast, then ``Where(Less(i1, 0), Add(i1, D1), i1)``. broadcast:
    ``x[i0[:, None], i1[None, :]]``, both Expanded to a shape computed at run time (shape inference
    then knows only ranks). also_into: i1 also indexes dim 0 of a second data ``[also_into, F]``
    through ScatterND(add)."""
    d0, d1, f = data_shape
    const = lambda name, value: oh.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.array(value, np.int64)))
    nodes = [const("last", [-1])]
    i0, i1 = "i0", "i1"
    if normalize:
        nodes += [oh.make_node("Cast", ["i1"], ["i1_64"], to=TensorProto.INT64), const("zero", 0), const("d1", d1),
                  oh.make_node("Less", ["i1_64", "zero"], ["negative"]), oh.make_node("Add", ["i1_64", "d1"], ["shifted"]),
                  oh.make_node("Where", ["negative", "shifted", "i1_64"], ["i1_norm"])]
        i1 = "i1_norm"
    if broadcast:
        nodes += [const("ax0", [0]), const("ax1", [1]),
                  oh.make_node("Unsqueeze", [i0, "ax1"], ["col"]), oh.make_node("Unsqueeze", [i1, "ax0"], ["row"]),
                  oh.make_node("Shape", ["col"], ["col_shape"]), oh.make_node("Shape", ["row"], ["row_shape"]),
                  oh.make_node("Max", ["col_shape", "row_shape"], ["grid"]),
                  oh.make_node("Expand", ["col", "grid"], ["i0_grid"]), oh.make_node("Expand", ["row", "grid"], ["i1_grid"])]
        i0, i1 = "i0_grid", "i1_grid"
    nodes += [oh.make_node("Unsqueeze", [i0, "last"], ["u0"]), oh.make_node("Unsqueeze", [i1, "last"], ["u1"]),
              oh.make_node("Concat", ["u0", "u1"], ["idx"], axis=-1),
              oh.make_node("ScatterND", ["data", "idx", "upd"], ["out"], name="put", reduction=reduction)]
    tuples = [n, n] if broadcast else [n]
    inputs = [oh.make_tensor_value_info("data", TensorProto.FLOAT, [d0, d1, f]),
              oh.make_tensor_value_info("i0", TensorProto.INT64, [n]),
              oh.make_tensor_value_info("i1", TensorProto.INT32 if normalize else TensorProto.INT64, [n]),
              oh.make_tensor_value_info("upd", TensorProto.FLOAT, tuples + [f])]
    outputs = [oh.make_tensor_value_info("out", TensorProto.FLOAT, [d0, d1, f])]
    if also_into is not None:
        nodes += [oh.make_node("Unsqueeze", [i1, "last"], ["u1_alone"]),
                  oh.make_node("ScatterND", ["data2", "u1_alone", "upd2"], ["out2"], reduction="add")]
        inputs += [oh.make_tensor_value_info("data2", TensorProto.FLOAT, [also_into, f]),
                   oh.make_tensor_value_info("upd2", TensorProto.FLOAT, [n, f])]
        outputs += [oh.make_tensor_value_info("out2", TensorProto.FLOAT, [also_into, f])]
    return oh.make_model(oh.make_graph(nodes, "g", inputs, outputs), opset_imports=[oh.make_opsetid("", 18)])


@pytest.mark.parametrize("normalize, broadcast", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("reduction", ["none", "add"])
def test_concat_components_get_their_own_bounds(reduction, normalize, broadcast, tmp_path):
    # 5 tuples: i0 cannot be unique among 3 rows, i1 can among 7 columns, which makes the tuples
    # unique. Broadcast (3 x 3 tuples): both must be unique, and can.
    model = concat_model(reduction, (3, 7, 2), 3 if broadcast else 5, normalize=normalize, broadcast=broadcast)
    i0, i1 = (plan(model).inputs[k] for k in ("i0", "i1"))
    assert i0.min() >= -3 and i0.max() < 3 and i1.min() >= -7 and i1.max() < 7, (i0, i1)
    assert i1.dtype == (np.int32 if normalize else np.int64)
    if reduction == "none":
        assert_unique_tuples((i0[:, None], 3), (i1[None, :], 7)) if broadcast else assert_unique_tuples((i0, 3), (i1, 7))
    assert self_validated(model, {}, tmp_path).checked_against == "onnxruntime on the original model"
    with pytest.raises(ScatterRewriteError, match="out of range"):  # the model does check the bound of i0
        self_validated(model, {"i0": np.full_like(i0, 3)}, tmp_path)
    for flow in ("lower-17", "tensorrt-10"):
        _, outcome = run_flow(model, flow)
        assert outcome.validation is not None and "i0, i1" in outcome.validation["notes"][0]


def test_a_concat_part_spanning_two_components():
    """Concat(ij[n, 2], Unsqueeze(k)): ij's columns index data dims 0 and 1 jointly, k dim 2. With
    6 tuples, k cannot be unique among 5, but the 6 (row, column) pairs fill the 2 x 3 grid."""
    nodes = [oh.make_node("Constant", [], ["last"], value_ints=[-1]), oh.make_node("Unsqueeze", ["k", "last"], ["uk"]),
             oh.make_node("Concat", ["ij", "uk"], ["idx"], axis=2),
             oh.make_node("ScatterND", ["data", "idx", "upd"], ["out"], reduction="none")]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("data", TensorProto.FLOAT, [2, 3, 5]),
                                       oh.make_tensor_value_info("ij", TensorProto.INT64, [1, 6, 2]),
                                       oh.make_tensor_value_info("k", TensorProto.INT64, [1, 6]),
                                       oh.make_tensor_value_info("upd", TensorProto.FLOAT, [1, 6])],
                          [oh.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3, 5])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    inputs = plan(model).inputs
    ij, k = inputs["ij"], inputs["k"]
    assert np.all((-2 <= ij[..., 0]) & (ij[..., 0] < 2)) and np.all((-3 <= ij[..., 1]) & (ij[..., 1] < 3)), ij
    assert k.min() >= -5 and k.max() < 5, k
    assert_unique_tuples((ij[..., 0], 2), (ij[..., 1], 3))
    _, outcome = sr.prepare_for_tensorrt(model, trt_version="10", validate=True, return_report=True)
    assert outcome.validation is not None


def test_an_input_feeding_two_scatters_gets_both_contracts():
    """i1 indexes dim 1 (7) of the none scatter and dim 0 (4) of an add scatter: in [-4, 4), unique."""
    model = concat_model("none", (3, 7, 2), 4, also_into=4)
    i1 = plan(model).inputs["i1"]
    assert i1.min() >= -4 and i1.max() < 4, i1
    assert_unique_tuples((i1, 4))
    _, outcome = sr.lower(model, opset=17, validate=True, return_report=True)
    assert outcome.validation is not None


@pytest.mark.parametrize("data_shape, n, broadcast, may_repeat", [
    ((2, 3, 2), 5, False, True),  # 5 tuples into 2 x 3: neither i0 nor i1 can be unique on its own
    ((2, 5, 2), 5, False, False),  # i1 can, and is one-to-one with the tuples
    ((3, 7, 2), 5, True, True),  # 5 x 5 grid: i1 unique is not enough, i0 cannot be
    ((3, 7, 2), 3, True, False),
])
def test_note_when_the_tuples_cannot_be_made_unique(data_shape, n, broadcast, may_repeat):
    notes = plan(concat_model("none", data_shape, n, broadcast=broadcast)).notes
    assert any("'put'" in note and "may repeat" in note for note in notes) == may_repeat, notes


def test_where_not_a_normalization_is_not_traced():
    """Where(Less(i1, 1), Add(i1, n), i1) would move 0 to n, out of range: i1 gets no contract."""
    model = concat_model("none", normalize=True)
    (zero,) = [n for n in model.graph.node if n.output[0] == "zero"]
    zero.attribute[0].t.CopyFrom(onnx.numpy_helper.from_array(np.array(1, np.int64)))
    the_plan = plan(model)
    assert any("generated for i0" in note for note in the_plan.notes)
    assert not any("i1" in note for note in the_plan.notes)


@pytest.mark.parametrize("name,index,data", [("torch/scatter_reduce_amax_ts16", "idx", "x"),
                                             ("torch_trt/scatter_amax_ts16", "idx", "x"),
                                             ("torch_trt/scatter_add_gnn_ts16", "dst", "nodes")])
def test_contracts_see_through_constant_if_wrappers(name, index, data):
    """TorchScript wraps scatter_reduce in If(rank == 0): contracts are traced on a weightless copy
    whose constant Ifs take their branch, so the indices are in range for the real (else) branch."""
    model = onnx.load(DATA / f"{name}.onnx")
    the_plan = plan(model)
    (scatter,) = [n for n, _ in iter_nodes(ir.serde.deserialize_model(model)) if n.op_type == "ScatterElements"]
    axis = attr(scatter, "axis", 0)
    size = the_plan.inputs[data].shape[axis]
    values = the_plan.inputs[index]
    assert values.min() >= -size and values.max() < size
    ifs = [n.op_type for n in model.graph.node].count("If")
    assert ifs == (2 if "amax" in name else 0)  # scatter_add has no wrapper; the model itself is untouched
    lowered, outcome = sr.lower(model, opset=13, validate=True, return_report=True)  # no user inputs
    assert "in-range scatter indices generated for " + index in outcome.validation["notes"]


# ---- hand-built: ScatterElements/Scatter(data, Concat(a, b), updates) --------------------------------------

def elements_concat_model(a_shape, b_shape, data_shape, cat_axis: int, axis: int, reduction: str = "none", *,
                          op: str = "ScatterElements", opset: int = 18, unsqueeze: int | None = None,
                          cast: bool = True, same_input: bool = False) -> onnx.ModelProto:
    """``op(data, Concat(a, b, axis=cat_axis), upd, axis=axis)``. unsqueeze: a and b are
    Unsqueezed at that axis before the Concat (and, with cast, are int32 Cast to int64 first).
    same_input: Concat(a, a)."""
    nodes, parts = [], ["a", "a" if same_input else "b"]
    if unsqueeze is not None:
        for name in sorted(set(parts)):
            wide = f"{name}64" if cast else name
            nodes += [oh.make_node("Cast", [name], [wide], to=TensorProto.INT64)] if cast else []
            if opset >= 13:
                nodes += [oh.make_node("Constant", [], [f"{name}_axes"], value_ints=[unsqueeze]),
                          oh.make_node("Unsqueeze", [wide, f"{name}_axes"], [f"{name}_u"])]
            else:
                nodes.append(oh.make_node("Unsqueeze", [wide], [f"{name}_u"], axes=[unsqueeze]))
        parts = [f"{name}_u" for name in parts]
    part_shapes = [list(s) for s in (a_shape, a_shape if same_input else b_shape)]
    if unsqueeze is not None:
        for s in part_shapes:
            s.insert(unsqueeze, 1)
    indices_shape = list(part_shapes[0])
    indices_shape[cat_axis] += part_shapes[1][cat_axis]
    kwargs = {"axis": axis} if op == "Scatter" else {"axis": axis, "reduction": reduction}
    nodes += [oh.make_node("Concat", parts, ["idx"], axis=cat_axis, name="cat"),
              oh.make_node(op, ["data", "idx", "upd"], ["out"], name="put", **kwargs)]
    index_type = TensorProto.INT32 if unsqueeze is not None and cast else TensorProto.INT64
    inputs = [oh.make_tensor_value_info("data", TensorProto.FLOAT, data_shape),
              oh.make_tensor_value_info("a", index_type, a_shape)]
    inputs += [] if same_input else [oh.make_tensor_value_info("b", index_type, b_shape)]
    inputs.append(oh.make_tensor_value_info("upd", TensorProto.FLOAT, indices_shape))
    graph = oh.make_graph(nodes, "g", inputs, [oh.make_tensor_value_info("out", TensorProto.FLOAT, data_shape)])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def concatenated(inputs: dict, cat_axis: int, unsqueeze: int | None, same_input: bool = False) -> np.ndarray:
    """The indices the scatter sees (before its own wrap-around of negative values)."""
    parts = [inputs["a"], inputs["a" if same_input else "b"]]
    if unsqueeze is not None:
        parts = [np.expand_dims(p, unsqueeze) for p in parts]
    return np.concatenate(parts, axis=cat_axis)


def assert_unique_along(indices: np.ndarray, axis: int, bound: int) -> None:
    """Every column along ``axis`` targets distinct slots (-1 and bound-1 are the same slot)."""
    slots = np.sort(np.mod(indices, bound), axis=axis)
    assert not np.any(np.diff(slots, axis=axis) == 0), indices


@pytest.mark.parametrize("a_shape, b_shape, data_shape, cat_axis, axis, unsqueeze", [
    ((2, 3), (3, 3), (6, 3), 0, 0, None),  # along the scatter axis: a column holds 2 from a, 3 from b
    ((3, 2), (3, 3), (4, 7), 1, 1, None),  # the same along axis 1
    ((4, 2), (4, 1), (5, 3), 1, 0, None),  # along another axis: each column within one input
    ((5,), (5,), (3, 5), 0, 0, 0),  # int32 [5] -> Cast -> Unsqueeze(0) -> [1, 5], Concat -> [2, 5]
    ((4,), (4,), (4, 3), 1, 0, 1),  # [4] -> [4, 1], Concat along axis 1 -> [4, 2]: a and b unique on their own
])
def test_elements_concat_parts_get_in_range_unique_indices(a_shape, b_shape, data_shape, cat_axis, axis, unsqueeze,
                                                           tmp_path):
    model = elements_concat_model(a_shape, b_shape, data_shape, cat_axis, axis, unsqueeze=unsqueeze)
    the_plan = plan(model)
    bound = data_shape[axis]
    for name in ("a", "b"):
        values = the_plan.inputs[name]
        assert values.min() >= -bound and values.max() < bound, (name, values)
    assert the_plan.inputs["a"].dtype == (np.int32 if unsqueeze is not None else np.int64)
    assert_unique_along(concatenated(the_plan.inputs, cat_axis, unsqueeze), axis, bound)
    assert not any("may repeat" in note for note in the_plan.notes), the_plan.notes
    assert self_validated(model, {}, tmp_path).checked_against == "onnxruntime on the original model"
    with pytest.raises(ScatterRewriteError, match="out of range"):  # the model does check the bound of a
        self_validated(model, {"a": np.full_like(the_plan.inputs["a"], bound)}, tmp_path)
    _, outcome = sr.to_scatternd(model, validate=True, return_report=True)
    assert outcome.validation is not None and outcome.validation["checked_against"] == "onnxruntime on the original model"
    assert "in-range scatter indices generated for a, b" in outcome.validation["notes"]


@pytest.mark.parametrize("reduction", ["max", "add"])
def test_elements_concat_parts_for_a_reduction_are_lowered_and_validated(reduction):
    """Repeats allowed (and wanted) for a reduction: only the bound, on both parts."""
    model = elements_concat_model((6, 2), (5, 2), (4, 2), 0, 0, reduction, opset=18)
    the_plan = plan(model)
    indices = concatenated(the_plan.inputs, 0, None)
    assert indices.min() >= -4 and indices.max() < 4, indices
    assert not any("may repeat" in note for note in the_plan.notes)
    _, outcome = sr.lower(model, opset=13, validate=True, return_report=True)
    assert outcome.validation is not None and "in-range scatter indices generated for a, b" in outcome.validation["notes"]


def test_deprecated_scatter_with_concat_indices_is_upgraded_and_validated():
    """Scatter (opset 10, Unsqueeze with an axes attribute) with Concat(Unsqueeze(a), Unsqueeze(b)).
    (Not Cast(a): upgrade then writes float value types for the Unsqueeze outputs, which the checker
    rejects; a bug of the upgrade, not of validation.)"""
    model = elements_concat_model((6,), (6,), (5, 6), 0, 0, op="Scatter", opset=10, unsqueeze=0, cast=False)
    the_plan = plan(model)
    indices = concatenated(the_plan.inputs, 0, 0)
    assert indices.min() >= -5 and indices.max() < 5, indices
    assert_unique_along(indices, 0, 5)
    _, outcome = sr.upgrade(model, opset=11, validate=True, return_report=True)
    assert outcome.validation is not None and outcome.validation["checked_against"] == "onnxruntime on the original model"
    assert "in-range scatter indices generated for a, b" in outcome.validation["notes"]


@pytest.mark.parametrize("same_input, data_shape, why", [
    (False, (4, 2), "puts 6 indices along the scatter axis into 4 slots"),
    (True, (8, 2), "an input in two parts"),
])
def test_elements_concat_that_cannot_be_unique_is_noted(same_input, data_shape, why):
    """Concat along the scatter axis of 3 + 3 rows into 4 rows, or Concat(a, a): the parts keep the
    bound, and the notes say the targets may repeat."""
    model = elements_concat_model((3, 2), (3, 2), data_shape, 0, 0, same_input=same_input)
    the_plan = plan(model)
    indices = concatenated(the_plan.inputs, 0, None, same_input)
    assert indices.min() >= -data_shape[0] and indices.max() < data_shape[0], indices
    (note,) = [note for note in the_plan.notes if "may repeat" in note]
    assert "ScatterElements 'put'" in note and why in note, note


def test_elements_concat_behind_a_reshape_keeps_the_bound_and_is_noted():
    """Concat(a[1, 6], b[1, 6]) -> [2, 6] -> Reshape [4, 3]: the scatter axis cannot be followed back
    to the Concat, so the parts are not given shares of the slots; they keep the bound, and the note says so."""
    nodes = [oh.make_node("Constant", [], ["shape"], value_ints=[4, 3]),
             oh.make_node("Concat", ["a", "b"], ["ab"], axis=0, name="cat"),
             oh.make_node("Reshape", ["ab", "shape"], ["idx"]),
             oh.make_node("ScatterElements", ["data", "idx", "upd"], ["out"], name="put", axis=0)]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("data", TensorProto.FLOAT, [5, 3]),
                                       oh.make_tensor_value_info("a", TensorProto.INT64, [1, 6]),
                                       oh.make_tensor_value_info("b", TensorProto.INT64, [1, 6]),
                                       oh.make_tensor_value_info("upd", TensorProto.FLOAT, [4, 3])],
                          [oh.make_tensor_value_info("out", TensorProto.FLOAT, [5, 3])])
    the_plan = plan(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]))
    for name in ("a", "b"):
        assert the_plan.inputs[name].min() >= -5 and the_plan.inputs[name].max() < 5, the_plan.inputs[name]
    (note,) = [note for note in the_plan.notes if "may repeat" in note]
    assert "the scatter axis cannot be followed to Concat 'cat'" in note and "from a, b" in note, note


# ---- the normalization Where(i < 0, i + c, i) with c other than the dim ------------------------------------

def where_model(c: int | str, rows: int = 12, n: int = 10, cols: int = 8) -> onnx.ModelProto:
    """``ScatterElements(data[rows, cols], Where(Less(i, 0), Add(i, c), i), upd)`` (reduction none).
    c: a constant, "shape" (Gather(Shape(data), 0), which is rows) or "input" (ReduceMax of an input)."""
    def const(name, value):
        return oh.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.array(value, np.int64)))

    nodes = [const("zero", 0)]
    if c == "shape":
        nodes += [oh.make_node("Shape", ["data"], ["shape"]), const("first", 0),
                  oh.make_node("Gather", ["shape", "first"], ["c"])]
    elif c == "input":
        nodes.append(oh.make_node("ReduceMax", ["n"], ["c"], keepdims=0))
    else:
        nodes.append(const("c", c))
    nodes += [oh.make_node("Less", ["i", "zero"], ["negative"]), oh.make_node("Add", ["i", "c"], ["shifted"]),
              oh.make_node("Where", ["negative", "shifted", "i"], ["i_norm"], name="normalize"),
              oh.make_node("ScatterElements", ["data", "i_norm", "upd"], ["out"], name="put", axis=0)]
    inputs = [oh.make_tensor_value_info("data", TensorProto.FLOAT, [rows, cols]),
              oh.make_tensor_value_info("i", TensorProto.INT64, [n, cols]),
              oh.make_tensor_value_info("upd", TensorProto.FLOAT, [n, cols])]
    inputs += [oh.make_tensor_value_info("n", TensorProto.INT64, [2])] if c == "input" else []
    graph = oh.make_graph(nodes, "g", inputs, [oh.make_tensor_value_info("out", TensorProto.FLOAT, [rows, cols])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


@pytest.mark.parametrize("c", [9, 12, 15, "shape"])  # rows = 12
def test_where_normalization_constant_other_than_the_dim(c):
    """The normalized values are slots in [0, 12), unique along the axis, whatever c: a negative i
    is drawn as slot - c (for c = 15, -3 would become 12, out of range; for c = 9, -12 would stay
    negative and wrap onto slot 9 again)."""
    model = where_model(c)
    shift = 12 if c == "shape" else c
    i = plan(model).inputs["i"]
    normalized = np.where(i < 0, i + shift, i)
    assert normalized.min() >= 0 and normalized.max() < 12, (i, normalized)
    assert_unique_along(normalized, 0, 12)
    assert (i < 0).any() and i.min() >= -shift, i  # negative values are exercised, each reaching its slot
    _, outcome = sr.to_scatternd(model, validate=True, return_report=True)
    assert outcome.validation is not None and "in-range scatter indices generated for i" in outcome.validation["notes"]


def test_where_normalization_by_a_run_time_value_gets_non_negative_indices():
    """c computed at run time (ReduceMax of an input): only slots, no negative value, and a note why."""
    the_plan = plan(where_model("input"))
    i = the_plan.inputs["i"]
    assert i.min() >= 0 and i.max() < 12, i
    assert_unique_along(i, 0, 12)
    assert any(note.startswith("i: the normalization Where(i < 0, i + c, i) (Where 'normalize')") and "non-negative" in note
               for note in the_plan.notes), the_plan.notes


@pytest.mark.parametrize("shift", [4, 10])  # D1 = 7
def test_where_normalization_constant_in_scatternd_tuples(shift):
    """ScatterND (index_put-like): i1's normalization adds 4 or 10 instead of D1 = 7."""
    model = concat_model("none", (3, 7, 2), 5, normalize=True)
    (d1,) = [n for n in model.graph.node if n.output[0] == "d1"]
    d1.attribute[0].t.CopyFrom(onnx.numpy_helper.from_array(np.array(shift, np.int64)))
    inputs = plan(model).inputs
    i0, i1 = inputs["i0"], inputs["i1"]
    normalized = np.where(i1 < 0, i1 + shift, i1)
    assert normalized.min() >= 0 and normalized.max() < 7, (i1, normalized)
    assert_unique_tuples((i0, 3), (normalized, 7))
    _, outcome = sr.lower(model, opset=17, validate=True, return_report=True)
    assert outcome.validation is not None


# ---- attributes that refer to an attribute of the enclosing function ------------------------------------

@pytest.mark.parametrize("axis", [1, -1])
def test_a_function_axis_is_read_from_the_call(axis):
    """Validation planned indices with ``axis % rank`` on the reference and raised TypeError; the
    call's ax=1 bounds them by data's 3 columns (the function default, 0, would allow 4 rows)."""
    model, _ = function_model(axis=axis, opset=13)
    for seed in range(5):
        indices = plan_validation(ir.serde.deserialize_model(model), seed=seed).inputs["indices"]
        assert indices.min() >= -3 and indices.max() < 3  # (negative indices count from the end)
    out, outcome = sr.to_scatternd(model, validate=True, return_report=True)  # rewritten in F, validated
    assert outcome.validation["max_abs_diff"] == 0.0


def test_the_function_default_is_used_when_the_call_omits_the_attribute():
    model, _ = function_model(axis=0, opset=13)
    del model.graph.node[0].attribute[:]  # ax from the function's default, 0: 4 rows
    seen = np.concatenate([plan_validation(ir.serde.deserialize_model(model), seed=s).inputs["indices"].ravel()
                           for s in range(5)])
    assert seen.min() >= -4 and seen.max() < 4 and ((seen == 3) | (seen == -4)).any()


def _function_called_twice(op: str) -> onnx.ModelProto:
    """local.F(d, i, u) = op(d, i, u, reduction=add[, axis=@ax]), called on [10, 3] data (along
    axis 0) and on [4, 5] data (along axis 1), each call with its own index input."""
    scatter = oh.make_node(op, ["d", "i", "u"], ["y"], reduction="add")
    if op == "ScatterElements":
        scatter.attribute.append(onnx.AttributeProto(name="axis", ref_attr_name="ax", type=onnx.AttributeProto.INT))
    function = oh.make_function("local", "F", ["d", "i", "u"], ["y"], [scatter],
                                opset_imports=[oh.make_opsetid("", 18)],
                                attributes=["ax"] if op == "ScatterElements" else [])
    axes = [{"ax": 0}, {"ax": 1}] if op == "ScatterElements" else [{}, {}]
    calls = [oh.make_node("F", [f"d{k}", f"i{k}", f"u{k}"], [f"y{k}"], domain="local", **axes[k - 1]) for k in (1, 2)]
    index_shapes = [[6, 3], [4, 7]] if op == "ScatterElements" else [[6, 2], [7, 2]]
    update_shapes = index_shapes if op == "ScatterElements" else [[6], [7]]
    graph = oh.make_graph(calls, "g", [
        oh.make_tensor_value_info("d1", TensorProto.FLOAT, [10, 3]),
        oh.make_tensor_value_info("i1", TensorProto.INT64, index_shapes[0]),
        oh.make_tensor_value_info("u1", TensorProto.FLOAT, update_shapes[0]),
        oh.make_tensor_value_info("d2", TensorProto.FLOAT, [4, 5]),
        oh.make_tensor_value_info("i2", TensorProto.INT64, index_shapes[1]),
        oh.make_tensor_value_info("u2", TensorProto.FLOAT, update_shapes[1])],
        [oh.make_tensor_value_info("y1", TensorProto.FLOAT, [10, 3]),
         oh.make_tensor_value_info("y2", TensorProto.FLOAT, [4, 5])])
    model = oh.make_model(graph, functions=[function],
                          opset_imports=[oh.make_opsetid("", 18), oh.make_opsetid("local", 1)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
def test_a_function_called_twice_gets_each_calls_bounds(op):
    """Each call of a function is traced with its own inputs: i1 indexes 10 rows (axis 0), i2 the
    5 columns of the second call's data (axis 1). Before, both took the first call's bounds, and
    the second call failed validation with an index out of range."""
    model = _function_called_twice(op)
    for seed in range(5):
        inputs = plan_validation(ir.serde.deserialize_model(model), seed=seed).inputs
        if op == "ScatterElements":
            assert inputs["i1"].min() >= -10 and inputs["i1"].max() < 10
            assert inputs["i2"].min() >= -5 and inputs["i2"].max() < 5
        else:
            for name, (rows, columns) in (("i1", (10, 3)), ("i2", (4, 5))):
                assert (inputs[name] >= -np.array([rows, columns])).all()
                assert (inputs[name] < np.array([rows, columns])).all()
    verb = sr.to_scatternd if op == "ScatterElements" else lambda m, **kw: sr.lower(m, opset=13, **kw)
    out, outcome = verb(model, validate=True, return_report=True)
    assert outcome.validation["max_abs_diff"] < 1e-5
    # the planning copy was inlined, not the output (to_scatternd gives each axis its copy of F)
    assert [f.name for f in out.functions] == (["F", "F__2"] if op == "ScatterElements" else ["F"])


# ---- onnxruntime runs the original but lacks a kernel the rewritten model uses ---------------------------

def test_a_kernel_onnxruntime_lacks_in_the_rewritten_model_is_validated_in_the_reference_evaluator():
    """float16 ScatterElements max runs in onnxruntime; the ScatterND max it becomes does not
    (MLFloat16 is not supported with ScatterND when reduction is 'max')."""
    model = scatter_model("ScatterElements", opset=18, reduction="max", data_type=TensorProto.FLOAT16)
    out, outcome = sr.to_scatternd(model, validate=True, return_report=True)
    assert [n.op_type for n in out.graph.node if n.op_type.startswith("Scatter")] == ["ScatterND"]
    checked = outcome.validation["checked_against"]
    assert checked.startswith("onnxruntime on the original model, onnx.reference") and "ScatterND" in checked
    assert outcome.validation["max_abs_diff"] == 0.0


def test_a_rewritten_model_onnxruntime_fails_to_run_for_another_reason_still_fails(tmp_path):
    """Only a missing kernel sends the rewritten model to the reference evaluator: a run-time error
    (here an index out of range) is a failed validation."""
    original = scatter_model("ScatterElements", opset=18)
    broken = onnx.ModelProto()
    broken.CopyFrom(original)
    (scatter,) = broken.graph.node
    broken.graph.node.insert(0, oh.make_node("Add", [scatter.input[1], "far"], ["far_indices"]))
    broken.graph.initializer.append(onnx.numpy_helper.from_array(np.array(100, np.int64), "far"))
    scatter.input[1] = "far_indices"
    paths = tmp_path / "original.onnx", tmp_path / "broken.onnx"
    onnx.save(original, paths[0])
    onnx.save(broken, paths[1])
    with pytest.raises(sr.ValidationError, match="onnxruntime cannot run the rewritten model"):
        validate(paths[0], paths[1], plan_validation(ir.serde.deserialize_model(original)))


def _edge_index_gnn_model(reduction: str, gather_axis_first: bool) -> onnx.ModelProto:
    """A GNN layer as the exporters write it: src = edge_index[0] feeds x[src], dst = edge_index[1]
    is expanded over the features and scattered onto zeros [N, F]. With ``gather_axis_first`` False,
    edge_index is [E, 2] and the rows are picked along axis 1 (edge_index[:, 0])."""
    axis = 0 if gather_axis_first else 1
    nodes = [
        oh.make_node("Constant", [], ["zero"], value=oh.make_tensor("z", TensorProto.INT64, [], [0])),
        oh.make_node("Constant", [], ["one"], value=oh.make_tensor("o", TensorProto.INT64, [], [1])),
        oh.make_node("Gather", ["edge_index", "zero"], ["src"], axis=axis),
        oh.make_node("Gather", ["edge_index", "one"], ["dst"], axis=axis),
        oh.make_node("Gather", ["x", "src"], ["messages"], axis=0),
        oh.make_node("Unsqueeze", ["dst", "axes"], ["dst1"]),
        oh.make_node("Shape", ["messages"], ["mshape"]),
        oh.make_node("Expand", ["dst1", "mshape"], ["dst_e"]),
        oh.make_node("Shape", ["x"], ["xshape"]),
        oh.make_node("ConstantOfShape", ["xshape"], ["zeros"],
                     value=oh.make_tensor("v", TensorProto.FLOAT, [1], [0.0])),
        oh.make_node("ScatterElements", ["zeros", "dst_e", "messages"], ["y"], axis=0, reduction=reduction),
    ]
    edges = [2, "E"] if gather_axis_first else ["E", 2]
    graph = oh.make_graph(
        nodes, "gnn",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3]),
         oh.make_tensor_value_info("edge_index", TensorProto.INT64, edges)],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [onnx.numpy_helper.from_array(np.array([1], np.int64), "axes")])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


@pytest.mark.parametrize("gather_axis_first", [True, False])
@pytest.mark.parametrize("reduction", ["add", "max"])
def test_an_edge_list_picked_by_gather_feeds_both_gather_and_scatter_in_range(reduction, gather_axis_first, tmp_path):
    """edge_index reaches the scatter through Gather(edge_index, 1) and also feeds x[src]: its
    generated values must be in range for both, else the original model cannot run."""
    model = _edge_index_gnn_model(reduction, gather_axis_first)
    the_plan = plan(model)
    edges, n = the_plan.inputs["edge_index"], the_plan.inputs["x"].shape[0]
    assert edges.size and edges.min() >= -n and edges.max() < n
    assert any("edge_index" in note for note in the_plan.notes)
    path = tmp_path / "gnn.onnx"
    onnx.save(model, path)
    validate(path, path, the_plan)  # onnxruntime runs the original on them
    for rewritten in (sr.lower(model, opset=13, validate=True), sr.prepare_for_tensorrt(model, validate=True)):
        onnx.checker.check_model(rewritten)


def test_gather_indices_from_a_graph_input_get_the_gathered_axis_bound():
    """An index input feeding only a Gather (an embedding lookup beside a scatter) is in range of
    the gathered axis, which may be larger than the old arbitrary [-20, 20)."""
    node = oh.make_node("Gather", ["table", "tokens"], ["emb"], axis=0)
    scatter = oh.make_node("ScatterElements", ["emb", "idx", "upd"], ["y"], axis=1)
    graph = oh.make_graph(
        [node, scatter], "g",
        [oh.make_tensor_value_info("table", TensorProto.FLOAT, [3, 4]),
         oh.make_tensor_value_info("tokens", TensorProto.INT64, [50]),
         oh.make_tensor_value_info("idx", TensorProto.INT64, [50, 2]),
         oh.make_tensor_value_info("upd", TensorProto.FLOAT, [50, 2])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [50, 4])])
    the_plan = plan(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]))
    tokens = the_plan.inputs["tokens"]
    assert tokens.min() >= -3 and tokens.max() < 3 and (tokens < 0).any()


@pytest.mark.parametrize("axis", [0, 1])
def test_none_indices_picked_by_gather_are_unique_along_the_mapped_axis(axis):
    """Gather(pairs, 1, axis=0) of a [2, R, C] input drops its axis 0: the scatter axis a of the
    picked [R, C] indices is axis a + 1 of the input, where the values are made unique."""
    nodes = [oh.make_node("Gather", ["pairs", "one"], ["idx"], axis=0),
             oh.make_node("ScatterElements", ["data", "idx", "upd"], ["y"], axis=axis)]
    graph = oh.make_graph(
        nodes, "g",
        [oh.make_tensor_value_info("data", TensorProto.FLOAT, [6, 6]),
         oh.make_tensor_value_info("pairs", TensorProto.INT64, [2, 6, 6]),
         oh.make_tensor_value_info("upd", TensorProto.FLOAT, [6, 6])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [6, 6])],
        [onnx.numpy_helper.from_array(np.array(1, np.int64), "one")])
    the_plan = plan(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]))
    picked = np.where(the_plan.inputs["pairs"][1] < 0, the_plan.inputs["pairs"][1] + 6, the_plan.inputs["pairs"][1])
    assert all(len(set(line)) == 6 for line in np.moveaxis(picked, axis, -1).reshape(-1, 6))


def test_generated_indices_the_plan_cannot_bound_are_not_blamed_on_the_model(tmp_path):
    """Indices computed from an input through arithmetic (Add) are not bounded by the plan; when
    only the reference evaluator can run the original (a deprecated Scatter at opset 13), an index
    out of range there is the generated inputs' fault: the message says so and how to go on."""
    nodes = [oh.make_node("Add", ["idx", "zero"], ["shifted"]),
             oh.make_node("Scatter", ["data", "shifted", "upd"], ["y"], axis=0)]
    graph = oh.make_graph(
        nodes, "g",
        [oh.make_tensor_value_info("data", TensorProto.FLOAT, [3, 4]),
         oh.make_tensor_value_info("idx", TensorProto.INT64, [2, 4]),
         oh.make_tensor_value_info("upd", TensorProto.FLOAT, [2, 4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        [onnx.numpy_helper.from_array(np.array(0, np.int64), "zero")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    with pytest.raises(ScatterRewriteError, match=r"generated validation inputs put an index out of range in the "
                                                  r"original model .*inputs=, or validate=False"):
        sr.upgrade(model, validate=True)
    fine = {"data": np.zeros((3, 4), np.float32), "idx": np.array([[0, 1, 2, 0], [1, 2, 0, 1]]),
            "upd": np.ones((2, 4), np.float32)}
    onnx.checker.check_model(sr.upgrade(model, validate=True, inputs=fine))


def test_onnxruntime_extensions_is_imported_only_for_custom_domain_nodes():
    """Loading its library costs a run time: validation registers our custom ops only when a model
    holds them (custom_ops loads the package's ``_ocos`` module alone, not its ``__init__``)."""
    script = (
        "import sys, scatter_rewrite as sr\n"
        "from scatter_rewrite.testing import scatter_model\n"
        "sr.lower(scatter_model(reduction='max'), opset=13, validate=True)\n"
        "print('standard', 'onnxruntime_extensions._ocos' in sys.modules)\n"
        "sr.lower(scatter_model(reduction='max'), opset=13, mode='custom', validate=True)\n"
        "print('custom', 'onnxruntime_extensions._ocos' in sys.modules)\n")
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["standard False", "custom True"]


# ---- our custom-domain scatters (lower --mode custom|tensorrt-plugin), lowered again ------------------

@pytest.mark.parametrize("where", ["main", "if", "function"])
@pytest.mark.parametrize("op, mode", [("ScatterElements", "custom"), ("ScatterND", "custom"),
                                      ("ScatterElements", "tensorrt-plugin")])
def test_indices_reaching_a_custom_domain_scatter_are_in_range(op, mode, where, tmp_path):
    """They compute the standard op, so they bound their indices like it: they got arbitrary values
    in [-20, 20), and lowering a lowered model again failed validation (aborted, before custom_ops.run)."""
    shapes = (dict(data_shape=(4, 5), indices_shape=(6, 5), axis=-2) if op == "ScatterElements"
              else dict(data_shape=(4, 5), indices_shape=(6, 1), updates_shape=(6, 5)))
    lowered = sr.lower(scatter_model(op, opset=18, where=where, reduction="max", **shapes), opset=13, mode=mode)
    assert any(n.domain == "ai.onnx.contrib" for n, _ in iter_nodes(ir.serde.deserialize_model(lowered)))
    the_plan = plan(lowered)
    indices = the_plan.inputs["indices"]
    assert indices.min() >= -4 and indices.max() < 4, indices
    assert any("generated for indices" in note for note in the_plan.notes)
    path = tmp_path / "lowered.onnx"
    onnx.save(lowered, path)
    assert validate(path, path, the_plan).max_abs_diff == 0.0
