"""Borrow ONNX shape inference's dtypes and shapes for as long as a pass decides, then give them
back.

Exporters often record no type for intermediate values (TorchScript writes no value_info) and a
function's values are untyped by design, yet a pass needs ranks and dtypes to decide. These helpers
set what ONNX shape inference finds on the values that lack it and return what they changed, so
:func:`restore_types` leaves every value as it came (nothing is added to the saved model).
Inference is best effort: when it fails, nothing is borrowed and the caller only declines more.
"""

from __future__ import annotations

import math

import onnx
import onnx_ir as ir

from scatter_rewrite.graph import body_nodes, function_calls, iter_scopes
from scatter_rewrite.limits import DEFAULT_DOMAINS

__all__ = [
    "annotate_function_types", "annotate_functions_with", "borrow_inferred_types",
    "correct_contradicted_shapes", "DATA_PROP_ELEMENTS", "has_control_flow",
    "infer_with_bounded_data_prop", "inferred_tensor_types", "restore_types",
    "serialize_without_weights", "shape_of", "weightless_copy",
]

Borrowed = list[tuple[ir.Value, tuple]]  # (value, (dtype it had, shape it had))


SHAPE_ONLY_BYTES = 4096  # bigger in-memory initializers reach shape inference as dtype + dims only


def serialize_without_weights(model: ir.Model) -> onnx.ModelProto:
    """``model`` as a ModelProto for shape inference or a structural copy, without copying its
    weights.

    External weights serialize as references (never read). In-memory initializers and Constant
    values over :data:`SHAPE_ONLY_BYTES` are swapped for an external reference to a file that does not exist
    while serializing (shape inference needs only dtype and dims; data propagation only reads small
    shape tensors), then restored: a model loaded with inline weights is not copied three times
    (proto, bytes for the C++ side, and back).
    """
    swapped: list[tuple[ir.Value, ir.TensorProtocol]] = []
    swapped_constants: list[tuple[ir.Node, ir.Attr]] = []
    try:
        for graph in model.graphs():
            for value in graph.initializers.values():
                tensor = value.const_value
                if _is_big_in_memory(tensor):
                    swapped.append((value, tensor))
                    value.const_value = _shape_only(tensor, value.name)
            # (a Constant node's value too: TorchScript writes torch.zeros(N, F) as one)
            for node in graph:
                value_attr = node.attributes.get("value") if node.op_type == "Constant" else None
                if (value_attr is not None and not value_attr.is_ref()
                        and value_attr.type == ir.AttributeType.TENSOR
                        and _is_big_in_memory(value_attr.value)):
                    swapped_constants.append((node, value_attr))
                    node.attributes["value"] = ir.AttrTensor(
                        "value", _shape_only(value_attr.value, node.outputs[0].name))
        return ir.serde.serialize_model(model)
    finally:
        for value, tensor in swapped:
            value.const_value = tensor
        for node, value_attr in swapped_constants:
            node.attributes["value"] = value_attr


def _is_big_in_memory(tensor: ir.TensorProtocol | None) -> bool:
    return (tensor is not None and not isinstance(tensor, ir.ExternalTensor)
            and tensor.nbytes > SHAPE_ONLY_BYTES)


def _shape_only(tensor: ir.TensorProtocol, name: str | None) -> ir.ExternalTensor:
    """A reference to a file that does not exist, of ``tensor``'s dtype and shape."""
    return ir.ExternalTensor("scatter-rewrite-shape-only", 0, tensor.nbytes, tensor.dtype,
                             shape=tensor.shape, name=name or tensor.name or "")


def weightless_copy(model: ir.Model) -> ir.Model:
    """A copy of ``model`` to decide on (inline Ifs, trace, infer), without its big weights. Its
    external tensors are found where the model's are (their file names are relative to its
    folder, not to the working directory)."""
    copy = ir.serde.deserialize_model(serialize_without_weights(model))
    folders = {v.const_value.base_dir for v in model.graph.initializers.values()
               if isinstance(v.const_value, ir.ExternalTensor)}
    if len(folders) == 1:
        ir.external_data.set_base_dir(copy.graph, folders.pop())
    return copy


def inferred_tensor_types(model: ir.Model, data_prop: bool = False
                          ) -> dict[ir.Value, onnx.TypeProto.Tensor] | None:
    """ONNX shape inference's tensor type of every node output of the main graph and its subgraphs
    and of every subgraph input (a Loop body's carried values, typed from the Loop's inputs),
    keyed by the value itself; None when inference fails. (Not by name: the branches of an If may
    each define a value of one name, and a value would take the other's type, its rank with it.)

    Weights are kept out of it: a main-graph initializer over :data:`SHAPE_ONLY_BYTES` goes in as a
    graph input of its dtype and dims. The small ones go in with their values, external or not:
    inference reads Reshape's shape, Unsqueeze's axes and Range's bounds, and without them it fails
    for the whole graph (the values after them stayed untyped, and opset moves refused Add-14 or
    Expand-13 after a Reshape by an initializer). An initializer that is also a graph input goes in
    as that input, by its type only (:func:`_overridable_as_inputs`). ``data_prop``: inference
    also computes the small integer values shapes are made of (``Shape -> Gather -> Concat``)."""
    proto = _inference_proto(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=data_prop)
    except Exception:  # best effort
        return None
    found: dict[ir.Value, onnx.TypeProto.Tensor] = {}
    # Each graph beside its inferred copy: the copy is the graph serialized, node for node.
    pairs = [(model.graph, inferred.graph)]
    while pairs:
        graph, g = pairs.pop()
        nodes = list(graph)
        if len(nodes) != len(g.node):
            continue
        types = {vi.name: vi.type.tensor_type for vi in [*g.value_info, *g.output]
                 if vi.type.HasField("tensor_type")}
        if graph is not model.graph:
            # A body's inputs, which inference types from its node's inputs (a Loop's carried
            # values, a Scan's slices): exporters leave them untyped (dynamo's EmbeddingBag Loop).
            found.update((v, vi.type.tensor_type) for v, vi in zip(graph.inputs, g.input)
                         if vi.type.HasField("tensor_type") and len(graph.inputs) == len(g.input))
        for node, proto_node in zip(nodes, g.node):
            found.update((v, types[v.name]) for v in node.outputs if v.name in types)
            for a in proto_node.attribute:
                subgraphs = node.attributes.get(a.name)
                if a.type == onnx.AttributeProto.GRAPH:
                    pairs.append((subgraphs.value, a.g))
                elif a.type == onnx.AttributeProto.GRAPHS:
                    pairs.extend(zip(subgraphs.value, a.graphs))
    return found


def _inference_proto(model: ir.Model) -> onnx.ModelProto:
    """The copy of ``model`` :func:`inferred_tensor_types` infers on (see there)."""
    proto = serialize_without_weights(model)
    _overridable_as_inputs(proto)
    small_external = {name: value.const_value for name, value in model.graph.initializers.items()
                      if isinstance(value.const_value, ir.ExternalTensor)
                      and value.const_value.nbytes <= SHAPE_ONLY_BYTES}
    kept = []
    for init in proto.graph.initializer:
        # small: serialize_without_weights kept its bytes
        if init.data_location != onnx.TensorProto.EXTERNAL:
            kept.append(init)
        elif init.name in small_external:
            init.raw_data = small_external[init.name].tobytes()
            del init.external_data[:]
            init.data_location = onnx.TensorProto.DEFAULT
            kept.append(init)
        else:
            proto.graph.input.append(
                onnx.helper.make_tensor_value_info(init.name, init.data_type, init.dims)
            )
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(kept)
    return proto


def _overridable_as_inputs(proto: onnx.ModelProto) -> None:
    """Drop the main graph's initializers that are also graph inputs from this copy for inference:
    callers may override them, and a shape inferred from the default (a Reshape's, which an opset
    move then split into constant chunks) holds for that default only. The graph input keeps its
    type."""
    inputs = {i.name for i in proto.graph.input}
    kept = [init for init in proto.graph.initializer if init.name not in inputs]
    if len(kept) < len(proto.graph.initializer):
        del proto.graph.initializer[:]
        proto.graph.initializer.extend(kept)


def shape_of(t: onnx.TypeProto.Tensor) -> ir.Shape | None:
    if not t.HasField("shape"):
        return None
    return ir.Shape(
        [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]
    )


def borrow_inferred_types(model: ir.Model, sharpen: bool = False) -> Borrowed:
    """Set ONNX-inferred dtype/shape on main-graph and subgraph values that lack them; return
    (value, (dtype it had, shape it had)) for each, for :func:`restore_types`.

    ``sharpen``: also give a static size to every dim that is symbolic or unknown (declared or
    inferred) where ONNX inference with data propagation, kept to small values
    (:func:`infer_with_bounded_data_prop`), finds one: TorchScript declares the values out of its
    rank-0 If wrapper with dims named after the If (``Identity_output_0_dim_1``), and the zeros it
    scatters into come from ``ConstantOfShape(Concat(..., Gather(Shape(updates), 1)))``; the
    GNN row layout needs to see that the data's row width is the updates' (64, not a name)."""
    found = inferred_tensor_types(model)
    if not found:
        return []
    static = (infer_with_bounded_data_prop(_inference_proto(model)) or {}) if sharpen else {}
    borrowed = []
    for scope in iter_scopes(model):
        if scope.is_function:
            continue
        inputs = [] if scope.body is model.graph else list(scope.body.inputs)
        for value in inputs + [v for node in scope.body for v in node.outputs]:
            t = found.get(value)
            lacks = t is not None and (value.dtype is None or value.shape is None)
            shape = value.shape
            if shape is None and t is not None:
                shape = shape_of(t)
            sharper = _sharpened(shape, static.get(value.name))
            if not lacks and sharper is None:
                continue
            borrowed.append((value, (value.dtype, value.shape)))
            if value.dtype is None and t is not None and t.elem_type:
                value.dtype = ir.DataType(t.elem_type)
            value.shape = sharper if sharper is not None else shape
    return borrowed


def _sharpened(shape: ir.Shape | None, static: tuple | None) -> ir.Shape | None:
    """``shape`` with each dim that is not an int taken from ``static`` where that has one (same
    rank only); None when nothing changes."""
    if shape is None or static is None or len(shape) != len(static):
        return None
    dims = [s if not isinstance(d, int) and isinstance(s, int) else d
            for d, s in zip(shape, static)]
    if all(a is b for a, b in zip(dims, shape)):
        return None
    return ir.Shape(dims)


def restore_types(borrowed: Borrowed) -> None:
    for value, (dtype_was, shape_was) in borrowed:
        value.type = None if dtype_was is None else value.type
        value.shape = shape_was


def _function_values(function: ir.Function):
    yield from function.inputs
    for node in body_nodes(function):
        yield from node.outputs


def annotate_functions_with(model: ir.Model, wanted) -> Borrowed:
    """:func:`annotate_function_types` for every function with a node ``wanted(node)`` holds for,
    and every function that calls one (nested functions, as TorchScript's modules-as-functions
    export writes them): callers first, so that a call inside a function has typed inputs."""
    callees = {
        key: {(n.domain, n.op_type, n.overload) for n in body_nodes(f)} & set(model.functions)
        for key, f in model.functions.items()
    }
    pending = {
        key for key, f in model.functions.items() if any(wanted(node) for node in body_nodes(f))
    }
    grew = True
    while grew:  # the callers of a pending function, transitively
        grew = False
        for key, called in callees.items():
            if key not in pending and called & pending:
                pending.add(key)
                grew = True
    borrowed: Borrowed = []
    while pending:
        ready = [key for key in model.functions if key in pending
                 and not any(key in callees[other] for other in pending if other != key)]
        for key in ready or list(pending):  # (a cycle, which ONNX forbids: any order)
            borrowed += annotate_function_types(model, model.functions[key])
            pending.discard(key)
    return borrowed


def annotate_function_types(model: ir.Model, function: ir.Function) -> Borrowed:
    """Give a function's untyped values the dtype and rank they have at every call site (ONNX
    shape inference on the body with the callers' input types); returns what was annotated, for
    :func:`restore_types` (a function's values stay untyped in the saved model)."""
    calls = function_calls(model).get((function.domain, function.name, function.overload), [])
    if not calls:
        return []
    proto = ir.serde.serialize_function(function)
    found: dict[str, tuple] = {}
    for call in calls:
        inputs = []
        for formal, actual in zip(proto.input, call.inputs):
            dtype = actual.dtype.value if actual is not None and actual.dtype is not None else 0
            shape = None if actual is None or actual.shape is None else [
                d if isinstance(d, int) else None for d in actual.shape]
            inputs.append(onnx.helper.make_tensor_value_info(formal, dtype, shape))
        outputs = [onnx.helper.make_tensor_value_info(o, 0, None) for o in proto.output]
        graph = onnx.helper.make_graph(list(proto.node), "body", inputs, outputs)
        imports = dict(model.opset_imports)
        imports.update(function.opset_imports)
        tmp = onnx.helper.make_model(
            graph,
            opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in imports.items()],
            functions=[ir.serde.serialize_function(f) for f in model.functions.values()],
        )
        try:
            inferred = onnx.shape_inference.infer_shapes(tmp)
        except Exception:  # best effort: an untyped value only makes the pass decline the node
            return []
        seen: dict[str, tuple] = {}
        for vi in (
            list(inferred.graph.input)
            + list(inferred.graph.value_info)
            + list(inferred.graph.output)
        ):
            t = vi.type.tensor_type
            if t.elem_type:
                dims = (
                    tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
                    if t.HasField("shape")
                    else None
                )
                seen[vi.name] = (t.elem_type, dims)
        for name, (elem, dims) in seen.items():
            if name not in found:
                found[name] = (elem, dims)
                continue
            old_elem, old_dims = found[name]
            if old_elem != elem or old_dims is None or dims is None or len(old_dims) != len(dims):
                found[name] = (old_elem if old_elem == elem else None, None)
            else:  # several call sites: keep the dims they agree on
                found[name] = (elem, tuple(a if a == b else None for a, b in zip(old_dims, dims)))
        found.update({n: (None, None) for n in found if n not in seen})
    annotated = []
    for value in _function_values(function):
        if value is None or value.type is not None or value.name not in found:
            continue
        elem, dims = found[value.name]
        if elem:
            annotated.append((value, (None, value.shape)))
            value.dtype = ir.DataType(elem)
            if dims is not None and value.shape is None:
                value.shape = ir.Shape(list(dims))
    return annotated


def has_control_flow(model: ir.Model) -> bool:
    """Whether ``model`` has local functions or an If/Loop/Scan node in its graphs."""
    return bool(model.functions) or any(
        n.op_type in ("If", "Loop", "Scan")
        for scope in iter_scopes(model)
        if not scope.is_function
        for n in scope.body
    )


def _custom_scatters_as_standard(proto: onnx.ModelProto) -> None:
    """In this copy for inference only: our custom-domain scatters (``lower --mode custom`` and
    ``tensorrt-plugin``) become the standard op without the attributes the opset's schema may lack.
    Their result has the data's shape whatever the reduction, and inference then sees through them,
    also inside a function, where no declared type can stand in for them."""
    from scatter_rewrite.custom_ops import DOMAIN
    from scatter_rewrite.graph import CUSTOM_SCATTER_OPS

    bodies = [proto.graph.node] + [f.node for f in proto.functions]
    while bodies:
        nodes = bodies.pop()
        for node in nodes:
            if node.domain == DOMAIN and node.op_type in CUSTOM_SCATTER_OPS:
                node.domain = ""
                keep = [a for a in node.attribute if a.name == "axis"]
                del node.attribute[:]
                node.attribute.extend(keep)
            for a in node.attribute:
                bodies.extend([a.g.node] if a.HasField("g") else [g.node for g in a.graphs])


DATA_PROP_ELEMENTS = 1024  # values with more elements never reach ONNX's data propagation
DATA_PROP_ROUNDS = 3
_UNREAD = "scatter_rewrite::cut::"  # the name a cut value's producer writes instead


def _inferred_types(graph: onnx.GraphProto) -> dict[str, tuple[int, tuple | None]]:
    """(element type, shape with None for an unknown dim, or None) of every typed value of ``graph``
    and its subgraphs, by name. A name that graphs side by side (an If's branches) each define,
    with types that differ, is left out: by name, one value would take the other's type."""
    types: dict[str, tuple[int, tuple | None]] = {}
    ambiguous: set[str] = set()
    graphs = [graph]
    while graphs:
        g = graphs.pop()
        here: dict[str, tuple[int, tuple | None]] = {}
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            t = vi.type.tensor_type
            shape = tuple(d.dim_value if d.HasField("dim_value") else None
                          for d in t.shape.dim) if t.HasField("shape") else None
            here[vi.name] = (t.elem_type, shape)
        ambiguous.update(name for name, t in here.items() if types.get(name, t) != t)
        types.update(here)
        for node in g.node:
            for a in node.attribute:
                graphs.extend([a.g] if a.HasField("g") else list(a.graphs))
    for name in ambiguous:
        del types[name]
    return types


def _is_big(elem: int, shape: tuple | None) -> bool:
    return (bool(elem) and shape is not None and all(d is not None for d in shape)
            and math.prod(shape) > DATA_PROP_ELEMENTS)


def infer_with_bounded_data_prop(proto: onnx.ModelProto) -> dict[str, tuple] | None:
    """ONNX shape inference with data propagation kept to small values: the shape of every value
    that has one, by name (None for an unknown dim); None when inference fails.

    ``infer_shapes(data_prop=True)`` on a whole model propagates the content of every integer
    value it can compute from constants, whatever its size: the TensorRT lowering's sorting network
    over 2^18 positions made it hold hundreds of such vectors as protobuf dims (15 GB and a minute
    for a 1.4 MB model). Shape tensors are small, so: plain inference first; then every value of
    the main graph and its subgraphs whose shape is static and over :data:`DATA_PROP_ELEMENTS`
    elements (a big Constant or a node output) is cut out of a copy: the copy reads a typed graph
    input of that name instead (data propagation refines only shapes that are not yet static, so
    nothing is lost), and data propagation runs on the copy. When that makes more values static
    and big, they are cut too and it runs again, at most :data:`DATA_PROP_ROUNDS` times in all.
    Loops are cut out whole (:func:`_cut_loops`): their values keep their plain inference.
    ``proto`` is not changed."""
    try:
        types = _inferred_types(onnx.shape_inference.infer_shapes(proto).graph)
    except Exception:  # best effort
        return None
    cut: dict[str, tuple[int, tuple]] = {}  # the type each cut value had when it was cut
    for round_ in range(DATA_PROP_ROUNDS):
        fresh = {name: (elem, shape) for name, (elem, shape) in types.items()
                 if name not in cut and _is_big(elem, shape)}
        if round_ and not fresh:
            break
        cut |= fresh
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)
        added = _cut_values(copy.graph, set(cut), cut, copy.graph)
        added |= _cut_loops(copy.graph, types, copy.graph)
        _drop_unread(copy.graph, added)
        try:
            found = _inferred_types(onnx.shape_inference.infer_shapes(copy, data_prop=True).graph)
        except Exception:  # best effort
            return None
        found = {name: t for name, t in found.items() if not name.startswith(_UNREAD)}
        types = types | found  # (values of nodes dropped from the copy keep their plain inference)
    return {name: shape for name, (_, shape) in types.items() if shape is not None}


def _cut_values(graph: onnx.GraphProto, cut: set[str], types: dict,
                main: onnx.GraphProto) -> set[str]:
    """In this copy for inference: each value named in ``cut`` that a node of ``graph`` or of a
    subgraph in it produces becomes a typed main-graph input (subgraphs see the outer scope), and
    its producer no longer writes it; nodes left with no output go. A graph's own outputs stay
    (a Loop body's may change shape from one iteration to the next). Returns the names made
    inputs."""
    outputs = {o.name for o in graph.output}
    added = set()
    kept = []
    for node in graph.node:
        for i, name in enumerate(node.output):
            if name in cut and name not in outputs:
                elem, shape = types[name]
                node.output[i] = _UNREAD + name  # (a required output must keep a name)
                added.add(name)
                main.input.append(onnx.helper.make_tensor_value_info(name, elem, list(shape)))
        if not all(o.startswith(_UNREAD) or not o for o in node.output):
            # (a node with every output cut goes: inferring it again costs and tells nothing)
            kept.append(node)
        for a in node.attribute:
            for body in [a.g] if a.HasField("g") else list(a.graphs):
                added |= _cut_values(body, cut, types, main)
    if len(kept) < len(graph.node):
        del graph.node[:]
        graph.node.extend(kept)
    return added


def _cut_loops(graph: onnx.GraphProto, types: dict, main: onnx.GraphProto) -> set[str]:
    """In this copy for data propagation: every ``Loop`` of ``graph`` (and of its If branches) is
    replaced by typed main-graph inputs for its outputs, with the types plain inference gave them.
    ONNX propagates no data through a Loop, and inferring a Loop's body with data propagation cost
    0.16 s and 120 MiB for the 15-node sorting Loop of the TensorRT lowering (onnx 1.23); the
    values in a body keep their plain inference. Returns the names made inputs."""
    added: set[str] = set()
    kept = []
    for node in graph.node:
        outputs = [o for o in node.output if o]
        if (node.op_type == "Loop" and node.domain in DEFAULT_DOMAINS
                and all(o in types for o in outputs)):
            for name in outputs:
                elem, shape = types[name]
                main.input.append(onnx.helper.make_tensor_value_info(
                    name, elem, list(shape) if shape is not None else None))
                added.add(name)
            continue
        kept.append(node)
        if node.op_type == "If":
            for a in node.attribute:
                if a.HasField("g"):
                    added |= _cut_loops(a.g, types, main)
    if len(kept) != len(graph.node):
        del graph.node[:]
        graph.node.extend(kept)
    return added


def _drop_unread(main: onnx.GraphProto, added: set[str]) -> None:
    """Remove the inputs :func:`_cut_values` added that no node (in any subgraph) reads."""
    read: set[str] = {o.name for o in main.output}
    graphs = [main]
    while graphs:
        g = graphs.pop()
        read.update(o.name for o in g.output)
        for node in g.node:
            read.update(node.input)
            for a in node.attribute:
                graphs.extend([a.g] if a.HasField("g") else list(a.graphs))
    kept = [i for i in main.input if i.name not in added or i.name in read]
    del main.input[:]
    main.input.extend(kept)


def correct_contradicted_shapes(model: ir.Model) -> list[str]:
    """Replace the declared shape of every value (main graph and subgraphs, graph outputs included)
    that ONNX shape inference, run without any declared intermediate or output shape, contradicts
    (another rank, or another size for a dim both know) by the inferred one; one line per value.

    Exporters declare shapes inference cannot check through control flow and functions:
    TorchScript's modules-as-functions writes the shape one branch of a rank-0 If wrapper would give
    ([36] for a [6, 6] result). Once a rewrite makes such a value's shape inferable (the wrapper
    inlined), the stale declaration fails onnx.checker. A declared shape is only a claim about the
    values, so correcting a false one changes no result. Callers ask only of models that had control
    flow or local functions before their rewrite (:func:`has_control_flow`), where such claims come
    from."""
    proto = serialize_without_weights(model)
    _overridable_as_inputs(proto)
    _custom_scatters_as_standard(proto)
    graphs = [proto.graph]
    while graphs:
        g = graphs.pop()
        del g.value_info[:]
        for output in g.output:
            output.type.tensor_type.ClearField("shape")
        for node in g.node:
            for a in node.attribute:
                graphs.extend([a.g] if a.HasField("g") else list(a.graphs))
    inferred = infer_with_bounded_data_prop(proto)
    if inferred is None:  # best effort: nothing corrected
        return []
    corrected = []
    for scope in iter_scopes(model):
        if scope.is_function:
            continue
        graph = scope.body
        inputs = {id(v) for v in graph.inputs}
        values = [v for node in graph for v in node.outputs]
        for value in values:
            if value.shape is None or id(value) in inputs or value.name not in inferred:
                continue
            declared = tuple(d if isinstance(d, int) else None for d in value.shape)
            found = inferred[value.name]
            if len(declared) != len(found) or any(a is not None and b is not None and a != b
                                                  for a, b in zip(declared, found)):
                corrected.append(f"'{value.name}' declared {list(declared)}, is {list(found)}")
                value.shape = ir.Shape(list(found))  # (None: a dim inference leaves open)
    return corrected
