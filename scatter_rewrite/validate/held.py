"""A model validation runs from memory (the API's, given in memory), never saved: onnxruntime
gets its protobuf without the big main-graph weights and those as OrtValues over the model's own
buffers (``SessionOptions.add_external_initializers``: no copy, and no 2 GiB protobuf limit);
onnx.reference and the float64 judgement get the whole model."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import onnx
import onnx_ir as ir

__all__ = ["Held", "ModelSource", "proto_of"]

# NumPy's own types, which OrtValue.ortvalue_from_numpy takes; a weight of another type (bfloat16,
# float8, 4-bit) stays in the protobuf
_NUMPY_TYPES = frozenset({
    ir.DataType.BOOL, ir.DataType.INT8, ir.DataType.INT16, ir.DataType.INT32, ir.DataType.INT64,
    ir.DataType.UINT8, ir.DataType.UINT16, ir.DataType.UINT32, ir.DataType.UINT64,
    ir.DataType.FLOAT16, ir.DataType.FLOAT, ir.DataType.DOUBLE,
})


class Held:
    """A model in memory, as validation reads it; the model must not change while it does."""

    def __init__(self, model: ir.Model, name: str = "the model given") -> None:
        self.model = model
        self.name = name

    def __str__(self) -> str:
        return self.name

    @functools.cached_property
    def _apart(self) -> tuple[onnx.ModelProto, dict[str, ir.TensorProtocol]]:
        from scatter_rewrite.in_memory import weights_apart

        return weights_apart(self.model)

    def without_weights(self) -> onnx.ModelProto:
        """The model, its big main-graph weights references never read (their dtype and shape
        only): what shape inference and the model's structure need."""
        return self._apart[0]

    def whole(self) -> onnx.ModelProto:
        """The model with every weight (a copy of them: for onnx.reference)."""
        return ir.serde.serialize_model(self.model)

    def session_parts(self) -> tuple[bytes, dict[str, object]]:
        """(the protobuf onnxruntime loads, the weights it is handed apart as OrtValues by name).
        A weight of a type NumPy lacks is put back into the protobuf."""
        import numpy as np
        from onnxruntime import OrtValue

        proto, apart = self._apart
        values, inline = {}, set()
        for name, tensor in apart.items():
            if tensor.dtype in _NUMPY_TYPES:
                # (the model's own buffer where it is one already: an ir.Tensor's array, a mapping)
                values[name] = OrtValue.ortvalue_from_numpy(np.ascontiguousarray(tensor.numpy()))
            else:
                inline.add(name)
        if inline:
            proto = onnx.ModelProto.FromString(proto.SerializeToString())
            for initializer in proto.graph.initializer:
                if initializer.name in inline:
                    name = initializer.name
                    initializer.CopyFrom(ir.serde.serialize_tensor(apart[name]))
                    initializer.name = name
        return proto.SerializeToString(), values


ModelSource = str | os.PathLike | Held


def proto_of(model: ModelSource | onnx.ModelProto, weights: bool = True) -> onnx.ModelProto:
    """``model`` (a file, a :class:`Held` model, a ModelProto) as a ModelProto; ``weights`` False:
    big weights may stay references (a file's mapped, a held model's never read)."""
    from scatter_rewrite.model_io import load_proto

    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, Held):
        return model.whole() if weights else model.without_weights()
    return onnx.load(str(model)) if weights else load_proto(Path(model))
