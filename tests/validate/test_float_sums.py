"""Float sums a rewrite reorders are judged by the arithmetic: against a float64 evaluation of the
original, within what the original's own rounding allows. A rewrite more accurate than the original
passes; one that drops, doubles or misplaces a term among thousands is caught; ``--rtol/--atol``
set the user's own bound; a failure says what was compared and the ways out.

Every assertion here holds on any CPU: the sums judged directly are computed term by term in
float32 (IEEE, one rounding per addition), and the models' verdicts rest on errors (a term of
magnitude >= 0.5) far beyond any engine's rounding."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto

import scatter_rewrite as sr
from scatter_rewrite.passes.upgrade import upgrade_steps
from scatter_rewrite.pipeline import VERBS
from scatter_rewrite.validate import comparison
from scatter_rewrite.validate.comparison import compare, judge_rounding

from tests.helpers.models import gnn_sum
from tests.helpers.wrong_passes import DoubleOneTerm, DropOneTerm, OneTermToTheNextSlot
from tests.helpers.models import integer_scatter
from tests.helpers.cli import invoke

REPAIR_DATA = Path(__file__).parents[1] / "data" / "torch_repair"

N, F = 10, 4  # the GNN's nodes and features: data [N, F]


def sequential_sum(terms: np.ndarray) -> np.float32:
    """Term by term in float32, as onnxruntime's ScatterElements add sums one slot."""
    total = np.float32(0)
    for t in terms:
        total = np.float32(total + t)
    return total


def cancelling_terms(n: int = 4000) -> np.ndarray:
    """Large terms that cancel: partial sums reach ~1e5 while the result is small, so the
    sequential float32 sum is off by far more than rtol=1e-5 of the result."""
    rng = np.random.default_rng(5)
    big = np.concatenate([np.full(n // 2, 100.0), np.full(n // 2, -100.0)])
    return (big + rng.uniform(-1, 1, n)).astype(np.float32)


def judged(rewritten: list[float], terms_per_slot: list[np.ndarray]):
    original = np.array([sequential_sum(t) for t in terms_per_slot], np.float32)
    exact = np.array([math.fsum(map(float, t)) for t in terms_per_slot])
    magnitude = np.array([math.fsum(abs(float(x)) for x in t) for t in terms_per_slot])
    rewritten = np.array(rewritten, np.float32)
    return original, judge_rounding("y", original, rewritten, exact, magnitude)


def test_a_sum_more_accurate_than_the_original_passes_though_beyond_the_fixed_tolerance():
    terms = cancelling_terms()
    exact = math.fsum(map(float, terms))
    original, (failure, said) = judged([exact], [terms])
    assert abs(float(original[0]) - exact) > 1e-3  # the original's own rounding
    [fixed] = compare(["y"], [original], [np.array([exact], np.float32)], float_tolerance=True)[1]
    assert "exceeds rtol=1e-05" in fixed
    assert failure is None and said.startswith("the rewritten model off by up to")


def test_a_sum_in_another_order_passes():
    terms = cancelling_terms()
    _, (failure, _) = judged([sequential_sum(terms[::-1])], [terms])
    assert failure is None


@pytest.mark.parametrize("wrong", ["dropped", "doubled", "wrong slot"])
def test_a_wrong_term_inside_a_large_sum_is_caught(wrong):
    terms = [cancelling_terms(), cancelling_terms()[::-1].copy()]
    right = [math.fsum(map(float, t)) for t in terms]
    first = float(terms[0][0])
    rewritten = {"dropped": [right[0] - first, right[1]], "doubled": [right[0] + first, right[1]],
                 "wrong slot": [right[0] - first, right[1] + first]}[wrong]
    _, (failure, _) = judged(rewritten, terms)
    assert failure is not None and failure.startswith("output 'y' at [")
    assert "beyond what the original's own rounding allows" in failure


def test_nan_and_infinity_must_match_the_original():
    original = np.array([np.nan, np.inf, 1.0], np.float32)
    exact = original.astype(np.float64)
    assert judge_rounding("y", original, original.copy(), exact, np.abs(exact))[0] is None
    for other in ([0.0, np.inf, 1.0], [np.nan, -np.inf, 1.0], [np.nan, np.inf, np.nan]):
        failure, _ = judge_rounding("y", original, np.array(other, np.float32), exact, exact)
        assert "NaN or infinity" in failure


# ---- on models: a GNN's scatter sum lowered for TensorRT 8.6 ------------------------------------

# 3,000 terms per slot: onnxruntime's sequential sum and the lowering's differ by more than
# rtol=1e-5 on an AMD EPYC machine (the smallest E of the 10-node GNN sum that does, by 10k).
EDGES = 30_000


def edge_inputs(edges: int = EDGES) -> dict[str, np.ndarray]:
    """Every update of magnitude 0.5-1.5 (either sign), so a wrong term is never a small one; the
    first index is slot 0, so that moving it to the next slot stays in range."""
    rng = np.random.default_rng(11)
    u = (rng.uniform(0.5, 1.5, (edges, F)) * rng.choice([-1, 1], (edges, F))).astype(np.float32)
    i = rng.integers(0, N, (edges, F))
    i[0, 0] = 0
    return {"d": rng.standard_normal((N, F)).astype(np.float32), "i": i, "u": u}


def tensorrt_passes():
    return VERBS["tensorrt"].make_passes(trt_version="8.6", fix_dims=None)


def test_the_gnn_sum_lowered_for_tensorrt_validates_with_the_fixed_tolerance_at_zero(monkeypatch):
    """A 10-node GNN sum (users see it at E=200000): the lowering sums each slot in another order
    than onnxruntime's kernel. With the fixed tolerance at zero, any difference goes to the
    judgement."""
    monkeypatch.setitem(comparison.FLOAT_TOLERANCE, np.dtype(np.float32), (0.0, 0.0))
    _, outcome = sr.prepare_for_tensorrt(gnn_sum(EDGES), trt_version="8.6", validate=True,
                                         return_report=True)
    v = outcome.validation
    judged = ("or else judged against a float64 evaluation of the original "
              "('y': the rewritten model off by")
    assert v["max_abs_diff"] == 0.0 or judged in v["tolerance"], v


@pytest.mark.slow
def test_a_gnn_sum_at_200000_edges_validates_from_the_command_line(tmp_path):
    """tensorrt --trt-version 8.6 on a 10-node GNN sum with 20,000 terms per slot, which a fixed
    rtol=1e-5 refused (max |difference| 0.0015) though the rewrite is the more accurate."""
    onnx.save(gnn_sum(), tmp_path / "gnn.onnx")
    result = invoke("tensorrt", tmp_path / "gnn.onnx", "--trt-version", "8.6", "--fix-dim", "E=200000")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "gnn.tensorrt.onnx").exists()


@pytest.mark.parametrize("wrong", [DropOneTerm("u"), DoubleOneTerm("u"), OneTermToTheNextSlot("i")],
                         ids=lambda p: p.name)
def test_a_lowering_that_gets_one_term_of_thousands_wrong_is_caught(wrong):
    with pytest.raises(sr.ValidationError) as caught:
        sr.rewrite(gnn_sum(EDGES), passes=[*tensorrt_passes(), wrong], validate=True,
                   inputs=edge_inputs())
    message = str(caught.value)
    assert message.startswith("validation failed, no model returned: output 'y' at [")
    assert "beyond what the original's own rounding allows" in message
    assert "(checked against: onnxruntime on the original model)" in message
    assert "rtol=/atol=" in message and "validate=False" in message  # (the API's words)
    assert "--" not in message


def test_rtol_and_atol_set_the_users_own_bound():
    model, inputs = gnn_sum(EDGES), edge_inputs()
    with pytest.raises(sr.ValidationError, match=r"exceeds rtol=0.0, atol=0.5"):
        sr.rewrite(model, passes=[DropOneTerm("u")], validate=True, inputs=inputs, atol=0.5)
    _, outcome = sr.rewrite(model, passes=[DropOneTerm("u")], validate=True, inputs=inputs,
                            atol=2.0, return_report=True)
    assert outcome.validation["tolerance"] == ("float outputs within the given rtol=0.0, atol=2.0; "
                                               "everything else exact")
    with pytest.raises(sr.OptionError, match=r"rewrite\(\): rtol=-1.0 is out of range: a tolerance is a finite number >= 0"):
        sr.rewrite(model, passes=[DropOneTerm("u")], validate=True, inputs=inputs, rtol=-1.0)


def test_a_failed_validation_keeps_the_passes_in_the_report(tmp_path, monkeypatch):
    """The report of a failed validation lists every pass that ran, as a passed one does."""
    onnx.save(gnn_sum(), tmp_path / "gnn.onnx")
    np.savez(tmp_path / "x.npz", **edge_inputs(2000))
    right = VERBS["tensorrt"].make_passes
    wrong = dataclasses.replace(VERBS["tensorrt"],
                                make_passes=lambda **o: [*right(**o), DropOneTerm("u")])
    monkeypatch.setitem(VERBS, "tensorrt", wrong)
    report = tmp_path / "r.json"
    result = invoke("tensorrt", tmp_path / "gnn.onnx", "--trt-version", "8.6", "--fix-dim", "E=2000", "--inputs", tmp_path / "x.npz", "--report", report)
    assert result.exit_code == 1
    assert "beyond what the original's own rounding allows" in result.stderr
    [model] = json.loads(report.read_text())["models"]
    assert model["status"] == "FAILED"
    assert [p["pass"] for p in model["passes"]][-1] == "drop-one-term"
    assert not (tmp_path / "gnn.tensorrt.onnx").exists()


# ---- every deliberately wrong pass is caught ----------------------------------------------------

def legacy_scatter() -> onnx.ModelProto:
    """The deprecated Scatter at opset 13 (onnxruntime rejects it), an Add after it (what
    Unregistered breaks)."""
    nodes = [oh.make_node("Scatter", ["d", "i", "u"], ["s"], axis=0),
             oh.make_node("Add", ["s", "s"], ["y"])]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("d", TensorProto.FLOAT, [N, F]),
                                       oh.make_tensor_value_info("i", TensorProto.INT64, [3, F]),
                                       oh.make_tensor_value_info("u", TensorProto.FLOAT, [3, F])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [N, F])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)], ir_version=7)


def test_every_wrong_pass_is_caught():
    """Each pass in tests/helpers/wrong_passes.py, on a model it breaks: validation (or onnx.checker) refuses it.
    A wrong pass added there without a case here fails this test."""
    from tests.helpers import wrong_passes
    from scatter_rewrite.passes.base import ScatterPass

    sum_inputs = edge_inputs(3000)
    beyond = (sr.ValidationError, "beyond what the original's own rounding allows")
    not_intended = (r"the repaired model does not compute the intended accumulation \(what PyTorch "
                    r"computed\), no model returned: ")
    cases = {  # name: (model, passes, inputs, (error, message))
        "NegateScatterOutputs": (gnn_sum(3000), [wrong_passes.NegateScatterOutputs()], sum_inputs,
                                 beyond),
        "UpgradeAndRetypeIndices": (legacy_scatter(), [wrong_passes.UpgradeAndRetypeIndices()],
                                    None, (sr.ValidationError, "cannot run the rewritten model")),
        "Unregistered": (legacy_scatter(), [upgrade_steps(), wrong_passes.Unregistered()], None,
                         (sr.InvalidModelError, "fails onnx.checker")),
        "DropOneTerm": (gnn_sum(3000), [DropOneTerm("u")], sum_inputs, beyond),
        "DoubleOneTerm": (gnn_sum(3000), [DoubleOneTerm("u")], sum_inputs, beyond),
        "OneTermToTheNextSlot": (gnn_sum(3000), [OneTermToTheNextSlot("i")], sum_inputs, beyond),
        "OneSymbolicDimForAll": (wrong_passes.two_row_counts_model(), [wrong_passes.OneSymbolicDimForAll()],
                                 {"x": np.ones((51, 4), np.float32), "y": np.ones((33, 4), np.float32)},
                                 (sr.ValidationError, "cannot run the rewritten model, though it runs the original")),
        "MoveOffByOneRounding": (wrong_passes.product_chain_model(), [wrong_passes.MoveOffByOneRounding(13)],
                                 None, beyond),
        # (the real exports test_repair_real_exports.py proves them wrong on, by their own proof)
        "IntegerSumThroughFloat64": (integer_scatter("add"), [wrong_passes.IntegerSumThroughFloat64()],
                                     None, (sr.ValidationError, "not bit-exact")),
        "RepairIntoMax": (onnx.load(REPAIR_DATA / "bev_index_put_ts16.onnx"), [wrong_passes.RepairIntoMax()],
                          None, (sr.ValidationError, not_intended + r"output 'y': max \|difference\| .* exceeds")),
        "RepairOffByOne": (onnx.load(REPAIR_DATA / "moe_router_ts13.onnx"), [wrong_passes.RepairOffByOne()],
                           None, (sr.ValidationError, not_intended + r"output 'counts': not bit-exact")),
    }
    wrong = {name for name, c in vars(wrong_passes).items()
             if isinstance(c, type) and issubclass(c, ScatterPass)
             and c.__module__ == wrong_passes.__name__ and not name.startswith("_")}
    assert wrong == set(cases)
    for name, (model, passes, inputs, (error, message)) in cases.items():
        with pytest.raises(error, match=message):
            sr.rewrite(model, passes=passes, validate=True, inputs=inputs)


@pytest.mark.parametrize("flag,value", [("--rtol", "-1"), ("--atol", "nan")])
def test_a_bad_bound_is_one_line_before_any_work(tmp_path, flag, value):
    onnx.save(gnn_sum(), tmp_path / "gnn.onnx")
    result = invoke("lower", tmp_path / "gnn.onnx", flag, value)
    assert result.exit_code == 2  # bad usage
    assert result.stderr.strip().splitlines() == [
        f"scatter-rewrite: error: {flag} {float(value)}: a tolerance is a finite number >= 0"]
    assert not (tmp_path / "gnn.lower.onnx").exists()


def test_float16_sums_are_judged_in_float16_units():
    """A float16 sum rounded after each update (as onnxruntime and onnx.reference do) against the
    exact sum rounded once: more accurate, it passes; a term dropped is caught (among 40: in
    float16, one term of 300 is within a few roundings of the sum, what no judgement can tell
    apart)."""
    rng = np.random.default_rng(2)
    terms = rng.uniform(0.5, 1.5, 40).astype(np.float16)
    original = np.float16(0)
    for t in terms:
        original = np.float16(original + t)
    exact = math.fsum(map(float, terms))
    magnitude = np.array([math.fsum(abs(float(x)) for x in terms)])
    args = np.array([original], np.float16), np.array([exact]), magnitude
    assert float(original) != float(np.float16(exact))  # the original's own rounding
    assert judge_rounding("y", args[0], np.array([exact], np.float16), args[1], args[2])[0] is None
    dropped = np.array([exact - float(terms[0])], np.float16)
    assert judge_rounding("y", args[0], dropped, args[1], args[2])[0] is not None


def test_an_op_replaced_by_its_function_body_inside_the_tensorrt_pass_is_compared_as_floats():
    """Lowering a TensorScatter for TensorRT 8.6 moves the model to opset 17 from inside the
    TensorRT pass, replacing Gelu by its function body: the pass reports that (float_rounding) as
    any other does, and validation compares the float output within tolerance, saying why."""
    vi = oh.make_tensor_value_info
    nodes = [oh.make_node("TensorScatter", ["past", "update", "write"], ["s"], axis=1),
             oh.make_node("Gelu", ["s"], ["y"])]
    graph = oh.make_graph(nodes, "g", [vi("past", TensorProto.FLOAT, [2, 8, 4]),
                                       vi("update", TensorProto.FLOAT, [2, 1, 4]),
                                       vi("write", TensorProto.INT64, [2])],
                          [vi("y", TensorProto.FLOAT, [2, 8, 4])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 24)], ir_version=11)
    _, outcome = sr.prepare_for_tensorrt(model, trt_version="8.6", validate=True,
                                         return_report=True)
    assert any("replaced by their ONNX function bodies: Gelu" in n
               for p in outcome.passes if p["pass"] == "lower-tensorscatter" for n in p["notes"])
    v = outcome.validation
    why = "float outputs compared within tolerance: Gelu replaced by its ONNX function body"
    assert why in v["notes"]
    assert v["tolerance"].startswith("float outputs within float32: rtol=1e-05, atol=1e-05")
