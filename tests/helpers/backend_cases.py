"""ONNX's own backend node test cases moved down and run: how the version-step table is judged.

Every case of ``onnx.backend.test.case.node.collect_testcases()`` whose model is above a target
opset and which onnxruntime runs correctly as it is (its expected outputs, floats within
``rtol=1e-3, atol=1e-5``, everything else exact) is moved to the target with
``scatter_rewrite.lower(model, opset=target, validate=False)`` and with ``onnx.version_converter``,
and each result is judged the same way:

* ``correct``: onnx.checker (full) passes and onnxruntime gives the expected outputs;
* ``wrong``: a model came back that fails the checker (where the case's own passes it), that
  onnxruntime refuses, or whose outputs differ;
* ``refused``: an error came instead of a model (ours: a ScatterRewriteError naming the node,
  the step and why; anything else is a crash, counted as wrong).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import warnings

import numpy as np
import onnx
import onnx.version_converter
from tests.helpers.models import model_opset

__all__ = ["counts", "Judged", "model_opset", "node_cases", "sweep", "TARGETS"]

RTOL, ATOL = 1e-3, 1e-5
TARGETS = (11, 13, 17)


@dataclasses.dataclass
class Judged:
    case: str
    target: int
    ours: str  # correct, wrong, refused
    why: str  # for wrong and refused
    converter: str  # onnx.version_converter's: correct, wrong, refused


@functools.lru_cache(maxsize=1)
def node_cases() -> tuple:
    """The backend node cases with data, in ONNX's order."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the case generators' own overflow warnings)
        return tuple(c for c in collect_testcases() if c.kind == "node" and c.data_sets)


def _session(model: onnx.ModelProto):
    """One thread where the model has a reduction onnxruntime may refuse (engines.session_threads:
    a refusal in its parallel loop can kill the process)."""
    import onnxruntime as ort

    from scatter_rewrite.validate.engines import session_threads

    data = model.SerializeToString()
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = session_threads(data)
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def _outputs(model: onnx.ModelProto, inputs: list) -> list:
    session = _session(model)
    known = {i.name for i in session.get_inputs()}
    feeds = {i.name: v for i, v in zip(model.graph.input, inputs) if i.name in known}
    return session.run(None, feeds)


def same_outputs(got: list, expected: list) -> bool:
    """Floats within RTOL/ATOL (NaN equal to NaN), everything else exact; sequences element-wise."""
    if len(got) != len(expected):
        return False
    for g, e in zip(got, expected):
        if isinstance(e, list) or isinstance(g, list):
            if not (
                isinstance(g, list)
                and isinstance(e, list)
                and len(g) == len(e)
                and all(same_outputs([a], [b]) for a, b in zip(g, e))
            ):
                return False
            continue
        if e is None or g is None:
            if (e is None) != (g is None):
                return False
            continue
        g, e = np.asarray(g), np.asarray(e)
        if g.shape != e.shape:
            return False
        if e.dtype.kind in "fc":
            if not np.allclose(
                g.astype(np.complex128 if e.dtype.kind == "c" else np.float64),
                e.astype(np.complex128 if e.dtype.kind == "c" else np.float64),
                rtol=RTOL,
                atol=ATOL,
                equal_nan=True,
            ):
                return False
        elif e.dtype.kind in "OUS":
            if not (g.astype(object) == e.astype(object)).all():
                return False
        elif not np.array_equal(g, e):
            return False
    return True


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _checker_failure(model: onnx.ModelProto) -> str | None:
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # (ValidationError, InferenceError and onnx's C++ errors)
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return None


def runs_before(case) -> bool:
    """Whether onnxruntime gives the case's expected outputs on its model as it is."""
    try:
        return all(same_outputs(_outputs(case.model, i), o) for i, o in case.data_sets)
    except Exception:  # onnxruntime's own errors: a case it cannot run
        return False


def judge_model(model: onnx.ModelProto, case) -> tuple[str, str]:
    """("correct", "") or ("wrong", why) for a moved model of ``case``."""
    failure = _checker_failure(model)
    if failure is not None and _checker_failure(case.model) is None:
        return "wrong", f"onnx.checker: {failure}"
    try:
        for inputs, outputs in case.data_sets:
            if not same_outputs(_outputs(model, inputs), outputs):
                return "wrong", "outputs differ from the expected ones"
    except Exception as e:  # onnxruntime refuses the session or the run
        return (
            "wrong",
            f"onnxruntime: {_first_line(e)}",
        )
    return "correct", ""


def judge_case(case, target: int) -> Judged:
    """``case`` moved to ``target`` by us and by onnx.version_converter, each judged."""
    import scatter_rewrite
    from scatter_rewrite.errors import ScatterRewriteError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            moved = scatter_rewrite.lower(case.model, opset=target, validate=False)
        ours, why = judge_model(moved, case)
    except ScatterRewriteError as e:
        ours, why = "refused", str(e)
    except Exception as e:  # a crash is a bug: counted as a wrong result
        ours, why = "wrong", f"crash: {type(e).__name__}: {e}"
    try:
        converter = judge_model(onnx.version_converter.convert_version(case.model, target), case)[0]
    except Exception:  # the converter's C++ assertions
        converter = "refused"
    return Judged(case.name, target, ours, why, converter)


def cases_above(target: int, names: set[str] | None = None) -> list:
    """The node cases above ``target`` (those named in ``names``, if given) onnxruntime runs."""
    return [
        c
        for c in node_cases()
        if model_opset(c.model) > target and (names is None or c.name in names) and runs_before(c)
    ]


def sweep(target: int, names: set[str] | None = None) -> list[Judged]:
    return [judge_case(c, target) for c in cases_above(target, names)]


def counts(judged: list[Judged]) -> dict[str, collections.Counter]:
    return {
        "ours": collections.Counter(j.ours for j in judged),
        "converter": collections.Counter(j.converter for j in judged),
    }
