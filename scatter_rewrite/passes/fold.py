"""Fold scatters whose inputs are all constant into constants, with our NumPy evaluator.

Rewrites: every default-domain ``Scatter``, ``ScatterElements``, ``ScatterND`` and
``TensorScatter`` (main graph, If/Loop/Scan bodies, model-local functions) whose inputs are all
constant, into an initializer holding its result (in a function body, where initializers do not
exist, into a ``Constant`` node). The result keeps the scatter output's name, so graph outputs keep
theirs. Results are computed by :mod:`scatter_rewrite.evaluator`, which has every reduction for
every dtype, including the float16 ``add``/``mul`` that onnxruntime's CPU kernels lack and that
ORT-based folders (onnx-graphsurgeon ``fold_constants``, onnxsim, Polygraphy) therefore leave in
the graph.

Constant means: an initializer that is not also a graph input (a graph input with an initializer
is a default that callers may override), a subgraph initializer or outer-scope constant, a
``Constant`` node, or the output of a small constant-only chain of :data:`CHAIN_OPS` (``Cast``,
``Reshape``, ``Unsqueeze``, ``Expand``, ``Range``, ``Gather``, ``Shape`` of static dims or of a
constant, ``Size`` of a ``Shape`` of known rank, ...) as real exporters emit in front of scatter
indices and updates (:class:`ConstantChains`, which the inline-If helper shares). A name that a
subgraph initializer shares with a value of an enclosing graph is not constant in either scope:
runtimes resolve it differently. Chain nodes are evaluated (``onnx.reference``'s per-op
implementations, three of them corrected in :mod:`scatter_rewrite.evaluator.reference_ops`) only as
far as they feed a scatter being folded; nodes and initializers that folding leaves unused are
removed, nothing else in the graph is.

Leaves alone (reported with the reason): scatters with a non-constant input, results bigger than
``size_limit`` bytes, inputs a chain op cannot evaluate (or must not: a ``Cast`` between strings
and numbers, whose text is the runtime's choice). Raises IndexOutOfRangeError for a constant
index out of range and InvalidModelError for a constant scatter that breaks its spec (an axis out
of range, an input whose data type the op's schema at its opset does not take: ScatterND's int32
indices, int4 ScatterElements data): folding must not silently bake an undefined result into the
model, nor make an invalid one pass onnx.checker.

External weights that no folded scatter reads are never read (the IR memory-maps them); the result
is an ``ir.Tensor`` over the evaluator's array (no copy), written as external data when needed.
"""

from __future__ import annotations

from collections.abc import Callable

import logging
import numpy as np
import onnx_ir as ir

from scatter_rewrite import evaluator
from scatter_rewrite.errors import IndexOutOfRangeError, InvalidModelError
from scatter_rewrite.limits import check_size
from scatter_rewrite.graph import (
    SCATTER_OPS, Scope, attr, describe, is_default_domain, is_reference, iter_nodes,
    reference_reason, shadowed_names,
)
from scatter_rewrite.passes.base import ScatterPass
from scatter_rewrite.spec import input_type_problem

__all__ = ["CannotEvaluate", "CHAIN_OPS", "ConstantChains", "FoldPass", "SHAPE_OPS"]

logger = logging.getLogger("scatter_rewrite")

# Ops evaluated when they sit on a constant-only chain feeding a scatter: shape/index plumbing and
# the elementwise arithmetic exporters put in front of indices, masks and updates. None has a
# subgraph; all are deterministic.
CHAIN_OPS = frozenset({
    "Constant", "Identity", "Cast", "CastLike", "Reshape", "Unsqueeze", "Squeeze", "Flatten",
    "Concat", "Split", "Expand", "Tile", "Pad", "Range", "Gather", "GatherElements", "GatherND",
    "Slice", "Transpose", "ConstantOfShape", "Shape", "Size", "Add", "Sub", "Mul", "Div", "Mod",
    "Neg", "Abs", "Sign", "Floor", "Ceil", "Round", "Min", "Max", "Clip", "Where", "Equal", "Less",
    "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor", "ReduceSum",
    "ReduceProd", "ReduceMax", "ReduceMin", "CumSum", "ArgMax", "ArgMin", "OneHot", "Trilu",
    "EyeLike", "NonZero",
})
# These read only their input's static shape, never its values.
SHAPE_OPS = frozenset({"Shape", "Size"})


class FoldPass(ScatterPass):
    """Replace constant scatters (and the constant chains feeding them) by their value."""

    name = "fold"

    def __init__(self, size_limit: int | None = None):
        super().__init__()
        self.size_limit = None if size_limit is None else check_size(size_limit, "size_limit")

    # ---- the pass ------------------------------------------------------------------------------

    @staticmethod
    def foldable_in(model: ir.Model) -> Callable[[ir.Node], bool]:
        """Whether a node of ``model`` reads only constants (what this pass can fold): a constant
        scatter whose axis is a function attribute gets one copy of its function per call
        binding, the value known in each, from SpecializeCallsPass run first (the fold verb's
        list), so that each folds."""
        probe = ConstantChains(shadowed=shadowed_names(model))
        return lambda node: all(v is None or probe.why_not(v) is None for v in node.inputs)

    def run(self, model: ir.Model) -> None:
        self._chains = ConstantChains(shadowed=shadowed_names(model))
        try:
            for node, scope in iter_nodes(model):
                if node.graph is None:
                    continue  # removed by an earlier fold (a chain node it used up)
                if node.op_type in SCATTER_OPS and is_default_domain(node):
                    self._fold(node, scope)
        finally:
            self._chains.clear()

    def _fold(self, node: ir.Node, scope: Scope) -> None:
        # (its attributes and arity are the schema's: ScatterPass.call checked them, spec.py)
        reason = reference_reason(node)
        if reason is None:
            reason = next(
                (
                    f"input {i} ('{v.name}') is not constant: {why}"
                    for i, v in enumerate(node.inputs)
                    if (why := self._chains.why_not(v))
                ),
                None,
            )
        if reason is not None:
            self.skip(node, scope, reason)
            return
        out = node.outputs[0]
        dtype, shape = self._result_type(node)
        if shape is not None and (reason := self._too_big(dtype, shape)):
            self.skip(node, scope, reason)  # decided before reading any input
            return
        try:
            inputs = [
                None if v is None else self._chains.evaluate(v, scope.opset) for v in node.inputs
            ]
        except CannotEvaluate as e:
            self.skip(node, scope, f"cannot evaluate its constant inputs: {e}")
            return
        # A type the schema forbids (ScatterND's int32 indices) fails onnx.checker and onnxruntime;
        # folded, the model would pass both. (The kernels take it: they are a NumPy library API.)
        problem = input_type_problem(
            node, scope.opset, [None if a is None else _data_type(a) for a in inputs]
        )
        if problem is not None:
            raise InvalidModelError(
                f"{describe(node, scope)}: {problem}; fix the model (onnx.checker and "
                "onnxruntime reject it; folded, it would hide that)"
            )
        result = self._compute(node, scope, inputs)
        del inputs
        if dtype is None:
            dtype = _data_type(result)
        if shape is None and (reason := self._too_big(dtype, result.shape)):
            self.skip(node, scope, reason)
            return
        name = out.name
        feeding = [v for v in node.inputs if v is not None]
        replace_by_constant(node, scope, self._tensor(result, dtype, name))
        self._chains.forget(node.outputs[0])
        removed = self._chains.prune(feeding)
        nbytes = _nbytes(dtype, result.shape)
        extra = f"; {removed} constant node(s)/initializer(s) it used removed" if removed else ""
        kind = "Constant node" if scope.is_function else "initializer"
        self.rewrote(
            node,
            scope,
            f"-> {kind} '{name}' ({dtype.name} {list(result.shape)}, {nbytes} bytes){extra}",
        )

    # ---- what can be folded --------------------------------------------------------------------

    def _result_type(self, node: ir.Node) -> tuple[ir.DataType | None, tuple[int, ...] | None]:
        """The result's dtype and shape, known without evaluating when ``data`` is typed and
        static."""
        data = node.inputs[0] if node.inputs else None
        if data is None:
            return None, None
        tensor = data.const_value if (data.producer() is None and data.is_initializer()) else None
        if tensor is not None:
            return tensor.dtype, tuple(tensor.shape.numpy())
        shape = (
            tuple(data.shape.numpy()) if data.shape is not None and data.shape.is_static() else None
        )
        return data.dtype, (shape if data.dtype is not None else None)

    def _too_big(self, dtype: ir.DataType, shape: tuple[int, ...]) -> str | None:
        if self.size_limit is None:
            return None
        nbytes = _nbytes(dtype, shape)
        if nbytes > self.size_limit:
            return (
                f"its result would be {nbytes} bytes, over the size limit of {self.size_limit} "
                "bytes"
            )
        return None

    def _compute(self, node: ir.Node, scope: Scope, inputs: list) -> np.ndarray:
        op, name = node.op_type, node.name or None
        try:
            if op == "Scatter":
                return evaluator.scatter(*inputs[:3], axis=attr(node, "axis", 0), node_name=name)
            if op == "ScatterElements":
                return evaluator.scatter_elements(
                    *inputs[:3],
                    axis=attr(node, "axis", 0),
                    reduction=attr(node, "reduction", "none"),
                    node_name=name,
                )
            if op == "ScatterND":
                return evaluator.scatter_nd(
                    *inputs[:3], reduction=attr(node, "reduction", "none"), node_name=name
                )
            write_indices = inputs[2] if len(inputs) > 2 else None
            return evaluator.tensor_scatter(
                inputs[0],
                inputs[1],
                write_indices,
                axis=attr(node, "axis", -2),
                mode=attr(node, "mode", "linear"),
                node_name=name,
            )
        except IndexOutOfRangeError as e:
            raise IndexOutOfRangeError(
                f"{describe(node, scope)}: {_detail(e)}; its inputs are constant, so fix the "
                "model's index values"
            ) from e
        except InvalidModelError as e:
            raise InvalidModelError(f"{describe(node, scope)}: {_detail(e)}; fix the model") from e

    # ---- rewriting -----------------------------------------------------------------------------

    @staticmethod
    def _tensor(array: np.ndarray, dtype: ir.DataType, name: str | None) -> ir.TensorProtocol:
        if dtype == ir.DataType.STRING:
            flat = [s.encode() if isinstance(s, str) else bytes(s) for s in array.ravel().tolist()]
            # an object array, not the list: numpy() of an empty list would be float64
            return ir.StringTensor(np.array(flat, dtype=object).reshape(array.shape), name=name)
        return ir.Tensor(array, dtype=dtype, name=name)  # wraps the array: no copy


def replace_by_constant(node: ir.Node, scope: Scope, tensor: ir.TensorProtocol) -> None:
    """Replace the single-output ``node`` by ``tensor``: an initializer of the same name in a graph,
    a ``Constant`` node in a function (which has no initializers)."""
    out = node.outputs[0]
    if scope.is_function:
        new_nodes = [ir.node("Constant", [], attributes={"value": tensor}, name=node.name or None)]
        new_value = new_nodes[0].outputs[0]
    else:
        new_nodes, new_value = [], ir.Value()
    ir.convenience.replace_nodes_and_values(scope.body, node, [node], new_nodes, [out], [new_value])
    new_value.type = ir.TensorType(tensor.dtype)
    new_value.shape = ir.Shape(tensor.shape)
    if not scope.is_function:
        new_value.const_value = tensor
        scope.body.register_initializer(new_value)


class ConstantChains:
    """Which values are compile-time constants, and their values (FoldPass's inputs, the inline-If
    helper's conditions).

    Constant: an initializer that is not also a graph input, a ``Constant`` node, or the output of a
    chain of :data:`CHAIN_OPS` over constants. ``Shape`` and ``Size`` read no values, only what is
    known of their input's shape: ``Shape`` is constant when the dims it returns are static (all of
    them, or its ``start:end`` slice), ``Size`` when every dim is static, and both when their input
    is itself a constant (a ``Constant`` node's or a chain's output, which carry no recorded shape:
    the shape of its value); the output of a ``Shape`` has a known length whenever its input's
    rank is known, so ``Size(Shape(x))`` (x's rank) is constant even when x's dims are dynamic.
    Shapes are read from the values as they are (run ONNX shape inference first to know more).
    Values named in ``shadowed`` (:func:`scatter_rewrite.graph.shadowed_names`) are not constant.
    Answers are cached: make a new instance after the graph or its recorded shapes change, or
    :meth:`forget` the values that changed.
    """

    def __init__(self, shadowed: set[str] | None = None) -> None:
        # names a subgraph initializer shares with an enclosing graph (graph.shadowed_names): values
        # of these names are not constant, and are never pruned
        self._shadowed = shadowed or set()
        self._reasons: dict[
            ir.Value, str | None
        ] = {}  # value -> why it is not constant (None: it is)
        self._arrays: dict[ir.Value, np.ndarray] = {}  # evaluated chain-node outputs

    def clear(self) -> None:
        self._reasons.clear()
        self._arrays.clear()

    def forget(self, value: ir.Value) -> None:
        self._arrays.pop(value, None)
        self._reasons.pop(value, None)

    def why_not(self, value: ir.Value | None) -> str | None:
        """Why ``value`` is not a compile-time constant, or None when it is."""
        if value is None:
            return None  # an omitted optional input
        if value in self._reasons:
            return self._reasons[value]
        try:
            reason = self._why_not(value)
        except RecursionError:
            reason = "its constant chain is too deep to evaluate"
        self._reasons[value] = reason
        return reason

    def _why_not(self, value: ir.Value) -> str | None:
        if value.name in self._shadowed:
            return (
                f"'{value.name}' is the name of a subgraph initializer and of a value of an "
                "enclosing graph, which runtimes resolve differently: rename one"
            )
        producer = value.producer()
        if producer is None:
            if value.is_graph_input():
                if value.is_initializer():
                    return (
                        f"graph input '{value.name}' has an initializer, but callers may override "
                        "it; remove it from the graph inputs to make it constant"
                    )
                return f"'{value.name}' is a graph input"
            if value.is_initializer() and value.const_value is not None:
                return None
            return f"'{value.name}' is a function input or comes from outside the graph"
        label = f"{producer.op_type} '{producer.name}'" if producer.name else producer.op_type
        if producer.op_type in SCATTER_OPS and is_default_domain(producer):
            return f"it comes from {label}, which was left unfolded"
        if producer.op_type not in CHAIN_OPS or not is_default_domain(producer):
            return f"it comes from {label}, which is not a constant-chain op"
        for name, a in producer.attributes.items():
            if is_reference(a):
                return (
                    f"it comes from {label}, whose attribute '{name}' refers to a function "
                    "attribute"
                )
            if a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
                return f"it comes from {label}, which has a subgraph"
        if producer.op_type == "Constant":
            names = set(producer.attributes)
            if names & {"sparse_value"} or len(names) != 1:
                return f"it comes from {label}, a sparse or malformed Constant"
            return None
        if producer.op_type in SHAPE_OPS:
            source = producer.inputs[0] if producer.inputs else None
            if _shape_op_dims(producer) is None:
                why = "no input" if source is None else self.why_not(source)
                if why is not None:  # (a constant input's shape is its value's)
                    return (
                        f"it comes from {label} of a dynamic shape (its input is not constant "
                        f"either: {why})"
                    )
            return None
        for v in producer.inputs:
            if (why := self.why_not(v)) is not None:
                return f"it comes from {label}, whose input '{v.name}' is not constant ({why})"
        return None

    def evaluate(self, value: ir.Value, opset: int) -> np.ndarray:
        """The value of a constant (:meth:`why_not` said None); chain ops run at ``opset``.
        Raises :class:`CannotEvaluate` when onnx.reference rejects a chain op's inputs."""
        producer = value.producer()
        if producer is None:  # an initializer: memory-mapped or in the proto, read here
            return _tensor_array(value.const_value)
        if value in self._arrays:
            return self._arrays[value]
        if producer.op_type == "Constant":
            outputs = [_object_strings(_constant_array(producer))]
        elif producer.op_type in SHAPE_OPS:
            dims = _shape_op_dims(producer)
            if dims is None:  # its input is a constant with no recorded shape: its value's
                dims = _shape_op_dims(producer, self._shape_of_constant(producer.inputs[0], opset))
            outputs = [_shape_op(producer, dims)]
        else:
            inputs = [None if v is None else self.evaluate(v, opset) for v in producer.inputs]
            _refuse_string_casts(producer, inputs)
            outputs = _run_reference(producer, opset, inputs)
        for v, array in zip(producer.outputs, outputs):
            self._arrays[v] = array
        return self._arrays[value]

    def _shape_of_constant(self, value: ir.Value, opset: int) -> list[int]:
        """A constant's shape: a ``Constant`` node's from its attribute (its data is not read), any
        other's from its value."""
        producer = value.producer()
        if producer is not None and producer.op_type == "Constant":
            ((name, a),) = producer.attributes.items()
            if name == "value":
                return list(a.value.shape.numpy())
            return [len(a.value)] if name.endswith("s") else []
        return list(self.evaluate(value, opset).shape)

    def prune(self, values: list[ir.Value]) -> int:
        """Remove the nodes and initializers among ``values``' producers (and theirs, transitively)
        that nothing uses any more; returns how many were removed. Graph inputs stay, and so do
        initializers whose name a subgraph's initializer shadows (without them, runtimes that read
        the outer value would read the subgraph's)."""
        removed, stack = 0, list(values)
        while stack:
            value = stack.pop()
            if value.uses() or value.is_graph_output() or value.is_graph_input():
                continue
            producer = value.producer()
            if producer is None:
                graph = value.graph
                if (
                    value.is_initializer()
                    and graph is not None
                    and graph.initializers.get(value.name) is value
                    and value.name not in self._shadowed
                ):
                    graph.initializers.pop(value.name)
                    removed += 1
                continue
            if producer.graph is None or any(
                o.uses() or o.is_graph_output() for o in producer.outputs
            ):
                continue
            inputs = [v for v in producer.inputs if v is not None]
            producer.graph.remove(producer, safe=True)
            for o in producer.outputs:
                self.forget(o)
            removed += 1
            stack.extend(inputs)
        return removed


class CannotEvaluate(Exception):
    """A chain op the reference implementation could not run (reported as a skip reason)."""


def _detail(e: Exception) -> str:
    """The kernel's message without its own "Op node 'name':" prefix (describe() says more)."""
    text = str(e)
    return (
        text.split(": ", 1)[1]
        if ": " in text and text.split(": ", 1)[0].endswith(("'", ">"))
        else text
    )


def _data_type(array: np.ndarray) -> ir.DataType:
    """An evaluated array's ONNX data type (strings: object, bytes or str arrays)."""
    return ir.DataType.STRING if array.dtype.kind in "OUS" else ir.DataType.from_numpy(array.dtype)


def _nbytes(dtype: ir.DataType | None, shape: tuple[int, ...]) -> int:
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if dtype is None or dtype == ir.DataType.STRING:
        return count * 8
    return (count * dtype.bitwidth + 7) // 8


def _constant_array(node: ir.Node) -> np.ndarray:
    ((name, a),) = node.attributes.items()
    value = a.value
    if name == "value":
        return _tensor_array(value)
    if name in ("value_float", "value_floats"):
        return np.array(value, dtype=np.float32)
    if name in ("value_int", "value_ints"):
        return np.array(value, dtype=np.int64)
    if name in ("value_string", "value_strings"):
        return np.array(value, dtype=object)
    raise CannotEvaluate(f"Constant '{node.name}' has an unknown attribute '{name}'")


def known_dims(value: ir.Value | None) -> list[int | None] | None:
    """What is known of ``value``'s shape: its dims (None where dynamic), or None when its rank is
    unknown. A ``Shape`` output with no recorded shape still has a known length when the rank of
    the ``Shape``'s input is known."""
    if value is None:
        return None
    if value.shape is not None:
        return [d if isinstance(d, int) else None for d in value.shape]
    producer = value.producer()
    if producer is not None and producer.op_type == "Shape" and is_default_domain(producer):
        source = known_dims(producer.inputs[0] if producer.inputs else None)
        if source is not None:
            start, end = attr(producer, "start", 0), attr(producer, "end", len(source))
            if isinstance(start, int) and isinstance(end, int):
                return [len(source[slice(start, end)])]
    return None


def _shape_op_dims(node: ir.Node, source: list[int] | None = None) -> list[int] | None:
    """The dims a ``Shape``/``Size`` node reads (all static), or None when some is unknown; from
    its input's known dims, or from ``source`` (the dims of its input's value) when given."""
    dims = known_dims(node.inputs[0] if node.inputs else None) if source is None else source
    if dims is None:
        return None
    if node.op_type == "Shape":  # Shape-15 clamps start/end exactly as Python slicing does
        dims = dims[slice(attr(node, "start", 0), attr(node, "end", len(dims)))]
    return None if any(d is None for d in dims) else dims


def _shape_op(node: ir.Node, dims: list[int]) -> np.ndarray:
    dims = np.array(dims, dtype=np.int64)
    if node.op_type == "Size":
        return np.array(np.prod(dims, dtype=np.int64), dtype=np.int64)
    return dims


def _run_reference(node: ir.Node, opset: int, inputs: list) -> list[np.ndarray]:
    """Run one chain node with onnx.reference's implementation of its op at ``opset``, or with our
    correction of it (:data:`scatter_rewrite.evaluator.reference_ops.CORRECTED_OPS`: Unsqueeze and
    Squeeze before 13, whose several axes onnx.reference takes one at a time; Where, which cut
    strings to its x's width; GatherElements, which took at most 64 positions and wrapped those
    out of range)."""
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.ops import load_op

    from scatter_rewrite.evaluator.reference_ops import CORRECTED_OPS

    proto = ir.serde.serialize_node(node)
    try:
        cls = CORRECTED_OPS.get(node.op_type) or load_op("", node.op_type, opset)
        params = {"log": lambda *a: None, "opsets": {"": opset}, "verbose": 0, "new_ops": None,
                  "existing_functions": {}, "evaluator_cls": ReferenceEvaluator}
        outputs = cls(proto, params).run(*inputs)
    except Exception as e:  # the reference op rejects these inputs: not ours to fix, a skip reason
        label = f"{node.op_type} '{node.name}'" if node.name else node.op_type
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CannotEvaluate(f"{label} failed in onnx.reference ({first[:200]})") from e
    return [_object_strings(np.asarray(o)) for o in outputs]


def _refuse_string_casts(node: ir.Node, inputs: list) -> None:
    """A ``Cast``/``CastLike`` between strings and numbers is not evaluated: the spec leaves the
    text of a number to the runtime, and they differ (onnxruntime writes -0.0 as '-0', true as '1',
    NaN as 'NaN' and doubles with 8 digits, onnx.reference '-0.0', 'True', 'nan' and 17 digits), as
    they parse differently what is not a plain number."""
    if node.op_type not in ("Cast", "CastLike") or not inputs or inputs[0] is None:
        return
    if node.op_type == "Cast":
        to_string = attr(node, "to") == ir.DataType.STRING
    else:
        to_string = len(inputs) > 1 and inputs[1] is not None and inputs[1].dtype.kind in "OSU"
    if (inputs[0].dtype.kind in "OSU") != to_string:
        label = f"{node.op_type} '{node.name}'" if node.name else node.op_type
        raise CannotEvaluate(f"{label} casts between strings and numbers, whose text each runtime "
                             "writes and reads its own way")


def _tensor_array(tensor: ir.TensorProtocol) -> np.ndarray:
    """A tensor's values; a string tensor's as an object array even when empty (the numpy() of an
    empty ir.StringTensor built from a list is float64)."""
    array = tensor.numpy()
    if tensor.dtype == ir.DataType.STRING and array.dtype.kind not in "OSU":
        array = array.astype(object)
    return _object_strings(array)


def _object_strings(array: np.ndarray) -> np.ndarray:
    """String tensors as object arrays of ``bytes``, whatever their source: the IR gives fixed-width
    np.bytes_ arrays, ``value_strings`` attributes ``str`` and onnx.reference ops np.str_ arrays.
    onnx.reference refuses to mix widths (Where: 'x and y should share the same dtype |S2 != |S1')
    or to compute on fixed-width ones (Expand), and Python cannot concatenate or compare bytes
    with str (a Concat of both, then a string reduction)."""
    if array.dtype.kind not in "OSU":
        return array
    if array.dtype.kind == "S" or array.size == 0:
        return array.astype(object)
    encode = np.frompyfunc(lambda x: x.encode() if isinstance(x, str) else x, 1, 1)
    return np.asarray(encode(array), dtype=object)
