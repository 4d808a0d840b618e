"""The Python API: every pass takes and returns the model kind it was given.

Accepted: ``onnx.ModelProto``, ``onnx_ir.Model``, a path (str or ``os.PathLike``), an
``onnx_graphsurgeon.Graph``. The result is of the same kind: a new ModelProto, a new ir.Model
(the input is cloned, never mutated), the path of the written model, a new graphsurgeon Graph.
"""

from __future__ import annotations

import logging
import math
import numbers
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import onnx
import onnx_ir as ir

from scatter_rewrite.errors import OptionError, OptionTypeError, ValidationError
from scatter_rewrite.limits import DEFAULT_CHECK_TARGET, DEFAULT_LOWER_OPSET, DEFAULT_TRT_VERSION
from scatter_rewrite.model_io import check_in_memory_references, deserialize, save_model
from scatter_rewrite.pipeline import UNRUNNABLE, Outcome, rewrite_file, rewrite_model
from scatter_rewrite.verbs import VERBS

if TYPE_CHECKING:
    from scatter_rewrite.readiness.report import CheckReport

__all__ = ["rewrite", "upgrade", "fold", "lower", "to_scatternd", "prepare_for_tensorrt", "repair",
           "prepare", "check", "ModelLike"]

logger = logging.getLogger("scatter_rewrite")
ModelLike = TypeVar("ModelLike")


def _is_graphsurgeon(model: Any) -> bool:
    return type(model).__module__.startswith("onnx_graphsurgeon")


def _to_ir(model: Any) -> ir.Model:
    if isinstance(model, ir.Model):
        return model.clone()
    if isinstance(model, onnx.ModelProto):
        check_in_memory_references(model)
        return deserialize(model)
    if _is_graphsurgeon(model):
        import onnx_graphsurgeon as gs

        return deserialize(gs.export_onnx(model), "the onnx_graphsurgeon graph")
    raise AssertionError(f"{type(model).__name__} passed _check_model")  # (checked before)


def _check_model(function: str, model: Any) -> None:
    """Before any work: ``model`` is of a kind the API takes; OptionTypeError (a TypeError) naming
    what was given and what to pass otherwise."""
    if isinstance(model, (ir.Model, onnx.ModelProto, str, os.PathLike)) or _is_graphsurgeon(model):
        return
    if type(model).__name__ == "ONNXProgram" and type(model).__module__.startswith("torch."):
        raise OptionTypeError(
            f"{function}(): cannot rewrite a torch.onnx.ONNXProgram itself: pass its .model (an "
            "onnx_ir.Model, and you get one back) or .model_proto, or the path it was saved to "
            "(onnx_program.save(path))", parameter="model")
    kinds = (f"{function}(): model must be an onnx.ModelProto, onnx_ir.Model, path (str or "
             f"os.PathLike) or onnx_graphsurgeon.Graph, got {type(model).__name__}")
    if isinstance(model, (bytes, bytearray, memoryview)):
        raise OptionTypeError(f"{kinds}: pass onnx.load_from_string(data) for a serialized model",
                              parameter="model")
    raise OptionTypeError(kinds, parameter="model")


def _check_flags(function: str, **flags: Any) -> None:
    """Before any work: each flag (``validate``, ``return_report``) is a bool; a truthy text such
    as ``"no"`` is refused rather than taken for True."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise OptionTypeError(f"{function}(): {name} must be a bool, got "
                                  f"{type(value).__name__} {value!r}", parameter=name)


def _check_output(function: str, output: Any) -> None:
    if output is not None and not isinstance(output, (str, os.PathLike)):
        raise OptionTypeError(f"{function}(): output must be a path (str or os.PathLike), got "
                              f"{type(output).__name__}", parameter="output")


def _check_call(function: str, model: Any, validate: Any, return_report: Any, output: Any) -> None:
    """The arguments every verb's function takes, checked before any work."""
    _check_model(function, model)
    _check_flags(function, validate=validate, return_report=return_report)
    _check_output(function, output)


def _from_ir(model: ir.Model, like: Any) -> Any:
    if isinstance(like, ir.Model):
        return model
    proto = ir.serde.serialize_model(model)
    if _is_graphsurgeon(like):
        import onnx_graphsurgeon as gs

        return gs.import_onnx(proto)
    return proto


def rewrite(
    model: ModelLike,
    passes: Sequence[ir.passes.PassBase],
    *,
    validate: bool = True,
    inputs: dict | None = None,
    output: str | os.PathLike | None = None,
    return_report: bool = False,
    verb: str = "rewrite",
    options: dict[str, Any] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
) -> ModelLike | tuple[ModelLike, Outcome]:
    """Run ``passes`` on ``model``; return the rewritten model, of the same kind as given.

    By default (``validate=True``, as the command line) the result is proven equal to the
    original in onnxruntime (see :mod:`scatter_rewrite.validate`): a ValidationError is raised
    otherwise, and nothing is returned or written; ``validate=False`` skips the proof, for speed.
    A result proven in onnx.reference that onnxruntime cannot run is returned, with a warning
    logged and the report's status ``UNRUNNABLE`` saying why, where the model is meant for
    onnxruntime (:func:`~scatter_rewrite.pipeline.meant_for_onnxruntime`; for another target it
    is ``PASSED``, and ``validation["onnxruntime_note"]`` says what onnxruntime lacks). ``rtol``/``atol`` set your own bound
    for float outputs instead of validation's judgement. For a path, the
    result is written to ``output`` (default ``<stem>.<verb suffix>.onnx`` beside it) and its
    path returned. With ``return_report=True`` the result comes with an
    :class:`~scatter_rewrite.pipeline.Outcome`. Every verb goes through the same orchestration
    as the command line (:func:`scatter_rewrite.pipeline.rewrite_model`).

    Example::

        from scatter_rewrite.passes import MoveOpsetPass, UpgradePass
        upgraded = scatter_rewrite.rewrite(onnx.load("old.onnx"),
                                           [UpgradePass(13), MoveOpsetPass(13)])
    """
    function = VERBS[verb].function or verb if verb in VERBS else "rewrite"
    _check_call(function, model, validate, return_report, output)
    if isinstance(passes, (str, bytes)) or not isinstance(passes, Sequence) \
            or not all(isinstance(p, ir.passes.PassBase) for p in passes):
        raise OptionTypeError(f"{function}(): passes must be a list of onnx_ir passes "
                              "(scatter_rewrite.passes), got "
                              f"{type(passes).__name__}", parameter="passes")
    _check_arguments(function, rtol, atol, inputs)
    if isinstance(model, (str, os.PathLike)):
        _check_not_input(function, verb, model, output)
        if validate and inputs is not None:
            _check_inputs_cover(function, _input_names_in_file(model), inputs)
        outcome = rewrite_file(verb, model, options=options, passes=passes, output=output,
                               validate=validate, inputs=inputs, rtol=rtol, atol=atol)
        _warn_unrunnable(outcome, str(model))
        # (the kind given: a str for a str)
        result: Any = outcome.output if isinstance(model, str) else Path(outcome.output)
        return (result, outcome) if return_report else result
    if output is not None:
        raise OptionError(f"{function}(): output= is for a model given as a path; save the "
                          "returned model instead", parameter="output")
    working = _to_ir(model)
    if validate and inputs is not None:
        _check_inputs_cover(function, _input_names(working), inputs)
    started = time.perf_counter()
    # Nothing is saved: the passes, the checker and validation's onnxruntime sessions run on the
    # model in memory (both models' weights handed to onnxruntime as they are held, not copied).
    with _returned_in_memory():
        outcome = rewrite_model(working, passes, None, None, verb=verb, options=options,
                                source_name="the model given", validate=validate, inputs=inputs,
                                rtol=rtol, atol=atol, original=lambda: _to_ir(model))
    return _returned(outcome, started, working, model, return_report)


def _returned(outcome: Outcome, started: float, working: ir.Model, model: Any,
              return_report: bool) -> Any:
    """The rewritten model of an in-memory call, of the kind given, with its report if asked."""
    outcome.input = outcome.output = "<in memory>"
    outcome.seconds = time.perf_counter() - started
    for note in outcome.notes:
        logger.warning("the model given: %s", note)
    _warn_unrunnable(outcome, "the model given")
    result = _from_ir(working, model)
    return (result, outcome) if return_report else result


def _check_not_input(function: str, verb: str, model: str | os.PathLike,
                     output: str | os.PathLike | None) -> None:
    """Before any work: ``output`` (a file, or a folder for the default name) is not the model
    file itself; the API never replaces its input."""
    if output is None:
        return
    from scatter_rewrite.pipeline import resolve_output
    from scatter_rewrite.verbs import Verb

    declared = VERBS[verb] if verb in VERBS else Verb(verb, "rewritten", lambda: [])
    try:
        resolve_output(Path(model), declared, output, in_place=False)
    except OptionError as e:
        raise OptionError(f"{function}(): output={os.fspath(output)!r} is the model given, "
                          "which the API never replaces: write the output elsewhere",
                          parameter="output") from e


def _warn_unrunnable(outcome: Outcome, name: str) -> None:
    if outcome.status == UNRUNNABLE:  # (returned: the model is correct, and the caller may want it)
        logger.warning("%s: %s", name, outcome.error)


def _check_arguments(function: str, rtol: Any, atol: Any, inputs: Any) -> None:
    """Before any work: ``rtol``/``atol`` are finite numbers >= 0 and ``inputs`` a dict of input
    name -> array; OptionTypeError (a TypeError) or OptionError (a ValueError) naming the
    parameter otherwise."""
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise OptionTypeError(f"{function}(): {name} must be a float, got "
                                  f"{type(value).__name__} {value!r}")
        if not (math.isfinite(value) and value >= 0):
            raise OptionError(f"{function}(): {name}={value!r} is out of range: a tolerance is a "
                              "finite number >= 0")
    if inputs is None:
        return
    if not isinstance(inputs, Mapping):
        raise OptionTypeError(f"{function}(): inputs must be a dict of model input name -> array, "
                              f"got {type(inputs).__name__}")
    keys = [k for k in inputs if not isinstance(k, str)]
    if keys:
        raise OptionTypeError(f"{function}(): inputs must be keyed by input name (str), got the "
                              f"key {keys[0]!r}")
    # (an array or what NumPy makes one of, a list or a tensor; never a text, which it would take)
    values = [(k, v) for k, v in inputs.items()
              if v is None or isinstance(v, (str, bytes, Mapping))]
    if values:
        name, value = values[0]
        raise OptionTypeError(f"{function}(): inputs[{name!r}] must be an array, got "
                              f"{type(value).__name__}")


def _input_names(model: ir.Model) -> list[str]:
    """The graph inputs a run must be given (those not backed by an initializer)."""
    return [v.name for v in model.graph.inputs if v.name not in model.graph.initializers]


def _input_names_in_file(path: str | os.PathLike) -> list[str] | None:
    """:func:`_input_names` of the model file at ``path``, its weights unread; None if it cannot
    be read (the rewrite then says why)."""
    try:
        proto = onnx.load(os.fspath(path), load_external_data=False)
    except Exception:
        return None
    initialized = {t.name for t in proto.graph.initializer}
    return [v.name for v in proto.graph.input if v.name not in initialized]


def _check_inputs_cover(function: str, names: list[str] | None, inputs: Mapping) -> None:
    missing = [n for n in names or [] if n not in inputs]
    if missing:
        raise OptionError(f"{function}(): inputs lacks the key(s) {', '.join(map(repr, missing))}: "
                          "give an array for every model input")


class _returned_in_memory:
    """Around an in-memory rewrite: a failed validation says that no model is returned (the CLI's
    message says that nothing is written)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, tb) -> bool:
        if isinstance(error, ValidationError) and "nothing written" in str(error):
            said = type(error)(str(error).replace("nothing written", "no model returned"))
            said.__dict__.update(error.__dict__)  # (the passes that ran, for the report)
            raise said from error
        return False


def _run_verb(name: str, model: Any, options: dict[str, Any], validate: bool, inputs: dict | None,
              rtol: float | None, atol: float | None, output: str | os.PathLike | None,
              return_report: bool) -> Any:
    verb = VERBS[name]
    _check_call(verb.function or name, model, validate, return_report, output)
    options = verb.bind(options)
    return rewrite(model, verb.make_passes(**options), verb=name, options=options,
                   validate=validate, inputs=inputs, rtol=rtol, atol=atol, output=output,
                   return_report=return_report)


def upgrade(model: ModelLike, *, opset: int | None = None, validate: bool = True,
            inputs: dict | None = None, rtol: float | None = None, atol: float | None = None,
            output: str | os.PathLike | None = None, return_report: bool = False) -> ModelLike:
    """Every deprecated ``Scatter`` becomes ``ScatterElements``; the model moves to ``opset``
    (default: its own if >= 11, else 11; at most the highest the installed onnx defines). See
    :mod:`scatter_rewrite.passes.upgrade`.

    ``validate`` (default True, as the command line; False skips it) proves the result in
    onnxruntime and raises ValidationError where it fails (``inputs``: your own, name -> array;
    ``rtol``/``atol``: your own bound for float outputs, see docs/validation.md); ``output``:
    where a model given as a path is written; ``return_report=True`` returns
    ``(model, Outcome)``. The result is of the kind given (ModelProto, onnx_ir.Model, path,
    graph).

    Example::

        import onnx, scatter_rewrite
        model = scatter_rewrite.upgrade(onnx.load("old.onnx"), opset=13)
        onnx.save(model, "new.onnx")
    """
    return _run_verb("upgrade", model, {"opset": opset}, validate, inputs, rtol, atol, output,
                     return_report)


def fold(model: ModelLike, *, size_limit: int | None = None, validate: bool = True,
         inputs: dict | None = None, rtol: float | None = None, atol: float | None = None,
         output: str | os.PathLike | None = None, return_report: bool = False) -> ModelLike:
    """Replace every scatter whose inputs are all constant by an initializer computed with our
    NumPy evaluator (and the constant chains feeding it); ``size_limit``: leave results of more
    bytes unfolded. See :mod:`scatter_rewrite.passes.fold`; the other arguments as in
    :func:`upgrade`.

    Example::

        folded, report = scatter_rewrite.fold("model.onnx", output="model.folded.onnx",
                                              return_report=True)
    """
    return _run_verb("fold", model, {"size_limit": size_limit}, validate, inputs, rtol, atol,
                     output, return_report)


def lower(model: ModelLike, *, opset: int = DEFAULT_LOWER_OPSET, mode: str = "standard",
          validate: bool = True,
          inputs: dict | None = None, rtol: float | None = None, atol: float | None = None,
          output: str | os.PathLike | None = None, return_report: bool = False) -> ModelLike:
    """Lower scatter reductions (and TensorScatter) the target ``opset`` lacks into exact standard
    ops (``mode="standard"``), custom-domain nodes (``"custom"``: they need
    :func:`scatter_rewrite.custom_ops.register`) or TensorRT's plugin form
    (``"tensorrt-plugin"``); move the model to ``opset``. See :mod:`scatter_rewrite.passes.lower`;
    the other arguments as in :func:`upgrade`.

    Example::

        onnx_program = torch.onnx.export(model, args, dynamo=True)
        lowered = scatter_rewrite.lower(onnx_program.model, opset=13)
    """
    return _run_verb("lower", model, {"opset": opset, "mode": mode}, validate, inputs, rtol, atol,
                     output, return_report)


def to_scatternd(model: ModelLike, *, validate: bool = True, inputs: dict | None = None,
                 rtol: float | None = None, atol: float | None = None,
                 output: str | os.PathLike | None = None, return_report: bool = False) -> ModelLike:
    """Every ScatterElements becomes an exactly equivalent ScatterND.
    See :mod:`scatter_rewrite.passes.to_scatternd`; the arguments as in :func:`upgrade`.

    Example::

        nd = scatter_rewrite.to_scatternd(onnx.load("model.onnx"))
    """
    return _run_verb("to_scatternd", model, {}, validate, inputs, rtol, atol, output,
                     return_report)


def prepare_for_tensorrt(model: ModelLike, *, trt_version: str = DEFAULT_TRT_VERSION,
                         fix_dims: dict[str, int] | None = None, validate: bool = True,
                         inputs: dict | None = None, rtol: float | None = None,
                         atol: float | None = None, output: str | os.PathLike | None = None,
                         return_report: bool = False) -> ModelLike:
    """The whole TensorRT preparation: upgrade, fold, lower TensorScatter, make every scatter
    TensorRT-ready for ``trt_version`` ("8.6", "10" or "11"). See
    :mod:`scatter_rewrite.passes.tensorrt`. ``fix_dims`` (symbolic dimension name -> size)
    fixes those input dimensions first, so that a reduction with a dynamic number of updates can
    be lowered for TensorRT 8.6 (:mod:`scatter_rewrite.passes.fix_dims`). The other arguments as
    in :func:`upgrade`.

    Example::

        ready = scatter_rewrite.prepare_for_tensorrt("model.onnx", trt_version="8.6",
                                                     fix_dims={"batch": 4})
    """
    return _run_verb("tensorrt", model, {"trt_version": trt_version, "fix_dims": fix_dims},
                     validate, inputs, rtol, atol, output, return_report)


def repair(model: ModelLike, *, assume: str | None = None, validate: bool = True,
           inputs: dict | None = None, rtol: float | None = None, atol: float | None = None,
           output: str | os.PathLike | None = None, return_report: bool = False) -> ModelLike:
    """Repair the TorchScript exporter's accumulating scatters (zeros -> scatter without reduction
    -> Add, wrong with repeated indices: pytorch/pytorch#61034, #111159) into what PyTorch
    computed: the scatter with reduction add, lowered exactly below opset 16; a lookalike that is
    not certainly the pattern is left alone, with the reason in the report. See
    :mod:`scatter_rewrite.passes.repair`.

    The one function that changes a model's results, so its validation proves what it promises
    instead of equality (:mod:`scatter_rewrite.repair_proof`): bit for bit equal to the original
    on inputs without repeated indices, equal to the evaluator's add-reduction on inputs with
    repeated indices (``inputs``, when given, too; ``rtol``/``atol``: your own bound for its float
    outputs). dynamo's ``scatter_reduce(reduce="mean", include_self=False)`` becomes sum / count;
    ``assume="scatter-reduce-mean"`` does the same for a plain ScatterElements named
    ``node_scatter_reduce`` (``include_self=True``: only the name says it is a mean). The other
    arguments as in :func:`upgrade`.

    Example::

        repaired = scatter_rewrite.repair("gcn_ts11.onnx", output="gcn.repaired.onnx")
    """
    return _run_verb("repair", model, {"assume": assume}, validate, inputs, rtol, atol, output,
                     return_report)


def prepare(model: ModelLike, *, target: str | None = None, max_intermediate_mib: int | None = None,
            fix_dims: dict[str, int] | None = None, runtime_proof: bool = True,
            runtime_python: str | os.PathLike | None = None, validate: bool = True,
            inputs: dict | None = None, rtol: float | None = None, atol: float | None = None,
            output: str | os.PathLike | None = None, return_report: bool = False) -> ModelLike:
    """Bring the model to ``target`` (a name of :mod:`scatter_rewrite.targets`, as ``check``
    takes it; docs/targets.md): ``"tensorrt-10"`` does what :func:`prepare_for_tensorrt` does,
    ``"opset-13"`` what ``lower(opset=13)`` does; ``"no-scatter"`` (and ``"qnn"``, ``"rknn"``)
    writes every scatter as an exact scatter-free form, refusing a node whose form holds more
    than ``max_intermediate_mib`` MiB at once (default 256); ``"ort-cpu"`` rewrites the
    float16/bfloat16 reductions onnxruntime's CPU provider lacks. ``fix_dims``: tensorrt-X only.

    For a target with a runtime of its own (openvino, tvm, mnn, litert), validation also runs the
    prepared model there, on the same inputs, and judges it in the same way (docs/validation.md):
    in this python where the runtime is importable, or in ``runtime_python`` (the python of a venv
    that has it; litert's always is one); ``runtime_proof=False`` turns that off. The report's
    ``validation["proven_in"]`` names both ("onnxruntime and OpenVINO 2026.4.1"), or only
    onnxruntime where the runtime does not run here (``validation["in_runtime"]`` says why).
    The other arguments as in :func:`upgrade`.

    Example::

        npu_ready = scatter_rewrite.prepare("gnn.onnx", target="qnn", validate=True)
    """
    if isinstance(runtime_python, os.PathLike):
        runtime_python = os.fspath(runtime_python)
    return _run_verb("prepare", model, {"target": target,
                                        "max_intermediate_mib": max_intermediate_mib,
                                        "fix_dims": fix_dims, "runtime_proof": runtime_proof,
                                        "runtime_python": runtime_python},
                     validate, inputs, rtol, atol, output, return_report)


def check(model: ModelLike, *, target: str = DEFAULT_CHECK_TARGET) -> CheckReport:
    """The model's readiness for ``target`` (a name of :mod:`scatter_rewrite.targets`:
    "tensorrt-8.6", "tensorrt-10", "tensorrt-11", "opset-N", "litert", "mnn", "no-scatter", "qnn",
    "rknn", "openvino", "openvino-npu", "ort-cpu", "ort-web", "tvm"; docs/targets.md), as
    ``scatter-rewrite check`` reports it: onnx.checker (full), each scatter node, and a dry run
    of the verb that reaches the target (``report.status``: READY, FIXABLE, BLOCKED or INVALID;
    ``report.fix``, ``report.dry_run``). Returned as data, nothing written. ``model``: as for the
    other functions (the model given is not changed).

    Example::

        report = scatter_rewrite.check("model.onnx", target="tensorrt-10")
        if report.blocked:
            print(report.status, report.fix,
                  [(f.node, f.blockers, f.fix) for f in report.findings if f.blocked])
    """
    from scatter_rewrite.readiness import check_report

    _check_model("check", model)
    if not isinstance(target, str):
        raise OptionTypeError(f"check(): target must be a str, got {type(target).__name__} "
                              f"{target!r}", parameter="target")
    if isinstance(model, (str, os.PathLike)):
        return check_report(model, target)
    working = _to_ir(model)
    with tempfile.TemporaryDirectory(prefix="scatter-rewrite-") as tmp:
        path = Path(tmp, "model.onnx")
        save_model(working, path)
        report = check_report(path, target, name="the model given")
    return report
