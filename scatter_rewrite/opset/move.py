"""Move a model's default-domain opset to a target, node by node, by the declared version steps.

Every step of every default-domain op is declared in :mod:`scatter_rewrite.opset.steps`; moving a
node down walks its steps from its version to the one in force at the target, newest first:

* SAME / SAME_IF: the older schema means the same (SAME_IF: when the node's attributes hold the
  step's condition; else no form, or the op's function body where the step says so). The node is
  kept, without the attributes the older schema lacks (at their newer defaults), when the older
  schema takes its data types (:func:`fits_schema`); else the converter, which names the type.
* a named exact rewrite (:data:`REWRITES`, one explicit :data:`Form` result): Softmax's axis,
  Reduce* axes (constant, or at run time axis by axis), Split's num_outputs, Pad's and Resize's
  axes, Reshape's allowzero, Shape's start/end, Trilu, Mod's fmod=0 on floats, GridSample's modes,
  Max/Min on integers; each replaced node's new nodes are moved on in turn.
* CONVERTER: ``onnx.version_converter``'s adapter, on a one-node model per distinct node signature
  (cached), spliced back; where it has none, the node kept as the older schema takes it, or moved
  from an opset between, or its function body.
* BODY: the op's ONNX function body (:func:`_function_body_model`), the spec's own definition of the
  op, whose nodes are then moved in turn; a runtime's fused kernel and the body's separate ops may
  round float results differently, so :class:`OpsetMove` lists such expansions for validation.
* NO_FORM: a ConversionError naming the node, the step and why.

Cost: linear in the number of nodes (one-node conversions cached by signature). Constant means known
before run time: an initializer that is also a graph input is a default callers may override
(:func:`scatter_rewrite.graph.is_overridable`), and no form reads its value. A moved model that
fails onnx.checker (full) or onnxruntime's session creation, where the model given did not, is a
ConversionError naming the step, raised before anything is returned (:func:`_verify_move`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re

import numpy as np
import onnx
import onnx.defs
import onnx.helper
import onnx.inliner
import onnx.shape_inference
import onnx.version_converter
import onnx_ir as ir

from scatter_rewrite.errors import ConversionError
from scatter_rewrite.opset import steps
from scatter_rewrite.graph import (
    DEFAULT_DOMAINS, Scope, attr, attribute_key, constant_tensor, default_opset, describe,
    is_default_domain, is_overridable, is_reference, iter_scopes, reference_reason, tensor_key,
)

__all__ = [
    "convert_opset", "fits_schema", "MAX_OPSET", "MIN_IR_VERSION", "MIN_OPSET", "move_to_opset",
    "needs_conversion", "opset_note", "OpsetMove", "REWRITES", "since_version",
]

logger = logging.getLogger("scatter_rewrite")

MIN_IR_VERSION = 7  # opset >= 11 needs IR >= 6; 7 keeps training-free models loadable everywhere
MIN_OPSET = 7  # oldest opset the converter's adapters start from that we accept as a source
MAX_OPSET = onnx.defs.onnx_opset_version()

# Control-flow nodes carry subgraphs; their own schema changes between 11 and 24 only widen types,
# and their bodies are converted as scopes of their own.
_CONTAINER_OPS = {"If", "Loop", "Scan"}


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
    if op_type in _CONTAINER_OPS or source == target:
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


def _dtype(value: ir.Value | None, node: ir.Node) -> ir.DataType | None:
    if (value is not None and isinstance(value.type, ir.TensorType) and value.dtype is not None
            and value.dtype != ir.DataType.UNDEFINED):  # (a subgraph output declared without one)
        return value.dtype
    if node.op_type == "Constant" and "value" in node.attributes:  # its output type is the tensor's
        return node.attributes["value"].value.dtype
    return None


def _type_gap(node: ir.Node, target: int) -> str | None:
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
            dtype = _dtype(value, node) if value is not None else None
            if dtype is None or (i >= len(formals) and not variadic):
                continue
            allowed = allowed_types(old, formals[min(i, len(formals) - 1)])
            if f"tensor({dtype.name.lower()})" not in allowed:
                return f"{node.op_type} at opset {target} does not take {dtype.name} ({kind} {i})"
    return None


def _unknown_type_gap(node: ir.Node, source: int, target: int) -> str | None:
    """Why ``node`` cannot stay as it is when a data type it reads or writes is not known here (no
    value info in a subgraph or function) and the older schema takes fewer types than the newer."""
    values = [*node.inputs, *node.outputs]
    if not any(v is not None and _dtype(v, node) is None for v in values):
        return None
    older, newer = since_version(node.op_type, target), since_version(node.op_type, source)
    return (f"a data type it reads or writes is not known here, and {node.op_type}-{older} does "
            f"not take every type {node.op_type}-{newer} does")


def fits_schema(node: ir.Node, source: int, target: int) -> list[str] | None:
    """For a downgrade the converter refuses: the attributes to drop (their values are the newer
    schema's defaults) if ``node`` is valid and means the same under ``target``'s schema; None if
    not."""
    if target > source or not _same_by_table(node, source, target):
        return None
    try:
        old = onnx.defs.get_schema(node.op_type, target, "")
        new = onnx.defs.get_schema(node.op_type, source, "")
    except onnx.defs.SchemaError:
        return None
    drop = []
    for name, value in node.attributes.items():
        # (a value the older op lacks: a SAME_IF step's values, judged above)
        if name in old.attributes:
            continue
        if not _is_default(new, name, value.value):
            return None
        drop.append(name)
    inputs = len(node.inputs)
    while inputs and node.inputs[inputs - 1] is None:  # an omitted trailing input: Pad's axes as ""
        inputs -= 1
    if not old.min_input <= inputs <= old.max_input or len(node.outputs) > old.max_output:
        return None
    inputs = [_dtype(v, node) for v in node.inputs if v is not None]
    outputs = [_dtype(v, node) for v in node.outputs]
    if (not types_fit(old, old.inputs, inputs, new, new.inputs)
            or not types_fit(old, old.outputs, outputs, new, new.outputs)):
        return None
    return drop


# Forms onnx.version_converter refuses to move, or moves to another meaning, that have an exact form
# at the target (:func:`exact_form`).
_SOFTMAX_OPS = frozenset({"Softmax", "LogSoftmax", "Hardmax"})
# With noop_with_empty_axes set and no axes these reduce nothing and are the input as it is; the
# other Reduce* still apply their elementwise step (:func:`_elementwise_step`).
_PURE_REDUCE_OPS = frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"})


@dataclasses.dataclass(frozen=True)
class Unchanged:
    """The step means the same for this node as it is (or as the form left it, attributes
    rewritten)."""


@dataclasses.dataclass(frozen=True)
class Done:
    """The node is now in its form at the target: nothing more to do."""


@dataclasses.dataclass(frozen=True)
class Replaced:
    """The node was replaced by ``nodes`` (valid at the scope's opset), each moved on in turn."""

    nodes: tuple[ir.Node, ...]


@dataclasses.dataclass(frozen=True)
class Prepared:
    """New ``nodes`` compute the node's inputs in their older form; the node goes on to its older
    steps."""

    nodes: tuple[ir.Node, ...]


Form = Unchanged | Done | Replaced | Prepared  # what an exact rewrite (:data:`REWRITES`) returns
UNCHANGED, DONE = Unchanged(), Done()


def exact_form(node: ir.Node, scope: Scope, target: int) -> Form:
    """Upwards: the Softmax family's form (:func:`_softmax_form`), the one op whose meaning changes
    going up (the converter keeps Hardmax's axis at 13); every other node unchanged."""
    if node.op_type in _SOFTMAX_OPS:
        return _softmax_form(node, scope, target)
    return UNCHANGED


def _refuse(node: ir.Node, scope: Scope, target: int, why: str) -> ConversionError:
    return ConversionError(f"cannot convert {describe(node, scope)} to opset {target}: {why}")


# Rewrites that leave a node without their trigger as it is: with none, their step means the same.
# The engine applies a step's rewrite before it judges the steps: after it, the node is one the step
# keeps.
_NEUTRAL_REWRITES = frozenset({"split_num_outputs", "pad_axes", "reshape_allowzero", "shape_slice",
                               "mod_floor", "constant_value_tensor", "reduce_axes",
                               "grid_sample_mode", "resize_axes", "resize_inputs",
                               "min_max_integers"})


def _previous(op_type: str, since: int) -> int | None:
    older = [v for v in steps.versions(op_type) if v < since]
    return older[-1] if older else None


def _step_name(op_type: str, since: int) -> str:
    prev = _previous(op_type, since)
    return (f"{op_type}-{since} -> {op_type}-{prev}" if prev is not None
            else f"{op_type}-{since} (no older version)")


def _condition_gap(node: ir.Node, step: steps.Step, since: int) -> str | None:
    """Why ``node`` fails a SAME_IF step's condition; None when it holds."""
    try:
        newer = onnx.defs.get_schema(node.op_type, since, "")
    except onnx.defs.SchemaError:
        newer = None
    prev = _previous(node.op_type, since)
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
        value = _text(value)
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
        first = max(firsts.values()) if is_reference(a) else firsts.get(_text(a.value), 0)
        if first > (prev or 0):
            return f"{node.op_type} has {name} '{_text(a.value)}' from opset {first} on"
    return None


def _same_by_table(node: ir.Node, source: int, target: int) -> bool:
    """Whether every declared step from ``source`` to ``target`` keeps the node's meaning as it
    is."""
    for since, step in steps.steps_between(node.op_type, source, target):
        if step.kind == steps.Kind.SAME:
            continue
        if step.kind == steps.Kind.SAME_IF and _condition_gap(node, step, since) is None:
            continue
        if step.kind == steps.Kind.REWRITE and step.rewrite in _NEUTRAL_REWRITES:
            continue
        return False
    return True


_FLOATS = frozenset({ir.DataType.FLOAT16, ir.DataType.FLOAT, ir.DataType.DOUBLE,
                     ir.DataType.BFLOAT16})


def _mod_form(node: ir.Node, scope: Scope, target: int) -> Form:
    """Mod-28 takes ``fmod=0`` on floats: the remainder with the divisor's sign (Python's ``%``).
    Older Mods take floats only with ``fmod=1`` (C's fmod, the dividend's sign). The same from it:
    r = fmod(a, b), plus b where r is non-zero and its sign is not b's (exact: r and b then have
    opposite signs and |r| < |b|, so r + b rounds like the true remainder, inf and NaN as ``%``)."""
    if target >= 28 or attr(node, "fmod", 0) != 0 or _input_dtype(node.inputs[0]) not in _FLOATS:
        return UNCHANGED
    a, b = node.inputs
    dtype, shape = _input_dtype(a), node.outputs[0].shape
    zero = _constant(np.zeros((), dtype.numpy()))
    r = _typed(ir.node("Mod", [a, b], {"fmod": 1}), dtype, shape)
    r_neg = _typed(ir.node("Less", [r.outputs[0], zero.outputs[0]]), ir.DataType.BOOL, shape)
    b_neg = _typed(ir.node("Less", [b, zero.outputs[0]]), ir.DataType.BOOL, None)
    signs = _typed(ir.node("Xor", [r_neg.outputs[0], b_neg.outputs[0]]), ir.DataType.BOOL, shape)
    r_zero = _typed(ir.node("Equal", [r.outputs[0], zero.outputs[0]]), ir.DataType.BOOL, shape)
    r_nonzero = _typed(ir.node("Not", [r_zero.outputs[0]]), ir.DataType.BOOL, shape)
    fix = _typed(ir.node("And", [signs.outputs[0], r_nonzero.outputs[0]]), ir.DataType.BOOL, shape)
    shifted = _typed(ir.node("Add", [r.outputs[0], b]), dtype, shape)
    out = ir.node("Where", [fix.outputs[0], shifted.outputs[0], r.outputs[0]])
    nodes = [zero, r, r_neg, b_neg, signs, r_zero, r_nonzero, fix, shifted, out]
    _replace(node, scope, nodes, list(out.outputs))
    return Replaced(tuple(nodes))


# Ops through which a value computed from small constants alone is known before run time here (an
# exporter's ``Reshape(Constant, [-1])`` for a Reduce's axes).
_FOLDABLE = frozenset({"Identity", "Reshape", "Concat", "Cast"})


def _known_value(value: ir.Value | None, depth: int = 4) -> ir.TensorProtocol | None:
    """``value``'s tensor when it is a constant (:func:`constant_tensor`) or computed from small
    constants alone through Identity, Reshape (without allowzero), Concat or Cast; None
    otherwise."""
    tensor = constant_tensor(value)
    if tensor is not None or value is None or depth == 0:
        return tensor
    node = value.producer()
    if (node is None or not is_default_domain(node) or node.op_type not in _FOLDABLE
            or len(node.outputs) != 1):
        return None
    inputs = [_known_value(v, depth - 1) for v in node.inputs]
    if any(t is None for t in inputs) or any(t.size > 64 for t in inputs):
        return None
    arrays = [t.numpy() for t in inputs]
    if node.op_type == "Identity":
        result = arrays[0]
    # (0: the input's dimension there)
    elif node.op_type == "Reshape" and not attr(node, "allowzero", 0):
        dims = [int(d) for d in arrays[1].reshape(-1)]
        result = arrays[0].reshape([arrays[0].shape[i] if d == 0 else d
                                    for i, d in enumerate(dims)])
    elif (node.op_type == "Concat"
          and not is_reference(node.attributes.get("axis", ir.AttrInt64("axis", 0)))):
        result = np.concatenate(arrays, axis=attr(node, "axis", 0))
    elif node.op_type == "Cast" and not is_reference(node.attributes["to"]):
        numpy_type = ir.DataType(attr(node, "to")).numpy()
        if numpy_type is None:
            return None
        result = arrays[0].astype(numpy_type)
    else:
        return None
    return ir.tensor(np.ascontiguousarray(result))


def _not_constant(value: ir.Value, what: str) -> str:
    """Why input ``what`` (``value``) has no value before run time, for a refusal."""
    if is_overridable(value):
        return (f"its {what} '{value.name}' is a graph input with an initializer, which callers "
                "may override (a default, not a constant)")
    verb = "are" if what == "axes" else "is"
    if value.is_graph_input():
        return f"its {what} '{value.name}' {verb} a graph input, known only at run time"
    return f"its {what} {verb} computed in the graph"


def _replace(node: ir.Node, scope: Scope, new_nodes: list[ir.Node],
             outputs: list[ir.Value]) -> None:
    """``new_nodes`` in ``node``'s place; ``outputs`` take its outputs' names, types and uses."""
    named = False
    for new in new_nodes:  # the first of the same op keeps the name (None: named on insertion)
        new.name = node.name if new.op_type == node.op_type and not named else None
        named = named or new.name is not None
    ir.convenience.replace_nodes_and_values(scope.body, node, [node], new_nodes, list(node.outputs),
                                            outputs)


def _constant(array: np.ndarray) -> ir.Node:
    const = ir.node("Constant", [], attributes={"value": ir.tensor(array)}, num_outputs=1)
    const.outputs[0].dtype, const.outputs[0].shape = (ir.DataType.from_numpy(array.dtype),
                                                      ir.Shape(array.shape))
    return const


def _typed(node: ir.Node, dtype: ir.DataType | None, shape: ir.Shape | None) -> ir.Node:
    """``node`` with its output's dtype and shape set, when the dtype is known (converting a node
    reads its input types)."""
    if dtype is not None:
        node.outputs[0].dtype, node.outputs[0].shape = dtype, shape
    return node


def _softmax_form(node: ir.Node, scope: Scope, target: int) -> Form:
    """Softmax, LogSoftmax and Hardmax before opset 13 flatten the input to 2-D at ``axis`` (default
    1) and normalize over every axis from it on; from 13, over ``axis`` (default -1) alone. The same
    on the last axis, where the node stays with its axis written out. Another axis, moving down:
    moved last and back around the op (Transpose, exact), which needs the input's rank; moving up:
    the older op's own flattening, Flatten(axis) -> the op on the last axis -> Reshape to the
    input's shape (the converter's Softmax adapter writes that; its Hardmax adapter keeps the axis,
    another function)."""
    if (scope.opset < 13) == (target < 13):
        return UNCHANGED
    up = target > scope.opset
    x = node.inputs[0]
    rank = None if x is None or x.shape is None else len(x.shape)
    reason = reference_reason(node, ("axis",))
    if reason is not None and not up:
        raise _refuse(node, scope, target, f"its {reason}, and opset {target}'s {node.op_type} "
                                           "reads an axis other than the last otherwise")
    axis = attr(node, "axis", 1 if up else -1)
    if axis is not None and rank is not None and not -rank <= axis < rank:
        raise _refuse(node, scope, target, f"axis {axis} is out of range for its rank-{rank} input")
    if axis == -1 or (axis is not None and rank is not None and axis == rank - 1):
        gap = _type_gap(node, target)
        if gap is not None:
            raise _refuse(node, scope, target, gap)
        node.attributes["axis"] = ir.AttrInt64("axis", axis)  # (written: the default changes at 13)
        return DONE  # the last axis: what the op does at both opsets
    if up:
        if reason is None:
            flatten_axis = ir.AttrInt64("axis", axis)
        # a function attribute's axis goes to Flatten, whose default (1) is the older op's too
        else:
            ref = node.attributes["axis"]
            flatten_axis = ir.RefAttr("axis", ref.ref_attr_name, ref.type)
        flatten = _typed(ir.node("Flatten", [x], {"axis": flatten_axis}), x.dtype,
                         ir.Shape([None, None]))
        shape = _typed(ir.node("Shape", [x]), ir.DataType.INT64,
                       None if rank is None else ir.Shape([rank]))
        inner = _typed(ir.node(node.op_type, [flatten.outputs[0]], {"axis": -1}), x.dtype,
                       ir.Shape([None, None]))
        reshape = ir.node("Reshape", [inner.outputs[0], shape.outputs[0]])
        _replace(node, scope, [flatten, shape, inner, reshape], list(reshape.outputs))
        return Replaced((flatten, shape, inner, reshape))
    if rank is None:
        raise _refuse(node, scope, target, f"its input's rank is unknown, and opset {target}'s "
                                           f"{node.op_type} takes axis {axis} to mean every axis "
                                           "from it on (the same only on the last axis, which it "
                                           "cannot be moved to without the rank)")
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]  # (a swap: its own inverse)
    before = ir.node("Transpose", [x], {"perm": perm})
    inner = ir.node(node.op_type, [before.outputs[0]], {"axis": -1})
    after = ir.node("Transpose", [inner.outputs[0]], {"perm": perm})
    for value in (before.outputs[0], inner.outputs[0]):
        value.dtype, value.shape = x.dtype, ir.Shape([x.shape[i] for i in perm])
    _replace(node, scope, [before, inner, after], list(after.outputs))
    return Replaced((before, inner, after))


def _reduce_form(node: ir.Node, scope: Scope, target: int) -> Form:
    """ReduceSum-13 and the other Reduce*-18 take ``axes`` as an input, with
    ``noop_with_empty_axes``: set, empty axes reduce nothing, else they mean every axis. Older
    versions take constant axes as an attribute, where none means every axis. So empty or absent
    axes with the flag set become Identity, or the op's elementwise step where it has one
    (:func:`_elementwise_step`); constant axes are written as the older attribute here (the
    converter writes ``axes=[]`` for every axis, keeps the flag set, and has no ReduceMax 13 -> 12
    adapter); computed ones, and an initializer callers may override, have no older form."""
    try:
        old = onnx.defs.get_schema(node.op_type, target, "")
    except onnx.defs.SchemaError:
        return UNCHANGED
    # the target takes axes as an input, and the flag, too
    if "noop_with_empty_axes" in old.attributes:
        return UNCHANGED
    noop = node.attributes.get("noop_with_empty_axes")
    if noop is not None and is_reference(noop):
        raise _refuse(node, scope, target, "its "
                                           f"{reference_reason(node, ('noop_with_empty_axes',))}, "
                                           f"and opset {target}'s {node.op_type} reduces every "
                                           "axis when given none")
    axes = None
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        axes = _known_value(node.inputs[1])
        if axes is None:
            x = node.inputs[0]
            if x is None or x.shape is None:
                raise _refuse(node, scope, target, f"{_not_constant(node.inputs[1], 'axes')}, "
                                                   f"opset {target}'s {node.op_type} takes them as "
                                                   "a constant attribute, and its input's rank, "
                                                   "which reducing axis by axis needs, is unknown")
            return _reduce_axis_by_axis(node, scope, target)
    if noop is not None and noop.value and (axes is None or axes.size == 0):
        if node.op_type not in _PURE_REDUCE_OPS:
            return _elementwise_step(node, scope, target)
        identity = ir.node("Identity", [node.inputs[0]])
        _replace(node, scope, [identity], list(identity.outputs))
        return Replaced((identity,))
    if axes is None:
        # every axis at both opsets (the flag at its default: dropped after conversion)
        return UNCHANGED
    gap = _type_gap(node, target)
    if gap is not None:
        raise _refuse(node, scope, target, gap)
    node.resize_inputs(1)
    node.attributes.pop("noop_with_empty_axes", None)  # (non-empty axes: the flag changes nothing)
    if axes.size:
        node.attributes["axes"] = ir.AttrInt64s("axes", [int(a) for a in axes.numpy().reshape(-1)])
    return DONE


# Reduce* over axes known only at run time, axis by axis: (the step before, the per-axis op, the
# step after).
_AXIS_BY_AXIS = {
    "ReduceSum": (None, "ReduceSum", None), "ReduceMean": (None, "ReduceMean", None),
    "ReduceMax": (None, "ReduceMax", None), "ReduceMin": (None, "ReduceMin", None),
    "ReduceProd": (None, "ReduceProd", None), "ReduceSumSquare": ("Square", "ReduceSum", None),
    "ReduceL1": ("Abs", "ReduceSum", None), "ReduceL2": ("Square", "ReduceSum", "Sqrt"),
    "ReduceLogSum": (None, "ReduceSum", "Log"),
    "ReduceLogSumExp": ("ShiftedExp", "ReduceSum", "LogShifted"),
}


def _reduce_axis_by_axis(node: ir.Node, scope: Scope, target: int) -> Form:
    """Reduce* whose ``axes`` are known only at run time (a graph input, a computed value), on an
    input of known rank r: for each axis i < r, ``Reduce(y, [i])`` where i is in axes, else y (both
    concatenated on axis i and sliced; constant axes each, which every older version takes),
    then the reduced axes dropped unless keepdims. Empty axes mean every axis, or none with
    ``noop_with_empty_axes``. Max and Min are exact; Sum, Mean and Prod add or multiply in another
    order (Mean: the mean of equal-size means), within validation's float tolerance; the other ops
    through ReduceSum between their elementwise steps, LogSumExp shifted by the maximum as
    onnxruntime's kernel does (inf and -inf included)."""
    x, axes = node.inputs[0], node.inputs[1]
    rank = len(x.shape)
    dtype = _input_dtype(x)
    keepdims, noop = attr(node, "keepdims", 1), attr(node, "noop_with_empty_axes", 0)
    i64, boolean = ir.DataType.INT64, ir.DataType.BOOL
    nodes: list[ir.Node] = []

    def add(op: str, inputs: list, attributes: dict | None = None, out=None,
            shape=None) -> ir.Value:
        nodes.append(_typed(ir.node(op, inputs, attributes or {}), out, shape))
        return nodes[-1].outputs[0]

    def const(array) -> ir.Value:
        nodes.append(_constant(np.asarray(array)))
        return nodes[-1].outputs[0]

    # in_axis[i]: whether axis i is reduced (axes normalized into [0, r); repeated ones count once)
    normalized = add("Mod",
                     [add("Add", [axes, const(np.int64(rank))], out=i64), const(np.int64(rank))],
                     out=i64)
    column = add("Reshape", [normalized, const(np.array([-1, 1], np.int64))], out=i64,
                 shape=ir.Shape([None, 1]))
    hits = add("Equal", [column, const(np.arange(rank, dtype=np.int64))], out=boolean,
               shape=ir.Shape([None, rank]))
    counted = add("ReduceSum", [add("Cast", [hits], {"to": i64}, out=i64),
                                const(np.array([0], np.int64))],
                  {"keepdims": 0}, out=i64, shape=ir.Shape([rank]))
    in_axis = add("Greater", [counted, const(np.int64(0))], out=boolean, shape=ir.Shape([rank]))
    if not noop:  # no axes: every axis
        empty = add("Equal", [add("Size", [axes], out=i64, shape=ir.Shape([])), const(np.int64(0))],
                    out=boolean)
        in_axis = add("Or", [in_axis, empty], out=boolean, shape=ir.Shape([rank]))
    # Concat(reduced, y) on axis i, then [0:1] (the reduced) where axis i is reduced, else [1:] (y
    # itself).
    flags = [add("Gather", [in_axis, const(np.int64(i))], out=boolean, shape=ir.Shape([]))
             for i in range(rank)]
    starts = [add("Where", [flag, const(np.array([0], np.int64)), const(np.array([1], np.int64))],
                  out=i64, shape=ir.Shape([1])) for flag in flags]
    ends = [add("Where", [flag, const(np.array([1], np.int64)),
                          const(np.array([np.iinfo(np.int64).max], np.int64))],
                out=i64, shape=ir.Shape([1])) for flag in flags]

    def reduce_each(y: ir.Value, op: str) -> ir.Value:
        for i in range(rank):
            reduced = add(op, [y, const(np.array([i], np.int64))], {"keepdims": 1}, out=dtype)
            both = add("Concat", [reduced, y], {"axis": i}, out=dtype)
            y = add("Slice", [both, starts[i], ends[i], const(np.array([i], np.int64))], out=dtype)
        return y

    before, op, after = _AXIS_BY_AXIS[node.op_type]
    y, shift = x, None
    if before == "Square":
        y = add("Mul", [x, x], out=dtype)
    elif before == "Abs":
        y = add("Abs", [x], out=dtype)
    elif before == "ShiftedExp":  # log(sum(exp(x - m))) + m, m the maximum (0 where it is infinite)
        peak = reduce_each(x, "ReduceMax")
        shift = add("Where",
                    [add("IsInf", [peak], out=boolean), const(np.zeros((), dtype.numpy())), peak],
                    out=dtype)
        y = add("Exp", [add("Sub", [x, shift], out=dtype)], out=dtype)
    y = reduce_each(y, op)
    if after == "Sqrt":
        y = add("Sqrt", [y], out=dtype)
    elif after == "Log":
        y = add("Log", [y], out=dtype)
    elif after == "LogShifted":
        y = add("Add", [add("Log", [y], out=dtype), shift], out=dtype)
    # the reduced axes (length 1 now) dropped: Squeeze takes them as an input
    if not keepdims and target >= 13:
        positions = add("Compress", [const(np.arange(rank, dtype=np.int64)), in_axis], {"axis": 0},
                        out=i64, shape=ir.Shape([None]))
        y = add("Squeeze", [y, positions], out=dtype)
    elif not keepdims:  # Squeeze-11 takes constant axes: the kept dimensions as a shape instead
        if not all(isinstance(d, int) and d > 0 for d in x.shape):
            raise _refuse(node, scope, target, f"{_not_constant(axes, 'axes')}, and with "
                                               f"keepdims=0 opset {target} drops them only as "
                                               "constant Squeeze axes or as a Reshape, which "
                                               "copies a 0-size dimension from the wrong place "
                                               "(its input may have one)")
        kept = add("Compress", [add("Shape", [y], out=i64, shape=ir.Shape([rank])),
                                add("Not", [in_axis], out=boolean, shape=ir.Shape([rank]))],
                                {"axis": 0}, out=i64,
                   shape=ir.Shape([None]))
        y = add("Reshape", [y, kept], out=dtype)
    _replace(node, scope, nodes, [y])
    return Replaced(tuple(nodes))


def _elementwise_step(node: ir.Node, scope: Scope, target: int) -> Form:
    """ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum and ReduceLogSumExp with the flag set and
    no axes reduce nothing and apply their elementwise step (x*x, |x|, sqrt(x*x), log x, log(exp
    x)). Written in forms that give onnxruntime's result bit for bit (NaN, inf and overflow
    included; every float16): float, double, int32 and int64 as the same op reducing an axis of size
    1 put in front (its kernel then runs the step as it does here; Log or Abs alone round or treat
    ints otherwise); float16, whose kernels differ between the versions, as the elementwise ops.
    Other types, which onnxruntime's kernels lack (bfloat16, uint32, uint64), are refused: nothing
    could show a form exact."""
    x = node.inputs[0]
    dtype = None if x is None else _input_dtype(x)
    step = {"ReduceSumSquare": "x*x", "ReduceL1": "|x|", "ReduceL2": "sqrt(x*x)",
            "ReduceLogSum": "log(x)", "ReduceLogSumExp": "log(exp(x))"}[node.op_type]
    shape = x.shape if x is not None else None
    if dtype in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.INT32, ir.DataType.INT64):
        front = _constant(np.array([0], np.int64))
        unsqueeze = _typed(ir.node("Unsqueeze", [x, front.outputs[0]]), dtype,
                           None if shape is None else ir.Shape([1, *shape]))
        reduce = ir.node(node.op_type, [unsqueeze.outputs[0], front.outputs[0]], {"keepdims": 0})
        nodes = [front, unsqueeze, reduce]
    elif dtype == ir.DataType.FLOAT16:
        # (onnxruntime's float16 kernel computes it in double)
        if node.op_type == "ReduceLogSumExp":
            wide = _typed(ir.node("Cast", [x], {"to": ir.DataType.DOUBLE}), ir.DataType.DOUBLE,
                          shape)
            exp = _typed(ir.node("Exp", [wide.outputs[0]]), ir.DataType.DOUBLE, shape)
            log = _typed(ir.node("Log", [exp.outputs[0]]), ir.DataType.DOUBLE, shape)
            nodes = [wide, exp, log, ir.node("Cast", [log.outputs[0]], {"to": dtype})]
        elif node.op_type in ("ReduceSumSquare", "ReduceL2"):
            nodes = [_typed(ir.node("Mul", [x, x]), dtype, shape)]
            if node.op_type == "ReduceL2":
                nodes.append(ir.node("Sqrt", [nodes[0].outputs[0]]))
        else:
            nodes = [ir.node({"ReduceL1": "Abs", "ReduceLogSum": "Log"}[node.op_type], [x])]
    else:
        what = "unknown" if dtype is None else dtype.name
        raise _refuse(node, scope, target, "with noop_with_empty_axes set and no axes it computes "
                                           f"{step} elementwise, and no form at opset {target} is "
                                           "known to compute that bit for bit for its data type "
                                           f"({what})")
    _replace(node, scope, nodes, list(nodes[-1].outputs))
    return Replaced(tuple(nodes))


def _pad_form(node: ir.Node, scope: Scope, target: int) -> Form:
    """Pad-18 added ``axes``: ``pads`` then holds the begins and the ends of those axes only. Older
    Pads take pads for every axis: the same pads written out for each, zeros elsewhere (constant
    pads here, computed ones gathered at run time), which needs constant axes and the input's
    rank."""
    if target >= 18 or len(node.inputs) < 4 or node.inputs[3] is None:
        return UNCHANGED
    x, pads = node.inputs[0], node.inputs[1]
    why = f"opset {target}'s Pad takes pads for every axis"
    axes = constant_tensor(node.inputs[3])
    if axes is None:
        raise _refuse(node, scope, target, f"{_not_constant(node.inputs[3], 'axes')}, and {why}")
    rank = None if x is None or x.shape is None else len(x.shape)
    if rank is None:
        raise _refuse(node, scope, target, f"its input's rank is unknown, and {why}")
    axes = [int(a) for a in axes.numpy().reshape(-1)]
    for a in axes:
        if not -rank <= a < rank:
            raise _refuse(node, scope, target, f"axis {a} is out of range for its rank-{rank} "
                                               "input (onnxruntime refuses it too)")
    axes = [a % rank for a in axes]
    if len(set(axes)) < len(axes):
        raise _refuse(node, scope, target, f"its axes {axes} repeat an axis (onnxruntime refuses "
                                           "it too)")
    # index[j]: where entry j of every axis's pads (begins, then ends) is in pads; 2 * len(axes) is
    # a zero
    index = np.full(2 * rank, 2 * len(axes), np.int64)
    for i, a in enumerate(axes):
        index[a], index[rank + a] = i, len(axes) + i
    given = constant_tensor(pads)
    if given is not None:
        if given.size != 2 * len(axes):
            raise _refuse(node, scope, target, f"it has {given.size} pads for {len(axes)} axes, "
                                               "where Pad takes two per axis (onnxruntime refuses "
                                               "it too)")
        nodes = [_constant(np.append(given.numpy().reshape(-1).astype(np.int64), 0)[index])]
    else:
        zero, where = _constant(np.array([0], np.int64)), _constant(index)
        padded = _typed(ir.node("Concat", [pads, zero.outputs[0]], {"axis": 0}), ir.DataType.INT64,
                        ir.Shape([2 * len(axes) + 1]))
        nodes = [zero, where, padded,
                 _typed(ir.node("Gather", [padded.outputs[0], where.outputs[0]]),
                                             ir.DataType.INT64, ir.Shape([2 * rank]))]
    value = [node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] is not None else []
    pad = ir.node("Pad", [x, nodes[-1].outputs[0], *value], dict(node.attributes))
    _replace(node, scope, [*nodes, pad], list(pad.outputs))
    return Replaced((*nodes, pad))


def _split_form(node: ir.Node, scope: Scope, target: int) -> Form:
    """Split-18's ``num_outputs`` cuts chunks of ceil(size / n) along ``axis``, the last one smaller
    (onnxruntime refuses a size that leaves it negative). Older Splits need the sizes: constant for
    a static dimension, computed from the input's shape otherwise (an input from 13, an attribute
    before)."""
    if target >= 18 or "num_outputs" not in node.attributes:
        return UNCHANGED
    reason = reference_reason(node, ("num_outputs", "axis"))
    if reason is not None:
        raise _refuse(node, scope, target, f"its {reason}, and opset {target}'s Split needs the "
                                           "chunk sizes")
    n, axis, x = attr(node, "num_outputs"), attr(node, "axis", 0), node.inputs[0]
    rank = None if x is None or x.shape is None else len(x.shape)
    size = x.shape[axis] if rank is not None and -rank <= axis < rank else None
    if isinstance(size, int):
        chunk = -(-size // n)
        if size - chunk * (n - 1) < 0:
            raise _refuse(node, scope, target, f"num_outputs={n} on a dimension of {size} leaves "
                                               f"the last chunk {size - chunk * (n - 1)} long, "
                                               "which onnxruntime refuses too")
        sizes = [_constant(np.array([chunk] * (n - 1) + [size - chunk * (n - 1)], np.int64))]
    elif target >= 13:
        sizes = _computed_chunk_sizes(x, axis, n)
    else:
        raise _refuse(node, scope, target, f"dimension {axis} of its input is not known before run "
                                           f"time, and opset {target}'s Split takes the chunk "
                                           "sizes as a constant attribute")
    split = ir.node("Split", [x, sizes[-1].outputs[0]], {"axis": axis},
                    num_outputs=len(node.outputs))
    _replace(node, scope, [*sizes, split], list(split.outputs))
    return Replaced((*sizes, split))


def _computed_chunk_sizes(x: ir.Value, axis: int, n: int) -> list[ir.Node]:
    """Nodes computing Split-18's chunk sizes for ``n`` outputs along ``axis`` of ``x`` (the last
    node's output, int64): [c] * (n - 1) + [size - c * (n - 1)] with c = ceil(size / n)."""
    position, rest, parts = (_constant(np.array([k], np.int64)) for k in (axis, n - 1, n))
    shape = ir.node("Shape", [x])
    size = ir.node("Gather", [shape.outputs[0], position.outputs[0]])
    padded = ir.node("Add", [size.outputs[0], rest.outputs[0]])
    chunk = ir.node("Div", [padded.outputs[0], parts.outputs[0]])
    covered = ir.node("Mul", [chunk.outputs[0], rest.outputs[0]])
    last = ir.node("Sub", [size.outputs[0], covered.outputs[0]])
    sizes = ir.node("Concat", [chunk.outputs[0]] * (n - 1) + [last.outputs[0]], {"axis": 0})
    computed = [shape, size, padded, chunk, covered, last, sizes]
    for node in computed:  # (converting each reads its input types)
        node.outputs[0].dtype = ir.DataType.INT64
    for node in computed[1:-1]:
        node.outputs[0].shape = ir.Shape([1])
    sizes.outputs[0].shape = ir.Shape([n])
    return [position, rest, parts, *computed]


_CONSTANT_KINDS = {"value_int": np.int64, "value_ints": np.int64, "value_float": np.float32,
                   "value_floats": np.float32, "value_string": np.str_, "value_strings": np.str_}


def _reshape_form(node: ir.Node, scope: Scope, target: int) -> Form:
    """Reshape-14's ``allowzero=1`` keeps a 0 in the shape as a 0-size dimension; Reshape-13 copies
    that dimension from the input. The same when the shape holds no 0: a constant shape without one,
    or any shape when the input has a known non-zero size (a 0 would leave no elements for its)."""
    a = node.attributes.get("allowzero")
    if a is None or (not is_reference(a) and a.value == 0):
        return UNCHANGED
    older = ("Reshape-13 copies a 0 in the shape from the input where allowzero=1 keeps it as a "
             "0-size dimension")
    if is_reference(a):
        raise _refuse(node, scope, target, f"its {reference_reason(node, ('allowzero',))}, and "
                                           f"{older}")
    shape = constant_tensor(node.inputs[1])
    x = node.inputs[0]
    if shape is not None:
        if (shape.numpy() == 0).any():
            raise _refuse(node, scope, target, f"its constant shape {shape.numpy().tolist()} holds "
                                               f"a 0, and {older}")
    elif not (x is not None and x.shape is not None
              and all(isinstance(d, int) and d > 0 for d in x.shape)
              or _copies_where_zero(node)):
        return _reshape_padded(node, scope, target)
    del node.attributes["allowzero"]
    return UNCHANGED


def _copies_where_zero(node: ir.Node) -> bool:
    """Whether each entry of a Reshape's computed shape is a non-zero constant or the data's own
    dimension at the same position (``Concat`` of constants and of ``Shape(data, start, end)``, or
    its Shape-then-Slice form, at the offset ``start``): where it is 0, Reshape-13 copies that same
    0."""
    data, shape = node.inputs[0], node.inputs[1]
    concat = shape.producer()
    if concat is None or concat.op_type != "Concat" or data is None or data.shape is None:
        return False
    rank, offset = len(data.shape), 0
    for part in concat.inputs:
        piece = constant_tensor(part)
        if piece is not None:
            values = piece.numpy().reshape(-1)
            if (values == 0).any():
                return False
            offset += values.size
            continue
        span = _shape_span(part, data, rank)
        if span is None or span[0] != offset:
            return False
        offset += span[1] - span[0]
    return True


def _shape_span(value: ir.Value, data: ir.Value, rank: int) -> tuple[int, int] | None:
    """(start, end) when ``value`` is ``Shape(data)[start:end]`` (Shape-15's attributes, or Shape
    then a constant Slice), clamped to ``rank``; None otherwise."""
    producer = value.producer()
    if producer is None:
        return None
    if producer.op_type == "Shape" and producer.inputs[0] is data:
        start, end = attr(producer, "start", 0), attr(producer, "end", rank)
    elif (producer.op_type == "Slice" and len(producer.inputs) in (3, 4)
          and producer.inputs[0].producer() is not None
          and producer.inputs[0].producer().op_type == "Shape"
          and producer.inputs[0].producer().inputs[0] is data
          and not producer.inputs[0].producer().attributes):
        bounds = [constant_tensor(v) for v in producer.inputs[1:]]
        if (any(b is None or b.size != 1 for b in bounds)
                or (len(bounds) == 3 and int(bounds[2].numpy()) != 0)):
            return None
        start, end = (int(b.numpy().reshape(-1)[0]) for b in bounds[:2])
    else:
        return None
    # (a reference to a function's attribute)
    if not isinstance(start, int) or not isinstance(end, int):
        return None
    start, end = (min(max(v + rank if v < 0 else v, 0), rank) for v in (start, end))
    return (start, end) if start < end else None


def _reshape_padded(node: ir.Node, scope: Scope, target: int) -> Form:
    """Reshape-14 ``allowzero=1`` on a shape S computed at run time: a 0 in S is a 0-size dimension
    (the data then has no elements; the spec forbids -1 beside it). Exact at Reshape-13: the data,
    flattened and padded with zeros to the size of S' (S with its 0s as 1s), reshaped to S', then
    sliced to 0 where S is 0. With no 0 in S, nothing is padded and nothing sliced."""
    data, shape = node.inputs
    dtype = _input_dtype(data)
    if dtype is None or dtype.numpy() is None:
        raise _refuse(node, scope, target, "allowzero=1 on a computed shape, and its data type, "
                                           "which the zeros that stand in for a 0-size dimension "
                                           "need, is unknown")
    i64, boolean = ir.DataType.INT64, ir.DataType.BOOL
    nodes: list[ir.Node] = []

    def add(op: str, inputs: list, attributes: dict | None = None, out=i64) -> ir.Value:
        nodes.append(_typed(ir.node(op, inputs, attributes or {}), out, None))
        return nodes[-1].outputs[0]

    def const(array) -> ir.Value:
        nodes.append(_constant(np.asarray(array)))
        return nodes[-1].outputs[0]

    zero, one = const(np.array([0], np.int64)), const(np.array([1], np.int64))
    is_zero = add("Equal", [shape, zero], out=boolean)
    ones_for_zeros = add("Where", [is_zero, one, shape])
    size = add("ReduceProd", [ones_for_zeros], {"keepdims": 1})
    missing = add("Sub", [size, add("Size", [data])])
    # (-1 in S: none)
    missing = add("Where", [add("Greater", [missing, zero], out=boolean), missing, zero])
    flat = add("Reshape", [data, const(np.array([-1], np.int64))], out=dtype)
    filler = add("Expand", [const(np.zeros((), dtype.numpy())), missing], out=dtype)
    padded = add("Concat", [flat, filler], {"axis": 0}, out=dtype)
    reshaped = add("Reshape", [padded, ones_for_zeros], out=dtype)
    ends = add("Where", [is_zero, zero, const(np.array([np.iinfo(np.int64).max], np.int64))])
    starts = add("Sub", [ends, ends])
    out = add("Slice", [reshaped, starts, ends], out=dtype)
    nodes[-1].outputs[0].dtype = dtype
    _replace(node, scope, nodes, [out])
    return Replaced(tuple(nodes))


def _shape_form(node: ir.Node, scope: Scope, target: int) -> Form:
    """Shape-15's ``start``/``end`` take a slice of the shape, clamped as Slice clamps: Shape, then
    Slice with those bounds."""
    reason = reference_reason(node, ("start", "end"))
    if reason is not None:
        raise _refuse(node, scope, target, f"its {reason}, and Shape-13 has no start or end")
    start, end = attr(node, "start", 0), attr(node, "end")
    if start == 0 and end is None:
        node.attributes.pop("start", None)
        return UNCHANGED
    x = node.inputs[0]
    shape = _typed(ir.node("Shape", [x]), ir.DataType.INT64,
                   None if x.shape is None else ir.Shape([len(x.shape)]))
    starts = _constant(np.array([start], np.int64))
    ends = _constant(np.array([np.iinfo(np.int64).max if end is None else end], np.int64))
    piece = ir.node("Slice", [shape.outputs[0], starts.outputs[0], ends.outputs[0]])
    nodes = [shape, starts, ends, piece]
    _replace(node, scope, nodes, list(piece.outputs))
    return Replaced(tuple(nodes))


def _trilu_form(node: ir.Node, scope: Scope, target: int) -> Form:
    """Trilu (opset 14, no older version) keeps x[..., i, j] where j - i >= k (upper) or <= k
    (lower) and writes 0 elsewhere: Where over a mask from Range on the last two dimensions."""
    reason = reference_reason(node, ("upper",))
    if reason is not None:
        raise _refuse(node, scope, target, f"its {reason}, which decides the mask")
    x = node.inputs[0]
    dtype = _input_dtype(x)
    if dtype is None or dtype.numpy() is None:
        raise _refuse(node, scope, target, "its input's data type is unknown, and the zeros it "
                                           "writes need it")
    upper = attr(node, "upper", 1)
    i64 = ir.DataType.INT64
    last = [_constant(np.array(k, np.int64)) for k in (-2, -1)]
    zero, one = _constant(np.array(0, np.int64)), _constant(np.array(1, np.int64))
    column = _constant(np.array([-1, 1], np.int64))
    k = node.inputs[1] if len(node.inputs) > 1 and node.inputs[1] is not None else zero.outputs[0]
    shape = _typed(ir.node("Shape", [x]), i64, None)
    rows = _typed(ir.node("Gather", [shape.outputs[0], last[0].outputs[0]]), i64, ir.Shape([]))
    cols = _typed(ir.node("Gather", [shape.outputs[0], last[1].outputs[0]]), i64, ir.Shape([]))
    i = _typed(ir.node("Range", [zero.outputs[0], rows.outputs[0], one.outputs[0]]), i64,
               ir.Shape([None]))
    j = _typed(ir.node("Range", [zero.outputs[0], cols.outputs[0], one.outputs[0]]), i64,
               ir.Shape([None]))
    i_column = _typed(ir.node("Reshape", [i.outputs[0], column.outputs[0]]), i64,
                      ir.Shape([None, 1]))
    diagonal = _typed(ir.node("Sub", [j.outputs[0], i_column.outputs[0]]), i64,
                      ir.Shape([None, None]))
    # upper: keep j - i >= k, i.e. not (j - i < k); lower: keep j - i <= k, i.e. not (j - i > k)
    outside = _typed(ir.node("Less" if upper else "Greater", [diagonal.outputs[0], k]),
                     ir.DataType.BOOL, None)
    keep = _typed(ir.node("Not", [outside.outputs[0]]), ir.DataType.BOOL, None)
    nothing = _constant(np.zeros((), dtype.numpy()))
    out = ir.node("Where", [keep.outputs[0], x, nothing.outputs[0]])
    nodes = [*last, zero, one, column, shape, rows, cols, i, j, i_column, diagonal, outside, keep,
             nothing, out]
    _replace(node, scope, nodes, list(out.outputs))
    return Replaced(tuple(nodes))


_GRID_SAMPLE_MODES = {"linear": "bilinear", "cubic": "bicubic", "nearest": "nearest"}


def _grid_sample_form(node: ir.Node, scope: Scope, target: int) -> Form:
    """GridSample-20 renamed its modes (linear, cubic: GridSample-16's bilinear, bicubic) and took
    N-D input; GridSample-16 takes 4-D input only."""
    reason = reference_reason(node, ("mode",))
    if reason is not None:
        raise _refuse(node, scope, target, f"its {reason}, and GridSample-16 names its modes "
                                           "otherwise")
    x = node.inputs[0]
    if x is None or x.shape is None or len(x.shape) != 4:
        rank = "unknown" if x is None or x.shape is None else len(x.shape)
        raise _refuse(node, scope, target, "GridSample-20 -> GridSample-16: its input's rank is "
                                           f"{rank}, and GridSample-16 takes 4-D input only")
    node.attributes["mode"] = ir.AttrString("mode",
                                            _GRID_SAMPLE_MODES[_text(attr(node, "mode", "linear"))])
    return UNCHANGED


def _resize_axes_form(node: ir.Node, scope: Scope, target: int) -> Form:
    """Resize-18's ``axes``: roi, scales and sizes then hold values for those axes only. Older
    Resizes take them for every axis: roi 0 and 1, scale 1 and the input's size elsewhere (scattered
    at run time into a full tensor), which needs the input's rank; ``keep_aspect_ratio_policy``
    other than stretch has no older form."""
    if "axes" not in node.attributes:
        return UNCHANGED
    reason = reference_reason(node, ("axes", "keep_aspect_ratio_policy"))
    if reason is not None:
        raise _refuse(node, scope, target, f"its {reason}, and Resize-13 takes roi, scales and "
                                           "sizes for every axis")
    policy = _text(attr(node, "keep_aspect_ratio_policy", "stretch"))
    if policy != "stretch":
        raise _refuse(node, scope, target, "Resize-18 -> Resize-13: keep_aspect_ratio_policy "
                                           f"'{policy}' computes the sizes from one scale, which "
                                           "Resize-13 has no attribute for")
    x = node.inputs[0]
    if x is None or x.shape is None:
        raise _refuse(node, scope, target, "Resize-18 -> Resize-13: its input's rank is unknown, "
                                           "and Resize-13 takes roi, scales and sizes for every "
                                           "axis")
    rank = len(x.shape)
    axes = [int(a) % rank for a in attr(node, "axes")]
    nodes: list[ir.Node] = []

    def full(value: ir.Value, base: ir.Value, positions: list[int]) -> ir.Value:
        where = _constant(np.array(positions, np.int64))
        nodes.extend([where, _typed(ir.node("ScatterElements", [base, where.outputs[0], value],
                                            {"axis": 0}),
                                    value.dtype, ir.Shape([len(positions) and None]))])
        return nodes[-1].outputs[0]

    inputs = list(node.inputs) + [None] * (4 - len(node.inputs))
    roi, scales, sizes = inputs[1:4]
    if roi is not None:
        dtype = _input_dtype(roi) or ir.DataType.FLOAT
        base = _constant(np.array([0] * rank + [1] * rank, dtype.numpy()))
        nodes.append(base)
        node.replace_input_with(1, full(roi, base.outputs[0], axes + [a + rank for a in axes]))
    if scales is not None:
        base = _constant(np.ones(rank, (_input_dtype(scales) or ir.DataType.FLOAT).numpy()))
        nodes.append(base)
        node.replace_input_with(2, full(scales, base.outputs[0], axes))
    if sizes is not None:
        shape = _typed(ir.node("Shape", [x]), ir.DataType.INT64, ir.Shape([rank]))
        nodes.append(shape)
        node.replace_input_with(3, full(sizes, shape.outputs[0], axes))
    del node.attributes["axes"]
    node.attributes.pop("keep_aspect_ratio_policy", None)
    scope.body.insert_before(node, nodes)
    return Prepared(tuple(nodes))


def _resize_inputs_form(node: ir.Node, scope: Scope, target: int) -> Form:
    """Resize-13 made roi and scales optional; Resize-11 takes them always (empty when unused)."""
    if target >= 13:
        return UNCHANGED
    nodes = []
    for i in (1, 2):
        if i < len(node.inputs) and node.inputs[i] is None:
            empty = _constant(np.array([], np.float32))
            nodes.append(empty)
            node.replace_input_with(i, empty.outputs[0])
    scope.body.insert_before(node, nodes)
    return Prepared(tuple(nodes))


_INTEGERS = frozenset({ir.DataType.INT8, ir.DataType.INT16, ir.DataType.INT32, ir.DataType.INT64,
                       ir.DataType.UINT8, ir.DataType.UINT16, ir.DataType.UINT32,
                       ir.DataType.UINT64})


def _min_max_integers_form(node: ir.Node, scope: Scope, target: int) -> Form:
    """Max-12 and Min-12 took integers; Max-8/Min-8 take floats only. On integers (no NaN) the same
    as Where(Greater(a, b), a, b) (Less for Min), folded over the inputs with their broadcasting."""
    dtype = _input_dtype(node.inputs[0]) if node.inputs and node.inputs[0] is not None else None
    if target >= 12 or dtype not in _INTEGERS:
        return UNCHANGED
    if len(node.inputs) == 1:  # the one input as it is
        identity = ir.node("Identity", [node.inputs[0]])
        _replace(node, scope, [identity], list(identity.outputs))
        return Replaced((identity,))
    compare = "Greater" if node.op_type == "Max" else "Less"
    nodes, best = [], node.inputs[0]
    for other in node.inputs[1:]:
        better = _typed(ir.node(compare, [best, other]), ir.DataType.BOOL, None)
        pick = _typed(ir.node("Where", [better.outputs[0], best, other]), dtype, None)
        nodes += [better, pick]
        best = pick.outputs[0]
    _replace(node, scope, nodes, [best])
    return Replaced(tuple(nodes))


def _constant_value_form(node: ir.Node, scope: Scope, target: int) -> Form:
    """Constant-12 added value_int(s)/value_float(s)/value_string(s): as ``value`` before."""
    if target < 12:
        _constant_as_value_tensor(node)
    return UNCHANGED


def _constant_as_value_tensor(node: ir.Node) -> None:
    """Constant-12 added value_int(s)/value_float(s)/value_string(s); opset 11 has only
    ``value``."""
    for name, np_type in _CONSTANT_KINDS.items():
        if name in node.attributes:
            array = np.array(node.attributes.pop(name).value,
                             dtype=np_type if np_type is not np.str_ else object)
            node.attributes["value"] = ir.AttrTensor("value", ir.tensor(array))
            return


def _drop_default_attributes(converted: onnx.ModelProto, source: int, target: int) -> None:
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
                    and _is_default(new, a.name, onnx.helper.get_attribute_value(a))):
                proto.attribute.remove(a)


def _is_default(schema, name: str, value) -> bool:
    default = schema.attributes[name].default_value if name in schema.attributes else None
    if default is None or not default.name:
        return False
    return _text(onnx.helper.get_attribute_value(default)) == _text(value)


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def _input_dtype(value: ir.Value) -> ir.DataType | None:
    """``value``'s dtype, or its constant tensor's when it records none (a Constant's output)."""
    if value.dtype is not None:
        return value.dtype
    tensor = ir.convenience.get_const_tensor(value)
    return None if tensor is None else tensor.dtype


_NO_ADAPTER = re.compile(r"No Adapter (To|From) Version \$(\d+) for|No Adapter For|No Previous "
                         r"Version of")


def _converter_reason(node: ir.Node, source: int, target: int, error: Exception) -> str:
    """Why onnx.version_converter refused ``node`` (at ``source``), in the model's terms rather than
    its C++ assertion's (``BaseConverter.h:63: adapter_lookup: Assertion `false` failed: ...``)."""
    text = str(error).strip()
    op, since = node.op_type, since_version(node.op_type, source)
    if "No initializer or constant input" in text:  # an input the older op takes as an attribute
        for i, value in enumerate(node.inputs[1:], 1):
            if value is not None and constant_tensor(value) is None:
                formals = onnx.defs.get_schema(op, source, "").inputs
                formal = formals[min(i, len(formals) - 1)].name
                return (f"{_not_constant(value, formal)}, and opset {target}'s {op} takes it as a "
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


def _signature(node: ir.Node) -> tuple:
    """What a conversion of ``node`` depends on, the key of its cache: equal only for nodes that
    convert alike (attributes and constants by :func:`attribute_key` and :func:`tensor_key`: a
    Constant's tensor by its values, never by its name, which TorchScript leaves "")."""
    attrs = tuple(sorted((k, attribute_key(a)) for k, a in node.attributes.items()))
    inputs = []
    for v in node.inputs:
        const = None if v is None else _small_constant(v)
        inputs.append(None if v is None else (
            _input_dtype(v), None if v.shape is None else len(v.shape),
            None if const is None else tensor_key(const)))
    return (node.op_type, attrs, tuple(inputs), len(node.outputs))


def _small_constant(value: ir.Value) -> ir.TensorProtocol | None:
    # Some adapters read constant inputs (Split's split, Reshape's shape...): small ones go along;
    # an initializer callers may override is no constant (the adapter would write its default in).
    tensor = constant_tensor(value)
    if tensor is None or tensor.size > 64:
        return None
    return tensor


def _one_node_model(node: ir.Node, source: int, shapes: bool = False) -> onnx.ModelProto:
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
        known = _input_dtype(value)
        dtype = known.value if known is not None else onnx.TensorProto.FLOAT
        const = _small_constant(value)
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


# Ops whose function body computes bit for bit what the op does (CastLike's is one Cast to the
# type).
EXACT_BODIES = frozenset({"CastLike"})
# the one-node model's call to the body, inlined at once
_BODY_DOMAIN = "scatter_rewrite.function_body"


def _function_body_model(node: ir.Node, source: int, target: int,
                         shapes: bool = False) -> onnx.ModelProto | None:
    """``node`` (at opset ``source``) as its op's ONNX function body, converted to ``target``: a
    model shaped like :func:`_one_node_model`'s (inputs ``in{i}``, outputs ``out{i}``). None when
    the op has no body at or below ``source``, or the body cannot be built (an input of unknown
    type, an attribute that refers to a function's, which the body would need the value of)."""
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
    if any(v is not None and _input_dtype(v) is None for v in node.inputs):
        return None  # (a context-dependent body is built from the input types)
    opset = min(versions)  # the body nearest the (lower) target
    # (some context-dependent bodies are built from the shapes)
    mini = _one_node_model(node, source, shapes)
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
    # the body's own nodes, with function bodies of their own if need be
    convert_opset(model, target)
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


class _Converter:
    def __init__(self, target: int):
        self.target = target
        # list: attributes to drop, node kept
        self.cache: dict[tuple, onnx.ModelProto | list[str]] = {}
        self.converted = 0
        self.kept = 0  # downgrades the converter refused but the older schema accepts as is
        self.expanded: dict[str, int] = {}  # op -> nodes replaced by the op's function body
        self._bodies: set[tuple] = set()  # cache keys whose entry is a function body
        # the converter's refusal from an opset between
        self.between_error: tuple[int, Exception] | None = None

    def convert_node(self, node: ir.Node, scope: Scope) -> None:
        """Move ``node`` from ``scope.opset`` to the target: downwards by the declared steps
        (:mod:`scatter_rewrite.opset.steps`), newest first."""
        if scope.opset < self.target:
            form = exact_form(node, scope, self.target)
            if isinstance(form, Unchanged):
                self._convert(node, scope)
            else:
                self._follow(scope, form)
            return
        converter = False
        for since, step in steps.steps_between(node.op_type, scope.opset, self.target):
            if step.kind in (steps.Kind.SAME_IF, steps.Kind.NO_FORM):
                gap = (_condition_gap(node, step, since) if step.kind == steps.Kind.SAME_IF
                       else step.reason)
                if gap is None:
                    continue
                if step.otherwise != steps.Kind.BODY:
                    raise _refuse(node, scope, self.target, f"{_step_name(node.op_type, since)}: "
                                                            f"{gap}")
                self._convert(node, scope, body_only=True)
                return
            if step.kind == steps.Kind.BODY:
                self._convert(node, scope, body_only=True)
                return
            if step.kind == steps.Kind.REWRITE:
                form = REWRITES[step.rewrite](node, scope, self.target)
                if isinstance(form, (Done, Replaced)):
                    self._follow(scope, form)
                    return
                # its inputs' new nodes moved on; the node's older steps next
                if isinstance(form, Prepared):
                    self._follow(scope, form)
            converter = converter or step.kind == steps.Kind.CONVERTER
        if converter:
            self._convert(node, scope)
            return
        drop = fits_schema(node, scope.opset, self.target)
        # (an attribute off its default, a type the older op lacks: the converter says which)
        if drop is None:
            self._convert(node, scope)
            return
        self._keep(node, drop)

    def _keep(self, node: ir.Node, drop: list[str]) -> None:
        """A node the older schema takes and means the same by: without the attributes it lacks
        (``drop``, at their newer defaults) and omitted trailing inputs."""
        for name in drop:
            del node.attributes[name]
        # (an omitted trailing input the older schema lacks)
        while node.inputs and node.inputs[-1] is None:
            node.resize_inputs(len(node.inputs) - 1)
        self.kept += 1

    def _follow(self, scope: Scope, form: Done | Replaced | Prepared) -> None:
        """After a rewrite: the new nodes moved on in turn (constants no node reads any more
        dropped)."""
        if isinstance(form, Done):
            self.kept += 1
            return
        # (the sizes a Split-11 takes in)
        for new in sorted(form.nodes, key=lambda n: n.op_type == "Constant"):
            if new.op_type == "Constant" and not new.outputs[0].uses():
                scope.body.remove(new)
            elif is_default_domain(new) and needs_conversion(new.op_type, scope.opset, self.target):
                self.convert_node(new, scope)

    def _convert(self, node: ir.Node, scope: Scope, body_only: bool = False) -> None:
        """``node`` through onnx.version_converter, else kept as the older schema takes it, else
        moved from an opset between, else its function body (``body_only``: the body at once)."""
        shapes = tuple(None if v is None or v.shape is None else tuple(map(str, v.shape))
                       for v in node.inputs)
        key = (scope.opset, _signature(node), shapes if body_only else None)
        converted = self.cache.get(key)
        if converted is None and body_only:
            converted = _function_body_model(node, scope.opset, self.target, shapes=True)
            if converted is None:
                untyped = [i for i, v in enumerate(node.inputs)
                           if v is not None and _input_dtype(v) is None]
                why = (f"its input {untyped[0]} has no tensor type known here (a sequence, or "
                       "untyped), which the body is built from" if untyped else
                       "onnx declines to build the body for this node's attributes and types")
                raise _refuse(
                    node, scope, self.target,
                    f"{_step_name(node.op_type, since_version(node.op_type, scope.opset))}"
                    f" has no older form but the op's ONNX function body, which cannot be built "
                    f"for it: {why}")
            self._bodies.add(key)
            self.cache[key] = converted
        if converted is None:
            try:
                converted = onnx.version_converter.convert_version(
                    _one_node_model(node, scope.opset), self.target)
            # the converter raises RuntimeError/IndexError/... without a type of its own
            except Exception as e:
                if node.op_type == "Constant" and self.target < 12:
                    _constant_as_value_tensor(node)  # key stays: same signature, same rewrite
                converted = fits_schema(node, scope.opset, self.target)
                if converted is None:
                    self.between_error = None
                    converted = self._from_opset_between(node, scope.opset)
                if converted is None:
                    converted = _function_body_model(node, scope.opset, self.target)
                    if converted is not None:
                        self._bodies.add(key)
                if converted is None:
                    source, error = self.between_error or (scope.opset, e)
                    why = (_type_gap(node, self.target)
                           or _unknown_type_gap(node, scope.opset, self.target)
                           or _converter_reason(node, source, self.target, error))
                    raise _refuse(node, scope, self.target, why) from e
            else:
                _drop_default_attributes(converted, scope.opset, self.target)
            self.cache[key] = converted
        if isinstance(converted, list):  # valid and the same under the older schema: kept as it is
            if node.op_type == "Constant" and self.target < 12:
                _constant_as_value_tensor(node)
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
        self._splice(node, scope, mini, refs)
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
            mini = _one_node_model(node, between)
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
            _drop_default_attributes(converted, between, self.target)
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
    def _splice(node: ir.Node, scope: Scope, mini: ir.Graph, refs: dict | None = None) -> None:
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
        for inner in _nodes_within(new_nodes):
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
        # An input of unknown dtype went into the one-node model as float (_one_node_model): the
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
                        _forget_invented_dims(value)


def _forget_invented_dims(value: ir.Value) -> None:
    """Every symbolic dim of a value spliced from a one-node model is one ONNX shape inference
    invented there (:func:`_one_node_model` writes the node's own as unknown), named afresh in each
    one (unk__0, unk__1...): spliced in, values of different sizes from different nodes would share
    a name, which claims them equal, and onnxruntime plans one buffer for them and fails at run time
    ("Shape mismatch attempting to re-use buffer"). Such a dim is left unknown; static dims stay.
    (A replaced output takes the node's own declared shape in the splice.)"""
    shape = value.shape
    if shape is not None and not all(isinstance(d, int) for d in shape):
        value.shape = ir.Shape([d if isinstance(d, int) else None for d in shape])


def _distinct_nested_names(model: ir.Model) -> None:
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


def _nodes_within(nodes):
    """``nodes`` and every node in their subgraphs, nested ones included."""
    for node in nodes:
        yield node
        for a in node.attributes.values():
            if a.type == ir.AttributeType.GRAPH:
                yield from _nodes_within(list(a.value))
            elif a.type == ir.AttributeType.GRAPHS:
                for sub in a.value:
                    yield from _nodes_within(list(sub))


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


@dataclasses.dataclass
class OpsetMove:
    """What moving a model to opset ``target`` did: for the pass's notes and validation's
    tolerance."""

    opsets: set[int]  # the default-domain opsets of the model and its functions before
    target: int
    converted: int = 0  # nodes handed to the converter (or replaced by a function body)
    # op -> nodes replaced by its body
    expanded: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def rounding(self) -> list[str]:
        """The expanded ops whose body may round float results differently from a fused kernel."""
        return sorted(op for op in self.expanded if op not in EXACT_BODIES)

    @property
    def note(self) -> str:
        text = opset_note(self.opsets, self.target, self.converted)
        if self.expanded:
            ops = ", ".join(f"{op} x{n}" for op, n in sorted(self.expanded.items()))
            text += (f"; with no version at opset {self.target}, replaced by their ONNX function "
                     f"bodies: {ops}")
            if self.rounding:
                text += (f" ({', '.join(self.rounding)}: float results may round differently from "
                         "a fused kernel)")
        return text


def _reads_rank(node: ir.Node) -> bool:
    """Whether the node's exact older form (:func:`exact_form`) needs its input's rank,
    unrecorded."""
    x = node.inputs[0] if node.inputs else None
    pad_axes = node.op_type == "Pad" and len(node.inputs) > 3 and node.inputs[3] is not None
    return x is not None and x.shape is None and (node.op_type in _SOFTMAX_OPS
                                                  or node.op_type == "Split" or pad_axes)


def scope_opsets(model: ir.Model) -> set[int]:
    current = default_opset(model.opset_imports, fallback=1)
    return {current} | {default_opset(f.opset_imports, current) for f in model.functions.values()}


def convert_opset(model: ir.Model, target: int) -> OpsetMove:
    """Set every default-domain opset import (model and functions) to ``target``, converting the
    nodes whose schema changes."""
    from scatter_rewrite.type_inference import (
        annotate_function_types, borrow_inferred_types, restore_types,
    )

    move = OpsetMove(scope_opsets(model), target)
    converter = _Converter(target)
    work = [(node, scope) for scope in list(iter_scopes(model)) if scope.opset != target
            for node in list(scope.body)
            if is_default_domain(node) and needs_conversion(node.op_type, scope.opset, target)]
    # If/Loop/Scan keep their node (their bodies are scopes of their own), but their types must fit
    # the older schema: If took bfloat16 only from 16.
    containers = [(node, scope) for scope in iter_scopes(model) if scope.opset > target
                  for node in scope.body
                  if is_default_domain(node) and node.op_type in _CONTAINER_OPS]
    # (before any borrowed type: as the model was given)
    before = _checkable(model) if work else None
    borrowed = []
    if any(scope.opset > target
           and (any(v is not None and v.dtype is None for v in (*node.inputs, *node.outputs))
                or _reads_rank(node))
           for node, scope in work + containers):
        # Downgrades: the converter and fits_schema need dtypes, some exact forms a rank, that
        # exporters often leave unrecorded (TorchScript writes no value_info, a lowering's output
        # has no shape): borrow ONNX shape inference's for the conversion, then give them back.
        borrowed = borrow_inferred_types(model)
        for function in {id(s.body): s.body for _, s in work if s.is_function}.values():
            borrowed += annotate_function_types(model, function)
    moved = [_Moved(describe(node, scope), node.op_type, since_version(node.op_type, scope.opset),
                    node.name)
             for node, scope in work]
    try:
        for node, scope in containers:
            gap = _type_gap(node, target)
            if gap is not None:
                raise ConversionError(f"{describe(node, scope)} cannot move to opset {target}: "
                                      f"{gap}")
        for node, scope in work:
            converter.convert_node(node, scope)
    finally:
        restore_types(borrowed)
    for imports in [model.opset_imports] + [f.opset_imports for f in model.functions.values()]:
        for domain in DEFAULT_DOMAINS:
            if domain in imports:
                imports[domain] = target
    if not any(d in model.opset_imports for d in DEFAULT_DOMAINS):
        model.opset_imports[""] = target
    if model.ir_version is not None and model.ir_version < MIN_IR_VERSION:
        model.ir_version = MIN_IR_VERSION
    if any(" > " in scope.where for _, scope in work):
        _distinct_nested_names(model)
    if before is not None:
        _verify_move(model, before, moved, target)
    logger.info("opset conversion to %d: %d node(s) converted, %d kept as they are (the older "
                "schema accepts them unchanged), %d replaced by function "
                "bodies", target, converter.converted,
                converter.kept, sum(converter.expanded.values()))
    move.converted, move.expanded = converter.converted, converter.expanded
    return move


def move_to_opset(model: ir.Model, target: int) -> OpsetMove | None:
    """:func:`convert_opset` when the model or a function is not at ``target`` yet; None when
    nothing had to move."""
    if scope_opsets(model) == {target}:
        return None
    return convert_opset(model, target)


def opset_note(opsets: set[int], target: int, converted: int) -> str:
    """The report line for a model whose scopes were at ``opsets`` and are now at ``target``."""
    return (f"default-domain opset {', '.join(map(str, sorted(opsets)))} -> {target} ({converted} "
            "other node(s) converted)")


@dataclasses.dataclass(frozen=True)
class _Moved:
    """A node the move converted: how an error names it and its step."""

    where: str  # describe(node, scope)
    op_type: str
    since: int | None
    name: str | None


# Initializers bigger than this go to the structural check as graph inputs of their type: the check
# reads the graph, not the weights (a model with gigabytes of external data is not loaded for it).
_CHECK_INLINE_BYTES = 1 << 16
# Domains whose ops a stock onnxruntime session knows; a model with others is checked by
# onnx.checker alone (a custom-domain lowering's nodes run only with their own kernels registered).
_ORT_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})


def _checkable(model: ir.Model) -> onnx.ModelProto:
    """``model`` serialized for :func:`_failure`, its big initializers as typed graph inputs."""
    detached = []
    for name, value in list(model.graph.initializers.items()):
        tensor = value.const_value
        if (tensor is not None and tensor.nbytes > _CHECK_INLINE_BYTES
                and not value.is_graph_input()):
            detached.append((value, tensor))
            value.const_value = None
            del model.graph.initializers[name]
    try:
        proto = ir.serde.serialize_model(model)
    finally:
        for value, tensor in detached:
            value.const_value = tensor
            model.graph.register_initializer(value)
    for value, tensor in detached:
        proto.graph.input.append(onnx.helper.make_tensor_value_info(value.name, tensor.dtype.value,
                                                                    tensor.shape.dims))
    return proto


def _failure(proto: onnx.ModelProto) -> str | None:
    """Why ``proto`` fails onnx.checker (full) or onnxruntime's session creation; None if
    neither."""
    try:
        onnx.checker.check_model(proto, full_check=True)
    # (ValidationError, InferenceError, and C++ errors without a type of their own)
    except Exception as e:
        return f"onnx.checker: {_first_line(e)}"
    domains = {n.domain for n in proto.graph.node} | {f.domain for f in proto.functions}
    if proto.ByteSize() >= 2**31 - 1 or not domains <= _ORT_DOMAINS:
        return None
    import onnxruntime as ort

    # Creating the session is the check, with default options (graph optimizations on): as a
    # user's session loads the model, so a model only an optimizer rejects is refused here too.
    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime's own exception types
        return f"onnxruntime: {_first_line(e)}"
    return None


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _verify_move(model: ir.Model, before: onnx.ModelProto, moved: list[_Moved],
                 target: int) -> None:
    """ConversionError when the moved model fails onnx.checker or onnxruntime's session creation and
    the model before the move did not, naming the moved node the failure names (else every moved
    op)."""
    failure = _failure(_checkable(model))
    # (a fault the move did not cause: the caller's check)
    if failure is None or _failure(before) == failure:
        return
    named = [m for m in moved if m.name and f"'{m.name}'" in failure or f"node {m.name}" in failure]
    named = named or [m for m in moved if m.op_type in failure]
    if named:
        first = named[0]
        step = f"{first.op_type}-{first.since} -> opset {target}"
        raise ConversionError(f"cannot convert {first.where} to opset {target}: the step {step} "
                              f"gives a model that fails {failure}")
    ops = ", ".join(sorted({f"{m.op_type}-{m.since}" for m in moved}))
    raise ConversionError(f"cannot move the model to opset {target}: after converting {ops}, it "
                          f"fails {failure}")


# The exact rewrites the table's ``rewrite(name)`` steps name: each takes (node, scope, target),
# returns a :data:`Form` (Unchanged, Done, Replaced or Prepared) and raises ConversionError when
# there is none.
REWRITES = {
    "softmax_axis": _softmax_form,
    "reshape_allowzero": _reshape_form,
    "shape_slice": _shape_form,
    "trilu": _trilu_form,
    "grid_sample_mode": _grid_sample_form,
    "resize_axes": _resize_axes_form,
    "resize_inputs": _resize_inputs_form,
    "min_max_integers": _min_max_integers_form,
    "reduce_axes": _reduce_form,
    "split_num_outputs": _split_form,
    "pad_axes": _pad_form,
    "mod_floor": _mod_form,
    "constant_value_tensor": _constant_value_form,
}
