"""Prove what ``repair`` promises, since it is meant to change a model's results.

``repair`` (:mod:`scatter_rewrite.passes.repair`) gives each TorchScript accumulating scatter
``reduction="add"`` and each dynamo scatter_reduce mean its sum / count. The proof judges the
repaired model against the *intended* model: the original with each repaired scatter computing
what PyTorch computed (an add-reducing scatter; for a mean, :func:`scatter_mean`, PyTorch's
``scatter_reduce(reduce="mean")`` in NumPy), evaluated by our kernels through ``onnx.reference``.
It runs on several input sets, each judged one of two ways:

1. Where no repaired scatter's targets repeat (measured: the intended model's run returns each
   repaired scatter's indices, whose targets are counted) and no repaired mean counts ``self``,
   the original already computes what was meant: the repaired model must equal it **bit for bit**
   in onnxruntime.
2. Elsewhere, onnxruntime on the repaired model must equal the intended model's outputs, float
   outputs within :data:`scatter_rewrite.validate.FLOAT_TOLERANCE` (sums in another order; another
   engine for the float ops around them) or the user's bound.

The sets: the user's inputs (``--inputs``) first, always, when given; inputs planned for the
original's contract (scatters without reduction: indices that do not repeat, where the model lets
the plan choose them; computed indices, a MoE router's top-k experts, repeat anyway and are judged
by 2.); inputs planned for the intended model, drawn again (other seeds, up to
:data:`REPEAT_TRIES`) until the original differs from the intended result there, i.e. an index
repeated, which the result says. Where generated inputs put a computed index out of range and the
user gave inputs, those are the proof (a note says so); without them it is an error naming
``--inputs``. A scatter repaired inside a subgraph or function cannot return its indices: there
the plan for the original's contract is taken to have no repeats, as its contract says.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
from onnx.reference.op_run import OpRun

from scatter_rewrite.errors import IndexOutOfRangeError, ScatterRewriteError, ValidationError
from scatter_rewrite.said import param, said
from scatter_rewrite.evaluator import scatter_elements
from scatter_rewrite.graph import attr, iter_nodes
from scatter_rewrite.model_io import load_model
from scatter_rewrite.passes.repair import typed_sites
from scatter_rewrite.validate.engines import (
    first_line, kernels_onnxruntime_lacks, what_onnxruntime_lacks, without_paths,
)
from scatter_rewrite.validate.held import Held

__all__ = ["intended_model", "prove_repair", "scatter_mean"]

REPEAT_TRIES = 8  # input draws at most, until one repeats an index the original gets wrong
INTENDED_DOMAIN = "scatter_rewrite.intended"
_PROBE = "scatter_rewrite_probe"


def scatter_mean(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, axis: int,
                 include_self: bool) -> np.ndarray:
    """PyTorch's ``data.scatter_reduce(axis, indices, updates, "mean", include_self)``: each
    target the mean of its updates (and of itself when ``include_self``), integers divided with
    floor; a target no update reaches keeps ``data``."""
    base = data if include_self else scatter_elements(
        data, indices, np.zeros(updates.shape, data.dtype), axis=axis)
    sums = scatter_elements(base, indices, updates, axis=axis, reduction="add")
    counts = scatter_elements(np.full(data.shape, int(include_self), np.int64), indices,
                              np.ones(updates.shape, np.int64), axis=axis, reduction="add")
    counts = np.maximum(counts, 1)
    if np.issubdtype(data.dtype, np.integer):
        return np.floor_divide(sums, counts).astype(data.dtype)
    return (sums / counts.astype(data.dtype)).astype(data.dtype)


class ScatterElementsMean(OpRun):
    op_domain = INTENDED_DOMAIN

    def _run(self, data, indices, updates, axis=0, include_self=1):
        return (scatter_mean(data, indices, updates, axis, bool(include_self)),)


@dataclasses.dataclass
class _Probe:
    """A repaired scatter of the main graph, whose targets are counted on every input set."""

    op_type: str
    axis: int


@dataclasses.dataclass
class _Probes:
    """The probed sites, whether every site is probed, whether a repaired mean counts ``self``
    (then the original never computes what was meant)."""

    sites: list[_Probe]
    complete: bool = True
    counts_self: bool = False


def intended_model(original: ir.Model, repaired: ir.Model | None = None,
                   for_planning: bool = False) -> tuple[ir.Model, _Probes]:
    """``original`` (cloned) with every scatter ``repair`` repaired computing what PyTorch
    computed: an accumulation reducing with add (``Scatter`` read as ``ScatterElements``), a mean
    :class:`ScatterElementsMean` (``for_planning``: reducing with add, whose contract is the
    mean's, and no probes). For our evaluator, which reads the attribute at any opset; not a model
    for a runtime. A mean known by its name alone counts when ``repaired`` no longer has a plain
    scatter of that name (the caller asked for it). Each main-graph site's indices and data
    become two extra outputs, described by the returned probes."""
    model = original.clone()
    kept = ({n.name for n, _ in iter_nodes(repaired) if n.op_type == "ScatterElements" and n.name}
            if repaired is not None else set())
    probes = _Probes([])
    for site in typed_sites(model, "scatter-reduce-mean")[0]:  # (the shapes the pass saw)
        node = site.scatter
        if site.kind == "mean" and site.include_self and (repaired is None or node.name in kept):
            continue  # a plain scatter named like a mean: left as it is
        if site.scatter.op_type == "Scatter":
            node.op_type = "ScatterElements"
        if site.kind == "mean" and not for_planning:
            _as_mean(model, site)
            probes.counts_self |= site.include_self
        else:
            node.attributes["reduction"] = ir.AttrString("reduction", "add")
        if for_planning:
            continue
        if site.scope.body is not model.graph:
            probes.complete = False
            continue
        for value in node.inputs[1], node.inputs[0]:
            probe = ir.node("Identity", [value])
            probe.outputs[0].name = f"{_PROBE}_{len(model.graph.outputs)}"
            model.graph.append(probe)
            model.graph.outputs.append(probe.outputs[0])
        probes.sites.append(_Probe(node.op_type, attr(node, "axis", 0)))
    return model, probes


def _as_mean(model: ir.Model, site) -> None:
    node = site.scatter
    if not site.include_self:
        node.replace_input_with(0, site.clear.inputs[0])  # x, as PyTorch reads it
    node.domain, node.op_type = INTENDED_DOMAIN, "ScatterElementsMean"
    node.attributes.pop("reduction", None)
    node.attributes["include_self"] = ir.AttrInt64("include_self", int(site.include_self))
    model.opset_imports[INTENDED_DOMAIN] = 1


def _repeats(probes: list[_Probe], arrays: list[np.ndarray]) -> bool:
    """Whether any probed scatter's targets repeat (``arrays``: indices, data per probe)."""
    for probe, indices, data in zip(probes, arrays[0::2], arrays[1::2]):
        indices = indices.astype(np.int64)
        if probe.op_type == "ScatterND":
            k = indices.shape[-1]
            rows = indices.reshape(-1, k)
            dims = np.asarray(data.shape[:k], np.int64)
            targets = [np.where(rows[:, j] < 0, rows[:, j] + dims[j], rows[:, j])
                       for j in range(k)]
            flat = np.ravel_multi_index(targets, data.shape[:k]) if k else np.zeros(len(rows))
        else:
            axis = probe.axis % data.ndim
            grid = list(np.indices(indices.shape))
            grid[axis] = np.where(indices < 0, indices + data.shape[axis], indices)
            flat = np.ravel_multi_index(grid, data.shape)
        flat = np.ravel(flat)
        if np.unique(flat).size < flat.size:
            return True
    return False


@dataclasses.dataclass
class _Judged:
    exact: bool  # judged bit for bit against the original (no repeats)
    diff: float
    differs: bool  # the original differs from the intended result there
    engine: str
    expected: list
    generated: bool = True  # on generated inputs, not the user's


def prove_repair(original: str | os.PathLike | Held, repaired: str | os.PathLike | Held,
                 seed: int = 0, inputs: dict | None = None,
                 tolerance: tuple[float, float] | None = None) -> dict:
    """The proof of the module docstring on the model files (or models held in memory);
    ValidationError if it fails.
    ``inputs`` (the user's, name -> array): judged first. ``tolerance``: the user's (rtol, atol)
    for float outputs judged against the intended model (--rtol/--atol). Returns what each
    compared, for the report."""
    from scatter_rewrite import validate as validation

    source, after = (m.model if isinstance(m, Held) else load_model(Path(m))
                     for m in (original, repaired))
    intended, probes = intended_model(source, after)
    planning, _ = intended_model(source, after, for_planning=True)
    judged, notes, skipped = [], [], []
    proto = ir.serde.serialize_model(intended)
    judge = lambda plan, unique: _judge(  # noqa: E731
        plan, proto, len(source.graph.outputs), probes, unique, original, repaired, tolerance)
    if inputs is not None:
        given = validation.plan_validation(planning, inputs=inputs)
        judged.append(dataclasses.replace(_guarded(judge, given, False, True, skipped, []),
                                          generated=False))
        notes += given.notes
    unique_plan = validation.plan_validation(source, seed=seed)
    cannot = [note for note in unique_plan.notes if "may repeat" in note]
    failing: list[str] = []  # why the original fails on generated inputs drawn (once each)
    # (a trace specialized to its example, a Split of the experts it hit, runs on some draws only)
    for tried in range(REPEAT_TRIES if not cannot else 0):
        plan = unique_plan if not tried else validation.plan_validation(source, seed=seed + tried)
        one = _guarded(judge, plan, True, inputs is not None, skipped, failing)
        if one is not None or not failing:
            judged += [one] if one is not None else []
            break
    draws = 0
    while not any(j.differs for j in judged) and draws < REPEAT_TRIES:
        repeats = validation.plan_validation(planning, seed=seed + draws)
        draws += 1
        one = _guarded(judge, repeats, False, inputs is not None, skipped, failing)
        if one is not None:
            judged.append(one)
            notes = list(repeats.notes) if inputs is None else notes
        elif not failing or skipped:
            break  # out of range once, out of range on every seed: the user's inputs prove
    if failing and not any(j.generated for j in judged):
        if inputs is None:
            raise ValidationError(said(
                f"the original model fails on every input generated ({_failures_said(failing)}): "
                "pass inputs it runs on with ", param("inputs"), ", or ", param("validate", False)))
        skipped.append(said("the original model fails on the generated inputs "
                            f"({_failures_said(failing)}): proven on the ", param("inputs"),
                            " given"))
    elif failing:
        notes.append(f"the original model fails on some generated inputs, which were drawn again "
                     f"({_failures_said(failing)})")
    return _proof_said(judged, cannot, draws, inputs, tolerance, repaired, notes + skipped)


def _proof_said(judged: list, cannot: list[str], draws: int, inputs: dict | None,
                tolerance: tuple[float, float] | None, repaired, notes: list[str]) -> dict:
    """The report of :func:`prove_repair` from what each judged run compared."""
    from scatter_rewrite import validate as validation

    exact = [j for j in judged if j.exact]
    against = [j for j in judged if not j.exact]
    if exact:
        unique = {"checked_against": "onnxruntime on the original model",
                  "tolerance": "exact (bit for bit)", "max_abs_diff": max(j.diff for j in exact)}
    else:
        unique = {"checked_against": "nothing: no inputs tried left every index unrepeated",
                  "notes": cannot}
    differs = any(j.differs for j in against)
    engine = against[-1].engine if against else (exact[-1].engine if exact else "onnxruntime")
    expected = (against or exact)[-1].expected
    if tolerance is not None:
        said_tolerance = f"float outputs within the given rtol={tolerance[0]}, atol={tolerance[1]}"
    else:
        said_tolerance = _tolerance_said(expected, validation.FLOAT_TOLERANCE)
    repeated = {
        "checked_against": ("scatter-rewrite's evaluator (onnx.reference with its NumPy kernels) "
                            "on the original with each repaired scatter computing what PyTorch "
                            f"computed; {engine} on the repaired model"),
        "tolerance": said_tolerance, "max_abs_diff": max((j.diff for j in against), default=0.0),
        "draws": draws, "user_inputs": inputs is not None,
        "original_differs": differs,  # False: no inputs repeated an index the export gets wrong
    }
    without = (f"equal to {unique['checked_against']} bit for bit" if exact
               else "no inputs tried left every index unrepeated")
    found = ("the original differs there" if differs
            else "no inputs tried repeated an index the original misses")
    # (where the evaluator ran the repaired model: why onnxruntime cannot, for the status)
    cannot, to_run_it = what_onnxruntime_lacks(repaired) if engine != "onnxruntime" else ("", "")
    return {
        "onnxruntime_cannot_run": cannot,
        "to_run_it": to_run_it,
        "proven_in": "onnxruntime" if engine == "onnxruntime" else "onnx.reference",
        "stand_in": "",
        "checked_against": (f"repair's proof: without repeated indices, {without}; with repeated "
                            f"indices ({found}), equal to the evaluator's run of what PyTorch "
                            f"computed, {engine} on the repaired model"),
        "tolerance": said_tolerance,
        "max_abs_diff": repeated["max_abs_diff"],
        "without_repeated_indices": unique,
        "with_repeated_indices": repeated,
        "notes": notes,
    }


class _OriginalFails(Exception):
    """The original model cannot run on an input set (onnxruntime, and our evaluator, fail)."""


def _failures_said(failing: list[str]) -> str:
    return "; ".join(failing[:2]) + (f"; and {len(failing) - 2} more" if len(failing) > 2 else "")


def _guarded(judge, plan, unique: bool, user_inputs: bool, skipped: list,
             failing: list) -> _Judged | None:
    """``judge(plan, unique)``; None (and a note in ``skipped``) where generated inputs put a
    computed index out of range and the user's inputs prove instead; None (and why in
    ``failing``) where the original fails on generated inputs."""
    try:
        return judge(plan, unique)
    except _OriginalFails as e:
        if "user inputs" in plan.notes:
            raise ValidationError(said("the original model cannot run on the inputs given (",
                                       param("inputs"), f"): {e}")) from e
        if str(e) not in failing:
            failing.append(str(e))
        return None
    except IndexOutOfRangeError as e:
        if "user inputs" in plan.notes:
            raise ValidationError(said("the original model cannot run on the inputs given (",
                                       param("inputs"), f"): {e}; scatter indices must lie "
                                       "within the data's bounds")) from e
        if not user_inputs:
            raise ValidationError(said(
                f"the generated validation inputs put an index out of range in the original "
                f"model ({e}): pass inputs it runs on with ", param("inputs"), ", or ",
                param("validate", False))) from e
        note = said(f"generated inputs put a computed index out of range ({e}): proven on the ",
                    param("inputs"), " given")
        if note not in skipped:
            skipped.append(note)
        return None


def _judge(plan, intended: onnx.ModelProto, n_outputs: int, probes: _Probes, unique: bool,
           original, repaired, tolerance) -> _Judged:
    """One input set judged as the module docstring says."""
    from scatter_rewrite import validate as validation

    before, _, ort_failure = _run_original(original, plan.inputs)
    try:
        outputs = _evaluate(intended, plan.inputs)
    except ScatterRewriteError:
        raise
    except Exception as e:  # our evaluator's failure (a NodeFailure naming the node)
        if ort_failure is not None:  # neither engine runs the original here: the inputs' fault
            raise _OriginalFails(ort_failure) from e
        raise ValidationError(said(
            "cannot evaluate the intended model (the original with each repaired scatter "
            f"reducing) in scatter-rewrite's evaluator, though onnxruntime runs the original: "
            f"{first_line(e, 300)}; use ", param("validate", False), " to skip")) from e
    expected, probed = outputs[:n_outputs], outputs[n_outputs:]
    actual, engine = _run(repaired, plan.inputs, repaired=True, original_failure=ort_failure)
    names = plan.outputs or [f"output {i}" for i in range(len(actual))]
    if (not probes.counts_self and not _repeats(probes.sites, probed)
            and (probes.complete or unique)):
        diffs, failures = validation.compare(names, before, actual, float_tolerance=False)
        if failures:
            raise ValidationError(
                "validation failed, nothing written: " + "; ".join(failures)
                + " (checked against: onnxruntime on the original model, on inputs where no "
                "repaired scatter's index repeats)")
        return _Judged(True, max(diffs.values(), default=0.0), False, engine, expected)
    diffs, failures = validation.compare(names, expected, actual, True, tolerance)
    if failures:
        raise ValidationError("the repaired model does not compute the intended accumulation (what "
                              "PyTorch computed), nothing written: " + "; ".join(failures))
    differs = bool(validation.compare(names, expected, before, float_tolerance=True)[1])
    return _Judged(False, max(diffs.values(), default=0.0), differs, engine, expected)


def _evaluate(proto: onnx.ModelProto, inputs: dict) -> list:
    """The intended model's outputs: our kernels through onnx.reference, with PyTorch's mean."""
    import warnings

    from scatter_rewrite.evaluator.reference_ops import make_evaluator

    evaluator = make_evaluator(proto, extra_ops=[ScatterElementsMean])
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return evaluator.run(None, inputs)


def _tolerance_said(outputs: list, tolerances: dict) -> str:
    bounds = sorted({f"{o.dtype}: rtol={tolerances[o.dtype][0]}, atol={tolerances[o.dtype][1]}"
                   for o in outputs if getattr(o, "dtype", None) in tolerances})
    if not bounds:
        return "exact (bit for bit)"
    return f"float outputs within {', '.join(bounds)}; everything else exact"


def _run_original(model: str | os.PathLike, inputs: dict) -> tuple[list, str, str | None]:
    """:func:`_run` on the original, and why onnxruntime failed on it (None if it ran);
    _OriginalFails where our evaluator fails on it too: the inputs do not fit the model."""
    from scatter_rewrite import validate as validation

    try:
        return validation.run_onnxruntime(model, inputs), "onnxruntime", None
    except Exception as e:  # ORT reports load and run failures through several exception types
        ort_failure = _said_by_node(e)
        try:
            return (validation.run_reference(model, inputs), "scatter-rewrite's evaluator",
                    ort_failure)
        except ScatterRewriteError:
            raise
        except Exception as ref_error:
            raise _OriginalFails(ort_failure) from ref_error


_ORT_NODE = re.compile(r"while running (\w+) node\. Name:'([^']*)' Status Message: (.*)", re.S)
# onnxruntime's source location and function before its reason ("/onnxruntime_src/...h:91
# onnxruntime::ReshapeHelper::ReshapeHelper(...) input_shape_size == ... was false. The input...")
_ORT_SOURCE = re.compile(r"^\S+\.(?:h|cc|cpp):\d+ .*?\) (?:.*? was false\. )?", re.S)


def _said_by_node(e: BaseException) -> str:
    """onnxruntime's failure in one line, as "Reshape 'name': reason" where it names the node."""
    text = str(e).strip()
    found = _ORT_NODE.search(text)
    if found is None:
        return without_paths(first_line(e, 300))
    reason = " ".join(_ORT_SOURCE.sub("", found.group(3)).split())
    return f"{found.group(1)} '{found.group(2)}' fails: {reason[:200]}"


def _run(model: str | os.PathLike, inputs: dict, repaired: bool = False,
         original_failure: str | None = None) -> tuple[list, str]:
    """onnxruntime's outputs, or the evaluator's where onnxruntime cannot run the model (the
    deprecated ``Scatter`` of an opset-9 export); and which engine gave them. The ``repaired``
    model falls back only where onnxruntime lacks what it needs (its kernel registry: float16
    ``ScatterElements(add)`` at opset 16/17); any other failure on it is the repair's, unless
    onnxruntime failed alike on the original (``original_failure``: the inputs' fault)."""
    from scatter_rewrite import validate as validation

    try:
        return validation.run_onnxruntime(model, inputs), "onnxruntime"
    except Exception as e:  # ORT reports load failures through several exception types
        if repaired and not kernels_onnxruntime_lacks(model):
            if original_failure is not None and _said_by_node(e) == original_failure:
                raise _OriginalFails(original_failure) from e
            raise ValidationError("onnxruntime cannot run the repaired model, nothing written: "
                                  f"{first_line(e, 300)}") from e
        return validation.run_reference(model, inputs), "scatter-rewrite's evaluator"
