"""Every rewriting verb on whole-model exports (tests/data/whole_models, made by its make.py):
transformers and torchvision architectures and scatter-carrying layers, TorchScript and dynamo,
static and dynamic, each with PyTorch's outputs on seeded inputs.

Each verb runs through the Python API with ``validate=False`` and with ``validate=True``, and its
result runs in onnxruntime with default session options, as a user runs it, on the export's
inputs. The result must be runnable and right:

- against onnxruntime on the original: bit for bit where the verb left the model unchanged or
  cannot have changed any float arithmetic (same opset, no op replaced by its function body, no
  float add/mul scatter rewritten); elsewhere validation's float judgement (within
  ``FLOAT_TOLERANCE``, or else no farther from a float64 evaluation of the original than the
  original's own rounding allows: :func:`scatter_rewrite.validate.comparison.judge_rounding`);
  integers always exact;
- against PyTorch: no farther than the original export is (where the export itself computes what
  PyTorch does; where it does not, a TorchScript accumulation that counts a repeated index once,
  ``repair``'s result must give PyTorch's outputs).

A verb may refuse only for a real absence: a ConversionError that names the node or op with no
exact form at the target; it may not stay above its target's opset instead. ``check --target
opset-N`` must say READY or FIXABLE exactly when ``lower --opset N`` succeeds. The default run
takes a small sample; ``-m slow`` sweeps every model and verb.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import scatter_rewrite as sr
from scatter_rewrite.errors import ConversionError, ScatterRewriteError
from scatter_rewrite.pipeline import PASSED, SUCCEEDED
from scatter_rewrite.validate import float64
from scatter_rewrite.validate.comparison import (
    FLOAT_TOLERANCE, compare_outputs, judge_rounding, judgeable,
)
from tests.helpers.models import model_opset
from tests.helpers.exports import load_export

ort.set_default_logger_severity(3)
DATA = Path(__file__).parents[1] / "data" / "whole_models"
MANIFEST = json.loads((DATA / "manifest.json").read_text())  # what make.py made
# (every export in the folder with its .npz: other make scripts' too)
MODELS = sorted(p.stem for p in DATA.glob("*.onnx") if p.with_suffix(".npz").is_file())

# name -> the verb through the Python API: (model, validate) -> (result, Outcome)
VERBS: dict[str, Callable] = {
    "upgrade": lambda m, v: sr.upgrade(m, validate=v, return_report=True),
    "fold": lambda m, v: sr.fold(m, validate=v, return_report=True),
    "lower-13": lambda m, v: sr.lower(m, opset=13, validate=v, return_report=True),
    "lower-11": lambda m, v: sr.lower(m, opset=11, validate=v, return_report=True),
    "lower-17": lambda m, v: sr.lower(m, opset=17, validate=v, return_report=True),
    "tensorrt-8.6": lambda m, v: sr.prepare_for_tensorrt(m, trt_version="8.6", validate=v,
                                                         return_report=True),
    "tensorrt-10": lambda m, v: sr.prepare_for_tensorrt(m, trt_version="10", validate=v,
                                                        return_report=True),
    "to-scatternd": lambda m, v: sr.to_scatternd(m, validate=v, return_report=True),
    "repair": lambda m, v: sr.repair(m, validate=v, return_report=True),
}

# The default run: TorchScript exports of a scatter_add at opset 10 (a deprecated Scatter) and 11
# (unnamed Constants; what repair repairs), one with index_put, a small convolutional network, a
# dynamo transformer at opset 18 and a Resize no opset below 18 has, with the cheapest verbs;
# every other pair is in the slow sweep.
FAST_MODELS = ["gnn_mean_ts10_dyn", "gnn_mean_ts11_dyn", "multi_hot_ts11_static",
               "shufflenet_dynamo18_static", "bert_dynamo18_dyn",
               "antialias_stem_dynamodefault_static"]
FAST_VERBS = ["upgrade", "fold", "lower-13", "tensorrt-8.6", "to-scatternd", "repair"]

# The highest opset each verb's result may have (the target's; TensorRT's parser's for tensorrt).
TARGET_OPSET = {"lower-13": 13, "lower-11": 11, "lower-17": 17, "tensorrt-8.6": 17,
                "tensorrt-10": 20}

# "The export computes what PyTorch does": onnxruntime's original within this of PyTorch eager
# (their float kernels differ: GELU, softmax, layer norm round otherwise).
EXPORT_TOLERANCE = (1e-4, 1e-5)

# What a verb may refuse with: a ConversionError that says it cannot reach the target and names
# the node (``Op 'name' (opset N, where)``, as graph.describe() does) that has no exact form there.
# A move whose result "fails" the checker or onnxruntime is the move's fault, not an absence.
CANNOT_REACH = re.compile(r"^cannot (lower|move|convert|prepare)\b")
NAMES_A_NODE = re.compile(r"\b[A-Z][A-Za-z0-9]+ '[^']*' \(opset \d+")
MOVE_BROKE_IT = re.compile(r"\bfails\b")


@functools.cache
def _export(name: str) -> tuple[onnx.ModelProto, dict, dict]:
    """The export, its inputs and PyTorch's outputs, by the export's output names (in their order:
    an exporter may name an output otherwise than it was asked to)."""
    model, feeds, outputs = load_export(DATA, name)
    names = [o.name for o in model.graph.output]
    assert len(outputs) == len(names), f"{name}.npz: {len(outputs)} outputs for {names}"
    return model, feeds, dict(zip(names, outputs.values()))


def _run(model: onnx.ModelProto, feeds: dict) -> dict[str, np.ndarray]:
    """onnxruntime as a user runs it: default session options, the CPU provider."""
    session = ort.InferenceSession(model.SerializeToString(), ort.SessionOptions(),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds)))


@functools.cache
def _original(name: str) -> dict[str, np.ndarray]:
    model, feeds, _ = _export(name)
    return _run(model, feeds)


@functools.cache
def _float64(name: str) -> tuple[list, list]:
    model, feeds, _ = _export(name)
    return float64.evaluate(model, feeds)


def _export_is_right(name: str) -> bool:
    """Whether the original export computes what PyTorch does (a TorchScript accumulation below
    opset 16 counts a repeated index once: not)."""
    _, _, expected = _export(name)
    got = _original(name)
    rtol, atol = EXPORT_TOLERANCE
    return all(np.allclose(got[k], v, rtol=rtol, atol=atol) for k, v in expected.items())


def _float_arithmetic_untouched(original: onnx.ModelProto, result: onnx.ModelProto,
                                outcome) -> bool:
    """Whether the rewrite can have changed no float rounding: the model was left unchanged, or
    it stayed at its opset (onnxruntime fuses per opset) with no float add/mul scatter to rewrite
    and no op replaced by its function body."""
    if not outcome.modified:
        return True
    if model_opset(result) != model_opset(original):
        return False
    return not _has_sum_or_product_scatter(original) and "function body" not in json.dumps(
        outcome.passes)


def _has_sum_or_product_scatter(model: onnx.ModelProto) -> bool:
    """A scatter with reduction add or mul anywhere in the model (subgraphs and functions too)."""
    work = [*model.graph.node, *(n for f in model.functions for n in f.node)]
    while work:
        node = work.pop()
        for a in node.attribute:
            if node.op_type.startswith("Scatter") and a.name == "reduction" and a.s in (b"add",
                                                                                       b"mul"):
                return True
            for graph in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                work += graph.node
    return False


def _judge(name: str, verb: str, result: onnx.ModelProto, outcome) -> list[str]:
    """What is wrong with ``result``'s outputs (empty when nothing is)."""
    original_model, feeds, torch_outputs = _export(name)
    try:
        got = _run(result, feeds)
    except Exception as e:  # onnxruntime reports load and run failures through several types
        return [f"unrunnable in onnxruntime (default session options): "
                f"{' '.join(str(e).split())[:300]}"]
    original = _original(name)
    names = list(original)
    if sorted(got) != sorted(names):
        return [f"outputs {sorted(got)} where the original has {sorted(names)}"]
    wrong = []
    repaired = verb == "repair" and outcome.modified
    if not repaired:
        exact = _float_arithmetic_untouched(original_model, result, outcome)
        _, failures = compare_outputs(names, [original[k] for k in names],
                                      [got[k] for k in names], float_tolerance=not exact)
        if failures and not exact:
            failures = _judged_by_the_arithmetic(name, names, original, got, failures)
        judged = "bit for bit" if exact else "float judgement"
        wrong += [f"against onnxruntime on the original ({judged}): {f}"
                  for f in failures.values()]
    rtol, atol = FLOAT_TOLERANCE[np.dtype(np.float32)]
    if _export_is_right(name) or repaired:
        for k, expected in torch_outputs.items():
            slack = (np.abs(original[k] - expected) if not repaired
                     else EXPORT_TOLERANCE[0] * np.abs(expected) + EXPORT_TOLERANCE[1])
            off = (np.abs(got[k].astype(np.float64) - expected) - slack
                   - (atol + rtol * np.abs(expected)))
            if off.size and float(off.max()) > 0:
                wrong.append(f"output '{k}': farther from PyTorch than the original export, by "
                             f"up to {float(off.max()):.3g}")
    return wrong


def _judged_by_the_arithmetic(name: str, names: list[str], original: dict, got: dict,
                              failures: dict[str, str]) -> dict[str, str]:
    """Validation's float judgement on the float outputs beyond FLOAT_TOLERANCE (the others stay
    failures: integers are exact)."""
    try:
        exact, magnitude = _float64(name)
    except Exception as e:  # (an op onnx.reference cannot run in float64)
        return {k: f"{f} (no float64 evaluation to judge by: {str(e)[:200]})"
                for k, f in failures.items()}
    left = {}
    for k, failure in failures.items():
        if not judgeable(original[k]):
            left[k] = failure
            continue
        i = names.index(k)
        verdict, _ = judge_rounding(k, original[k], got[k], np.asarray(exact[i]),
                                    np.asarray(magnitude[i]))
        if verdict is not None:
            left[k] = verdict
    return left


@functools.cache
def _rewrite(name: str, verb: str, validate: bool):
    """(result, outcome) or the ScatterRewriteError the verb raised."""
    model, _, _ = _export(name)
    try:
        return VERBS[verb](model, validate)
    except ScatterRewriteError as e:
        return e


def _refusal_problem(error: ScatterRewriteError) -> str | None:
    """None where the refusal names a real absence, else what is wrong with it."""
    text = " ".join(str(error).split())
    if (isinstance(error, ConversionError) and CANNOT_REACH.search(text)
            and NAMES_A_NODE.search(text) and not MOVE_BROKE_IT.search(text)):
        return None
    return f"refused ({type(error).__name__}), not for a real absence: {text[:400]}"


def _cases(fast_models: list[str], fast_verbs: list[str]):
    for name in MODELS:
        for verb in VERBS:
            fast = name in fast_models and verb in fast_verbs
            yield pytest.param(name, verb, id=f"{name}-{verb}",
                               marks=() if fast else pytest.mark.slow)


@pytest.mark.parametrize("validate", [False, True], ids=["unvalidated", "validated"])
@pytest.mark.parametrize("name, verb", list(_cases(FAST_MODELS, FAST_VERBS)))
def test_verb_result_runs_and_is_right(name: str, verb: str, validate: bool):
    done = _rewrite(name, verb, validate)
    if isinstance(done, ScatterRewriteError):
        problem = _refusal_problem(done)
        if problem is not None:
            pytest.fail(f"{name} {verb} validate={validate}: {problem}")
        return
    result, outcome = done
    assert outcome.status in SUCCEEDED
    assert outcome.status == PASSED or not (validate and outcome.modified), outcome.status
    highest = TARGET_OPSET.get(verb)
    if highest is not None and model_opset(result) > highest:
        pytest.fail(f"{name} {verb} validate={validate}: {outcome.status} at opset "
                    f"{model_opset(result)}, above its target's {highest}, where it should refuse")
    wrong = _judge(name, verb, result, outcome)
    if wrong:
        pytest.fail(f"{name} {verb} validate={validate}: {'; '.join(wrong)}")


def _wrong_export_cases():
    """The exports that do not compute what PyTorch does on their inputs (TorchScript's
    accumulations below opset 16 count a repeated index once), by architecture and exporter."""
    for entry in MANIFEST["models"]:
        name = entry["name"]
        if entry["exporter"] == "ts" and entry["opset"] < 16 and entry["architecture"] in (
                "gnn_mean", "multi_hot"):
            yield pytest.param(name, id=name,
                               marks=() if name in FAST_MODELS else pytest.mark.slow)


@pytest.mark.parametrize("name", list(_wrong_export_cases()))
def test_repair_gives_pytorchs_outputs_where_the_export_does_not(name: str):
    assert not _export_is_right(name), f"{name}: the export already computes what PyTorch does"
    done = _rewrite(name, "repair", True)
    assert not isinstance(done, ScatterRewriteError), f"{name}: repair refused: {done}"
    result, outcome = done
    left = [s["detail"] for p in outcome.passes for s in p["skipped"]]
    assert outcome.modified, f"{name}: repair left the export as it is: {'; '.join(left)}"
    assert not _judge(name, "repair", result, outcome), _judge(name, "repair", result, outcome)


def _check_cases():
    for name in MODELS:
        for opset in (13, 11, 17):
            fast = name in FAST_MODELS and opset == 13
            yield pytest.param(name, opset, id=f"{name}-opset-{opset}",
                               marks=() if fast else pytest.mark.slow)


@pytest.mark.parametrize("name, opset", list(_check_cases()))
def test_check_is_ready_exactly_when_lower_succeeds(name: str, opset: int):
    """check is a dry run of lower: READY (nothing to do) or FIXABLE (lower reaches the target)
    exactly when lower succeeds, BLOCKED exactly when it refuses; never READY for a model above
    the target's opset, which a runtime at the target does not load."""
    model, _, _ = _export(name)
    report = sr.check(model, target=f"opset-{opset}")
    lowered = _rewrite(name, f"lower-{opset}", False)
    succeeded = not isinstance(lowered, ScatterRewriteError)
    why = "" if succeeded else f" ({' '.join(str(lowered).split())[:300]})"
    assert (report.status in ("READY", "FIXABLE")) == succeeded, (
        f"{name}: check --target opset-{opset} says {report.status}, lower --opset {opset} "
        f"{'succeeds' if succeeded else 'refuses'}{why}")
    if model_opset(model) > opset:
        assert report.status != "READY", (f"{name}: check --target opset-{opset} says READY for "
                                          f"a model at opset {model_opset(model)}")


def test_the_corpus_holds_what_make_py_made():
    """Every model make.py's manifest lists; each export with inputs for each of its inputs and
    PyTorch's outputs for each of its outputs; both exporters, static and dynamic, opsets below 13
    among them (so that the tests above test what they say)."""
    assert {e["name"] for e in MANIFEST["models"]} <= set(MODELS)
    for name in MODELS:
        model, feeds, torch_outputs = _export(name)
        assert sorted(feeds) == sorted(i.name for i in model.graph.input
                                       if i.name not in {t.name for t in model.graph.initializer})
    for entry in MANIFEST["models"]:  # (make.py names them as they are asked)
        saved = np.load(DATA / f"{entry['name']}.npz").files
        assert [k[4:] for k in saved if k.startswith("out_")] == list(_export(entry["name"])[2])
    entries = MANIFEST["models"]
    assert {e["exporter"] for e in entries} == {"ts", "dynamo"}
    assert {e["dynamic"] for e in entries} == {True, False}
    assert {e["opset"] for e in entries if e["exporter"] == "ts"} >= {10, 11, 12, 13, 16, 17}
    scatters = {"ScatterElements", "ScatterND", "Scatter"}
    assert sum(bool(scatters & set(e["ops"])) for e in entries) >= 6


def _antialias_resize() -> onnx.ModelProto:
    """Resize with antialias=1 (opset 18) on an input of dynamic size, which no earlier opset can
    express (on static sizes, a constant linear map: scatter_rewrite/opset/forms/)."""
    import onnx.helper as oh

    node = oh.make_node("Resize", ["x", "", "scales"], ["y"], name="resize_aa", mode="linear",
                        antialias=1)
    scales = onnx.numpy_helper.from_array(np.array([1, 1, 0.5, 0.5], np.float32), "scales")
    graph = oh.make_graph([node], "resize", [oh.make_tensor_value_info("x", 1, ["n", 1, 8, 8])],
                          [oh.make_tensor_value_info("y", 1, ["n", 1, 4, 4])], [scales])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


def test_a_real_absence_is_an_allowed_refusal_and_a_broken_move_is_not():
    """(So that the refusals the sweep allows are the ones it means.)"""
    with pytest.raises(ConversionError) as refused:
        sr.lower(_antialias_resize(), opset=17)
    assert _refusal_problem(refused.value) is None
    broken = ConversionError("cannot convert LayerNormalization 'ln' (opset 17, main graph) to "
                             "opset 13: the step LayerNormalization-17 -> opset 13 gives a model "
                             "that fails onnxruntime's session creation")
    assert _refusal_problem(broken) is not None
    assert _refusal_problem(sr.ValidationError("validation failed, nothing written")) is not None
