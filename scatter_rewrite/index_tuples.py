"""The length of a ScatterND's index tuples (the last dimension of its ``indices``), read from
the graph: the lowerings need it to write rows, and MNN's target to tell the ScatterND it gets
wrong (targets/mnn.py), so it sits with the shared modules."""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.graph import attr, constant_tensor, is_default_domain

__all__ = ["index_tuple_length"]


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
