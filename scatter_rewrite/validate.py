"""Prove a rewrite changes nothing: run original and rewritten in onnxruntime on the same inputs.

Inputs are seeded and respect each scatter's contract: a graph input that feeds scatter indices
(directly or through value-preserving ops like Cast/Unsqueeze/Expand, and PyTorch's negative-index
normalization ``Where(Less(i, 0), Add(i, n), i)``) gets in-range values, negative ones included,
unique along the axis when the reduction is "none" (duplicates are undefined there); symbolic
dimensions get small sizes.

ScatterND index tuples ``[..., k]`` may be built, as PyTorch's exporters build them for
``index_put``/``index_add``, by a Concat along the last axis of several index tensors (each
Unsqueezed, or itself ``[..., w]``): each Concat input gets the bounds of the data dimensions its
components index. For reduction "none", each such input is made unique on its own (its tuples
distinct) where its size allows. That makes the full tuples unique whenever one input is one-to-one
with them (same-shape indices, ``x[i, j]``), and also when the inputs are broadcast against each
other (``x[i[:, None], j]``: every input unique gives every pair once; a constant component, like
the row ``arange`` TorchScript emits for ``x[:, i]``, is assumed distinct). When neither holds (5
updates through ``x[i, j]`` into a 2 x 3 ``x``; a 5 x 5 grid into 3 rows) the tuples may repeat: the
plan's notes say so, and such a validation may fail on write order. Joint generation (unique flat
indices over the product of the bounds, split between the inputs) would cover the same-shape case
too; not done, to keep one contract per input.

Comparison is exact (bit for bit, NaN positions included) for integers and for none/max/min; float
outputs of a model holding a float add/mul scatter are compared within :data:`FLOAT_TOLERANCE`,
because a lowering may sum in another order. Where onnxruntime cannot run the original (an invalid
deprecated ``Scatter``, a reduction its CPU kernel lacks), the original is evaluated by
``onnx.reference`` with our NumPy scatter kernels, and the result says so.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from scatter_rewrite.errors import ScatterRewriteError, ValidationError
from scatter_rewrite.graph import attr, is_default_domain, iter_nodes
from scatter_rewrite.passes._inference import serialize_without_weights, weightless_copy

# (rtol, atol) for float outputs of models with a float add/mul scatter: a few ulps of the partial
# sums' magnitude. Everything else must be bit-exact.
FLOAT_TOLERANCE = {
    np.dtype(np.float16): (1e-2, 1e-2),
    np.dtype(np.float32): (1e-5, 1e-5),
    np.dtype(np.float64): (1e-12, 1e-12),
}
BFLOAT16_TOLERANCE = (4e-2, 4e-2)
SYMBOLIC_DIM_SIZE = 4
SCATTER_OPS = {"Scatter", "ScatterElements", "ScatterND", "TensorScatter"}
# Ops through which an index tensor's values pass unchanged (only reshaped, broadcast or cast).
_VALUE_PRESERVING = {"Cast", "Identity", "Reshape", "Unsqueeze", "Squeeze", "Expand", "Flatten", "Transpose"}


@dataclasses.dataclass
class IndexContract:
    # "elements": every value in [-bound, bound), unique along `axis`; "start": in [0, bound);
    # "nd": tuples of len(bounds) components, each in [-bound, bound) of its own, along the last
    # axis (with one bound, every value is a 1-tuple whatever the shape), unique tuples.
    kind: str
    bounds: tuple[int, ...]
    unique: bool
    axis: int = 0  # for "elements": the axis of the traced input along which values must be unique


@dataclasses.dataclass
class ValidationPlan:
    """What validation needs to know about the *original* model, computed before any pass runs."""

    inputs: dict[str, np.ndarray]
    float_reduction: bool  # a float add/mul scatter: float outputs compared with tolerance
    notes: list[str]
    outputs: list[str] = dataclasses.field(default_factory=list)  # graph output names (passes keep them)


@dataclasses.dataclass
class ValidationResult:
    checked_against: str
    tolerance: str
    max_abs_diff: float
    outputs: dict[str, float]
    notes: list[str]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------- inputs


def _np_dtype(dtype: ir.DataType | None):
    if dtype is None:
        return np.dtype(np.float32)
    if dtype == ir.DataType.STRING:
        return np.dtype(object)
    return dtype.numpy()


def _concrete_shape(shape: ir.Shape | None, sizes: dict[str, int]) -> tuple[int, ...]:
    if shape is None:
        return (SYMBOLIC_DIM_SIZE,)
    dims = []
    for d in shape:
        if isinstance(d, int):
            dims.append(d)
        else:
            key = str(d) if d is not None and d.value is not None else None
            dims.append(sizes.setdefault(key, SYMBOLIC_DIM_SIZE) if key else SYMBOLIC_DIM_SIZE)
    return tuple(dims)


def _infer_shapes(model: ir.Model, input_shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple]:
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
                shapes[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
        for init in g.initializer:
            shapes[init.name] = tuple(init.dims)
        for node in g.node:
            for a in node.attribute:
                graphs.extend([a.g] if a.HasField("g") else list(a.graphs))
    return shapes


def _trace_to_input(value: ir.Value | None, graph_inputs: set[int], outer: dict[int, list]) -> ir.Value | None:
    """The main-graph input whose values reach ``value`` unchanged, across body boundaries."""
    origin = _trace(value, outer)
    return origin if origin is not None and id(origin) in graph_inputs else None


def _trace(value: ir.Value | None, outer: dict[int, list], width: int = 1, shape_of=None) -> ir.Value | None:
    """Where ``value``'s index values come from: up through :func:`_index_source` and out of
    bodies, to a graph input (or whatever stops the walk: a Concat, a constant, arithmetic)."""
    while value is not None:
        producer = value.producer()
        source = _bound_outside(value, outer) if producer is None else _index_source(producer, width, shape_of)
        if source is None:
            return value
        value = source
    return None


def _index_source(node: ir.Node, width: int, shape_of) -> ir.Value | None:
    """The input of ``node`` whose values its output carries, as far as index bounds go, or None.

    Value-preserving ops, and ``Where(Less(x, 0), Add(x, n), x)``: it maps [-n, n) onto [0, n) and
    keeps values unique mod n, which the generated indices are. With ``width`` > 1 (ScatterND tuples
    of that many components along the last axis), only where the input's last axis is that same
    axis: same size, not moved by a Transpose (``shape_of`` gives a value's static shape or None).
    """
    if not is_default_domain(node) or not node.inputs:
        return None
    source = node.inputs[0] if node.op_type in _VALUE_PRESERVING else None
    if node.op_type == "Where" and len(node.inputs) == 3:
        cond, shifted, x = node.inputs
        less, add = (v.producer() if v is not None else None for v in (cond, shifted))
        if (less is not None and less.op_type == "Less" and list(less.inputs[:1]) == [x] and _is_zero(less.inputs[1])
                and add is not None and add.op_type == "Add" and x in add.inputs):
            source = x
    if source is None or width == 1:
        return source
    perm = attr(node, "perm")
    shape = shape_of(source)
    if shape and shape[-1] == width and not (node.op_type == "Transpose" and (perm is None or perm[-1] != len(perm) - 1)):
        return source
    return None


def _is_zero(value: ir.Value | None) -> bool:
    tensor = ir.convenience.get_const_tensor(value) if value is not None else None
    return tensor is not None and tensor.size == 1 and tensor.numpy().item() == 0


def _nd_sources(value: ir.Value, first: int, width: int, graph_inputs: set[int], outer: dict[int, list],
                shape_of) -> list[tuple[ir.Value, int, int]]:
    """(graph input, first component, number of components) for every input whose values become
    components ``first .. first + width - 1`` of ScatterND index tuples ``value[..., :width]``:
    traced like any index, and split at a Concat along the last axis, whose inputs cover
    successive components."""
    origin = _trace(value, outer, width, shape_of)
    if origin is None:
        return []
    if id(origin) in graph_inputs:
        return [(origin, first, width)]
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
        found += _nd_sources(part, first, part_shape[-1], graph_inputs, outer, shape_of)
        first += part_shape[-1]
    return found


def _outer_values(model: ir.Model) -> dict[int, list[ir.Value | None]]:
    """For Loop/Scan bodies and functions: id(body) -> the values its inputs are bound to outside.

    Loop body inputs are (iteration, condition, carried...) bound to the Loop's (M, cond, carried...);
    Scan's state inputs are bound to its inputs; a function's inputs to its first call's inputs.
    """
    bound: dict[int, list[ir.Value | None]] = {}
    calls = {}
    for node, _scope in iter_nodes(model):
        if (node.domain, node.op_type, node.overload) in model.functions and id(node) not in calls:
            calls.setdefault((node.domain, node.op_type, node.overload), node)
        body = node.attributes.get("body")
        if isinstance(body, ir.Attr) and body.type == ir.AttributeType.GRAPH:
            if node.op_type == "Loop":
                bound[id(body.value)] = [None, None] + list(node.inputs[2:])
            elif node.op_type == "Scan":
                bound[id(body.value)] = list(node.inputs)
    for key, function in model.functions.items():
        if key in calls:
            bound[id(function.graph)] = list(calls[key].inputs)
    return bound


def _bound_outside(value: ir.Value, outer: dict[int, list]) -> ir.Value | None:
    """The outer value a body input is bound to, or None."""
    body = value.graph
    if value.producer() is not None or body is None or id(body) not in outer:
        return None
    inputs = list(body.inputs)
    position = next((i for i, v in enumerate(inputs) if v is value), -1)
    bindings = outer[id(body)]
    return bindings[position] if 0 <= position < len(bindings) else None


def _shape_of(value: ir.Value, shapes, outer: dict[int, list], partial: bool = False) -> tuple | None:
    """``value``'s static shape: declared, else inferred (``shapes()``, computed on first need).
    With ``partial``, a shape of known rank with unknown dims (None) rather than no shape."""
    while value is not None:
        declared = None if value.shape is None else tuple(d if isinstance(d, int) else None for d in value.shape)
        if declared is not None and None not in declared:
            return declared
        inferred = shapes().get(value.name)
        if inferred is not None and None not in inferred:
            return inferred
        if partial and (inferred or declared):
            return inferred or declared
        value = _bound_outside(value, outer)
    return None


def _add_contract(contracts: dict[str, IndexContract], name: str, new: IndexContract) -> None:
    """One input feeding several scatters must satisfy all: the tightest bounds, unique if any wants it."""
    old = contracts.get(name)
    if old is None or old.kind != new.kind or len(old.bounds) != len(new.bounds):
        contracts[name] = new if old is None or new.kind == "nd" else old
        return
    bounds = tuple(min(a, b) for a, b in zip(old.bounds, new.bounds))
    contracts[name] = IndexContract(old.kind, bounds, old.unique or new.unique, old.axis)


def _contracts(model: ir.Model, input_shapes: dict[str, tuple]) -> tuple[dict[str, IndexContract], bool, list[str]]:
    graph_inputs = {id(v) for v in model.graph.inputs if v.name in input_shapes}  # not those with an initializer
    shapes = functools.cache(lambda: _infer_shapes(model, input_shapes))
    outer = _outer_values(model)

    def shape_of(value: ir.Value) -> tuple | None:
        return _shape_of(value, shapes, outer)

    def rank_and_last_dim(value: ir.Value) -> tuple | None:  # enough to place ScatterND tuple components
        return _shape_of(value, shapes, outer, partial=True)

    contracts: dict[str, IndexContract] = {}
    float_reduction, notes = False, []
    for node, _scope in iter_nodes(model):
        if node.op_type not in SCATTER_OPS or not is_default_domain(node):
            continue
        reduction = attr(node, "reduction", "none")
        data = node.inputs[0]
        # Unknown dtype (inside a function): assume float; integer outputs are compared exactly anyway.
        if reduction in ("add", "mul") and (data is None or data.dtype is None or data.dtype.is_floating_point()):
            float_reduction = True
        if node.op_type == "TensorScatter":
            _tensor_scatter_contract(node, graph_inputs, outer, contracts, shape_of)
            continue
        unique = reduction == "none"
        if node.op_type == "ScatterND":
            indices_shape = rank_and_last_dim(node.inputs[1]) if node.inputs[1] is not None else None
            k = indices_shape[-1] if indices_shape else None
            sources = [] if k is None else _nd_sources(node.inputs[1], 0, k, graph_inputs, outer, rank_and_last_dim)
            data_shape = shape_of(data) if sources and data is not None else None
            if data_shape is None:
                continue
            for source, first, width in sources:
                _add_contract(contracts, source.name, IndexContract("nd", tuple(data_shape[first : first + width]), unique))
            # Unique tuples: one input unique and one-to-one with them, or all unique (broadcast against each other).
            tuples = int(np.prod(indices_shape[:-1])) if None not in indices_shape else -1
            fits = [(_fits(input_shapes[v.name], contracts[v.name]),
                     int(np.prod(input_shapes[v.name])) // max(w, 1) == tuples) for v, _, w in sources]
            if unique and not (all(f for f, _ in fits) or any(f and whole for f, whole in fits)):
                names = ", ".join(sorted({v.name for v, _, _ in sources}))
                notes.append(f"ScatterND {node.name!r}: the data has too few slots for unique indices from {names}: "
                             "index tuples may repeat, and reduction none then depends on write order")
            continue
        source = _trace_to_input(node.inputs[1], graph_inputs, outer)
        data_shape = shape_of(data) if source is not None and data is not None else None
        if data_shape is None:
            continue
        axis = attr(node, "axis", 0) % max(len(data_shape), 1)
        src_rank = len(input_shapes[source.name])
        # The traced input may have fewer dims (GNN: dst[E] -> unsqueeze -> expand): its first
        # axis is the scatter axis when ranks differ, else the same axis.
        src_axis = axis if src_rank == len(data_shape) else 0
        _add_contract(contracts, source.name, IndexContract("elements", (data_shape[axis],), unique, src_axis))
    return contracts, float_reduction, notes


def _tensor_scatter_contract(node, graph_inputs, outer, contracts, shape_of) -> None:
    """write_indices: one start per batch entry in [0, max_len - seq_len] (linear; onnxruntime
    rejects a window past the end) or [0, 2 * max_len) (circular wraps)."""
    if len(node.inputs) < 3 or node.inputs[2] is None:
        return
    source = _trace_to_input(node.inputs[2], graph_inputs, outer)
    if source is None:
        return
    cache, update = shape_of(node.inputs[0]), shape_of(node.inputs[1])
    if cache is None or update is None:
        return
    axis = attr(node, "axis", -2) % len(cache)
    max_len, seq_len = cache[axis], update[axis]
    bound = 2 * max_len if attr(node, "mode", "linear") == "circular" else max_len - seq_len + 1
    old = contracts.get(source.name)
    contracts[source.name] = IndexContract("start", (min(bound, old.bounds[0]) if old and old.kind == "start" else bound,), False)


def _fits(shape: tuple[int, ...], c: IndexContract) -> bool:
    """Whether an index input of ``shape`` can have the unique values contract ``c`` asks for."""
    if c.kind == "nd":
        return int(np.prod(shape, dtype=np.int64)) // max(len(c.bounds), 1) <= int(np.prod(c.bounds, dtype=np.int64))
    return not shape or shape[c.axis] <= c.bounds[0]


def _index_values(shape: tuple[int, ...], dtype: np.dtype, c: IndexContract, rng: np.random.Generator) -> np.ndarray:
    if c.kind == "start":
        return rng.integers(0, max(c.bounds[0], 1), size=shape).astype(dtype)
    if c.kind == "nd":
        count = int(np.prod(shape, dtype=np.int64)) // max(len(c.bounds), 1)
        total = int(np.prod(c.bounds, dtype=np.int64))
        flat = (rng.choice(total, size=count, replace=False) if c.unique and _fits(shape, c)
                else rng.integers(0, max(total, 1), size=count))
        coords = np.stack(np.unravel_index(flat, c.bounds), axis=-1) if c.bounds else np.zeros((count, 0), np.int64)
        negate = rng.random(coords.shape) < 0.3
        coords = np.where(negate, coords - np.asarray(c.bounds), coords)
        return coords.reshape(shape).astype(dtype)
    bound = c.bounds[0]
    if not shape:
        values = np.asarray(rng.integers(0, bound))
    elif c.unique and _fits(shape, c):
        moved = (-1,) + shape[: c.axis] + shape[c.axis + 1 :]
        columns = int(np.prod(moved[1:], dtype=np.int64))
        if columns * bound <= 2**20:
            keys = rng.random((columns, bound)).argsort(axis=1)[:, : shape[c.axis]].T  # a permutation per column
        else:  # a big axis: draw without replacement per column, O(indices) memory instead of O(columns x bound)
            keys = np.stack([rng.choice(bound, size=shape[c.axis], replace=False) for _ in range(columns)], axis=1)
        values = np.moveaxis(keys.reshape((shape[c.axis],) + shape[: c.axis] + shape[c.axis + 1 :]), 0, c.axis)
    else:
        values = rng.integers(0, bound, size=shape)
    negate = rng.random(np.shape(values)) < 0.3
    return np.where(negate, values - bound, values).astype(dtype)


def _random_values(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    if dtype == np.dtype(object):
        return np.array([f"s{v}" for v in rng.integers(0, 100, size=int(np.prod(shape)))], dtype=object).reshape(shape)
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if np.issubdtype(dtype, np.unsignedinteger):
        return rng.integers(0, 20, size=shape).astype(dtype)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-20, 20, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)  # float16/32/64 and ml_dtypes (bfloat16, float8)


def _without_constant_ifs(model: ir.Model) -> ir.Model:
    """A weightless copy of ``model`` whose Ifs with a constant condition are replaced by the branch
    they take, when it has such an If; else ``model`` itself. Index contracts traced on it see
    through wrappers like TorchScript's rank-0 If around scatter_reduce (input names are kept)."""
    if not any(node.op_type == "If" and is_default_domain(node) for node, _ in iter_nodes(model)):
        return model
    from scatter_rewrite.passes._inline_if import inline_constant_ifs

    copy = weightless_copy(model)
    return copy if inline_constant_ifs(copy) else model


def plan_validation(model: ir.Model, seed: int = 0, inputs: dict[str, np.ndarray] | None = None) -> ValidationPlan:
    """Inputs for the original ``model`` (or the user's, checked), and how to compare outputs."""
    rng = np.random.default_rng(seed)
    sizes: dict[str, int] = {}
    initializer_names = set(model.graph.initializers)
    graph_inputs = [v for v in model.graph.inputs if v.name not in initializer_names]
    input_shapes = {v.name: _concrete_shape(v.shape, sizes) for v in graph_inputs}
    contracts, float_reduction, notes = _contracts(_without_constant_ifs(model), input_shapes)
    if inputs is not None:
        missing = [v.name for v in graph_inputs if v.name not in inputs]
        if missing:
            raise ValidationError(f"--inputs lacks the model input(s) {', '.join(missing)}; add them to the .npz")
        return ValidationPlan({v.name: np.asarray(inputs[v.name]) for v in graph_inputs}, float_reduction, ["user inputs"],
                              [v.name for v in model.graph.outputs])
    generated = {}
    for v in graph_inputs:
        shape, dtype = input_shapes[v.name], _np_dtype(v.dtype)
        if v.name in contracts:
            generated[v.name] = _index_values(shape, dtype, contracts[v.name], rng)
        else:
            generated[v.name] = _random_values(shape, dtype, rng)
    if contracts:
        notes.append(f"in-range scatter indices generated for {', '.join(sorted(contracts))}")
    return ValidationPlan(generated, float_reduction, notes, [v.name for v in model.graph.outputs])


def load_inputs(path: str | os.PathLike) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {k: archive[k] for k in archive.files}
    except (OSError, ValueError) as e:
        raise ValidationError(f"--inputs {path}: cannot read it as a .npz archive ({e})") from e


# --------------------------------------------------------------------------- running


def run_onnxruntime(model: str | os.PathLike | bytes, inputs: dict[str, np.ndarray], threads: int = 0) -> list[np.ndarray]:
    import onnxruntime as ort

    from scatter_rewrite import custom_ops

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 4  # failures reach the user as our own one-line error, not ORT's log
    # Validation checks kernels, not ORT's graph optimizer. ORT memory-maps external initializers on
    # CPU, but constant folding and MatMul weight prepacking copy them into the heap: measured with
    # ORT 1.32 on a 2.2 GiB external-data model, a session holds 1286 MB after creation with the
    # default level and 54 MB with optimizations off (benchmarks/RESULTS-scale.md). Off also makes
    # session creation ~30% faster on a 50k-node graph.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.add_session_config_entry("session.disable_prepacking", "1")
    # Without the arena, buffers go back as soon as a run is done instead of staying reserved for
    # the next run (there is none): measured 0.8 -> 0.5 GB peak validating a 76 MiB model.
    options.enable_cpu_mem_arena = False
    custom_ops.register(options)
    source = str(model) if isinstance(model, (str, Path)) else model
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    run_options = ort.RunOptions()
    run_options.log_severity_level = 4
    return session.run(None, {k: v for k, v in inputs.items() if k in names}, run_options)


def run_reference(model_path: str | os.PathLike, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """``onnx.reference`` with our NumPy kernels for every scatter op (it lacks ``Scatter``)."""
    from scatter_rewrite.evaluator.reference_ops import make_evaluator

    return make_evaluator(onnx.load(str(model_path))).run(None, inputs)


_BLOCK = 1 << 20  # elements compared at a time: temporaries stay ~8 MiB whatever the output's size


def _blocks(e: np.ndarray, a: np.ndarray):
    """The two arrays as matching flat blocks (no copy of either whole array)."""
    e, a = e.reshape(-1), a.reshape(-1)
    for start in range(0, max(e.size, 1), _BLOCK):
        yield e[start:start + _BLOCK], a[start:start + _BLOCK]


def _wide(x: np.ndarray) -> np.ndarray:
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def _bit_exact_mismatch(a: np.ndarray, b: np.ndarray) -> bool:
    """Different values, NaN positions or zero signs (NaN payloads may differ)."""
    if not (a.dtype.kind in "fc" or a.dtype.name == "bfloat16"):
        return not np.array_equal(a, b)
    for ea, eb in _blocks(a, b):
        af, bf = _wide(ea), _wide(eb)
        nan_a = np.isnan(af)
        if not np.array_equal(nan_a, np.isnan(bf)):
            return True
        ok = ~nan_a
        if not np.array_equal(af[ok], bf[ok]):
            return True
        if a.dtype.kind != "c" and not np.array_equal(np.signbit(af[ok]), np.signbit(bf[ok])):
            return True
    return False


def _max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    if a.dtype == object or a.dtype == np.bool_ or a.size == 0:
        return 0.0 if np.array_equal(a, b) else float("inf")
    worst = 0.0
    for ea, eb in _blocks(a, b):
        diff = np.abs(_wide(ea) - _wide(eb))
        diff = diff[~np.isnan(diff)]
        if diff.size:
            worst = max(worst, float(diff.max()))
    return worst


def _within_tolerance(e: np.ndarray, a: np.ndarray, rtol: float, atol: float) -> bool:
    return all(np.allclose(_wide(ab), _wide(eb), rtol=rtol, atol=atol, equal_nan=True) for eb, ab in _blocks(e, a))


def _tolerance(dtype: np.dtype) -> tuple[float, float] | None:
    if dtype.name == "bfloat16":
        return BFLOAT16_TOLERANCE
    return FLOAT_TOLERANCE.get(dtype)


def compare(names: list[str], expected: list[Any], actual: list[Any], float_reduction: bool) -> tuple[dict[str, float], list[str]]:
    """Per-output max |difference|, and a list of failures (empty when they agree)."""
    diffs, failures = {}, []
    for name, e, a in zip(names, expected, actual):
        e, a = np.asarray(e), np.asarray(a)
        if e.shape != a.shape or e.dtype != a.dtype:
            failures.append(f"output '{name}': expected {e.dtype}{list(e.shape)}, got {a.dtype}{list(a.shape)}")
            continue
        diffs[name] = _max_abs_diff(e, a)
        tol = _tolerance(e.dtype) if float_reduction else None
        if tol is not None:
            rtol, atol = tol
            if not _within_tolerance(e, a, rtol, atol):
                failures.append(f"output '{name}': max |difference| {diffs[name]:.3g} exceeds rtol={rtol}, atol={atol}")
        elif _bit_exact_mismatch(e, a):
            failures.append(f"output '{name}': not bit-exact (max |difference| {diffs[name]:.3g})")
    return diffs, failures


def _first_line(e: BaseException, limit: int = 200) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:limit] if text else type(e).__name__


def _ort_reason(e: BaseException) -> str:
    """onnxruntime's messages bury the reason after the node dump: keep the reason."""
    text = _first_line(e, 10_000)
    for marker in (" Error ", "Status Message: "):
        if marker in text:
            return text.rsplit(marker, 1)[1][:200]
    return text[:200]


def validate(original: str | os.PathLike, rewritten: str | os.PathLike, plan: ValidationPlan) -> ValidationResult:
    """Run both models and compare; raise ValidationError on any difference."""
    notes = list(plan.notes)
    ort_cannot_run_original = None
    try:
        expected = run_onnxruntime(original, plan.inputs)
        checked_against = "onnxruntime on the original model"
    except Exception as ort_error:  # ORT reports load/run failures through several exception types
        ort_cannot_run_original = _ort_reason(ort_error)
        try:
            expected = run_reference(original, plan.inputs)
        except ScatterRewriteError:
            raise
        except Exception as ref_error:
            raise ValidationError(
                f"cannot evaluate the original model: onnxruntime says '{ort_cannot_run_original}', "
                f"onnx.reference says '{_first_line(ref_error)}'; use --no-validate to skip"
            ) from ref_error
        checked_against = ("onnx.reference with scatter-rewrite's NumPy kernels (onnxruntime cannot run the "
                           f"original: {ort_cannot_run_original})")
    try:
        actual = run_onnxruntime(rewritten, plan.inputs)
    except Exception as e:
        if ort_cannot_run_original is None:
            raise ValidationError(f"onnxruntime cannot run the rewritten model: {_first_line(e, 300)}") from e
        # Neither runs in onnxruntime (a dtype its CPU kernels lack, e.g. bfloat16): compare both in
        # the reference evaluator, and say so.
        actual = run_reference(rewritten, plan.inputs)
        checked_against = ("onnx.reference with scatter-rewrite's NumPy kernels, for both models (onnxruntime "
                           f"cannot run either: {ort_cannot_run_original})")
    # (Not read back from the rewritten file: with inline weights that would parse all of them again.)
    names = plan.outputs or [f"output {i}" for i in range(len(actual))]
    diffs, failures = compare(names, expected, actual, plan.float_reduction)
    tolerance = "exact (bit for bit)" if not plan.float_reduction else (
        "float outputs within " + ", ".join(f"{k}: rtol={r}, atol={a}" for k, (r, a) in FLOAT_TOLERANCE.items())
        + f", bfloat16: rtol={BFLOAT16_TOLERANCE[0]}; everything else exact"
    )
    result = ValidationResult(checked_against, tolerance, max(diffs.values(), default=0.0), diffs, notes)
    if failures:
        raise ValidationError("validation failed, nothing written: " + "; ".join(failures))
    return result
