"""Apache TVM (``tvm``): its Relax ONNX frontend (tvm.relax.frontend.onnx), compiled for the CPU
with LLVM. Measured with apache-tvm 0.27.0.post1 (tests/targets/test_openvino_tvm.py runs them):
ScatterElements and ScatterND with none/add/mul/max/min, deprecated Scatter (opset 9), int32 and
negative indices, indices as inputs and as initializers, all exact. TensorScatter (opset 24) is not
implemented ("The following operators are not supported for frontend ONNX: TensorScatter"):
``prepare`` rewrites it (an exact scatter-free form, no MatMul), and nothing else.

TVM's older Relay frontend silently ignored scatter reductions (apache/tvm#19435): a TVM without
the Relax frontend should take ``no-scatter``.
"""

from __future__ import annotations

from scatter_rewrite.targets import Target, op_table_file, register_target
from scatter_rewrite.targets.runtimes import Runtime
from scatter_rewrite.targets.openvino import RUNS, RUNS_PREPARATION

__all__: list[str] = []  # (registers its target at import; nothing else to use)

register_target(Target(
    name="tvm", family="tvm",
    summary="Apache TVM's Relax (0.27): every scatter but TensorScatter runs exactly",
    opsets=(7, None), runs=RUNS,
    gets_wrong=("Relay (before Relax): scatter reductions silently ignored (apache/tvm#19435)",),
    sources=("measured: apache-tvm 0.27.0.post1, Relax frontend, LLVM CPU "
             "(tests/targets/test_openvino_tvm.py)",
             "https://github.com/apache/tvm/issues/19435"),
    preparation=RUNS_PREPARATION, options=("max_intermediate_mib",),
    ops=op_table_file("tvm"),
    runner=Runtime("TVM", "run_tvm.py", "tvm", "pip install apache-tvm")))
