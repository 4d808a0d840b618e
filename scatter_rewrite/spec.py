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
from scatter_rewrite.graph import (
    SCATTER_OPS, describe, describe_parts, is_default_domain, is_reference, iter_nodes,
    schema_opset,
)
# (REDUCTIONS_SINCE re-exported: opset/steps.py reads it here)
from scatter_rewrite.limits import REDUCTIONS_SINCE, highest_opset

__all__ = [
    "check_scatter_nodes", "check_scatter_proto", "form_from_schema", "FORMS_CHECKED_UP_TO",
    "input_type_problem", "REDUCTIONS_SINCE", "scatter_node_problem",
]

_SINGLE = onnx.defs.OpSchema.FormalParameterOption.Single

TENSOR_SCATTER_MODES = ("linear", "circular")


@dataclasses.dataclass(frozen=True)
class _Form:
    """What :func:`scatter_problem` and :func:`input_type_problem` read of a scatter's schema."""

    name: str  # "ScatterElements-18"
    attributes: dict[str, int]  # name -> AttributeProto type
    inputs: tuple[tuple[str, bool], ...]  # (name, required) per formal input
    types: tuple[frozenset[str], ...]  # the type strings ("tensor(float)") each formal input takes
    min_input: int
    max_input: int
    min_output: int
    max_output: int


# The scatter ops' schemas as onnx.defs gives them, up to opset FORMS_CHECKED_UP_TO
# (tests/test_spec.py checks every entry and every opset against onnx.defs). Read from here, not
# from onnx.defs, because onnx builds every op's schema on its first schema lookup (~7 MiB) and
# every verb checks its scatters before reading them: for fold that was before its peak, past the
# benchmark's 2x-the-model target. A newer opset is read from onnx.defs.
FORMS_CHECKED_UP_TO = 28
_T15 = frozenset(f"tensor({t})" for t in (
    "bool", "complex64", "complex128", "double", "float", "float16", "int8", "int16", "int32",
    "int64", "string", "uint8", "uint16", "uint32", "uint64"))
_T16 = _T15 | {"tensor(bfloat16)"}  # from opset 13
_T24 = _T16 | {f"tensor({t})" for t in (  # TensorScatter-24
    "float4e2m1", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "float8e8m0",
    "int4", "uint4")}
_TIND = frozenset({"tensor(int32)", "tensor(int64)"})
_INT64 = frozenset({"tensor(int64)"})
_INT, _STRING = int(onnx.AttributeProto.INT), int(onnx.AttributeProto.STRING)
_DIU = (("data", True), ("indices", True), ("updates", True))


def _scatter_form(op: str, since: int, attributes: dict[str, int], t: frozenset[str],
                  tind: frozenset[str]) -> _Form:
    return _Form(f"{op}-{since}", attributes, _DIU, (t, tind, t), 3, 3, 1, 1)


_FORMS = {
    ("Scatter", 9): _scatter_form("Scatter", 9, {"axis": _INT}, _T15, _TIND),
    ("Scatter", 11): _scatter_form("Scatter", 11, {"axis": _INT}, _T15, _TIND),  # (deprecated)
    ("ScatterElements", 11): _scatter_form("ScatterElements", 11, {"axis": _INT}, _T15, _TIND),
    ("ScatterElements", 13): _scatter_form("ScatterElements", 13, {"axis": _INT}, _T16, _TIND),
    ("ScatterElements", 16): _scatter_form("ScatterElements", 16,
                                           {"axis": _INT, "reduction": _STRING}, _T16, _TIND),
    ("ScatterElements", 18): _scatter_form("ScatterElements", 18,
                                           {"axis": _INT, "reduction": _STRING}, _T16, _TIND),
    ("ScatterND", 11): _scatter_form("ScatterND", 11, {}, _T15, _INT64),
    ("ScatterND", 13): _scatter_form("ScatterND", 13, {}, _T16, _INT64),
    ("ScatterND", 16): _scatter_form("ScatterND", 16, {"reduction": _STRING}, _T16, _INT64),
    ("ScatterND", 18): _scatter_form("ScatterND", 18, {"reduction": _STRING}, _T16, _INT64),
    ("TensorScatter", 24): _Form("TensorScatter-24", {"axis": _INT, "mode": _STRING},
                                 (("past_cache", True), ("update", True), ("write_indices", False)),
                                 (_T24, _T24, _INT64), 2, 3, 1, 1),
}


@functools.lru_cache(maxsize=None)
def _form(op_type: str, opset: int, exact: bool = False) -> _Form | None:
    """``op_type``'s form in force at ``opset``; where it has none, its newest (None if
    ``exact``)."""
    if opset > FORMS_CHECKED_UP_TO:
        return form_from_schema(op_type, opset, exact)
    versions = sorted(v for op, v in _FORMS if op == op_type)
    in_force = [v for v in versions if v <= opset]
    if not in_force and exact:
        return None
    return _FORMS[op_type, in_force[-1] if in_force else versions[-1]]


def form_from_schema(op_type: str, opset: int, exact: bool = False) -> _Form | None:
    """:func:`_form` read from onnx.defs (what the table holds, for the opsets it covers)."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        if exact:
            return None
        schema = onnx.defs.get_schema(op_type, highest_opset(), "")
    constraints = {c.type_param_str: frozenset(c.allowed_type_strs)
                   for c in schema.type_constraints}
    return _Form(f"{op_type}-{schema.since_version}",
                 {k: int(a.type) for k, a in schema.attributes.items()},
                 tuple((f.name, f.option == _SINGLE) for f in schema.inputs),
                 tuple(constraints.get(f.type_str, frozenset({f.type_str})) for f in schema.inputs),
                 schema.min_input, schema.max_input, schema.min_output, schema.max_output)


def scatter_problem(op_type: str, opset: int, attributes: Mapping[str, int], inputs: Sequence[bool],
                    outputs: int, values: Mapping[str, object] | None = None,
                    rank: int | None = None) -> str | None:
    """What is wrong with a scatter node of ``op_type`` at ``opset`` against the schema, or None:
    ``attributes`` maps each attribute's name to its type (an ``AttributeProto`` type: what a
    reference to a function attribute declares too), ``inputs`` says which inputs are given (not
    empty), ``outputs`` is the output count. Works from a ``NodeProto`` as from an IR node."""
    form = _form(op_type, opset)
    problem = _schema_problem(form, attributes, inputs, outputs)
    if problem is not None:
        return f"{problem} (onnx.checker and onnxruntime reject it)"
    return _value_problem(op_type, values or {}, rank)


def _schema_problem(form: _Form, attributes: Mapping[str, int], inputs: Sequence[bool],
                    outputs: int) -> str | None:
    for attribute, kind in attributes.items():
        expected = form.attributes.get(attribute)
        if expected is None:
            known = ", ".join(sorted(form.attributes)) or "none"
            return f"unknown attribute '{attribute}' ({form.name} has {known})"
        if int(kind) != expected:
            return (f"attribute '{attribute}' is {_attribute_type(kind)}, where {form.name} takes "
                    f"{_attribute_type(expected)}")
    if not form.min_input <= len(inputs) <= form.max_input:
        count = (str(form.min_input) if form.min_input == form.max_input
                 else f"{form.min_input} to {form.max_input}")
        return (f"{len(inputs)} input(s), where {form.name} takes {count} "
                f"({', '.join(n for n, _ in form.inputs)})")
    for i, (given, (formal, required)) in enumerate(zip(inputs, form.inputs)):
        if required and not given:
            return f"input {i} ({formal}) is empty, where {form.name} requires it"
    if not form.min_output <= outputs <= form.max_output:
        return f"{outputs} output(s), where {form.name} has {form.max_output}"
    return None


def _value_problem(op_type: str, values: Mapping[str, object], rank: int | None) -> str | None:
    """An attribute value the op does not define (the schema gives only its type): an unknown
    reduction or TensorScatter mode, an axis outside the data's rank (when known), or
    TensorScatter's batch axis 0. (A reduction newer than the node's opset, max at 16, is left to
    the verbs: onnxruntime runs it.)"""
    reduction = values.get("reduction")
    if reduction is not None and reduction not in REDUCTIONS_SINCE:
        return (f"reduction '{reduction}' is not one of {', '.join(REDUCTIONS_SINCE)} (the ONNX "
                "spec defines no other)")
    mode = values.get("mode")
    if op_type == "TensorScatter" and mode is not None and mode not in TENSOR_SCATTER_MODES:
        return (f"mode '{mode}' is not one of {', '.join(TENSOR_SCATTER_MODES)} (onnxruntime "
                "rejects it)")
    axis = values.get("axis", -2 if op_type == "TensorScatter" else 0)
    if rank is not None and op_type != "ScatterND" and not -rank <= axis < rank:
        return (f"axis={axis} is out of range for rank {rank} (allowed {-rank}..{rank - 1}; "
                "onnxruntime rejects it)")
    if rank is not None and op_type == "TensorScatter" and axis % rank == 0:
        return (f"axis={axis} is the batch dimension 0, along which TensorScatter does not write "
                "(the ONNX spec)")
    return None


def scatter_node_problem(node: ir.Node, opset: int) -> str | None:
    """:func:`scatter_problem` of an IR scatter node at ``opset`` (its data's rank where known)."""
    data = node.inputs[0] if node.inputs else None
    rank = len(data.shape) if data is not None and data.shape is not None else None
    # (@ax: known at a call)
    values = {k: a.value for k, a in node.attributes.items() if not is_reference(a)}
    return scatter_problem(node.op_type, opset, {k: a.type for k, a in node.attributes.items()},
                           [v is not None for v in node.inputs], len(node.outputs), values, rank)


def check_scatter_nodes(model: ir.Model) -> None:
    """Raise InvalidModelError naming the first default-domain scatter node (any graph, subgraph
    or function) that :func:`scatter_node_problem` finds wrong."""
    for node, scope in iter_nodes(model):
        if node.op_type not in SCATTER_OPS or not is_default_domain(node):
            continue
        if problem := scatter_node_problem(node, schema_opset(node, scope)):
            raise _malformed(describe(node, scope), problem)


def check_scatter_proto(node: onnx.NodeProto, opset: int, where: str,
                        rank: int | None = None) -> None:
    """:func:`check_scatter_nodes` for one ``NodeProto`` (a rewrite done on the parsed file) of a
    default domain, in ``where`` (as :func:`scatter_rewrite.graph.describe_parts` says it), whose
    data has rank ``rank`` where known."""
    if node.op_type not in SCATTER_OPS:
        return
    values = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute
              if not a.ref_attr_name}
    values = {k: v.decode() if isinstance(v, bytes) else v for k, v in values.items()}
    problem = scatter_problem(node.op_type, opset, {a.name: a.type for a in node.attribute},
                              [bool(name) for name in node.input], len(node.output), values, rank)
    if problem:
        raise _malformed(describe_parts(node.op_type, node.name, opset, where), problem)


def _malformed(node: str, problem: str) -> InvalidModelError:
    return InvalidModelError(f"{node}: {problem}; fix the exporter or the model")


def input_type_problem(node: ir.Node, opset: int,
                       dtypes: Sequence[ir.DataType | None]) -> str | None:
    """The first input of scatter ``node`` whose data type (``dtypes``, one per input; None:
    unknown) the op's schema at ``opset`` does not take, said with the types it takes; None when
    all fit, or when the op has no schema at ``opset``."""
    form = _form(node.op_type, opset, exact=True)
    if form is None:
        return None
    for i, (value, dtype, (formal, _), allowed) in enumerate(
            zip(node.inputs, dtypes, form.inputs, form.types)):
        if dtype is None or f"tensor({dtype.name.lower()})" in allowed:
            continue
        names = sorted(t.removeprefix("tensor(").removesuffix(")") for t in allowed)
        takes = f" ({formal} must be {' or '.join(names)})" if len(names) <= 3 else ""
        label = f" '{value.name}'" if value is not None and value.name else ""
        return (f"input {i}{label} ({formal}) is {dtype.name}, which {form.name} does not "
                f"take{takes}")
    return None


def _attribute_type(kind) -> str:
    """An attribute type's name (INT, FLOAT, ...), from an ``AttributeProto``/IR/schema type."""
    try:
        return ir.AttributeType(int(kind)).name
    except ValueError:
        return f"type {int(kind)}"
