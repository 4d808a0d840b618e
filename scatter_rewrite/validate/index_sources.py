"""Where a scatter's index values come from (:mod:`.contracts` reads it): the graph inputs
ScatterElements indices are traced to, split at each Concat with the slots each part may take
(:func:`element_leaves`: a :class:`Leaf` per input, or per row of one), the inputs whose values
become components of ScatterND index tuples (:func:`nd_sources`), and the static shapes the
tracing reads (:func:`static_shape`, :func:`inferred_shapes`). The ops index values pass through
unchanged are :mod:`.index_paths`'.
"""

from __future__ import annotations

import dataclasses

import onnx
import onnx_ir as ir

from scatter_rewrite.graph import attr, computes_a_scatter, is_default_domain
from scatter_rewrite.type_inference import serialize_without_weights
from scatter_rewrite.validate.index_paths import (
    CARRIERS, NO_AXIS, bound_outside, carrier_of, map_axis, node_named, selected_by_constant,
    trace_index,
)

__all__ = ["Leaf", "element_leaves", "inferred_shapes", "nd_sources", "static_shape"]


def inferred_shapes(model: ir.Model, input_shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple]:
    """Static shapes of every value (None for a dim inference could not fix), with the graph inputs
    fixed to their concrete sizes."""
    proto = serialize_without_weights(model)
    for value_info in proto.graph.input:
        if value_info.name in input_shapes and value_info.type.HasField("tensor_type"):
            shape = value_info.type.tensor_type.shape
            shape.ClearField("dim")
            for size in input_shapes[value_info.name]:
                shape.dim.add().dim_value = size
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:  # shape inference is best effort here
        return {}
    shapes = {}
    graphs = [inferred.graph]
    while graphs:
        g = graphs.pop()
        for vi in list(g.value_info) + list(g.input) + list(g.output):
            t = vi.type.tensor_type
            if t.HasField("shape"):
                shapes[vi.name] = tuple(
                    d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim
                )
        for init in g.initializer:
            shapes[init.name] = tuple(init.dims)
        for node in g.node:
            for a in node.attribute:
                graphs.extend([a.g] if a.HasField("g") else list(a.graphs))
    return shapes

@dataclasses.dataclass
class Leaf:
    value: ir.Value  # where tracing stopped: a graph input, or not (then no contract)
    steps: list  # from the scatter's indices to value, Concats included
    axis: int | None  # the scatter axis in value's frame (NO_AXIS, or None when not known)
    window: tuple[int, int]  # the slots value's indices may take
    row: int | None = None  # the row of value's axis 0 the indices are (then axis is in its frame)


def _selected_row(steps: list, rank_of) -> tuple[int, int] | None:
    """(row, position in ``steps``) where the traced input's values reach the scatter through one
    row of its axis 0 (a carrier's ``row``), the steps between them keeping values in place (Cast,
    Identity, a body's binding); None otherwise, or for a row out of range."""
    for position in range(len(steps) - 1, -1, -1):
        node, source, _value = steps[position]
        carrier = CARRIERS["Identity"] if node is None else carrier_of(node)
        if carrier is None:
            return None
        row = carrier.row(node) if node is not None else None
        if row is not None:
            shape = rank_of(source)
            if not shape or not isinstance(shape[0], int) or not -shape[0] <= row < shape[0]:
                return None
            return row % shape[0], position
        if not carrier.same_shape:
            return None
    return None


def element_leaves(
    value: ir.Value,
    axis: int | None,
    window: tuple[int, int],
    unique: bool,
    graph_inputs: set[int],
    outer: dict[int, list],
    rank_of,
    problems: list[str],
    before: list | None = None,
) -> list[Leaf]:
    """Where ScatterElements indices ``value`` come from, split at each Concat, with the slots each
    part may take: all of ``window`` for a Concat along another axis than the scatter ``axis``, a
    share of it (in order, sized by the part's length, so the parts' slots are disjoint) for one
    along it when ``unique``. What keeps the targets from being unique goes to ``problems``."""
    steps: list = []
    origin = trace_index(value, outer, steps=steps)
    if origin is None:
        return []
    here = map_axis(steps, axis, rank_of)
    path = list(before or []) + steps
    concat = origin.producer()
    if id(origin) in graph_inputs:
        return [_input_leaf(origin, path, steps, axis, here, window, rank_of)]
    if concat is None or concat.op_type != "Concat" or not is_default_domain(concat):
        return [Leaf(origin, path, here, window)]
    parts = [part for part in concat.inputs if part is not None]
    shares = _concat_shares(concat, origin, parts, here, window, unique, rank_of, problems)
    leaves_per_part = [
        element_leaves(
            part,
            here,
            w,
            unique,
            graph_inputs,
            outer,
            rank_of,
            problems,
            path + [(concat, part, origin)],
        )
        for part, w in zip(parts, shares or [window] * len(parts))
    ]
    leaves = [leaf for part_leaves in leaves_per_part for leaf in part_leaves]
    if shares is not None:
        _check_shared_parts(concat, leaves, leaves_per_part, window, graph_inputs, problems)
    return leaves


def _input_leaf(origin: ir.Value, path: list, steps: list, axis: int | None, here: int | None,
                window: tuple[int, int], rank_of) -> Leaf:
    """The leaf of a graph input the indices come from: in the frame of the one row of its axis 0
    they reach the scatter through, when they do (:func:`_selected_row`)."""
    selected = _selected_row(steps, rank_of)
    if selected is None:
        return Leaf(origin, path, here, window)
    row, position = selected
    # The scatter axis in the row's frame: mapped as far as the Gather's output, which is the
    # row with the positions' axes (of size 1) in front.
    here = map_axis(steps[:position], axis, rank_of)
    picked = selected_by_constant(steps[position][0]).ndim
    if here is not None and here != NO_AXIS:
        here = NO_AXIS if here < picked else here - picked
    return Leaf(origin, path, here, window, row)


def _concat_shares(concat: ir.Node, origin: ir.Value, parts: list, here: int | None,
                   window: tuple[int, int], unique: bool, rank_of,
                   problems: list[str]) -> list[tuple[int, int]] | None:
    """For a Concat along the scatter axis (``here``) when ``unique``: each part's share of
    ``window`` (in order, sized by the part's length); None where every part takes the whole
    window (another axis, or shares that cannot be made: the reason goes to ``problems``)."""
    cat_axis = None
    if unique and here is not None and here != NO_AXIS:
        shape = rank_of(origin)
        cat_axis = (
            attr(concat, "axis") % len(shape)
            if shape and attr(concat, "axis") is not None
            else None
        )
    if unique and (here is None or (here != NO_AXIS and cat_axis is None)):
        problems.append(f"the scatter axis cannot be followed to {node_named(concat)}")
        return None
    if cat_axis is None or here != cat_axis:
        return None
    lengths = [(rank_of(part) or (None,) * (cat_axis + 1))[cat_axis] for part in parts]
    lo, hi = window
    if None in lengths:
        problems.append(f"{node_named(concat)} along the scatter axis has parts of unknown "
                        "length")
        return None
    if sum(lengths) > hi - lo:
        problems.append(
            f"{node_named(concat)} puts {sum(lengths)} indices along the scatter axis into "
            f"{hi - lo} slots"
        )
        return None
    slack, shares = hi - lo - sum(lengths), []
    for i, length in enumerate(lengths):
        size = length + slack // len(parts) + (i < slack % len(parts))
        shares.append((lo, lo + size))
        lo += size
    return shares


def _check_shared_parts(concat: ir.Node, leaves: list[Leaf], leaves_per_part: list[list[Leaf]],
                        window: tuple[int, int], graph_inputs: set[int],
                        problems: list[str]) -> None:
    """The parts of a Concat whose shares of the slots make the column unique: each a graph
    input, none in two parts (else every leaf takes the whole ``window`` again)."""
    if any(id(leaf.value) not in graph_inputs for leaf in leaves):
        problems.append(
            f"{node_named(concat)} along the scatter axis has a part that is not a graph input"
        )
    per_part = [{id(leaf.value) for leaf in part_leaves} for part_leaves in leaves_per_part]
    if sum(map(len, per_part)) != len(set().union(*per_part)):
        problems.append(f"{node_named(concat)} along the scatter axis has an input in two "
                        "parts")
        for leaf in leaves:  # its slot shares would not meet: back to the whole window
            leaf.window = window


def nd_sources(
    value: ir.Value,
    first: int,
    width: int,
    graph_inputs: set[int],
    outer: dict[int, list],
    shape_of,
    before: list | None = None,
) -> list[tuple[ir.Value, int, int, list]]:
    """(graph input, first component, number of components, steps) for every input whose values
    become components ``first .. first + width - 1`` of ScatterND index tuples ``value[...,
    :width]``: traced like any index, and split at a Concat along the last axis, whose inputs cover
    successive components. The steps (see :func:`trace_index`) go from the scatter to the input."""
    steps = list(before or [])
    origin = trace_index(value, outer, width, shape_of, steps)
    if origin is None:
        return []
    if id(origin) in graph_inputs:
        return [(origin, first, width, steps)]
    concat = origin.producer()
    shape = shape_of(origin)
    if concat is None or concat.op_type != "Concat" or not is_default_domain(concat) or not shape:
        return []
    if attr(concat, "axis") not in (-1, len(shape) - 1):
        return []
    found = []
    for part in concat.inputs:
        part_shape = shape_of(part) if part is not None else None
        if not part_shape or part_shape[-1] is None:
            break  # the components of the parts after it are unknown
        found += nd_sources(
            part,
            first,
            part_shape[-1],
            graph_inputs,
            outer,
            shape_of,
            steps + [(concat, part, origin)],
        )
        first += part_shape[-1]
    return found


def static_shape(
    value: ir.Value, shapes, outer: dict[int, list], partial: bool = False
) -> tuple | None:
    """``value``'s static shape: declared, else inferred (``shapes()``, computed on first need).
    With ``partial``, a shape of known rank with unknown dims (None) rather than no shape."""
    while value is not None:
        declared = (
            None
            if value.shape is None
            else tuple(d if isinstance(d, int) else None for d in value.shape)
        )
        if declared is not None and None not in declared:
            return declared
        inferred = shapes().get(value.name)
        if inferred is not None and None not in inferred:
            return inferred
        if partial and (inferred or declared):
            return inferred or declared
        producer = value.producer()
        same_shape = producer is not None and (
            computes_a_scatter(producer) or getattr(carrier_of(producer), "same_shape", False))
        if same_shape and producer.inputs:
            # A scatter's output has its data's shape (a Cast's, its input's): what shape inference
            # cannot say inside a function or a Loop body (a chain of scatters there) that input
            # may.
            value = producer.inputs[0]
            continue
        if producer is not None and producer.op_type == "Constant" and is_default_domain(producer):
            tensor = producer.attributes.get(
                "value"
            )  # (in a function, inference does not reach it)
            if (
                isinstance(tensor, ir.Attr)
                and tensor.type == ir.AttributeType.TENSOR
                and tensor.value is not None
            ):
                return tuple(tensor.value.shape.numpy())
        value = bound_outside(value, outer)
    return None
