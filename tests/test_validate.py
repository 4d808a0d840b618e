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
from scatter_rewrite.validate import plan_validation, validate

ort.set_default_logger_severity(3)
DATA = Path(__file__).parent / "data"
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
