"""Edge cases the other suites miss, each a bug found by building small models and comparing the
rewritten model with the original in onnxruntime on inputs that respect the scatter's contract:

* zero-size data dimensions: the lowerings' final ``Reshape(rows, Shape(data))`` read a 0 in the
  data's shape as "copy the input's dimension" (Reshape without ``allowzero``), so a ScatterND
  reduction on data [2, 3, 0, 4] failed in onnxruntime after ``lower``/``tensorrt``, and TensorScatter
  with an empty update on axis 2 likewise;
* attributes referring to a function attribute (``axis = @ax`` in a model-local function): ``lower``,
  ``to_scatternd`` and ``tensorrt`` crashed with a TypeError, and ``lower --opset 13`` of a
  ScatterElements(none) with such an axis silently replaced it by ``axis=0``;
* ``lower --mode custom|tensorrt-plugin`` with float16 data: validation aborted the whole process
  (onnxruntime-extensions' Python ops cannot take float16), and for dtypes onnxruntime cannot run at
  all (bfloat16) the reference fallback did not know the custom-domain nodes;
* bfloat16 ScatterElements/ScatterND (reduction none) could not move below opset 16: the ONNX
  converter's adapter refuses bfloat16, which the opset-13 schemas accept.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto

import scatter_rewrite as sr
from scatter_rewrite.errors import ConversionError
from scatter_rewrite.evaluator import scatter_elements
from scatter_rewrite.evaluator.reference_ops import make_evaluator
from scatter_rewrite.passes.specialize import SpecializeCallsPass
from scatter_rewrite.testing import LOCAL_DOMAIN

from tests.helpers.equivalence import assert_validation_accepts
from tests.helpers.models import function_model, function_node, make_model, vi
from tests.helpers.runs import validation_ort_run


REWRITES = {
    "lower13": lambda m: sr.lower(m, opset=13),
    "lower15": lambda m: sr.lower(m, opset=15),
    "lower13-plugin": lambda m: sr.lower(m, opset=13, mode="tensorrt-plugin"),
    "tensorrt-10": lambda m: sr.prepare_for_tensorrt(m, trt_version="10"),
    "tensorrt-8.6": lambda m: sr.prepare_for_tensorrt(m, trt_version="8.6"),
}


# ---- zero-size dimensions -------------------------------------------------------------------------


def scatter_nd_case(data_dims, data_shape, indices_shape, reduction, seed=0):
    """A ScatterND model with data dims ``data_dims`` (names are dynamic) and inputs for ``data_shape``."""
    rng = np.random.default_rng(seed)
    k = indices_shape[-1]
    node = oh.make_node("ScatterND", ["data", "indices", "updates"], ["out"], reduction=reduction)
    model = make_model([node], [vi("data", TensorProto.FLOAT, data_dims), vi("indices", TensorProto.INT64, indices_shape),
                                vi("updates", TensorProto.FLOAT, list(indices_shape[:-1]) + list(data_dims[k:]))],
                       [vi("out", TensorProto.FLOAT, data_dims)])
    # in range for every indexed dimension (none of which is 0: the spec leaves nothing to index there)
    indices = np.stack([rng.integers(-data_shape[j], data_shape[j], indices_shape[:-1]) for j in range(k)], -1)
    feeds = {"data": rng.standard_normal(data_shape).astype(np.float32), "indices": indices,
             "updates": rng.standard_normal(list(indices_shape[:-1]) + list(data_shape[k:])).astype(np.float32)}
    return model, feeds


def scatter_elements_case(data_dims, data_shape, indices_dims, indices_shape, axis, reduction, seed=0):
    rng = np.random.default_rng(seed)
    node = oh.make_node("ScatterElements", ["data", "indices", "updates"], ["out"], axis=axis, reduction=reduction)
    model = make_model([node], [vi("data", TensorProto.FLOAT, data_dims), vi("indices", TensorProto.INT64, indices_dims),
                                vi("updates", TensorProto.FLOAT, indices_dims)], [vi("out", TensorProto.FLOAT, data_dims)])
    size = data_shape[axis]
    feeds = {"data": rng.standard_normal(data_shape).astype(np.float32),
             "indices": rng.integers(-size, size, indices_shape) if size else np.zeros(indices_shape, np.int64),
             "updates": rng.standard_normal(indices_shape).astype(np.float32)}
    return model, feeds


ZERO_SIZE_CASES = {
    # static shapes with a 0-length dimension the index tuple does not address
    "nd-static-0-in-row": lambda r: scatter_nd_case([2, 3, 0, 4], [2, 3, 0, 4], [3, 1], r),
    "nd-static-0-last": lambda r: scatter_nd_case([2, 3, 0], [2, 3, 0], [3, 2], r),
    "elements-static-0-column": lambda r: scatter_elements_case([4, 0], [4, 0], [3, 0], [3, 0], 0, r),
    # the same dims dynamic, 0 only at run time (opset 13: no allowzero; 15: allowzero)
    "nd-dynamic-0-in-row": lambda r: scatter_nd_case([2, 3, "z", 4], [2, 3, 0, 4], [3, 1], r),
    "nd-dynamic-0-last": lambda r: scatter_nd_case(["a", "b", "z"], [2, 3, 0], [3, 2], r),
    "elements-dynamic-0-middle": lambda r: scatter_elements_case(["a", "b", "c"], [3, 0, 2], ["n", "b", "c"], [2, 0, 2], 0, r),
    # dynamic dims that are not 0: the guarded reshape is the plain one
    "nd-dynamic-nonzero": lambda r: scatter_nd_case([2, 3, "z", 4], [2, 3, 5, 4], [3, 1], r),
}


@pytest.mark.parametrize("rewrite", sorted(REWRITES))
@pytest.mark.parametrize("case", sorted(ZERO_SIZE_CASES))
@pytest.mark.parametrize("reduction", ["add", "max"])
def test_zero_size_dimension(case, rewrite, reduction):
    model, feeds = ZERO_SIZE_CASES[case](reduction)
    if (case, rewrite) == ("elements-dynamic-0-middle", "tensorrt-8.6"):
        # a dynamic number of updates: 8.6 would ignore the reduction, and the network needs a static count
        with pytest.raises(sr.ConversionError, match="number of updates is not static"):
            REWRITES[rewrite](model)
        return
    rewritten = REWRITES[rewrite](model)
    onnx.checker.check_model(rewritten, full_check=True)
    assert_validation_accepts(validation_ort_run(model, feeds), validation_ort_run(rewritten, feeds),
                              float_reduction=reduction == "add")


def tensor_scatter_case(cache_shape, seq, axis, mode="linear", write=None, seed=0):
    rng = np.random.default_rng(seed)
    update_shape = list(cache_shape)
    update_shape[axis] = seq
    names = ["past", "update"] + (["write"] if write is not None else [])
    node = oh.make_node("TensorScatter", names, ["out"], axis=axis, mode=mode)
    inputs = [vi("past", TensorProto.FLOAT, cache_shape), vi("update", TensorProto.FLOAT, update_shape)]
    if write is not None:
        inputs.append(vi("write", TensorProto.INT64, [cache_shape[0]]))
    model = make_model([node], inputs, [vi("out", TensorProto.FLOAT, cache_shape)], opset=24)
    feeds = {"past": rng.standard_normal(cache_shape).astype(np.float32),
             "update": rng.standard_normal(update_shape).astype(np.float32)}
    if write is not None:
        feeds["write"] = np.array(write, np.int64)
    return model, feeds


@pytest.mark.parametrize("opset", [11, 13, 15])
@pytest.mark.parametrize("case", [
    dict(cache_shape=[2, 3, 5, 2], seq=0, axis=2, write=[0, 1]),  # an empty update: nothing written
    dict(cache_shape=[2, 3, 5, 2], seq=0, axis=2),
    dict(cache_shape=[2, 3, 5, 2], seq=0, axis=-2, mode="circular", write=[4, 7]),
    dict(cache_shape=[2, 3, 5, 2], seq=3, axis=2, mode="circular", write=[4, 1]),
    dict(cache_shape=[2, 0, 5, 3], seq=2, axis=2, write=[1, 0]),
], ids=["seq0-axis2", "seq0-no-write-indices", "seq0-circular", "circular", "empty-head-dim"])
def test_tensor_scatter_lowering_with_empty_dimensions(case, opset):
    model, feeds = tensor_scatter_case(**case)
    lowered = sr.lower(model, opset=opset)
    onnx.checker.check_model(lowered, full_check=True)
    assert [n.op_type for n in lowered.graph.node].count("TensorScatter") == 0
    assert_validation_accepts(validation_ort_run(model, feeds), validation_ort_run(lowered, feeds),
                              float_reduction=False)


# ---- attributes referring to a function attribute ------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1])
def test_opset_conversion_keeps_a_function_attribute_reference(axis):
    """lower to 13 moves the function's ScatterElements(none) from 18 to 13: its axis must stay
    ``@ax`` (it became ``axis=0``, silently scattering along the wrong axis for ax=1)."""
    model, feeds = function_model(axis=axis)
    lowered = sr.lower(model, opset=13)
    onnx.checker.check_model(lowered, full_check=True)
    (axis_attr,) = [a for a in function_node(lowered).attribute if a.name == "axis"]
    assert axis_attr.ref_attr_name == "ax"
    assert_validation_accepts(validation_ort_run(model, feeds), validation_ort_run(lowered, feeds),
                              float_reduction=False)


def _two_calls(model: onnx.ModelProto, feeds: dict, **second) -> tuple[onnx.ModelProto, dict]:
    """``model`` (function_model) with a second call of F, on [5, 3] data, with ``second``'s attributes."""
    call = oh.make_node("F", ["data2", "indices2", "updates2"], ["out2"], domain=LOCAL_DOMAIN, name="call2", **second)
    model.graph.node.append(call)
    model.graph.input.extend([vi("data2", TensorProto.FLOAT, [5, 3]), vi("indices2", TensorProto.INT64, [2, 3]),
                              vi("updates2", TensorProto.FLOAT, [2, 3])])
    model.graph.output.append(vi("out2", TensorProto.FLOAT, [5, 3]))
    onnx.checker.check_model(model)
    rng = np.random.default_rng(3)
    feeds = dict(feeds, data2=rng.standard_normal((5, 3)).astype(np.float32),
                 indices2=np.array([[0, 4, 2], [4, 1, 2]]), updates2=rng.standard_normal((2, 3)).astype(np.float32))
    return model, feeds


def _specialized(outcome) -> list[str]:
    return [n for p in outcome.passes for n in p["notes"] if "specialized per binding" in n]


@pytest.mark.parametrize("mode", ["standard", "custom", "tensorrt-plugin"])
def test_lower_specializes_a_function_whose_reduction_axis_is_its_attribute(mode):
    """Before, lower refused: the lowering depends on the axis, known only at each call. Now each
    binding gets its own copy of the function (ax=1 keeps F, ax=0 becomes F__2), lowered there."""
    model, feeds = _two_calls(*function_model(reduction="add", axis=1), ax=0)
    lowered, outcome = sr.lower(model, opset=13, mode=mode, validate=mode == "standard", return_report=True)
    assert [f.name for f in lowered.functions] == ["F", "F__2"]
    assert [n.op_type for n in lowered.graph.node] == ["F", "F__2"]
    assert all("ref_attr_name" not in str(a) or not a.ref_attr_name for f in lowered.functions for n in f.node
               for a in n.attribute)
    (note,) = _specialized(outcome)
    assert "F (ax=1, 1 call(s)); F__2 (ax=0, 1 call(s))" in note
    assert not any(n.op_type == "ScatterElements" and n.domain == "" for f in lowered.functions for n in f.node)
    if mode == "standard":
        assert_validation_accepts(validation_ort_run(model, feeds), validation_ort_run(lowered, feeds),
                                  float_reduction=True)


def test_lower_specializes_a_function_whose_reduction_is_its_attribute():
    model, feeds = function_model(reduction_ref="max", axis_ref=False)
    lowered, outcome = sr.lower(model, opset=17, validate=True, return_report=True)
    assert [f.name for f in lowered.functions] == ["F"]  # one binding, every call: resolved in place
    assert "F (red='max', 1 call(s))" in _specialized(outcome)[0]
    assert_validation_accepts(validation_ort_run(model, feeds), validation_ort_run(lowered, feeds),
                              float_reduction=False)


def test_a_function_passing_its_attribute_on_is_specialized_too():
    """main calls G<a=1> and G<a=0>; G calls F<ax=@a>; F's scatter reads @ax: G is specialized first,
    then F in each copy of G."""
    model, feeds = _two_calls(*function_model(reduction="add", axis=1), ax=0)
    outer = oh.make_function(LOCAL_DOMAIN, "G", ["d", "i", "u"], ["o"],
                             [oh.make_node("F", ["d", "i", "u"], ["o"], domain=LOCAL_DOMAIN)],
                             opset_imports=[oh.make_opsetid("", 18), oh.make_opsetid(LOCAL_DOMAIN, 1)], attributes=["a"])
    outer.node[0].attribute.append(onnx.AttributeProto(name="ax", ref_attr_name="a", type=onnx.AttributeProto.INT))
    model.functions.append(outer)
    for call, a in zip(model.graph.node, (1, 0)):
        call.op_type = "G"
        del call.attribute[:]
        call.attribute.append(oh.make_attribute("a", a))
    onnx.checker.check_model(model)
    specialized, outcome = sr.rewrite(model, [SpecializeCallsPass()], validate=True, return_report=True)
    assert sorted(f.name for f in specialized.functions) == ["F", "F__2", "G", "G__2"]
    axes = {f.name: [a.i for n in f.node for a in n.attribute if a.name == "axis"] for f in specialized.functions}
    assert sorted(map(tuple, axes.values())) == [(), (), (0,), (1,)]  # F's copies: one axis each, no @ax left
    assert len(_specialized(outcome)) == 2
    assert_validation_accepts(validation_ort_run(model, feeds), validation_ort_run(specialized, feeds),
                              float_reduction=False)
    lowered, outcome = sr.lower(model, opset=13, validate=True, return_report=True)  # and lowered in each copy
    assert sorted(f.name for f in lowered.functions) == ["F", "F__2", "G", "G__2"]
    assert not any(n.op_type == "ScatterElements" for f in lowered.functions for n in f.node)
    assert_validation_accepts(validation_ort_run(model, feeds), validation_ort_run(lowered, feeds),
                              float_reduction=True)


@pytest.mark.parametrize("verb", ["lower", "tensorrt-8.6"])
def test_a_reduction_in_a_function_called_only_from_another_is_lowered(verb):
    """main calls G; G calls F, whose ScatterElements(add) must be lowered. F's types come from its
    call inside G, typed in turn from G's call: before, "the data type is unknown" (lower) and
    out-of-range generated indices (validation of tensorrt)."""
    model, feeds = function_model(reduction="add", axis=1)
    outer = oh.make_function(LOCAL_DOMAIN, "G", ["d", "i", "u"], ["o"],
                             [oh.make_node("Relu", ["d"], ["r"]),
                              oh.make_node("F", ["r", "i", "u"], ["o"], domain=LOCAL_DOMAIN, ax=1)],
                             opset_imports=[oh.make_opsetid("", 18), oh.make_opsetid(LOCAL_DOMAIN, 1)])
    model.functions.append(outer)
    model.graph.node[0].op_type = "G"
    del model.graph.node[0].attribute[:]
    onnx.checker.check_model(model)
    rewrite = (lambda m: sr.lower(m, opset=13, validate=True, return_report=True)) if verb == "lower" else (
        lambda m: sr.prepare_for_tensorrt(m, trt_version="8.6", validate=True, return_report=True))
    result, outcome = rewrite(model)
    assert len([r for p in outcome.passes for r in p["rewritten"] if "function local::F" in r["node"]]) == 1
    assert not any(n.op_type == "ScatterElements" for f in result.functions for n in f.node)
    assert_validation_accepts(validation_ort_run(model, feeds), validation_ort_run(result, feeds), float_reduction=True)


def test_a_call_whose_value_is_not_known_keeps_the_function():
    """F's ax is given by neither the call nor a default: that call keeps F (and lower refuses it,
    since the model must move to 13); the other call gets its own copy."""
    model, feeds = _two_calls(*function_model(reduction="add", axis=1), ax=0)
    del model.functions[0].attribute_proto[:]
    model.functions[0].attribute.append("ax")
    del model.graph.node[0].attribute[:]
    specialized = sr.to_scatternd(model, return_report=True)[1]
    assert "1 call(s) whose values are not known keep F" in _specialized(specialized)[0]
    with pytest.raises(ConversionError, match=r"attribute 'axis' refers to the function's attribute 'ax'"):
        sr.lower(model, opset=13)


@pytest.mark.parametrize("verb", ["to_scatternd", "tensorrt-10", "tensorrt-8.6"])
@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatternd_and_tensorrt_specialize_a_function_attribute_reference(verb, reduction):
    model, feeds = _two_calls(*function_model(reduction=reduction), ax=0)
    rewrite = {"to_scatternd": sr.to_scatternd,
               "tensorrt-10": lambda m, **kw: sr.prepare_for_tensorrt(m, trt_version="10", **kw),
               "tensorrt-8.6": lambda m, **kw: sr.prepare_for_tensorrt(m, trt_version="8.6", **kw)}[verb]
    result, outcome = rewrite(model, validate=True, return_report=True)
    skipped = [s["detail"] for p in outcome.passes for s in p["skipped"]]
    assert not any("refers to the function's attribute" in s for s in skipped), skipped
    assert [f.name for f in result.functions] == ["F", "F__2"]
    ops = {n.op_type for f in result.functions for n in f.node}
    if verb == "to_scatternd" or (verb == "tensorrt-8.6" and reduction == "add"):
        assert "ScatterElements" not in ops, ops  # rewritten in both copies
    assert_validation_accepts(validation_ort_run(model, feeds), validation_ort_run(result, feeds),
                              float_reduction=reduction == "add")


def test_tensorrt_opset_cap_with_a_reduction_reference():
    """An opset-20 model whose function scatter's reduction is a reference: specialized first, the
    reduction is known, lowered for TensorRT 8.6, and the model capped at its opset 17 (before: left
    at 20, the cap not knowing the reduction)."""
    model, feeds = function_model(reduction_ref="add", opset=20)
    result, outcome = sr.prepare_for_tensorrt(model, trt_version="8.6", validate=True, return_report=True)
    assert result.opset_import[0].version == 17
    assert_validation_accepts(validation_ort_run(model, feeds), validation_ort_run(result, feeds), float_reduction=True)


@pytest.mark.parametrize("second_axis", [None, 0])
def test_fold_specializes_a_constant_scatter_whose_axis_is_a_function_attribute(second_axis):
    """Before, left alone ("unknown until called"); now each call binding gets its copy of F, where
    the scatter folds to a Constant."""
    model, feeds = function_model(constant=True)
    body = model.functions[0]  # the scatter's data a Constant too, added to the function's input after
    body.node.insert(0, oh.make_node("Constant", [], ["c"], value=oh.make_tensor(
        "cv", TensorProto.FLOAT, [4, 3], np.arange(12, dtype=np.float32))))
    scatter = function_node(model)
    scatter.input[0], scatter.output[0] = "c", "s"
    body.node.append(oh.make_node("Add", ["s", "d"], ["o"]))
    onnx.checker.check_model(model)
    if second_axis is not None:
        call = oh.make_node("F", ["data2"], ["out2"], domain=LOCAL_DOMAIN, name="call2", ax=second_axis)
        model.graph.node.append(call)
        model.graph.input.append(vi("data2", TensorProto.FLOAT, [4, 3]))
        model.graph.output.append(vi("out2", TensorProto.FLOAT, [4, 3]))
        feeds = dict(feeds, data2=np.arange(12, dtype=np.float32).reshape(4, 3))
    folded, outcome = sr.fold(model, validate=True, return_report=True)
    assert [s["detail"] for p in outcome.passes for s in p["skipped"]] == []
    assert len([r for p in outcome.passes for r in p["rewritten"]]) == (1 if second_axis is None else 2)
    assert [f.name for f in folded.functions] == (["F"] if second_axis is None else ["F", "F__2"])
    assert not any(n.op_type.startswith("Scatter") for f in folded.functions for n in f.node)
    feeds = {k: v for k, v in feeds.items() if k in ("data", "data2")}
    assert_validation_accepts(validation_ort_run(model, feeds), validation_ort_run(folded, feeds),
                              float_reduction=False)


def test_fold_leaves_a_function_whose_scatter_is_not_constant_as_it_is():
    model, feeds = _two_calls(*function_model(reduction="add", axis=1), ax=0)
    folded, outcome = sr.fold(model, return_report=True)
    assert [f.name for f in folded.functions] == ["F"] and _specialized(outcome) == []
    assert [a.ref_attr_name for a in function_node(folded).attribute if a.name == "axis"] == ["ax"]


def test_upgrade_keeps_a_scatter_axis_reference():
    model, feeds = function_model(op="Scatter", opset=10)
    upgraded, outcome = sr.upgrade(model, return_report=True)
    node = function_node(upgraded)
    assert node.op_type == "ScatterElements"
    assert [a.ref_attr_name for a in node.attribute if a.name == "axis"] == ["ax"]
    assert any("axis=@ax" in r["detail"] for p in outcome.passes for r in p["rewritten"])
    assert_validation_accepts(validation_ort_run(model, feeds), validation_ort_run(upgraded, feeds),
                              float_reduction=False)


# ---- dtypes: float16/bfloat16 custom-domain forms, bfloat16 opset moves ---------------------------


def test_custom_float16_validation_does_not_abort():
    """Validating ``lower --mode custom`` on float16 data used to abort the interpreter (SIGABRT from
    onnxruntime-extensions); it runs in a child process so a regression cannot take pytest down."""
    code = textwrap.dedent("""
        import onnx.helper as oh
        from onnx import TensorProto
        import scatter_rewrite as sr
        from scatter_rewrite.testing import scatter_model
        for mode in ("custom", "tensorrt-plugin"):
            for reduction in ("add", "max"):
                model = scatter_model("ScatterElements", opset=18, data_type=TensorProto.FLOAT16, reduction=reduction)
                try:
                    sr.lower(model, opset=13, mode=mode, validate=True)
                    print(mode, reduction, "validated")
                except sr.ValidationError as e:
                    print(mode, reduction, "refused:", str(e)[:80])
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 4
    # The TensorRT plugin form (its runtime is TensorRT) is proven in onnx.reference where
    # onnxruntime cannot run it; a --mode custom result must load in onnxruntime with
    # custom_ops.register, or validation says it does not (where the custom op lacks float16).
    refused = "refused: onnxruntime cannot load the rewritten model with scatter_rewrite.custom_ops"
    for line in lines:
        mode = line.split()[0]
        assert line.endswith(" validated") or (mode == "custom" and refused in line), line
    assert sorted(line for line in lines if line.startswith("tensorrt-plugin")) == [
        "tensorrt-plugin add validated", "tensorrt-plugin max validated"]


@pytest.mark.parametrize("mode", ["custom", "tensorrt-plugin"])
def test_custom_bfloat16_validated_in_the_reference_evaluator(mode):
    """The TensorRT plugin form is proven in onnx.reference (onnxruntime runs neither model); a
    --mode custom result must also load in onnxruntime with custom_ops.register, or validation
    fails saying so."""
    data = np.arange(12, dtype=np.float32).reshape(4, 3).astype(ml_dtypes.bfloat16)
    node = oh.make_node("ScatterElements", ["data", "indices", "updates"], ["out"], axis=0, reduction="add")
    model = make_model([node], [vi("data", TensorProto.BFLOAT16, [4, 3]), vi("indices", TensorProto.INT64, [2, 3]),
                                vi("updates", TensorProto.BFLOAT16, [2, 3])], [vi("out", TensorProto.BFLOAT16, [4, 3])])
    try:
        lowered, outcome = sr.lower(model, opset=13, mode=mode, validate=True, return_report=True)
    except sr.ValidationError as e:
        assert mode == "custom", e
        assert "cannot load the rewritten model with scatter_rewrite.custom_ops" in str(e), e
        lowered, outcome = sr.lower(model, opset=13, mode=mode), None
    if outcome is not None:
        assert "onnx.reference" in outcome.validation["checked_against"]
    feeds = {"data": data, "indices": np.array([[0, 1, 3], [0, 1, 3]]), "updates": data[:2]}
    got = make_evaluator(lowered).run(None, feeds)[0]
    want = scatter_elements(data, feeds["indices"], feeds["updates"], axis=0, reduction="add")
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
@pytest.mark.parametrize("target", [13, 15])
def test_bfloat16_scatter_moves_below_opset_16(op, target):
    """The converter's 16 -> 15 adapter refuses bfloat16, which ScatterElements-13/ScatterND-13
    accept: the node is kept as it is (its explicit reduction="none" dropped)."""
    shapes = ([2, 3], [2, 3]) if op == "ScatterElements" else ([2, 1], [2, 3])
    node = oh.make_node(op, ["data", "indices", "updates"], ["out"], reduction="none")
    model = make_model([node], [vi("data", TensorProto.BFLOAT16, [4, 3]), vi("indices", TensorProto.INT64, shapes[0]),
                                vi("updates", TensorProto.BFLOAT16, shapes[1])], [vi("out", TensorProto.BFLOAT16, [4, 3])])
    lowered = sr.lower(model, opset=target)
    onnx.checker.check_model(lowered, full_check=True)
    assert lowered.opset_import[0].version == target
    (scatter,) = lowered.graph.node
    assert scatter.op_type == op and not any(a.name == "reduction" for a in scatter.attribute)
    data = np.arange(12, dtype=np.float32).reshape(4, 3).astype(ml_dtypes.bfloat16)
    feeds = {"data": data, "indices": np.array([[3, 0, 1], [1, 2, 0]]) if op == "ScatterElements" else np.array([[3], [1]]),
             "updates": -data[:2]}
    np.testing.assert_array_equal(make_evaluator(lowered).run(None, feeds)[0].astype(np.float32),
                                  make_evaluator(model).run(None, feeds)[0].astype(np.float32))
