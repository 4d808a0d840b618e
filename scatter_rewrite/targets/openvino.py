"""OpenVINO: ``openvino`` (its CPU and GPU plugins) and ``openvino-npu`` (its NPU plugin).

``openvino``: the CPU plugin ran every scatter exactly, measured with OpenVINO 2026.4.1 (tests/
test_runtime_openvino_tvm.py runs them): ScatterElements and ScatterND with none/add/mul/max/min,
deprecated Scatter (opset 9), int32 and negative indices, indices as inputs and as initializers.
Only TensorScatter (opset 24) has no conversion rule ("No conversion rule found for operations:
TensorScatter-24"): ``prepare`` rewrites it as ScatterElements, and nothing else (a checked
no-op otherwise). No form written here uses MatMul: the CPU plugin runs MatMul in bf16 on CPUs
that have it unless told otherwise (a one-hot MatMul scatter came out 0.023 off on a bf16-capable
Xeon, issue #32).

``openvino-npu``: the NPU plugin rejects ScatterElementsUpdate and ScatterNDUpdate (reported in
openvinotoolkit/openvino#24976 and #25607): every scatter becomes its cheapest exact scatter-free
form, as ``no-scatter`` writes it. OpenVINO's TopK does not keep equal keys in index order
(measured on its CPU plugin) and its CPU ``Greater`` is true where an operand is NaN on some CPUs
(an Intel Xeon; right on others: the kernel depends on the CPU), ``Less`` right on all: the forms
give TopK distinct keys and compare with ``Less`` only, and run exactly on the CPU plugin (float
max/min with NaN and -0.0/+0.0 included). Judged from those reports and the CPU plugin; no NPU here.
"""

from __future__ import annotations

from scatter_rewrite.targets import (
    ALL_REDUCTIONS, Preparation, ScatterSupport, Target, op_table_file, register_target,
)
from scatter_rewrite.targets.runtimes import Runtime

__all__ = ["RUNS", "RUNS_PREPARATION"]

# every scatter but TensorScatter, any type OpenVINO's ONNX frontend reads
RUNS = (
    ScatterSupport("ScatterElements", ALL_REDUCTIONS),
    ScatterSupport("ScatterND", ALL_REDUCTIONS),
    ScatterSupport("Scatter", frozenset({"none"})),
)


# (a deprecated Scatter the checker rejects, at opset 11 or later, upgraded first, as every
# target's verb does; the scatters ``runs`` does not cover rewritten)
RUNS_PREPARATION = Preparation(upgrade="rejected")


register_target(Target(
    name="openvino", family="openvino",
    summary="OpenVINO's CPU/GPU plugins (every scatter but TensorScatter runs exactly)",
    opsets=(7, None), runs=RUNS,
    gets_wrong=("MatMul run in bf16 by default on CPUs with AVX512_BF16/AMX (pin "
                "INFERENCE_PRECISION_HINT=f32): no form written here uses MatMul",),
    sources=("measured: OpenVINO 2026.4.1 CPU plugin (tests/targets/test_openvino_tvm.py)",
             "docs.openvino.ai, CPU device, floating-point precision: inference_precision_hint "
             "defaults to bf16 where the CPU has AVX512_BF16 or AMX"),
    preparation=RUNS_PREPARATION, options=("max_intermediate_mib",),
    ops=op_table_file("openvino"),
    runner=Runtime("OpenVINO", "run_openvino.py", "openvino", "pip install openvino")))

register_target(Target(
    name="openvino-npu", family="openvino",
    summary="OpenVINO's NPU plugin: no ScatterElementsUpdate/ScatterNDUpdate",
    opsets=(7, None), runs=(),
    gets_wrong=("ScatterElementsUpdate/ScatterNDUpdate rejected by the NPU compiler",
                "TopK orders equal values otherwise than ONNX, Greater is true on NaN on some "
                "CPUs (CPU plugin, measured): the forms written rely on neither"),
    sources=("https://github.com/openvinotoolkit/openvino/issues/24976",
             "https://github.com/openvinotoolkit/openvino/issues/25607"),
    # (the NPU plugin publishes its operations as OpenVINO's own opsets, not ONNX ops: the model
    # must first pass the ONNX frontend, whose table is OpenVINO's)
    preparation=Preparation(), options=("max_intermediate_mib",), ops=op_table_file("openvino")))
