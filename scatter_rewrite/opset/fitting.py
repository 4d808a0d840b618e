"""Schema fitting: which schema a node's op has at an opset, whether a node moves between two, and
whether the older schema takes a node as it is (its data types, attributes and inputs) and means the
same by it, judged by the declared steps (:mod:`scatter_rewrite.opset.steps`)."""

from __future__ import annotations

import functools

import onnx
import onnx.defs
import onnx.helper
import onnx_ir as ir

from scatter_rewrite.graph import const_tensor, is_reference, reference_reason
from scatter_rewrite.opset import steps
from scatter_rewrite.opset.registry import down_forms
from scatter_rewrite.limits import DEFAULT_DOMAINS

__all__ = [
    "allowed_types", "CONTAINER_OPS", "condition_gap", "fits_schema", "input_dtype", "is_default",
    "needs_conversion", "same_by_table", "since_version", "step_name", "text", "type_gap",
    "types_fit", "unknown_type_gap", "value_dtype",
]

# Control-flow nodes carry subgraphs; their own schema changes between 11 and 24 only widen types,
# and their bodies are converted as scopes of their own.
CONTAINER_OPS = {"If", "Loop", "Scan"}


@functools.lru_cache(maxsize=None)
def since_version(op_type: str, opset: int) -> int | None:
    """The version of ``op_type``'s schema in force at ``opset``, None if it does not exist."""
    try:
        return onnx.defs.get_schema(op_type, opset, "").since_version
    except onnx.defs.SchemaError:
        return None


def needs_conversion(op_type: str, source: int, target: int) -> bool:
    """True when the node's schema at ``source`` is not the one in force at ``target``.

    An op absent at ``source`` but present at ``target`` is already a target-level node (one a pass
    just wrote, e.g. ScatterElements replacing Scatter at opset 10): nothing to do.
    """
    if op_type in CONTAINER_OPS or source == target:
        return False
    src = since_version(op_type, source)
    if src is None:
        return since_version(op_type, target) is None
    return src != since_version(op_type, target)


def allowed_types(schema, formal) -> set[str]:
    """The type strings (``tensor(float)``...) ``schema`` allows at its formal parameter
    ``formal``."""
    for constraint in schema.type_constraints:
        if constraint.type_param_str == formal.type_str:
            return set(constraint.allowed_type_strs)
    return {formal.type_str}


def types_fit(schema, formals, dtypes: list[ir.DataType | None], newer=None,
              newer_formals=()) -> bool:
    """Whether ``schema`` takes ``dtypes`` at ``formals``. An unknown dtype (untyped inside a
    function) fits only where every type the ``newer`` schema allows there, which the valid model's
    is, the older one allows too."""
    variadic = formals and formals[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic
    for i, dtype in enumerate(dtypes):
        if i >= len(formals) and not variadic:
            return False
        formal = formals[min(i, len(formals) - 1)]
        if dtype is None:
            if newer is None or not newer_formals:
                return False
            if not (allowed_types(newer, newer_formals[min(i, len(newer_formals) - 1)])
                    <= allowed_types(schema, formal)):
                return False
            continue
        if f"tensor({dtype.name.lower()})" not in allowed_types(schema, formal):
            return False
    return True


def value_dtype(value: ir.Value | None, node: ir.Node) -> ir.DataType | None:
    if (value is not None and isinstance(value.type, ir.TensorType) and value.dtype is not None
            and value.dtype != ir.DataType.UNDEFINED):  # (a subgraph output declared without one)
        return value.dtype
    if node.op_type == "Constant" and "value" in node.attributes:  # its output type is the tensor's
        return node.attributes["value"].value.dtype
    return None


def type_gap(node: ir.Node, target: int) -> str | None:
    """Why ``node`` cannot stay as it is at ``target`` when it is the data types: the first input or
    output whose type the op's schema at ``target`` does not take; None if that is not it."""
    try:
        old = onnx.defs.get_schema(node.op_type, target, "")
    except onnx.defs.SchemaError:
        return None
    for kind, values, formals in (("input", node.inputs, old.inputs),
                                  ("output", node.outputs, old.outputs)):
        variadic = (formals
                    and formals[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic)
        for i, value in enumerate(values):
            if i >= len(formals) and not variadic:
                continue
            allowed = allowed_types(old, formals[min(i, len(formals) - 1)])
            if (value is not None and _is_sequence(value)
                    and not any(t.startswith("seq(") for t in allowed)):
                return f"{node.op_type} at opset {target} takes no sequence ({kind} {i})"
            dtype = value_dtype(value, node) if value is not None else None
            if dtype is None:
                continue
            if f"tensor({dtype.name.lower()})" not in allowed:
                return f"{node.op_type} at opset {target} does not take {dtype.name} ({kind} {i})"
    return None


SEQUENCE_MAKERS = {"SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceErase",
                   "SplitToSequence"}


def _is_sequence(value: ir.Value) -> bool:
    """Whether ``value`` is a sequence: typed so, or made by a sequence op (exporters type the
    sequences a Loop carries nowhere)."""
    if isinstance(value.type, ir.SequenceType):
        return True
    producer = value.producer()
    return (producer is not None and producer.domain in DEFAULT_DOMAINS
            and producer.op_type in SEQUENCE_MAKERS)


def unknown_type_gap(node: ir.Node, source: int, target: int) -> str | None:
    """Why ``node`` cannot stay as it is when a data type it reads or writes is not known here (no
    value info in a subgraph or function) and the older schema takes fewer types than the newer."""
    values = [*node.inputs, *node.outputs]
    if not any(v is not None and value_dtype(v, node) is None for v in values):
        return None
    older, newer = since_version(node.op_type, target), since_version(node.op_type, source)
    return (f"a data type it reads or writes is not known here, and {node.op_type}-{older} does "
            f"not take every type {node.op_type}-{newer} does")


def fits_schema(node: ir.Node, source: int, target: int) -> list[str] | None:
    """For a downgrade the converter refuses: the attributes to drop (their values are the newer
    schema's defaults) if ``node`` is valid and means the same under ``target``'s schema; None if
    not."""
    if target > source or not same_by_table(node, source, target):
        return None
    try:
        old = onnx.defs.get_schema(node.op_type, target, "")
        new = onnx.defs.get_schema(node.op_type, source, "")
    except onnx.defs.SchemaError:
        return None
    # (an attribute a SAME_IF step's condition names holds the value the older op computes by:
    # RoiAlign-16's coordinate_transformation_mode="output_half_pixel" is RoiAlign-10's)
    held = {name for _, step in steps.steps_between(node.op_type, source, target)
            if step.kind == steps.Kind.SAME_IF for name, _ in step.when}
    drop = []
    for name, value in node.attributes.items():
        # (a value the older op lacks: a SAME_IF step's values, judged above)
        if name in old.attributes:
            continue
        if name not in held and not is_default(new, name, value.value):
            return None
        drop.append(name)
    inputs = len(node.inputs)
    while inputs and node.inputs[inputs - 1] is None:  # an omitted trailing input: Pad's axes as ""
        inputs -= 1
    if not old.min_input <= inputs <= old.max_input or len(node.outputs) > old.max_output:
        return None
    inputs = [value_dtype(v, node) for v in node.inputs if v is not None]
    outputs = [value_dtype(v, node) for v in node.outputs]
    if (not types_fit(old, old.inputs, inputs, new, new.inputs)
            or not types_fit(old, old.outputs, outputs, new, new.outputs)):
        return None
    return drop


def step_name(op_type: str, since: int) -> str:
    prev = steps.previous(op_type, since)
    return (f"{op_type}-{since} -> {op_type}-{prev}" if prev is not None
            else f"{op_type}-{since} (no older version)")


def condition_gap(node: ir.Node, step: steps.Step, since: int) -> str | None:
    """Why ``node`` fails a SAME_IF step's condition; None when it holds."""
    try:
        newer = onnx.defs.get_schema(node.op_type, since, "")
    except onnx.defs.SchemaError:
        newer = None
    prev = steps.previous(node.op_type, since)
    for name, wanted in step.when:
        a = node.attributes.get(name)
        if a is not None and is_reference(a):
            return (f"its {reference_reason(node, (name,))}, and {node.op_type}-{prev} means "
                    f"{name}={wanted!r} only")
        if a is None:
            if (wanted == steps.ONES or newer is None
                    or not newer.attributes[name].default_value.name):
                continue
            value = onnx.helper.get_attribute_value(newer.attributes[name].default_value)
        else:
            value = a.value
        value = text(value)
        if wanted == steps.ONES:
            if any(int(v) != 1 for v in value):
                return (f"its {name} {list(value)} are not all 1, which {node.op_type}-{prev} has "
                        "no attribute for")
        elif value != wanted:
            return (f"its {name} is {value!r}, and {node.op_type}-{prev} computes what "
                    f"{name}={wanted!r} does only")
    for name, firsts in step.values:
        a = node.attributes.get(name)
        if a is None:
            continue
        first = max(firsts.values()) if is_reference(a) else firsts.get(text(a.value), 0)
        if first > (prev or 0):
            return f"{node.op_type} has {name} '{text(a.value)}' from opset {first} on"
    return None


def same_by_table(node: ir.Node, source: int, target: int) -> bool:
    """Whether every declared step from ``source`` to ``target`` keeps the node's meaning as it
    is."""
    for since, step in steps.steps_between(node.op_type, source, target):
        if step.kind == steps.Kind.SAME:
            continue
        if step.kind == steps.Kind.SAME_IF and condition_gap(node, step, since) is None:
            continue
        if step.kind == steps.Kind.REWRITE and _neutral(node.op_type, since):
            continue
        return False
    return True
def _neutral(op_type: str, since: int) -> bool:
    """Whether the form of the step down from ``since`` leaves a node without its trigger as it is
    (registered ``neutral``): with none, the step means the same."""
    forms = down_forms(op_type, since)
    return bool(forms) and all(form.neutral for form in forms)


def is_default(schema, name: str, value) -> bool:
    default = schema.attributes[name].default_value if name in schema.attributes else None
    if default is None or not default.name:
        return False
    return text(onnx.helper.get_attribute_value(default)) == text(value)


def text(value):
    return value.decode() if isinstance(value, bytes) else value


def input_dtype(value: ir.Value) -> ir.DataType | None:
    """``value``'s dtype, or its constant tensor's when it records none (a Constant's output)."""
    if value.dtype is not None:
        return value.dtype
    tensor = const_tensor(value)
    return None if tensor is None else tensor.dtype
