"""A node alone as a model: what onnx.version_converter (:mod:`scatter_rewrite.opset.converter`)
and a function body's inlining (:mod:`scatter_rewrite.opset.bodies`) take a node in."""

from __future__ import annotations

import onnx
import onnx.helper
import onnx_ir as ir

from scatter_rewrite.graph import constant_tensor
from scatter_rewrite.opset.fitting import input_dtype

__all__ = ["one_node_model", "small_constant"]


def small_constant(value: ir.Value) -> ir.TensorProtocol | None:
    # Some adapters read constant inputs (Split's split, Reshape's shape...): small ones go along;
    # an initializer callers may override is no constant (the adapter would write its default in).
    tensor = constant_tensor(value)
    if tensor is None or tensor.size > 64:
        return None
    return tensor


def one_node_model(node: ir.Node, source: int, shapes: bool = False) -> onnx.ModelProto:
    """``node`` alone at opset ``source``: inputs ``in{i}`` typed (with their shapes if ``shapes``;
    small constants as initializers), outputs ``out{i}``."""
    graph_inputs, initializers, input_names = [], [], []
    for i, value in enumerate(node.inputs):
        if value is None:
            input_names.append("")
            continue
        name = f"in{i}"
        input_names.append(name)
        # (An untyped constant, a bool Constant's output, goes in with its tensor's dtype: as float
        # it would contradict its own initializer below.)
        known = input_dtype(value)
        dtype = known.value if known is not None else onnx.TensorProto.FLOAT
        const = small_constant(value)
        if const is not None:
            initializers.append(ir.serde.serialize_tensor(ir.Tensor(const.numpy(), name=name)))
        dims = (None if not shapes or value.shape is None
                else [d if isinstance(d, int) else None for d in value.shape])
        graph_inputs.append(onnx.helper.make_tensor_value_info(name, dtype, dims))
    outputs = [onnx.helper.make_tensor_value_info(f"out{i}", onnx.TensorProto.UNDEFINED, None)
               for i in range(len(node.outputs))]
    proto_node = onnx.helper.make_node(node.op_type, input_names, [o.name for o in outputs])
    # A reference to a function attribute has no value to convert: left out, put back after
    # (_Converter).
    proto_node.attribute.extend(a for a in ir.serde.serialize_node(node).attribute
                                if not a.ref_attr_name)
    graph = onnx.helper.make_graph([proto_node], "one_node", graph_inputs, outputs,
                                   initializer=initializers)
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", source)])
