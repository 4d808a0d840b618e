"""TensorRT 8.6, 10 and 11 (``tensorrt-8.6``, ``tensorrt-10``, ``tensorrt-11``): what TensorRT
takes lives here, :mod:`.facts` (opsets, the scatter's and the plugin's types, TopK's limit) and
:mod:`.parser` (the ops and data types each parser takes, the casts around a scatter), where the
sources are cited in full; the ``tensorrt`` verb's flow
(:func:`scatter_rewrite.passes.lists.tensorrt_passes`) reads them, and docs/tensorrt.md says what
each version runs.

``prepare --target tensorrt-X`` runs exactly what ``tensorrt --trt-version X`` runs, and check's
judgement of a node is readiness's TensorRT one (:mod:`scatter_rewrite.readiness.tensorrt`; it
needs the tensorrt pass's view of the model: constant Ifs inlined, dimensions fixed).
"""

from __future__ import annotations

__all__: list[str] = []  # (registers its targets at import; nothing else to use)

from scatter_rewrite.targets import ScatterSupport, Target, register_target
from scatter_rewrite.limits import TRT_VERSIONS
from scatter_rewrite.targets.tensorrt.facts import (
    PARSER_OPSETS, PARSES_TENSORSCATTER, PLUGIN_TYPES, SCATTER_TYPES,
)

_SOURCES = (
    "onnx/onnx-tensorrt docs/operators.md (8.5/8.6 and 10.x lines)",
    "NVIDIA/TensorRT plugin/scatterElementsPlugin/README.md",
    "https://github.com/NVIDIA/TensorRT/issues/3750 (8.6 ignores scatter reductions)",
    "https://github.com/onnx/onnx-tensorrt/issues/957 (10.0-10.8 reject ScatterND's reduction "
    "attribute)",
    "https://github.com/NVIDIA/TensorRT/issues/3650 (indices dimensions above data's)",
    "docs/tensorrt.md, docs/tensorrt-11.md",
)


def _runs(version: str) -> tuple[ScatterSupport, ...]:
    layer = SCATTER_TYPES[version]
    plain = (ScatterSupport("ScatterElements", frozenset({"none"}), layer,
                            limits="indices/updates dimensions at most data's"),
             ScatterSupport("ScatterND", frozenset({"none"}), layer,
                            limits="no reduction attribute at all on 10.0-10.8"))
    if version == "8.6":
        return plain
    plugin = ScatterSupport("ScatterElements", frozenset({"add", "mul", "max", "min"}),
                            PLUGIN_TYPES, frozenset({"INT64"}),
                            limits="through the ScatterElements plugin (standard plugins loaded)")
    tensor_scatter = (ScatterSupport("TensorScatter", frozenset({"none"})),) \
        if version in PARSES_TENSORSCATTER else ()
    return plain + (plugin,) + tensor_scatter


def _gets_wrong(version: str) -> tuple[str, ...]:
    if version == "8.6":
        return ("ScatterElements/ScatterND add/mul/max/min: the reduction is ignored, computed as "
                "an overwrite (NVIDIA/TensorRT#3750)",
                "INT64 data cast down to INT32, DOUBLE to FLOAT (values clamped)")
    return ("DOUBLE data cast down to FLOAT (values clamped)",)


for _version in TRT_VERSIONS:
    register_target(Target(
        name=f"tensorrt-{_version}", family="tensorrt",
        summary=f"NVIDIA TensorRT {_version} (its ONNX parser)",
        opsets=PARSER_OPSETS[_version], runs=_runs(_version), gets_wrong=_gets_wrong(_version),
        sources=_SOURCES, options=("fix_dims",),
        verb=("tensorrt", {"trt_version": _version}), judge=("tensorrt", _version)))
