"""Load and save models: external data memory-mapped on load, kept on save, writes atomic.

Loading goes through ``onnx_ir``, which maps external weights instead of reading them, so a pass
that never looks at a weight never pages it in. Saving writes the model (and its external data)
into a temporary folder beside the destination and renames into place only once everything is
written and checked, so a failure never leaves a half-written file nor touches the input; a file
replaced keeps its permissions, as with ``sed -i`` (:func:`replace_file`).

External data is written to ``<output>.data``, or, when a model is rewritten in place, to the
input's own data file if it had exactly one (:func:`in_place_data_name`). Tensors count towards the
2 GiB protobuf limit, and go to the data file, wherever they are: initializers and tensor attributes
(a Constant's ``value``) of the main graph, subgraphs and local functions.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import google.protobuf.message
import onnx
import onnx_ir as ir

from scatter_rewrite import _protowire
from scatter_rewrite.errors import ModelLoadError, WriteError
from scatter_rewrite.said import param, said

__all__ = [
    "BEFORE_RENAME", "check_in_memory_references", "data_file_name", "deserialize",
    "external_data_files",
    "EXTERNAL_THRESHOLD_BYTES", "has_external_data", "in_place_data_name",
    "input_data_files", "load_model", "load_proto", "proto_tensors", "PROTO_LIMIT_BYTES",
    "replace_file",
    "save_model", "staged_save", "to_ir", "unwritable_folder", "write_error", "WRITTEN_OUTPUTS",
]

# The protobuf limit is 2 GiB; stay clear of it so that metadata and graph fit alongside weights.
PROTO_LIMIT_BYTES = 2**31 - 64 * 2**20
EXTERNAL_THRESHOLD_BYTES = 1024  # tensors at least this big go to the external data file


def load_model(path: str | os.PathLike) -> ir.Model:
    """Load ``path`` as an ``ir.Model`` without reading external weights, or raise
    ModelLoadError."""
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
            f"{path}: not a readable ONNX model (truncated or not protobuf: {_first_line(e)}); "
            "re-export it"
        ) from e
    if not proto.HasField("graph") or proto.ir_version <= 0 or not proto.opset_import:
        raise ModelLoadError(
            f"{path}: not an ONNX model (no graph, IR version or opset import); is it truncated?"
        )
    _check_external_files(proto, path)
    return proto


def to_ir(proto: onnx.ModelProto, path: str | os.PathLike) -> ir.Model:
    """``proto`` (from :func:`load_proto` of ``path``) as an ``ir.Model``; ModelLoadError if the IR
    rejects it."""
    model = deserialize(proto, str(path))
    ir.external_data.set_base_dir(model.graph, Path(path).parent)
    _unfence_self_mapped(model, Path(path))
    return model


def deserialize(proto: onnx.ModelProto, what: str = "the model") -> ir.Model:
    """``proto`` as an ``ir.Model``; ModelLoadError naming ``what`` and the innermost cause (onnx_ir
    wraps it in one "Error calling _deserialize_..." per level) if the IR rejects it."""
    try:
        return ir.serde.deserialize_model(proto)
    except (
        Exception
    ) as e:  # the IR rejects structurally broken graphs, and what it does not implement
        cause = e
        while cause.__cause__ is not None or cause.__context__ is not None:
            cause = cause.__cause__ or cause.__context__
        if isinstance(cause, NotImplementedError) and "Sparse" in str(cause):
            raise ModelLoadError(
                f"{what}: holds a sparse tensor (a Constant's sparse_value, a sparse initializer "
                "or attribute), which onnx_ir cannot read yet; store it dense"
            ) from e
        raise ModelLoadError(f"{what}: invalid ONNX model: {_first_line(cause)}") from e


def _unfence_self_mapped(model: ir.Model, path: Path) -> None:
    """Point the inline weights :func:`load_proto` mapped from the model file itself at that file's
    real path, outside onnx_ir's external-data containment checks. Those checks guard data files a
    model names; here the file is the model the user named, and they would refuse it when it is a
    symlink into another folder (a Hugging Face hub snapshot) or has several hard links."""
    real = os.path.realpath(path)
    for value in model.graph.initializers.values():
        tensor = value.const_value
        if (isinstance(tensor, ir.ExternalTensor) and os.fspath(tensor.location) == path.name
                and _protowire.is_self_mapped(tensor)):
            value.const_value = ir.ExternalTensor(
                real,
                tensor.offset,
                tensor.length,
                tensor.dtype,
                shape=tensor.shape,
                name=tensor.name,
                doc_string=tensor.doc_string,
                metadata_props=dict(tensor.metadata_props),
                base_dir="",
            )


def _check_external_files(proto: onnx.ModelProto, path: Path) -> None:
    """Every external data reference is readable as onnx_ir and onnxruntime will read it: a regular
    file inside the model's folder (also once symlinks are resolved), with one hard link, long
    enough for the tensor's bytes. ModelLoadError naming the tensor and the fix otherwise."""
    folder = os.path.realpath(path.parent)
    sizes: dict[str, int] = {}
    for tensor in _external_tensors(proto):
        location = _location(tensor)
        where = f"{path}: tensor '{tensor.name}'"
        if not location:
            raise ModelLoadError(
                f"{where} is marked as external data but names no file; re-export the model"
            )
        if os.path.normpath(location) == path.name:
            continue  # a big inline weight mapped from the model file itself (see _protowire)
        normal = os.path.normpath(location)
        if os.path.isabs(location) or normal == ".." or normal.startswith(".." + os.sep):
            raise ModelLoadError(
                f"{where} keeps its data in '{location}', outside the model's folder, which "
                "onnx and onnxruntime refuse; move the file beside the model and re-save it"
            )
        file = path.parent / location
        if not file.exists():
            raise ModelLoadError(
                f"{path}: external data file '{location}' for tensor '{tensor.name}' is missing; "
                "keep it beside the model"
            )
        if not file.is_file():
            raise ModelLoadError(f"{where}: its external data '{location}' is not a file")
        real = os.path.realpath(file)
        if not real.startswith(folder + os.sep):
            raise ModelLoadError(
                f"{where}: its external data file '{location}' is a symlink to {real}, outside "
                "the model's folder, which onnx refuses; copy the file beside the model (cp -L)"
            )
        if os.stat(real).st_nlink > 1:
            raise ModelLoadError(
                f"{where}: its external data file '{location}' has {os.stat(real).st_nlink} hard "
                "links, which onnx_ir refuses to read; make it a file of its own (cp, not ln)"
            )
        size = sizes.setdefault(real, os.stat(real).st_size)
        offset, length = _extent(tensor)
        if offset + length > size:
            raise ModelLoadError(
                f"{where} needs bytes {offset} to {offset + length} of '{location}', which has "
                f"{size}: the data file is truncated or not this model's; copy it again"
            )


def check_in_memory_references(proto: onnx.ModelProto) -> None:
    """A ModelProto whose weights stayed in external files (``onnx.load(path,
    load_external_data=False)``) no longer knows its folder: the files are looked up from the
    current folder. ModelLoadError saying so plainly when one is not there, instead of failing later
    on a read."""
    for tensor in _external_tensors(proto):
        location = _location(tensor) or ""
        if not location or not os.path.isfile(location):
            raise ModelLoadError(
                f"the ModelProto keeps tensor '{tensor.name}' in the external file '{location}', "
                "which is not found from the current folder: pass the model's path instead, or "
                "load it with its data (onnx.load(path), load_external_data=True)"
            )


def _extent(tensor: onnx.TensorProto) -> tuple[int, int]:
    """(offset, length) of an external tensor's bytes in its file; the length from dtype and dims
    when the reference does not give it (0 when neither says)."""
    entries = {e.key: e.value for e in tensor.external_data}
    try:
        offset = int(entries.get("offset", 0) or 0)
    except ValueError:
        offset = 0
    try:
        return offset, int(entries["length"])
    except (KeyError, ValueError):
        pass
    try:
        bits = ir.DataType(tensor.data_type).bitwidth
    except (ValueError, TypeError, NotImplementedError):
        return offset, 0
    count = 1
    for d in tensor.dims:
        count *= d
    return offset, (count * bits + 7) // 8


def has_external_data(proto: onnx.ModelProto) -> bool:
    """Whether any tensor of ``proto`` (subgraphs included) has its data outside the protobuf."""
    return next(_external_tensors(proto), None) is not None


def _external_tensors(proto: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    for tensor in proto_tensors(proto):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            yield tensor


def proto_tensors(proto: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every TensorProto of ``proto`` in the order the file has them: initializers (sparse ones'
    values and indices too) and tensor attributes (a Constant's ``value``...) of the main graph,
    of every If/Loop/Scan body at any depth, then of every model-local function. (onnx has no
    public walker.)"""
    yield from _body_tensors(proto.graph)
    for function in proto.functions:
        yield from _body_tensors(function)


def _body_tensors(body: onnx.GraphProto | onnx.FunctionProto) -> Iterator[onnx.TensorProto]:
    if isinstance(body, onnx.GraphProto):
        yield from body.initializer
        for sparse in body.sparse_initializer:
            yield from (sparse.values, sparse.indices)
    for node in body.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("sparse_tensor"):
                yield from (a.sparse_tensor.values, a.sparse_tensor.indices)
            for sparse in a.sparse_tensors:
                yield from (sparse.values, sparse.indices)
            if a.HasField("g"):
                yield from _body_tensors(a.g)
            for graph in a.graphs:
                yield from _body_tensors(graph)


def _location(tensor: onnx.TensorProto) -> str | None:
    return next((e.value for e in tensor.external_data if e.key == "location"), None)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _needs_external_data(tensors: list[ir.TensorProtocol]) -> bool:
    """Whether a model whose tensors are ``tensors`` (:func:`_all_tensors`: initializers and tensor
    attributes such as a Constant's ``value``, in every graph, subgraph and function) must be
    written with external data: some tensor came with it (kept that way), or they would not fit in
    one protobuf."""
    total = 0
    for tensor in tensors:
        if isinstance(tensor, ir.ExternalTensor) and not _protowire.is_self_mapped(tensor):
            return True  # it came with external data: keep it that way
        total += tensor.nbytes
    return total > PROTO_LIMIT_BYTES


def _initializer_values(model: ir.Model) -> Iterator[ir.Value]:
    """Every initializer with a value, of the main graph and every subgraph (functions'
    included)."""
    from scatter_rewrite.graph import iter_scopes

    for scope in iter_scopes(model):
        if isinstance(scope.body, ir.Graph):
            yield from (v for v in scope.body.initializers.values() if v.const_value is not None)


def _tensor_attributes(model: ir.Model) -> Iterator[tuple[ir.Node, str, ir.Attr]]:
    """(node, attribute name, attribute) for every tensor attribute (a Constant's ``value``,
    ConstantOfShape's ``value``...) of every node of every graph, subgraph and function."""
    from scatter_rewrite.graph import iter_nodes

    for node, _ in iter_nodes(model):
        if not node.attributes:
            continue
        for name, attr in node.attributes.items():
            if (
                isinstance(attr, ir.Attr)
                and attr.type == ir.AttributeType.TENSOR
                and attr.value is not None
            ):
                yield node, name, attr


def _all_tensors(model: ir.Model) -> Iterator[ir.TensorProtocol]:
    yield from (value.const_value for value in _initializer_values(model))
    yield from (attr.value for _, _, attr in _tensor_attributes(model))


def _release_mapped_weights(tensors: list[ir.TensorProtocol]) -> None:
    """Unmap the external weights a pass read: once written, validation (two onnxruntime
    sessions, which map the files themselves) must not find them still resident in this process.
    A tensor read again is mapped again on demand."""
    for tensor in tensors:
        if isinstance(tensor, ir.ExternalTensor):
            tensor.release()


def _save_with_external_data(model: ir.Model, path: Path, data_name: str) -> None:
    """``ir.save(model, path, external_data=data_name,
    size_threshold_bytes=EXTERNAL_THRESHOLD_BYTES)``, tensor attributes included (``ir.save`` moves
    initializers only, so a big Constant would stay in the protobuf): every initializer, then every
    tensor attribute, over the threshold is written to ``data_name`` beside ``path`` in that order
    (initializers densely, in declaration order); smaller external ones are read back inline. No
    data file is written when no tensor is over the threshold. ``model`` is unchanged afterwards."""
    values = list(_initializer_values(model))
    attributes = list(_tensor_attributes(model))
    tensors = [v.const_value for v in values] + [attr.value for _, _, attr in attributes]
    written = list(tensors)
    big = [i for i, t in enumerate(tensors) if t.nbytes > EXTERNAL_THRESHOLD_BYTES]
    small = [i for i, t in enumerate(tensors)
             if t.nbytes <= EXTERNAL_THRESHOLD_BYTES and isinstance(t, ir.ExternalTensor)]
    for i, tensor in zip(
        small, ir.external_data.convert_tensors_from_external([tensors[i] for i in small])
    ):
        written[i] = tensor
    if big:
        external = ir.external_data.convert_tensors_to_external(
            [tensors[i] for i in big], path.parent, data_name
        )
        for i, tensor in zip(big, external):
            written[i] = tensor
    try:
        for value, tensor in zip(values, written):
            value.const_value = tensor
        for (node, name, attr), tensor in zip(attributes, written[len(values):]):
            node.attributes[name] = ir.AttrTensor(name, tensor, doc_string=attr.doc_string)
        onnx.save(ir.serde.serialize_model(model), path)
    finally:
        for value, tensor in zip(values, tensors):
            value.const_value = tensor
        for node, name, attr in attributes:
            node.attributes[name] = attr


def data_file_name(path: Path) -> str:
    """The external data file of a model written to ``path`` (``-o OUT``: ``OUT.data``)."""
    return path.name + ".data"


def external_data_files(proto: onnx.ModelProto, path: str | os.PathLike) -> list[str]:
    """The external data files ``proto`` (as :func:`load_proto` read it from ``path``) keeps its
    tensors in, as locations relative to the model's folder, in order of first use. Big inline
    weights that :func:`load_proto` maps from the model file itself are not external data."""
    return _data_files((_location(tensor) for tensor in _external_tensors(proto)), Path(path))


def input_data_files(path: str | os.PathLike) -> list[str]:
    """:func:`external_data_files` of the model file at ``path``, parsed only where its bytes may
    hold a reference (:func:`_protowire.may_have_external_data`). ModelLoadError when it cannot be
    read."""
    path = Path(path)
    try:
        if not _protowire.may_have_external_data(path):
            return []
    except OSError as e:
        raise ModelLoadError(f"{path}: cannot read it ({e.strerror or e})") from e
    return external_data_files(load_proto(path), path)


def _data_files(locations: Iterable[str | None], path: Path) -> list[str]:
    """The distinct data files of these external data locations, in order, normalized; not the
    model file itself (:func:`load_proto` maps big inline weights as references into it)."""
    files: dict[str, None] = {}
    for location in locations:
        if location is not None and os.path.normpath(location) != path.name:
            files.setdefault(os.path.normpath(location), None)
    return list(files)


def in_place_data_name(model_path: Path, input_files: list[str]) -> str:
    """The external data file for an in-place rewrite of ``model_path``, whose tensors were in
    ``input_files`` (:func:`external_data_files`): that file's own name when there is exactly one
    (it is then replaced by the new one, atomically, as the model file is: --in-place overwrites the
    input's external data too, so another model sharing that file would lose it: the CLI refuses a
    run holding both), else :func:`data_file_name`; the input's other data files are then left where
    they are (see :func:`staged_save`), since they may be another model's too."""
    if len(input_files) == 1:
        location = input_files[0]
        parts = Path(location).parts
        if not Path(location).is_absolute() and ".." not in parts and location != model_path.name:
            return location
    return data_file_name(model_path)


@contextlib.contextmanager
def staged_save(model: ir.Model | onnx.ModelProto, destination: str | os.PathLike,
                data_name: str | None = None, external: bool = False) -> Iterator[Path]:
    """Write ``model`` into a temporary folder beside ``destination``; yield the staged model path.
    (A ModelProto, one without external data, is written as it is: see
    ``passes.upgrade.upgrade_proto``.)

    External data, when the model needs it (it came with some, or it would not fit in one protobuf),
    goes to ``data_name`` (a path relative to ``destination``'s folder; default
    :func:`data_file_name`). Whether it was written: ``(staged.parent / data_name).is_file()``.
    ``external``: the model was loaded with external data, so it is written with external data even
    when the rewrite replaced every external tensor (a fold's result, say).

    When the ``with`` body returns (after checks and validation on the staged file), the files are
    renamed into place, the data file first, each replacing any file of its name atomically and
    keeping its permissions (:func:`replace_file`); if it raises, they are deleted and nothing at
    ``destination`` changes. No other file is touched: a data file the previous model at
    ``destination`` used under another name stays where it is.
    """
    destination = Path(destination)
    data_name = data_name or data_file_name(destination)
    created: list[Path] = []
    staging, done = None, False
    try:
        # (stopped between a folder's creation and here, the folder would stay)
        with _stop_signals_held():
            created = _make_folders(destination.parent)
            try:
                staging = Path(tempfile.mkdtemp(prefix=".scatter-rewrite-", dir=destination.parent))
            except OSError as e:
                raise write_error(destination, e) from e
        staged = staging / destination.name
        try:
            if isinstance(model, onnx.ModelProto):
                onnx.save(model, staged)
            else:
                tensors = list(_all_tensors(model))
                if external or _needs_external_data(tensors):
                    (staging / data_name).parent.mkdir(parents=True, exist_ok=True)
                    _save_with_external_data(model, staged, data_name)
                else:
                    _protowire.save_inline(model, staged)  # big weights written from their buffers
                _release_mapped_weights(tensors)  # (the model's own: saving leaves it unchanged)
                del tensors
        except OSError as e:  # a full disk, say: the user's to fix (inputs were checked on load)
            raise write_error(destination, e) from e
        del model  # validation of the staged file need not find the rewritten weights held here
        yield staged
        for check in BEFORE_RENAME:
            check()
        # The data file first: the model file that points at it appears last. (Both or neither:
        # a stop signal waits.)
        with _stop_signals_held():
            try:
                if (staging / data_name).is_file():
                    (destination.parent / data_name).parent.mkdir(parents=True, exist_ok=True)
                    # A new data file beside a model being replaced takes that model's permissions:
                    # the weights of a private (0600) model must not land in a file all can read.
                    replace_file(staging / data_name, destination.parent / data_name,
                                 like=destination)
                replace_file(staged, destination)
            except OSError as e:  # a folder in the way of the output, say
                raise write_error(destination, e) from e
            done = True
            WRITTEN_OUTPUTS.append(destination)
    finally:
        with _stop_signals_held():  # (stopped halfway through, the folder would stay)
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
            if not done:
                _remove_folders(created)


# Run just before a staged model is renamed into place; one may raise to keep it from being
# written (the command line's: a stop signal whose exception was lost, see cli/signals.py).
BEFORE_RENAME: list[Callable[[], None]] = []

# Every model file this process renamed into place, in order: a stop signal that comes once one
# is written (a signal held back during the rename is raised right after it) says so.
WRITTEN_OUTPUTS: list[Path] = []
_stops_held = 0  # how many _stop_signals_held blocks are in progress (in the main thread)
_stop_pending: int | None = None  # a stop signal that came during one, delivered at its end


def stop_deferred(signum: int) -> bool:
    """For the command line's stop-signal handler: whether ``signum`` must wait because a staging
    folder is being made or a result renamed into place; it is raised again when that ends."""
    global _stop_pending
    if _stops_held:
        _stop_pending = signum
        return True
    return False


@contextlib.contextmanager
def _stop_signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait for the block's end, then are raised again (the command
    line stops on them by raising where the process is: see cli.Stopped, which asks
    :func:`stop_deferred`). Not a signal mask: ``pthread_sigmask`` holds a signal back from this
    thread only, and once onnxruntime has started its threads one of them takes it, after which
    Python runs the handler in this thread all the same (a staging folder was left behind)."""
    global _stops_held, _stop_pending
    _stops_held += 1
    try:
        yield
    finally:
        _stops_held -= 1
        if not _stops_held and _stop_pending is not None:
            signum, _stop_pending = _stop_pending, None
            signal.raise_signal(signum)


def replace_file(new: Path, target: Path, like: Path | None = None) -> None:
    """``os.replace(new, target)``, ``new`` taking first the permission bits of the file at
    ``target`` (through a symlink, as ``sed -i`` reads it) and, where this process may set them
    (root), its owner and group, as ``sed -i`` does and as ``cp`` onto an existing file keeps them:
    rewriting a private (0600) model must not leave it readable by all. Where nothing is there,
    those of the file ``like`` if it exists, else ``new`` keeps the mode it was created with (the
    umask default)."""
    old = None
    for source in (target, like):
        try:
            old = os.stat(source) if source is not None else None
        except OSError:  # nothing there, or a symlink to nothing
            continue
        if old is not None:
            break
    if old is not None:
        now = os.stat(new)
        if (now.st_uid, now.st_gid) != (old.st_uid, old.st_gid):
            try:
                os.chown(new, old.st_uid, old.st_gid)
            # not root: the group alone, where this user is in it (best effort, as sed -i)
            except OSError:
                with contextlib.suppress(OSError):
                    os.chown(new, -1, old.st_gid)
        os.chmod(new, stat.S_IMODE(old.st_mode))  # (after chown, which may clear set-id bits)
    os.replace(new, target)


def write_error(destination: Path, e: OSError) -> WriteError:
    """Why ``destination`` could not be written, in the user's terms: the OS's reason, and for a
    permission the folder, never the staging folder's name (``[Errno 13] Permission denied:
    'out/.scatter-rewrite-m9rsooms'``)."""
    if isinstance(e, PermissionError):
        return WriteError(said(
            f"could not write {destination}: permission denied in {destination.parent}; "
            "write the output elsewhere (", param("output"), ")")
        )
    return WriteError(f"could not write {destination} ({e.strerror or _first_line(e)})")


def unwritable_folder(destination: Path) -> Path | None:
    """Before any work: the folder that stops ``destination`` from being written (its nearest
    existing folder, when that is not a folder or lacks write permission), else None."""
    folder = Path(os.path.abspath(destination)).parent
    while not folder.exists() and not folder.is_symlink():
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        return folder
    return None


def _make_folders(folder: Path) -> list[Path]:
    """``mkdir -p folder``; the folders it created, deepest first (removed again if the write
    fails). WriteError when it cannot (a file in the way, no permission)."""
    missing = []
    for parent in [folder, *folder.parents]:
        if parent.exists() or parent.is_symlink():
            break
        missing.append(parent)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise WriteError(f"{folder}: cannot create this folder ({_first_line(e)})") from e
    return missing


def _remove_folders(folders: list[Path]) -> None:
    for folder in folders:  # deepest first; only if still empty
        try:
            folder.rmdir()
        except OSError:
            break


def save_model(model: ir.Model, destination: str | os.PathLike) -> Path:
    with staged_save(model, destination):
        pass
    return Path(destination)
