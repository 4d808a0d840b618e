"""Every version step of every default-domain op from the newest opset the installed onnx knows down
to opset 11, declared: how a node of ``op`` at version ``since`` moves to the op's previous version.

A step is one of (:class:`Kind`):

* ``SAME``: the same meaning; the older schema must take the node's data types (checked per node).
* ``same_if(...)``: the same meaning when a condition holds on the node: named attributes absent
  or at the value given (``ONES``: every entry 1); ``values``: attribute values the older op lacks,
  with the first opset that has them. Otherwise no exact form, or the step's ``otherwise``.
* ``REWRITE``: an exact rewrite into older ops: the forms registered for (op, since, the previous
  version) in :mod:`scatter_rewrite.opset.forms`. Not written in this table: a form's registration
  (``@register_form``, where the form is defined) declares its step, over what the table says
  (:func:`step`), so adding a form touches its one file.
* ``CONVERTER``: onnx.version_converter's adapter, exact for this step.
* ``BODY``: the op's ONNX function body (context-dependent where the schema's is).
* ``no_form(reason)``: no exact form at the older version, and why.

A step whose op has no previous version (``Trilu-14``, ``Gelu-20``) moves to older ops or nowhere:
``BODY``, ``REWRITE`` or ``no_form``. Looked up by (op, since) (:func:`step`); :func:`steps_between` gives the
steps of a move from one opset to another. tests/opset/test_steps.py fails when the installed onnx
has an op version this table does not declare.
"""

from __future__ import annotations

import dataclasses
import enum

from scatter_rewrite.opset.versions import previous, versions
from scatter_rewrite.spec import REDUCTIONS_SINCE

__all__ = [
    "declared", "Kind", "ONES", "previous", "REWRITE", "SAME", "Step", "step", "STEPS",
    "steps_between", "versions",
]

class Kind(enum.Enum):
    SAME = "same meaning"
    SAME_IF = "same meaning when a condition holds"
    REWRITE = "exact rewrite into older ops"
    CONVERTER = "onnx.version_converter's adapter"
    BODY = "the op's ONNX function body"
    NO_FORM = "no exact form"


ONES = "every entry 1"  # (an attribute whose list has no default: absent means all ones)


@dataclasses.dataclass(frozen=True)
class Step:
    kind: Kind
    when: tuple[tuple[str, object], ...] = ()  # SAME_IF: (attribute, the value the older op means)
    values: tuple[tuple[str, dict], ...] = ()  # SAME_IF: (attribute, {newer value: first opset})
    reason: str | None = None  # NO_FORM: why
    otherwise: Kind | None = None  # when the condition fails (SAME_IF) or there is no form: BODY


SAME = Step(Kind.SAME)
CONVERTER = Step(Kind.CONVERTER)
BODY = Step(Kind.BODY)
REWRITE = Step(Kind.REWRITE)  # the forms registered for the step (registry.down_forms)


def same_if(values: dict | None = None, otherwise: Step | None = None, **when) -> Step:
    return Step(
        Kind.SAME_IF,
        when=tuple(sorted(when.items())),
        values=tuple(sorted((values or {}).items())),
        otherwise=None if otherwise is None else otherwise.kind,
    )


def no_form(reason: str, otherwise: Step | None = None) -> Step:
    return Step(
        Kind.NO_FORM, reason=reason, otherwise=None if otherwise is None else otherwise.kind
    )


# (op, since): how a node of that version moves to the op's previous version (the steps with a
# registered form: REWRITE, declared by the form, see step()).
STEPS: dict[tuple[str, int], Step] = {
    ("Abs", 13): SAME,
    ("Acos", 22): SAME,
    ("Acosh", 22): SAME,
    ("Add", 13): SAME,
    ("Add", 14): SAME,
    ("AffineGrid", 20): BODY,
    ("ArgMax", 12): same_if(select_last_index=0),
    ("ArgMax", 13): SAME,
    ("ArgMin", 12): same_if(select_last_index=0),
    ("ArgMin", 13): SAME,
    ("Asin", 22): SAME,
    ("Asinh", 22): SAME,
    ("Atan", 22): SAME,
    ("Atanh", 22): SAME,
    ("Attention", 23): BODY,
    ("Attention", 24): BODY,
    ("Attention", 25): BODY,
    ("AveragePool", 19): same_if(dilations=ONES),
    ("AveragePool", 22): SAME,
    ("BatchNormalization", 14): same_if(training_mode=0),
    ("BatchNormalization", 15): SAME,
    ("Bernoulli", 15): BODY,
    ("Bernoulli", 22): SAME,
    ("BitCast", 26): no_form("no older op reinterprets a tensor's bytes as another type"),
    ("BitShift", 28): SAME,
    ("BitwiseAnd", 18): no_form("no older op works on the bits of an integer"),
    ("BitwiseNot", 18): no_form("no older op works on the bits of an integer"),
    ("BitwiseOr", 18): no_form("no older op works on the bits of an integer"),
    ("BitwiseXor", 18): no_form("no older op works on the bits of an integer"),
    ("BlackmanWindow", 17): BODY,
    ("Cast", 13): SAME,
    ("Cast", 19): same_if(saturate=1),
    ("Cast", 21): SAME,
    ("Cast", 23): SAME,
    ("Cast", 24): same_if(round_mode="up"),
    ("Cast", 25): SAME,
    ("Cast", 28): SAME,
    ("CastLike", 15): BODY,
    ("CastLike", 19): same_if(saturate=1),
    ("CastLike", 21): SAME,
    ("CastLike", 23): SAME,
    ("CastLike", 24): same_if(round_mode="up"),
    ("CastLike", 25): SAME,
    ("CausalConvWithState", 27): BODY,
    ("Ceil", 13): SAME,
    ("Celu", 12): BODY,
    ("Celu", 28): SAME,
    ("CenterCropPad", 18): BODY,
    ("Clip", 12): SAME,
    ("Clip", 13): SAME,
    ("Col2Im", 18): no_form("no older op computes it and ONNX gives it no function body"),
    ("Compress", 28): SAME,
    ("Concat", 13): SAME,
    ("Constant", 13): SAME,
    ("Constant", 19): SAME,
    ("Constant", 21): SAME,
    ("Constant", 23): SAME,
    ("Constant", 24): SAME,
    ("Constant", 25): SAME,
    ("ConstantOfShape", 20): SAME,
    ("ConstantOfShape", 21): SAME,
    ("ConstantOfShape", 23): SAME,
    ("ConstantOfShape", 24): SAME,
    ("ConstantOfShape", 25): SAME,
    ("Conv", 22): SAME,
    ("ConvTranspose", 22): SAME,
    ("Cos", 22): SAME,
    ("Cosh", 22): SAME,
    ("CumProd", 26): no_form("no older op computes it and ONNX gives it no function body"),
    ("CumSum", 14): SAME,
    ("DFT", 17): no_form("no older op computes it and ONNX gives it no function body"),
    ("DFT", 20): CONVERTER,
    ("DeformConv", 19): no_form("no older op computes it and ONNX gives it no function body"),
    ("DeformConv", 22): SAME,
    ("DepthToSpace", 13): SAME,
    ("DepthToSpace", 28): SAME,
    ("DequantizeLinear", 13): CONVERTER,
    ("DequantizeLinear", 19): SAME,
    ("DequantizeLinear", 21): same_if(block_size=0),
    ("DequantizeLinear", 23): same_if(output_dtype=0),
    ("DequantizeLinear", 24): SAME,
    ("DequantizeLinear", 25): SAME,
    ("DequantizeLinear", 28): SAME,
    ("Det", 22): SAME,
    ("Div", 13): SAME,
    ("Div", 14): SAME,
    # (the converter has no Dropout adapter down; 12's ratio and training_mode inputs, which 10
    # lacks, stop the node fitting the older schema: then refused)
    ("Dropout", 12): SAME,
    ("Dropout", 13): SAME,
    ("Dropout", 22): SAME,
    ("Einsum", 12): no_form(
        "no ONNX function body, and its equation's form in MatMul/Transpose/ReduceSum "
        "depends on it (not written here)"
    ),
    ("Einsum", 28): SAME,
    ("Elu", 22): SAME,
    ("Equal", 13): SAME,
    ("Equal", 19): SAME,
    ("Erf", 13): SAME,
    ("Exp", 13): SAME,
    ("Expand", 13): SAME,
    ("EyeLike", 22): SAME,
    ("Flatten", 13): SAME,
    ("Flatten", 21): SAME,
    ("Flatten", 23): SAME,
    ("Flatten", 24): SAME,
    ("Flatten", 25): SAME,
    ("Floor", 13): SAME,
    ("GRU", 14): same_if(layout=0),
    ("GRU", 22): SAME,
    ("Gather", 13): SAME,
    ("GatherElements", 13): SAME,
    ("GatherND", 12): same_if(batch_dims=0),
    ("GatherND", 13): SAME,
    ("Gelu", 20): BODY,
    ("Gemm", 13): SAME,
    ("GlobalAveragePool", 22): SAME,
    ("GlobalLpPool", 22): SAME,
    ("GlobalMaxPool", 22): SAME,
    ("Greater", 13): SAME,
    ("GreaterOrEqual", 12): BODY,
    ("GreaterOrEqual", 16): SAME,
    ("GridSample", 22): SAME,
    ("GroupNormalization", 18): BODY,
    ("GroupNormalization", 21): no_form(
        "GroupNormalization-18 takes scale and bias per group, 21 per channel", otherwise=BODY
    ),
    ("HammingWindow", 17): BODY,
    ("HannWindow", 17): BODY,
    ("HardSigmoid", 22): SAME,
    ("HardSwish", 14): BODY,
    ("HardSwish", 22): SAME,
    ("Identity", 13): SAME,
    ("Identity", 14): SAME,
    ("Identity", 16): SAME,
    ("Identity", 19): SAME,
    ("Identity", 21): SAME,
    ("Identity", 23): SAME,
    ("Identity", 24): SAME,
    ("Identity", 25): SAME,
    ("If", 13): SAME,
    ("If", 16): SAME,
    ("If", 19): SAME,
    ("If", 21): SAME,
    ("If", 23): SAME,
    ("If", 24): SAME,
    ("If", 25): SAME,
    ("ImageDecoder", 20): no_form("no older op decodes images"),
    ("InstanceNormalization", 22): SAME,
    ("IsInf", 20): SAME,
    ("IsNaN", 13): SAME,
    ("IsNaN", 20): SAME,
    ("LRN", 13): SAME,
    ("LSTM", 14): same_if(layout=0),
    ("LSTM", 22): SAME,
    ("LayerNormalization", 17): BODY,
    ("LeakyRelu", 16): SAME,
    ("Less", 13): SAME,
    ("LessOrEqual", 12): BODY,
    ("LessOrEqual", 16): SAME,
    ("LinearAttention", 27): BODY,
    ("Log", 13): SAME,
    ("Loop", 13): SAME,
    ("Loop", 16): SAME,
    ("Loop", 19): SAME,
    ("Loop", 21): SAME,
    ("Loop", 23): SAME,
    ("Loop", 24): SAME,
    ("Loop", 25): SAME,
    ("LpNormalization", 22): SAME,
    ("LpPool", 18): same_if(ceil_mode=0, dilations=ONES),
    ("LpPool", 22): SAME,
    ("MatMul", 13): SAME,
    ("Max", 13): SAME,
    ("MaxPool", 12): SAME,
    ("MaxPool", 22): SAME,
    ("MaxRoiPool", 22): SAME,
    ("MaxUnpool", 22): SAME,
    ("Mean", 13): SAME,
    ("MeanVarianceNormalization", 13): SAME,
    ("MelWeightMatrix", 17): no_form("no older op computes it and ONNX gives it no function body"),
    ("Min", 13): SAME,
    ("Mish", 18): BODY,
    ("Mish", 22): SAME,
    ("Mod", 13): SAME,
    ("Mul", 13): SAME,
    ("Mul", 14): SAME,
    ("Multinomial", 22): SAME,
    ("Neg", 13): SAME,
    ("NegativeLogLikelihoodLoss", 12): BODY,
    ("NegativeLogLikelihoodLoss", 13): SAME,
    ("NegativeLogLikelihoodLoss", 22): SAME,
    ("NonZero", 13): SAME,
    ("OneHot", 28): SAME,
    ("Optional", 15): no_form("older opsets have no optional type"),
    ("Optional", 28): SAME,
    ("OptionalGetElement", 15): no_form("older opsets have no optional type"),
    ("OptionalGetElement", 18): SAME,
    ("OptionalGetElement", 28): SAME,
    ("OptionalHasElement", 15): no_form("older opsets have no optional type"),
    ("OptionalHasElement", 18): SAME,
    ("OptionalHasElement", 28): SAME,
    ("PRelu", 16): SAME,
    ("Pad", 13): SAME,
    ("Pad", 19): same_if(values={"mode": {"wrap": 19}}),
    ("Pad", 21): SAME,
    ("Pad", 23): SAME,
    ("Pad", 24): SAME,
    ("Pad", 25): SAME,
    ("Pow", 12): SAME,
    ("Pow", 13): SAME,
    ("Pow", 15): SAME,
    ("QLinearMatMul", 21): SAME,
    ("QuantizeLinear", 13): CONVERTER,
    ("QuantizeLinear", 19): same_if(saturate=1),
    ("QuantizeLinear", 21): same_if(block_size=0, output_dtype=0),
    ("QuantizeLinear", 23): same_if(precision=0),
    ("QuantizeLinear", 24): SAME,
    ("QuantizeLinear", 25): SAME,
    ("QuantizeLinear", 28): SAME,
    ("RMSNormalization", 23): BODY,
    ("RNN", 14): same_if(layout=0),
    ("RNN", 22): SAME,
    ("RandomNormal", 22): SAME,
    ("RandomNormalLike", 22): SAME,
    ("RandomUniform", 22): SAME,
    ("RandomUniformLike", 22): SAME,
    ("Range", 27): same_if(stash_type=1),
    ("Reciprocal", 13): SAME,
    ("ReduceL1", 13): SAME,
    ("ReduceL2", 13): SAME,
    ("ReduceLogSum", 13): SAME,
    ("ReduceLogSum", 28): SAME,
    ("ReduceLogSumExp", 13): SAME,
    ("ReduceLogSumExp", 28): SAME,
    ("ReduceMax", 12): SAME,
    ("ReduceMax", 13): SAME,
    ("ReduceMax", 20): SAME,
    ("ReduceMean", 13): SAME,
    ("ReduceMin", 12): SAME,
    ("ReduceMin", 13): SAME,
    ("ReduceMin", 20): SAME,
    ("ReduceProd", 13): SAME,
    ("ReduceSumSquare", 13): SAME,
    ("RegexFullMatch", 20): no_form("no older op matches strings"),
    ("Relu", 13): SAME,
    ("Relu", 14): SAME,
    ("Reshape", 13): SAME,
    ("Reshape", 19): SAME,
    ("Reshape", 21): SAME,
    ("Reshape", 23): SAME,
    ("Reshape", 24): SAME,
    ("Reshape", 25): SAME,
    ("Resize", 19): same_if(
        values={"coordinate_transformation_mode": {"half_pixel_symmetric": 19}}
    ),
    ("ReverseSequence", 28): SAME,
    ("RoiAlign", 16): same_if(coordinate_transformation_mode="output_half_pixel"),
    ("RoiAlign", 22): SAME,
    ("RotaryEmbedding", 23): BODY,
    ("Round", 22): SAME,
    ("STFT", 17): no_form("no older op computes it and ONNX gives it no function body"),
    ("Scan", 16): SAME,
    ("Scan", 19): SAME,
    ("Scan", 21): SAME,
    ("Scan", 23): SAME,
    ("Scan", 24): SAME,
    ("Scan", 25): SAME,
    ("ScatterElements", 13): SAME,
    ("ScatterElements", 16): same_if(values={"reduction": REDUCTIONS_SINCE}),
    ("ScatterElements", 18): same_if(values={"reduction": REDUCTIONS_SINCE}),
    ("ScatterND", 13): SAME,
    ("ScatterND", 16): same_if(values={"reduction": REDUCTIONS_SINCE}),
    ("ScatterND", 18): same_if(values={"reduction": REDUCTIONS_SINCE}),
    ("Selu", 22): SAME,
    ("SequenceMap", 17): BODY,
    ("Shape", 13): SAME,
    ("Shape", 19): SAME,
    ("Shape", 21): SAME,
    ("Shape", 23): SAME,
    ("Shape", 24): SAME,
    ("Shape", 25): SAME,
    ("Sigmoid", 13): SAME,
    ("Sign", 13): SAME,
    ("Sin", 22): SAME,
    ("Sinh", 22): SAME,
    ("Size", 13): SAME,
    ("Size", 19): SAME,
    ("Size", 21): SAME,
    ("Size", 23): SAME,
    ("Size", 24): SAME,
    ("Size", 25): SAME,
    ("Slice", 13): SAME,
    ("SoftmaxCrossEntropyLoss", 12): BODY,
    ("SoftmaxCrossEntropyLoss", 13): SAME,
    ("Softplus", 22): SAME,
    ("Softsign", 22): SAME,
    ("SpaceToDepth", 13): SAME,
    ("SpaceToDepth", 28): same_if(mode="DCR", otherwise=BODY),
    ("Split", 13): CONVERTER,
    ("SplitToSequence", 24): SAME,
    ("Sqrt", 13): SAME,
    ("Squeeze", 13): CONVERTER,
    ("Squeeze", 21): SAME,
    ("Squeeze", 23): SAME,
    ("Squeeze", 24): SAME,
    ("Squeeze", 25): SAME,
    ("StringConcat", 20): no_form("no older op builds strings"),
    ("StringSplit", 20): no_form("no older op splits strings"),
    ("Sub", 13): SAME,
    ("Sub", 14): SAME,
    ("Sum", 13): SAME,
    ("SwiGLU", 28): BODY,
    ("Swish", 24): BODY,
    ("Tan", 22): SAME,
    ("Tanh", 13): SAME,
    ("TensorScatter", 24): no_form("no older op computes it and ONNX gives it no function body"),
    ("ThresholdedRelu", 22): SAME,
    ("Tile", 13): SAME,
    ("TopK", 24): SAME,
    ("Transpose", 13): SAME,
    ("Transpose", 21): SAME,
    ("Transpose", 23): SAME,
    ("Transpose", 24): SAME,
    ("Transpose", 25): SAME,
    ("Unique", 28): SAME,
    ("Unsqueeze", 13): CONVERTER,
    ("Unsqueeze", 21): SAME,
    ("Unsqueeze", 23): SAME,
    ("Unsqueeze", 24): SAME,
    ("Unsqueeze", 25): SAME,
    ("Where", 16): SAME,
}


def steps_between(op_type: str, source: int, target: int) -> list[tuple[int, Step]]:
    """The declared steps (since, step) a node of ``op_type`` written at opset ``source`` takes to
    opset ``target`` (< source), newest first: every version above the one in force at ``target``.
    KeyError for a version the table does not declare (a newer onnx: review its steps first)."""
    return [(v, step(op_type, v)) for v in reversed(versions(op_type)) if target < v <= source]


def step(op_type: str, since: int) -> Step:
    """How a node of ``op_type`` at version ``since`` moves to the op's previous version: REWRITE
    where a form is registered for that step (its registration is the declaration), else the
    table's. KeyError for a version declared by neither."""
    from scatter_rewrite.opset.registry import down_forms  # (the registry reads this module)

    return REWRITE if down_forms(op_type, since) else STEPS[(op_type, since)]


def declared() -> dict[tuple[str, int], Step]:
    """Every declared step, (op, since) -> :func:`step`: the table's and the registered forms'."""
    from scatter_rewrite.opset.registry import load_forms

    keys = set(STEPS) | {(op, since) for (op, since, to), forms in load_forms().items()
                         if not forms[0].up}
    return {key: step(*key) for key in sorted(keys)}
