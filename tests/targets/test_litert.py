"""LiteRT through onnx2tf (tests/helpers/runtimes.py: onnx2tf, tensorflow and ai-edge-litert in a venv of
their own, built by tests/runtimes/setup_venvs.sh; skipped without it).

What onnx2tf does to scatters on its own, reproduced (refuses a reducing ScatterElements, turns a
reducing ScatterND into TFLite's summing SCATTER_ND, permutes a constant index vector fed to
Unsqueeze), and ``prepare --target litert`` then onnx2tf then LiteRT giving the original's outputs,
with onnxsim (a user's default) and without it (``--no-onnxsim``). Converting takes about 10 s a
model: the four facts, float max/min on input indices, two TensorScatters and a sample of the forms
without onnxsim run by default, the rest with -m slow.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

import scatter_rewrite
from tests.helpers.runtimes import (
    EXPORTS, Case, Refused, combined, constant_indices, disagreement, original_outputs,
    rank_3_and_4_cases, run_in, scatter_cases, signed_zeros_and_nan, sums_floats,
)
from scatter_rewrite.errors import ConversionError
from scatter_rewrite.testing import scatter_model
from tests.helpers import DATA
from tests.helpers.exports import load_export
from tests.helpers.models import model_opset, tensor_scatter_model
from tests.helpers.runs import ort_outputs, ort_run

RNG = np.random.default_rng(7)


def _prepared_runs_as_original(model, inputs, workdir) -> None:
    prepared = scatter_rewrite.prepare(model, target="litert", validate=True)
    assert not any(n.op_type.startswith(("Scatter", "TensorScatter")) for n in prepared.graph.node)
    expected = original_outputs(model, inputs)
    actual = run_in("litert", prepared, inputs, workdir)
    assert disagreement(model, expected, actual, sums_floats(model)) == []


def test_onnx2tf_refuses_a_reducing_scatter_elements_which_prepare_rewrites(tmp_path):
    model = scatter_model("ScatterElements", data_shape=(4, 5), indices_shape=(6, 5),
                          reduction="add")
    inputs = {"data": RNG.standard_normal((4, 5)).astype(np.float32),
              "indices": RNG.integers(0, 4, (6, 5)),
              "updates": RNG.standard_normal((6, 5)).astype(np.float32)}
    with pytest.raises(Refused, match=r"ScatterElements currently supports only reduction=\['none'\]"):
        run_in("litert", model, inputs, tmp_path / "original")
    _prepared_runs_as_original(model, inputs, tmp_path / "prepared")


def test_onnx2tf_sums_a_reducing_scatter_nd_which_prepare_rewrites(tmp_path):
    # add (and mul, max, min alike), converted without a word into TFLite's summing SCATTER_ND:
    # data * (1 - count) + sum(updates)
    model = scatter_model("ScatterND", data_shape=(4, 5), indices_shape=(6, 1),
                          updates_shape=(6, 5), reduction="add")
    indices = np.array([[0], [2], [0], [3], [0], [2]])
    inputs = {"data": RNG.standard_normal((4, 5)).astype(np.float32), "indices": indices,
              "updates": RNG.standard_normal((6, 5)).astype(np.float32)}
    (converted,) = run_in("litert", model, inputs, tmp_path / "original")
    count = np.bincount(indices[:, 0], minlength=4)[:, None].astype(np.float32)
    summed = np.zeros((4, 5), np.float32)
    np.add.at(summed, indices[:, 0], inputs["updates"])
    np.testing.assert_allclose(converted, inputs["data"] * (1 - count) + summed, rtol=1e-6,
                               atol=1e-6)
    assert disagreement(model, original_outputs(model, inputs), [converted], False) != []
    _prepared_runs_as_original(model, inputs, tmp_path / "prepared")


def _unsqueezed_arange_scatter() -> onnx.ModelProto:
    """ScatterND(data, Unsqueeze(arange(30), 1), updates): PyTorch's index_put with an arange."""
    graph = oh.make_graph(
        [oh.make_node("Unsqueeze", ["rows", "axis"], ["indices"]),
         oh.make_node("ScatterND", ["data", "indices", "updates"], ["output"])], "g",
        [oh.make_tensor_value_info("data", TensorProto.FLOAT, [30, 2]),
         oh.make_tensor_value_info("updates", TensorProto.FLOAT, [30, 2])],
        [oh.make_tensor_value_info("output", TensorProto.FLOAT, [30, 2])],
        initializer=[numpy_helper.from_array(np.arange(30, dtype=np.int64), "rows"),
                     numpy_helper.from_array(np.array([1], np.int64), "axis")])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


def test_onnx2tf_permutes_a_constant_index_vector_through_unsqueeze(tmp_path):
    model = _unsqueezed_arange_scatter()
    updates = np.repeat(np.arange(30, dtype=np.float32)[:, None], 2, axis=1)
    inputs = {"data": np.zeros((30, 2), np.float32), "updates": updates}
    (converted,) = run_in("litert", model, inputs, tmp_path / "original")
    # update row i lands on row order[i]: arange(30) came out as 0, 2, 3, ..., 29, 1
    order = np.array([0, *range(2, 30), 1])
    expected_wrong = np.empty_like(updates)
    expected_wrong[order] = updates
    np.testing.assert_array_equal(converted, expected_wrong)
    _prepared_runs_as_original(model, inputs, tmp_path / "prepared")


def _scatter_into_zeros_of_shape(dims=(6, 4), count=3, opset: int = 17,
                                 **reduction) -> onnx.ModelProto:
    """x + ScatterND(ConstantOfShape(Shape(x)), Unsqueeze(i, 1), v): TorchScript's index_put_
    (accumulate=True) at opset 17, whose zeros the scatter-free forms flatten into rows. ``dims``
    (x's) and ``count`` (i's): static, or symbolic where a name."""
    graph = oh.make_graph(
        [oh.make_node("Shape", ["x"], ["shape"]),
         oh.make_node("ConstantOfShape", ["shape"], ["zeros"]),
         oh.make_node("Unsqueeze", ["i", "axis"], ["indices"]),
         oh.make_node("ScatterND", ["zeros", "indices", "v"], ["scattered"], **reduction),
         oh.make_node("Add", ["x", "scattered"], ["y"])], "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, list(dims)),
         oh.make_tensor_value_info("i", TensorProto.INT64, [count]),
         oh.make_tensor_value_info("v", TensorProto.FLOAT, [count, dims[1]])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, list(dims))],
        initializer=[numpy_helper.from_array(np.array([1], np.int64), "axis")])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def _gnn_of_dynamic_shape(opset: int, features=("B", "C"), **reduction) -> onnx.ModelProto:
    """ScatterElements(x, Expand(Unsqueeze(dst, axes), Shape(v)), v, axis=0) of int64, x
    [A, *features] and v [E, *features] symbolic: the GNN pattern, whose rows are x viewed as
    [A, prod(features)]."""
    axes = list(range(1, len(features) + 1))
    unsqueeze = (oh.make_node("Unsqueeze", ["dst", "axes"], ["column"]) if opset >= 13
                 else oh.make_node("Unsqueeze", ["dst"], ["column"], axes=axes))
    graph = oh.make_graph(
        [unsqueeze,
         oh.make_node("Shape", ["v"], ["v_shape"]),
         oh.make_node("Expand", ["column", "v_shape"], ["indices"]),
         oh.make_node("ScatterElements", ["x", "indices", "v"], ["y"], axis=0, **reduction)],
        "g",
        [oh.make_tensor_value_info("x", TensorProto.INT64, ["A", *features]),
         oh.make_tensor_value_info("dst", TensorProto.INT64, ["E"]),
         oh.make_tensor_value_info("v", TensorProto.INT64, ["E", *features])],
        [oh.make_tensor_value_info("y", TensorProto.INT64, ["A", *features])],
        initializer=[numpy_helper.from_array(np.array(axes, np.int64), "axes")])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def _batched_gnn(opset: int, view: bool = True, **reduction) -> onnx.ModelProto:
    """ScatterElements(x, Expand(column, Shape(v)), v, axis=1) of int64, x [P, A, D], dst [P, E]
    and v [P, E, D] symbolic: the GNN pattern per batch, its keys ``column`` = dst as [P, E, 1]:
    ``view``, Reshape(dst, Concat(Shape(dst), [1])) (TorchScript's ``dst.view(P, E, 1)``), or
    Unsqueeze(dst, 2)."""
    column = ([oh.make_node("Shape", ["dst"], ["dst_shape"]),
               oh.make_node("Concat", ["dst_shape", "one"], ["column_shape"], axis=0),
               oh.make_node("Reshape", ["dst", "column_shape"], ["column"])] if view
              else [oh.make_node("Unsqueeze", ["dst"], ["column"], axes=[2]) if opset < 13
                    else oh.make_node("Unsqueeze", ["dst", "two"], ["column"])])
    graph = oh.make_graph(
        [*column,
         oh.make_node("Shape", ["v"], ["v_shape"]),
         oh.make_node("Expand", ["column", "v_shape"], ["indices"]),
         oh.make_node("ScatterElements", ["x", "indices", "v"], ["y"], axis=1, **reduction)],
        "g",
        [oh.make_tensor_value_info("x", TensorProto.INT64, ["P", "A", "D"]),
         oh.make_tensor_value_info("dst", TensorProto.INT64, ["P", "E"]),
         oh.make_tensor_value_info("v", TensorProto.INT64, ["P", "E", "D"])],
        [oh.make_tensor_value_info("y", TensorProto.INT64, ["P", "A", "D"])],
        initializer=[numpy_helper.from_array(np.array([1], np.int64), "one"),
                     numpy_helper.from_array(np.array([2], np.int64), "two")])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def _rank_3_of_dynamic_shape(opset: int) -> dict[str, Case]:
    """Scatters whose data is rank 3 of symbolic dimensions, with inputs that respect their
    contracts: reduction none below opset 14 (the forms' output reshaped to a shape computed at
    run time without allowzero), given dimensions of 1 too (onnx2tf's reordered shape then
    broadcast into a wrong shape where the others were refused); the batched GNN's keys (an
    Expand to a computed rank-3 shape before) at every opset, int64 max/min/add from 18 (there
    a view computed at run time; below 14 such a view's Expand, the export's own, stays)."""
    rng = np.random.default_rng(13)

    def floats(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def ints(*shape):
        return rng.integers(-9, 9, shape)

    if opset >= 18:
        return {f"batched_gnn_{reduction}": (_batched_gnn(opset, reduction=reduction), {
            "x": ints(2, 5, 3), "dst": rng.integers(0, 5, (2, 7)), "v": ints(2, 7, 3)})
            for reduction in ("max", "min", "add")}
    unique = np.argsort(rng.random((3, 4, 1)), axis=1)[:, :2]  # along axis 1, per column
    return {
        "elements": (scatter_model("ScatterElements", opset=opset, data_shape=("R", "S", "T"),
                                   indices_shape=("R", "J", "T"), axis=1),
                     {"data": floats(3, 4, 1), "indices": unique, "updates": floats(3, 2, 1)}),
        "nd": (scatter_model("ScatterND", opset=opset, data_shape=("N", "H", "W"),
                             indices_shape=("K", 1), updates_shape=("K", "H", "W")),
               {"data": floats(5, 1, 3), "indices": np.array([[4], [1]]),
                "updates": floats(2, 1, 3)}),
        "gnn": (_gnn_of_dynamic_shape(opset), {
            "x": ints(5, 2, 3), "dst": np.array([3, 0, 4]), "v": ints(3, 2, 3)}),
        "batched_gnn": (_batched_gnn(opset, view=False), {
            "x": ints(2, 5, 1), "dst": np.array([[3, 0, 4], [1, 2, 0]]), "v": ints(2, 3, 1)}),
    }


def _rows_of_dynamic_dimensions(opset: int) -> dict[str, Case]:
    """Scatters at ``opset`` whose data and updates have symbolic dimensions on both sides of the
    rows axis (the forms' rows were a Flatten there), with inputs that respect their contracts:
    reduction none, and from opset 16 float max and int64 add. Rank 2 below opset 14 (where
    the forms' output, of a dynamic shape, is written through an Expand to it, which onnx2tf
    permutes at rank 3: docs/targets.md)."""
    rng = np.random.default_rng(11)

    def floats(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def ints(*shape):
        return rng.integers(-9, 9, shape)

    features = (2, 3) if opset >= 14 else (3,)
    names = ("B", "C")[:len(features)]
    cases = {
        "nd_none": (_scatter_into_zeros_of_shape(("N", "C"), "K", opset), {
            "x": floats(6, 4), "i": np.array([4, 0, 2]), "v": floats(3, 4)}),
        "gnn_none": (_gnn_of_dynamic_shape(opset, names), {
            "x": ints(5, *features), "dst": np.array([3, 0, 4]), "v": ints(3, *features)}),
    }
    if opset >= 16:
        cases["nd_max"] = (_scatter_into_zeros_of_shape(("N", "C"), "K", opset, reduction="max"),
                           {"x": floats(6, 4), "i": np.array([0, 2, 5, 2, 0]), "v": floats(5, 4)})
        cases["gnn_add"] = (_gnn_of_dynamic_shape(opset, names, reduction="add"), {
            "x": ints(5, *features), "dst": np.array([0, 3, 3, 1, 0, 3, 4]),
            "v": ints(7, *features)})
    return cases


DYNAMIC_ROWS = {f"{name}_opset{opset}": case for opset in (13, 18)
                for name, case in _rows_of_dynamic_dimensions(opset).items()}


def test_onnx2tf_flattens_a_constant_of_shape_one_axis_early(tmp_path):
    # Flatten(ConstantOfShape(Shape(x)), axis=1) of a [6, 4] x, its shape not declared (as the
    # forms' are not), came out [1, 24]: the forms' rows of zeros became one row (index_put at
    # opset 17 returned the update rows as they are; the GNN max's gathers went out of bounds);
    # the forms now Reshape to [-1, 4]
    graph = oh.make_graph(
        [oh.make_node("Shape", ["x"], ["shape"]),
         oh.make_node("ConstantOfShape", ["shape"], ["zeros"]),
         oh.make_node("Flatten", ["zeros"], ["y"], axis=1)], "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [6, 4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    (converted,) = run_in("litert", model, {"x": np.ones((6, 4), np.float32)}, tmp_path / "flatten")
    assert converted.shape == (1, 24)
    inputs = {"x": RNG.standard_normal((6, 4)).astype(np.float32), "i": np.array([0, 2, 5]),
              "v": RNG.standard_normal((3, 4)).astype(np.float32)}
    _prepared_runs_as_original(_scatter_into_zeros_of_shape(), inputs, tmp_path / "prepared")


def test_prepared_forms_reshape_static_rows_instead_of_flattening():
    # (without the LiteRT venv too) the rows of static dimensions: no Flatten for onnx2tf
    prepared = scatter_rewrite.prepare(_scatter_into_zeros_of_shape(), target="litert",
                                       validate=True)
    assert "Flatten" not in {n.op_type for n in prepared.graph.node}


@pytest.mark.parametrize("name", sorted(DYNAMIC_ROWS))
def test_prepared_forms_reshape_dynamic_rows_to_computed_sizes(name):
    # (without the LiteRT venv too) dynamic dimensions on both sides of the rows axis: a Reshape
    # to sizes computed from the shape for litert (onnx2tf's Flatten is wrong there too); the
    # targets whose runtimes flatten right keep the Flatten
    # (proven on the case's own inputs: on generated int64 values near the type's limits, the
    # add form's ReduceSum is not exact in onnxruntime, which the proof then reports)
    model, inputs = DYNAMIC_ROWS[name]
    assert "Flatten" in {n.op_type for n in scatter_rewrite.prepare(
        model, target="no-scatter", validate=True, inputs=inputs).graph.node}
    ops = {n.op_type for n in scatter_rewrite.prepare(model, target="litert", validate=True,
                                                      inputs=inputs).graph.node}
    assert "Flatten" not in ops and "ReduceProd" in ops


@pytest.mark.slow
def test_onnx2tf_flattens_dynamic_dimensions_wrong(tmp_path):
    # Flatten(x, axis=1) of an input [N, C] (both symbolic) given as [6, 4] came out [1, 24]
    graph = oh.make_graph(
        [oh.make_node("Flatten", ["x"], ["y"], axis=1)], "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "C"])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    (converted,) = run_in("litert", model, {"x": np.ones((6, 4), np.float32)}, tmp_path)
    assert converted.shape == (1, 24)


@pytest.mark.slow
@pytest.mark.parametrize("dims", [("A", "B"), ("A", "B", "C")], ids=["rank2", "rank3"])
def test_onnx2tf_expands_a_rank_3_reshape_to_its_computed_shape_wrong(dims, tmp_path):
    # how the forms' output of a symbolic shape is written below opset 14 (no allowzero: graph.py's
    # reshape_to), Expand(Reshape(rows, Shape(x)), Shape(x)): converted at rank 2, not at rank 3
    # (onnx2tf permutes a computed shape of rank 3+ as channels-last in Expand)
    graph = oh.make_graph(
        [oh.make_node("Shape", ["x"], ["shape"]),
         oh.make_node("Reshape", ["x", "flat"], ["rows"]),
         oh.make_node("Reshape", ["rows", "shape"], ["same"]),
         oh.make_node("Expand", ["same", "shape"], ["y"])], "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array([-1], np.int64), "flat")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    x = np.arange(30, dtype=np.float32).reshape((5, 6) if len(dims) == 2 else (5, 2, 3))
    if len(dims) == 2:
        np.testing.assert_array_equal(run_in("litert", model, {"x": x}, tmp_path)[0], x)
        return
    with pytest.raises(Refused):
        run_in("litert", model, {"x": x}, tmp_path)


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_prepared_forms_expand_only_to_shapes_of_equal_dimensions(opset):
    # (without the LiteRT venv too) for litert every Expand to a shape computed at run time
    # takes one whose entries are equal, which onnx2tf's channels-last reordering leaves as it
    # is (shown above); no-scatter keeps the Expand to the data's shape below opset 14
    model, inputs = combined(_rank_3_of_dynamic_shape(opset))
    # (proven on the cases' own inputs, as above)
    prepared = scatter_rewrite.prepare(model, target="litert", validate=True, inputs=inputs)
    shapes = [n.input[1] for n in prepared.graph.node if n.op_type == "Expand"]
    exposed = onnx.ModelProto()
    exposed.CopyFrom(prepared)
    exposed.graph.output.extend(oh.make_empty_tensor_value_info(name) for name in shapes)
    computed = ort_outputs(exposed, inputs)
    assert {name: computed[name].tolist() for name in shapes
            if len(set(computed[name].tolist())) > 1} == {}
    if opset < 14:
        kept = scatter_rewrite.prepare(model, target="no-scatter", validate=True)
        assert "CumSum" in {n.op_type for n in kept.graph.node}


@pytest.mark.parametrize("opset", [11, 13])
def test_prepared_outputs_of_dynamic_shape_stay_exact_when_empty(opset):
    # (onnxruntime only) the output reshaped through [m, ..., m] has m = 0 without an element: each
    # 0 of the shape, wherever it is, copies a 0 (Reshape's 0 means "copy" below opset 14)
    empty = {"elements": {"data": np.zeros((3, 0, 1), np.float32),
                          "indices": np.zeros((3, 0, 1), np.int64),
                          "updates": np.zeros((3, 0, 1), np.float32)},
             "nd": {"data": np.zeros((0, 2, 3), np.float32), "indices": np.zeros((0, 1), np.int64),
                    "updates": np.zeros((0, 2, 3), np.float32)},
             "gnn": {"x": np.ones((5, 2, 0), np.int64), "dst": np.array([3, 0, 4]),
                     "v": np.ones((3, 2, 0), np.int64)},
             "batched_gnn": {"x": np.ones((2, 5, 0), np.int64), "dst": np.array([[3, 0], [1, 2]]),
                             "v": np.ones((2, 2, 0), np.int64)}}
    model, _ = combined(_rank_3_of_dynamic_shape(opset))
    inputs = {f"{case}__{name}": value for case, feeds in empty.items()
              for name, value in feeds.items()}
    prepared = scatter_rewrite.prepare(model, target="litert", validate=True)
    expected = original_outputs(model, inputs)
    assert [e.size for e in expected] == [0] * 4
    assert disagreement(model, expected, ort_run(prepared, inputs), False) == []


@pytest.mark.slow
@pytest.mark.parametrize("opset", [11, 13, 18])
def test_rank_3_of_dynamic_shape_prepared_for_litert_run_exactly(opset, tmp_path):
    # below opset 14 the forms' output was Expand(Reshape(rows, Shape(x)), Shape(x)): refused
    # ([5, 2, 3]) or of a wrong shape ([5, 1, 3] came out [5, 3, 3]); the batched GNN's keys were
    # Expand(keys, Concat(Shape(v)[:2], [1])), read [P, 1, E]: refused
    _prepared_runs_as_original(*combined(_rank_3_of_dynamic_shape(opset)), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("opset", [13, 18])
def test_dynamic_rows_prepared_for_litert_run_exactly(opset, tmp_path):
    # their rows were Flattens, which onnx2tf got wrong ("gather index out of bounds" in LiteRT);
    # below opset 14 the Reshape is written without allowzero (graph.py's reshape_to)
    _prepared_runs_as_original(*combined(_rows_of_dynamic_dimensions(opset)), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(scatter_cases()))
def test_every_scatter_form_prepared_for_litert_runs_exactly(name, tmp_path):
    _prepared_runs_as_original(*scatter_cases()[name], tmp_path)


@pytest.mark.parametrize("nan", [False, True], ids=["signed-zeros", "nan"])
def test_float_max_min_with_input_indices_run_exactly_after_onnx2tf(nan, tmp_path):
    # the sort form (their only exact form): TopK of distinct keys, the doubling scan
    model, inputs = signed_zeros_and_nan(nan)
    prepared = scatter_rewrite.prepare(model, target="litert", validate=True)
    assert "TopK" in {n.op_type for n in prepared.graph.node}
    expected = original_outputs(model, inputs)
    actual = run_in("litert", prepared, inputs, tmp_path)
    assert disagreement(model, expected, actual, False) == []
    assert all(np.array_equal(np.signbit(e), np.signbit(a)) for e, a in zip(expected, actual))


@pytest.mark.slow
def test_onnx2tf_empties_a_slice_ending_at_a_huge_constant(tmp_path):
    # why the sort form came out wrong after onnx2tf: its "to the end" Slice (end 2^62, as ONNX
    # allows) came out empty; the form now ends it at the length
    graph = oh.make_graph(
        [oh.make_node("Slice", ["x", "start", "end"], ["y"])], "g",
        [oh.make_tensor_value_info("x", TensorProto.INT64, [6])],
        [oh.make_tensor_value_info("y", TensorProto.INT64, [5])],
        initializer=[numpy_helper.from_array(np.array([1], np.int64), "start"),
                     numpy_helper.from_array(np.array([2 ** 62], np.int64), "end")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    x = np.arange(6, dtype=np.int64) * 3
    np.testing.assert_array_equal(original_outputs(model, {"x": x})[0], x[1:])
    (converted,) = run_in("litert", model, {"x": x}, tmp_path)
    assert converted.size == 0


# Exports whose prepared model onnx2tf 1.29.24 refuses (with onnxsim on its PATH, as a user runs it):
# each is refused as exported too (asserted), for reasons that are not about scatters (dynamic
# shape arithmetic, Concat of shapes, ...). Every other export converts and runs exactly.
PREPARED_REFUSED = frozenset({
    "torch/gnn_gelu_layernorm_dynamo20", "torch/gnn_max_layer_dynamo18", "torch/index_add_dynamo18",
    "torch/index_put_acc_dynamo18",
    # transformers' MoE blocks: onnx2tf's tf.split of the routed tokens (the experts' Split)
    *(f"torch_repair/{block}_block_ts{opset}" for block in ("olmoe", "qwen2_moe")
      for opset in (11, 17)),
})


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPORTS)
def test_real_exports_prepared_for_litert_run_as_onnxruntime(name, tmp_path):
    model, inputs, _ = load_export(DATA, name)
    try:
        # proved on the export's own inputs: a traced MoE block runs only on inputs routed as
        # in its trace (its Split sizes are constants), which generated inputs are not
        prepared = scatter_rewrite.prepare(model, target="litert", validate=True, inputs=inputs)
    except ConversionError as e:
        # an opset-9 Scatter (the forms need opset 11: upgrade it first)
        assert "need opset >= 11" in str(e)
        return
    try:
        actual = run_in("litert", prepared, inputs, tmp_path / "prepared")
    except Refused:
        assert name in PREPARED_REFUSED
        with pytest.raises(Refused):  # refused as exported too
            run_in("litert", model, inputs, tmp_path / "original")
        return
    assert name not in PREPARED_REFUSED
    assert disagreement(model, original_outputs(model, inputs), actual, True) == []


def _rank_3_constant_indices() -> tuple[onnx.ModelProto, dict]:
    """ScatterElements on each axis and ScatterND, reduction none, each with a rank-3 index
    initializer (unique targets)."""
    rng = np.random.default_rng(5)
    cases = {}
    for axis in (0, 1, 2):
        order = np.argsort(rng.random((3, 4, 5)), axis=axis)
        indices = order[:2] if axis == 0 else order
        model = scatter_model("ScatterElements", data_shape=(3, 4, 5), indices_shape=indices.shape,
                              axis=axis)
        cases[f"elements_axis{axis}"] = (model, {
            "data": rng.standard_normal((3, 4, 5)).astype(np.float32), "indices": indices,
            "updates": rng.standard_normal(indices.shape).astype(np.float32)})
    flat = rng.permutation(20)[:6]
    model = scatter_model("ScatterND", data_shape=(4, 5, 6), indices_shape=(2, 3, 2),
                          updates_shape=(2, 3, 6))
    cases["nd"] = (model, {"data": rng.standard_normal((4, 5, 6)).astype(np.float32),
                           "indices": np.stack([flat // 5, flat % 5], -1).reshape(2, 3, 2),
                           "updates": rng.standard_normal((2, 3, 6)).astype(np.float32)})
    return combined({name: constant_indices(*case) for name, case in cases.items()})


@pytest.mark.slow
def test_rank_3_constant_indices_run_exactly_prepared(tmp_path):
    # onnx2tf converts these scatters (none) exactly itself; their forms' index arithmetic, which
    # its onnxsim folded into rank-3 constants, it refused ("Output tensors of a Functional model
    # must be the output of a TensorFlow Layer"): constant indices now become keys when prepared
    model, inputs = _rank_3_constant_indices()
    expected = original_outputs(model, inputs)
    assert disagreement(model, expected, run_in("litert", model, inputs, tmp_path / "original"),
                        False) == []
    _prepared_runs_as_original(model, inputs, tmp_path / "prepared")


# onnx2tf's default mode (a plain ``onnx2tf -i model.onnx``): rank-3+ inputs made channels-last,
# fed so (run_litert.py's option), its layout tracked through the graph
DEFAULT_LAYOUT = ("--onnx2tf-default-layout",)


def test_prepared_forms_reshape_rank_3_inputs_before_any_arithmetic():
    # (without the LiteRT venv too) what makes the forms exact in onnx2tf's default mode: a
    # rank-3+ input reaches only Reshapes (its Reshape undoes the channels-last layout), never an
    # elementwise op broadcast against position ranges, which it did in the wrong layout
    for name, (model, _) in rank_3_and_4_cases().items():
        prepared = scatter_rewrite.prepare(model, target="litert", validate=True)
        ranks = {i.name: len(i.type.tensor_type.shape.dim) for i in prepared.graph.input}
        consumers = {(n.op_type, tuple(n.input).index(i))
                     for n in prepared.graph.node for i in n.input if ranks.get(i, 0) >= 3}
        assert consumers <= {("Reshape", 0)}, name


def _rank_3_and_4_groups() -> dict[str, tuple]:
    """rank_3_and_4_cases by op, rank, reduction and index kind, each group one model (onnx2tf
    takes minutes over a model of all of them)."""
    groups: dict[str, dict] = {}
    for name, case in rank_3_and_4_cases().items():
        op, reduction = name.split("_")[:2]
        key = f"{op}_{reduction}" + ("_constant" if name.endswith("_constant_indices") else "")
        groups.setdefault(key, {})[name] = case
    return {key: combined(cases) for key, cases in groups.items()}


@pytest.mark.slow
@pytest.mark.parametrize("group", sorted(_rank_3_and_4_groups()))
@pytest.mark.parametrize("options", [(), DEFAULT_LAYOUT], ids=["inputs-kept", "default-layout"])
def test_rank_3_and_4_scatters_prepared_run_exactly_in_either_layout(options, group, tmp_path):
    # before the forms made the indices 1-D first, the default mode refused every ScatterElements
    # with input indices ("tf.where") but one, which came out wrong (rank 3, axis 2: 3.37 off)
    model, inputs = _rank_3_and_4_groups()[group]
    prepared = scatter_rewrite.prepare(model, target="litert", validate=True)
    expected = original_outputs(model, inputs)
    actual = run_in("litert", prepared, inputs, tmp_path, options)
    assert disagreement(model, expected, actual, True) == []


def _scatter_into_a_conv_output() -> Case:
    """Relu(ScatterElements(Conv(x), indices, updates, axis=2, add)): data onnx2tf's default mode
    computes channels-last itself (a Conv's output), not a graph input."""
    rng = np.random.default_rng(1)
    graph = oh.make_graph(
        [oh.make_node("Conv", ["x", "w"], ["c"]),
         oh.make_node("ScatterElements", ["c", "indices", "updates"], ["s"], axis=2,
                      reduction="add"),
         oh.make_node("Relu", ["s"], ["y"])], "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 6]),
         oh.make_tensor_value_info("indices", TensorProto.INT64, [1, 4, 7, 6]),
         oh.make_tensor_value_info("updates", TensorProto.FLOAT, [1, 4, 7, 6])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 6])],
        initializer=[numpy_helper.from_array(
            rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "w")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    return model, {"x": rng.standard_normal((1, 4, 5, 6)).astype(np.float32),
                   "indices": rng.integers(0, 5, (1, 4, 7, 6)),
                   "updates": rng.standard_normal((1, 4, 7, 6)).astype(np.float32)}


@pytest.mark.slow
@pytest.mark.parametrize("options", [(), DEFAULT_LAYOUT], ids=["inputs-kept", "default-layout"])
def test_a_scatter_into_a_conv_output_prepared_runs_exactly_in_either_layout(options, tmp_path):
    model, inputs = _scatter_into_a_conv_output()
    prepared = scatter_rewrite.prepare(model, target="litert", validate=True)
    actual = run_in("litert", prepared, inputs, tmp_path, options)
    assert disagreement(model, original_outputs(model, inputs), actual, True) == []


def _symbolic_tensor_scatter(mode: str, rank: int) -> onnx.ModelProto:
    """A KV-cache TensorScatter (opset 24) of symbolic sizes, IR version 10 as PyTorch writes it."""
    cache, update = (("B", "H", "S", "D"), ("B", "H", "T", "D")) if rank == 4 else (
        ("B", "S", "D"), ("B", "T", "D"))
    model = tensor_scatter_model(mode, cache_shape=cache, update_shape=update)
    model.ir_version = 10
    return model


def _tensor_scatter_inputs(mode: str, shape: tuple[int, ...], steps: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    update = shape[:-2] + (steps, shape[-1])
    high = shape[-2] - steps + 1 if mode == "linear" else shape[-2]
    return {"past": rng.standard_normal(shape).astype(np.float32),
            "update": rng.standard_normal(update).astype(np.float32),
            "write_indices": rng.integers(0, high, shape[0]).astype(np.int64)}


@pytest.mark.parametrize("target", ["litert", "no-scatter"])
def test_a_tensor_scatter_of_four_symbolic_dims_is_prepared(target):
    # (without the LiteRT venv too) four symbolic sizes, each estimated large, multiply past int64
    # in the memory estimate: the form is still chosen and proven
    model = _symbolic_tensor_scatter("linear", 4)
    prepared = scatter_rewrite.prepare(model, target=target, validate=True,
                                       inputs=_tensor_scatter_inputs("linear", (2, 3, 8, 4), 2))
    assert "TensorScatter" not in {n.op_type for n in prepared.graph.node}


def test_an_opset_24_model_is_prepared_for_litert_at_opset_23():
    # (without the LiteRT venv too) onnx2tf's onnxruntime loads opsets up to 23
    prepared = scatter_rewrite.prepare(_symbolic_tensor_scatter("circular", 3), target="litert",
                                       validate=True)
    assert model_opset(prepared) == 23
    assert model_opset(scatter_rewrite.prepare(_symbolic_tensor_scatter("circular", 3),
                                               target="no-scatter", validate=True)) == 24


# onnx2tf's ``not_use_onnxsim=True`` (``onnx2tf -nuo``): the model reaches the converter as written,
# its computed shapes unfolded (run_litert.py's option)
NO_ONNXSIM = ("--no-onnxsim",)


@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_a_tensor_scatter_prepared_for_litert_has_no_computed_expand(mode, rank):
    # (without the LiteRT venv too) its positions are gathered and reshaped, not an Expand to the
    # update's computed shape, and the ScatterElements form reads them as the vector they were
    model = _symbolic_tensor_scatter(mode, rank)
    shape = (2, 3, 8, 4)[-rank:]
    prepared = scatter_rewrite.prepare(model, target="litert", validate=True,
                                       inputs=_tensor_scatter_inputs(mode, shape, 3))
    assert "Expand" not in {n.op_type for n in prepared.graph.node}
    kept = scatter_rewrite.prepare(model, target="no-scatter", validate=True)
    assert "Expand" in {n.op_type for n in kept.graph.node}  # (other targets: as before)


_SLOW = pytest.mark.slow


@pytest.mark.parametrize("mode, rank, options", [
    pytest.param("circular", 3, NO_ONNXSIM, id="circular-3-no-onnxsim"),
    pytest.param("linear", 4, NO_ONNXSIM, id="linear-4-no-onnxsim"),
    *(pytest.param(mode, rank, options, id=f"{mode}-{rank}-{'no-onnxsim' if options else 'onnxsim'}",
                   marks=_SLOW)
      for mode in ("linear", "circular") for rank in (3, 4) for options in ((), NO_ONNXSIM)
      if (mode, rank, options) not in (("circular", 3, NO_ONNXSIM), ("linear", 4, NO_ONNXSIM))),
])
def test_a_tensor_scatter_prepared_for_litert_runs_exactly(mode, rank, options, tmp_path):
    # at opset 24 onnxsim failed on the prepared model and the positions' Expand to the update's
    # computed shape reached onnx2tf unfolded: 12 of 64 elements came out in other rows; so did
    # they at opset 23 without onnxsim, the positions flattened again in channels-last order
    model = _symbolic_tensor_scatter(mode, rank)
    inputs = _tensor_scatter_inputs(mode, (2, 3, 8, 4)[-rank:], 3)
    prepared = scatter_rewrite.prepare(model, target="litert", validate=True, inputs=inputs)
    (actual,) = run_in("litert", prepared, inputs, tmp_path, options)
    (expected,) = original_outputs(model, inputs)
    np.testing.assert_array_equal(actual, expected)


def _flattened_after_a_computed_reshape() -> onnx.ModelProto:
    """Reshape(Reshape(Range(Size(u)), Shape(u)), [-1]): a vector through u's computed shape
    ([2, 3, 4]) and back, the same elements in the same order."""
    graph = oh.make_graph(
        [oh.make_node("Size", ["u"], ["n"]),
         oh.make_node("Range", ["zero", "n", "one"], ["r"]),
         oh.make_node("Shape", ["u"], ["shape"]),
         oh.make_node("Reshape", ["r", "shape"], ["cube"]),
         oh.make_node("Reshape", ["cube", "flat"], ["y"])], "g",
        [oh.make_tensor_value_info("u", TensorProto.FLOAT, ["B", "S", "D"])],
        [oh.make_tensor_value_info("y", TensorProto.INT64, [None])],
        initializer=[numpy_helper.from_array(np.array(v, np.int64), name) for name, v in
                     (("zero", 0), ("one", 1), ("flat", [-1]))])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    model.ir_version = 10
    return model


@pytest.mark.slow
def test_onnx2tf_without_onnxsim_flattens_a_computed_rank_3_reshape_channels_last(tmp_path):
    # why the TensorScatter's positions came out in other rows: the ScatterElements form flattens
    # its indices, which were the update's computed shape
    model = _flattened_after_a_computed_reshape()
    inputs = {"u": np.zeros((2, 3, 4), np.float32)}
    (kept,) = run_in("litert", model, inputs, tmp_path / "onnxsim")
    np.testing.assert_array_equal(kept, np.arange(24))
    (flat,) = run_in("litert", model, inputs, tmp_path / "no-onnxsim", NO_ONNXSIM)
    np.testing.assert_array_equal(flat, np.arange(24).reshape(2, 3, 4).transpose(0, 2, 1).ravel())


# a sample of the forms, one model (each conversion costs ~10 s): ScatterElements on both axes,
# ScatterND, reductions with the indices as inputs and as initializers
WITHOUT_ONNXSIM_SAMPLE = ("elements_add_axis0_constant_indices", "elements_max_axis1", "nd_mul",
                          "nd_max_constant_indices", "elements_none_axis0")


def test_a_sample_of_the_forms_prepared_runs_exactly_without_onnxsim(tmp_path):
    cases = scatter_cases()
    model, inputs = combined({name: cases[name] for name in WITHOUT_ONNXSIM_SAMPLE})
    prepared = scatter_rewrite.prepare(model, target="litert", validate=True)
    actual = run_in("litert", prepared, inputs, tmp_path, NO_ONNXSIM)
    assert disagreement(model, original_outputs(model, inputs), actual, sums_floats(model)) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(scatter_cases()))
def test_every_scatter_form_prepared_for_litert_runs_exactly_without_onnxsim(name, tmp_path):
    model, inputs = scatter_cases()[name]
    prepared = scatter_rewrite.prepare(model, target="litert", validate=True)
    actual = run_in("litert", prepared, inputs, tmp_path, NO_ONNXSIM)
    assert disagreement(model, original_outputs(model, inputs), actual, sums_floats(model)) == []


@pytest.mark.slow
@pytest.mark.parametrize("nan", [False, True], ids=["signed-zeros", "nan"])
def test_float_max_min_prepared_for_litert_run_exactly_without_onnxsim(nan, tmp_path):
    model, inputs = signed_zeros_and_nan(nan)
    prepared = scatter_rewrite.prepare(model, target="litert", validate=True)
    expected = original_outputs(model, inputs)
    actual = run_in("litert", prepared, inputs, tmp_path, NO_ONNXSIM)
    assert disagreement(model, expected, actual, False) == []
    assert all(np.array_equal(np.signbit(e), np.signbit(a)) for e, a in zip(expected, actual))


@pytest.mark.slow
@pytest.mark.parametrize("opset", [11, 13, 18])
def test_rank_3_of_dynamic_shape_prepared_for_litert_run_exactly_without_onnxsim(opset, tmp_path):
    model, inputs = combined(_rank_3_of_dynamic_shape(opset))
    prepared = scatter_rewrite.prepare(model, target="litert", validate=True)
    actual = run_in("litert", prepared, inputs, tmp_path, NO_ONNXSIM)
    assert disagreement(model, original_outputs(model, inputs), actual, sums_floats(model)) == []


@pytest.mark.slow
@pytest.mark.parametrize("opset", [13, 18])
def test_dynamic_rows_prepared_for_litert_run_exactly_without_onnxsim(opset, tmp_path):
    model, inputs = combined(_rows_of_dynamic_dimensions(opset))
    prepared = scatter_rewrite.prepare(model, target="litert", validate=True)
    actual = run_in("litert", prepared, inputs, tmp_path, NO_ONNXSIM)
    assert disagreement(model, original_outputs(model, inputs), actual, sums_floats(model)) == []


# Exports converted without onnxsim too (a user who turns it off): one of each layer kind. Where
# onnxsim no longer folds the dynamic shape arithmetic, onnx2tf 1.29.24 refuses some (the exports
# themselves too, as dynamo writes them, or for their reduction); none may convert to wrong values.
WITHOUT_ONNXSIM = ("torch/gnn_max_layer_ts17", "torch/scatter_reduce_amin_dynamo18",
                   "torch_repair/bev_pool_ts17", "torch_trt/scatter_add_gnn_ts16")
# (LiteRT: "Given shapes, [1,12] and [1,3], are not broadcastable" in the dynamic edge count's
# arithmetic; the export: "ScatterElements currently supports only reduction=['none']")
REFUSED_WITHOUT_ONNXSIM = frozenset({"torch_trt/scatter_add_gnn_ts16"})


@pytest.mark.slow
@pytest.mark.parametrize("name", WITHOUT_ONNXSIM)
def test_real_exports_prepared_for_litert_without_onnxsim_run_exactly_or_are_refused(name, tmp_path):
    model, inputs, _ = load_export(DATA, name)
    prepared = scatter_rewrite.prepare(model, target="litert", validate=False)
    try:
        actual = run_in("litert", prepared, inputs, tmp_path / "prepared", NO_ONNXSIM)
    except Refused:
        assert name in REFUSED_WITHOUT_ONNXSIM
        return
    assert name not in REFUSED_WITHOUT_ONNXSIM
    assert disagreement(model, original_outputs(model, inputs), actual, True) == []
