"""Exact standard-op lowerings of reducing scatters and of TensorScatter (used by the lower pass).

Public entry points (the ``tensorrt`` pass reuses them):

* :func:`reduction_blocker` ``(node, opset) -> str | None``: why a ScatterElements/ScatterND
  with ``reduction`` add/mul/max/min cannot be lowered (None: it can).
* :func:`lower_reduction` ``(node, opset, names=None) -> (nodes, output)``: standard ONNX nodes,
  every one valid at ``opset`` (11..17), computing exactly what ``node`` computes; ``output``
  replaces ``node.outputs[0]`` (splice with ``ir.convenience.replace_nodes_and_values``). The
  nodes hold ``If``/``Loop`` subgraphs: build them after any opset conversion of the scope (the
  converter would otherwise re-convert them). It reads the inputs' dtype and shape from the IR
  values: run ONNX shape inference first (LowerPass does, see ``_borrow_inferred_types``).
* TensorScatter (opset 24) as one ``ScatterElements``: :mod:`.lowering.tensor_scatter`.
* Shared with the TensorRT-safe lowering (:mod:`.lowering.network_reduce`): :func:`update_rows` and
  :func:`row_counts` (step 1 below), :class:`Kind` (how a reduction combines two values, exactly,
  and its identity element), :class:`Builder` (with its exact ``select``).

How a reduction is lowered (cost ~ sorting the updates + touching the data once; nothing of size
data x updates is ever built):

1. Every update gets a *key*: the linear index of the data row it lands in. A "row" is one
   element in general; it is a whole trailing slice when the indices are the same along every
   dimension after the axis (the GNN pattern ``Expand(Unsqueeze(dst))`` feeding ScatterElements
   on axis 0: only the E edge keys are sorted and rows of F features move together), and for
   ScatterND it is the slice ``data[i0..ik]``. Negative indices are normalized (``Where``/``Add``).
2. ``TopK(key * n + position, K=n, largest=0, sorted=1)`` sorts the keys with duplicates in
   update order, which max/min need for exact ties (-0.0/+0.0) and NaN placement; the sort keys
   are distinct, so the order does not rest on TopK's tie rule (ONNX's "the lower index first",
   which OpenVINO's TopK does not keep).
3. Segmented tree reduction in a ``Loop``: each round combines every element at an even rank of
   its key run with its successor (order kept: earlier op later) and drops the successor, so a
   run of length L needs ceil(log2 L) rounds and the total work is ~2n rows. Loop-carried values
   shrink from round to round (ONNX Loop allows it).
4. The one value per distinct key is combined with ``data`` gathered at those rows and written
   back with ``ScatterND`` (reduction none: the keys are unique, so it is well defined).

Exactness: integers (any width; 8/16-bit computed in int32 and cast back, which wraps like
onnxruntime's kernel), bool (add/max = Or, mul/min = And) and max/min are bit for bit. Float
add/mul sum in tree order instead of sequentially (float16/bfloat16 in float32, rounded once):
within :data:`scatter_rewrite.validate.FLOAT_TOLERANCE`.

max/min follow onnxruntime's CPU kernel, measured in onnxruntime 1.32: the accumulator is
replaced by the update unless the update is strictly less (max) / greater (min), i.e.
``acc = u < acc ? acc : u``. So a NaN update replaces the accumulator, a NaN accumulator is
replaced by the next update, and among equal values (-0.0/+0.0) the later one wins. That fold
is not associative when updates hold NaN; with a per-element "a NaN came after" flag it is
((v1,f1) . (v2,f2) = f2 or not v2<v1 ? v2 : v1, f1 or f2). The flagged reduction runs only when
the updates hold a NaN (an ``If`` on ``IsNaN(ReduceSum(updates))``, which may fire spuriously on
inf-inf but never misses a NaN); otherwise the plain one.

onnxruntime 1.32 CPU kernels lack ``Where`` for int16/uint16/uint64/bool and ``Add``/``Mul`` for
8/16-bit integers (checked by creating sessions, opset 11 and 13), hence the int32 compute type
and the arithmetic select for uint64 (``b + (a - b) * cond``, exact modulo 2^64).
"""

from __future__ import annotations

import re

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import (
    NamedNodeBuilder as Builder, Names, attr, constant_tensor, is_default_domain, reference_reason,
)
from scatter_rewrite.limits import REDUCTIONS, REDUCTIONS_SINCE

__all__ = [
    "body_input", "Builder", "compute_dtype", "first_opset_with", "index_tuple_length", "INT64",
    "is_empty", "Kind",
    "lower_reduction", "name_prefix", "Names", "reduction_blocker",
    "REDUCTIONS", "row_counts", "scatter_nd_rows", "SMALL_INTS", "static_rank", "SUPPORTED_DTYPES",
    "update_rows",
]

INT64 = ir.DataType.INT64
SMALL_INTS = {ir.DataType.INT8, ir.DataType.UINT8, ir.DataType.INT16, ir.DataType.UINT16}
_NATIVE = {ir.DataType.INT32, ir.DataType.UINT32, ir.DataType.INT64, ir.DataType.UINT64,
           ir.DataType.FLOAT, ir.DataType.DOUBLE}
_FLOATS = {ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.FLOAT, ir.DataType.DOUBLE}
SUPPORTED_DTYPES = SMALL_INTS | _NATIVE | _FLOATS | {ir.DataType.BOOL}


def first_opset_with(reduction: str) -> int:
    """The first opset whose ScatterElements/ScatterND has ``reduction``."""
    return REDUCTIONS_SINCE[reduction]


def compute_dtype(dtype: ir.DataType, reduction: str) -> ir.DataType:
    if dtype in SMALL_INTS:
        return ir.DataType.INT32
    if dtype == ir.DataType.BFLOAT16 or (
        dtype == ir.DataType.FLOAT16 and reduction in ("add", "mul")
    ):
        return ir.DataType.FLOAT
    return dtype


# --------------------------------------------------------------------------- naming and building


def const_value(value: ir.Value) -> np.ndarray | None:
    """The array of a value a :class:`Builder` made with ``const`` (None for any other value)."""
    producer = value.producer()
    if producer is None or producer.op_type != "Constant":
        return None
    return producer.attributes["value"].value.numpy()


def static_rank(*values: ir.Value | None) -> int | None:
    for v in values:
        if v is not None and v.shape is not None:
            return len(v.shape)
    return None


def _same_dims(a, b) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, int) and isinstance(y, int):
            if x != y:
                return False
        elif (
            isinstance(x, int)
            or isinstance(y, int)
            or x is None
            or y is None
            or x.value is None
            or x.value != y.value
        ):
            return False
    return True


def name_prefix(node: ir.Node) -> str:
    base = re.sub(r"[^A-Za-z0-9_]", "_", node.name or node.op_type.lower())
    return base[:40] or "scatter"


# --------------------------------------------------------------------------- keys


def _normalize(b: Builder, idx: ir.Value, size: ir.Value) -> ir.Value:
    """Negative index -> index + size (int64 in, int64 out). An index in [-2 size, -size - 1] is out
    of range (an error, the spec says, and onnxruntime's) but would come out a valid negative one
    and wrap in the final ScatterND: it becomes ``size`` instead, so the lowered graph fails on it
    too (the extra Less/Where run on the indices only: the GNN benchmark's lowered times stayed
    within run-to-run noise, 142.8 -> 136.7 ms for max, 63.9 -> 64.2 ms for add,
    benchmarks/RESULTS-lower.md)."""
    zero = b.const(0)
    shifted = b.op("Where", b.op("Less", idx, zero), b.op("Add", idx, size), idx, dtype=INT64)
    return b.op("Where", b.op("Less", shifted, zero), size, shifted, dtype=INT64)


def _horner(b: Builder, coords: list[ir.Value | None], sizes: list[ir.Value]) -> ir.Value:
    """sum_k coords[k] * prod(sizes[k+1:]) as ((c0 * s1 + c1) * s2 + c2)...; None = zero."""
    lin = None
    for k, c in enumerate(coords):
        if lin is not None:
            lin = b.op("Mul", lin, sizes[k], dtype=INT64)
        if c is not None:
            lin = c if lin is None else b.op("Add", lin, c, dtype=INT64)
    return lin if lin is not None else b.const(0)


def _row_broadcast_source(indices: ir.Value, rank: int, axis: int) -> ir.Value | None:
    """If ``indices = Expand(X, shape)`` with X constant along every dimension after ``axis``
    (X's dims there are statically 1), return X: the row keys, without materializing the Expand.

    Both PyTorch exporters write ``index.unsqueeze(-1).expand_as(src)`` and
    ``index.view(-1, 1).expand(-1, F)`` so: X is an ``Unsqueeze`` or a ``Reshape`` (its trailing 1
    is in its inferred shape), and only Expand's ``shape`` differs (a constant or ``Concat``, a
    ``Shape`` of the updates, TorchScript's ``Where(Equal(size, -1), ...)`` chain), which does not
    matter: Expand broadcasts X's 1s, whatever sizes it is given. TorchScript's rank-0 ``If``
    wrapper, once inlined, leaves ``Identity`` nodes between the Expand and the scatter: looked
    through."""
    producer = indices.producer()
    while (producer is not None and producer.op_type == "Identity" and producer.domain == ""
           and producer.inputs):
        indices = producer.inputs[0]
        producer = indices.producer() if indices is not None else None
    if (
        producer is None
        or producer.op_type != "Expand"
        or producer.domain != ""
        or axis >= rank - 1
    ):
        return None
    x = producer.inputs[0]
    if x is None or x.shape is None or len(x.shape) > rank:
        return None
    padded = [1] * (rank - len(x.shape)) + list(x.shape)
    if all(d == 1 for d in padded[axis + 1:]):
        return x
    return None


# --------------------------------------------------------------------------- blockers


def reduction_blocker(node: ir.Node, opset: int) -> str | None:
    """Why ``node`` (ScatterElements/ScatterND with a reduction) cannot be lowered, or None."""
    if opset < 11:
        return f"opset {opset} has no ScatterElements/ScatterND to write back with (need >= 11)"
    if len(node.inputs) != 3 or any(v is None for v in node.inputs):
        return "needs exactly 3 inputs (data, indices, updates)"
    if (why := reference_reason(node)) is not None:
        return why
    reduction = attr(node, "reduction", "none")
    if reduction not in REDUCTIONS:
        return f"reduction {reduction!r} is not one of add, mul, max, min"
    data, indices, updates = node.inputs
    dtype = data.dtype
    if dtype is None:
        return "the data type is unknown (run shape inference first)"
    if dtype not in SUPPORTED_DTYPES:
        return f"data type {dtype.name} has no exact standard-op reduction here"
    if dtype == ir.DataType.BFLOAT16 and opset < 13:
        return "bfloat16 needs opset >= 13 (Cast/ScatterND-13); pass opset=13"
    if node.op_type == "ScatterElements":
        if static_rank(data, indices, updates) is None:
            return "the rank of data/indices/updates is unknown"
    elif node.op_type == "ScatterND":
        k = index_tuple_length(indices)
        if k is None:
            return ("the last dimension of indices (index tuple length) is not static, nor built "
                    "by Concat/Unsqueeze of pieces of known length")
        if k < 1:
            return "an empty index tuple (indices.shape[-1] == 0) is not lowered"
        if indices.shape is None and (data.shape is None or len(data.shape) < k):
            return "the ranks of indices and data are unknown"
    else:
        return f"{node.op_type} is not a ScatterElements/ScatterND"
    return None


# --------------------------------------------------------------------------- lowering


def lower_reduction(
    node: ir.Node, opset: int, names: Names | None = None
) -> tuple[list[ir.Node], ir.Value]:
    """Standard nodes valid at ``opset`` computing ``node`` (see the module docstring).

    Call :func:`reduction_blocker` first; this assumes it returned None.
    """
    names = names or Names()
    names.prefix = name_prefix(node)
    b = Builder(names)
    data = node.inputs[0]
    if is_empty(data):
        return b.nodes, b.op("Identity", data, dtype=data.dtype)
    reduction = attr(node, "reduction", "none")
    rows, keys, vals = update_rows(b, node)
    out_rows = segment_reduce(b, rows, keys, vals, reduction, data.dtype)
    return b.nodes, b.reshape_like(out_rows, data, opset)


def is_empty(value: ir.Value) -> bool:
    """Whether ``value`` statically has no elements (some dimension is 0). A scatter into such data
    writes nothing (valid indices cannot address an element): its result is the data."""
    return value.shape is not None and any(d == 0 for d in value.shape if isinstance(d, int))


def _elements_layout(data, indices, updates, axis: int):
    """(rank, axis, GNN row-key source or None, last key dimension, the value whose shape the
    updates have) for a ScatterElements: keys cover dimensions 0..last, rows the rest."""
    rank = static_rank(data, indices, updates)
    axis = axis % rank
    source = _row_broadcast_source(indices, rank, axis)
    if source is not None and not (
        data.shape is not None and updates.shape is not None
        and _same_dims(list(data.shape)[axis + 1:], list(updates.shape)[axis + 1:])
    ):
        source = None  # rows only when each update row covers a whole data row
    shape_src = updates if updates.shape is not None else indices
    return rank, axis, source, (axis if source is not None else rank - 1), shape_src


def _static_product(value: ir.Value | None, start: int, stop: int | None) -> int | None:
    if value is None or value.shape is None:
        return None
    dims = list(value.shape)[start:stop]
    return int(np.prod(dims, dtype=np.int64)) if all(isinstance(d, int) for d in dims) else None


def row_counts(node: ir.Node) -> tuple[int | None, int | None, int | None]:
    """Static (number of update rows, number of data rows, row width) of a reducing scatter, each
    None when not static: the [n, w] updates and [R, w] data rows :func:`update_rows` builds.
    The update rows' leading dimensions are those of the indices and the updates alike: each is
    taken from whichever of the two states it. Call :func:`reduction_blocker` first."""
    data, indices, updates = node.inputs
    if node.op_type == "ScatterElements":
        rank, _, _, last, _ = _elements_layout(data, indices, updates, attr(node, "axis", 0))
        return (_leading_product(last + 1, (indices, updates), rank),
                _static_product(data, 0, last + 1), _static_product(data, last + 1, None))
    k = index_tuple_length(indices)  # (indices of unknown rank: the tuple's length derived)
    lead = len(indices.shape) - 1 if indices.shape is not None else (
        len(updates.shape) - (len(data.shape) - k)
        if updates.shape is not None and data.shape is not None else None)
    return (
        None if lead is None else _leading_product(lead, (indices, updates)),
        _static_product(data, 0, k),
        _static_product(data, k, None),
    )


def _leading_product(count: int, values: tuple[ir.Value, ...], rank: int | None = None
                     ) -> int | None:
    """The product of the first ``count`` dimensions that ``values`` share, each dimension static
    in one of them; None if one is static in none. ``rank``: only values of that rank count."""
    shapes = [list(v.shape) for v in values if v is not None and v.shape is not None
              and (rank is None or len(v.shape) == rank) and len(v.shape) >= count]
    total = 1
    for d in range(count):
        known = next((s[d] for s in shapes if isinstance(s[d], int)), None)
        if known is None:
            return None
        total *= known
    return total


def update_rows(b: Builder, node: ir.Node, data: ir.Value | None = None,
                updates: ir.Value | None = None, reshape_opset: int | None = None
                ) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(data rows [R, w], key of each update row [n] int64 in [0, R), update rows [n, w]): see step
    1 of the module docstring. ``data``/``updates`` replace the node's own (the same shapes, another
    dtype: the TensorRT lowering casts small integers first). ``reshape_opset``: rows with no
    Flatten at all, by Reshapes valid at that opset (:func:`_flatten`). Call
    :func:`reduction_blocker` first."""
    data = data if data is not None else node.inputs[0]
    updates = updates if updates is not None else node.inputs[2]
    indices = node.inputs[1]
    if node.op_type == "ScatterElements":
        rows, keys, vals, _ = _scatter_elements_rows(
            b, data, indices, updates, attr(node, "axis", 0), reshape_opset
        )
    else:
        rows, keys, vals, _ = scatter_nd_rows(b, data, indices, updates, reshape_opset)
    return rows, keys, vals


def _scatter_elements_rows(b: Builder, data, indices, updates, axis: int,
                           reshape_opset: int | None = None):
    rank, axis, source, last, shape_src = _elements_layout(data, indices, updates, axis)
    idx_dtype = indices.dtype
    spread = False  # the source broadcast by a Gather (_spread_source), not by an Expand
    if source is not None:  # key dims 0..axis; rows are the trailing slices
        ones = [1] * (rank - axis - 1)
        lead = b.dims(shape_src, 0, axis + 1)
        static = const_value(lead)
        # (no Expand to the shape the keys already have: onnx2tf 1.29 refuses that no-op Expand,
        # "Output tensors of a Functional model must be the output of a TensorFlow Layer")
        same = static is not None and source.shape is not None and \
            list(source.shape) == list(static) + ones
        spread = static is None and not b.computed_expands
        if same or spread:
            idx = source
        else:
            target = (b.const(list(static) + ones) if static is not None
                      else b.op("Concat", lead, b.const(ones), axis=0, dtype=INT64))
            idx = b.op("Expand", source, target, dtype=idx_dtype)
    else:
        idx = indices
    rows = _flatten(b, data, last + 1, data.dtype, reshape_opset)
    vals = _flatten(b, updates, last + 1, data.dtype, reshape_opset)
    known = _constant_keys(data, indices, rank, axis) if source is None else None
    if known is not None:
        return rows, b.const(known), vals, last + 1
    # The indices are made 1-D before any arithmetic, and each element's key is the key of its
    # position (index 0 on the axis) plus its index times the axis' stride, the positions' keys
    # built from ranges in at most 2-D: onnx2tf's default mode makes a rank-3+ graph input
    # channels-last and broadcast it against [1, d, 1] ranges in the wrong layout (refused, or
    # wrong where dimensions match), and it refuses a Reshape of a rank-3 constant ("Output
    # tensors of a Functional model must be the output of a TensorFlow Layer").
    if spread:
        flat = b.cast(_spread_source(b, source, shape_src, axis, rank), INT64, idx_dtype)
    else:
        flat = b.cast(b.op("Reshape", idx, b.const([-1]), dtype=idx_dtype), INT64, idx_dtype)
    sizes = [b.dim(data, k) for k in range(last + 1)]
    positions = _position_keys(b, shape_src, sizes,
                               [b.const(0) if k == axis else None for k in range(last + 1)])
    stride = _horner(b, [b.const(1)] + [None] * (last - axis), sizes[axis:])
    along = b.op("Mul", _normalize(b, flat, sizes[axis]), stride, dtype=INT64)
    return rows, b.op("Add", positions, along, dtype=INT64), vals, last + 1


def _spread_source(b: Builder, source: ir.Value, shape_src: ir.Value, axis: int,
                   rank: int) -> ir.Value:
    """The keys' ``source`` (1 along every dimension after ``axis``) broadcast over
    ``shape_src``'s dimensions 0..axis, flattened, with no Expand to that computed shape (onnx2tf
    reorders one of rank 3+ as channels-last): each position gathers the element it reads, its
    coordinate taken as 0 on a dimension where the source has 1 (static, or found at run time)."""
    pad = rank - len(source.shape)
    sizes, scales = [], []
    for k in range(axis + 1):
        if k < pad or source.shape[k - pad] == 1:
            sizes.append(b.const(1))
            scales.append(b.const(0))
            continue
        size = b.dim(source, k - pad)
        sizes.append(size)
        scales.append(b.cast(b.op("Greater", size, b.const(1)), INT64, ir.DataType.BOOL))
    at = _position_keys(b, shape_src, sizes, scales)
    return b.op("Gather", b.op("Reshape", source, b.const([-1]), dtype=source.dtype), at,
                axis=0, dtype=source.dtype)


def _position_keys(b: Builder, shape_src: ir.Value, sizes: list[ir.Value],
                   scales: list[ir.Value | None]) -> ir.Value:
    """The key of every element of ``shape_src``'s leading ``len(sizes)`` dimensions (C order),
    each coordinate times its scale (None: 1; a 0 on the scatter's axis): sum_k c_k * scale_k *
    prod(sizes[k+1:]), one dimension at a time as an outer sum of two vectors ([m, 1] + [1, d],
    flattened): nothing above 2-D."""
    keys = None
    for k, size in enumerate(sizes):
        if keys is not None:
            keys = b.op("Mul", keys, size, dtype=INT64)
        if scales[k] is None and shape_src.shape is not None and shape_src.shape[k] == 1:
            continue  # coordinate always 0, one element
        rng = b.op("Range", b.const(0), b.dim(shape_src, k), b.const(1), dtype=INT64)
        if scales[k] is not None:  # (a 0: d zeros, one key per element)
            rng = b.op("Mul", rng, scales[k], dtype=INT64)
        if keys is None:
            keys = rng
            continue
        outer = b.op("Add", b.op("Reshape", keys, b.const([-1, 1]), dtype=INT64),
                     b.op("Reshape", rng, b.const([1, -1]), dtype=INT64), dtype=INT64)
        keys = b.op("Reshape", outer, b.const([-1]), dtype=INT64)
    return keys if keys is not None else b.const([0])


def _constant_keys(data: ir.Value, indices: ir.Value, count: int,
                   axis: int | None = None) -> np.ndarray | None:
    """The keys of constant indices, computed here: one 1-D constant instead of the index
    arithmetic, which onnx2tf 1.29 refuses once it has folded it into a rank-3 constant ("Output
    tensors of a Functional model must be the output of a TensorFlow Layer"). ScatterElements
    (``axis`` given): every dimension of the indices is a key dimension, ``count`` of them;
    ScatterND: tuples of ``count``. None when the indices are not constant, the key dimensions of
    ``data`` not static, or an index is out of range (the graph's arithmetic then fails at run
    time, as the scatter does)."""
    tensor = constant_tensor(indices)
    dims = None if data.shape is None else list(data.shape)[:count]
    if tensor is None or dims is None or len(dims) < count or \
            not all(isinstance(d, int) for d in dims):
        return None
    idx = tensor.numpy().astype(np.int64)
    if axis is None:
        coords = list(idx.reshape(-1, count).T)
        shifted = range(count)
    else:
        coords, shifted = list(np.indices(idx.shape)), [axis]
        coords[axis] = idx
    for k in shifted:
        coords[k] = np.where(coords[k] < 0, coords[k] + dims[k], coords[k])
    if any(((c < 0) | (c >= d)).any() for c, d in zip(coords, dims)):
        return None
    return np.ravel_multi_index(coords, dims).reshape(-1).astype(np.int64)


def _flatten(b: Builder, value: ir.Value, axis: int, dtype: ir.DataType,
             reshape_opset: int | None = None) -> ir.Value:
    """``Flatten(value, axis)`` as a ``Reshape`` to ``[-1, n]`` (or ``[m, -1]``) where the
    trailing (or leading) dimensions are static: onnx2tf 1.29 flattens a ConstantOfShape's result
    one axis too early (a [6, 4] at axis 1 came out [1, 24]) and a vector at axis 1 into a [1, N]
    row. Elsewhere a Flatten, or with ``reshape_opset`` a Reshape to both sides' sizes computed
    from the shape (onnx2tf's Flatten of dynamic dimensions on both sides came out wrong too)."""
    dims = None if value.shape is None else list(value.shape)
    if dims is not None and 0 < axis <= len(dims):
        for side, target in ((dims[axis:], lambda n: [-1, n]), (dims[:axis], lambda n: [n, -1])):
            if all(isinstance(d, int) for d in side) and (n := int(np.prod(side))) > 0:
                return b.op("Reshape", value, b.const(target(n)), dtype=dtype)
    if reshape_opset is None:
        return b.op("Flatten", value, axis=axis, dtype=dtype)
    return b.reshape_to(value, _row_sizes(b, value, axis), reshape_opset, dtype)


def _row_sizes(b: Builder, value: ir.Value, axis: int) -> ir.Value:
    """``[prod(dims[:axis]), prod(dims[axis:])]`` of ``value`` as an int64 [2], each product a
    constant where its dimensions are static. The Slice ends at the rank (onnx2tf reads a huge
    constant end as int32: an empty slice)."""
    rank = None if value.shape is None else len(value.shape)
    shape, sizes = None, []
    for start, stop in ((0, axis), (axis, rank)):
        static = None if stop is None else _static_product(value, start, stop)
        if static is not None:
            sizes.append(b.const([static]))
            continue
        shape = b.shape(value) if shape is None else shape
        end = b.const([stop]) if stop is not None else b.op(
            "Reshape", b.op("Size", shape, dtype=INT64), b.const([1]), dtype=INT64)
        sizes.append(b.op("ReduceProd", b.op("Slice", shape, b.const([start]), end, dtype=INT64),
                          keepdims=1, dtype=INT64))
    return b.op("Concat", *sizes, axis=0, dtype=INT64)


def index_tuple_length(indices: ir.Value | None, depth: int = 0) -> int | None:
    """The last dimension of ScatterND's ``indices``: static in its shape or a constant's, or
    derived from how the export builds the tuple (torch's ``index_put_((ys, xs), ...)``: each
    vector unsqueezed on the last axis, then concatenated there; ``stack`` is the same). None
    when unknown."""
    if indices is None or depth > 16:
        return None
    if indices.shape is not None and len(indices.shape) and isinstance(indices.shape[-1], int):
        return indices.shape[-1]
    if (tensor := constant_tensor(indices)) is not None:
        return tuple(tensor.shape.dims)[-1] if len(tensor.shape.dims) else None
    node = indices.producer()
    if node is None or not is_default_domain(node) or not node.inputs:
        return None
    if node.op_type in ("Cast", "Identity", "Neg", "Abs"):
        return index_tuple_length(node.inputs[0], depth + 1)
    if node.op_type == "Concat":
        rank = _known_rank(node.inputs)
        axis = attr(node, "axis", 0)
        if axis == -1 or (rank is not None and axis == rank - 1):
            lengths = [index_tuple_length(v, depth + 1) for v in node.inputs]
            return None if None in lengths else sum(lengths)
        return (next((n for v in node.inputs if (n := index_tuple_length(v, depth + 1))), None)
                if rank is not None and axis >= 0 else None)
    if node.op_type == "Unsqueeze":
        axes = attr(node, "axes", None)
        if axes is None and len(node.inputs) > 1 and (t := constant_tensor(node.inputs[1])):
            axes = [int(a) for a in t.numpy().reshape(-1)]
        if axes is None:
            return None
        rank = _known_rank(node.inputs[:1])
        out_rank = None if rank is None else rank + len(axes)
        if -1 in axes or (out_rank is not None and out_rank - 1 in axes):
            return 1
        return index_tuple_length(node.inputs[0], depth + 1) if out_rank is not None else None
    return None


def _known_rank(values) -> int | None:
    return next((len(v.shape) for v in values if v is not None and v.shape is not None), None)


def scatter_nd_rows(b: Builder, data, indices, updates, reshape_opset: int | None = None):
    k = index_tuple_length(indices)
    if indices.shape is None:  # the tuple's length derived, the rank unknown: rows by Reshape
        idx2 = b.cast(b.op("Reshape", indices, b.const([-1, k]), dtype=indices.dtype), INT64,
                      indices.dtype)
        lead = b.op("Concat", b.const([-1]), b.dims(data, k, len(data.shape)), axis=0,
                    dtype=INT64)
        vals = _flatten(b, b.op("Reshape", updates, lead, dtype=data.dtype), 1, data.dtype,
                        reshape_opset)
    else:
        q = len(indices.shape)
        idx2 = b.cast(_flatten(b, indices, q - 1, indices.dtype, reshape_opset), INT64,
                      indices.dtype)
        vals = _flatten(b, updates, q - 1, data.dtype, reshape_opset)
    rows = _flatten(b, data, k, data.dtype, reshape_opset)
    known = _constant_keys(data, indices, k)
    if known is not None:
        return rows, b.const(known), vals, k
    sizes = [b.dim(data, j) for j in range(k)]
    coords = []
    for j in range(k):
        col = (b.op("Reshape", idx2, b.const([-1]), dtype=INT64) if k == 1
               else b.op("Gather", idx2, b.const(j), axis=1, dtype=INT64))
        coords.append(_normalize(b, col, sizes[j]))
    keys = _horner(b, coords, sizes)
    return rows, keys, vals, k


def _sorted(b: Builder, keys: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
    """The number of keys ``n``, ``Range(n)``, the permutation that sorts ``keys`` with equal keys
    in their order, and the sorted keys. The sort keys are distinct (key * n + position): equal
    keys never reach TopK's tie rule, which a runtime may break (OpenVINO's does); keys < R and
    n < 2^31 keep them within int64."""
    n = b.op("Size", keys, dtype=INT64)
    k = b.op("Reshape", n, b.const([1]), dtype=INT64)
    positions = b.op("Range", b.const(0), n, b.const(1), dtype=INT64)
    distinct = b.op("Add", b.op("Mul", keys, n, dtype=INT64), positions, dtype=INT64)
    _, perm = b.op("TopK", distinct, k, outputs=2, axis=0, largest=0, sorted=1)
    perm.dtype = INT64
    return n, positions, perm, b.op("Gather", keys, perm, axis=0, dtype=INT64)


def segment_reduce(b: Builder, rows: ir.Value, keys: ir.Value, vals: ir.Value, reduction: str,
                   dtype: ir.DataType) -> ir.Value:
    """``rows`` [R, w] with ``vals`` [n, w] folded into row ``keys[i]`` (int64 in [0, R)) in
    order."""
    ct = compute_dtype(dtype, reduction)
    n, positions, perm, sorted_keys = _sorted(b, keys)
    shifted = b.op(
        "Concat",
        b.const([-1]),
        b.op("Slice", sorted_keys, b.const([0]), b.const([-1])),
        axis=0,
        dtype=INT64,
    )
    starts_flag = b.op("Not", b.op("Equal", sorted_keys, shifted))
    starts = b.op("Reshape", b.op("NonZero", starts_flag), b.const([-1]), dtype=INT64)
    segments = b.op("Size", starts, dtype=INT64)
    seg_id = b.op(
        "Sub",
        b.op("CumSum", b.cast(starts_flag, INT64, ir.DataType.BOOL), b.const(0)),
        b.const(1),
        dtype=INT64,
    )
    rank_in_run = b.op("Sub", positions, b.op("Gather", starts, seg_id), dtype=INT64)
    values = b.cast(b.op("Gather", vals, perm, axis=0, dtype=dtype), ct, dtype)
    go = b.op("Greater", n, segments)
    kind = Kind(reduction, ct)

    def branch(bb: Builder, flagged: bool) -> ir.Value:
        carried = [sorted_keys, values, rank_in_run]
        if flagged:
            carried.append(bb.op("IsNaN", values))
        body = _round_body(bb.names, kind, segments, flagged)
        outs = bb.op("Loop", None, go, *carried, outputs=len(carried), body=body)
        final_keys, final_vals = outs[0], outs[1]
        final_keys.dtype, final_vals.dtype = INT64, ct
        current = bb.cast(bb.op("Gather", rows, final_keys, axis=0, dtype=dtype), ct, dtype)
        new, _ = kind.combine(bb, current, final_vals, late_flag=outs[3] if flagged else None)
        return final_keys, new

    def write_back(final_keys, new):
        where = b.op("Reshape", final_keys, b.const([-1, 1]), dtype=INT64)
        return b.op("ScatterND", rows, where, b.cast(new, dtype, ct), dtype=dtype)

    if not kind.nan_aware:
        return write_back(*branch(b, False))
    # The exact path is needed when the updates hold a NaN (the fold is not associative then) or
    # updates/data hold a -0.0 (Where's sign loss, see Builder.select). sum(1/x) over both is
    # -inf or NaN in those cases (1/-0.0 = -inf), and may also be so spuriously (overflow), which
    # only costs time.
    total = None
    for part in (values, rows):
        part_dtype = ct if part is values else dtype
        probe = (
            b.cast(part, ir.DataType.FLOAT, part_dtype)
            if part_dtype in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
            else part
        )
        term = b.op("ReduceSum", b.op("Reciprocal", probe), keepdims=0)
        total = term if total is None else b.op("Add", total, term)
    probe_dtype = np.float64 if ct == ir.DataType.DOUBLE else np.float32
    any_nan = b.op("Not", b.op("Greater", total, b.const(-np.inf, probe_dtype)))
    graphs = []
    for flagged in (True, False):
        sub = Builder(b.names)
        outs = branch(sub, flagged)
        graphs.append(
            ir.Graph(
                [], list(outs), nodes=sub.nodes, name=b.names.new("exact" if flagged else "plain")
            )
        )
    final_keys, new = b.op("If", any_nan, outputs=2, then_branch=graphs[0], else_branch=graphs[1])
    final_keys.dtype, new.dtype = INT64, ct
    return write_back(final_keys, new)


class Kind:
    """How one reduction combines values of the compute dtype (both lowerings use it).

    ``int_minmax``: integer max/min may use the ``Max``/``Min`` ops (integer types from opset 12;
    exact, since equal integers are identical)."""

    def __init__(self, reduction: str, dtype: ir.DataType, int_minmax: bool = False):
        self.reduction, self.dtype = reduction, dtype
        self.nan_aware = reduction in ("max", "min") and dtype in _FLOATS
        self.int_minmax = int_minmax and dtype not in _FLOATS and dtype != ir.DataType.BOOL

    def identity(self) -> np.ndarray:
        """The element e with ``combine(e, x) == x`` bit for bit for every x (a 0-d array of the
        compute dtype): -0.0 for float add (-0.0 + x keeps x's sign), +-inf or the integer bounds
        for max/min (nothing is strictly below -inf, so x wins, NaN included), False/True for
        bool."""
        dt = self.dtype
        np_dtype = np.float32 if dt == ir.DataType.BFLOAT16 else dt.numpy()
        if dt == ir.DataType.BOOL:
            return np.array(self.reduction in ("mul", "min"))
        if self.reduction == "add":
            return np.array(-0.0 if dt in _FLOATS else 0, np_dtype)
        if self.reduction == "mul":
            return np.array(1, np_dtype)
        low = self.reduction == "max"
        if dt in _FLOATS:
            return np.array(-np.inf if low else np.inf, np_dtype)
        info = np.iinfo(np_dtype)
        return np.array(info.min if low else info.max, np_dtype)

    def loses(self, b: Builder, late, early) -> ir.Value:
        """Whether ``late`` loses to ``early`` (strictly below it for max, above for min; false
        with a NaN), written with ``Less`` only: OpenVINO's CPU ``Greater`` is true where an
        operand is NaN (measured on 2026.4.1), its ``Less`` false as ONNX says."""
        return b.op("Less", late, early) if self.reduction == "max" else b.op("Less", early, late)

    def combine(self, b: Builder, early, late, has=None, early_flag=None, late_flag=None):
        """``early op late`` (order kept: the earlier operand first, as onnxruntime folds), and the
        combined "a NaN came after" flag (None unless both flags are given). ``has`` (bool,
        broadcasting; None: everywhere) says where a partner exists: elsewhere ``early`` is kept."""
        dt = self.dtype
        if dt == ir.DataType.BOOL:
            if self.reduction in ("add", "max"):
                return b.op("Or", early, late if has is None else b.op("And", late, has)), None
            return b.op(
                "And", early, late if has is None else b.op("Or", late, b.op("Not", has))
            ), None
        if self.reduction in ("add", "mul"):
            out = b.op("Add" if self.reduction == "add" else "Mul", early, late, dtype=dt)
            return (out if has is None else b.select(has, out, early, dt)), None
        if self.int_minmax and has is None:
            return b.op("Max" if self.reduction == "max" else "Min", early, late, dtype=dt), None
        loses = self.loses(b, late, early)
        if late_flag is not None:
            loses = b.op("And", loses, b.op("Not", late_flag))
        if has is not None:
            loses = b.op("Or", loses, b.op("Not", has))
        merged = b.select(loses, early, late, dt, exact=late_flag is not None)
        flag = None
        if early_flag is not None and late_flag is not None:
            flag = b.op("Or", early_flag, late_flag if has is None else b.op("And", late_flag, has))
        return merged, flag


def body_input(names: Names, hint: str, dtype: ir.DataType, shape=None) -> ir.Value:
    """A fresh input of a subgraph (a Loop body's iteration, condition or carried value)."""
    return ir.Value(
        name=names.new(hint),
        type=ir.TensorType(dtype),
        shape=ir.Shape(shape) if shape is not None else None,
    )


def _round_body(names: Names, kind: Kind, segments: ir.Value, flagged: bool) -> ir.Graph:
    """Loop body: pair every even-rank element with its successor in the same key run."""
    b = Builder(names)

    def inp(hint, dtype, shape=None):
        return body_input(names, hint, dtype, shape)

    it, cond = inp("iter", INT64, []), inp("cond", ir.DataType.BOOL, [])
    keys, vals, ranks = (
        inp("keys", INT64, [None]),
        inp("vals", kind.dtype),
        inp("ranks", INT64, [None]),
    )
    flags = inp("flags", ir.DataType.BOOL) if flagged else None
    m = b.op("Size", keys, dtype=INT64)
    even = b.op("Equal", b.op("Mod", ranks, b.const(2)), b.const(0))
    ie = b.op("Reshape", b.op("NonZero", even), b.const([-1]), dtype=INT64)
    nxt = b.op("Add", ie, b.const(1), dtype=INT64)
    inside = b.op("Less", nxt, m)
    partner = b.op("Where", inside, nxt, ie, dtype=INT64)
    new_keys = b.op("Gather", keys, ie, axis=0, dtype=INT64)
    has = b.op(
        "And", inside, b.op("Equal", b.op("Gather", keys, partner, axis=0, dtype=INT64), new_keys)
    )
    has_col = b.op("Reshape", has, b.const([-1, 1]), dtype=ir.DataType.BOOL)
    early = b.op("Gather", vals, ie, axis=0, dtype=kind.dtype)
    late = b.op("Gather", vals, partner, axis=0, dtype=kind.dtype)
    early_flag = late_flag = None
    if flagged:
        early_flag = b.op("Gather", flags, ie, axis=0, dtype=ir.DataType.BOOL)
        late_flag = b.op("Gather", flags, partner, axis=0, dtype=ir.DataType.BOOL)
    merged, merged_flag = kind.combine(b, early, late, has_col, early_flag, late_flag)
    new_ranks = b.op("Div", b.op("Gather", ranks, ie, axis=0, dtype=INT64), b.const(2), dtype=INT64)
    go_on = b.op("Greater", b.op("Size", new_keys, dtype=INT64), segments)
    outputs = [go_on, new_keys, merged, new_ranks] + ([merged_flag] if flagged else [])
    inputs = [it, cond, keys, vals, ranks] + ([flags] if flagged else [])
    return ir.Graph(inputs, outputs, nodes=b.nodes, name=names.new("round"))

