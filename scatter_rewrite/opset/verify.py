"""A moved model's verification: it must pass onnx.checker (full) and onnxruntime's session creation
wherever the model given did; else a ConversionError naming the step, raised before anything is
returned."""

from __future__ import annotations

import dataclasses

import onnx
import onnx.checker
import onnx.helper
import onnx_ir as ir

from scatter_rewrite.errors import ConversionError
from scatter_rewrite.ort_folding import optimizers_left_out

__all__ = ["checkable", "Moved", "verify_move"]


@dataclasses.dataclass(frozen=True)
class Moved:
    """A node the move converted: how an error names it and its step."""

    where: str  # describe(node, scope)
    op_type: str
    since: int | None
    name: str | None


# Initializers bigger than this go to the structural check as graph inputs of their type: the check
# reads the graph, not the weights (a model with gigabytes of external data is not loaded for it).
_CHECK_INLINE_BYTES = 1 << 16
# Domains whose ops a stock onnxruntime session knows; a model with others is checked by
# onnx.checker alone (a custom-domain lowering's nodes run only with their own kernels registered).
_ORT_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})


def checkable(model: ir.Model) -> onnx.ModelProto:
    """``model`` serialized for :func:`_failure`, its big initializers as typed graph inputs."""
    detached = []
    for name, value in list(model.graph.initializers.items()):
        tensor = value.const_value
        if (tensor is not None and tensor.nbytes > _CHECK_INLINE_BYTES
                and not value.is_graph_input()):
            detached.append((value, tensor))
            value.const_value = None
            del model.graph.initializers[name]
    try:
        proto = ir.serde.serialize_model(model)
    finally:
        for value, tensor in detached:
            value.const_value = tensor
            model.graph.register_initializer(value)
    for value, tensor in detached:
        proto.graph.input.append(onnx.helper.make_tensor_value_info(value.name, tensor.dtype.value,
                                                                    tensor.shape.dims))
    return proto


def _failure(proto: onnx.ModelProto) -> str | None:
    """Why ``proto`` fails onnx.checker (full) or onnxruntime's session creation; None if
    neither."""
    try:
        onnx.checker.check_model(proto, full_check=True)
    # (ValidationError, InferenceError, and C++ errors without a type of their own)
    except Exception as e:
        return f"onnx.checker: {_first_line(e)}"
    domains = {n.domain for n in proto.graph.node} | {f.domain for f in proto.functions}
    if proto.ByteSize() >= 2**31 - 1 or not domains <= _ORT_DOMAINS:
        return None
    import onnxruntime as ort

    # Creating the session is the check, with default options (graph optimizations on): as a
    # user's session loads the model, so a model only an optimizer rejects is refused here too.
    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"],
                             disabled_optimizers=optimizers_left_out(proto, []))
    except Exception as e:  # onnxruntime's own exception types
        return f"onnxruntime: {_first_line(e)}"
    return None


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def verify_move(model: ir.Model, before: onnx.ModelProto, moved: list[Moved],
                 target: int) -> None:
    """ConversionError when the moved model fails onnx.checker or onnxruntime's session creation and
    the model before the move did not, naming the moved node the failure names (else every moved
    op)."""
    failure = _failure(checkable(model))
    # (a fault the move did not cause: the caller's check)
    if failure is None or _failure(before) == failure:
        return
    named = [m for m in moved if m.name and f"'{m.name}'" in failure or f"node {m.name}" in failure]
    named = named or [m for m in moved if m.op_type in failure]
    if named:
        first = named[0]
        step = f"{first.op_type}-{first.since} -> opset {target}"
        raise ConversionError(f"cannot convert {first.where} to opset {target}: the step {step} "
                              f"gives a model that fails {failure}")
    ops = ", ".join(sorted({f"{m.op_type}-{m.since}" for m in moved}))
    raise ConversionError(f"cannot move the model to opset {target}: after converting {ops}, it "
                          f"fails {failure}")


# The exact rewrites the table's ``rewrite(name)`` steps name: each takes (node, scope, target),
# returns a :data:`Form` (Unchanged, Done, Replaced or Prepared) and raises ConversionError when
