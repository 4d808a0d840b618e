"""onnxruntime's CPU execution provider (``ort-cpu``, and ``ort-web``: onnxruntime-web's WebAssembly
backend, the same kernels compiled to WASM): the scatters it has kernels for, measured by
creating and running a session for each op, reduction and data type (onnxruntime 1.32.0, opset 18;
TensorScatter at 24). It has no bfloat16 scatter at all, no float16 add/mul (ScatterElements,
ScatterND) and no float16 ScatterND max/min, no bool max/min: "CPU execution provider: MLFloat16
data type is not supported with ScatterElements opset 16 when reduction is 'add'".

``prepare --target ort-cpu`` rewrites only those nodes: a float16 or bool reduction as lower's sort
+ segmented reduction + ScatterND(none), which the provider runs (float16 add/mul summed in float32
and rounded once, as ``repair`` writes float16 accumulations); a bfloat16 one as an exact
scatter-free form (:mod:`scatter_rewrite.passes.no_scatter`), since not even ScatterND(none) takes
bfloat16. Float results are judged against the original's per-update rounding, as validation
judges every float sum.
"""

from __future__ import annotations

__all__: list[str] = []  # (registers its targets at import; nothing else to use)

import functools

from scatter_rewrite.targets import (
    SCATTER_DATA_TYPES, OpTable, Preparation, ScatterSupport, Target, register_target,
)
from scatter_rewrite.limits import DEFAULT_DOMAINS


def _all_but(*names: str) -> frozenset[str]:
    return SCATTER_DATA_TYPES - set(names)


_RUNS = (
    ScatterSupport("ScatterElements", frozenset({"none"}), _all_but("BFLOAT16")),
    ScatterSupport("ScatterElements", frozenset({"add", "mul"}), _all_but("BFLOAT16", "FLOAT16")),
    ScatterSupport("ScatterElements", frozenset({"max", "min"}), _all_but("BFLOAT16", "BOOL")),
    ScatterSupport("ScatterND", frozenset({"none"}), _all_but("BFLOAT16")),
    ScatterSupport("ScatterND", frozenset({"add", "mul"}), _all_but("BFLOAT16", "FLOAT16")),
    ScatterSupport("ScatterND", frozenset({"max", "min"}),
                   _all_but("BFLOAT16", "FLOAT16", "BOOL")),
    ScatterSupport("TensorScatter", frozenset({"none"}), _all_but("BFLOAT16")),
)


@functools.cache
def _op_table(target: str = "ort-cpu") -> OpTable:
    """The ops the installed onnxruntime's CPU provider runs: those it registers a kernel for (its
    registry, every domain, with each kernel's opset range), the default-domain ops whose ONNX
    schema has a function body at that opset (onnxruntime inlines them), and Constant (loaded as
    an initializer). Types are validation's to judge (validate/engines.py undeclared_kernels)."""
    import onnx
    import onnxruntime
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

    ranges: dict[tuple[str, str], list[tuple[int | None, int | None]]] = {}
    for kernel in ort_state.get_all_opkernel_def():
        if kernel.provider == "CPUExecutionProvider":
            domain = "" if kernel.domain == "ai.onnx" else kernel.domain
            ranges.setdefault((domain, kernel.op_name), []).append(kernel.version_range)
    by_op: dict[str, list] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain in DEFAULT_DOMAINS:
            by_op.setdefault(schema.name, []).append(schema)
    for name, schemas in by_op.items():
        schemas.sort(key=lambda s: s.since_version)
        for i, schema in enumerate(schemas):
            if schema.has_function or schema.has_context_dependent_function:
                last = schemas[i + 1].since_version - 1 if i + 1 < len(schemas) else None
                ranges.setdefault(("", name), []).append((schema.since_version, last))
    ranges[("", "Constant")] = [(None, None)]
    return OpTable(target, "onnxruntime's CPU kernel registry (get_all_opkernel_def), and ONNX "
                   "function bodies", "https://onnxruntime.ai/docs/reference/operators/OperatorKernels.html",
                   f"onnxruntime {onnxruntime.__version__} as installed", "at run time",
                   {key: tuple(found) for key, found in ranges.items()})


register_target(Target(
    name="ort-cpu", family="ort-cpu",
    summary="onnxruntime's CPU execution provider (float16/bfloat16 reductions it lacks)",
    opsets=(7, None), runs=_RUNS,
    gets_wrong=(),
    sources=("measured: onnxruntime 1.32.0 CPU provider, one session per op/reduction/type",
             "onnxruntime/core/providers/cpu/tensor/scatter.cc, scatter_nd.cc (the types "
             "registered for each reduction)"),
    preparation=Preparation(), options=("max_intermediate_mib",), ops=_op_table,
    onnxruntime=True))

# onnxruntime-web's WebAssembly backend is the CPU provider compiled with Emscripten (its README:
# "compiles the native ONNX Runtime CPU engine into WebAssembly"): the same kernels, so the same
# facts and the same rewrite; proven in the installed onnxruntime, as ort-cpu.
register_target(Target(
    name="ort-web", family="ort-cpu",
    summary="onnxruntime-web's WebAssembly backend (the CPU provider's kernels, compiled to WASM)",
    opsets=(7, None), runs=_RUNS,
    gets_wrong=(),
    sources=("https://www.npmjs.com/package/onnxruntime-web (README: the native CPU engine "
             "compiled into WebAssembly, full ONNX operator coverage)",
             "measured: onnxruntime-web 1.30.0 (WASM) in Node.js ran every native scatter and "
             "every scatter-free form exactly"),
    preparation=Preparation(), options=("max_intermediate_mib",),
    ops=functools.partial(_op_table, "ort-web"), onnxruntime=True))
