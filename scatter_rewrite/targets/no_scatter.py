"""Runtimes with no usable scatter (``no-scatter``, and the NPU stacks that map to it: ``qnn``,
``rknn``): every scatter becomes an exact scatter-free form
(:mod:`scatter_rewrite.passes.no_scatter`), the bytes it holds at once bounded by
``--max-intermediate-mib``.

Sources (also in docs/targets.md):

* ``qnn``: onnxruntime's QNN execution provider (Qualcomm NPUs) lacked ScatterElements and
  ScatterND before 1.22 (microsoft/onnxruntime#22962, #22319): such nodes fall back to the CPU
  provider, or fail where no fallback is allowed. Later releases take ScatterND none/add/mul
  (#24592, #24844) and ScatterElements none/add/mul/max (#24811), but not max/min everywhere, with
  reductions on the HTP only when quantized (pytorch/executorch#22157) and integer data computed
  as float32: the scatter-free forms are exact on every release.
* ``rknn``: Rockchip's rknn-toolkit2 has no (reducing) scatter: airockchip/rknn-toolkit2#359.
* other NPUs and compilers: apache/tvm#19435 (scatter reductions silently ignored).
"""

from __future__ import annotations

from collections.abc import Callable

__all__: list[str] = []  # (registers its targets at import; nothing else to use)

from scatter_rewrite.limits import OPSET_FLOOR
from scatter_rewrite.targets import OpTable, Preparation, Target, op_table_file, register_target

_FORMS = ("exact scatter-free forms: Gather/GatherElements, Equal, Where, Reduce*, TopK, "
          "Concat/Slice/Range; no Loop")


# rknn-toolkit2 2.3.2's op list marks TopK "Not Supported": the sort form cannot be converted
SORT_FORM_UNCONVERTED = ("its only exact scatter-free form (sort) needs TopK, which rknn-toolkit2 "
                         "does not convert (doc/RKNNToolKit2_OP_Support-2.3.2.md)")


# rknn-toolkit2 2.3.2's op list: "the corresponding ONNX opset version is 19"
RKNN_MAX_OPSET = 19


def _scatter_free(name: str, summary: str, gets_wrong: tuple[str, ...],
                  sources: tuple[str, ...], ops: Callable[[], OpTable] | None = None,
                  preparation: Preparation = Preparation(scatters="all")) -> Target:
    return register_target(Target(
        name=name, family="no-scatter", summary=summary, opsets=(OPSET_FLOOR, None), runs=(),
        gets_wrong=gets_wrong, sources=sources, preparation=preparation,
        options=("max_intermediate_mib",), ops=ops))


_scatter_free("no-scatter", f"any runtime without a usable scatter ({_FORMS})", (), (
    "https://github.com/apache/tvm/issues/19435 (scatter reductions silently ignored)",))
_scatter_free(
    "qnn", "Qualcomm QNN (onnxruntime's QNN execution provider): no exact scatter on every release",
    ("ScatterElements/ScatterND are not taken by the QNN EP before onnxruntime 1.22: the node falls "
     "back to the CPU provider, or the session fails where fallback is disabled",
     "later releases: ScatterND max/min and ScatterElements min refused, reductions on the HTP "
     "only when quantized, integer data computed as float32"),
    ("https://github.com/microsoft/onnxruntime/issues/22962",
     "https://github.com/microsoft/onnxruntime/issues/22319",
     "https://github.com/microsoft/onnxruntime/pull/24844",
     "https://github.com/microsoft/onnxruntime/pull/24811",
     "https://github.com/onnxruntime/onnxruntime-qnn/pull/109",
     "https://github.com/pytorch/executorch/pull/22157"), op_table_file("qnn"))
_scatter_free(
    "rknn", "Rockchip RKNN (rknn-toolkit2): no usable scatter",
    ("reducing scatters are not converted (reported in airockchip/rknn-toolkit2#359)",),
    ("https://github.com/airockchip/rknn-toolkit2/issues/359",), op_table_file("rknn"),
    # (a model above opset 19 moved down, exactly, after its scatters are rewritten)
    Preparation(scatters="mask", no_sort=SORT_FORM_UNCONVERTED,
                max_opset=(RKNN_MAX_OPSET, f"rknn-toolkit2 2.3.2 converts opsets up to "
                                           f"{RKNN_MAX_OPSET}")))
