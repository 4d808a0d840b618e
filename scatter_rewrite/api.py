"""The Python API: every pass takes and returns the model kind it was given.

Accepted: ``onnx.ModelProto``, ``onnx_ir.Model``, a path (str or ``os.PathLike``), an
``onnx_graphsurgeon.Graph``. The result is of the same kind: a new ModelProto, a new ir.Model
(the input is cloned, never mutated), the path of the written model, a new graphsurgeon Graph.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import onnx
import onnx_ir as ir

from scatter_rewrite.errors import ScatterRewriteError
from scatter_rewrite.model_io import check_in_memory_references, deserialize, save_model
from scatter_rewrite.pipeline import (
    Outcome, Verb, VERBS, check_model, fixed_dim_sizes, result_dict, rewrite_file, run_passes,
)
from scatter_rewrite.spec import check_scatter_nodes

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
    if type(model).__name__ == "ONNXProgram" and type(model).__module__.startswith("torch."):
        raise ScatterRewriteError(
            "cannot rewrite a torch.onnx.ONNXProgram itself: pass its .model (an onnx_ir.Model, and you get one "
            "back) or .model_proto, or the path it was saved to (onnx_program.save(path))")
    raise ScatterRewriteError(
        f"cannot rewrite a {type(model).__name__}: pass an onnx.ModelProto, onnx_ir.Model, path or onnx_graphsurgeon.Graph"
    )


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
    validate: bool = False,
    inputs: dict | None = None,
    output: str | os.PathLike | None = None,
    return_report: bool = False,
    verb: str = "rewrite",
    rtol: float | None = None,
    atol: float | None = None,
) -> ModelLike | tuple[ModelLike, Outcome]:
    """Run ``passes`` on ``model``; return the rewritten model, of the same kind as given.

    ``validate=True`` proves the result equal to the original in onnxruntime (see
    :mod:`scatter_rewrite.validate`) and raises ValidationError otherwise; ``rtol``/``atol`` set
    your own bound for float outputs instead of validation's judgement. For a path, the result
    is written to ``output`` (default ``<stem>.<verb suffix>.onnx`` beside it) and its path returned.
    With ``return_report=True`` the result comes with an :class:`~scatter_rewrite.pipeline.Outcome`.
    """
    if isinstance(model, (str, os.PathLike)):
        outcome = rewrite_file(verb, model, passes=passes, output=output, validate=validate,
                               inputs=inputs, rtol=rtol, atol=atol)
        result: Any = outcome.output if isinstance(model, str) else Path(outcome.output)  # the kind given
        return (result, outcome) if return_report else result

    from scatter_rewrite import validate as validation

    working = _to_ir(model)
    check_scatter_nodes(working)  # (the passes do too, but validation plans its inputs from the nodes first)
    if not validate:
        results = run_passes(working, passes)
        outcome = Outcome("<in memory>", "<in memory>", [result_dict(r) for r in results], status="PASSED")
        result = _from_ir(working, model)
        return (result, outcome) if return_report else result
    plan = validation.plan_validation(working, inputs=inputs, dim_sizes=fixed_dim_sizes(passes),
                                      rtol=rtol, atol=atol)
    with tempfile.TemporaryDirectory(prefix="scatter-rewrite-") as tmp:
        # Both models are saved as the CLI saves them: external weights (an ir.load-ed model's) are
        # written beside them in the temporary folder, which is where onnxruntime looks for them.
        original_path, rewritten_path = Path(tmp, "original.onnx"), Path(tmp, "rewritten.onnx")
        save_model(working, original_path)
        results = run_passes(working, passes)
        validation.allow_float_rounding(plan, results)
        outcome = Outcome("<in memory>", "<in memory>", [result_dict(r) for r in results], status="PASSED")
        if any(r.modified for r in results):
            save_model(working, rewritten_path)
            check_model(rewritten_path, original_path, source_name="the model given")  # (not our temporary copy)
            prove = VERBS[verb].prove if verb in VERBS else None
            if prove is not None:  # repair's own proof: its results are meant to change
                outcome.validation = prove(original_path, rewritten_path, 0, inputs, plan.tolerance)
            else:
                proven = validation.validate(original_path, rewritten_path, plan)
                outcome.validation = proven.to_dict()
        else:  # as the CLI says it
            outcome.validation = {"checked_against": "nothing rewritten: the model is unchanged", "max_abs_diff": 0.0}
    result = _from_ir(working, model)
    return (result, outcome) if return_report else result


def _verb(name: str, model: Any, options: dict, **kwargs: Any) -> Any:
    verb: Verb = VERBS[name]
    return rewrite(model, verb.make_passes(**options), verb=name, **kwargs)


def upgrade(model: ModelLike, opset: int | None = None, **kwargs: Any) -> ModelLike:
    """Every deprecated ``Scatter`` becomes ``ScatterElements``; the model moves to ``opset``
    (default: its own if >= 11, else 11). See :mod:`scatter_rewrite.passes.upgrade`."""
    return _verb("upgrade", model, {"opset": opset}, **kwargs)


def fold(model: ModelLike, size_limit: int | None = None, **kwargs: Any) -> ModelLike:
    """Replace every scatter whose inputs are all constant by an initializer computed with our
    NumPy evaluator (and the constant chains feeding it). See :mod:`scatter_rewrite.passes.fold`."""
    return _verb("fold", model, {"size_limit": size_limit}, **kwargs)


def lower(model: ModelLike, opset: int = 13, mode: str = "standard", **kwargs: Any) -> ModelLike:
    """Lower scatter reductions (and TensorScatter) the target ``opset`` lacks into exact standard
    ops (``mode="standard"``) or custom-domain nodes (``mode="custom"``); move the model to ``opset``.
    See :mod:`scatter_rewrite.passes.lower`."""
    return _verb("lower", model, {"opset": opset, "mode": mode}, **kwargs)


def to_scatternd(model: ModelLike, **kwargs: Any) -> ModelLike:
    """Every ScatterElements becomes an exactly equivalent ScatterND.
    See :mod:`scatter_rewrite.passes.to_scatternd`."""
    return _verb("to_scatternd", model, {}, **kwargs)


def repair(model: ModelLike, **kwargs: Any) -> ModelLike:
    """Repair the TorchScript exporter's accumulating scatters (zeros -> scatter without reduction
    -> Add, wrong with repeated indices: pytorch/pytorch#61034, #111159) into what PyTorch computed:
    the scatter with reduction add, lowered exactly below opset 16. The one function that changes
    a model's results; ``validate=True`` proves them (:mod:`scatter_rewrite.repair_proof`).
    See :mod:`scatter_rewrite.passes.repair`."""
    return _verb("repair", model, {}, **kwargs)


def prepare_for_tensorrt(model: ModelLike, trt_version: str = "10", fix_dims: dict[str, int] | None = None,
                         **kwargs: Any) -> ModelLike:
    """The whole TensorRT preparation: upgrade, fold, lower TensorScatter, make every scatter
    TensorRT-ready for ``trt_version``. See :mod:`scatter_rewrite.passes.tensorrt`. ``fix_dims``
    (symbolic dimension name -> size) fixes those input dimensions first, so that a reduction with a
    dynamic number of updates can be lowered for TensorRT 8.6 (:mod:`scatter_rewrite.passes.fix_dims`)."""
    return _verb("tensorrt", model, {"trt_version": trt_version, "fix_dims": fix_dims}, **kwargs)
