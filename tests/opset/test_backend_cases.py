"""ONNX's backend node test cases moved down to opsets 11, 13 and 17 and run in onnxruntime
(tests/helpers/backend_cases.py): no wrong result, every refusal naming the op, the step and
why.
The default run takes a sample of cases that exercise each kind of step; the full sweep is slow."""

from __future__ import annotations

import re

import pytest

from tests.helpers import backend_cases
from tests.helpers.cli import invoke

# Cases each exercising a declared step: a rewrite, a condition, a function body, a refusal.
SAMPLE = {
    "test_reshape_allowzero_reordered",
    "test_reshape_reordered_all_dims",
    "test_shape_start_1",
    "test_shape_end_1",
    "test_shape_start_negative_1",
    "test_tril",
    "test_triu_one_row",
    "test_tril_neg",
    "test_triu_zero",
    "test_mod_mixed_sign_float32",
    "test_mod_float_edge_cases_fmod_0_float32",
    "test_mod_float64_mixed_sign_fmod_0",
    "test_averagepool_2d_dilations",
    "test_averagepool_2d_default",
    "test_gridsample_bilinear",
    "test_gridsample_nearest",
    "test_reduce_mean_keepdims_example",
    "test_reduce_sum_empty_axes_input_noop",
    "test_softmax_axis_0",
    "test_layer_normalization_2d_axis0",
    "test_gelu_default_1",
    "test_split_equal_parts_1d_opset18",
    "test_bitwise_and_i32_2d",
    "test_string_concat",
    "test_affine_grid_2d",
    "test_spacetodepth_crd_mode_example",
}
MIN_CORRECT = {11: 0.70, 13: 0.78, 17: 0.85}  # of the cases onnxruntime runs before the move
_REFUSAL = re.compile(r"^cannot (convert|move) .+ to opset \d+: .{10,}")


def _check(judged: list[backend_cases.Judged]) -> None:
    wrong = [f"{j.case} at {j.target}: {j.why}" for j in judged if j.ours == "wrong"]
    assert not wrong, "\n".join(wrong)
    vague = [j.why for j in judged if j.ours == "refused" and not _REFUSAL.match(j.why)]
    assert not vague, "\n".join(vague)


@pytest.mark.parametrize("target", backend_cases.TARGETS)
def test_a_sample_of_backend_cases_moves_exactly_or_is_refused(target):
    judged = backend_cases.sweep(target, SAMPLE)
    assert judged, "no sample case above the target"
    _check(judged)
    correct = {j.case for j in judged if j.ours == "correct"}
    # The exact forms: Shape start/end, Trilu, Mod fmod=0 on floats, GridSample below 16.
    assert {
        "test_gridsample_bilinear",
        "test_gridsample_nearest",
        "test_shape_start_1",
        "test_shape_end_1",
        "test_tril",
        "test_triu_zero",
        "test_mod_float64_mixed_sign_fmod_0",
    } & {j.case for j in judged} <= correct
    refused = {j.case: j.why for j in judged if j.ours == "refused"}
    # Its shape [3, 4, 0] is a graph input: a 0 that Reshape-13 would copy from the input.
    assert (
        "allowzero=1, its shape 'shape' is a graph input, known only at run time, and may hold a 0"
        in refused.get(
            "test_reshape_allowzero_reordered",
            "allowzero=1, its shape 'shape' is a graph input, known only at run time, "
            "and may hold a 0",
        )
    )
    if "test_bitwise_and_i32_2d" in refused:
        assert (
            "BitwiseAnd-18 (no older version): no older op works on the bits"
            in refused["test_bitwise_and_i32_2d"]
        )
    if "test_averagepool_2d_dilations" in refused:
        assert (
            "AveragePool-19 -> AveragePool-11: its dilations [2, 2] are not all 1"
            in refused["test_averagepool_2d_dilations"]
        )


@pytest.mark.slow
@pytest.mark.parametrize("target", backend_cases.TARGETS)
def test_every_backend_case_above_the_target(target):
    judged = backend_cases.sweep(target)
    _check(judged)
    counts = backend_cases.counts(judged)
    assert counts["ours"]["correct"] >= MIN_CORRECT[target] * len(judged), counts
    assert counts["ours"]["correct"] > counts["converter"]["correct"], counts


def test_a_move_whose_result_fails_the_checker_is_refused_before_anything_is_written(tmp_path):
    """MaxPool-22's ceil_mode output size differs from older versions' inference on this case:
    the moved model fails onnx.checker, so the move is an error naming the node and the step,
    from the API with validate=False and from the command line (no output file)."""
    import onnx

    import scatter_rewrite as sr
    from scatter_rewrite.errors import ConversionError

    name = "test_maxpool_2d_ceil_output_size_reduce_by_one"
    [case] = [c for c in backend_cases.node_cases() if c.name == name]
    why = (r"^cannot convert MaxPool .* to opset 17: the step MaxPool-22 -> opset 17 gives a model "
           r"that fails onnx.checker")
    with pytest.raises(ConversionError, match=why):
        sr.lower(case.model, opset=17, validate=False)
    source, out = tmp_path / "maxpool.onnx", tmp_path / "maxpool.lowered.onnx"
    onnx.save(case.model, source)
    args = ["lower", str(source), "--opset", "17", "--no-validate", "-o", str(out)]
    result = invoke(*args)
    assert result.exit_code == 1 and "MaxPool-22 -> opset 17" in result.output and not out.exists()


def test_the_moves_own_check_loads_the_moved_model_in_onnxruntime_as_a_user_does(monkeypatch):
    """The session the move creates to check its result has onnxruntime's default options (graph
    optimizations on), as a user's has: a model only an optimizer rejects is caught there too."""
    import onnx.helper as oh
    import onnx_ir as ir
    import onnxruntime as ort
    from onnx import TensorProto

    from scatter_rewrite.opset import convert_opset

    levels = []
    session = ort.InferenceSession

    def recording(model, options=None, *args, **kwargs):
        levels.append(options.graph_optimization_level)
        return session(model, options, *args, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", recording)
    x = oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    graph = oh.make_graph([oh.make_node("Softmax", ["x"], ["y"], axis=0)], "g", [x],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 11)])
    convert_opset(ir.serde.deserialize_model(model), 13)
    assert levels and set(levels) == {ort.SessionOptions().graph_optimization_level}
