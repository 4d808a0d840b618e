"""Graph inputs that reach an op's argument rather than its data: an axis (CumSum, Squeeze,
Unsqueeze, Reduce*, Slice, Pad), a Reshape's shape, a Pad's pads, a loss's class indices, a
Mod's divisor or a Slice's step (non-zero). A real input
gives them values the op takes; random ones make onnxruntime refuse the original (an axis out of
range, a class index past the scores, a zero divisor), so validation generates them in range, from
the shapes inferred for the generated sizes. Found as the scatter index contracts are: values that
reach the argument unchanged (:data:`.index_paths.CARRIERS`, out of bodies).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import is_default_domain, iter_nodes
from scatter_rewrite.validate.index_paths import (
    bound_outside, outer_values, slot_values, trace_to_input,
)

__all__ = ["Argument", "argument_inputs", "extreme_values", "integer_data_inputs"]

_REDUCE = frozenset({
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
})

# (op, input position) -> the kind of argument it reads; the data whose shape bounds it is input 0.
_SLOTS: dict[tuple[str, int], str] = {
    ("CumSum", 1): "axis", ("Squeeze", 1): "squeeze_axes", ("Unsqueeze", 1): "unsqueeze_axes",
    ("Reshape", 1): "shape", ("Slice", 3): "axes", ("Slice", 4): "nonzero",
    ("NegativeLogLikelihoodLoss", 1): "class", ("SoftmaxCrossEntropyLoss", 1): "class",
    ("Mod", 1): "nonzero", ("Pad", 1): "pads", ("Pad", 3): "axes",
    **{(op, 1): "axes" for op in _REDUCE},
}


@dataclasses.dataclass(frozen=True)
class Argument:
    """What an input's values must be: ``kind`` (a key of :data:`_SLOTS`' values), and the static
    shape of the data the op reads them against (None where shape inference did not fix it)."""

    kind: str
    data_shape: tuple | None

    def values(self, shape: tuple[int, ...], dtype: np.dtype,
               rng: np.random.Generator) -> np.ndarray | None:
        """Seeded values of ``shape`` the op takes, or None where none are known (the input is then
        generated as any other)."""
        count = int(np.prod(shape, dtype=np.int64))
        known = self.data_shape is not None and None not in self.data_shape
        rank = None if self.data_shape is None else len(self.data_shape)
        if self.kind == "nonzero":
            if dtype.kind in "iu":
                return rng.integers(1, 20, size=shape).astype(dtype)
            return (rng.uniform(0.5, 2.0, size=shape)
                    * rng.choice([-1.0, 1.0], size=shape)).astype(dtype)
        if dtype.kind not in "iu":
            return None
        if self.kind == "pads":  # (small and not negative: a reflect pad must be within the dim)
            return rng.integers(0, 2, size=shape, endpoint=True).astype(dtype)
        if self.kind == "class":
            classes = self.data_shape[1] if known and rank >= 2 else None
            return None if not classes else rng.integers(0, classes, size=shape).astype(dtype)
        if self.kind == "shape":
            if known and count == rank:
                return np.asarray(self.data_shape, dtype).reshape(shape)
            if count == 0:
                return None
            # Ones then -1: any element count fits.
            return np.asarray([1] * (count - 1) + [-1], dtype).reshape(shape)
        if rank is None:
            return None
        if self.kind == "squeeze_axes":
            if not known:
                return None
            ones = [i for i, d in enumerate(self.data_shape) if d == 1]
            if len(ones) < count:
                return None
            return self._signed(rng.choice(ones, size=count, replace=False), rank, rng,
                                shape, dtype)
        extent = rank + count if self.kind == "unsqueeze_axes" else rank
        if extent == 0 or (self.kind != "axis" and count > extent):
            return None
        if self.kind == "axis":
            return self._signed(rng.integers(0, extent, size=count), extent, rng, shape, dtype)
        return self._signed(rng.permutation(extent)[:count], extent, rng, shape, dtype)

    @staticmethod
    def _signed(axes: np.ndarray, extent: int, rng: np.random.Generator, shape, dtype):
        """``axes`` in [0, extent), about a third of them said as their negative equivalent."""
        negative = rng.random(axes.shape) < 0.3
        return np.where(negative, axes - extent, axes).reshape(shape).astype(dtype)


def argument_inputs(model: ir.Model, shape_of) -> dict[str, Argument]:
    """The graph inputs whose values reach a :data:`_SLOTS` argument unchanged, each with what the
    first such argument needs; ``shape_of`` gives a value's static shape (or None)."""
    graph_inputs = {id(v) for v in model.graph.inputs}
    outer = outer_values(model)
    found: dict[str, Argument] = {}
    for node, kind, value in slot_values(model, _SLOTS):
        source = trace_to_input(value, graph_inputs, outer)
        if source is None or source.name in found:
            continue
        found[source.name] = Argument(kind, _data_shape(node.inputs[0], shape_of, outer))
    return found


def _data_shape(data: ir.Value | None, shape_of, outer: dict) -> tuple | None:
    """``data``'s static shape, or that of the value it is bound to outside its body or function
    (shape inference does not enter functions)."""
    while data is not None:
        shape = shape_of(data)
        if shape is not None:
            return shape
        data = bound_outside(data, outer)
    return None


_SCATTERS = frozenset({"ScatterElements", "ScatterND", "Scatter"})


def integer_data_inputs(model: ir.Model, shape_of) -> dict[str, tuple[str, int | None, bool]]:
    """The integer graph inputs whose values reach a scatter's data or updates unchanged, each with
    (the scatter's reduction, how many updates it has: None where not known, whether they are its
    updates). Validation draws
    them over the type's range (:func:`extreme_values`), so that a form inexact on large integers
    fails its proof."""
    from scatter_rewrite.graph import attr

    graph_inputs = {id(v) for v in model.graph.inputs}
    outer = outer_values(model)
    found: dict[str, tuple[str, int | None, bool]] = {}
    for node, _scope in iter_nodes(model):
        if (node.op_type not in _SCATTERS or not is_default_domain(node)
                or len(node.inputs) != 3 or node.inputs[2] is None):
            continue
        reduction = attr(node, "reduction", "none")
        updates = shape_of(node.inputs[2])
        count = (None if updates is None or None in updates
                 else int(np.prod(updates, dtype=np.int64)))
        for value in (node.inputs[0], node.inputs[2]):
            source = trace_to_input(value, graph_inputs, outer)
            if source is None or source.dtype is None or not source.dtype.is_integer():
                continue
            read = (reduction, count, value is node.inputs[2])
            if source.name in found and found[source.name] != read:
                found[source.name] = ("mul", None, True)  # (read two ways: small values)
            else:
                found[source.name] = read
    return found


def extreme_values(shape: tuple[int, ...], dtype: np.dtype, reduction: str, count: int | None,
                   is_updates: bool, rng: np.random.Generator) -> np.ndarray:
    """Integers of ``dtype`` reaching near its limits, as large as the scatter's contract lets them
    be without overflow (the spec does not define an overflowing sum or product): for ``add``,
    every value within ``max // (count + 1)`` (a slot sums its data and at most every update);
    for ``mul``, data within ``max >> count`` and updates in [-2, 2] (where fewer than the type's
    bits; else updates in [-1, 1]); otherwise the whole range,
    the type's min and max among the values. A third large, a third at the bound, a third small."""
    info = np.iinfo(dtype)
    signed = info.min < 0
    if reduction == "mul":
        # Updates of 2 double the product at most ``count`` times: data within max >> count; too
        # many updates (or not known how many) to double it, they are -1, 0 or 1 instead.
        doubling = count is not None and count < int(info.max).bit_length()
        if is_updates:
            factor = 2 if doubling else 1
            return rng.integers(-factor if signed else 0, factor, size=shape,
                                endpoint=True).astype(dtype)
        bound = int(info.max) >> count if doubling else int(info.max)
    elif reduction == "add":
        bound = int(info.max) // ((count if count is not None else 1 << 16) + 1)
    else:
        bound = int(info.max)
    work = np.dtype(np.int64 if signed else np.uint64)
    low = -bound if signed else 0
    pick = rng.integers(0, 3, size=shape)
    large = rng.integers(low, bound, size=shape, endpoint=True, dtype=work)
    below = rng.integers(0, min(bound, 7), size=shape, endpoint=True).astype(work)
    near = work.type(bound) - below  # (in the working type: uint64's bound is past int64)
    if signed:
        near = np.where(rng.random(shape) < 0.5, -near, near)
    little = min(bound, 20)
    small = rng.integers(-little if signed else 0, little, size=shape, endpoint=True).astype(work)
    values = np.where(pick == 0, large, np.where(pick == 1, near, small)).astype(work)
    if reduction not in ("add", "mul") and values.size >= 2:
        flat = values.reshape(-1)
        flat[0], flat[1] = info.max, info.min  # (the extremes themselves)
        values = flat.reshape(shape)
    return values.astype(dtype)
