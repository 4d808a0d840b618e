"""TensorScatter (opset 24) as one ``ScatterElements`` (reduction none, unique targets) valid at
opset >= 11: :func:`tensor_scatter_blocker` ``(node, opset) -> str | None`` says why not (None: it
can), :func:`lower_tensor_scatter` ``(node, opset, names=None, computed_expands=True) -> (nodes,
output)`` writes it."""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.graph import attr
from scatter_rewrite.limits import OPSET_FLOOR
from scatter_rewrite.passes.lowering.segment_reduce import (
    INT64, SUPPORTED_DTYPES, Builder, Names, name_prefix, static_rank,
)
from scatter_rewrite.said import param, said

__all__ = ["lower_tensor_scatter", "tensor_scatter_blocker"]


def tensor_scatter_blocker(node: ir.Node, opset: int) -> str | None:
    if opset < OPSET_FLOOR:
        return f"opset < {OPSET_FLOOR} has no ScatterElements"
    if len(node.inputs) < 2 or node.inputs[0] is None or node.inputs[1] is None:
        return "needs past_cache and update inputs"
    cache = node.inputs[0]
    rank = static_rank(cache, node.inputs[1])
    if rank is None:
        return "the rank of past_cache/update is unknown"
    if rank < 2:
        return f"past_cache rank {rank} < 2"
    axis = attr(node, "axis", -2)
    if not -rank <= axis < rank or axis % rank == 0:
        return f"axis={axis} is invalid for rank {rank} (must name a dimension >= 1)"
    if cache.dtype == ir.DataType.BFLOAT16 and opset < 13:
        return said("bfloat16 needs ScatterElements-13; pass ", param("opset", 13))
    if cache.dtype is not None and cache.dtype not in SUPPORTED_DTYPES | {
        ir.DataType.STRING,
        ir.DataType.COMPLEX64,
        ir.DataType.COMPLEX128,
    }:
        return f"data type {cache.dtype.name} is not a ScatterElements type at opset {opset}"
    return None


def lower_tensor_scatter(
    node: ir.Node, opset: int, names: Names | None = None, computed_expands: bool = True
) -> tuple[list[ir.Node], ir.Value]:
    """TensorScatter -> ScatterElements(past_cache, positions, update, axis) with
    positions[b, ..., s, ...] = write_indices[b] + s (mod max_sequence_length if circular).
    ``computed_expands=False``: the positions without an Expand to the update's shape
    (:func:`_gathered_positions`)."""
    names = names or Names()
    names.prefix = name_prefix(node)
    b = Builder(names, computed_expands)
    cache, update = node.inputs[0], node.inputs[1]
    write = node.inputs[2] if len(node.inputs) > 2 else None
    rank = static_rank(cache, update)
    axis = attr(node, "axis", -2) % rank
    mode = attr(node, "mode", "linear")
    seq = b.dim(update, axis)
    pos = b.op("Range", b.const(0), seq, b.const(1), dtype=INT64)  # [S]
    if write is not None:
        starts = b.op("Reshape", b.cast(write, INT64, write.dtype), b.const([-1, 1]), dtype=INT64)
        pos = b.op("Add", starts, pos, dtype=INT64)  # [B, S]
    else:
        pos = b.op("Reshape", pos, b.const([1, -1]), dtype=INT64)  # [1, S]
    if mode == "circular":
        pos = b.op("Mod", pos, b.dim(cache, axis), dtype=INT64)
    if not computed_expands:
        positions = _gathered_positions(b, pos, update, rank, axis, write is not None, opset)
        out = b.op("ScatterElements", cache, positions, update, axis=axis, dtype=cache.dtype)
        return b.nodes, out
    # [B or 1, 1, ..., S, 1, ...]: batch first, sequence at `axis`. Unsqueeze, not a Reshape to
    # [B, 1, .., S, ..]: a Reshape reads S = 0 as "copy the input's dimension" (below opset 14).
    ones = [d for d in range(1, rank) if d != axis]
    if ones:
        pos = (b.op("Unsqueeze", pos, b.const(ones), dtype=INT64) if opset >= 13
               else b.op("Unsqueeze", pos, axes=ones, dtype=INT64))
    positions = b.op("Expand", pos, b.shape(update), dtype=INT64)
    out = b.op("ScatterElements", cache, positions, update, axis=axis, dtype=cache.dtype)
    return b.nodes, out


def _gathered_positions(b: Builder, pos: ir.Value, update: ir.Value, rank: int, axis: int,
                        batched: bool, opset: int) -> ir.Value:
    """``pos`` ([B or 1, S]) at every element of ``update``, gathered at the key b * S + s of each
    (``batched``; else s), the keys built as outer sums of ranges (nothing above 2-D), then
    reshaped to the update's shape: onnx2tf 1.29 reads an Expand to a computed shape of rank 3+,
    whose entries differ, as channels-last (targets/litert.py), and without onnxsim to fold it
    the positions came out in other rows."""
    keys = None
    for k in range(rank):
        rng = b.op("Range", b.const(0), b.dim(update, k), b.const(1), dtype=INT64)
        if k == 0:
            keys = b.op("Mul", rng, b.dim(update, axis) if batched else b.const(0), dtype=INT64)
            continue
        if k != axis:
            rng = b.op("Mul", rng, b.const(0), dtype=INT64)
        outer = b.op("Add", b.op("Reshape", keys, b.const([-1, 1]), dtype=INT64),
                     b.op("Reshape", rng, b.const([1, -1]), dtype=INT64), dtype=INT64)
        keys = b.op("Reshape", outer, b.const([-1]), dtype=INT64)
    flat = b.op("Gather", b.op("Reshape", pos, b.const([-1]), dtype=INT64), keys, axis=0,
                dtype=INT64)
    flat.shape = ir.Shape([None])  # (a vector: the ScatterElements form reads it as it is)
    dims = update.shape
    if dims is not None and all(isinstance(d, int) and d > 0 for d in dims):
        return b.op("Reshape", flat, b.const(list(dims)), dtype=INT64)
    return b.reshape_to(flat, b.dims(update, 0, rank), opset, INT64)
