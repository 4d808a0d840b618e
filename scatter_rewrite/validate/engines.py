"""Running a model: onnxruntime (with our custom-domain ops registered where the model uses them)
and ``onnx.reference`` with scatter-rewrite's NumPy kernels; what onnxruntime's refusals mean."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from scatter_rewrite.ort_folding import optimizers_left_out
from scatter_rewrite.validate.held import Held, proto_of
from scatter_rewrite.limits import DEFAULT_DOMAINS
from scatter_rewrite.said import call

__all__ = [
    "CustomOpsRefused", "LOWER_TO_RUN", "Lack", "PASSED_IN", "PASSED_OUT", "REDUCTIONS_REFUSED",
    "custom_domain_nodes", "first_line", "kernels_onnxruntime_lacks", "may_refuse_in_parallel",
    "may_trap", "needs_custom_ops_in_onnxruntime", "ort_reason",
    "run_onnxruntime", "run_reference", "session_threads", "trapping_division",
    "undeclared_kernels",
    "what_onnxruntime_lacks", "without_paths", "WouldTrap",
]


# The one graph optimization validation leaves out (an exception to "as a user runs it", stated in
# docs/validation.md): onnxruntime 1.32's ExpandElimination drops an Expand of a [3, 1] tensor to a
# [3, 0] shape as if it changed nothing, and the next node then fails on the [3, 1] it gets
# (tests/every_verb/test_edge_cases.py's zero-size cases, lowered for TensorRT).
_DISABLED_OPTIMIZERS = ["ExpandElimination"]
_CPU = ["CPUExecutionProvider"]


class CustomOpsRefused(Exception):
    """onnxruntime cannot load a model with our custom-domain ops even with
    ``custom_ops.register``: how that model's users run it (``lower --mode custom``)."""


def needs_custom_ops_in_onnxruntime(model: str | os.PathLike) -> bool:
    """Whether ``model`` holds our custom-domain nodes in the form onnxruntime runs with
    ``custom_ops.register`` (``lower --mode custom``), not only the TensorRT plugin form
    (``--mode tensorrt-plugin``: ``plugin_version`` attributes), whose runtime is TensorRT."""
    return custom_domain_nodes(model)[0] > 0


def custom_domain_nodes(model: str | os.PathLike) -> tuple[int, int]:
    """How many of ``model``'s nodes (main graph, bodies, functions) are our custom-domain scatters
    that onnxruntime runs with ``custom_ops.register`` (``lower --mode custom``: their users run
    them so), and how many are in the TensorRT plugin form (``plugin_version``: their runtime is
    TensorRT, which validation stands in for with our kernels). The file's big weights are mapped,
    not read (:func:`model_io.load_proto`), and a model that imports no custom domain is not
    walked."""
    from scatter_rewrite import custom_ops
    from scatter_rewrite.graph import iter_nodes

    if isinstance(model, Held):
        loaded = model.model
        imports = [*loaded.opset_imports, *(d for f in loaded.functions.values()
                                            for d in f.opset_imports)]
    else:
        proto = proto_of(model, weights=False)
        imports = [o.domain for o in proto.opset_import]
        imports += [o.domain for f in proto.functions for o in f.opset_import]
    if custom_ops.DOMAIN not in imports:
        return 0, 0
    if not isinstance(model, Held):
        loaded = ir.serde.deserialize_model(proto)
    custom = plugin = 0
    for node, _scope in iter_nodes(loaded):
        if node.domain == custom_ops.DOMAIN:
            plugin += "plugin_version" in node.attributes
            custom += "plugin_version" not in node.attributes
    return custom, plugin


class WouldTrap(Exception):
    """onnxruntime is not run: its integer division would kill the process on these inputs
    (:func:`trapping_division` says where)."""


def run_onnxruntime(
    model: str | os.PathLike | bytes | Held, inputs: dict[str, np.ndarray], threads: int = 0
) -> list[np.ndarray]:
    """``model``'s outputs on ``inputs`` from onnxruntime's CPU provider (see _session_options);
    WouldTrap, without running it, where that would kill the process. A :class:`~.held.Held`
    model's session is made from memory, its big weights handed over as OrtValues."""
    import onnxruntime as ort

    from scatter_rewrite import custom_ops

    graph = (onnx.ModelProto.FromString(model) if isinstance(model, bytes)
             else proto_of(model, weights=False))
    trap = trapping_division(model if not isinstance(model, bytes) else graph, inputs)
    if trap is not None:
        raise WouldTrap(trap)
    left_out = optimizers_left_out(graph, _DISABLED_OPTIMIZERS)
    source, weights = str(model) if isinstance(model, (str, Path)) else model, {}
    if isinstance(model, Held):
        source, weights = model.session_parts()
    threads = session_threads(model, threads)
    run = None
    try:
        session = ort.InferenceSession(source, _session_options(threads, weights),
                                       providers=_CPU, disabled_optimizers=left_out)
    except Exception as e:
        # Our custom-domain nodes (lower --mode custom) only: registering them costs seconds where
        # onnxruntime-extensions finds PyTorch installed (it imports it), so only on demand.
        if custom_ops.DOMAIN not in str(e):
            raise
        options = _session_options(threads, weights)
        custom_ops.register(options)
        try:
            session = ort.InferenceSession(source, options, providers=_CPU,
                                           disabled_optimizers=left_out)
        except Exception as refused:
            raise CustomOpsRefused(ort_reason(refused)) from refused
        run = custom_ops.run  # raises what the ops raised (an index out of range), after the run
    names = {i.name for i in session.get_inputs()}
    run_options = ort.RunOptions()
    run_options.log_severity_level = 4
    feeds = {k: v for k, v in inputs.items() if k in names}
    outputs = run(session, feeds, run_options) if run else session.run(None, feeds, run_options)
    return [_as_declared(array, o.type) for array, o in zip(outputs, session.get_outputs())]


def _as_declared(array: Any, ort_type: str) -> Any:
    """An onnxruntime output as the ONNX element type the model declares (``ort_type``, as
    ``tensor(float8e4m3fn)``), the type onnx.reference returns. onnxruntime's Python binding returns
    float8e4m3fn and float4e2m1 as raw uint8: one byte per element, or packed two to a byte (low
    nibble first) at the start of an array of the element count. (The other types NumPy lacks,
    float8e5m2 or int4, it does not return at all: "No corresponding Numpy type".)"""
    if (
        not isinstance(array, np.ndarray)
        or array.dtype != np.uint8
        or not ort_type.startswith("tensor(")
    ):
        return array
    declared = getattr(ir.DataType, ort_type[len("tensor("):-1].upper(), None)
    if declared is None or declared == ir.DataType.UINT8:
        return array
    if declared.bitwidth == 8:
        return array.view(declared.numpy())
    packed = array.reshape(-1)[: (array.size * declared.bitwidth + 7) // 8]
    return ir.PackedTensor(packed, declared, shape=ir.Shape(array.shape)).numpy()


def _session_options(threads: int, weights: dict[str, Any] | None = None):
    """``weights``: initializers handed over as OrtValues by name (a model held in memory)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if weights:
        options.add_external_initializers(list(weights), list(weights.values()))
    options.intra_op_num_threads = threads
    options.log_severity_level = (
        4  # failures reach the user as our own one-line error, not ORT's log
    )
    # The graph optimizations a user's session gets by default (ORT_ENABLE_ALL): the rewritten model
    # is proven as it will run, and a TorchScript original that onnxruntime runs with its defaults
    # runs here too (with them off, it fell back to onnx.reference). One exception, for memory:
    # weight prepacking copies every MatMul weight into the heap where ORT memory-maps external
    # initializers. Measured with ORT 1.32 on 50 MatMuls over 200 MiB of external weights: 255 MiB
    # after session creation with the defaults, 55 MiB with prepacking off (as with every
    # optimization off). Prepacking lays the same weights out for the same kernel, and stays off.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.disable_prepacking", "1")
    # Without the arena, buffers go back as soon as a run is done instead of staying reserved for
    # the next run (there is none): measured 0.8 -> 0.5 GB peak validating a 76 MiB model.
    options.enable_cpu_mem_arena = False
    return options


def run_reference(
    model: str | os.PathLike | onnx.ModelProto | Held, inputs: dict[str, np.ndarray]
) -> list:
    """``onnx.reference`` with our NumPy kernels for every scatter op (it lacks ``Scatter``)."""
    import warnings

    from scatter_rewrite.evaluator.reference_ops import make_evaluator

    proto = proto_of(model)
    evaluator = make_evaluator(proto)
    # NumPy's RuntimeWarnings (log of 0, an overflow to inf) are values here, as in onnxruntime,
    # not lines for the user's terminal.
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return evaluator.run(None, inputs)



# onnxruntime's CPU Div of int32/int64 divides with the processor's instruction, which traps on the
# type's lowest value over -1 (x86 idiv: SIGFPE, the process dies; a zero divisor it refuses with an
# error first). Measured with onnxruntime 1.32: int8/int16 and Mod do not trap.
_TRAPPING_DIV_TYPES = (np.int32, np.int64)
# ops whose output is non-negative where their data input is (a Shape's sizes carried along)
_SIZE_CARRIERS = {"Gather", "Squeeze", "Unsqueeze", "Reshape", "Slice", "Identity", "Cast",
                  "Concat", "ReduceProd", "Mul", "Max"}


def trapping_division(model: str | os.PathLike | onnx.ModelProto | Held,
                      inputs: dict[str, np.ndarray]) -> str | None:
    """Why running ``model`` on ``inputs`` in onnxruntime would kill the process: an integer Div,
    in any graph, subgraph (If/Loop/Scan body) or local function, that divides the lowest
    int32/int64 by -1 (see _TRAPPING_DIV_TYPES), found by running the model in onnx.reference,
    whose NumPy division does not trap, with a Div that watches for it. None where no Div can
    (:func:`may_trap`), where none does, or where onnx.reference cannot run the model up to one
    that does."""
    risky = _divisions_that_may_trap(model.model if isinstance(model, Held)
                                     else proto_of(model, weights=False))
    if not risky:
        return None
    proto = proto_of(model)
    from scatter_rewrite.evaluator.reference_ops import make_evaluator

    trapped: list[tuple[onnx.NodeProto, np.dtype]] = []
    try:
        with np.errstate(all="ignore"):
            make_evaluator(proto, extra_ops=[_watching_div(trapped)]).run(None, inputs)
    except Exception:  # (an op or type onnx.reference lacks: a Div met before it still tells)
        pass
    if not trapped:
        return None
    node, dtype = trapped[0]
    name = node.name or node.output[0]
    where = next((scope.where for div, scope in risky
                  if (div.name or div.outputs[0].name) == name), "main graph")
    place = "" if where == "main graph" else f" (in {where})"
    return (f"its {dtype} Div '{name}'{place} would divide {np.iinfo(dtype).min} by -1 on these "
            "inputs, which onnxruntime's CPU kernel does with a processor instruction that kills "
            "the process (SIGFPE)")


def _watching_div(trapped: list[tuple[onnx.NodeProto, np.dtype]]) -> type:
    """onnx.reference's Div, which appends (its node, the dtype) to ``trapped`` when it divides
    the lowest int32/int64 by -1 (make_evaluator runs it in bodies and functions too)."""
    from onnx.reference.ops.op_div import Div as ReferenceDiv

    class Div(ReferenceDiv):
        op_domain = ""

        def _run(self, a, b):
            a, b = np.asarray(a), np.asarray(b)
            if a.dtype.type in _TRAPPING_DIV_TYPES and a.dtype == b.dtype:
                if ((a == np.iinfo(a.dtype).min) & (b == -1)).any():
                    trapped.append((self.onnx_node, a.dtype))
            return super()._run(a, b)

    return Div


def may_trap(model: onnx.ModelProto | ir.Model) -> bool:
    """Whether an integer Div of ``model`` (any graph, subgraph or local function) may trap
    (:func:`trapping_division` then runs it)."""
    return bool(_divisions_that_may_trap(model))


_TRAPPING_DTYPES = (ir.DataType.INT32, ir.DataType.INT64, ir.DataType.UNDEFINED, None)


def _divisions_that_may_trap(model: onnx.ModelProto | ir.Model) -> list[tuple[ir.Node, Any]]:
    """(node, its graph.Scope) of every int32/int64 Div (or of a type not known: a function's
    values have none) whose divisor may be -1: not a constant, nor a size. Types are inferred only
    where such a Div is found (a float Div normalizes every LayerNorm)."""
    from scatter_rewrite.model_io import deserialize
    from scatter_rewrite.type_inference import serialize_without_weights

    candidates = _divisions_by_non_constants(model if isinstance(model, ir.Model)
                                             else deserialize(model))
    if not candidates:
        return []
    proto = model if isinstance(model, onnx.ModelProto) else serialize_without_weights(model)
    try:
        typed = deserialize(onnx.shape_inference.infer_shapes(proto))
    except Exception:  # (judged without the types then)
        return candidates
    return [(node, scope) for node, scope in _divisions_by_non_constants(typed)
            if node.outputs[0].dtype in _TRAPPING_DTYPES]


def _divisions_by_non_constants(model: ir.Model) -> list[tuple[ir.Node, Any]]:
    """Every Div (with its scope) whose divisor may be -1: not a constant, nor a size."""
    from scatter_rewrite.graph import iter_nodes

    return [(node, scope) for node, scope in iter_nodes(model)
            if node.op_type == "Div" and node.domain in DEFAULT_DOMAINS
            and len(node.inputs) == 2 and not _never_minus_one(node.inputs[1])]


def _never_minus_one(value: ir.Value | None, depth: int = 0) -> bool:
    """Whether ``value`` cannot be -1 (at ``depth`` > 0: cannot be negative): a constant that is
    not, a Shape or Size, or one carried through _SIZE_CARRIERS from those. Values of an outer
    graph are followed into a body; a function's inputs may be anything."""
    from scatter_rewrite.graph import constant_tensor

    tensor = constant_tensor(value)
    if tensor is not None and not isinstance(tensor, ir.ExternalTensor):
        array = tensor.numpy()
        return not (array == -1).any() if depth == 0 else bool((array >= 0).all())
    node = value.producer() if value is not None else None
    if node is None or node.domain not in DEFAULT_DOMAINS or depth > 8:
        return False
    if node.op_type in ("Shape", "Size"):
        return True
    data = node.inputs[:1] if node.op_type not in ("Concat", "Mul", "Max") else node.inputs
    return (node.op_type in _SIZE_CARRIERS
            and all(_never_minus_one(i, depth + 1) for i in data if i is not None))


def first_line(e: BaseException, limit: int = 200) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:limit] if text else type(e).__name__


def without_paths(reason: str | None) -> str | None:
    """An onnxruntime reason without the model file it names ("Load model from /tmp/x.onnx
    failed:"), to compare the original's failure with the rewritten model's."""
    return (
        None
        if reason is None
        else re.sub(r"Load model from \S+ failed:", "Load model failed:", reason)
    )


def ort_reason(e: BaseException) -> str:
    """onnxruntime's messages bury the reason after the node dump: keep the reason."""
    text = first_line(e, 10_000)
    for marker in ("Type Error: ", " Error ", "Status Message: "):
        if marker in text:
            return text.rsplit(marker, 1)[1][:200]
    return text[:200]



@dataclasses.dataclass(frozen=True)
class Lack:
    """Something onnxruntime lacks to run a model: ``what`` names the node (its op, opset, place)
    or graph input/output and the type; ``fix``, the scatter-rewrite command that writes a form it
    runs, where one does."""

    what: str
    fix: str = ""  # (a Said: scatter_rewrite.said.call)

    def __str__(self) -> str:
        return self.what


# float16 scatter reductions lowered to standard ops (sort, segmented sums, ScatterND without
# reduction), which onnxruntime runs in float16: tests/validate/test_engines.py runs them.
LOWER_TO_RUN = call("lower", opset=13)


def kernels_onnxruntime_lacks(model: str | os.PathLike) -> list[Lack]:
    """Why onnxruntime's CPU provider, run from Python as validation and a user run it, cannot run
    ``model``: one :class:`Lack` per node or graph input/output; empty where it has everything the
    model needs.

    Decided from declared facts only, never from an error's text: onnxruntime's kernel registry
    (:func:`undeclared_kernels`), the scatter reductions its registered kernels implement for fewer
    types than they register (:data:`REDUCTIONS_REFUSED`) and the element types its Python binding
    passes (:data:`PASSED_IN`, :data:`PASSED_OUT`). tests/validate/test_engines.py pins each against
    the installed onnxruntime."""
    loaded = _typed(model)
    if loaded is None:  # (what cannot be loaded is not ours to judge here)
        return []
    return ([Lack(what) for what in _undeclared_kernels(loaded)] + _refused_reductions(loaded)
            + _unpassable_types(loaded))


def _typed(model: str | os.PathLike) -> ir.Model | None:
    """``model`` (without its external weights) with the types ONNX's shape inference gives the
    values it does not declare, which decide what a kernel must take; None where it cannot be
    loaded."""
    try:
        proto = (model.without_weights() if isinstance(model, Held)
                 else onnx.load(str(model), load_external_data=False))
    except Exception:
        return None
    try:
        proto = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # (then the declared types alone are judged)
        pass
    return ir.serde.deserialize_model(proto)


def what_onnxruntime_lacks(model: str | os.PathLike) -> tuple[str, str]:
    """:func:`kernels_onnxruntime_lacks` said in one phrase (empty where it lacks nothing), and the
    command that writes a form onnxruntime runs where one does for all of it ("" if none)."""
    lacks = kernels_onnxruntime_lacks(model)
    fixes = {lack.fix for lack in lacks}
    return "; ".join(map(str, lacks)), fixes.pop() if len(fixes) == 1 else ""


# onnxruntime's CPU ScatterElements and ScatterND kernels register every element type, but their
# reductions are implemented for fewer and refuse the others when the node runs (the
# Func_Add/Func_Mul/Func_Max/Func_Min specializations that raise NOT_IMPLEMENTED in
# onnxruntime/core/providers/cpu/tensor/scatter.cc and scatter_nd.cc): (op, reduction) -> the
# element types refused. Checked against the installed onnxruntime, every op, reduction and type.
_FLOAT16, _BFLOAT16 = ir.DataType.FLOAT16, ir.DataType.BFLOAT16
_BOOL, _STRING = ir.DataType.BOOL, ir.DataType.STRING
REDUCTIONS_REFUSED: dict[tuple[str, str], frozenset[ir.DataType]] = {
    ("ScatterElements", "add"): frozenset({_FLOAT16, _BFLOAT16}),
    ("ScatterElements", "mul"): frozenset({_FLOAT16, _BFLOAT16, _STRING}),
    ("ScatterElements", "max"): frozenset({_BFLOAT16, _BOOL, _STRING}),
    ("ScatterElements", "min"): frozenset({_BFLOAT16, _BOOL, _STRING}),
    ("ScatterND", "add"): frozenset({_FLOAT16, _BFLOAT16}),
    ("ScatterND", "mul"): frozenset({_FLOAT16, _BFLOAT16, _STRING}),
    ("ScatterND", "max"): frozenset({_FLOAT16, _BFLOAT16, _BOOL, _STRING}),
    ("ScatterND", "min"): frozenset({_FLOAT16, _BFLOAT16, _BOOL, _STRING}),
}

# The element types onnxruntime's Python binding takes as graph inputs (NumPy's own types) and
# returns as outputs (those, and float8e4m3fn and float4e2m1 as raw bytes: _as_declared). bfloat16,
# the other float8 types and the 4-bit types it cannot pass (no NumPy type of its own), nor complex
# tensors (onnxruntime has none).
PASSED_IN = frozenset({
    ir.DataType.BOOL, ir.DataType.INT8, ir.DataType.INT16, ir.DataType.INT32, ir.DataType.INT64,
    ir.DataType.UINT8, ir.DataType.UINT16, ir.DataType.UINT32, ir.DataType.UINT64,
    ir.DataType.FLOAT16, ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.STRING,
})
PASSED_OUT = PASSED_IN | {ir.DataType.FLOAT8E4M3FN, ir.DataType.FLOAT4E2M1}


def may_refuse_in_parallel(model: ir.Model) -> bool:
    """Whether onnxruntime must run ``model`` without intra-op worker threads: a scatter reduction
    its kernel may refuse (:data:`REDUCTIONS_REFUSED`; an element type not known counts). The
    refusal is raised from inside the kernel's parallel loop (ScatterND's TryParallelFor): with
    worker threads, that unwinds the loop while a worker still holds a task over it, and the worker
    then calls into freed memory and kills the process (SIGSEGV, measured with onnxruntime 1.32,
    most often in a session's first run, its worker just started). With one thread the kernel runs
    on the calling thread and its refusal reaches Python as usual."""
    from scatter_rewrite.graph import attr, is_default_domain, iter_nodes

    for node, _scope in iter_nodes(model):
        refused = REDUCTIONS_REFUSED.get((node.op_type, attr(node, "reduction", "none")))
        if (refused and is_default_domain(node) and node.inputs and node.inputs[0] is not None
                and (node.inputs[0].dtype is None or node.inputs[0].dtype in refused)):
            return True
    return False


def session_threads(model: str | os.PathLike | bytes | onnx.ModelProto | Held,
                    threads: int = 0) -> int:
    """The intra-op threads an onnxruntime session of ``model`` (a file, its big weights mapped,
    not read; bytes; a ModelProto; a model held in memory) may have: 1 where it :func:`may_refuse_in_parallel`, else
    ``threads`` (0: onnxruntime's default). Every session of ours, and of the tests and benchmarks,
    is made so. A model that cannot be loaded keeps ``threads`` (onnxruntime then says why)."""
    if isinstance(model, bytes) and b"reduction" not in model:
        return threads  # (no attribute of that name: no reduction to refuse; nothing parsed)
    try:
        if isinstance(model, Held):
            refuses = may_refuse_in_parallel(model.model)
        else:
            proto = (onnx.ModelProto.FromString(model) if isinstance(model, bytes)
                     else proto_of(model, weights=False))
            refuses = may_refuse_in_parallel(ir.serde.deserialize_model(proto))
    except Exception:  # (whatever makes the model unloadable: onnxruntime's session reports it)
        return threads
    return 1 if refuses else threads


def _refused_reductions(model: ir.Model) -> list[Lack]:
    from scatter_rewrite.graph import attr, describe, is_default_domain, iter_nodes

    refused = []
    for node, scope in iter_nodes(model):
        if not is_default_domain(node) or not node.inputs or node.inputs[0] is None:
            continue
        reduction = attr(node, "reduction", "none")
        dtype = node.inputs[0].dtype
        if dtype in REDUCTIONS_REFUSED.get((node.op_type, reduction), ()):
            refused.append(Lack(f"{describe(node, scope)}: no {_ort_type_name(dtype)} "
                                f"reduction='{reduction}' in its CPU kernel",
                                LOWER_TO_RUN if dtype == _FLOAT16 else ""))
    return refused


def _unpassable_types(model: ir.Model) -> list[Lack]:
    unpassable = []
    for values, passed, what in ((model.graph.inputs, PASSED_IN, "input"),
                                 (model.graph.outputs, PASSED_OUT, "output")):
        for value in values:
            if value.dtype is not None and value.dtype not in passed:
                unpassable.append(Lack(f"graph {what} '{value.name}' is "
                                       f"{_ort_type_name(value.dtype)}, which onnxruntime's "
                                       "Python binding cannot pass"))
    return unpassable


def undeclared_kernels(model: str | os.PathLike) -> list[str]:
    """The default-domain nodes of ``model`` (main graph, bodies, local functions) for which
    onnxruntime's CPU provider registers no kernel at the model's opset, or none for the type of an
    input (by the schema's type parameter of that input), as ``op(opset)`` or ``op(opset, type)``.
    Input types not known (inside a function) are not judged."""
    loaded = _typed(model)
    return [] if loaded is None else _undeclared_kernels(loaded)


def _undeclared_kernels(loaded: ir.Model) -> list[str]:
    from scatter_rewrite.graph import is_default_domain, iter_nodes

    opset = loaded.opset_imports.get("", loaded.opset_imports.get("ai.onnx"))
    if opset is None:
        return []
    declared = _cpu_kernels()
    missing = []
    for node, _scope in iter_nodes(loaded):
        if not is_default_domain(node) or node.op_type == "Constant":
            continue  # (onnxruntime loads Constant nodes as initializers: no kernel runs them)
        kernels = [c for lo, hi, c in declared.get(node.op_type, []) if lo <= opset <= hi]
        try:
            schema = onnx.defs.get_schema(node.op_type, opset)
        except onnx.defs.SchemaError:
            continue
        if not kernels and (schema.has_function or schema.has_context_dependent_function):
            continue  # (onnxruntime runs an op it has no kernel for through its function body)
        if not kernels:
            missing.append(f"{node.op_type}({opset})")
            continue
        constraints: dict[str, set[str]] = {}  # (one kernel per type, often: their union)
        for kernel in kernels:
            for param, types in kernel.items():
                constraints.setdefault(param, set()).update(types)
        formal = schema.inputs
        for k, value in enumerate(node.inputs):
            param = formal[min(k, len(formal) - 1)].type_str if formal else None
            if value is None or value.dtype is None or param not in constraints:
                continue
            name = _ort_type_name(value.dtype)
            # (a float16 node without a float16 kernel runs on its float kernel, between the Casts
            # onnxruntime's InsertCastTransformer adds when it loads the model)
            cast = name == "float16" and "tensor(float)" in constraints[param]
            if f"tensor({name})" not in constraints[param] and not cast:
                missing.append(f"{node.op_type}({opset}, {name})")
                break
    return missing


def _ort_type_name(dtype: ir.DataType) -> str:
    return {ir.DataType.FLOAT: "float", ir.DataType.DOUBLE: "double"}.get(dtype, dtype.name.lower())


@functools.cache
def _cpu_kernels() -> dict[str, list[tuple[int, int, dict[str, set[str]]]]]:
    """onnxruntime's CPU kernels of the default domain, from its registry: op -> (first opset,
    last opset, the types of each type parameter)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

    kernels: dict[str, list[tuple[int, int, dict[str, set[str]]]]] = {}
    for kernel in ort_state.get_all_opkernel_def():
        if kernel.provider != "CPUExecutionProvider" or kernel.domain not in DEFAULT_DOMAINS:
            continue
        lo, hi = kernel.version_range
        constraints = {param: set(types) for param, types in kernel.type_constraints.items()}
        kernels.setdefault(kernel.op_name, []).append((lo, hi, constraints))
    return kernels
