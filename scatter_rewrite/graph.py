"""The one traversal every pass uses: main graph, nested subgraphs, model-local functions.

Each place that holds nodes is a :class:`Scope`, with the default-domain opset in force there:
subgraphs (If/Loop/Scan bodies) inherit their parent's, a function uses its own ``opset_imports``
and falls back to the model's.

What caches of nodes key their attributes and tensors by: :func:`attribute_key` and
:func:`tensor_key` (their values, or the objects themselves; never a name).

New nodes are built through one builder: :class:`NodeBuilder` (and its two building blocks
:func:`constant_node`, :func:`typed`), which records each node in order with its output typed;
the passes' lowerings use :class:`NamedNodeBuilder`, the same with fresh output names.
"""

from __future__ import annotations

import dataclasses
import itertools
import struct
from collections.abc import Hashable, Iterable, Iterator

import numpy as np
import onnx_ir as ir

from scatter_rewrite import custom_ops
from scatter_rewrite.limits import DEFAULT_DOMAINS

__all__ = [
    "attr", "attribute_key", "body_nodes", "computes_a_scatter", "const_tensor", "constant_node",
    "constant_tensor", "CUSTOM_SCATTER_OPS", "DEFAULT_DOMAINS", "default_opset", "describe",
    "describe_parts", "FLOAT_TYPES", "forget_origins", "function_calls", "is_default_domain", "is_overridable", "is_reference",
    "iter_nodes", "iter_scopes", "KEPT_AT_OPSET", "mark_written", "NamedNodeBuilder", "Names", "NodeBuilder", "nodes_within",
    "reference_reason", "remove_unused_expands", "SCATTER_OPS", "schema_opset", "Scope", "shadowed_names",
    "tensor_key", "typed", "value_names", "written_for", "WRITTEN_FOR",
]

# Every scatter operator of the default domain, deprecated Scatter and opset-24 TensorScatter
# included.
SCATTER_OPS = frozenset({"Scatter", "ScatterElements", "ScatterND", "TensorScatter"})
# The custom-domain scatters ``lower --mode custom|tensorrt-plugin`` writes: the standard ops at
# opset 18.
CUSTOM_SCATTER_OPS = frozenset({"ScatterElements", "ScatterND"})


@dataclasses.dataclass(frozen=True)
class Scope:
    """A graph or function body, where its nodes live and which opset applies to them."""

    body: ir.Graph | ir.Function
    opset: int
    where: (
        str  # human-readable location: "main graph", "If 'cond' then_branch", "function local::F"
    )

    @property
    def is_function(self) -> bool:
        return isinstance(self.body, ir.Function)


def default_opset(opset_imports: dict[str, int], fallback: int | None = None) -> int | None:
    for domain in DEFAULT_DOMAINS:
        if domain in opset_imports:
            return opset_imports[domain]
    return fallback


def is_default_domain(node: ir.Node) -> bool:
    return node.domain in DEFAULT_DOMAINS


def computes_a_scatter(node: ir.Node) -> bool:
    """Whether ``node`` computes a scatter's semantics: one of :data:`SCATTER_OPS`, or one of our
    custom-domain scatters (:mod:`scatter_rewrite.custom_ops`), which compute the standard op and so
    share its index contract. Passes that rewrite scatters look at the default domain only."""
    if is_default_domain(node):
        return node.op_type in SCATTER_OPS
    return node.domain == custom_ops.DOMAIN and node.op_type in CUSTOM_SCATTER_OPS


def _subgraphs(node: ir.Node) -> Iterator[tuple[str, ir.Graph]]:
    for name, attr in node.attributes.items():
        if is_reference(attr):
            continue  # a reference attribute inside a function: no graph
        if attr.type == ir.AttributeType.GRAPH:
            yield name, attr.value
        elif attr.type == ir.AttributeType.GRAPHS:
            for i, graph in enumerate(attr.value):
                yield f"{name}[{i}]", graph


def _nested(body: ir.Graph | ir.Function, opset: int, where: str) -> Iterator[Scope]:
    yield Scope(body, opset, where)
    for node in list(body):
        if not node.attributes:
            continue  # most nodes: nothing to look into (keeps big-graph walks cheap)
        for attr_name, graph in _subgraphs(node):
            label = node.name or node.op_type
            yield from _nested(graph, opset, f"{where} > {node.op_type} '{label}' {attr_name}")


def iter_scopes(model: ir.Model) -> Iterator[Scope]:
    """Yield every scope, parents before their subgraphs, main graph before functions."""
    model_opset = default_opset(model.opset_imports, fallback=1)
    yield from _nested(model.graph, model_opset, "main graph")
    for function in list(model.functions.values()):
        opset = default_opset(function.opset_imports, fallback=model_opset)
        yield from _nested(function, opset, f"function {function.domain}::{function.name}")


def iter_nodes(model: ir.Model) -> Iterator[tuple[ir.Node, Scope]]:
    """Every node with its scope. Each scope's node list is snapshotted, so callers may rewrite."""
    for scope in iter_scopes(model):
        for node in list(scope.body):
            yield node, scope


def function_calls(model: ir.Model) -> dict[tuple[str, str, str], list[ir.Node]]:
    """The calls of each model-local function, in :func:`iter_nodes` order, keyed like
    ``model.functions``: (domain, name, overload)."""
    calls: dict[tuple[str, str, str], list[ir.Node]] = {}
    for node, _ in iter_nodes(model):
        key = (node.domain, node.op_type, node.overload)
        if key in model.functions:
            calls.setdefault(key, []).append(node)
    return calls


def body_nodes(body: ir.Graph | ir.Function) -> Iterator[ir.Node]:
    """Every node of one graph or function body, its subgraphs' nodes included (snapshotted)."""
    for scope in _nested(body, 0, ""):
        yield from list(scope.body)


def nodes_within(nodes: Iterable[ir.Node]) -> Iterator[ir.Node]:
    """``nodes`` and every node of their subgraphs (nested), e.g. of nodes not yet in a graph."""
    for node in nodes:
        yield node
        for _, graph in _subgraphs(node):
            yield from body_nodes(graph)


def remove_unused_expands(body: ir.Graph | ir.Function, values: Iterable[ir.Value | None]) -> None:
    """Remove each of ``values``' producers in ``body`` that is an ``Expand`` nothing uses any more
    (after a splice, the GNN ``Expand`` of the row keys to [E, F] that a lowering reads around):
    one level only."""
    for value in values:
        producer = value.producer() if value is not None else None
        if producer is None or producer.graph is not body or producer.op_type != "Expand":
            continue
        if all(not v.uses() and not v.is_graph_output() for v in producer.outputs):
            body.remove(producer, safe=True)


def shadowed_names(model: ir.Model) -> set[str]:
    """The names of subgraph initializers (If/Loop/Scan bodies, nested) that an enclosing graph or
    function also defines. The IR reads the subgraph's own value, but runtimes differ:
    onnx.reference reads the outer one, onnxruntime the outer one while something else reads it and
    the inner one otherwise. A value of such a name is known for sure in neither scope."""
    found: set[str] = set()

    def visit(body: ir.Graph | ir.Function, outer: tuple[set[str], ...]) -> None:
        if isinstance(body, ir.Graph) and outer:
            found.update(
                name for name in body.initializers if any(name in names for names in outer)
            )
        subgraphs = [graph for node in body if node.attributes for _, graph in _subgraphs(node)]
        if not subgraphs:
            return  # most bodies: no names to collect
        here = {v.name for v in body.inputs if v is not None and v.name}
        here.update(o.name for node in body for o in node.outputs if o.name)
        if isinstance(body, ir.Graph):
            here.update(body.initializers)
        for graph in subgraphs:
            visit(graph, (*outer, here))

    visit(model.graph, ())
    for function in model.functions.values():
        visit(function, ())
    return found


def value_names(model: ir.Model) -> set[str]:
    """Every value name in the model: inputs, outputs, initializers and node outputs of every
    scope."""
    names: set[str] = set()
    for scope in iter_scopes(model):
        body = scope.body
        values = list(body.inputs) + list(body.outputs)
        if isinstance(body, ir.Graph):
            values += list(body.initializers.values())
        for node in body:
            values += list(node.outputs)
        names.update(v.name for v in values if v is not None and v.name)
    return names


def is_overridable(value: ir.Value) -> bool:
    """Whether ``value`` is an initializer that is also a graph input: a default that callers may
    replace at run time, so not a constant (fold, the opset move and the values given to shape
    inference treat it so)."""
    return value.is_initializer() and value.is_graph_input()


def constant_tensor(value: ir.Value | None) -> ir.TensorProtocol | None:
    """``value``'s tensor when it is known before run time: an initializer that is not
    :func:`is_overridable`, or a ``Constant``'s value; None otherwise."""
    if value is None or is_overridable(value):
        return None
    return const_tensor(value)


def const_tensor(value: ir.Value) -> ir.TensorProtocol | None:
    """``ir.convenience.get_const_tensor(value)`` that leaves the model as it was: onnx_ir names a
    Constant's ``value`` tensor after its output, a change to the model (written, onnx2tf then
    converts it wrongly: "Output tensors of a Functional model must be the output of a
    TensorFlow Layer"), and to a ModelProto it was read from. That tensor is returned as it is."""
    producer = value.producer()
    if producer is not None and producer.op_type == "Constant" and is_default_domain(producer):
        attribute = producer.attributes.get("value")
        if isinstance(attribute, ir.Attr) and attribute.type == ir.AttributeType.TENSOR \
                and attribute.value is not None:  # (a reference attribute has no value here)
            return attribute.value
    return ir.convenience.get_const_tensor(value)


# Tensors up to this size are keyed by their bytes (a node's small constants, met again and again in
# an export); bigger ones, and tensors of strings, by identity.
KEY_CONTENT_BYTES = 4096


class _Identity:
    """``obj`` compared and hashed by identity. The key holds ``obj``, so its id is not reused by
    another object while the key lives."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


def tensor_key(tensor: ir.TensorProtocol) -> Hashable:
    """A key equal for two tensors only when both hold the same values: their dtype, shape and
    bytes, or the tensor itself (:data:`KEY_CONTENT_BYTES`). Never their name, which TorchScript
    leaves "" on every Constant's tensor, nor their repr, which leaves the values out."""
    if tensor.dtype != ir.DataType.STRING and tensor.nbytes <= KEY_CONTENT_BYTES:
        return (tensor.dtype, tuple(tensor.shape.dims), tensor.tobytes())
    return _Identity(tensor)


def _float_key(value: float) -> bytes:
    return struct.pack("<d", value)  # (-0.0 == 0.0 in Python, yet 1 / x tells them apart)


def attribute_key(a: ir.Attr) -> Hashable:
    """A key equal for two attributes only when they mean the same: a reference by the name it
    refers to, numbers by their bits, tensors by :func:`tensor_key`, graphs and the rest by
    identity. The one way every cache of nodes keys their attributes."""
    if is_reference(a):
        return ("@", a.ref_attr_name, a.type)
    kind, value = a.type, a.value
    if kind == ir.AttributeType.FLOAT:
        return (kind, _float_key(value))
    if kind == ir.AttributeType.FLOATS:
        return (kind, tuple(map(_float_key, value)))
    if kind in (ir.AttributeType.INT, ir.AttributeType.STRING):
        return (kind, value)
    if kind in (ir.AttributeType.INTS, ir.AttributeType.STRINGS):
        return (kind, tuple(value))
    if kind == ir.AttributeType.TENSOR:
        return (kind, tensor_key(value))
    if kind == ir.AttributeType.TENSORS:
        return (kind, tuple(map(tensor_key, value)))
    return (kind, _Identity(value))  # graphs, sparse tensors, type protos


KEPT_AT_OPSET = "scatter_rewrite.kept_at_opset"  # node.meta: see schema_opset


def schema_opset(node: ir.Node, scope: Scope) -> int:
    """The opset whose schema ``node`` follows: its scope's, or the one it was at for a node an
    opset move kept as it was, for the pass after it to replace (passes/move_opset.py)."""
    return node.meta.get(KEPT_AT_OPSET, scope.opset)


# The metadata key a node a pass wrote carries, the user's node it was written for (as described):
# messages name that node, not the name onnx_ir gave the new one. Removed before a model is written.
WRITTEN_FOR = "scatter_rewrite.written_for"


def describe(node: ir.Node, scope: Scope) -> str:
    """``ScatterElements 'name' (opset 18, main graph)``: how messages and reports name a node; a
    node a pass wrote, by the user's node it was written for (``Range written for ...``)."""
    origin = node.metadata_props.get(WRITTEN_FOR) if node.metadata_props else None
    if origin is not None:
        return f"{node.op_type} written for {origin}"
    return describe_parts(node.op_type, node.name, schema_opset(node, scope), scope.where)


def written_for(node: ir.Node, scope: Scope) -> str:
    """The user's node ``node`` stands for, as :func:`describe` names it: its mark when a pass
    wrote it, else ``node`` itself. What the nodes written in its place are marked with."""
    origin = node.metadata_props.get(WRITTEN_FOR) if node.metadata_props else None
    return origin if origin is not None else describe(node, scope)


def mark_written(nodes: Iterable[ir.Node], origin: str) -> None:
    """Mark ``nodes`` and the nodes of their subgraphs as written for ``origin`` (the user's node,
    :func:`written_for`), so a later refusal names it; a node already marked keeps its mark."""
    for new in nodes_within(nodes):
        new.metadata_props.setdefault(WRITTEN_FOR, origin)


def forget_origins(model: ir.Model) -> None:
    """Remove the :data:`WRITTEN_FOR` marks (before the model is written or returned)."""
    for node, _ in iter_nodes(model):
        if node.metadata_props and WRITTEN_FOR in node.metadata_props:
            del node.metadata_props[WRITTEN_FOR]


def describe_parts(op_type: str, name: str | None, opset: int, where: str) -> str:
    """:func:`describe` from its parts (for a node not in the IR: a ``NodeProto``)."""
    label = f" '{name}'" if name else ""
    return f"{op_type}{label} (opset {opset}, {where})"


def attr(node: ir.Node, name: str, default=None):
    """An attribute's Python value, or the schema default the caller passes when it is absent.
    None for an attribute that refers to an attribute of the enclosing function (its value is known
    only at a call site): never the default, which could silently mean something else. Passes
    decline such nodes first (:func:`reference_reason`)."""
    a = node.attributes.get(name)
    if a is None:
        return default
    if is_reference(a):
        return None
    return a.value


def is_reference(a) -> bool:
    """Whether attribute ``a`` refers to an attribute of the enclosing function (``axis = @ax``).
    onnx_ir >= 0.1.x represents it as an ``ir.Attr`` with ``is_ref()`` true (older: ``RefAttr``)."""
    return not isinstance(a, ir.Attr) or a.is_ref()


def reference_reason(node: ir.Node, names=None) -> str | None:
    """Why ``node`` cannot be rewritten as it stands when one of its attributes (of ``names``, or
    any) refers to an attribute of the enclosing function; None when all are known."""
    for name, a in node.attributes.items():
        if (names is None or name in names) and is_reference(a):
            return (f"attribute '{name}' refers to the function's attribute '{a.ref_attr_name}', "
                    "whose value is known only at a call site")
    return None


def constant_node(array: np.ndarray) -> ir.Node:
    """A ``Constant`` node holding ``array``, its output typed and shaped like it."""
    const = ir.node("Constant", [], attributes={"value": ir.tensor(array)}, num_outputs=1)
    const.outputs[0].dtype = ir.DataType.from_numpy(array.dtype)
    const.outputs[0].shape = ir.Shape(array.shape)
    return const


def typed(node: ir.Node, dtype: ir.DataType | None, shape: ir.Shape | None = None) -> ir.Node:
    """``node`` with its first output's dtype and shape set, when the dtype is known (converting or
    checking a new node reads its input types)."""
    if dtype is not None:
        node.outputs[0].dtype, node.outputs[0].shape = dtype, shape
    return node


class NodeBuilder:
    """New nodes, recorded in the order built (:attr:`nodes`), for a caller to insert or splice::

        b = NodeBuilder()
        m = b.add("ReduceMax", [x], {"axes": [1], "keepdims": 1}, dtype=x.dtype)
        y = b.add("Sub", [x, m], dtype=x.dtype, shape=x.shape)
        replace(node, scope, b.nodes, [y])  # (scatter_rewrite.opset.rewriting.replace)

    Attribute values are Python values or ``ir.Attr`` (converted by ``onnx_ir.node``).
    """

    def __init__(self) -> None:
        self.nodes: list[ir.Node] = []

    def node(self, op_type: str, inputs, attributes: dict | None = None, *, num_outputs: int = 1,
             dtype: ir.DataType | None = None, shape: ir.Shape | None = None) -> ir.Node:
        """A new node of the default domain, its first output typed when ``dtype`` is given."""
        new = ir.node(op_type, list(inputs), attributes or {}, num_outputs=num_outputs)
        self.nodes.append(typed(new, dtype, shape))
        return new

    def add(self, op_type: str, inputs, attributes: dict | None = None, *,
            dtype: ir.DataType | None = None, shape: ir.Shape | None = None) -> ir.Value:
        """A new one-output node; its output."""
        return self.node(op_type, inputs, attributes, dtype=dtype, shape=shape).outputs[0]

    def const(self, array) -> ir.Value:
        """A new ``Constant`` holding ``array`` (a NumPy array or scalar); its output."""
        self.nodes.append(constant_node(np.asarray(array)))
        return self.nodes[-1].outputs[0]


_INT64 = ir.DataType.INT64
# The float types scatters take.
FLOAT_TYPES = frozenset({ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.FLOAT,
                         ir.DataType.DOUBLE})


class Names:
    """Fresh value names, unique against ``taken`` (every name already in the model)."""

    def __init__(self, taken: set[str] | None = None, prefix: str = "lower"):
        self.taken = taken if taken is not None else set()
        self.prefix = prefix
        self._counter = itertools.count()

    def new(self, hint: str) -> str:
        while True:
            name = f"{self.prefix}_{hint}_{next(self._counter)}"
            if name not in self.taken:
                self.taken.add(name)
                return name


class NamedNodeBuilder(NodeBuilder):
    """A :class:`NodeBuilder` whose every output gets a fresh name (:class:`Names`), with equal
    constants built once and the shape arithmetic the lowerings share (the passes' builder: one
    graph's nodes, the main body or a Loop/If subgraph)."""

    def __init__(self, names: Names, computed_expands: bool = True):
        super().__init__()
        self.names = names
        # False: no Expand to a shape computed at run time but one whose entries are all equal
        # (onnx2tf reorders a computed shape of rank 3+ as channels-last: targets/litert.py)
        self.computed_expands = computed_expands
        self._consts: dict[tuple, ir.Value] = {}

    def op(self, op_type: str, *inputs: ir.Value | None, outputs: int = 1, domain: str = "",
           dtype: ir.DataType | None = None, **attributes) -> ir.Value | tuple[ir.Value, ...]:
        node = ir.node(op_type, list(inputs), attributes=attributes or None, domain=domain,
                       num_outputs=outputs)
        for out in node.outputs:
            out.name = self.names.new(op_type.lower())
        if dtype is not None:
            node.outputs[0].dtype = dtype
        self.nodes.append(node)
        return node.outputs[0] if outputs == 1 else tuple(node.outputs)

    def const(self, value, dtype=np.int64) -> ir.Value:  # (index arithmetic: int64 by default)
        array = np.asarray(value, dtype=dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._consts:
            out = self.op("Constant", value=ir.tensor(array))
            out.dtype = ir.DataType.from_numpy(array.dtype)
            out.shape = ir.Shape(array.shape)
            self._consts[key] = out
        return self._consts[key]

    # small conveniences
    def shape(self, value: ir.Value) -> ir.Value:
        return self.op("Shape", value, dtype=_INT64)

    def dim(self, value: ir.Value, k: int) -> ir.Value:
        """Dimension ``k`` of ``value`` as an int64 scalar (a constant when static)."""
        if value.shape is not None and isinstance(value.shape[k], int):
            return self.const(value.shape[k])
        return self.op("Gather", self.shape(value), self.const(k), dtype=_INT64)

    def dims(self, value: ir.Value, start: int, stop: int) -> ir.Value:
        """Dimensions ``start:stop`` of ``value`` as a 1-D int64 tensor."""
        if value.shape is not None and all(isinstance(d, int) for d in value.shape[start:stop]):
            return self.const(list(value.shape[start:stop]))
        return self.op(
            "Slice", self.shape(value), self.const([start]), self.const([stop]), dtype=_INT64
        )

    def reshape_like(self, value: ir.Value, like: ir.Value, opset: int) -> ir.Value:
        """``value`` (as many elements as ``like``) reshaped to ``like``'s shape, right when that
        shape holds a 0: Reshape reads a 0 in its shape input as "copy the input's dimension" unless
        ``allowzero=1`` (opset >= 14), so ``Reshape(rows [0, 1], Shape(data [4, 0]))`` fails. Static
        shapes go as a constant (the caller handles a static 0 itself: an empty ``like``); dynamic
        ones with ``allowzero=1`` from opset 14, below it through a Reshape with the first 0 written
        as -1 and every other dimension as 1 when ``like`` is empty, then an Expand to its shape
        (without ``computed_expands``: :meth:`_reshape_through_equal_dims`)."""
        dims = like.shape
        if dims is not None and all(isinstance(d, int) for d in dims) and 0 not in dims:
            return self.op("Reshape", value, self.const(list(dims)), dtype=like.dtype)
        return self.reshape_to(value, self.shape(like), opset, like.dtype)

    def reshape_to(self, value: ir.Value, shape: ir.Value, opset: int,
                   dtype: ir.DataType | None) -> ir.Value:
        """``value`` reshaped to ``shape`` (a 1-D int64 value of known length, no -1; as many
        elements as ``value``), right when it holds a 0, as :meth:`reshape_like` says."""
        if opset >= 14:
            return self.op("Reshape", value, shape, dtype=dtype, allowzero=1)
        if not self.computed_expands:
            return self._reshape_through_equal_dims(value, shape, dtype)
        zero = self.cast(
            self.op("Equal", shape, self.const(0)), _INT64, ir.DataType.BOOL
        )  # 1 where the dim is 0
        first = self.op(
            "Mul",
            zero,
            self.cast(
                self.op(
                    "Equal", self.op("CumSum", zero, self.const(0), dtype=_INT64), self.const(1)
                ),
                _INT64,
                ir.DataType.BOOL,
            ),
            dtype=_INT64,
        )
        empty = self.op("ReduceMax", zero, keepdims=0, dtype=_INT64)  # 1 when no element
        placeholder = self.op(
            "Sub", self.const(1), self.op("Mul", first, self.const(2), dtype=_INT64), dtype=_INT64
        )
        delta = self.op("Mul", empty, self.op("Sub", placeholder, shape, dtype=_INT64),
                        dtype=_INT64)
        target = self.op(
            "Add", shape, delta, dtype=_INT64
        )  # the shape, or the placeholder when empty
        return self.op("Expand", self.op("Reshape", value, target, dtype=dtype), shape,
                       dtype=dtype)

    def _reshape_through_equal_dims(self, value: ir.Value, shape: ir.Value,
                                    dtype: ir.DataType | None) -> ir.Value:
        """:meth:`reshape_to` below opset 14 with no Expand to ``shape`` itself: ``value``'s T
        elements as a vector, expanded to ``[m, ..., m]`` (as long as ``shape``; m = 1, or 0 when
        T = 0) then reshaped to ``shape``. Not empty, that is ``[1, ..., 1, T]``; empty, every
        dimension is 0, so each 0 of ``shape`` copies a 0. A shape whose entries are equal reads
        the same in any order of its dimensions."""
        size = self.op("Size", value, dtype=_INT64)
        some = self.cast(self.op("Greater", size, self.const(0)), _INT64, ir.DataType.BOOL)
        equal = self.op("Add", self.op("Mul", shape, self.const(0), dtype=_INT64), some,
                        dtype=_INT64)  # [m, ..., m]
        spread = self.op("Expand", self.op("Reshape", value, self.const([-1]), dtype=dtype),
                         equal, dtype=dtype)
        return self.op("Reshape", spread, shape, dtype=dtype)

    def cast(self, value: ir.Value, to: ir.DataType, frm: ir.DataType | None) -> ir.Value:
        if frm == to:
            return value
        return self.op("Cast", value, to=to.value, dtype=to)

    def select(
        self, cond: ir.Value, a: ir.Value, b: ir.Value, dtype: ir.DataType, exact: bool = False
    ) -> ir.Value:
        """``cond ? a : b``; arithmetic for uint64, which onnxruntime's Where lacks.

        onnxruntime 1.32's CPU Where returns +0.0 where it selects a -0.0 from its X input (Y is
        copied exactly; measured for float and double). ``exact=True`` makes the result right on
        such a runtime and on an exact one: with h = 1 - 2 * mask (mask: ``cond`` picks a -0.0),
        the picked p becomes (p + h * -0.0) * h. Where the mask holds, p is +-0.0 and
        (p + 0.0) * -1 = -0.0; elsewhere (p + -0.0) * 1 = p, exact for every p (x + -0.0 == x bit
        for bit). Arithmetic, not more Where: onnxruntime's Where costs ~12 ns per element, its
        Mul/Add ~1 ns."""
        if dtype != ir.DataType.UINT64:
            picked = self.op("Where", cond, a, b, dtype=dtype)
            if not exact or dtype not in FLOAT_TYPES:
                return picked
            np_dtype = (
                np.float32 if dtype in (ir.DataType.FLOAT, ir.DataType.BFLOAT16) else dtype.numpy()
            )
            zero = self.const(0, np_dtype)
            mask = self.op(
                "And",
                cond,
                self.op(
                    "And",
                    self.op("Equal", a, zero),
                    self.op("Less", self.op("Reciprocal", a, dtype=dtype), zero),
                ),
            )
            h = self.op(
                "Sub",
                self.const(1, np_dtype),
                self.op(
                    "Mul",
                    self.cast(mask, dtype, ir.DataType.BOOL),
                    self.const(2, np_dtype),
                    dtype=dtype,
                ),
                dtype=dtype,
            )
            g = self.op("Mul", h, self.const(-0.0, np_dtype), dtype=dtype)
            return self.op("Mul", self.op("Add", picked, g, dtype=dtype), h, dtype=dtype)
        c = self.cast(cond, dtype, ir.DataType.BOOL)
        return self.op("Add", b, self.op("Mul", self.op("Sub", a, b), c), dtype=dtype)
