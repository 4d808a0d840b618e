"""What the ONNX schema demands of a scatter node, checked before any pass reads the node.

A scatter node's attributes, inputs and outputs are read by every verb (an ``axis`` indexes a
shape, a ``reduction`` picks a lowering): a node whose ``axis`` is a float or a string, that has
two inputs for three, or two outputs, would make our code fail in its own way, or be rewritten
into something that hides the fault. :func:`scatter_node_problem` says what is wrong with such a
node against its op's schema at the node's opset (``onnx.defs``): attributes the schema does not
have or of another type, an input or output count outside the schema's, a required input left
empty. Every pass runs :func:`check_scatter_nodes` first (``ScatterPass.call``; ``specialize``
again on the function copies it writes a call's values into), as do the pipeline and the Python
API before validation plans its inputs; ``upgrade`` on the parsed file checks each ``NodeProto``
(:func:`check_scatter_proto`), and ``check`` blocks such a node.

:func:`input_type_problem` says which input has a data type the schema does not take (ScatterND's
int32 indices, int4 ScatterElements data): ``fold`` refuses to bake such a node into a constant,
which would hide an invalid model (the check is the graph pass's: the evaluator's kernels, a NumPy
library API, take int32 indices on purpose).

Default-domain nodes only: another domain's scatter (``lower --mode custom``) has its own schema.
An op its opset does not have yet (``ScatterElements`` in an opset-10 model, which ``upgrade``
fixes) is held to the op's newest schema here; what the opset lacks is the verbs' to say.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence

import onnx
import onnx.defs
import onnx_ir as ir

from scatter_rewrite.errors import InvalidModelError
from scatter_rewrite.graph import SCATTER_OPS, describe, describe_parts, is_default_domain, iter_nodes
from scatter_rewrite.opset import MAX_OPSET, allowed_types, types_fit

_SINGLE = onnx.defs.OpSchema.FormalParameterOption.Single


@functools.lru_cache(maxsize=None)
def _schema(op_type: str, opset: int, exact: bool = False) -> onnx.defs.OpSchema | None:
    """``op_type``'s schema in force at ``opset``; where it has none, its newest (None if ``exact``)."""
    try:
        return onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return None if exact else onnx.defs.get_schema(op_type, MAX_OPSET, "")


@dataclasses.dataclass(frozen=True)
class _Form:
    """What :func:`scatter_problem` reads of a schema, read once per op and opset (the schema's own
    accessors build new Python objects on each call: a 50k-node graph has thousands of scatters)."""

    name: str  # "ScatterElements-18"
    attributes: dict[str, int]  # name -> AttributeProto type
    inputs: tuple[tuple[str, bool], ...]  # (name, required) per formal input
    min_input: int
    max_input: int
    min_output: int
    max_output: int


@functools.lru_cache(maxsize=None)
def _form(op_type: str, opset: int) -> _Form:
    schema = _schema(op_type, opset)
    return _Form(f"{op_type}-{schema.since_version}", {k: int(a.type) for k, a in schema.attributes.items()},
                 tuple((f.name, f.option == _SINGLE) for f in schema.inputs), schema.min_input, schema.max_input,
                 schema.min_output, schema.max_output)


def scatter_problem(op_type: str, opset: int, attributes: Mapping[str, int], inputs: Sequence[bool],
                    outputs: int) -> str | None:
    """What is wrong with a scatter node of ``op_type`` at ``opset`` against the schema, or None:
    ``attributes`` maps each attribute's name to its type (an ``AttributeProto`` type: what a
    reference to a function attribute declares too), ``inputs`` says which inputs are given (not
    empty), ``outputs`` is the output count. Works from a ``NodeProto`` as from an IR node."""
    form = _form(op_type, opset)
    for attribute, kind in attributes.items():
        expected = form.attributes.get(attribute)
        if expected is None:
            known = ", ".join(sorted(form.attributes)) or "none"
            return f"unknown attribute '{attribute}' ({form.name} has {known})"
        if int(kind) != expected:
            return (f"attribute '{attribute}' is {_attribute_type(kind)}, where {form.name} takes "
                    f"{_attribute_type(expected)}")
    if not form.min_input <= len(inputs) <= form.max_input:
        count = str(form.min_input) if form.min_input == form.max_input else f"{form.min_input} to {form.max_input}"
        return f"{len(inputs)} input(s), where {form.name} takes {count} ({', '.join(n for n, _ in form.inputs)})"
    for i, (given, (formal, required)) in enumerate(zip(inputs, form.inputs)):
        if required and not given:
            return f"input {i} ({formal}) is empty, where {form.name} requires it"
    if not form.min_output <= outputs <= form.max_output:
        return f"{outputs} output(s), where {form.name} has {form.max_output}"
    return None


def scatter_node_problem(node: ir.Node, opset: int) -> str | None:
    """:func:`scatter_problem` of an IR scatter node at ``opset``."""
    return scatter_problem(node.op_type, opset, {k: a.type for k, a in node.attributes.items()},
                           [v is not None for v in node.inputs], len(node.outputs))


def check_scatter_nodes(model: ir.Model) -> None:
    """Raise InvalidModelError naming the first default-domain scatter node (any graph, subgraph
    or function) that :func:`scatter_node_problem` finds wrong."""
    for node, scope in iter_nodes(model):
        if node.op_type not in SCATTER_OPS or not is_default_domain(node):
            continue
        if problem := scatter_node_problem(node, scope.opset):
            raise _malformed(describe(node, scope), problem)


def check_scatter_proto(node: onnx.NodeProto, opset: int, where: str) -> None:
    """:func:`check_scatter_nodes` for one ``NodeProto`` (a rewrite done on the parsed file) of a
    default domain, in ``where`` (as :func:`scatter_rewrite.graph.describe_parts` says it)."""
    if node.op_type not in SCATTER_OPS:
        return
    problem = scatter_problem(node.op_type, opset, {a.name: a.type for a in node.attribute},
                              [bool(name) for name in node.input], len(node.output))
    if problem:
        raise _malformed(describe_parts(node.op_type, node.name, opset, where), problem)


def _malformed(node: str, problem: str) -> InvalidModelError:
    return InvalidModelError(f"{node}: {problem}; fix the exporter or the model (onnx.checker and onnxruntime "
                             "reject it)")


def input_type_problem(node: ir.Node, opset: int, dtypes: Sequence[ir.DataType | None]) -> str | None:
    """The first input of scatter ``node`` whose data type (``dtypes``, one per input; None:
    unknown) the op's schema at ``opset`` does not take, said with the types it takes; None when
    all fit, or when the op has no schema at ``opset``."""
    schema = _schema(node.op_type, opset, exact=True)
    if schema is None:
        return None
    for i, (value, dtype, formal) in enumerate(zip(node.inputs, dtypes, schema.inputs)):
        if dtype is None or types_fit(schema, [formal], [dtype]):
            continue
        allowed = sorted(t.removeprefix("tensor(").removesuffix(")") for t in allowed_types(schema, formal))
        takes = f" ({formal.name} must be {' or '.join(allowed)})" if len(allowed) <= 3 else ""
        label = f" '{value.name}'" if value is not None and value.name else ""
        return (f"input {i}{label} ({formal.name}) is {dtype.name}, which {node.op_type}-{schema.since_version} "
                f"does not take{takes}")
    return None


def _attribute_type(kind) -> str:
    """An attribute type's name (INT, FLOAT, ...), from an ``AttributeProto``/IR/schema type."""
    try:
        return ir.AttributeType(int(kind)).name
    except ValueError:
        return f"type {int(kind)}"
