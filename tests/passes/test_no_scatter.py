"""prepare --target no-scatter (passes/no_scatter.py): every scatter becomes an exact scatter-free
form, none left anywhere, and onnxruntime gives the original's outputs: bit for bit for
none/max/min and integers (NaN, -0.0/+0.0, infinities, repeated and negative indices), within the
validation's judgement for float add/mul; each form in every container; the bound on the memory
a form holds at once refuses with the size; the committed models and exports."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto as T
from onnx import helper as oh
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

import scatter_rewrite
from scatter_rewrite.errors import ConversionError, OptionError
from scatter_rewrite.graph import SCATTER_OPS, attr, iter_nodes, value_names
from scatter_rewrite.passes.lowering import live_bytes as live
from scatter_rewrite.passes.lowering import segment_reduce as seg
from scatter_rewrite.passes.lowering.scatter_free import scatter_free
from scatter_rewrite.passes import no_scatter as ns
from scatter_rewrite.testing import scatter_model
from scatter_rewrite.type_inference import borrow_inferred_types
from tests.helpers.equivalence import assert_validation_accepts
from tests.helpers.models import scatters_left
from tests.helpers.runs import ort_run, run_with_later_first_ties
from tests.helpers.exports import export_arrays

ROOT = Path(__file__).resolve().parents[2]
REDUCTIONS = ("none", "add", "mul", "max", "min")
FLOATS = (np.float32, np.float16, np.float64)


def forced(model: onnx.ModelProto, form: str) -> onnx.ModelProto:
    """Every scatter of ``model`` written in ``form`` ("mask" or "sort"), whichever is cheaper."""
    working = ir.serde.deserialize_model(model)
    borrow_inferred_types(working, sharpen=True)
    names = seg.Names(value_names(working))
    for node, scope in list(iter_nodes(working)):
        if node.op_type in ("ScatterElements", "ScatterND"):
            nodes, out = scatter_free(node, scope.opset, form, names)
            ns.NoScatterPass._splice(node, scope, nodes, out)
    return ir.serde.serialize_model(working)


def special_values(rng, shape, np_type, reduction: str) -> np.ndarray:
    """Values with what an exact form must keep: NaN, -0.0 and +0.0, infinities (floats)."""
    if np_type not in FLOATS:
        return rng.integers(-50 if np.issubdtype(np_type, np.signedinteger) else 0, 100,
                            size=shape).astype(np_type)
    values = rng.standard_normal(shape).astype(np_type)
    flat = values.reshape(-1)
    k = flat.size
    flat[rng.integers(0, k, 2)] = np.nan
    flat[rng.integers(0, k, 3)] = -0.0
    flat[rng.integers(0, k, 2)] = 0.0
    if reduction != "mul":
        flat[rng.integers(0, k, 1)] = np.inf
    return values


def case(op: str, reduction: str, np_type, where: str, seed: int):
    """A one-scatter model and inputs: repeated and negative indices (unique targets for none)."""
    rng = np.random.default_rng(seed)
    dt = oh.np_dtype_to_tensor_dtype(np.dtype(np_type))
    if op == "ScatterElements":
        rows = 6 if reduction == "none" else 9
        model = scatter_model(op, data_type=dt, reduction=reduction, axis=0, where=where,
                              data_shape=(6, 3), indices_shape=(rows, 3))
        if reduction == "none":
            idx = np.stack([rng.permutation(6) for _ in range(3)], 1) - 6 * rng.integers(0, 2, (6, 3))
        else:
            idx = rng.integers(-6, 6, size=(9, 3))
        shape = (rows, 3)
    else:
        rows = 5 if reduction == "none" else 9
        model = scatter_model(op, data_type=dt, reduction=reduction, where=where,
                              data_shape=(6, 3), indices_shape=(rows, 1), updates_shape=(rows, 3))
        idx = (rng.permutation(6)[:5] - 3 if reduction == "none"
               else rng.integers(-6, 6, size=9)).reshape(rows, 1)
        shape = (rows, 3)
    feeds = {"data": special_values(rng, (6, 3), np_type, reduction),
             "indices": idx.astype(np.int64),
             "updates": special_values(rng, shape, np_type, reduction)}
    if where == "if":
        feeds["cond"] = np.array(True)
    return model, feeds


def forms_of(reduction: str, np_type) -> list[str]:
    mask = reduction == "none" or not (np_type in FLOATS and reduction in ("max", "min"))
    return ["mask", "sort"] if mask else ["sort"]


EXACT_CASES = [
    pytest.param(op, reduction, np_type, form, id=f"{op}-{reduction}-{np.dtype(np_type).name}-{form}")
    for op in ("ScatterElements", "ScatterND") for reduction in REDUCTIONS
    for np_type in (np.float32, np.int32, np.int64, np.float64)
    for form in forms_of(reduction, np_type)
]


@pytest.mark.parametrize("op, reduction, np_type, form", EXACT_CASES)
def test_each_form_equals_onnxruntime_on_the_original(op, reduction, np_type, form):
    for seed in range(3):
        model, feeds = case(op, reduction, np_type, "main", seed)
        rewritten = forced(model, form)
        assert not scatters_left(rewritten)
        expected, actual = ort_run(model, feeds), ort_run(rewritten, feeds)
        float_sum = reduction in ("add", "mul") and np_type in FLOATS
        if float_sum:
            assert_validation_accepts(expected, actual, True)
        else:  # bit for bit: NaN payloads and zero signs included
            assert expected[0].tobytes() == actual[0].tobytes(), (expected, actual)


@pytest.mark.parametrize("reduction", ["max", "min"])
def test_max_min_keep_onnxruntimes_order_among_nan_and_signed_zeros(reduction):
    """Every sequence of {-0.0, +0.0, NaN, -1, 1} of length 2 data + 3 updates into two rows: the
    later of equal values wins, a NaN update wins and the next update replaces it, as onnxruntime
    folds; the sort form gives the same bits (no float passes through Where, whose -0.0
    onnxruntime's graph optimizer loses)."""
    model = scatter_model("ScatterElements", reduction=reduction, axis=0, data_shape=(2, 1),
                          indices_shape=(3, 1))
    rewritten = forced(model, "sort")
    values = [-0.0, 0.0, np.nan, -1.0, 1.0]
    import onnxruntime as ort

    a = ort.InferenceSession(model.SerializeToString())
    b = ort.InferenceSession(rewritten.SerializeToString())
    for data in itertools.product(values, repeat=2):
        for updates in itertools.product(values, repeat=3):
            for idx in ([0, 0, 0], [0, 1, 0]):
                feeds = {"data": np.array(data, np.float32).reshape(2, 1),
                         "indices": np.array(idx).reshape(3, 1),
                         "updates": np.array(updates, np.float32).reshape(3, 1)}
                want, got = a.run(None, feeds)[0], b.run(None, feeds)[0]
                assert want.tobytes() == got.tobytes(), (data, updates, idx, want, got)


@pytest.mark.parametrize("where", ["if", "loop", "function"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_subgraphs_and_functions(where, reduction):
    model, feeds = case("ScatterElements", reduction, np.float32, where, 0)
    out, report = scatter_rewrite.prepare(model, target="no-scatter", validate=True,
                                          return_report=True)
    assert not scatters_left(out)
    assert report.status == "PASSED"
    if where != "loop":  # (a Loop body scatters twice into its own result: validation's inputs)
        assert_validation_accepts(ort_run(model, feeds), ort_run(out, feeds),
                    reduction in ("add", "mul"))


@pytest.mark.parametrize("np_type", [np.float16, np.int8, np.uint8, np.bool_])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_every_data_type_through_the_verb(np_type, reduction):
    if np_type is np.bool_ and reduction in ("max", "min"):
        pytest.skip("onnxruntime has no bool ScatterElements max/min to compare with")
    dt = oh.np_dtype_to_tensor_dtype(np.dtype(np_type))
    model = scatter_model("ScatterND", data_type=dt, reduction=reduction, data_shape=(4, 5),
                          indices_shape=(6 if reduction != "none" else 3, 1),
                          updates_shape=(6 if reduction != "none" else 3, 5))
    out, report = scatter_rewrite.prepare(model, target="no-scatter", validate=True,
                                          return_report=True)
    assert not scatters_left(out) and report.status == "PASSED"


def test_tensor_scatter_and_legacy_scatter_become_scatter_free():
    cache = oh.make_tensor_value_info("cache", T.FLOAT, [2, 8, 4])
    update = oh.make_tensor_value_info("update", T.FLOAT, [2, 3, 4])
    write = oh.make_tensor_value_info("write", T.INT64, [2])
    out = oh.make_tensor_value_info("out", T.FLOAT, [2, 8, 4])
    graph = oh.make_graph([oh.make_node("TensorScatter", ["cache", "update", "write"], ["out"],
                                        name="kv", axis=1, mode="circular")],
                          "kv", [cache, update, write], [out])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 24)])
    rewritten, report = scatter_rewrite.prepare(model, target="no-scatter", validate=True,
                                                return_report=True)
    assert not scatters_left(rewritten)
    (note,) = report.passes[-1]["rewritten"]
    assert note["node"].startswith("TensorScatter 'kv'")
    legacy = scatter_rewrite.prepare(str(ROOT / "models/legacy_scatter_opset13.onnx"),
                                     target="no-scatter", validate=True,
                                     output=str(Path(pytest.importorskip("tempfile").mkdtemp(),
                                                     "legacy.onnx")))
    assert not scatters_left(onnx.load(legacy))


def test_the_bound_refuses_with_the_size_and_the_option(tmp_path):
    # 64 experts x 4096 tokens x 256 features, add: the sort form holds at most 12.3 MiB at once
    # (the rows in scan order with the identity row, a step's partner rows and their sum: 3 x
    # (64 + 4096 + 1) x 256 float32 = 12.2 MiB, and the keys' int64 vectors)
    model = scatter_model("ScatterND", reduction="add", data_shape=(64, 256),
                          indices_shape=(4096, 1), updates_shape=(4096, 256))
    working = ir.serde.deserialize_model(model)
    node = next(n for n, _ in iter_nodes(working) if n.op_type == "ScatterND")
    cheapest = ns.forms_for(node, 18)[0]
    assert cheapest.name == "sort" and 3 * 4161 * 256 * 4 < cheapest.bytes < 13 * 2 ** 20
    path = tmp_path / "moe.onnx"
    onnx.save(model, path)
    with pytest.raises(ConversionError) as refused:
        scatter_rewrite.prepare(str(path), target="no-scatter", max_intermediate_mib=12,
                                output=str(tmp_path / "out.onnx"))
    said = str(refused.value)
    assert "ScatterND 'scatternd_0'" in said and "sort form: 12.3 MiB held at once" in said
    assert "above the bound of 12 MiB" in said and "max_intermediate_mib=13" in said
    assert not (tmp_path / "out.onnx").exists()
    written = scatter_rewrite.prepare(str(path), target="no-scatter", max_intermediate_mib=13,
                                      output=str(tmp_path / "out.onnx"))
    assert not scatters_left(onnx.load(written))


def test_the_form_holding_fewer_bytes_at_once_is_picked():
    """Judged by the peak of what each form holds at once, not by its largest intermediate:
    none into 8 rows of 25 from 4096 updates: the mask form's largest intermediate, 8 x 4096
    int64 (256 KiB), is below the sort form's (8 + 4096) x 25 float32 (401 KiB), but its Where
    holds three of them at once: the sort form is picked. Rows of 512: the mask form. A GNN's
    20000 rows: the sort form. The trial forms leave no use on the model's values."""
    moe_narrow = scatter_model("ScatterND", data_shape=(8, 25), indices_shape=(4096, 1),
                               updates_shape=(4096, 25))
    moe = scatter_model("ScatterND", data_shape=(8, 512), indices_shape=(4096, 1),
                        updates_shape=(4096, 512))
    gnn = scatter_model("ScatterND", reduction="max", data_shape=(20000, 64),
                        indices_shape=(100000, 1), updates_shape=(100000, 64))
    for model, form in ((moe_narrow, "sort"), (moe, "mask"), (gnn, "sort")):
        working = ir.serde.deserialize_model(model)
        node = next(n for n, _ in iter_nodes(working) if n.op_type == "ScatterND")
        forms = ns.forms_for(node, 18)
        assert [len(v.uses()) for v in node.inputs] == [1, 1, 1]
        assert forms[0].name == form and all(forms[0].bytes < f.bytes for f in forms[1:])
        nodes, out = scatter_free(node, 18, form)
        assert forms[0].bytes == live.peak_live_bytes(nodes, [out]).bytes
    largest = {f.name: f.formula for f in ns.forms_for(
        next(n for n, _ in iter_nodes(ir.serde.deserialize_model(moe_narrow))
             if n.op_type == "ScatterND"), 18)}
    assert largest == {"mask": "8*4096", "sort": "(8+4096)*25"}


def test_validate_false_and_a_second_run_changes_nothing(tmp_path):
    model = scatter_model("ScatterElements", reduction="min", axis=1, data_shape=(4, 5),
                          indices_shape=(4, 7), updates_shape=(4, 7))
    once = scatter_rewrite.prepare(model, target="no-scatter", validate=False)
    assert not scatters_left(once)
    _, report = scatter_rewrite.prepare(once, target="no-scatter", return_report=True)
    assert report.status == "UNCHANGED"


def test_options_the_target_does_not_take_are_refused():
    model = scatter_model("ScatterElements", reduction="add")
    with pytest.raises(OptionError, match="fix_dims= does not apply to target='no-scatter'"):
        scatter_rewrite.prepare(model, target="no-scatter", fix_dims={"n": 2})
    with pytest.raises(OptionError, match="max_intermediate_mib= does not apply"):
        scatter_rewrite.prepare(model, target="opset-13", max_intermediate_mib=8)
    with pytest.raises(OptionError, match="unknown"):
        scatter_rewrite.prepare(model, target="npu-x")


SHIPPED = sorted(ROOT.glob("models/*.onnx"))
EXPORTS = sorted(ROOT.glob("tests/data/*/*.onnx"))
# The exports onnxruntime refuses to run, with its error and reason (a declared shape its
# inference contradicts, when the session is made; no float16 ScatterND add kernel, when it runs).
ORT_REFUSES = {
    "scatter_amax_feeds_add_ts18": (ort_state.Fail, r"Node \(/Add\) Op \(Add\) \[ShapeInferenceError\] "
                                                    r"Incompatible dimensions"),
    "scatter_amax_functions_ts18": (ort_state.Fail, r"\[ShapeInferenceError\] Inferred shape and existing "
                                                    r"shape differ"),
    "voxel_centroid_fp16_dynamo18": (ort_state.RuntimeException,
                                     r"MLFloat16 data type is not supported with ScatterND opset 16 "
                                     r"when reduction is 'add'"),
}


def test_every_export_onnxruntime_refuses_is_committed():
    assert set(ORT_REFUSES) <= {p.stem for p in EXPORTS if p.with_suffix(".npz").exists()}


@pytest.mark.parametrize("path", [pytest.param(p, id=str(p.relative_to(ROOT)),
                                               marks=() if p in SHIPPED else pytest.mark.slow)
                                  for p in SHIPPED + EXPORTS])
def test_committed_models_leave_no_scatter_and_validate(path, tmp_path):
    out, report = scatter_rewrite.prepare(str(path), target="no-scatter", validate=True,
                                          output=str(tmp_path / "out.onnx"), return_report=True)
    assert report.status in ("PASSED", "UNCHANGED")
    rewritten = onnx.load(out)
    assert not scatters_left(rewritten)
    recorded = path.with_suffix(".npz")
    if recorded.exists():  # the export's own inputs: onnxruntime on both
        feeds, _ = export_arrays(path.parent, path.stem)
        if path.stem in ORT_REFUSES:  # validation compared these in onnx.reference
            error, reason = ORT_REFUSES[path.stem]
            with pytest.raises(error, match=reason):
                ort_run(onnx.load(path), feeds)
            return
        expected = ort_run(onnx.load(path), feeds)
        sums = any(n.op_type in SCATTER_OPS and attr(n, "reduction", "none") in ("add", "mul")
                   for n, _ in iter_nodes(ir.serde.deserialize_model(onnx.load(path))))
        assert_validation_accepts(expected, ort_run(rewritten, feeds), sums)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
@pytest.mark.parametrize("reduction, np_type", [("none", np.float32), ("max", np.float32),
                                                ("min", np.int64), ("add", np.int32)])
def test_every_axis_of_a_rank_3_scatter(axis, reduction, np_type):
    """ScatterElements on data [3, 4, 5] along each axis (negative ones too), indices smaller than
    the data in every dimension, negative and (for reductions) repeated: each form bit for bit."""
    rng = np.random.default_rng(axis + 7)
    shape, size = (2, 3, 4), (3, 4, 5)[axis]
    if reduction == "none":  # unique targets along the axis
        idx = np.moveaxis(np.argsort(rng.random(np.moveaxis(np.empty(shape), axis, -1).shape[:-1]
                                                + (size,)), -1)[..., :shape[axis]], -1, axis)
    else:
        idx = rng.integers(0, size, shape)
    idx = idx - size * rng.integers(0, 2, shape)  # the same targets, some written negative
    dt = oh.np_dtype_to_tensor_dtype(np.dtype(np_type))
    model = scatter_model("ScatterElements", data_type=dt, reduction=reduction, axis=axis,
                          data_shape=(3, 4, 5), indices_shape=shape)
    feeds = {"data": special_values(rng, (3, 4, 5), np_type, reduction),
             "indices": idx.astype(np.int64), "updates": special_values(rng, shape, np_type,
                                                                        reduction)}
    expected = ort_run(model, feeds)[0]
    for form in forms_of(reduction, np_type):
        actual = ort_run(forced(model, form), feeds)[0]
        assert expected.tobytes() == actual.tobytes(), (form, expected, actual)


def test_the_other_tie_rule_reorders_equal_keys():
    # the evaluator below can fail: on equal keys it orders unlike onnxruntime's TopK
    graph = oh.make_graph([oh.make_node("TopK", ["x", "k"], ["v", "i"], largest=0)], "g",
                          [oh.make_tensor_value_info("x", T.INT64, [4]),
                           oh.make_tensor_value_info("k", T.INT64, [1])],
                          [oh.make_tensor_value_info("v", T.INT64, [4]),
                           oh.make_tensor_value_info("i", T.INT64, [4])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    feeds = {"x": np.array([1, 0, 1, 0]), "k": np.array([4])}
    later = run_with_later_first_ties(model, feeds)[1]
    np.testing.assert_array_equal(ort_run(model, feeds)[1], [1, 3, 0, 2])
    np.testing.assert_array_equal(later, [3, 1, 2, 0])


@pytest.mark.parametrize("op, reduction, np_type", [
    pytest.param(op, reduction, np_type, id=f"{op}-{reduction}-{np.dtype(np_type).name}")
    for op in ("ScatterElements", "ScatterND") for reduction in REDUCTIONS
    for np_type in (np.float32, np.int32)])
def test_the_sort_form_is_exact_under_any_topk_tie_rule(op, reduction, np_type):
    """The sort form's keys are distinct (each key times the length plus its position), so a
    TopK that orders equal values otherwise (the later first) gives the same bits."""
    for seed in range(3):
        model, feeds = case(op, reduction, np_type, "main", seed)
        rewritten = forced(model, "sort")
        expected = ort_run(model, feeds)
        actual = run_with_later_first_ties(rewritten, feeds)
        if reduction in ("add", "mul") and np_type in FLOATS:
            assert_validation_accepts(expected, actual, True)
        else:
            assert expected[0].tobytes() == actual[0].tobytes(), (expected, actual)


@pytest.mark.parametrize("op, indices_shape, updates_shape, levels", [
    ("ScatterElements", (6, 4), ("E", 4), 6), ("ScatterElements", ("E", 4), (6, 4), 6),
    ("ScatterND", (6, 1), ("E", 4), 4), ("ScatterND", ("E", 1), (6, 4), 4)])
def test_the_update_count_comes_from_whichever_input_states_it(op, indices_shape,
                                                               updates_shape, levels):
    # 24 update elements (ScatterElements: 20 + 24 sorted rows) or 6 update rows (ScatterND:
    # 5 + 6), stated by the indices or by the updates: float max as the segment tree over them,
    # 44 -> 22 -> 11 -> 5 -> 2 -> 1 or 11 -> 5 -> 2 -> 1 blocks (a GatherElements per level built,
    # per query step and at the end), where a symbolic count needs the scan's 31 doubling steps
    model = scatter_model(op, data_shape=(5, 4), indices_shape=indices_shape,
                          updates_shape=updates_shape, reduction="max")
    prepared = scatter_rewrite.prepare(model, target="no-scatter", validate=False)
    assert [n.op_type for n in prepared.graph.node].count("GatherElements") == 2 * levels
    rng = np.random.default_rng(0)
    idx = rng.integers(-5, 5, (6, 4) if op == "ScatterElements" else (6, 1))
    feeds = {"data": special_values(rng, (5, 4), np.float32, "max"), "indices": idx,
             "updates": special_values(rng, (6, 4), np.float32, "max")}
    assert ort_run(model, feeds)[0].tobytes() == ort_run(prepared, feeds)[0].tobytes()
