"""A reducing scatter as rows (step 1 of :mod:`.segment_reduce`'s lowering): the data as rows
[R, w], the updates as rows [n, w], and the key of each update row, the data row it lands in
(:func:`update_rows`; their static sizes: :func:`row_counts`). Both reduction lowerings start here
(:mod:`.segment_reduce`, :mod:`.network_reduce`), and the scatter-free forms too."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import (
    NamedNodeBuilder as Builder, attr, constant_tensor,
)
from scatter_rewrite.index_tuples import index_tuple_length

__all__ = [
    "const_value", "index_tuple_length", "INT64", "is_empty", "row_counts", "scatter_nd_rows",
    "static_rank", "update_rows",
]

INT64 = ir.DataType.INT64


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
    taken from whichever of the two states it. Call :func:`.segment_reduce.reduction_blocker`
    first."""
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
    1 of :mod:`.segment_reduce`'s docstring. ``data``/``updates`` replace the node's own (the same
    shapes, another dtype: the TensorRT lowering casts small integers first). ``reshape_opset``:
    rows with no Flatten at all, by Reshapes valid at that opset (:func:`_flatten`). Call
    :func:`.segment_reduce.reduction_blocker` first."""
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
        flat = b.cast(_as_vector(b, idx), INT64, idx_dtype)
    sizes = [b.dim(data, k) for k in range(last + 1)]
    positions = _position_keys(b, shape_src, sizes,
                               [b.const(0) if k == axis else None for k in range(last + 1)])
    stride = _horner(b, [b.const(1)] + [None] * (last - axis), sizes[axis:])
    along = b.op("Mul", _normalize(b, flat, sizes[axis]), stride, dtype=INT64)
    return rows, b.op("Add", positions, along, dtype=INT64), vals, last + 1


def _as_vector(b: Builder, value: ir.Value) -> ir.Value:
    """``value`` flattened: a Reshape of a vector looked through (the same elements in the same
    order), as the TensorScatter lowering writes its positions. onnx2tf 1.29 without onnxsim
    flattens a rank-3+ tensor reshaped to a computed shape in channels-last order."""
    producer = value.producer()
    if (producer is not None and producer.op_type == "Reshape" and producer.domain == ""
            and producer.inputs[0] is not None and producer.inputs[0].shape is not None
            and len(producer.inputs[0].shape) == 1):
        return producer.inputs[0]
    return b.op("Reshape", value, b.const([-1]), dtype=value.dtype)


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
