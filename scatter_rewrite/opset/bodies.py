"""An op's ONNX function body as its older form: the spec's own definition of the op, inlined into a
one-node model and moved to the target in turn (the step kind ``BODY``)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import onnx
import onnx.defs
import onnx.helper
import onnx.inliner
import onnx.shape_inference
import onnx_ir as ir

from scatter_rewrite.graph import is_reference
from scatter_rewrite.opset.fitting import input_dtype
from scatter_rewrite.opset.one_node import one_node_model

__all__ = ["EXACT_BODIES", "function_body_model"]

logger = logging.getLogger("scatter_rewrite")

# Ops whose function body computes bit for bit what the op does (CastLike's is one Cast to the
# type).
EXACT_BODIES = frozenset({"CastLike"})
# the one-node model's call to the body, inlined at once
_BODY_DOMAIN = "scatter_rewrite.function_body"


def function_body_model(node: ir.Node, source: int, target: int,
                        convert_model: Callable[[ir.Model, int], object],
                        shapes: bool = False) -> onnx.ModelProto | None:
    """``node`` (at opset ``source``) as its op's ONNX function body, converted to ``target``: a
    model shaped like :func:`scatter_rewrite.opset.one_node.one_node_model`'s (inputs ``in{i}``,
    outputs ``out{i}``). None when the op has no body at or below ``source``, or the body cannot
    be built (an input of unknown type, an attribute that refers to a function's, which the body
    would need the value of)."""
    try:
        schema = onnx.defs.get_schema(node.op_type, source, "")
    except onnx.defs.SchemaError:
        return None
    contextual = not schema.has_function and schema.has_context_dependent_function
    versions = schema.context_dependent_function_opset_versions if contextual else (
        schema.function_opset_versions if schema.has_function else [])
    versions = [v for v in versions if v <= source]
    if not versions or any(is_reference(a) for a in node.attributes.values()):
        return None
    if any(v is not None and input_dtype(v) is None for v in node.inputs):
        return None  # (a context-dependent body is built from the input types)
    opset = min(versions)  # the body nearest the (lower) target
    # (some context-dependent bodies are built from the shapes)
    mini = one_node_model(node, source, shapes)
    call = mini.graph.node[0]
    try:
        if contextual:  # (its builder reads the node's attributes with the op's own defaults)
            types = {i.name: i.type.SerializeToString() for i in mini.graph.input}
            body = schema.get_context_dependent_function_with_opset_version(
                opset, call.SerializeToString(), [types.get(name, b"") for name in call.input])
        else:
            body = schema.get_function_with_opset_version(opset)
        function = onnx.FunctionProto.FromString(body)
        if not function.node:  # (a builder that declines the node's form returns an empty function)
            return None
        # Every attribute written out: a body node referring to one the node leaves out would
        # otherwise take its own op's default, not this op's.
        written = {a.name for a in call.attribute}
        for name, formal in schema.attributes.items():
            if name not in written and formal.default_value.name:
                call.attribute.append(formal.default_value)
        function.domain, function.name = _BODY_DOMAIN, node.op_type
        call.domain = _BODY_DOMAIN
        mini.functions.append(function)
        del mini.opset_import[:]
        mini.opset_import.extend([onnx.helper.make_opsetid("", opset),
                                  onnx.helper.make_opsetid(_BODY_DOMAIN, 1)])
        inlined = onnx.inliner.inline_local_functions(mini)
        del inlined.opset_import[:]
        inlined.opset_import.append(onnx.helper.make_opsetid("", opset))
        del inlined.functions[:]
        for output in inlined.graph.output:
            output.ClearField("type")  # (the one-node model's UNDEFINED would stop inference)
        # The body's values get their types, which converting its nodes needs (fits_schema).
        inlined = onnx.shape_inference.infer_shapes(inlined, data_prop=True)
        model = ir.serde.deserialize_model(inlined)
    except Exception as e:  # onnx raises its own C++ errors: no body then, the caller says why
        logger.debug("no function body for %s: %s", node.op_type, e)
        return None
    _cast_like_as_cast(model.graph)
    # the body's own nodes, with function bodies of their own if need be (``convert_model``: the
    # engine's move of a whole model)
    convert_model(model, target)
    return ir.serde.serialize_model(model)


def _cast_like_as_cast(graph: ir.Graph) -> None:
    """A body's ``CastLike(x, like)`` whose ``like`` has a known type as ``Cast(x, to=that type)``:
    the same op (opset 15 on), which older opsets and more runtimes have."""
    for node in list(graph):
        if node.op_type != "CastLike" or len(node.inputs) != 2 or node.inputs[1] is None:
            continue
        dtype = node.inputs[1].dtype
        if dtype is None:
            continue
        attributes = {"to": ir.AttrInt64("to", dtype.value)}
        if "saturate" in node.attributes:
            attributes["saturate"] = node.attributes["saturate"]
        cast = ir.node("Cast", [node.inputs[0]], attributes=attributes, num_outputs=1)
        cast.outputs[0].dtype, cast.outputs[0].shape = node.outputs[0].dtype, node.outputs[0].shape
        ir.convenience.replace_nodes_and_values(graph, node, [node], [cast], list(node.outputs),
                                                list(cast.outputs))

