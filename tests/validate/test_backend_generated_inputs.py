"""ONNX's backend node cases moved down with the API's default, validation on generated inputs
(tests/helpers/backend_cases.py judges the results): the original runs on the inputs generated for
it, so that a right rewrite is proven rather than refused. At most 2% of the cases are refused that
the unvalidated rewrite gets right; none is wrong either way. The default run takes a sample of
cases whose axis, shape, class-index, pads or divisor inputs random values would not fit."""

from __future__ import annotations

import warnings

import pytest

from tests.helpers import backend_cases

SAMPLE = {
    "test_cumsum_2d_axis_0", "test_squeeze", "test_squeeze_negative_axes",
    "test_unsqueeze_three_axes", "test_unsqueeze_negative_axes", "test_reduce_l1_keep_dims_random",
    "test_reduce_max_negative_axes_keepdims_example", "test_reduce_log_sum_empty_set",
    "test_reshape_reordered_all_dims", "test_reshape_negative_extended_dims", "test_nllloss_NC",
    "test_nllloss_NCd1d2_with_weight_reduction_sum", "test_sce_mean_3d", "test_edge_pad",
    "test_reflect_pad",
}
MAX_REFUSED = 0.02  # of the cases onnxruntime runs before the move


def validated(case, target: int) -> tuple[str, str]:
    """("correct" | "wrong" | "refused", why) for ``case`` moved by ``lower`` with validation."""
    import scatter_rewrite
    from scatter_rewrite.errors import ScatterRewriteError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            moved = scatter_rewrite.lower(case.model, opset=target)
    except ScatterRewriteError as e:
        return "refused", str(e)
    except Exception as e:  # a crash is a bug: counted as wrong
        return "wrong", f"crash: {type(e).__name__}: {e}"
    return backend_cases.judge_model(moved, case)


def refused_though_right(cases: list, target: int) -> tuple[list[str], list[str]]:
    """(the cases validation refuses that the unvalidated move gets right, the wrong ones)."""
    refused, wrong = [], []
    for case in cases:
        ours, why = validated(case, target)
        if ours == "wrong":
            wrong.append(f"{case.name}: {why}")
        elif ours == "refused" and backend_cases.judge_case(case, target).ours == "correct":
            refused.append(f"{case.name}: {why[:300]}")
    return refused, wrong


@pytest.mark.parametrize("target", [13])
def test_a_sample_whose_arguments_are_inputs_is_proven(target):
    cases = backend_cases.cases_above(target, SAMPLE)
    assert len(cases) >= 10
    refused, wrong = refused_though_right(cases, target)
    assert not wrong and not refused, "\n".join(wrong + refused)


@pytest.mark.slow
@pytest.mark.parametrize("target", backend_cases.TARGETS)
def test_every_backend_case_is_proven_on_generated_inputs(target):
    cases = backend_cases.cases_above(target)
    refused, wrong = refused_though_right(cases, target)
    assert not wrong, "\n".join(wrong)
    assert len(refused) <= MAX_REFUSED * len(cases), "\n".join(refused)
