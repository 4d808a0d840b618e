"""What TensorRT's ONNX parser accepts, per op and data type: the one table the ``tensorrt`` flow
checks what it emits against
(:func:`scatter_rewrite.passes.tensorrt_violations.tensorrt_violations`), the data types a scatter
may have on each version (``tensorrt`` and ``check``), the casts that carry the types its scatter
lacks, and the data type forms of :mod:`.facts` (opsets, plugin types).

Sources (TensorRT cannot run here; these are the published tables):

* ``"8.6"``: onnx-tensorrt ``docs/operators.md`` "Operator Support Matrix" of the 8.5/8.6 line
  ("TensorRT 8.5 supports operators up to Opset 17", onnx/onnx-tensorrt commit 6d0ab7be; the
  8.6-GA branch's copy, "TensorRT 8.6 supports operators up to Opset 17", lists the same types
  for every op the network lowering emits, GatherElements FP32, FP16, INT8, INT32, BOOL among
  them), and that line's importer: ``onnx2trt_utils.cpp`` ``convertDtype`` maps INT64 to INT32
  (values clamped to int32, ``convertINT64``) and DOUBLE to FLOAT, and has no BFLOAT16 (TensorRT
  8.x has no bfloat16 type: "Unsupported ONNX data type"); ``elementwiseCheck`` refuses BOOL for
  Add/Sub/Mul/Max/Min/Less/Greater and non-BOOL for And/Or/Xor; ``Range`` takes int32 or float
  only; ``Mod`` with ``fmod=0`` takes INT32 only; ``Reshape`` reads ``allowzero``; ``Slice`` needs
  constant ``axes``; ``addScatterLayer`` rejects UINT8 data. TensorRT 8.6 operator docs
  (docs.nvidia.com/deeplearning/tensorrt/archives/tensorrt-860-ea/operators/docs/Scatter.html):
  scatter data T1 = int8, int32, float16, float32 (no bool).
* ``"10"``: onnx-tensorrt ``docs/operators.md`` of the 10.x line ("TensorRT 10.0 supports
  operators in the inclusive range of opset 9 to opset 20"; the rows below are the 10.15 table's,
  which lists the types of each op; DOUBLE is cast down to FLOAT; INT8 is a quantized type),
  plus the TensorRT 10 operator docs (docs.nvidia.com/deeplearning/tensorrt/archives/tensorrt-10x0/
  operators/docs/) where they list more: Cast.html (10.6: T1/T2 bool, uint8, int8, int32, int64,
  float16, bfloat16, float32), Shape.html (10.7: T1 includes int8) and Scatter.html (10.7: T1
  int8, int32, int64, float16, float32, bfloat16; no bool).

* ``"11"``: the ``"10"`` rows. TensorRT 11.0-11.5's release notes (NVIDIA/TensorRT releases v11.0 to
  v11.5) add parser support for Swish, DFT, 5-D GridSample, Squeeze without axes and opset 25, and
  remove deprecated plugins, none a scatter nor a type of the ops below; see docs/tensorrt-11.md.

Only ops the tensorrt flow emits or checks are listed; an op not listed is reported as unaudited
(never silently accepted). A data type is checked as the parser sees it (:func:`as_parsed`).
"""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.targets.tensorrt.facts import (
    PARSER_OPSETS, PARSES_TENSORSCATTER, PLUGIN_TYPES, SCATTER_TYPES, TOPK_MAX_K,
)

__all__ = [
    "as_parsed", "BOOL_OUTPUT_OPS", "CARRIED_DATA_TYPES", "CARRIER_CASTS_VIA", "no_tensor_type",
    "PARSER_CASTS", "PARSER_MAX_OPSET", "PARSES_TENSORSCATTER", "PLUGIN_DATA_TYPES",
    "SCATTER_CARRIERS", "scatter_types", "SUPPORTED_TYPES", "TOPK_MAX_K", "type_names",
    "typed_inputs", "UNSUPPORTED_OPS", "unsupported_type",
]

DT = ir.DataType
F32, F16, BF16, F64 = DT.FLOAT, DT.FLOAT16, DT.BFLOAT16, DT.DOUBLE
I8, I32, I64, U8, B = DT.INT8, DT.INT32, DT.INT64, DT.UINT8, DT.BOOL

_86_NUM = frozenset(
    {F32, F16, I32}
)  # Add, Sub, Mul, Div, Max, Min, Mod, Equal, Less, Greater, Neg, Abs
_86_MOVE = frozenset(
    {F32, F16, I32, I8, B}
)  # Concat, Constant, Identity, Reshape, Shape, Slice, Unsqueeze, Cast
_10_NUM = frozenset({F32, F16, BF16, I32, I64})
_10_MOVE = frozenset({F32, F16, BF16, I32, I64, B})


def _scatter_types(version: str) -> frozenset:
    """facts.SCATTER_TYPES[version] as data types."""
    return frozenset(DT[name] for name in SCATTER_TYPES[version])


# op -> the data types the parser takes for it (the "Supported Types" column; see the module
# docstring).
SUPPORTED_TYPES: dict[str, dict[str, frozenset]] = {
    "8.6": {
        **{
            op: _86_NUM
            for op in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Mod", "Equal", "Less", "Greater",
                       "Neg", "Abs", "IsNaN", "Sum")
        },
        **{op: frozenset({B}) for op in ("And", "Or", "Xor", "Not")},
        **{
            op: _86_MOVE
            for op in ("Cast", "Concat", "Constant", "Identity", "Reshape", "Shape", "Size",
                       "Slice", "Squeeze", "Unsqueeze", "Transpose")
        },
        **{
            op: frozenset({F32, F16, I32, B})
            for op in ("Expand", "Flatten", "Tile", "Split", "Where", "If", "Loop")
        },
        **{op: frozenset({F32, F16, I8, I32, B}) for op in ("Gather", "GatherElements")},
        "ScatterND": _scatter_types("8.6"),
        "ScatterElements": _scatter_types("8.6"),
        # the 8.x importer: "only supports int32 and float input types"
        "Range": frozenset({F32, I32}),
        "ConstantOfShape": frozenset({F32}),
        **{
            op: frozenset({F32, F16})
            for op in ("Reciprocal", "CumSum", "ReduceMax", "ReduceMin", "ReduceSum", "TopK",
                       "NonZero")
        },
        # What the opset cap's function bodies bring (Gelu-20's, at 17): docs/operators.md (8.5)
        # "Erf | Y | FP32, FP16", "Sqrt | Y | FP32, FP16".
        **{op: frozenset({F32, F16}) for op in ("Erf", "Sqrt")},
        # What the antialias Resize form (opset/forms/resize_antialias_18_13.py) brings at the cap:
        # docs/operators.md (8.5) "MatMul | Y | FP32, FP16".
        "MatMul": frozenset({F32, F16}),
    },
    "10": {
        **{
            op: _10_NUM
            for op in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Mod", "Equal", "Less", "Greater",
                       "Neg", "Abs", "IsNaN", "Sum", "Range", "ReduceMax", "ReduceMin",
                       "ReduceSum", "TopK")
        },
        **{op: frozenset({B}) for op in ("And", "Or", "Xor", "Not")},
        **{
            op: _10_MOVE
            for op in ("Concat", "Constant", "ConstantOfShape", "Identity", "Reshape", "Size",
                       "Slice", "Squeeze", "Unsqueeze", "Transpose", "Expand", "Flatten", "Tile",
                       "Split", "Where", "If", "Loop", "Gather", "GatherElements")
        },
        "Cast": _10_MOVE | {I8, U8},  # Cast.html (10.6) lists int8 and uint8 too
        "Shape": _10_MOVE | {I8},  # Shape.html (10.7) lists int8 too
        "ScatterND": _scatter_types("10"),  # Scatter.html (10.7) lists int8 too
        "ScatterElements": _scatter_types("10"),
        **{op: frozenset({F32, F16, BF16}) for op in ("Reciprocal", "CumSum", "Erf", "Sqrt")},
        "NonZero": frozenset({F32, F16}),
        "MatMul": frozenset({F32, F16, BF16}),  # docs/operators.md (10.x) "MatMul | Y | FP32, FP16, BF16"
    },
}
# The parser casts these down on import (docs/operators.md: "TensorRT will attempt to cast down
# INT64 to INT32 and DOUBLE down to FLOAT, clamping values"; 10.x: DOUBLE only).
PARSER_CASTS = {"8.6": {I64: I32, F64: F32}, "10": {F64: F32}, "11": {F64: F32}}
SUPPORTED_TYPES["11"] = SUPPORTED_TYPES["10"]
# Ops with no support at all in either version's table ("N").
UNSUPPORTED_OPS = frozenset(
    {
        "Compress",
        "Unique",
        "StringNormalizer",
        "TfIdfVectorizer",
        "BitShift",
        "BitwiseAnd",
        "BitwiseOr",
        "BitwiseXor",
        "BitwiseNot",
        "ConcatFromSequence",
        "SequenceAt",
        "SequenceConstruct",
        "SequenceEmpty",
        "SequenceInsert",
        "SplitToSequence",
    }
)
# Whose input's type the "Supported Types" column constrains (default: input 0; Where: X and Y).
_TYPED_INPUTS = {"Where": (1, 2)}
# Ops whose output is BOOL whatever their inputs (for following types through untyped values).
BOOL_OUTPUT_OPS = frozenset(
    {
        "Equal",
        "Less",
        "Greater",
        "LessOrEqual",
        "GreaterOrEqual",
        "Not",
        "And",
        "Or",
        "Xor",
        "IsNaN",
        "IsInf",
    }
)


def as_parsed(dtype: ir.DataType, version: str) -> ir.DataType:
    """``dtype`` as TensorRT ``version``'s parser makes it (INT64 -> INT32 on 8.x, DOUBLE ->
    FLOAT)."""
    return PARSER_CASTS[version].get(dtype, dtype)


def type_names(types) -> str:
    order = [F32, F16, BF16, I8, I32, I64, U8, B]
    return ", ".join(t.name for t in order if t in types)


def unsupported_type(op: str, dtype: ir.DataType | None, version: str) -> str | None:
    """Why TensorRT ``version``'s parser does not take ``op`` on ``dtype`` data (None: it does, or
    the type is unknown). ``op`` must be in :data:`SUPPORTED_TYPES`."""
    if dtype is None:
        return None
    allowed = SUPPORTED_TYPES[version][op]
    if as_parsed(dtype, version) in allowed:
        return None
    return (f"{op} on {dtype.name} (TensorRT {version}'s parser takes {type_names(allowed)}: "
            "onnx-tensorrt docs/operators.md)")


def typed_inputs(node: ir.Node) -> tuple[int, ...]:
    return _TYPED_INPUTS.get(node.op_type, (0,))


def scatter_types(version: str) -> frozenset:
    """The data types a ScatterND/ScatterElements may have on TensorRT ``version`` (as parsed)."""
    return SUPPORTED_TYPES[version]["ScatterND"]


# Scatter data types TensorRT's scatter lacks, written through a wider integer type it takes (Cast
# data and updates, scatter, Cast back): every value of the narrow type is one of the wider, and
# max/min/none give back one of them. UINT8 is rejected by the scatter importer (onnx-tensorrt
# addScatterLayer: checkNotInvalidType UINT8); INT16/UINT16/UINT32 are in no scatter table. add/mul
# wrap in the wider type and are brought back into the narrow type's range there (Mod), so the
# Cast back never sees an out-of-range value: TensorRT's Cast docs (Cast.html) do not say what
# it does with one. 8.6 has no 64-bit integers (its parser clamps INT64 to INT32), so UINT32 has
# no exact carrier there; UINT64, STRING and the rest have none on any version.
_CARRIED_32 = {DT.INT16: I32, U8: I32, DT.UINT16: I32}
SCATTER_CARRIERS: dict[str, dict[ir.DataType, ir.DataType]] = {
    "8.6": _CARRIED_32, "10": {**_CARRIED_32, DT.UINT32: I64}, "11": {**_CARRIED_32, DT.UINT32: I64},
}

# A carried type TensorRT converts to and from one other type only: NVIDIA/TensorRT
# include/NvInferRuntimeBase.h, DataType::kUINT8: "kUINT8 conversions are only supported for
# {kFLOAT, kHALF}" and "are not supported for {kINT8, kINT32, kBOOL}" (8.6 and 10.x); {kFLOAT,
# kHALF} to kUINT8 "by truncating towards zero" (defined in [0, 256)). So UINT8 goes to INT32 and
# back through FLOAT, every value of which in [0, 256) is exact.
CARRIER_CASTS_VIA = {U8: F32}
# Carried types TensorRT has no tensor type for at all: onnx-tensorrt's convertDtype (onnx2trt_utils,
# 8.6 and 10.x) maps DOUBLE, FLOAT, INT8, UINT8, FLOAT16, BFLOAT16 (10), BOOL, INT32, INT64 and the
# FP8/INT4 types only; any other tensor is "Unsupported ONNX data type".
_NO_TENSOR_TYPE = frozenset({DT.INT16, DT.UINT16, DT.UINT32})


def no_tensor_type(dtype: ir.DataType | None) -> str | None:
    """What the user must still change when the model holds ``dtype`` tensors TensorRT cannot hold
    (None: TensorRT has the type). The scatter is written through a carrier either way."""
    if dtype not in _NO_TENSOR_TYPE:
        return None
    return (f"TensorRT has no {dtype.name} tensors (onnx-tensorrt convertDtype: \"Unsupported ONNX "
            f"data type\"): the model's own {dtype.name} values (its inputs, outputs, the Casts "
            "that read them) must change type for the parser to import the model")


# The highest opset each TensorRT's parser documents.
PARSER_MAX_OPSET = {version: high for version, (_, high) in PARSER_OPSETS.items()}
# The ScatterElements plugin's data types (facts.PLUGIN_TYPES).
PLUGIN_DATA_TYPES = frozenset(DT[name] for name in PLUGIN_TYPES)
# Scatter data written through INT32 (exact): TensorRT's scatter layer has no BOOL (see
# passes.tensorrt.scatter_data_blocker). Reduction none only; the narrow integers: SCATTER_CARRIERS.
CARRIED_DATA_TYPES = frozenset({B})
