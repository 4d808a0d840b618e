"""The memory a list of new nodes needs: each value's static shape inferred from the nodes
themselves, then the most bytes held at once when onnxruntime's sequential executor (the CPU
provider, one thread) runs them.

:func:`static_shapes` propagates shapes (and the values of small int64 tensors: the shape
arithmetic that feeds Range, Reshape, Expand, Slice and TopK's K) through the ops the scatter-free
forms write, from the shapes of the values the nodes read. An op it does not know, or a dimension
that is not static, leaves the outputs unknown, and :func:`peak_live_bytes` then says None.

:func:`peak_live_bytes` is the largest sum, over the steps of :func:`run_order` (onnxruntime's
default order, which is not the order the nodes were built in), of the values alive during the
step plus the running kernel's scratch: a value lives from the node that produces it to the last
node that reads it (an output of the nodes to the end), as onnxruntime's allocation planner frees
a buffer after its last reader. Reshape, Flatten, Squeeze, Unsqueeze and Identity are views of
their input (onnxruntime aliases them): they cost nothing and keep the input's buffer alive as
long as they are read. Constants count for the whole run (onnxruntime holds them as
initializers). Values the nodes only read (the scatter's inputs) are not counted: the model holds
them with or without the rewrite. Left out: the allocator's rounding and the memory it keeps after
a buffer is freed (the arena's chunks, glibc's heap), measured against onnxruntime in
benchmarks/bench_no_scatter.py; a runtime that reuses an input's buffer for an elementwise
output needs less.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx_ir as ir

__all__ = ["itemsize", "Peak", "peak_live_bytes", "run_order", "static_shapes"]

# int64 tensors up to this many elements have their values followed (shape arithmetic)
_TRACKED = 64
_VIEWS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}
_BOOL_OUT = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or",
             "Xor", "IsNaN", "IsInf"}
_SAME_SHAPE = {"Not", "IsNaN", "IsInf", "Cast", "Neg", "Abs", "Sign", "CumSum", "Identity"}
_BROADCAST = {"Add", "Sub", "Mul", "Div", "Mod", "Pow", "Equal", "Less", "Greater",
              "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Max", "Min", "Where"}
_NUMPY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Max": np.maximum,
          "Min": np.minimum, "Equal": np.equal, "Less": np.less, "Greater": np.greater,
          "Not": np.logical_not, "And": np.logical_and, "Or": np.logical_or}
# bytes of one element: a string tensor holds one std::string (libstdc++) per element
_STRING_BYTES = 32

Shape = tuple[int, ...]


@dataclasses.dataclass
class _Known:
    shape: Shape
    dtype: ir.DataType | None
    value: np.ndarray | None = None  # small int64/bool tensors only


@dataclasses.dataclass(frozen=True)
class Peak:
    """The most bytes alive at once, at which node, and the values alive there (largest first)."""

    bytes: int
    node: ir.Node | None
    alive: tuple[tuple[ir.Value, int], ...]


def _static(shape) -> Shape | None:
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(int(d) for d in shape)


def _small(array: np.ndarray | None) -> np.ndarray | None:
    if array is None or array.size > _TRACKED or array.dtype.kind not in "iub":
        return None
    return array


def _external(value: ir.Value, shapes: dict) -> _Known | None:
    shape = shapes.get(value, _static(value.shape))
    tensor = value.const_value
    array = None
    if tensor is not None:
        array = _small(tensor.numpy()) if tensor.size <= _TRACKED else None
        shape = tuple(tensor.shape.dims) if shape is None else shape
    return None if shape is None else _Known(tuple(shape), value.dtype, array)


def static_shapes(nodes: list[ir.Node], shapes: dict | None = None) -> dict[ir.Value, _Known]:
    """Every value ``nodes`` produce or read with a static shape: value -> (shape, dtype, small
    value). ``shapes`` overrides the shape of a value the nodes read (a symbolic dimension given a
    size to compare forms)."""
    shapes = shapes or {}
    known: dict[ir.Value, _Known] = {}
    produced = {v for n in nodes for v in n.outputs}
    for node in nodes:
        for value in node.inputs:
            if value is not None and value not in produced and value not in known:
                if (found := _external(value, shapes)) is not None:
                    known[value] = found
        inputs = [None if v is None else known.get(v) for v in node.inputs]
        if any(v is not None and v not in known for v in node.inputs):
            continue  # (an input of unknown shape: so are the outputs)
        try:
            outs = _infer(node, inputs)
        except (ValueError, IndexError, TypeError, KeyError, OverflowError):
            # (shapes that do not fit the op, or sizes past int64 from several symbolic dims
            # each estimated large: left unknown)
            outs = None
        for value, out in zip(node.outputs, outs or ()):
            if out is not None:
                if value.dtype is not None:
                    out.dtype = value.dtype
                known[value] = out
    return known


def _attr(node: ir.Node, name: str, default=None):
    found = node.attributes.get(name)
    return default if found is None else found.value


def _value(known: _Known | None) -> np.ndarray | None:
    return None if known is None else known.value


def _infer(node: ir.Node, ins: list[_Known | None]) -> list[_Known | None] | None:
    op = node.op_type
    if op == "Constant":
        tensor = _attr(node, "value")
        array = tensor.numpy() if tensor is not None else None
        return None if array is None else [_Known(array.shape, tensor.dtype, _small(array))]
    if op == "Shape":
        shape = np.array(ins[0].shape, np.int64)[_attr(node, "start", 0):_attr(node, "end")]
        return [_Known(shape.shape, ir.DataType.INT64, shape)]
    if op == "Size":
        return [_Known((), ir.DataType.INT64, np.array(math.prod(ins[0].shape), np.int64))]
    if op in _BROADCAST:
        return [_broadcast(op, ins)]
    if op in _SAME_SHAPE:
        dtype = (ir.DataType(_attr(node, "to")) if op == "Cast"
                 else ir.DataType.BOOL if op in _BOOL_OUT else ins[0].dtype)
        value = ins[0].value
        if value is not None and op in _NUMPY:
            value = _NUMPY[op](value)
        if value is not None and op == "Cast":
            value = value.astype(dtype.numpy()) if dtype != ir.DataType.STRING else None
        return [_Known(ins[0].shape, dtype, _small(value) if op != "CumSum" else None)]
    if op in _SHAPERS:
        return _SHAPERS[op](node, ins)
    return None


def _broadcast(op: str, ins: list[_Known | None]) -> _Known | None:
    if any(k is None for k in ins):
        return None
    shape = tuple(np.broadcast_shapes(*(k.shape for k in ins)))
    dtype = (ir.DataType.BOOL if op in _BOOL_OUT else ins[1].dtype if op == "Where"
             else ins[0].dtype)
    values = [k.value for k in ins]
    value = None
    if all(v is not None for v in values):
        value = np.where(*values) if op == "Where" else _NUMPY[op](*values) if op in _NUMPY \
            else None
    return _Known(shape, dtype, _small(value))


def _axes(node: ir.Node, ins, position: int) -> list[int] | None:
    axes = _attr(node, "axes")
    if axes is None and len(ins) > position and ins[position] is not None:
        axes = None if ins[position].value is None else ins[position].value.reshape(-1).tolist()
    return None if axes is None else [int(a) for a in axes]


def _reshape(node, ins):
    target = _value(ins[1])
    if target is None:
        return None
    dims = [int(d) for d in target.reshape(-1)]
    if not _attr(node, "allowzero", 0):
        dims = [ins[0].shape[i] if d == 0 else d for i, d in enumerate(dims)]
    if -1 in dims:
        rest = math.prod(d for d in dims if d != -1)
        dims[dims.index(-1)] = math.prod(ins[0].shape) // rest if rest else 0
    value = None if ins[0].value is None else ins[0].value.reshape(dims)
    return [_Known(tuple(dims), ins[0].dtype, value)]


def _flatten(node, ins):
    axis = _attr(node, "axis", 1) % (len(ins[0].shape) + 1) if ins[0].shape else 0
    shape = (math.prod(ins[0].shape[:axis]), math.prod(ins[0].shape[axis:]))
    return [_Known(shape, ins[0].dtype)]


def _unsqueeze(node, ins):
    axes = _axes(node, ins, 1)
    if axes is None:
        return None
    rank = len(ins[0].shape) + len(axes)
    dims = list(ins[0].shape)
    for axis in sorted(a % rank for a in axes):
        dims.insert(axis, 1)
    value = None if ins[0].value is None else ins[0].value.reshape(dims)
    return [_Known(tuple(dims), ins[0].dtype, value)]


def _squeeze(node, ins):
    axes = _axes(node, ins, 1)
    rank = len(ins[0].shape)
    dropped = ({a % rank for a in axes} if axes is not None
               else {i for i, d in enumerate(ins[0].shape) if d == 1})
    dims = tuple(d for i, d in enumerate(ins[0].shape) if i not in dropped)
    value = None if ins[0].value is None else ins[0].value.reshape(dims)
    return [_Known(dims, ins[0].dtype, value)]


def _concat(node, ins):
    if any(k is None for k in ins):
        return None
    axis = _attr(node, "axis") % len(ins[0].shape)
    dims = list(ins[0].shape)
    dims[axis] = sum(k.shape[axis] for k in ins)
    values = [k.value for k in ins]
    value = None if any(v is None for v in values) else np.concatenate(values, axis)
    return [_Known(tuple(dims), ins[0].dtype, _small(value))]


def _range(node, ins):
    start, limit, delta = (_value(k) for k in ins)
    if start is None or limit is None or delta is None:
        return None
    count = max(math.ceil((limit.item() - start.item()) / delta.item()), 0)
    value = np.arange(start.item(), limit.item(), delta.item()) if count <= _TRACKED else None
    return [_Known((count,), ins[0].dtype, value)]


def _expand(node, ins):
    target = _value(ins[1])
    if target is None:
        return None
    shape = tuple(np.broadcast_shapes(ins[0].shape, tuple(int(d) for d in target.reshape(-1))))
    return [_Known(shape, ins[0].dtype)]


def _tile(node, ins):
    repeats = _value(ins[1])
    if repeats is None:
        return None
    shape = tuple(d * int(r) for d, r in zip(ins[0].shape, repeats.reshape(-1)))
    return [_Known(shape, ins[0].dtype)]


def _gather(node, ins):
    if ins[1] is None:
        return None
    axis = _attr(node, "axis", 0) % len(ins[0].shape)
    shape = ins[0].shape[:axis] + ins[1].shape + ins[0].shape[axis + 1:]
    value = None
    if ins[0].value is not None and ins[1].value is not None:
        value = np.take(ins[0].value, ins[1].value, axis=axis)
    return [_Known(shape, ins[0].dtype, _small(value))]


def _gather_elements(node, ins):
    return None if ins[1] is None else [_Known(ins[1].shape, ins[0].dtype)]


def _slice(node, ins):
    starts, ends = _value(ins[1]), _value(ins[2])
    axes = _value(ins[3]) if len(ins) > 3 and ins[3] is not None else None
    steps = _value(ins[4]) if len(ins) > 4 and ins[4] is not None else None
    if starts is None or ends is None or (len(ins) > 3 and ins[3] is not None and axes is None):
        return None
    rank = len(ins[0].shape)
    axes = range(len(starts)) if axes is None else [int(a) % rank for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    picks = [slice(None)] * rank
    dims = list(ins[0].shape)
    for axis, start, end, step in zip(axes, starts, ends, steps):
        picks[axis] = slice(int(start), int(end), int(step))
        dims[axis] = len(range(*picks[axis].indices(dims[axis])))
    value = None if ins[0].value is None else ins[0].value[tuple(picks)]
    return [_Known(tuple(dims), ins[0].dtype, value)]


def _topk(node, ins):
    k = _value(ins[1])
    if k is None:
        return None
    dims = list(ins[0].shape)
    dims[_attr(node, "axis", -1) % len(dims)] = int(k.reshape(-1)[0])
    return [_Known(tuple(dims), ins[0].dtype), _Known(tuple(dims), ir.DataType.INT64)]


def _reduce(node, ins):
    axes = _axes(node, ins, 1)
    rank = len(ins[0].shape)
    if axes is None and len(ins) > 1 and ins[1] is not None:
        return None
    axes = set(range(rank)) if not axes else {a % rank for a in axes}
    keep = _attr(node, "keepdims", 1)
    dims = tuple((1 if i in axes else d) for i, d in enumerate(ins[0].shape)
                 if keep or i not in axes)
    value = None
    if node.op_type == "ReduceProd" and ins[0].value is not None:  # a shape's product: the rows'
        value = _small(np.prod(ins[0].value, axis=tuple(axes), dtype=np.int64).reshape(dims))
    return [_Known(dims, ins[0].dtype, value)]


_SHAPERS = {"Reshape": _reshape, "Flatten": _flatten, "Unsqueeze": _unsqueeze,
            "Squeeze": _squeeze, "Concat": _concat, "Range": _range, "Expand": _expand,
            "Tile": _tile,
            "Gather": _gather, "GatherElements": _gather_elements, "Slice": _slice,
            "TopK": _topk, "ReduceSum": _reduce, "ReduceProd": _reduce, "ReduceMax": _reduce,
            "ReduceMin": _reduce}


def itemsize(dtype: ir.DataType | None) -> int | None:
    if dtype is None:
        return None
    return _STRING_BYTES if dtype == ir.DataType.STRING else max(1, int(dtype.itemsize))


def run_order(nodes: list[ir.Node]) -> list[ir.Node]:
    """``nodes`` in the order onnxruntime's sequential executor runs them (its default order,
    GraphViewer's: a depth-first walk back from the nodes nothing reads, each node's inputs
    explored from the last-built producer down, each node emitted once all its inputs are).
    Constant nodes are left out: onnxruntime makes them initializers when it loads the model.
    The order matters: a walk that reaches an independent chain first keeps its values alive
    until their readers run (the float max/min scan's flags, before the positions chain)."""
    index = {node: i for i, node in enumerate(nodes)}
    producer = {v: node for node in nodes for v in node.outputs}
    read = {producer[v] for node in nodes for v in node.inputs if v in producer}
    stack = [(node, False) for node in nodes if node not in read]
    seen: set[ir.Node] = set()
    order = []
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        inputs = {producer[v] for v in node.inputs if v in producer}
        stack.extend((p, False) for p in sorted(inputs, key=index.get) if p not in seen)
    return [node for node in order if node.op_type != "Constant"]


def _scratch(node: ir.Node, known: dict) -> int:
    """Bytes a kernel allocates for itself while it runs (onnxruntime 1.32's CPU kernels, read
    from its source and measured): Where selects X and Y into two temporaries shaped as the
    condition broadcast with each (where_op.cc), then merges them into the output; TopK keeps
    one int64 index per input element."""
    if node.op_type == "Where" and node.outputs[0] in known:
        cond, *sides = (known.get(v) for v in node.inputs)
        each = itemsize(known[node.outputs[0]].dtype) or 0
        if cond is None or None in sides:
            return 0
        return sum(math.prod(np.broadcast_shapes(cond.shape, side.shape)) * each
                   for side in sides)
    if node.op_type == "TopK" and node.inputs[0] in known:
        return math.prod(known[node.inputs[0]].shape) * 8
    return 0


def peak_live_bytes(nodes: list[ir.Node], outputs: list[ir.Value],
                    shapes: dict | None = None) -> Peak | None:
    """The most bytes the values ``nodes`` produce hold at once, with the running kernel's
    scratch, when onnxruntime runs them (:func:`run_order`), ``outputs`` kept to the end (see the
    module docstring); None when a produced value's shape or type is not static."""
    known = static_shapes(nodes, shapes)
    size: dict[ir.Value, int] = {}
    owner: dict[ir.Value, ir.Value] = {}  # a view -> the value whose buffer it is
    for node in nodes:
        for value in node.outputs:
            if node.op_type in _VIEWS and node.inputs and node.inputs[0] is not None:
                owner[value] = owner.get(node.inputs[0], node.inputs[0])
                continue
            found = known.get(value)
            bytes_each = itemsize(_dtype(value, found))
            if found is None or bytes_each is None:
                return None
            size[value] = math.prod(found.shape) * bytes_each
    constants = sum(size[v] for n in nodes if n.op_type == "Constant" for v in n.outputs)
    order = run_order(nodes)
    last = {v: i for i, n in enumerate(order) for v in n.outputs if v in size}
    for i, node in enumerate(order):
        for value in node.inputs:
            root = owner.get(value, value)
            if root in last:
                last[root] = i
    for value in outputs:
        if (root := owner.get(value, value)) in last:
            last[root] = len(order)
    alive: dict[ir.Value, int] = {}
    best = Peak(constants, None, ())
    for i, node in enumerate(order):
        alive.update((v, size[v]) for v in node.outputs if v in size)
        total = constants + sum(alive.values()) + _scratch(node, known)
        if total > best.bytes:
            best = Peak(total, node, tuple(sorted(alive.items(), key=lambda a: -a[1])))
        for value in [v for v in alive if last[v] <= i]:
            del alive[value]
    return best


def _dtype(value: ir.Value, found: _Known | None) -> ir.DataType | None:
    if value.dtype is not None:
        return value.dtype
    return None if found is None else found.dtype
