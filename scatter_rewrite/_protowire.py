"""Big inline weights without copies: mapped on load, streamed on save (for :mod:`model_io`).

``onnx.load`` reads a whole ``.onnx`` file and parses it (two copies of every weight), the IR
copies a weight again each time it is read (``raw_data`` of a upb message is a new ``bytes``),
and ``ir.save`` copies each weight into a new proto and serializes it (two more). For a model
whose weights sit inline in the ``.onnx`` file (< 2 GiB) that is several times its size in memory
and most of a fold's time. Instead:

- :func:`load_proto` scans the file's protobuf wire format through ``mmap``: main-graph
  initializers of at least :data:`MAP_MIN_BYTES` become external-data references *into the model
  file itself* (location = its own name, offset and length of their ``raw_data``), so the IR maps
  them on demand like any external weight; only the rest of the model is parsed.
- :func:`save_inline` serializes the model without its big main-graph initializers, then appends
  each as a separate ``graph { initializer { ... raw_data } }`` record written straight from its
  buffer. Protobuf merges repeated occurrences of a singular message field and concatenates
  repeated fields, so the file parses (onnx, onnxruntime, any protobuf reader) as one model whose
  big initializers come last.

Wire format: https://protobuf.dev/programming-guides/encoding/ ("Last One Wins" / merging of
embedded messages that appear more than once). Field numbers: onnx/onnx.proto (ModelProto.graph = 7,
GraphProto.initializer = 5, TensorProto.raw_data = 9, TensorProto.data_location = 14).
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

__all__ = [
    "checkable", "is_self_mapped", "load_proto", "may_have_external_data", "save_inline",
    "WireError",
]

MAP_MIN_BYTES = 1 << 20  # smaller tensors are parsed as usual: mapping them gains nothing
STREAM_MIN_BYTES = 1 << 20

_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_RAW_DATA, _TENSOR_DATA_LOCATION = 7, 5, 9, 14
_LENGTH_DELIMITED = 2

# Sub-byte (packed) and string types: their raw_data length is not dims x itemsize.
_PACKED_OR_UNSIZED = {
    getattr(onnx.TensorProto, name)
    for name in ("UNDEFINED", "STRING", "INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2")
    if hasattr(onnx.TensorProto, name)
}
# Model files whose own bytes back ExternalTensors made by load_proto: those tensors are inline.
_SELF_MAPPED: set[str] = set()


class WireError(ValueError):
    """Not well-formed protobuf (the caller falls back to onnx.load, which says what is wrong)."""


def _varint(buf, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise WireError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf, start: int, end: int):
    """(field number, wire type, start of the key, start of the value, end of the field)."""
    pos = start
    while pos < end:
        key_start = pos
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, value_end = _varint(buf, pos)
        elif wire == 1:
            value_end = pos + 8
        elif wire == 5:
            value_end = pos + 4
        elif wire == _LENGTH_DELIMITED:
            length, pos = _varint(buf, pos)
            value_end = pos + length
        else:
            raise WireError(f"unsupported wire type {wire}")
        if value_end > end:
            raise WireError("field runs past its message")
        yield field, wire, key_start, pos, value_end
        pos = value_end


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _key(field: int, length: int) -> bytes:
    return _encode_varint(field << 3 | _LENGTH_DELIMITED) + _encode_varint(length)


def load_proto(path: Path) -> onnx.ModelProto:
    """The model at ``path`` with its big inline main-graph initializers as references into the
    file.

    Raises WireError when the file is not well-formed protobuf (the caller then uses onnx.load).
    """
    return _load(Path(path))[0]


@contextlib.contextmanager
def checkable(path: Path) -> Iterator[str]:
    """The file ``onnx.checker.check_model`` should check for the model file at ``path``.

    With big inline weights: a small file beside it, the model with those weights as external
    references into ``path`` (the checker needs their dtype and dims, and checks the file is there;
    given ``path`` it would read and parse every byte of it), deleted afterwards. Otherwise
    ``path``."""
    path = Path(path)
    try:
        model, mapped = _load(path)
    except WireError:
        mapped = 0
    if not mapped:
        yield str(path)
        return
    skeleton = path.with_name(f".{path.name}.check.onnx")
    try:
        try:
            onnx.save(model, skeleton)
            target = str(skeleton)
        except OSError:  # a folder we may not write to (an input's): check the file itself, slower
            target = str(path)
        del model
        yield target
    finally:
        skeleton.unlink(missing_ok=True)


def _load(path: Path) -> tuple[onnx.ModelProto, int]:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < MAP_MIN_BYTES:
            return onnx.load_model_from_string(f.read()), 0
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _load_mapped(buf, path)


def _load_mapped(buf: mmap.mmap, path: Path) -> tuple[onnx.ModelProto, int]:
    skeleton, mapped = bytearray(), []
    for field, wire, key_start, start, end in _fields(buf, 0, len(buf)):
        if field != _MODEL_GRAPH or wire != _LENGTH_DELIMITED:
            skeleton += buf[key_start:end]
            continue
        graph = bytearray()
        for g_field, g_wire, g_key, g_start, g_end in _fields(buf, start, end):
            if (
                g_field == _GRAPH_INITIALIZER
                and g_wire == _LENGTH_DELIMITED
                and g_end - g_start >= MAP_MIN_BYTES
            ):
                tensor = _mapped_tensor(buf, g_start, g_end, path.name)
                if tensor is not None:
                    mapped.append(tensor)
                    continue
            graph += buf[g_key:g_end]
        skeleton += _key(_MODEL_GRAPH, len(graph)) + graph
    model = onnx.load_model_from_string(bytes(skeleton))
    model.graph.initializer.extend(mapped)
    if mapped:
        _SELF_MAPPED.add(os.path.realpath(path))
    return model, len(mapped)


def _mapped_tensor(buf, start: int, end: int, location: str) -> onnx.TensorProto | None:
    header, raw = bytearray(), None
    for field, wire, key_start, value_start, value_end in _fields(buf, start, end):
        if field == _TENSOR_RAW_DATA and wire == _LENGTH_DELIMITED and raw is None:
            raw = (value_start, value_end - value_start)
        elif field == _TENSOR_DATA_LOCATION or field == _TENSOR_RAW_DATA:
            return None  # already external, or odd: parse it as usual
        else:
            header += buf[key_start:value_end]
    if raw is None:
        return None  # typed fields (float_data, ...): parse it as usual
    tensor = onnx.TensorProto.FromString(bytes(header))
    if tensor.data_type in _PACKED_OR_UNSIZED:
        return None
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, ValueError, TypeError):
        return None
    if int(np.prod(tensor.dims, dtype=np.int64)) * itemsize != raw[1]:
        return (
            None  # raw_data does not match dtype and dims: parsed as usual, for the checker to see
        )
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(raw[0])), ("length", str(raw[1]))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


# StringStringEntryProto {key: "location"} (field 1, 8 bytes): what every external data reference
# (TensorProto.external_data) holds. A value named "location" has the same bytes, so a find is only
# a reason to parse the model.
_LOCATION_KEY = b"\x0a\x08location"


def may_have_external_data(path: Path) -> bool:
    """Whether the model file at ``path`` may hold external data references: False when the bytes
    of one are nowhere in it (the raw bytes of big main-graph initializers, which :func:`load_proto`
    maps, skipped unread), for a plan made before the rewrite without parsing every model twice (a
    50k-node graph: ~23 ms, against ~160 ms to parse it). True also for a file that is not
    well-formed protobuf, for the parse to say what is wrong."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size < MAP_MIN_BYTES:
            return _LOCATION_KEY in f.read()
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            try:
                spans = _spans_but_big_raw_data(buf)
            except WireError:
                return True
            return any(buf.find(_LOCATION_KEY, start, len(buf) if end is None else end) != -1
                       for start, end in spans)


def _spans_but_big_raw_data(buf) -> list[tuple[int, int | None]]:
    """(start, end) spans covering the file but the raw_data of big main-graph initializers."""
    spans, start = [], 0
    for field, wire, _, g_start, g_end in _fields(buf, 0, len(buf)):
        if field != _MODEL_GRAPH or wire != _LENGTH_DELIMITED:
            continue
        for i_field, i_wire, _, i_start, i_end in _fields(buf, g_start, g_end):
            if (
                i_field != _GRAPH_INITIALIZER
                or i_wire != _LENGTH_DELIMITED
                or i_end - i_start < MAP_MIN_BYTES
            ):
                continue
            for t_field, t_wire, _, t_start, t_end in _fields(buf, i_start, i_end):
                if t_field == _TENSOR_RAW_DATA and t_wire == _LENGTH_DELIMITED:
                    spans.append((start, t_start))
                    start = t_end
    return spans + [(start, None)]


def is_self_mapped(tensor: object) -> bool:
    """Whether ``tensor`` is an inline weight that :func:`load_proto` mapped from its model file."""
    return isinstance(tensor, ir.ExternalTensor) and os.path.realpath(tensor.path) in _SELF_MAPPED


def _streamable(tensor) -> bool:
    return (
        tensor is not None
        and tensor.nbytes >= STREAM_MIN_BYTES
        and tensor.dtype != ir.DataType.STRING
        and tensor.dtype.bitwidth >= 8
        and not tensor.doc_string
        and not tensor.metadata_props
    )


def _raw_bytes(tensor) -> np.ndarray:
    """The tensor's raw_data bytes (little-endian, C order) as a view where possible."""
    array = np.ascontiguousarray(tensor.numpy())
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return array.reshape(-1).view(np.uint8)


def save_inline(model: ir.Model, path: Path) -> None:
    """``ir.save(model, path)`` with the big main-graph initializers written from their buffers."""
    graph = model.graph
    order = list(graph.initializers.items())
    big = [value for _, value in order if _streamable(value.const_value)]
    if not big:
        ir.save(model, path)
        return
    for value in big:
        graph.initializers.pop(value.name)
    try:
        skeleton = ir.serde.serialize_model(model).SerializeToString()
    finally:
        graph.initializers.clear()
        for name, value in order:
            graph.initializers[name] = value
    with open(path, "wb") as f:
        f.write(skeleton)
        del skeleton
        for value in big:
            tensor = value.const_value
            header = onnx.TensorProto(
                name=value.name,
                data_type=int(tensor.dtype),
                dims=[int(d) for d in tensor.shape.numpy()],
            ).SerializeToString()
            data = _raw_bytes(tensor)
            tensor_length = len(header) + len(_key(_TENSOR_RAW_DATA, data.nbytes)) + data.nbytes
            graph_length = len(_key(_GRAPH_INITIALIZER, tensor_length)) + tensor_length
            f.write(
                _key(_MODEL_GRAPH, graph_length)
                + _key(_GRAPH_INITIALIZER, tensor_length)
                + header
                + _key(_TENSOR_RAW_DATA, data.nbytes)
            )
            f.write(memoryview(data))
            del data
