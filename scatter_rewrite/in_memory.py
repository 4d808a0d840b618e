"""A model held in memory, serialized without copying its weights: for ``onnx.checker``
(:mod:`scatter_rewrite.checking`) and onnxruntime sessions made from memory
(:mod:`scatter_rewrite.validate.held`), so that an in-memory call saves nothing.

Both take the main graph's big weights apart from the protobuf (onnxruntime as OrtValues handed to
its session, the checker as graph inputs of their type); every other tensor is serialized with its
values, an external one read in (both would look for its file relative to the working folder, not
the model's).
"""

from __future__ import annotations

import onnx
import onnx_ir as ir

__all__ = ["APART_BYTES", "PLACEHOLDER", "weights_apart"]

# Smaller weights stay in the protobuf with their values (shape inference reads a Reshape's shape,
# a Slice's starts), as a file written with external data keeps them inline.
APART_BYTES = 1024
PLACEHOLDER = "scatter-rewrite-weights-apart"  # the location of a weight taken apart: never read


def weights_apart(model: ir.Model) -> tuple[onnx.ModelProto, dict[str, ir.TensorProtocol]]:
    """``model`` as a ModelProto whose main-graph initializers over :data:`APART_BYTES` (or in an
    external file) are external references to :data:`PLACEHOLDER` of their dtype and shape, and
    those weights by name (the model's own tensors, not read). ``model`` is unchanged
    afterwards."""
    swapped: list[tuple[ir.Value, ir.TensorProtocol]] = []
    attributes: list[tuple[ir.Node, str, ir.Attr]] = []
    apart: dict[str, ir.TensorProtocol] = {}
    try:
        for value in model.graph.initializers.values():
            tensor = value.const_value
            if tensor is not None and (tensor.nbytes > APART_BYTES
                                       or isinstance(tensor, ir.ExternalTensor)):
                apart[value.name] = tensor
                swapped.append((value, tensor))
                value.const_value = ir.ExternalTensor(PLACEHOLDER, 0, tensor.nbytes,
                                                      tensor.dtype, shape=tensor.shape,
                                                      name=value.name)
        for graph in model.graphs():
            if graph is model.graph:
                continue
            for value in graph.initializers.values():
                if isinstance(value.const_value, ir.ExternalTensor):
                    swapped.append((value, value.const_value))
                    value.const_value = _read(value.const_value)
        for body in [*model.graphs(), *model.functions.values()]:
            _read_attributes(body, attributes)
        proto = ir.serde.serialize_model(model)
    finally:
        for value, tensor in swapped:
            value.const_value = tensor
        for node, name, attr in attributes:
            node.attributes[name] = attr
    return proto, apart


def _read_attributes(body: ir.Graph | ir.Function,
                     attributes: list[tuple[ir.Node, str, ir.Attr]]) -> None:
    """Every external tensor attribute of ``body``'s own nodes, read in (``attributes``: what to
    give back)."""
    for node in body:
        for name, attr in list(node.attributes.items()):
            if (isinstance(attr, ir.Attr) and attr.type == ir.AttributeType.TENSOR
                    and isinstance(attr.value, ir.ExternalTensor)):
                attributes.append((node, name, attr))
                node.attributes[name] = ir.AttrTensor(name, _read(attr.value),
                                                      doc_string=attr.doc_string)


def _read(tensor: ir.ExternalTensor) -> ir.Tensor:
    return ir.Tensor(tensor.numpy(), dtype=tensor.dtype, name=tensor.name)
