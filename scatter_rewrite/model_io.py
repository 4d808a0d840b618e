"""Load and save models: external data memory-mapped on load, kept on save, writes atomic.

Loading goes through ``onnx_ir``, which maps external weights instead of reading them, so a pass
that never looks at a weight never pages it in. Saving writes the model (and its external data)
into a temporary folder beside the destination and renames into place only once everything is
written and checked, so a failure never leaves a half-written file nor touches the input.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import google.protobuf.message
import onnx
import onnx_ir as ir

from scatter_rewrite import _protowire
from scatter_rewrite.errors import ModelLoadError

# The protobuf limit is 2 GiB; stay clear of it so that metadata and graph fit alongside weights.
PROTO_LIMIT_BYTES = 2**31 - 64 * 2**20
EXTERNAL_THRESHOLD_BYTES = 1024  # tensors at least this big go to the external data file


def load_model(path: str | os.PathLike) -> ir.Model:
    """Load ``path`` as an ``ir.Model`` without reading external weights, or raise ModelLoadError."""
    return to_ir(load_proto(path), path)


def load_proto(path: str | os.PathLike) -> onnx.ModelProto:
    """The parsed file (big inline weights as references into it, external ones unread), checked to
    be an ONNX model whose external data files exist; ModelLoadError otherwise."""
    path = Path(path)
    if not path.exists():
        raise ModelLoadError(f"{path}: no such file; check the path")
    if path.is_dir():
        raise ModelLoadError(f"{path}: is a folder, not an .onnx file")
    if path.stat().st_size == 0:
        raise ModelLoadError(f"{path}: the file is empty (0 bytes); re-export the model")
    try:
        try:  # big inline weights mapped, not read (see _protowire)
            proto = _protowire.load_proto(path)
        except _protowire.WireError:
            proto = onnx.load(path, load_external_data=False)  # says what is wrong with the file
    except (google.protobuf.message.DecodeError, ValueError, RuntimeError, UnicodeDecodeError) as e:
        raise ModelLoadError(
            f"{path}: not a readable ONNX model (truncated or not protobuf: {_first_line(e)}); re-export it"
        ) from e
    if not proto.HasField("graph") or proto.ir_version <= 0 or not proto.opset_import:
        raise ModelLoadError(
            f"{path}: not an ONNX model (no graph, IR version or opset import); is it truncated?"
        )
    _check_external_files(proto, path)
    return proto


def to_ir(proto: onnx.ModelProto, path: str | os.PathLike) -> ir.Model:
    """``proto`` (from :func:`load_proto` of ``path``) as an ``ir.Model``; ModelLoadError if the IR rejects it."""
    try:
        model = ir.serde.deserialize_model(proto)
    except Exception as e:  # the IR rejects structurally broken graphs
        raise ModelLoadError(f"{path}: invalid ONNX model: {_first_line(e)}") from e
    ir.external_data.set_base_dir(model.graph, Path(path).parent)
    return model


def _check_external_files(proto: onnx.ModelProto, path: Path) -> None:
    for tensor in _external_tensors(proto):
        location = next((e.value for e in tensor.external_data if e.key == "location"), None)
        if location is not None and not (path.parent / location).exists():
            raise ModelLoadError(
                f"{path}: external data file '{location}' for tensor '{tensor.name}' is missing; "
                "keep it beside the model"
            )


def has_external_data(proto: onnx.ModelProto) -> bool:
    """Whether any tensor of ``proto`` (subgraphs included) has its data outside the protobuf."""
    return next(_external_tensors(proto), None) is not None


def _external_tensors(proto: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    from onnx.external_data_helper import _get_all_tensors  # the one walker that sees subgraphs

    for tensor in _get_all_tensors(proto):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            yield tensor


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _needs_external_data(model: ir.Model) -> bool:
    total = 0
    for scope_initializers in _all_initializers(model):
        for value in scope_initializers:
            tensor = value.const_value
            if tensor is None:
                continue
            if isinstance(tensor, ir.ExternalTensor) and not _protowire.is_self_mapped(tensor):
                return True  # it came with external data: keep it that way
            total += tensor.nbytes
    return total > PROTO_LIMIT_BYTES


def _all_initializers(model: ir.Model):
    from scatter_rewrite.graph import iter_scopes

    for scope in iter_scopes(model):
        if isinstance(scope.body, ir.Graph):
            yield scope.body.initializers.values()


def _release_mapped_weights(model: ir.Model) -> None:
    """Unmap the external weights a pass read: once written, validation (two onnxruntime
    sessions, which map the files themselves) must not find them still resident in this process.
    A tensor read again is mapped again on demand."""
    for graph in model.graphs():
        for value in graph.initializers.values():
            if isinstance(value.const_value, ir.ExternalTensor):
                value.const_value.release()


def data_file_name(path: Path) -> str:
    return path.name + ".data"


@contextlib.contextmanager
def staged_save(model: ir.Model | onnx.ModelProto, destination: str | os.PathLike) -> Iterator[Path]:
    """Write ``model`` into a temporary folder beside ``destination``; yield the staged model path.
    (A ModelProto, one without external data, is written as it is: see ``passes.upgrade.upgrade_proto``.)

    When the ``with`` body returns (after checks and validation on the staged file), the files are
    renamed into place; if it raises, they are deleted and nothing at ``destination`` changes.
    """
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".scatter-rewrite-", dir=destination.parent))
    try:
        staged = staging / destination.name
        if isinstance(model, onnx.ModelProto):
            onnx.save(model, staged)
        elif _needs_external_data(model):
            ir.save(model, staged, external_data=data_file_name(destination),
                    size_threshold_bytes=EXTERNAL_THRESHOLD_BYTES)
        else:
            _protowire.save_inline(model, staged)  # big weights written from their buffers
        if not isinstance(model, onnx.ModelProto):
            _release_mapped_weights(model)
        del model  # validation of the staged file need not find the rewritten weights still held here
        yield staged
        # The data file first: the model file that points at it appears last.
        for name in sorted(os.listdir(staging), key=lambda n: n == destination.name):
            os.replace(staging / name, destination.parent / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def save_model(model: ir.Model, destination: str | os.PathLike) -> Path:
    with staged_save(model, destination):
        pass
    return Path(destination)
