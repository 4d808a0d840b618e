"""onnxruntime runs of a model (``ort_run`` as a user runs it, ``validation_ort_run`` as validation
does), onnx.reference with TopK's other tie rule (``run_with_later_first_ties``), ONNX's own
reduction backend cases, and the expected output of a one-scatter model (shared by
the lowering tests in tests/passes/ and the opset tests)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx.backend.test.case.node import collect_testcases
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

from scatter_rewrite.evaluator import scatter_elements, scatter_nd
from scatter_rewrite.ort_folding import optimizers_left_out
from scatter_rewrite.validate import run_onnxruntime
from scatter_rewrite.validate.engines import session_threads


def ort_run(model: onnx.ModelProto | str | Path, feeds: dict | None = None, *, threads: int | None = None,
            optimize: bool = True, overridable: bool = False) -> list[np.ndarray]:
    """Every output of ``model`` (a ModelProto or a path) in onnxruntime's CPU provider, fed the
    entries of ``feeds`` the model declares as inputs (``overridable``: also the initializers it lets
    a feed override). ``threads=1`` keeps float sums in one order; ``optimize=False`` runs the graph
    as written (no constant folding or fusion). A model with a reduction onnxruntime's kernel may
    refuse runs on one thread, as validation runs it (``engines.session_threads``: its refusal in a
    parallel loop can kill the process)."""
    return list(ort_outputs(model, feeds, threads=threads, optimize=optimize, overridable=overridable).values())


def ort_outputs(model: onnx.ModelProto | str | Path, feeds: dict | None = None, *, threads: int | None = None,
                optimize: bool = True, overridable: bool = False) -> dict[str, np.ndarray]:
    """``ort_run``'s outputs by name."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    threads = session_threads(source, threads or 0) or None
    if threads is not None:
        options.intra_op_num_threads = options.inter_op_num_threads = threads
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    # (ConstantFolding left out where it would crash the process: scatter_rewrite/ort_folding.py)
    graph = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model), load_external_data=False)
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"],
                                   disabled_optimizers=optimizers_left_out(graph, []))
    names = {i.name for i in session.get_inputs()}
    if overridable:
        names |= {i.name for i in session.get_overridable_initializers()}
    outputs = session.run(None, {k: v for k, v in (feeds or {}).items() if k in names})
    return dict(zip([o.name for o in session.get_outputs()], outputs))


def validation_ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    """``model`` run as validation runs it (``scatter_rewrite.validate.run_onnxruntime``: our custom
    ops registered, the optimizers that round otherwise left out)."""
    return run_onnxruntime(model.SerializeToString(), feeds)


# ONNX's own backend cases with a reducing ScatterElements/ScatterND.
BACKEND_CASES = [c for c in collect_testcases() if c.model is not None
                 and any(n.op_type in ("ScatterElements", "ScatterND")
                         and any(a.name == "reduction" and a.s != b"none" for a in n.attribute)
                         for n in c.model.graph.node)]


def expected_outputs(model, feeds, op, attrs):
    """onnxruntime on the original; our evaluator where onnxruntime lacks the kernel (float16
    add/mul, bool max/min)."""
    try:
        return ort_run(model, feeds)
    except Exception:
        fn = scatter_elements if op == "ScatterElements" else scatter_nd
        return [fn(feeds["data"], feeds["indices"], feeds["updates"], **attrs)]


class _TopKLaterFirst(OpRun):
    """ONNX's TopK with the other tie rule: among equal values the higher index first (OpenVINO's
    TopK, for one, does not keep ONNX's lower-index-first order)."""

    op_domain = ""

    def _run(self, x, k, axis=-1, largest=1, sorted=1):  # noqa: A002 - TopK's attribute name
        moved = np.moveaxis(x, axis, -1)
        later = -np.broadcast_to(np.arange(moved.shape[-1]), moved.shape)
        order = np.lexsort((later, -moved if largest else moved), axis=-1)[..., :int(k[0])]
        values = np.take_along_axis(moved, order, axis=-1)
        return np.moveaxis(values, -1, axis), np.moveaxis(order, -1, axis).astype(np.int64)


_TopKLaterFirst.__name__ = "TopK"


def run_with_later_first_ties(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    """``model``'s outputs in onnx.reference with a TopK that puts the later of equal values first
    (ONNX's puts the earlier first): a form that rests on TopK's tie rule comes out otherwise."""
    return ReferenceEvaluator(model, new_ops=[_TopKLaterFirst]).run(None, feeds)
