"""TensorRT's facts that need no data type objects: each version's opset range, the scatter
layer's and the ScatterElements plugin's data types (by name), TensorScatter, TopK's limit. Read
by the target's registration (which must not import onnx) and by :mod:`.parser`, which holds the
per-op tables and the sources in full."""

from __future__ import annotations

__all__ = ["PARSER_OPSETS", "PARSES_TENSORSCATTER", "PLUGIN_TYPES", "SCATTER_TYPES", "TOPK_MAX_K"]

# Each version's parser's opsets (onnx-tensorrt docs/operators.md: "TensorRT 10.0 supports
# operators in the inclusive range of opset 9 to opset 20"; 8.5/8.6: "up to Opset 17", from 7).
# TensorRT 11 (docs/tensorrt-11.md): 24 on every 11.x; 25 came with 11.5 ("Added support for
# ONNX opset 25").
PARSER_OPSETS = {"8.6": (7, 17), "10": (9, 20), "11": (9, 24)}
# The versions whose parser imports TensorScatter (onnx-tensorrt Changelog, 10.15: "Added support
# for ... TensorScatter"): the flow leaves it as it is there.
PARSES_TENSORSCATTER = frozenset({"11"})
# The largest K TensorRT's TopK takes: NVIDIA/TensorRT release/8.6 include/NvInfer.h, addTopK
# "Currently only values of K up to 3840 are supported", ITopKLayer::setInput "Values larger than
# 3840 will result in a runtime error"; the same in 10.x. (11: no change noted since.)
TOPK_MAX_K = {"8.6": 3840, "10": 3840, "11": 3840}
# The scatter layer's data types as parsed (ScatterND and ScatterElements; TensorRT 8.6 operator
# docs Scatter.html: int8, int32, float16, float32; 10.7's: also int64 and bfloat16; no bool).
# INT64 and DOUBLE are cast down by the 8.6 parser, DOUBLE by 10's: accepted, but not exact, so
# not listed.
SCATTER_TYPES = {
    "8.6": frozenset({"FLOAT", "FLOAT16", "INT8", "INT32"}),
    "10": frozenset({"FLOAT", "FLOAT16", "BFLOAT16", "INT8", "INT32", "INT64"}),
    "11": frozenset({"FLOAT", "FLOAT16", "BFLOAT16", "INT8", "INT32", "INT64"}),
}
# NVIDIA/TensorRT plugin/scatterElementsPlugin/README.md: the reductions' plugin; int64 indices
# only; BF16/INT8 unsupported.
PLUGIN_TYPES = frozenset({"FLOAT", "FLOAT16", "INT32", "INT64"})
