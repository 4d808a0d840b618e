"""ScatterElements -> an exactly equivalent ScatterND; explicit ``reduction="none"`` dropped from
ScatterND.

Rewrites: every default-domain ``ScatterElements`` (any axis, negative axis, int32/int64 indices,
every dtype, every reduction) in the main graph, If/Loop/Scan bodies and model-local functions into
``ScatterND(data, coords, updates)`` with the same reduction (``"none"`` is not written), where
``coords[p] = (p_0, ..., p_{axis-1}, norm(indices[p]), p_{axis+1}, ..., p_{r-1})`` for every
position ``p`` of ``indices``: each update lands on exactly the element ScatterElements writes, in
the same order, so the result is identical for every reduction. ``norm`` is
``Where(idx < 0, idx + data.shape[axis], idx)`` (computed as ``idx + Cast(idx < 0) * size``, see
:meth:`ReplacementBuilder.normalize`) on int64 indices (a ``Cast`` first for int32):
the ScatterND spec allows negative index values (every version, 11 to 18), but whether TensorRT's
scatter layer does is unverified (docs/tensorrt.md; its
IScatterLayer documentation is silent), so none reach it. The normalization is about 10% of the
rewritten scatter's onnxruntime time (benchmarks/RESULTS-tensorrt.md).

``coords`` is built as ``Concat(grid[..., :axis], Unsqueeze(norm, -1), grid[..., axis+1:],
axis=-1)``: the grid is a constant when the shape of ``indices`` is static (and at most
:data:`GRID_BYTES_LIMIT`), else a small ``Shape``/``Gather``/``Range``/``Unsqueeze``/``Expand``
subgraph per other axis. Constant indices become one constant ``coords``. Constants are
initializers in the main graph and ``Constant`` nodes in subgraphs and functions.

Ranks and dtypes come from the model's shape information; when a scatter's inputs have none (the
TorchScript exporter writes no value_info with dynamic axes) onnx shape inference is run first
(:func:`infer_missing_shapes`: it only adds shape information), and inside functions the call
sites are consulted.

Also: a ``ScatterND`` with an explicit ``reduction="none"`` loses the attribute (same meaning;
TensorRT 10.0-10.8 rejects the attribute, even "none": onnx/onnx-tensorrt#957,
microsoft/onnxruntime#23618).

An ``If`` with a constant condition around a ScatterElements whose rank is unknown (TorchScript's
rank-0 wrapper of ``scatter_reduce``) is first replaced by its taken branch
(:func:`scatter_rewrite.passes.inline_if.inline_ifs_hiding_rank`).

Leaves alone (with the reason): a ScatterElements whose rank is unknown (in a function: no call
site with a known rank), a ``max``/``min`` reduction below opset 18 (ScatterND has them from 18
only; the TorchScript exporter emits them on ScatterElements at 16/17), nodes of other domains.
Raises IndexOutOfRangeError for constant indices out of range.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from scatter_rewrite.errors import IndexOutOfRangeError, InvalidModelError
from scatter_rewrite.graph import (
    SCATTER_OPS, NodeBuilder, Scope, attr, constant_tensor, describe, function_calls,
    is_default_domain, iter_nodes, iter_scopes, reference_reason,
)
from scatter_rewrite.type_inference import (
    annotate_functions_with, borrow_inferred_types, restore_types,
)
from scatter_rewrite.passes.inline_if import inline_ifs_hiding_rank
from scatter_rewrite.passes.base import ScatterPass
from scatter_rewrite.limits import REDUCTIONS_SINCE
from scatter_rewrite.said import Placeholder, call, message_of, said

__all__ = [
    "call_site_values", "const_array", "convert_to_scatternd", "Coordinates", "coordinates",
    "Decline", "drop_none_reduction", "GRID_BYTES_LIMIT", "infer_missing_shapes",
    "known_rank", "ModelNames", "ReplacementBuilder",
    "scatter_elements_rank_axis", "scatter_nd_through", "static_shape", "ToScatterNDPass",
    "value_dtype",
]

# A static grid (or constant coords) bigger than this is computed at run time instead.
GRID_BYTES_LIMIT = 64 << 20


# --------------------------------------------------------------------------- shared building blocks


class ModelNames:
    """Fresh value and node names, unique across the whole model (all scopes)."""

    def __init__(self, model: ir.Model):
        self.taken: set[str] = set()
        for scope in iter_scopes(model):
            body = scope.body
            self.taken.update(v.name for v in body.inputs if v.name)
            if isinstance(body, ir.Graph):
                self.taken.update(body.initializers)
            for node in body:
                self.taken.update(o.name for o in node.outputs if o.name)
                if node.name:
                    self.taken.add(node.name)

    def __call__(self, base: str) -> str:
        name, i = base, 1
        while name in self.taken:
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name)
        return name


class ReplacementBuilder(NodeBuilder):
    """The package's :class:`~scatter_rewrite.graph.NodeBuilder` for the replacement nodes of one
    scatter, nodes and values named uniquely across the model; constants become initializers of the
    main graph, ``Constant`` nodes elsewhere (function bodies have no initializers; subgraph
    initializers are avoided for TensorRT's sake)."""

    def __init__(self, model: ir.Model, scope: Scope, names: ModelNames, prefix: str):
        super().__init__()
        self.model, self.scope, self.names, self.prefix = model, scope, names, prefix

    @property
    def opset(self) -> int:
        return self.scope.opset

    def op(self, op_type: str, inputs, attributes=None, *, dtype: ir.DataType | None = None,
           shape=None, suffix: str | None = None) -> ir.Value:
        name = self.names(f"{self.prefix}_{suffix or op_type.lower()}")
        out = ir.Value(name=name, type=ir.TensorType(dtype) if dtype is not None else None,
                       shape=ir.Shape(shape) if shape is not None else None)
        self.nodes.append(ir.node(op_type, list(inputs), attributes or {}, outputs=[out],
                                  name=self.names(f"{self.prefix}_{op_type}")))
        return out

    def const(self, array: np.ndarray, suffix: str = "const") -> ir.Value:
        array = np.asarray(array)
        name = self.names(f"{self.prefix}_{suffix}")
        tensor = ir.tensor(array, name=name)
        if self.scope.body is self.model.graph:
            value = ir.Value(name=name, type=ir.TensorType(tensor.dtype),
                             shape=ir.Shape(array.shape), const_value=tensor)
            self.model.graph.register_initializer(value)
            return value
        return self.op("Constant", [], {"value": tensor}, dtype=tensor.dtype, shape=array.shape,
                       suffix=suffix)

    def unsqueeze(self, value: ir.Value, axes: list[int], suffix: str = "unsqueeze") -> ir.Value:
        if self.opset >= 13:
            return self.op("Unsqueeze", [value, self.const(np.array(axes, np.int64), "axes")],
                           suffix=suffix)
        return self.op("Unsqueeze", [value], {"axes": axes}, suffix=suffix)

    def dim(self, value: ir.Value, axis: int, *, scalar: bool = False) -> ir.Value:
        """``value.shape[axis]`` as int64 (a constant when static): shape [1], or a scalar."""
        if (value.shape is not None and axis < len(value.shape)
                and isinstance(value.shape[axis], int)):
            size = value.shape[axis]
            return self.const(np.array(size if scalar else [size], np.int64), "dim")
        shape = self.op("Shape", [value], dtype=ir.DataType.INT64, suffix="shape")
        index = np.array(axis if scalar else [axis], np.int64)
        return self.op("Gather", [shape, self.const(index, "dim_index")], {"axis": 0},
                       dtype=ir.DataType.INT64, suffix="dim")

    def to_int64(self, value: ir.Value) -> ir.Value:
        if value.dtype == ir.DataType.INT64:
            return value
        return self.op("Cast", [value], {"to": ir.DataType.INT64}, dtype=ir.DataType.INT64,
                       suffix="int64")

    def normalize(self, indices: ir.Value, size: ir.Value) -> ir.Value:
        """``Where(idx < 0, idx + size, idx)`` on int64 ``indices`` (``size`` broadcasts), computed
        as ``idx + Cast(idx < 0) * size``: the same values, but onnxruntime 1.32's CPU ``Where``
        takes ~13 ns per int64 element (13.6 ms on 1M indices, profiled in
        benchmarks/bench_tensorrt.py's case) against ~1-2 ms for each of Cast/Mul/Add. TensorRT's
        parser supports all four."""
        zero = self.const(np.array(0, np.int64), "zero")
        negative = self.op("Less", [indices, zero], dtype=ir.DataType.BOOL, suffix="negative")
        flag = self.op("Cast", [negative], {"to": ir.DataType.INT64}, dtype=ir.DataType.INT64,
                       suffix="negative_flag")
        shift = self.op("Mul", [flag, size], dtype=ir.DataType.INT64, suffix="shift")
        return self.op("Add", [indices, shift], dtype=ir.DataType.INT64, suffix="normalized")

    def replace(self, node: ir.Node, final: ir.Node) -> None:
        """Swap ``node`` for the built nodes (``final`` last), keeping the output's name and
        type."""
        final.name = node.name or final.name
        final.metadata_props.update(node.metadata_props)
        self.nodes.append(final)
        ir.convenience.replace_nodes_and_values(
            self.scope.body, node, [node], self.nodes, list(node.outputs), list(final.outputs)
        )


def infer_missing_shapes(model: ir.Model) -> None:
    """Run onnx shape inference (weights kept out of it) when a scatter's inputs lack a
    shape or type: exporters often write no value_info for intermediate values (the TorchScript
    exporter with dynamic axes does), and converting needs ranks and dtypes. Adds shape
    information only; failures leave the model as it is. Function bodies are not inferred (their
    call sites are used instead)."""
    for node, scope in iter_nodes(model):
        if (node.op_type in SCATTER_OPS and is_default_domain(node) and not scope.is_function
                and any(v is not None and (v.shape is None or v.dtype is None)
                        for v in node.inputs)):
            # (kept: nothing restores them. Not onnx_ir's ShapeInferencePass, which serializes
            # every Constant's bytes: a 5 MiB zeros Constant cost 38 MiB of peak memory there)
            borrow_inferred_types(model)
            return


def const_array(value: ir.Value | None) -> np.ndarray | None:
    """The value's array when it is a true constant (:func:`graph.constant_tensor`)."""
    tensor = constant_tensor(value)
    return None if tensor is None else tensor.numpy()


def call_site_values(model: ir.Model, scope: Scope, value: ir.Value) -> list[ir.Value] | None:
    """Inside a function, the values every call site binds to the function input ``value``
    (None: not a function input, or some call site leaves it out)."""
    function = scope.body
    if not isinstance(function, ir.Function) or value not in function.inputs:
        return None
    position = list(function.inputs).index(value)
    bound = []
    for node in function_calls(model).get((function.domain, function.name, function.overload), []):
        arg = node.inputs[position] if position < len(node.inputs) else None
        if arg is None:
            return None
        bound.append(arg)
    return bound or None


def _call_site_rank(model: ir.Model, scope: Scope, value: ir.Value) -> int | None:
    """Inside a function, the rank every call site gives the function input ``value``."""
    bound = call_site_values(model, scope, value)
    if not bound or any(v.shape is None for v in bound):
        return None
    ranks = {len(v.shape) for v in bound}
    return ranks.pop() if len(ranks) == 1 else None


def value_dtype(model: ir.Model, scope: Scope, value: ir.Value | None) -> ir.DataType | None:
    """The value's element type; inside a function, the one every call site agrees on."""
    if value is None or value.dtype is not None:
        return value.dtype if value is not None else None
    bound = call_site_values(model, scope, value) or []
    types = {v.dtype for v in bound}
    return types.pop() if len(types) == 1 else None


def known_rank(model: ir.Model, scope: Scope, values) -> int | None:
    for v in values:
        if v is not None and v.shape is not None:
            return len(v.shape)
    for v in values:
        rank = _call_site_rank(model, scope, v) if v is not None else None
        if rank is not None:
            return rank
    return None


def static_shape(value: ir.Value, scope: Scope) -> tuple[int, ...] | None:
    """The value's static shape, trusted only outside functions (a function may be called with
    others)."""
    if scope.is_function or value.shape is None or not all(isinstance(d, int) for d in value.shape):
        return None
    return tuple(value.shape)


# --------------------------------------------------------------------------- the conversion


@dataclasses.dataclass
class Coordinates:
    value: ir.Value  # int64 [*indices.shape, rank]
    how: str  # for the report


def coordinates(b: ReplacementBuilder, node: ir.Node, rank: int, axis: int) -> Coordinates:
    """ScatterND coordinates of every element of a ScatterElements node's indices (see module
    doc)."""
    data, indices = node.inputs[0], node.inputs[1]
    constant = const_array(indices)
    size = (data.shape[axis] if data.shape is not None and isinstance(data.shape[axis], int)
            else None)
    if constant is not None and size is not None and constant.size * rank * 8 <= GRID_BYTES_LIMIT:
        idx = constant.astype(np.int64)
        if idx.size and (idx.min() < -size or idx.max() >= size):
            raise IndexOutOfRangeError(
                f"{describe(node, b.scope)}: constant index "
                f"{int(idx.min() if idx.min() < -size else idx.max())} is out of range for axis "
                f"{axis} of size {size}; fix the model"
            )
        coords = np.moveaxis(np.indices(idx.shape, dtype=np.int64), 0, -1).copy()
        coords[..., axis] = np.where(idx < 0, idx + size, idx)
        return Coordinates(b.const(coords, "coords"), "constant coordinates")
    normalized = b.normalize(b.to_int64(indices), b.dim(data, axis))
    column = b.unsqueeze(normalized, [-1], "axis_coords")
    shape = static_shape(indices, b.scope)
    if (shape is not None
            and int(np.prod(shape, dtype=np.int64)) * (rank - 1) * 8 <= GRID_BYTES_LIMIT):
        grid = np.moveaxis(np.indices(shape, dtype=np.int64), 0, -1)
        parts = (
            ([b.const(np.ascontiguousarray(grid[..., :axis]), "grid_before")] if axis > 0 else [])
            + [column]
            + ([b.const(np.ascontiguousarray(grid[..., axis + 1:]), "grid_after")]
               if axis < rank - 1 else []))
        how = "constant grid"
    else:
        indices_shape = b.op("Shape", [node.inputs[1]], dtype=ir.DataType.INT64,
                             suffix="indices_shape")
        target = b.op("Concat", [indices_shape, b.const(np.array([1], np.int64), "one")],
                      {"axis": 0}, dtype=ir.DataType.INT64, suffix="grid_shape")
        zero, one = b.const(np.array(0, np.int64), "start"), b.const(np.array(1, np.int64), "step")
        parts = []
        for d in range(rank):
            if d == axis:
                parts.append(column)
                continue
            size_d = b.op("Gather", [indices_shape, b.const(np.array(d, np.int64), "axis_index")],
                          {"axis": 0}, dtype=ir.DataType.INT64, suffix=f"size{d}")
            steps = b.op("Range", [zero, size_d, one], dtype=ir.DataType.INT64, suffix=f"range{d}")
            placed = b.unsqueeze(steps, [j for j in range(rank + 1) if j != d], f"range{d}_placed")
            parts.append(b.op("Expand", [placed, target], dtype=ir.DataType.INT64,
                              suffix=f"coords{d}"))
        how = "run-time grid (Shape/Range/Expand)"
    value = parts[0] if len(parts) == 1 else b.op("Concat", parts, {"axis": -1},
                                                  dtype=ir.DataType.INT64,
                                                    suffix="coords")
    return Coordinates(value, how)


def scatter_elements_rank_axis(model: ir.Model, node: ir.Node,
                               scope: Scope) -> tuple[int, int] | str:
    """(rank, normalized axis) of a ScatterElements, or why it cannot be known."""
    if len(node.inputs) != 3 or any(v is None for v in node.inputs):
        raise InvalidModelError(f"{describe(node, scope)}: ScatterElements needs 3 inputs (data, "
                                "indices, updates)")
    rank = known_rank(model, scope, node.inputs)
    if rank is None:
        return ("the rank of data/indices is unknown (no shape information here or at the call "
                "sites)")
    axis = attr(node, "axis", 0)
    if not -rank <= axis < rank:
        raise InvalidModelError(f"{describe(node, scope)}: axis={axis} is out of range for rank "
                                f"{rank}; fix the attribute")
    return rank, axis % rank


def convert_to_scatternd(model: ir.Model, node: ir.Node, scope: Scope, names: ModelNames,
                         reduction: str | None = None, carrier: ir.DataType | None = None) -> str:
    """Replace ScatterElements ``node`` by ScatterND; return the detail for the report, or raise
    :class:`Decline` with the reason. ``reduction`` overrides the node's (the TensorRT pass uses
    ``"none"`` only for nodes whose reduction is none). ``carrier`` (reduction none only): data and
    updates are cast to it, scattered, and the result cast back (the TensorRT pass writes BOOL
    through INT32: exact, every bool survives the round trip)."""
    if (why := reference_reason(node)) is not None:
        raise Decline(why)
    reduction = reduction or attr(node, "reduction", "none")
    if reduction not in REDUCTIONS_SINCE:
        raise Decline(f"unknown reduction {reduction!r}")
    if scope.opset < REDUCTIONS_SINCE[reduction]:
        raise Decline(said(f"ScatterND has reduction={reduction!r} only from opset "
                           f"{REDUCTIONS_SINCE[reduction]} (the model has {scope.opset}); run ",
                           call("upgrade", opset=REDUCTIONS_SINCE[reduction]), " first"))
    found = scatter_elements_rank_axis(model, node, scope)
    if isinstance(found, str):
        raise Decline(found)
    rank, axis = found
    dtype = value_dtype(model, scope, node.inputs[0])
    if carrier is not None and (reduction != "none" or dtype is None):
        raise Decline("a carrier type needs reduction none and a known data type")
    b = ReplacementBuilder(model, scope, names, node.name or "scatter")
    coords = coordinates(b, node, rank, axis)
    attributes = {} if reduction == "none" else {"reduction": reduction}
    if carrier is None:
        final = ir.node("ScatterND", [node.inputs[0], coords.value, node.inputs[2]], attributes,
                        num_outputs=1)
    else:
        final = _through(b, node.inputs[0], coords.value, node.inputs[2], dtype, carrier)
    b.replace(node, final)
    if carrier is not None:
        _name_the_scatter(b, final)
    label = "" if reduction == "none" else f"reduction={reduction}, "
    through = "" if carrier is None else f", {dtype.name} written as {carrier.name}"
    return f"-> ScatterND({label}{coords.how}, axis {axis} of rank {rank}{through})"


def _through(b: ReplacementBuilder, data: ir.Value, indices: ir.Value, updates: ir.Value,
             dtype: ir.DataType, carrier: ir.DataType) -> ir.Node:
    """``Cast(ScatterND(Cast(data), indices, Cast(updates)), to=dtype)`` with the casts to
    ``carrier`` built into ``b``; returns the last Cast (for :meth:`ReplacementBuilder.replace`)."""
    as_carrier = [b.op("Cast", [v], {"to": carrier}, dtype=carrier,
                       shape=list(v.shape) if v.shape is not None else None,
                       suffix=f"{part}_{carrier.name.lower()}")
                  for v, part in ((data, "data"), (updates, "updates"))]
    scattered = b.op("ScatterND", [as_carrier[0], indices, as_carrier[1]], dtype=carrier,
                     shape=list(data.shape) if data.shape is not None else None, suffix="scattered")
    return ir.node("Cast", [scattered], {"to": dtype}, num_outputs=1)


def scatter_nd_through(model: ir.Model, node: ir.Node, scope: Scope, names: ModelNames,
                       carrier: ir.DataType) -> str:
    """Write a ScatterND (reduction none) through ``carrier``: its data and updates cast to it, the
    result cast back (exact for the BOOL -> INT32 the TensorRT pass uses); an explicit
    ``reduction="none"`` is not kept. Returns the detail for the report."""
    if attr(node, "reduction", "none") != "none":
        raise Decline("only a ScatterND without a reduction is written through another type")
    dtype = value_dtype(model, scope, node.inputs[0])
    if dtype is None:
        raise Decline("the data type is unknown")
    b = ReplacementBuilder(model, scope, names, node.name or "scatter")
    final = _through(b, node.inputs[0], node.inputs[1], node.inputs[2], dtype, carrier)
    b.replace(node, final)
    _name_the_scatter(b, final)
    return f"{dtype.name} data written as {carrier.name} (Cast, ScatterND, Cast back)"


def _name_the_scatter(b: ReplacementBuilder, cast_back: ir.Node) -> None:
    """The scatter keeps the replaced node's name (what reports and checker messages show), the
    Cast after it gets a fresh one (:meth:`ReplacementBuilder.replace` named it after the node)."""
    scatter = cast_back.inputs[0].producer()
    scatter.name, cast_back.name = cast_back.name, b.names(f"{b.prefix}_cast_back")


class Decline(Exception):
    """Internal: a node is left alone, with this reason (never escapes a pass)."""


def drop_none_reduction(node: ir.Node) -> bool:
    """Remove an explicit ``reduction="none"`` (the default) from a ScatterND; True if removed."""
    if (node.op_type == "ScatterND" and "reduction" in node.attributes
            and attr(node, "reduction") == "none"):
        del node.attributes["reduction"]
        return True
    return False


class ToScatterNDPass(ScatterPass):
    """Every ScatterElements -> ScatterND (same reduction); ScatterND loses ``reduction="none"``."""

    name = "to-scatternd"

    @staticmethod
    def converts(node: ir.Node) -> bool:
        """Whether this pass converts ``node``: a function's scatter whose axis is its attribute
        gets one copy per call binding from SpecializeCallsPass run first (the verb's list)."""
        return node.op_type in ("Scatter", "ScatterElements")

    def run(self, model: ir.Model) -> None:
        # An If with a constant condition around a ScatterElements whose rank is unknown
        # (TorchScript's rank-0 wrapper) becomes its taken branch: the conversion needs the rank.
        for text in inline_ifs_hiding_rank(model, lambda node: node.op_type == "ScatterElements"):
            self.note(text, modified=True)
        infer_missing_shapes(model)
        # A function's values get the dtype and rank they have at its calls while the pass runs
        # (a scatter there may read an Identity of an input, or a reshaped one); none are saved.
        borrowed = annotate_functions_with(model, lambda node: node.op_type == "ScatterElements")
        try:
            self._convert(model)
        finally:
            restore_types(borrowed)

    def _convert(self, model: ir.Model) -> None:
        names = ModelNames(model)
        for node, scope in iter_nodes(model):
            if not is_default_domain(node):
                continue
            if node.op_type == "ScatterND" and drop_none_reduction(node):
                self.rewrote(node, scope, 'explicit reduction="none" dropped (TensorRT 10.0-10.8 '
                                          'rejects it)')
            elif node.op_type == "ScatterElements":
                try:
                    self.rewrote(node, scope, convert_to_scatternd(model, node, scope, names))
                except Decline as reason:
                    self.skip(node, scope, message_of(reason))
            elif node.op_type in ("Scatter", "TensorScatter"):
                first = call("upgrade") if node.op_type == "Scatter" else \
                    call("lower", opset=Placeholder("N"))
                self.skip(node, scope, said(f"{node.op_type} is not converted here: run ", first,
                                            " first (", call("prepare_for_tensorrt"),
                                            " does both)"))
