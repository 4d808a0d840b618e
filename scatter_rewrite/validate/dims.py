"""Sizes for the symbolic dimensions of a model's inputs that its ops can take.

Validation feeds the original model generated inputs; a symbolic dimension (``length``, or a dim
with no name at all) needs a size. One small size for all (4) is too short for a convolution
front-end (Wav2Vec2's first Conv1d has a kernel of 10), wrong for a Reshape to a constant shape, and
unequal to a constant dim it is added to. The sizes are chosen from what the model says:

- the sizes a pass fixes (``dim_sizes``), never changed; one name, one size (inputs sharing a dim
  name share its size);
- the example sizes the model carries: a static dim in a value_info or graph output where ONNX shape
  inference (with the names) puts an input's dim is that dim's starting size;
- what its ops need, judged on the concrete shapes ONNX shape inference derives from the candidate
  sizes (:class:`Need`): a Conv/ConvInteger/pooling window fits its input (kernel, dilations, pads,
  ``auto_pad``), a ConvTranspose's pads leave an output; a Reshape to a constant shape gets a count it can take (exactly, or a multiple of
  the known part where there is a -1); a constant Split's sizes add up to its axis (a multiple of
  the outputs without sizes); a Gather by constant positions and a Slice with constant bounds find the
  positions they name; dims that broadcast, or meet in a MatMul or a Concat, are equal (or 1).

A need that fails moves the symbolic dims it depends on, found by doubling each and seeing which
changes what the need looks at: doubled until a minimum is met; solved where the need asks for an
exact count or a multiple (what it looks at is taken as linear in the dim). Needs on values whose
shape inference cannot say are left to the trial run (:func:`.inputs.plan_validation` with
:mod:`.trial`), which doubles the free dims and refits while the original fails in onnxruntime.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import numpy as np
import onnx
import onnx_ir as ir

from scatter_rewrite.type_inference import infer_with_bounded_data_prop, serialize_without_weights
from scatter_rewrite.limits import DEFAULT_DOMAINS

__all__ = ["DEFAULT_SIZE", "DimPlan", "fit_dims"]

DEFAULT_SIZE = 4  # a symbolic dim nothing says more about
_ROUNDS = 48  # needs fixed, one at a time, before the sizes are taken as they are
_LARGEST = 1 << 16  # no dim is grown past this: a need asking more is left alone
_BROADCASTING = {
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Where", "Equal", "Less",
    "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "BitShift", "PRelu",
}
_SLICE_BOUND = 1024  # a Slice bound past this is a cap ("to the end"), not a size to reach
_WINDOWS = ("Conv", "ConvInteger", "ConvTranspose", "MaxPool", "AveragePool", "LpPool")

Shapes = dict[str, tuple]


@dataclasses.dataclass(frozen=True)
class Need:
    """What a node needs of a quantity of the concrete shapes (``look``: the quantity, None where
    shape inference cannot say): at least ``value`` ("min"), exactly ("exact"), or a multiple of it
    ("multiple")."""

    what: str  # for notes: "Conv 'conv0' window on axis 2"
    kind: str
    value: int
    look: Callable[[Shapes], int | None]

    @property
    def said(self) -> str:
        if self.value == 0 and self.kind != "multiple":  # (a difference: ``what`` says it all)
            return self.what
        kind = {"min": "at least ", "exact": "", "multiple": "a multiple of "}[self.kind]
        return f"{self.what} needs {kind}{self.value}"

    def met(self, shapes: Shapes) -> bool | None:
        q = self.look(shapes)
        if q is None:
            return None
        if self.kind == "min":
            return q >= self.value
        if self.kind == "exact":
            return q == self.value
        return q % self.value == 0 and q > 0


@dataclasses.dataclass
class DimPlan:
    """The symbolic dims of a model's inputs, grouped by name (an unnamed dim is a group of its own,
    ``input[axis]``), and the size each gets."""

    rank_unknown: set[str]  # inputs without a declared shape: fed [DEFAULT_SIZE]
    declared: dict[str, tuple]  # input -> its dims: int, or the group key
    sizes: dict[str, int]
    fixed: set[str]  # groups whose size a pass fixed
    notes: list[str] = dataclasses.field(default_factory=list)
    unmet: list[str] = dataclasses.field(default_factory=list)  # needs no size met, said

    @property
    def free(self) -> list[str]:
        return [k for k in self.sizes if k not in self.fixed]

    def shapes(self, sizes: dict[str, int] | None = None) -> dict[str, tuple[int, ...]]:
        sizes = self.sizes if sizes is None else sizes
        shapes = {name: tuple(d if isinstance(d, int) else sizes[d] for d in dims)
                  for name, dims in self.declared.items()}
        return shapes | {name: (DEFAULT_SIZE,) for name in self.rank_unknown}

    def describe(self, sizes: dict[str, int] | None = None) -> str:
        sizes = self.sizes if sizes is None else sizes
        return ", ".join(f"{k}={sizes[k]}" for k in self.free)


def declared_dims(graph_inputs: list[ir.Value], dim_sizes: dict[str, int]) -> DimPlan:
    declared, sizes, unknown = {}, {}, set()
    for v in graph_inputs:
        if v.shape is None:
            unknown.add(v.name)
            continue
        dims = []
        for axis, d in enumerate(v.shape):
            if isinstance(d, int):
                dims.append(d)
                continue
            key = str(d) if d is not None and d.value is not None else f"{v.name}[{axis}]"
            sizes.setdefault(key, dim_sizes.get(key, DEFAULT_SIZE))
            dims.append(key)
        declared[v.name] = tuple(dims)
    return DimPlan(unknown, declared, sizes, {k for k in sizes if k in dim_sizes})


def fit_dims(model: ir.Model, graph_inputs: list[ir.Value],
             dim_sizes: dict[str, int] | None = None) -> tuple[DimPlan, Callable]:
    """The dims of ``graph_inputs`` with sizes that meet the needs of ``model``'s ops where shape
    inference can tell, and a function that refits them from given starting sizes (the trial run
    grows them)."""
    plan = declared_dims(graph_inputs, dict(dim_sizes or {}))
    if not plan.free:
        return plan, lambda sizes: sizes
    proto = serialize_without_weights(model)
    del proto.graph.value_info[:]  # (the export's claims: inference says what the sizes give)
    for start, size in _example_sizes(model, proto, plan).items():
        plan.sizes[start] = size
    needs = _needs(proto)

    @functools.lru_cache(maxsize=64)
    def inferred(sizes: tuple) -> Shapes:
        return _concrete_shapes(proto, plan.shapes(dict(sizes)))

    def infer(sizes: dict[str, int]) -> Shapes:  # (a move is often the doubling just inferred)
        return inferred(tuple(sizes.items()))

    def refit(sizes: dict[str, int]) -> dict[str, int]:
        return _meet(needs, dict(sizes), plan.free, infer, plan.unmet)

    plan.sizes = refit(plan.sizes)
    return plan, refit


def _with_input_dims(proto: onnx.ModelProto, dims: dict[str, tuple]) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for vi in copy.graph.input:
        if vi.name in dims and vi.type.HasField("tensor_type"):
            shape = vi.type.tensor_type.shape
            shape.ClearField("dim")
            for d in dims[vi.name]:
                if isinstance(d, int):
                    shape.dim.add().dim_value = d
                else:
                    shape.dim.add().dim_param = d
    return copy


def _concrete_shapes(proto: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> Shapes:
    return infer_with_bounded_data_prop(_with_input_dims(proto, shapes)) or {}


def _example_sizes(model: ir.Model, proto: onnx.ModelProto, plan: DimPlan) -> dict[str, int]:
    """The sizes the model's own shapes give its free dims: where symbolic shape inference puts an
    input's dim name and the export declared a static dim (a value_info or an output traced on an
    example), the first such size of each dim."""
    named = _with_input_dims(proto, plan.declared)
    for output in named.graph.output:  # (declared: what is compared with, not inferred)
        if output.type.HasField("tensor_type"):
            output.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(named)
    except Exception:  # best effort
        return {}
    symbolic = {vi.name: [d.dim_param or None for d in vi.type.tensor_type.shape.dim]
                for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    found: dict[str, int] = {}
    for value in model.graph:
        for out in value.outputs:
            if out.shape is None or out.name not in symbolic:
                continue
            for d, param in zip(out.shape, symbolic[out.name]):
                if isinstance(d, int) and d > 0 and param in plan.sizes and param not in plan.fixed:
                    found.setdefault(param, d)
    if found:
        plan.notes.append("sizes from the model's own shapes: "
                          + ", ".join(f"{k}={n}" for k, n in found.items()))
    return found


def _meet(needs: list[Need], sizes: dict[str, int], free: list[str], infer,
          unmet: list[str]) -> dict[str, int]:
    """``sizes`` moved, one failing need at a time, until every need shape inference can judge is
    met (or left: one no free dim moves, or that asks more than :data:`_LARGEST`). Of the moves
    that serve a need, the first that keeps every need met so far met (a dim a Reshape fixed is
    not the one moved to equal another)."""
    left: set[int] = set()
    shapes = infer(sizes)
    seen = {tuple(sizes.items())}
    for _ in range(_ROUNDS):
        failing = next((i for i, need in enumerate(needs)
                        if i not in left and need.met(shapes) is False), None)
        if failing is None:
            return sizes
        met = [need for need in needs if need.met(shapes)]
        first = None
        for moved in _moves_for(needs[failing], shapes, sizes, free, infer):
            if tuple(moved.items()) in seen:
                continue  # (back where another need moved from: the two cannot both be met)
            moved_shapes = infer(moved)
            first = first or (moved, moved_shapes)
            if all(need.met(moved_shapes) is not False for need in met):
                break
        else:
            moved = None
        if moved is None and first is None:
            left.add(failing)
            note = f"{needs[failing].said}: no input size found for it"
            if note not in unmet:  # (each refit from grown sizes meets it again)
                unmet.append(note)
            continue
        sizes, shapes = (moved, moved_shapes) if moved is not None else first
        seen.add(tuple(sizes.items()))
    return sizes


def _moves_for(need: Need, shapes: Shapes, sizes: dict[str, int], free: list[str], infer):
    """``sizes`` with one free dim ``need`` depends on moved toward meeting it, for each such
    dim."""
    now = need.look(shapes)
    for key in free:
        n = sizes[key]
        if 2 * n > _LARGEST:
            continue
        doubled = need.look(infer(sizes | {key: 2 * n}))
        if doubled is None or doubled == now:
            continue
        if now is None or (need.kind == "min" and doubled > now):
            yield sizes | {key: 2 * n}
            continue
        if need.kind == "min":
            continue
        slope, offset = (doubled - now) / n, now - (doubled - now)  # q(m) ~ slope * m + offset
        if need.kind == "exact":
            m = (need.value - offset) / slope
            if 1 <= m <= _LARGEST and m == int(m) and int(m) != n:
                yield sizes | {key: int(m)}
            continue
        for m in range(n + 1, n + need.value + 1):
            q = slope * m + offset
            if q > 0 and q == int(q) and int(q) % need.value == 0:
                yield sizes | {key: m}
                break


# What each op needs (on the main graph: a body's ops see sizes the main graph gives them).

def _needs(proto: onnx.ModelProto) -> list[Need]:
    constants = _small_int_constants(proto.graph)
    needs: list[Need] = []
    for index, node in enumerate(proto.graph.node):
        if node.domain not in DEFAULT_DOMAINS:
            continue
        label = f"{node.op_type} {node.name!r}" if node.name else f"{node.op_type} #{index}"
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        for make in _NEED_MAKERS.get(node.op_type, ()):
            needs += make(node, label, attrs, constants)
    return needs


@dataclasses.dataclass
class _Constants:
    """A graph's small integer constants (initializers and Constant nodes) and its initializers'
    dims, by name."""

    ints: dict[str, np.ndarray]
    dims: dict[str, tuple[int, ...]]

    def get(self, name: str) -> np.ndarray | None:
        return self.ints.get(name)


def _small_int_constants(graph: onnx.GraphProto) -> _Constants:
    found: dict[str, np.ndarray] = {}
    for init in graph.initializer:
        if init.data_location != onnx.TensorProto.EXTERNAL and init.data_type in _INT_TYPES:
            found[init.name] = onnx.numpy_helper.to_array(init)
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS and node.attribute:
            a = node.attribute[0]
            if a.name == "value" and a.t.data_type in _INT_TYPES \
                    and a.t.data_location != onnx.TensorProto.EXTERNAL:
                found[node.output[0]] = onnx.numpy_helper.to_array(a.t)
            elif a.name in ("value_int", "value_ints"):
                found[node.output[0]] = np.array(onnx.helper.get_attribute_value(a), np.int64)
    return _Constants(found, {init.name: tuple(init.dims) for init in graph.initializer})


_INT_TYPES = {onnx.TensorProto.INT64, onnx.TensorProto.INT32}


def _dim(value: str, axis: int) -> Callable[[Shapes], int | None]:
    def look(shapes: Shapes) -> int | None:
        shape = shapes.get(value)
        if not shape or not -len(shape) <= axis < len(shape):
            return None
        return shape[axis]
    return look


def _window_needs(node, label, attrs, constants) -> list[Need]:
    """Conv/pooling: every spatial axis of the input at least the dilated kernel less the pads
    (any size with ``auto_pad`` SAME, which pads to fit); ConvTranspose: long enough that its pads
    leave an output. A Conv without ``kernel_shape`` has its weight's spatial dims (an
    initializer's, static)."""
    if (_text(attrs.get("auto_pad", "NOTSET")) in ("SAME_UPPER", "SAME_LOWER")
            or "output_shape" in attrs):
        return []
    kernel = attrs.get("kernel_shape")
    if kernel is None and len(node.input) > 1:
        kernel = constants.dims.get(node.input[1], (None, None))[2:]
    if not kernel:
        return []
    rank = len(kernel)
    dilations = list(attrs.get("dilations", [1] * rank))
    pads = list(attrs.get("pads", [0] * 2 * rank))
    if _text(attrs.get("auto_pad", "NOTSET")) == "VALID":
        pads = [0] * 2 * rank
    strides = list(attrs.get("strides", [1] * rank))
    extra = list(attrs.get("output_padding", [0] * rank))
    needs = []
    for i, (k, d) in enumerate(zip(kernel, dilations)):
        trimmed = pads[i] + pads[i + rank]
        if node.op_type == "ConvTranspose":  # out = s (in - 1) + extra + d (k - 1) + 1 - pads
            least = 1 + max(-(-(trimmed - extra[i] - d * (k - 1)) // strides[i]), 0)
        else:  # out = (in + pads - d (k - 1) - 1) // s + 1
            least = d * (k - 1) + 1 - trimmed
        if least > 1:
            needs.append(Need(f"{label} window on axis {i + 2}", "min", least,
                              _dim(node.input[0], i + 2)))
    return needs


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _reshape_needs(node, label, attrs, constants) -> list[Need]:
    """A Reshape to a constant shape: the input's count, less the dims a 0 copies, is the product
    of the rest (a multiple of it where there is a -1)."""
    target = constants.get(node.input[1]) if len(node.input) > 1 else None
    if target is None:
        return []
    target = [int(t) for t in target.reshape(-1)]
    copies = [] if attrs.get("allowzero", 0) else [i for i, t in enumerate(target) if t == 0]
    known = math.prod(t for i, t in enumerate(target) if i not in copies and t != -1)
    x = node.input[0]

    def look(shapes: Shapes) -> int | None:
        shape = shapes.get(x)
        if shape is None or any(d is None for d in shape) or any(i >= len(shape) for i in copies):
            return None
        return math.prod(d for i, d in enumerate(shape) if i not in copies)
    if known <= 0:
        return []
    kind = "multiple" if -1 in target else "exact"
    return [Need(f"{label} to {target} (the count it reshapes)", kind, known, look)]


def _split_needs(node, label, attrs, constants) -> list[Need]:
    axis = attrs.get("axis", 0)
    split = attrs.get("split")
    if split is None and len(node.input) > 1 and node.input[1]:
        split = constants.get(node.input[1])
    if split is not None:
        return [Need(f"{label} into {list(map(int, split))}", "exact",
                     int(np.sum(split)), _dim(node.input[0], axis))]
    if "num_outputs" in attrs:  # (opset 18: the last part may be smaller)
        return [Need(f"{label} into {attrs['num_outputs']}", "min", attrs["num_outputs"],
                     _dim(node.input[0], axis))]
    return [Need(f"{label} into {len(node.output)} equal parts", "multiple",
                 len(node.output), _dim(node.input[0], axis))]


def _gather_needs(node, label, attrs, constants) -> list[Need]:
    positions = constants.get(node.input[1]) if len(node.input) > 1 else None
    if positions is None or positions.size == 0:
        return []
    least = max(int(positions.max()) + 1, -int(positions.min()))
    return [Need(f"{label} of position(s) up to {least - 1}", "min", least,
                 _dim(node.input[0], attrs.get("axis", 0)))]


def _slice_needs(node, label, attrs, constants) -> list[Need]:
    """Constant bounds with step 1 (the exporters' ``x[:, a:b]``, ``x[:, -k:]``): the axis holds
    what they name, so the slice is not cut short (an end past :data:`_SLICE_BOUND` is "to the end",
    which any size takes, an empty slice included: a short slice runs, and what a short one breaks
    downstream is that op's own need)."""
    if "starts" in attrs:  # (opset < 10)
        starts, ends, axes, steps = attrs["starts"], attrs["ends"], attrs.get("axes"), None
    else:
        got = [constants.get(n) if n else None for n in list(node.input[1:5]) + [""] * 4][:4]
        if any(n and g is None for n, g in zip(node.input[1:5], got)):
            return []  # (a bound, an axis or a step known only at run time)
        starts, ends, axes, steps = got
    starts, ends = [int(s) for s in np.ravel(starts)], [int(e) for e in np.ravel(ends)]
    axes = list(range(len(starts))) if axes is None else [int(a) for a in np.ravel(axes)]
    steps = [1] * len(starts) if steps is None else [int(s) for s in np.ravel(steps)]
    needs = []
    for start, end, axis, step in zip(starts, ends, axes, steps):
        if step != 1 or abs(start) > _SLICE_BOUND:
            continue
        least = -start if start < 0 else end if 0 < end <= _SLICE_BOUND else 0
        if least > 1:
            needs.append(Need(f"{label} of [{start}:{end}] on axis {axis}", "min", least,
                              _dim(node.input[0], axis)))
    return needs


def _equal(what: str, a: tuple[str, int], b: tuple[str, int]) -> Need:
    """Two dims that must be equal, or one of them 1 (broadcasting): looked at as their
    difference, 0 when met."""
    da, db = _dim(*a), _dim(*b)

    def look(shapes: Shapes) -> int | None:
        x, y = da(shapes), db(shapes)
        if x is None or y is None:
            return None
        return 0 if x == 1 or y == 1 else x - y
    return Need(what, "exact", 0, look)


def _broadcast_needs(node, label, attrs, constants) -> list[Need]:
    """Every pair of inputs, dims aligned from the right. Ranks come from the shapes; a need per
    pair and offset from the right, for up to 8 axes."""
    names = [n for n in node.input if n]
    needs = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            for k in range(1, 9):
                needs.append(_equal(f"{label} needs {a!r} and {b!r} to broadcast", (a, -k),
                                    (b, -k)))
    return needs


def _matmul_needs(node, label, attrs, constants) -> list[Need]:
    a, b = node.input[0], node.input[1]

    def look(shapes: Shapes) -> int | None:
        sa, sb = shapes.get(a), shapes.get(b)
        if not sa or not sb:
            return None
        x, y = sa[-1], sb[-2] if len(sb) > 1 else sb[0]
        return None if x is None or y is None else x - y
    return [Need(f"{label} needs equal inner dims", "exact", 0, look)]


def _concat_needs(node, label, attrs, constants) -> list[Need]:
    axis = attrs.get("axis", 0)
    first = node.input[0]
    needs = []
    for other in node.input[1:]:
        for k in range(8):
            def look(shapes: Shapes, other=other, k=k) -> int | None:
                sa, sb = shapes.get(first), shapes.get(other)
                if not sa or not sb or k >= len(sa) or len(sa) != len(sb) or k == axis % len(sa):
                    return None
                x, y = sa[k], sb[k]
                return None if x is None or y is None else x - y
            needs.append(Need(f"{label} needs equal inputs on axis {k}", "exact", 0, look))
    return needs


def _scatter_needs(node, label, attrs, constants) -> list[Need]:
    """A ScatterElements (or Scatter) with reduction none: room along its axis for as many distinct
    indices as it has (the contract: unique there)."""
    if _text(attrs.get("reduction", "none")) != "none" or len(node.input) < 2:
        return []
    axis, data, indices = attrs.get("axis", 0), node.input[0], node.input[1]
    slots, picks = _dim(data, axis), _dim(indices, axis)

    def look(shapes: Shapes) -> int | None:
        have, want = slots(shapes), picks(shapes)
        return None if have is None or want is None else have - want
    return [Need(f"{label} needs room for unique indices on axis {axis}", "min", 0, look)]


_NEED_MAKERS = {
    "ScatterElements": (_scatter_needs,),
    "Scatter": (_scatter_needs,),
    **{op: (_window_needs,) for op in _WINDOWS},
    "Reshape": (_reshape_needs,),
    "Split": (_split_needs,),
    "Gather": (_gather_needs,),
    "Slice": (_slice_needs,),
    "MatMul": (_matmul_needs,),
    "Concat": (_concat_needs,),
    **{op: (_broadcast_needs,) for op in _BROADCASTING},
}
