"""onnx.version_converter's adapters as the engine's CONVERTER steps: a node goes alone into a
one-node model (:func:`~scatter_rewrite.opset.one_node.one_node_model`), cached per distinct signature (:func:`signature`), and the
converted nodes are spliced back in its place (:meth:`Adapter.splice`). Where the converter has no
adapter: the node kept as the older schema takes it, or moved from an opset between, or replaced by
its function body (:mod:`scatter_rewrite.opset.bodies`)."""

from __future__ import annotations

import re
from collections.abc import Callable

import onnx
import onnx.defs
import onnx.helper
import onnx.version_converter
import onnx_ir as ir

from scatter_rewrite.errors import ConversionError
from scatter_rewrite.graph import (
    Scope, attribute_key, constant_tensor, describe, is_reference, iter_scopes, mark_written,
    nodes_within, tensor_key, written_for,
)
from scatter_rewrite.opset.bodies import function_body_model
from scatter_rewrite.opset.fitting import (
    fits_schema, input_dtype, is_default, since_version, step_name, type_gap, unknown_type_gap,
)
from scatter_rewrite.opset.forms.constant_12_11 import constant_as_value_tensor
from scatter_rewrite.opset.one_node import one_node_model, small_constant
from scatter_rewrite.opset.rewriting import not_constant, refuse

__all__ = [
    "Adapter", "converter_reason", "distinct_nested_names", "signature",
]


def drop_default_attributes(converted: onnx.ModelProto, source: int, target: int) -> None:
    """The converter sometimes keeps an attribute the older schema lacks (ReduceSum-13's
    ``noop_with_empty_axes`` going to 12): drop it when it holds the newer schema's default."""
    for proto in converted.graph.node:
        try:
            old = onnx.defs.get_schema(proto.op_type, target, "")
            new = onnx.defs.get_schema(proto.op_type, source, "")
        except onnx.defs.SchemaError:
            continue
        for a in list(proto.attribute):
            if (a.name not in old.attributes
                    and is_default(new, a.name, onnx.helper.get_attribute_value(a))):
                proto.attribute.remove(a)


_NO_ADAPTER = re.compile(r"No Adapter (To|From) Version \$(\d+) for|No Adapter For|No Previous "
                         r"Version of")


def converter_reason(node: ir.Node, source: int, target: int, error: Exception) -> str:
    """Why onnx.version_converter refused ``node`` (at ``source``), in the model's terms rather than
    its C++ assertion's (``BaseConverter.h:63: adapter_lookup: Assertion `false` failed: ...``)."""
    text = str(error).strip()
    op, since = node.op_type, since_version(node.op_type, source)
    if "No initializer or constant input" in text:  # an input the older op takes as an attribute
        for i, value in enumerate(node.inputs[1:], 1):
            if value is not None and constant_tensor(value) is None:
                formals = onnx.defs.get_schema(op, source, "").inputs
                formal = formals[min(i, len(formals) - 1)].name
                return (f"{not_constant(value, formal)}, and opset {target}'s {op} takes it as a "
                        "constant attribute")
    match = _NO_ADAPTER.search(text)
    # another failure: the converter's own words, without its source file and assertion
    if match is None:
        words = text.splitlines()[0].rsplit("failed: ", 1)[-1] if text else type(error).__name__
        return f"onnx.version_converter: {words}"
    if match.group(0).startswith("No Previous"):
        first = next(v for v in range(target, source + 1) if since_version(op, v) is not None)
        return f"{op} has no version before opset {first}, nor a form of one here"
    # Down from version `last` the converter has no adapter (To $V: from the version after V to V).
    last = since if match.group(1) is None else int(match.group(2)) + (match.group(1) == "To")
    older = since_version(op, last - 1)
    to = f" to {op}-{older}" if older is not None else ""
    return (f"{op}-{since} has no form at opset {target} here (onnx.version_converter has no "
            f"adapter from {op}-{last}{to})")


def signature(node: ir.Node) -> tuple:
    """What a conversion of ``node`` depends on, the key of its cache: equal only for nodes that
    convert alike (attributes and constants by :func:`attribute_key` and :func:`tensor_key`: a
    Constant's tensor by its values, never by its name, which TorchScript leaves "")."""
    attrs = tuple(sorted((k, attribute_key(a)) for k, a in node.attributes.items()))
    inputs = []
    for v in node.inputs:
        const = None if v is None else small_constant(v)
        inputs.append(None if v is None else (
            input_dtype(v), None if v.shape is None else len(v.shape),
            None if const is None else tensor_key(const)))
    return (node.op_type, attrs, tuple(inputs), len(node.outputs))


# Ops whose function body computes bit for bit what the op does (CastLike's is one Cast to the
class Adapter:
    """onnx.version_converter's adapters for nodes moving to ``target``, with what they did."""

    def __init__(self, target: int, convert_model: Callable[[ir.Model, int], object]):
        self.target = target
        # (the engine's whole-model move, for a function body's own nodes)
        self.convert_model = convert_model
        # list: attributes to drop, node kept
        self.cache: dict[tuple, onnx.ModelProto | list[str]] = {}
        self.converted = 0
        self.kept = 0  # downgrades the converter refused but the older schema accepts as is
        self.expanded: dict[str, int] = {}  # op -> nodes replaced by the op's function body
        self._bodies: set[tuple] = set()  # cache keys whose entry is a function body
        # the converter's refusal from an opset between
        self.between_error: tuple[int, Exception] | None = None


    def convert(self, node: ir.Node, scope: Scope, body_only: bool = False) -> None:
        """``node`` through onnx.version_converter, else kept as the older schema takes it, else
        moved from an opset between, else its function body (``body_only``: the body at once)."""
        shapes = tuple(None if v is None or v.shape is None else tuple(map(str, v.shape))
                       for v in node.inputs)
        key = (scope.opset, signature(node), shapes if body_only else None)
        converted = self.cache.get(key)
        if converted is None and body_only:
            converted = function_body_model(node, scope.opset, self.target, self.convert_model,
                                            shapes=True)
            if converted is None:
                untyped = [i for i, v in enumerate(node.inputs)
                           if v is not None and input_dtype(v) is None]
                why = (f"its input {untyped[0]} has no tensor type known here (a sequence, or "
                       "untyped), which the body is built from" if untyped else
                       "onnx declines to build the body for this node's attributes and types")
                raise refuse(
                    node, scope, self.target,
                    f"{step_name(node.op_type, since_version(node.op_type, scope.opset))}"
                    f" has no older form but the op's ONNX function body, which cannot be built "
                    f"for it: {why}")
            self._bodies.add(key)
            self.cache[key] = converted
        if converted is None:
            try:
                converted = onnx.version_converter.convert_version(
                    one_node_model(node, scope.opset), self.target)
            # the converter raises RuntimeError/IndexError/... without a type of its own
            except Exception as e:
                if node.op_type == "Constant" and self.target < 12:
                    constant_as_value_tensor(node)  # key stays: same signature, same rewrite
                converted = fits_schema(node, scope.opset, self.target)
                if converted is None:
                    self.between_error = None
                    converted = self._from_opset_between(node, scope.opset)
                if converted is None:
                    converted = function_body_model(node, scope.opset, self.target,
                                                    self.convert_model)
                    if converted is not None:
                        self._bodies.add(key)
                if converted is None:
                    source, error = self.between_error or (scope.opset, e)
                    why = (type_gap(node, self.target)
                           or unknown_type_gap(node, scope.opset, self.target)
                           or converter_reason(node, source, self.target, error))
                    raise refuse(node, scope, self.target, why) from e
            else:
                drop_default_attributes(converted, scope.opset, self.target)
            self.cache[key] = converted
        if isinstance(converted, list):  # valid and the same under the older schema: kept as it is
            if node.op_type == "Constant" and self.target < 12:
                constant_as_value_tensor(node)
            for name in converted:
                del node.attributes[name]
            # (an omitted trailing input the older schema lacks)
            while node.inputs and node.inputs[-1] is None:
                node.resize_inputs(len(node.inputs) - 1)
            self.kept += 1
            return
        # the op's function body, converted: spliced like any converter result
        if key in self._bodies:
            self.expanded[node.op_type] = self.expanded.get(node.op_type, 0) + 1
        refs = {name: a for name, a in node.attributes.items() if is_reference(a)}
        mini = ir.serde.deserialize_model(converted).graph
        if refs:
            self._check_references(node, scope, refs, mini)
        self.splice(node, scope, mini, refs)
        self.converted += 1

    def _from_opset_between(self, node: ir.Node, source: int) -> onnx.ModelProto | None:
        """A node that an opset between the target and ``source`` accepts unchanged, meaning the
        same (:func:`fits_schema`), converted from there (Split-18 with ``split`` is Split-13, which
        the converter takes on to 11); None when there is none or the converter refuses from it
        too."""
        for between in range(self.target + 1, source):
            drop = fits_schema(node, source, between)
            if drop is None:
                continue
            mini = one_node_model(node, between)
            proto_node = mini.graph.node[0]
            for a in [a for a in proto_node.attribute if a.name in drop]:
                proto_node.attribute.remove(a)
            while proto_node.input and not proto_node.input[-1]:
                proto_node.input.pop()
            try:
                converted = onnx.version_converter.convert_version(mini, self.target)
            except Exception as e:  # (no adapter from there either: its reason is the one to give)
                self.between_error = (between, e)
                return None
            drop_default_attributes(converted, between, self.target)
            return converted
        return None

    def _check_references(self, node: ir.Node, scope: Scope, refs: dict, mini: ir.Graph) -> None:
        """A node whose attributes refer to function attributes is converted without them and gets
        them back: only when the converter left it one node of the same op whose target schema has
        each of them, with the same type (else its value might have needed converting too)."""
        same = [n for n in mini if n.op_type == node.op_type]
        try:
            old = onnx.defs.get_schema(node.op_type, self.target, "").attributes
            new = onnx.defs.get_schema(node.op_type, scope.opset, "").attributes
        except onnx.defs.SchemaError:
            old = new = {}
        for name, a in refs.items():
            if (len(same) != 1 or name not in old or name not in new
                    or old[name].type != new[name].type
                    or name in same[0].attributes):
                raise ConversionError(
                    f"cannot convert {describe(node, scope)} to opset {self.target}: its attribute "
                    f"'{name}' refers to the function's attribute '{a.ref_attr_name}', whose value "
                    "is known only at a call site"
                )

    @staticmethod
    def splice(node: ir.Node, scope: Scope, mini: ir.Graph, refs: dict | None = None) -> None:
        by_name = {f"in{i}": v for i, v in enumerate(node.inputs) if v is not None}
        new_nodes = list(mini)
        mini.remove(new_nodes)
        constants = []
        for init_name, init in list(mini.initializers.items()):
            if init_name in by_name:
                continue  # one of our own constant inputs: keep using the original value
            # A constant the adapter created: becomes a Constant node (valid in functions too).
            const = ir.node("Constant", [], attributes={"value": init.const_value}, num_outputs=1)
            by_name[init_name] = const.outputs[0]
            constants.append(const)
        # The one-node model's inputs, read by its nodes and by nodes in their subgraphs
        # (outer-scope references in a function body's If branches): the node's own inputs instead.
        outer = {id(v): by_name[v.name] for v in [*mini.inputs, *mini.initializers.values()]
                 if v.name in by_name}
        for inner in nodes_within(new_nodes):
            for i, value in enumerate(inner.inputs):
                if value is not None and id(value) in outer:
                    inner.replace_input_with(i, outer[id(value)])
        produced = {v.name: v for n in new_nodes for v in n.outputs}
        new_outputs = [produced[o.name] for o in mini.outputs]
        mini.outputs.clear()  # a value may be the output of one graph only
        # Values the adapter made inside the one-node model (e.g. Clip-11's min/max Constants,
        # "_v_4") would repeat at every converted node: unnamed, the graph names them uniquely on
        # insertion. The final outputs take the old names below. The node of the original's op keeps
        # its name.
        final = {id(v) for v in new_outputs}
        # An input of unknown dtype went into the one-node model as float (one_node_model): the
        # types inferred from it are guesses, so none is kept (the outputs keep the original's own
        # below).
        guessed = any(v is not None and v.dtype is None for v in node.inputs)
        named = False
        for new in new_nodes:
            for v in new.outputs:
                if id(v) not in final:
                    v.name = None
                if guessed:
                    v.type, v.shape = None, None
                _forget_invented_dims(v)
            if not named and new.op_type == node.op_type:
                new.name, named = node.name, True
                # the function-attribute references it was converted without
                for name, a in (refs or {}).items():
                    new.attributes[name] = ir.RefAttr(name, a.ref_attr_name, a.type)
            else:
                new.name = None
        # An output the node leaves out (Attention's present_key when omitted) is not handed on:
        # named "" by the swap, the body's node computing it would have no output (onnx.checker
        # fails); it stays a dangling value of its own.
        kept = [(old, new) for old, new in zip(node.outputs, new_outputs)
                if old.name or old.uses() or old.is_graph_output()]
        mark_written(constants + new_nodes, written_for(node, scope))
        ir.convenience.replace_nodes_and_values(
            scope.body, node, [node], constants + new_nodes, [old for old, _ in kept],
            [new for _, new in kept]
        )
        # Names inside the new nodes' subgraphs (a function body's If branches) came from the
        # one-node model and repeat at every splice: prefixed with the node's first output name,
        # unique in the model.
        prefix = f"{new_outputs[0].name}__" if new_outputs else f"{node.name}__"
        for new in new_nodes:
            for a in new.attributes.values():
                graphs = [a.value] if a.type == ir.AttributeType.GRAPH else (
                    list(a.value) if a.type == ir.AttributeType.GRAPHS else [])
                for graph in graphs:
                    for value in _values_within(graph):
                        if value.name:
                            value.name = prefix + value.name

def _forget_invented_dims(value: ir.Value) -> None:
    """Every symbolic dim of a value spliced from a one-node model is one ONNX shape inference
    invented there (:func:`one_node_model` writes the node's own as unknown), named afresh in each
    one (unk__0, unk__1...): spliced in, values of different sizes from different nodes would share
    a name, which claims them equal, and onnxruntime plans one buffer for them and fails at run time
    ("Shape mismatch attempting to re-use buffer"). Such a dim is left unknown; static dims stay.
    (A replaced output takes the node's own declared shape in the splice.)"""
    shape = value.shape
    if shape is not None and not all(isinstance(d, int) for d in shape):
        value.shape = ir.Shape([d if isinstance(d, int) else None for d in shape])


def distinct_nested_names(model: ir.Model) -> None:
    """Values a move wrote into subgraphs are named per graph ('val_0' in each If branch); ONNX
    wants a name once in a graph and the graphs nested in it. A repeated name in a subgraph gets a
    suffix."""
    seen_by_root: dict[str, set[str]] = {}
    for scope in iter_scopes(model):
        root, nested = scope.where.split(" > ")[0], " > " in scope.where
        seen = seen_by_root.setdefault(root, set())
        body = scope.body
        values = [*body.inputs, *(body.initializers.values() if isinstance(body, ir.Graph) else ()),
                  *(v for node in body for v in node.outputs)]
        for value in values:
            if not value.name:
                continue
            if nested and value.name in seen:
                k = 1
                while f"{value.name}__{k}" in seen:
                    k += 1
                value.name = f"{value.name}__{k}"
            seen.add(value.name)


def _values_within(graph: ir.Graph):
    """Every value a graph and the graphs nested in it define: inputs and node outputs."""
    yield from graph.inputs
    for node in graph:
        yield from node.outputs
        for a in node.attributes.values():
            if a.type == ir.AttributeType.GRAPH:
                yield from _values_within(a.value)
            elif a.type == ir.AttributeType.GRAPHS:
                for sub in a.value:
                    yield from _values_within(sub)

