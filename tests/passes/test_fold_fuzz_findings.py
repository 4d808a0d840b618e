"""Regression tests for what the randomized fold audit (``tests/helpers/fold_fuzz.py``) found.

Each test builds the smallest model that showed the problem, folds it, and checks the result against
onnxruntime (one thread) on the original, plus a short seed list of the generator itself.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnx.parser

import scatter_rewrite as sr
from tests.helpers.runs import ort_run
from tests.helpers.models import scatters_left


def parse(text: str) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model, full_check=True)
    return model


# onnxruntime on one thread and the graph as written: float sums in one order, nothing folded by it
run = functools.partial(ort_run, threads=1, optimize=False)


def fold_and_compare(model: onnx.ModelProto, feeds: dict | None = None, **kwargs):
    """Fold; the result passes the full checker and computes what the original computes, bit for bit."""
    folded, outcome = sr.fold(model, return_report=True, **kwargs)
    onnx.checker.check_model(folded, full_check=True)
    for want, got in zip(run(model, feeds), run(folded, feeds), strict=True):
        assert want.dtype == got.dtype and want.shape == got.shape
        np.testing.assert_array_equal(got, want)
    return folded, outcome.passes[0]


# ---- Shape/Size of a constant that has no recorded shape (a Constant node's or a chain's output) ----

SHAPE_OF_CONSTANT = """
<ir_version: 8, opset_import: ["" : 18, "local" : 1]>
main () => (float[2, 3] s, float[3] f)
{
    data = Constant <value = float[2, 3] {0, 0, 0, 0, 0, 0}> ()
    idx = Constant <value = int64[2, 2] {2, 0, 1, -1}> ()
    shape = Shape (idx)
    seven = Constant <value_float = 7.5> ()
    upd = Expand (seven, shape)
    s = ScatterElements <axis = 1> (data, idx, upd)
    f = local.F ()
}
<domain: "local", opset_import: ["" : 18]>
F () => (s)
{
    data = Constant <value = float[3] {1, 1, 1}> ()
    idx = Constant <value_ints = [1, 0]> ()
    two = Constant <value_ints = [2]> ()
    both = Concat <axis = 0> (idx, two)
    sh = Shape (both)
    idx2 = Reshape (both, sh)
    count = Size (idx2)
    zero = Constant <value_ints = [0]> ()
    end = Unsqueeze (count, zero)
    one = Constant <value_ints = [1]> ()
    idx3 = Slice (idx2, one, end)
    n = Shape <start = 0> (idx3)
    upd = ConstantOfShape <value = float[1] {9}> (n)
    s = ScatterElements <axis = 0> (data, idx3, upd)
}
"""


def test_shape_and_size_of_a_constant_without_a_recorded_shape_are_constant():
    """Shape(Constant) and Size/Shape of a chain over Constants (in a function nothing records shapes)
    were reported 'Shape of a dynamic shape' and left unfolded."""
    folded, report = fold_and_compare(parse(SHAPE_OF_CONSTANT))
    assert report["skipped"] == [] and len(report["rewritten"]) == 2
    assert scatters_left(folded) == []
    assert not any(n.op_type in ("Shape", "Size") for n in folded.graph.node)
    assert not any(n.op_type in ("Shape", "Size") for n in folded.functions[0].node)


def test_shape_of_a_dynamic_input_still_is_not_constant():
    model = parse("""
        <ir_version: 8, opset_import: ["" : 18]>
        main (float[N] x) => (float[4] s)
        {
            data = Constant <value = float[4] {0, 0, 0, 0}> ()
            n = Shape (x)
            idx = ConstantOfShape <value = int64[1] {1}> (n)
            upd = ConstantOfShape <value = float[1] {2}> (n)
            s = ScatterElements <reduction = "add"> (data, idx, upd)
        }""")
    folded, outcome = sr.fold(model, return_report=True)
    (skip,) = outcome.passes[0]["skipped"]
    assert "Shape of a dynamic shape" in skip["detail"] and len(scatters_left(folded)) == 1


# ---- string reductions whose data and updates come as bytes (tensors) and str (value_strings) ----

STRING_REDUCTIONS = """
<ir_version: 8, opset_import: ["" : 18, "local" : 1]>
main () => (string[3] added, string[3] biggest, string[2, 2] f)
<string[3] data = {"a", "b", "c"}>
{
    idx = Constant <value_ints = [1, 1, 0]> ()
    upd = Constant <value_strings = ["x", "y", "z"]> ()
    added = ScatterElements <reduction = "add"> (data, idx, upd)
    nd_idx = Constant <value = int64[2, 1] {2, 2}> ()
    nd_upd = Constant <value_strings = ["bb", "a"]> ()
    biggest = ScatterND <reduction = "max"> (data, nd_idx, nd_upd)
    f = local.F ()
}
<domain: "local", opset_import: ["" : 18]>
F () => (s)
{
    data = Constant <value = string[2, 2] {"k", "é", "m", "n"}> ()
    idx = Constant <value = int64[1, 2] {1, 0}> ()
    upd1 = Constant <value_strings = ["é", "q"]> ()
    shape = Constant <value_ints = [1, 2]> ()
    upd = Reshape (upd1, shape)
    s = ScatterElements <axis = 0, reduction = "min"> (data, idx, upd)
}
"""


def test_string_reduction_on_data_mixing_bytes_and_str_folds():
    """data = Concat(value_strings Constant, string tensor) held str and bytes at once: the add
    crashed (TypeError: can only concatenate str (not "bytes") to str) after the first fix."""
    model = parse("""
        <ir_version: 8, opset_import: ["" : 18]>
        main () => (string[4] s)
        <string[2] tail = {"c", "d"}, string[2] upd = {"!", "?"}>
        {
            head = Constant <value_strings = ["a", "b"]> ()
            data = Concat <axis = 0> (head, tail)
            idx = Constant <value = int64[2, 1] {0, 3}> ()
            s = ScatterND <reduction = "add"> (data, idx, upd)
        }""")
    folded, report = sr.fold(model, return_report=True)
    assert len(report.passes[0]["rewritten"]) == 1
    assert run(folded)[0].tolist() == ["a!", "b", "c", "d?"]


def test_string_reductions_of_bytes_data_and_str_updates_fold():
    """A string add/max/min whose data is a tensor (bytes) and updates a value_strings Constant (str)
    crashed fold with TypeError (can't concat str to bytes). onnxruntime has no string reductions;
    the values are those of onnx.reference's definition (concatenation, lexicographic order)."""
    folded, report = sr.fold(parse(STRING_REDUCTIONS), return_report=True)
    onnx.checker.check_model(folded, full_check=True)
    assert len(report.passes[0]["rewritten"]) == 3 and scatters_left(folded) == []
    added, biggest, f = run(folded)
    assert added.tolist() == ["az", "bxy", "c"]
    assert biggest.tolist() == ["a", "b", "c"]  # max("c", "bb", "a") is "c"
    assert f.tolist() == [["k", "q"], ["m", "n"]]  # min("m", "é") = "m", min("é", "q") = "q" (UTF-8 order)


def test_string_chains_evaluate():
    """Where over string constants of different widths and Expand of a string constant failed in
    onnx.reference (fixed-width np.bytes_ arrays): the scatters were left 'cannot evaluate'."""
    model = parse("""
        <ir_version: 8, opset_import: ["" : 16]>
        main () => (string[2, 3] s)
        <string[2, 3] data = {"a", "bb", "c", "d", "e", "f"}, string[1, 2] wide = {"long", "longer"}>
        {
            short = Constant <value = string[1, 2] {"x", "y"}> ()
            mask = Constant <value = bool[1, 2] {1, 0}> ()
            picked = Where (mask, short, wide)
            one = Constant <value = string[1, 1] {"z"}> ()
            shape = Constant <value_ints = [1, 2]> ()
            zz = Expand (one, shape)
            upd = Concat <axis = 0> (picked, zz)
            idx = Constant <value = int64[2, 2] {2, 0, 1, 1}> ()
            s = ScatterElements <axis = 1> (data, idx, upd)
        }""")
    folded, report = fold_and_compare(model)
    assert report["skipped"] == [] and scatters_left(folded) == []
    (s,) = run(folded)
    assert s.tolist() == [["longer", "bb", "x"], ["d", "z", "f"]]


# ---- casts between numbers and strings: implementation-defined text, never baked in -------------

def test_a_cast_between_numbers_and_strings_is_not_evaluated():
    """Cast(float/bool -> string) was evaluated by onnx.reference ('-0.0', 'True', 'nan',
    '0.3333333333333333') where onnxruntime writes '-0', '1', 'NaN', '0.33333333': the folded
    model computed other strings than the original. The spec leaves the text to the runtime."""
    model = parse("""
        <ir_version: 8, opset_import: ["" : 18]>
        main () => (string[5] s, string[2] b)
        <string[5] data = {"a", "b", "c", "d", "e"}, string[2] small = {"p", "q"}>
        {
            f = Constant <value = double[4] {0.1, -0.0, 1e10, 0.3333333333333333}> ()
            n = Constant <value_float = nan> ()
            one = Constant <value_ints = [1]> ()
            n1 = Reshape (n, one)
            nd = Cast <to = 11> (n1)
            fs = Concat <axis = 0> (f, nd)
            upd = Cast <to = 8> (fs)
            idx = Constant <value = int64[5] {0, 1, 2, 3, 4}> ()
            s = ScatterElements (data, idx, upd)
            t = Constant <value = bool[2] {1, 0}> ()
            bupd = CastLike (t, small)
            bidx = Constant <value = int64[2] {1, 0}> ()
            b = ScatterElements (small, bidx, bupd)
        }""")
    folded, report = fold_and_compare(model)  # bit for bit with onnxruntime: left alone
    assert report["rewritten"] == [] and len(report["skipped"]) == 2
    assert all("between strings and numbers" in s["detail"] for s in report["skipped"])


# ---- a subgraph initializer named like an outer value ---------------------------------------------

def _shadowing_model() -> onnx.ModelProto:
    """The else branch holds its own initializer 'w', also the name of a main-graph initializer that
    the then branch reads. onnx_ir reads the branch's own; onnx.reference (and here onnxruntime) the
    outer one."""
    return parse("""
        <ir_version: 8, opset_import: ["" : 16]>
        main (bool c) => (float[3] r)
        <float[3] w = {1, 2, 3}, int64[1] i = {0}, float[1] u = {9}>
        {
            r = If (c) <
                then_branch = then () => (float[3] t) {
                    t = ScatterElements (w, i, u)
                },
                else_branch = else () => (float[3] e) <float[3] w = {7, 7, 7}> {
                    e = ScatterElements (w, i, u)
                }>
        }""")


def test_a_subgraph_initializer_shadowing_an_outer_name_is_not_constant():
    """fold baked the branch's own 'w' into the result ([9, 7, 7]) where onnxruntime computes
    [9, 2, 3] from the outer 'w'; folding the then branch alone (the outer 'w' then unused) makes
    onnxruntime read the inner one instead: both are left."""
    model = _shadowing_model()
    for c in (False, True):
        folded, report = fold_and_compare(model, {"c": np.array(c)})
        assert report["rewritten"] == [] and len(report["skipped"]) == 2
        assert all("'w' is the name of a subgraph initializer and of a value of an enclosing graph"
                   in s["detail"] for s in report["skipped"])


# ---- validation through onnx.reference of a Loop with scan outputs --------------------------------

LOOP_F16_ADD = """
<ir_version: 8, opset_import: ["" : 18]>
main (float16[3] x) => (float16[2, 3] stacked, float16[3] last)
<int64 trips = {2}, float[3] data32 = {1, 2, 3}, int64[4] idx = {0, 2, 2, -1}, float[4] upd32 = {0.5, 0.25, 0.25, 4}>
{
    last, stacked = Loop (trips, , x) <body = body (int64 i, bool c, float16[3] carried) => (bool c_out, float16[3] next, float16[3] s) {
        c_out = Identity (c)
        data = Cast <to = 10> (data32)
        upd = Cast <to = 10> (upd32)
        s = ScatterElements <reduction = "add"> (data, idx, upd)
        next = Add (carried, s)
    }>
}
"""


def test_fold_validates_a_loop_whose_original_needs_the_reference():
    """onnxruntime has no float16 add scatter, so validation runs the original with onnx.reference,
    whose Loop concatenated the scan outputs ([2, 3] came out [6]) and ran no iteration when the
    condition input is omitted: 'validation failed' on a correct fold."""
    model = parse(LOOP_F16_ADD)
    folded, outcome = sr.fold(model, validate=True, return_report=True)
    assert scatters_left(folded) == [] and "onnx.reference" in outcome.validation["checked_against"]
    x = np.array([1, 1, 1], np.float16)
    stacked, last = run(folded, {"x": x})
    s = np.array([1.5, 2, 7.5], np.float16)  # 3 + 0.25 + 0.25 + 4 in float32, rounded once
    np.testing.assert_array_equal(stacked, np.stack([s, s]))
    np.testing.assert_array_equal(last, x + s + s)


def test_fold_validates_a_tensor_scatter_whose_update_shape_inference_cannot_follow():
    """Validation drew a dynamic write_indices at random (14 here) when ONNX shape inference could
    not give the update's shape (a Reshape to a Where of constants): onnxruntime refused the original
    and fold failed with 'cannot evaluate the original model'. Unknown bounds now mean zeros."""
    model = parse("""
        <ir_version: 10, opset_import: ["" : 24]>
        main (int64[2] w) => (float[2, 3, 1] y, float[3] s)
        <float[2, 3, 1] cache = {1, 2, 3, 4, 5, 6}, float[2] u = {7, 8}, bool[3] m = {1, 0, 1},
         int64[3] a = {2, 9, 1}, int64[3] b = {0, 1, 0}, float[3] data = {0, 0, 0}, int64[1] i = {1}, float[1] v = {5}>
        {
            shape = Where (m, a, b)
            update = Reshape (u, shape)
            y = TensorScatter <axis = 1> (cache, update, w)
            s = ScatterElements (data, i, v)
        }""")
    folded, outcome = sr.fold(model, validate=True, return_report=True)
    assert len(outcome.passes[0]["rewritten"]) == 1 and outcome.validation is not None


def test_evaluator_string_kernels_take_any_mix_of_bytes_and_str():
    from scatter_rewrite.evaluator import scatter_elements, scatter_nd, tensor_scatter

    data = np.array([b"a", "b", b"c"], dtype=object)
    got = scatter_nd(data, np.array([[1], [0], [1]]), np.array(["x", b"y", "z"], dtype=object), reduction="add")
    assert got.tolist() == [b"ay", b"bxz", b"c"]
    got = scatter_elements(np.array(["m", "é"]), np.array([1, 0]), np.array(["q".encode(), "é".encode()], dtype=object),
                           reduction="max")
    assert got.tolist() == ["é", "é"] and got.dtype.kind == "U"
    got = tensor_scatter(np.array([["a", "b"]]), np.array([["é".encode()]], dtype=object), np.array([1]), axis=1)
    assert got.tolist() == [["a", "é"]]


# ---- Unsqueeze with several negative axes (attribute form, opset < 13) ---------------------------

def test_unsqueeze_and_squeeze_with_several_negative_axes_evaluate():
    """onnx.reference's Unsqueeze-1/11 (Squeeze-1/11) inserts (removes) the axes one at a time, so
    axes = [-3, -1] on a 1-D tensor failed ('axis -3 is out of bounds for array of dimension 1'),
    as did Squeeze axes = [4, -5] on 5-D, and the scatter was left."""
    model = parse("""
        <ir_version: 8, opset_import: ["" : 11]>
        main () => (float[1, 3, 2] s)
        <float[1, 3, 2] data = {0, 0, 0, 0, 0, 0}, int64[2] flat = {2, 0}, float[1, 1, 2, 1, 1] upd5 = {5, 6}>
        {
            idx = Unsqueeze <axes = [-3, -1]> (flat)
            upd = Squeeze <axes = [4, -5]> (upd5)
            s = ScatterElements <axis = 1> (data, idx, upd)
        }""")
    folded, report = fold_and_compare(model)
    assert report["skipped"] == [] and scatters_left(folded) == []


def test_unsqueeze_of_mixed_axes_has_the_right_shape_in_fold_and_validation():
    """axes = [-2, 2] on shape (2,): onnx.reference's Unsqueeze-11 gave (1, 2, 1), so fold refused a
    valid model ('updates shape (1, 2, 1) differs from indices shape (2, 1, 1)'); validation's
    reference run of the original had the same wrong shape."""
    from scatter_rewrite.evaluator.reference_ops import make_evaluator

    model = parse("""
        <ir_version: 8, opset_import: ["" : 11]>
        main () => (int32[4, 1, 1] s)
        <int32[4, 1, 1] data = {1, 2, 3, 4}, int64[2, 1, 1] idx = {2, 0}, int32[2] flat = {7, 9}>
        {
            upd = Unsqueeze <axes = [-2, 2]> (flat)
            s = ScatterElements (data, idx, upd)
        }""")
    folded, report = fold_and_compare(model)
    assert report["skipped"] == [] and run(folded)[0].ravel().tolist() == [9, 2, 7, 4]
    assert make_evaluator(model).run(None, {})[0].ravel().tolist() == [9, 2, 7, 4]


def test_validation_compares_strings_whatever_their_numpy_form():
    """When onnxruntime cannot run the original (a string min), the reference's string outputs come
    as np.str_ arrays and onnxruntime's as object arrays: validation said 'expected <U2[2], got
    object[2]' and fold wrote nothing."""
    model = parse("""
        <ir_version: 8, opset_import: ["" : 18]>
        main () => (string[3] s, string[2] t)
        <string[3] data = {"a", "b", "c"}>
        {
            idx = Constant <value_ints = [2, 2]> ()
            upd = Constant <value_strings = ["bb", "a"]> ()
            s = ScatterElements <reduction = "min"> (data, idx, upd)
            t = Identity (upd)
        }""")
    folded, outcome = sr.fold(model, validate=True, return_report=True)
    assert "onnx.reference" in outcome.validation["checked_against"]
    assert run(folded)[0].tolist() == ["a", "b", "a"]


def test_an_empty_string_result_feeds_the_next_fold():
    """A folded zero-size string result was an ir.StringTensor over an empty list, whose numpy() is
    float64: the next scatter reading it through an Unsqueeze failed 'updates dtype object differs from
    data dtype float64; fix the model' on a valid model."""
    model = parse("""
        <ir_version: 8, opset_import: ["" : 13]>
        main () => (string[1, 3, 0] s2)
        <string[3, 0] data = {}, int64[1, 0] i = {}, string[1, 0] u = {}, int64[1] zero = {0},
         int64[1, 3, 0] i2 = {}, string[1, 3, 0] u2 = {}>
        {
            s1 = ScatterElements (data, i, u)
            r = Unsqueeze (s1, zero)
            s2 = ScatterElements <axis = 1> (r, i2, u2)
        }""")
    folded, report = fold_and_compare(model)
    assert len(report["rewritten"]) == 2 and scatters_left(folded) == []


def test_validation_reference_run_keeps_string_widths_in_where():
    """onnx.reference's Where casts its result to x's dtype, which cuts strings to x's width:
    Where(false, ['é'], ['Zz']) came out 'Z' when onnxruntime (no string max) left the original to
    the reference, and validation refused the right fold."""
    model = parse("""
        <ir_version: 8, opset_import: ["" : 18]>
        main () => (string[2] s, string[2] m)
        <string[2] data = {"a", "b"}, bool[1] c = {0}, int64[1] i = {1}>
        {
            x = Constant <value_strings = ["é"]> ()
            y = Constant <value_strings = ["Zz"]> ()
            u = Where (c, x, y)
            s = ScatterElements (data, i, u)
            m = ScatterElements <reduction = "max"> (data, i, u)
        }""")
    folded, outcome = sr.fold(model, validate=True, return_report=True)
    assert "onnx.reference" in outcome.validation["checked_against"]
    assert [a.tolist() for a in run(folded)] == [["a", "Zz"], ["a", "b"]]


# ---- a bounded seed list of the randomized generator (the campaign: python -m tests.helpers.fold_fuzz) ---

def test_generator_seed_list_folds_right():
    """40 generated models (main graph, If/Loop/Scan bodies, functions; constants, defaults, dynamic
    shapes, attribute references, bad indices, external data, size limits): fold is checked against
    onnxruntime/onnx.reference, the checker, idempotence and its report (see tests/helpers/fold_fuzz.py: check_case)."""
    from tests.helpers.fold_fuzz import check_case, generate

    kinds = set()
    for seed in range(300000, 300040):
        case = generate(seed)
        findings, stats = check_case(case)
        assert findings == [], (seed, findings)
        kinds.update(f for f in case.features if f.startswith(("container:", "dyn:")))
        kinds.update({"error"} & set(stats) | ({"external"} if case.external else set()))
    assert {"container:if", "container:loop", "container:scan", "container:function", "error", "external"} <= kinds


def test_validation_reference_run_of_a_string_tensor_scatter_keeps_widths():
    """onnx.reference's TensorScatter wrote 'Zz' into a '<U1' cache as 'Z': validation through the
    reference (onnxruntime has no string max here) refused the right fold."""
    model = parse("""
        <ir_version: 10, opset_import: ["" : 24]>
        main () => (string[1, 2] s, string[2] m)
        <string[2] data = {"a", "b"}, int64[1] i = {1}, int64[1] w = {1}>
        {
            c = Constant <value_strings = ["q", "r"]> ()
            one_two = Constant <value_ints = [1, 2]> ()
            cache = Reshape (c, one_two)
            u = Constant <value_strings = ["Zz"]> ()
            one_one = Constant <value_ints = [1, 1]> ()
            update = Reshape (u, one_one)
            s = TensorScatter <axis = 1> (cache, update, w)
            m = ScatterElements <reduction = "max"> (data, i, u)
        }""")
    folded, outcome = sr.fold(model, validate=True, return_report=True)
    assert "onnx.reference" in outcome.validation["checked_against"]
    assert [a.tolist() for a in run(folded)] == [[["q", "Zz"]], ["a", "b"]]
