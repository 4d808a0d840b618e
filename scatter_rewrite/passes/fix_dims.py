"""Give named symbolic dimensions fixed sizes (``tensorrt --fix-dim E=200000``).

TensorRT 8.6 runs a reducing scatter only as the sorting network of :mod:`.lowering.network_reduce`,
which is built for a static number of updates; a model exported with a dynamic edge or batch
count gets it once that dimension is fixed. Like onnxruntime's ``make_dynamic_shape_fixed``, this
replaces the symbolic dimension ``NAME`` by ``SIZE`` wherever a value's shape declares it: the
main graph's inputs and outputs, and every value of every graph, subgraph and function. The model
then accepts inputs of that size only. Validation feeds both models inputs of that size
(:attr:`FixDimsPass.dim_sizes`).

Exporters often compute shapes at run time (TorchScript: ``Shape -> Gather -> Concat -> Expand``),
which ONNX shape inference does not follow. So shapes are then inferred again, and the small
integer computations that now read only static shapes are folded into constants (the fold pass's
:class:`~.fold.ConstantChains`), round after round until nothing changes: the shapes downstream of
a fixed dimension become static where they can.
"""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.errors import OptionError
from scatter_rewrite.errors import ScatterRewriteError
from scatter_rewrite.said import param, said
from scatter_rewrite.graph import function_calls, is_default_domain, iter_nodes, iter_scopes
from scatter_rewrite.passes.base import ScatterPass
from scatter_rewrite.passes.fold import CHAIN_OPS, SHAPE_OPS, CannotEvaluate, ConstantChains
from scatter_rewrite.type_inference import inferred_tensor_types, shape_of

__all__ = ["data_sized_source", "dim_name", "dims_reaching", "dims_that_fix", "FixDimsPass",
           "settle_shapes"]

_MAX_ROUNDS = 16  # each round may make the next Shape static; real exports settle in 2-3
_MAX_FOLDED_ELEMENTS = 4096  # shape arithmetic is small: nothing bigger (no weight) is folded here


class FixDimsPass(ScatterPass):
    name = "fix-dims"

    def __init__(self, dim_sizes: dict[str, int]):
        super().__init__()
        for name, size in dim_sizes.items():
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise OptionError(said(param("dim_sizes", equals=False),
                                       f": {name}={size} is not a positive integer"),
                                  parameter="dim_sizes")
        self.dim_sizes = dict(dim_sizes)

    def run(self, model: ir.Model) -> None:
        declared = _input_dim_names(model)
        unknown = sorted(set(self.dim_sizes) - declared)
        if unknown:
            known = ", ".join(sorted(declared)) or "none: every input dimension is fixed or unnamed"
            raise OptionError(
                said(param("dim_sizes", equals=False), ": no model input has a dimension named "
                     f"{', '.join(map(repr, unknown))}; the named input dimensions are: {known}"),
                parameter="dim_sizes",
            )
        changed = 0
        for value in _all_values(model):
            shape = value.shape
            if shape is None or not any(dim_name(d) in self.dim_sizes for d in shape):
                continue
            value.shape = ir.Shape(
                [self.dim_sizes.get(dim_name(d), d) if dim_name(d) else d for d in shape]
            )
            changed += 1
        for name, size in sorted(self.dim_sizes.items()):
            self.note(f"dimension {name!r} fixed to {size}", modified=True)
        folded = settle_shapes(model)
        self.note(f"{changed} value shape(s) now static in the fixed dimension(s); {folded} shape "
                  "computation(s) folded to constants")


def settle_shapes(model: ir.Model) -> int:
    """Infer shapes again and fold the shape computations that became constant, until nothing
    changes; returns how many values were folded."""
    folded = 0
    for _ in range(_MAX_ROUNDS):
        _infer_again(model)
        chains, round_folded = ConstantChains(), 0
        for node, scope in iter_nodes(model):
            if node.graph is None or scope.is_function or _is_constant_chain_node(node, chains):
                continue  # a chain node is folded as part of what its consumer reads
            for i, value in enumerate(node.inputs):
                if value is not None and _fold_input(
                    value, scope, chains, _is_shape_operand(node, i)
                ):
                    round_folded += 1
        folded += round_folded
        if not round_folded:
            break
    return folded


def _is_constant_chain_node(node: ir.Node, chains: ConstantChains) -> bool:
    return (is_default_domain(node) and node.op_type in CHAIN_OPS
            and all(chains.why_not(v) is None for v in node.outputs))


def _is_shape_operand(node: ir.Node, i: int) -> bool:
    """Whether input ``i`` of ``node`` gives a shape, axes or bounds (read before run time by shape
    inference and by TensorRT), not data."""
    if not is_default_domain(node):
        return False
    return (
        i in _SHAPE_OPERANDS.get(node.op_type, ())
        or (node.op_type == "Slice" and i >= 1)
        or node.op_type == "Range"
    )


# Inputs giving a shape, repeats, pads, axes or a length (Slice's starts/ends/axes/steps and
# Range's inputs too).
_SHAPE_OPERANDS = {
    "Expand": (1,),
    "Reshape": (1,),
    "ConstantOfShape": (0,),
    "Tile": (1,),
    "Pad": (1, 3),
    "Unsqueeze": (1,),
    "Squeeze": (1,),
    "TopK": (1,),  # (K: the output's length; TensorRT and QNN take it constant only)
}


def _fold_input(
    value: ir.Value, scope, chains: ConstantChains, shape_operand: bool = False
) -> bool:
    """Replace ``value``, read by a node that is not constant, by an initializer when it is small
    integer shape arithmetic that has become constant; whether it was. Shape arithmetic is what
    reads a Shape, or anything small given as a shape operand (``shape_operand``: TorchScript writes
    ``expand(-1, F)``'s shape as ``Where(Equal(...), ConstantOfShape, Constant)``, reading none)."""
    producer = value.producer()
    if (producer is None or producer.op_type == "Constant" or not is_default_domain(producer)
            or value.is_graph_output() or chains.why_not(value) is not None
            or not (shape_operand or _reads_a_shape(value))):
        return False
    try:
        array = chains.evaluate(value, scope.opset)
    except CannotEvaluate:
        return False
    if array.dtype.kind not in "iub" or array.size > _MAX_FOLDED_ELEMENTS:
        return False
    constant = ir.Value(name=value.name, type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
                        shape=ir.Shape(array.shape), const_value=ir.Tensor(array))
    value.name = None  # the initializer takes its name
    ir.convenience.replace_all_uses_with(value, constant)
    scope.body.register_initializer(constant)
    chains.prune([value])
    return True


def _reads_a_shape(value: ir.Value, seen: set[int] | None = None) -> bool:
    """Whether a Shape/Size node is among the producers of ``value`` (shape arithmetic, not
    weights)."""
    seen = set() if seen is None else seen
    producer = value.producer()
    if producer is None or id(producer) in seen:
        return False
    seen.add(id(producer))
    return producer.op_type in SHAPE_OPS or any(
        _reads_a_shape(v, seen) for v in producer.inputs if v is not None
    )


def _infer_again(model: ir.Model) -> None:
    """ONNX shape inference from the graph inputs' shapes as they now are. The shapes it infers
    replace those recorded on node outputs (which may hold the dims it could not follow before);
    a value it cannot infer keeps its recorded shape, and an untyped one takes its inferred tensor
    type. (Not onnx_ir's ShapeInferencePass: it serializes the weights too, and it gives a sequence
    the type of a tensor of its elements, which inference then rejects.)"""
    recorded = {}
    for node, scope in iter_nodes(model):
        if scope.is_function or not is_default_domain(node):
            continue
        for value in node.outputs:
            recorded[value] = value.shape
            value.shape = None
    inferred = inferred_tensor_types(model, data_prop=True) or {}
    for value, shape in recorded.items():
        found = inferred.get(value)
        if found is not None and value.type is None and found.elem_type:
            value.type = ir.TensorType(ir.DataType(found.elem_type))
        inferred_shape = shape_of(found) if found is not None else None
        value.shape = shape if inferred_shape is None else inferred_shape  # (a scalar's is ())


def dim_name(dim) -> str | None:
    """A symbolic dimension's name (None: a static or unnamed dimension)."""
    return dim.value if isinstance(dim, ir.SymbolicDim) and dim.value else None


def _input_dim_names(model: ir.Model) -> set[str]:
    return {dim_name(d) for v in model.graph.inputs if v.shape is not None for d in v.shape} - {
        None
    }


def _all_values(model: ir.Model):
    """Each value once: scope inputs and outputs, and every node output (subgraphs, functions)."""
    seen: set[int] = set()
    for scope in iter_scopes(model):
        body = scope.body
        for value in [*body.inputs, *body.outputs, *(o for node in body for o in node.outputs)]:
            if id(value) not in seen:
                seen.add(id(value))
                yield value


# Ops whose output size is a count of the values they read, not of their input shapes.
DATA_SIZED_OPS = ("NonZero", "Unique", "Compress", "NonMaxSuppression")


def _ancestors(model: ir.Model, values):
    """The values ``values`` are computed from, each once, followed out of a function through the
    inputs of its call sites, with the nodes that compute them."""
    formal = {id(v): (key, i) for key, function in model.functions.items()
              for i, v in enumerate(function.inputs)}
    calls = None
    seen, stack = set(), [v for v in values if v is not None]
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        yield value
        if value.producer() is not None:
            stack += [v for v in value.producer().inputs if v is not None]
        elif id(value) in formal:
            calls = function_calls(model) if calls is None else calls
            key, i = formal[id(value)]
            stack += [c.inputs[i] for c in calls.get(key, [])
                      if i < len(c.inputs) and c.inputs[i] is not None]


def dims_reaching(model: ir.Model, values) -> list[str]:
    """The named dimensions of the main-graph inputs ``values`` are computed from."""
    inputs = {id(v) for v in model.graph.inputs}
    return sorted({dim_name(d) for v in _ancestors(model, values) if id(v) in inputs
                   for d in v.shape or ()} - {None})


def data_sized_source(model: ir.Model, values) -> ir.Node | None:
    """A node among those ``values`` are computed from whose output size counts the values it
    reads (NonZero's): no fixed input dimension makes what follows it static."""
    for value in _ancestors(model, values):
        node = value.producer()
        if node is not None and is_default_domain(node) and node.op_type in DATA_SIZED_OPS:
            return node
    return None


def dims_that_fix(model: ir.Model, node: ir.Node, fixed) -> list[str]:
    """The named model-input dimensions that ``node``'s indices and updates come from, when fixing
    them makes ``fixed(node)`` hold (tried on a weightless copy of the model); [] otherwise."""
    values = node.inputs[1:3]
    names = dims_reaching(model, values)
    if not names or data_sized_source(model, values) is not None:
        return []
    from scatter_rewrite.type_inference import annotate_functions_with, weightless_copy

    node.metadata_props[_MARK] = "1"  # (how the node is found in the copy, named or not)
    try:
        copy = weightless_copy(model)
    finally:
        del node.metadata_props[_MARK]
    try:
        FixDimsPass({name: 2 for name in names})(copy)
    except ScatterRewriteError:
        return []
    marked = lambda n: _MARK in n.metadata_props  # noqa: E731
    annotate_functions_with(copy, marked)  # (a function's types, from its now static call sites)
    twin = next((n for n, _ in iter_nodes(copy) if marked(n)), None)
    return names if twin is not None and fixed(twin) else []


_MARK = "scatter_rewrite.fix_dims.node"
