"""``onnx.checker`` (full) on a rewritten model: a file, or a model held in memory.

A model in memory is checked without its weights' bytes (the checker reads every byte of a tensor
it is given, and looks for external data relative to the working folder): :func:`checkable_proto`
gives it the model with each big main-graph weight declared a graph input of its type and shape
instead, which is all the checker and shape inference judge of it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import onnx
import onnx_ir as ir

from scatter_rewrite.errors import InvalidModelError
from scatter_rewrite.said import call, said

__all__ = ["check_in_memory", "check_model", "checkable_proto",
           "checker_failure", "checker_failure_in_memory"]

def check_model(path: Path, source: Path | None = None, source_name: str | None = None) -> None:
    """``onnx.checker`` (full) on the rewritten model at ``path``; InvalidModelError if it fails,
    saying so of the input too when ``source`` fails it the same way (the rewrite did not cause it).
    ``source_name``: how the message names the input (default: its path)."""
    failure = checker_failure(path)
    if failure is None:
        return
    # (The source through its real path: a model file that is a symlink into another folder has its
    # big inline weights referenced by the real file's name, see _protowire.checkable.)
    before = checker_failure(Path(os.path.realpath(source))) if source is not None else None
    _refuse(failure, before, source_name or str(source))


def check_in_memory(model: ir.Model, original: Callable[[], ir.Model], source_name: str) -> None:
    """:func:`check_model` of a rewritten model held in memory; ``original()`` gives the input,
    untouched, which is checked only where the rewritten model fails."""
    failure = checker_failure_in_memory(model)
    if failure is not None:
        _refuse(failure, checker_failure_in_memory(original()), source_name)


def _refuse(failure: str, before: str | None, source_name: str) -> None:
    if before == failure:
        hint = (said("; ", call("upgrade"), " replaces a deprecated Scatter")
                if "Scatter is deprecated" in failure else "")
        raise InvalidModelError(said(f"{source_name} fails onnx.checker before any rewrite, and "
                                     f"this rewrite does not fix it: {failure}", hint))
    # (the same fault may read differently once nodes moved, e.g. a rewritten export)
    if before is not None:
        raise InvalidModelError(f"{source_name} fails onnx.checker before any rewrite ({before}), "
                                f"and so does the rewritten model: {failure}")
    hint = ""
    # (what a fold's constants let inference see)
    if "Inferred shape and existing shape differ" in failure:
        hint = ("; a shape the model declares (value_info or a graph output) may contradict what "
                "its now-constant values give: check the model's declared shapes")
    raise InvalidModelError(f"the rewritten model fails onnx.checker: {failure}{hint}")


def checker_failure(path: Path) -> str | None:
    """Why ``onnx.checker`` (full) rejects the model file at ``path``, in one line; None if not."""
    from scatter_rewrite._protowire import checkable

    try:
        with checkable(path) as target:  # big inline weights: checked without reading them again
            onnx.checker.check_model(target, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        return _one_line(e)
    return None


def checker_failure_in_memory(model: ir.Model) -> str | None:
    """:func:`checker_failure` of ``model`` held in memory (:func:`checkable_proto`)."""
    try:
        onnx.checker.check_model(checkable_proto(model), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        return _one_line(e)
    return None


def _one_line(e: BaseException) -> str:
    # (the checker's message spans several lines, "of node: \nname: OpType: ...\n is not")
    text = " ".join(str(e).split())
    return (text if len(text) <= 400 else text[:400] + " ...") or type(e).__name__


def checkable_proto(model: ir.Model) -> onnx.ModelProto:
    """``model`` as the checker judges it, without copying its weights: each main-graph weight
    :func:`~scatter_rewrite.in_memory.weights_apart` takes apart becomes a graph input of its dtype
    and shape. ``model`` is unchanged afterwards."""
    from scatter_rewrite.in_memory import weights_apart

    proto, apart = weights_apart(model)
    _declare_as_inputs(proto.graph, set(apart))
    return proto


def _declare_as_inputs(graph: onnx.GraphProto, names: set[str]) -> None:
    """The initializers ``names`` of ``graph`` dropped, each a graph input of its type instead
    (unless one already declares it)."""
    if not names:
        return
    inputs = {i.name for i in graph.input}
    kept = [t for t in graph.initializer if t.name not in names]
    for tensor in graph.initializer:
        if tensor.name in names and tensor.name not in inputs:
            graph.input.append(onnx.helper.make_tensor_value_info(
                tensor.name, tensor.data_type, list(tensor.dims)))
    del graph.initializer[:]
    graph.initializer.extend(kept)
