"""The original model evaluated in float64: the yardstick for a rewrite that reorders float sums
or products (see :func:`scatter_rewrite.validate.comparison.judge_rounding`).

The original's float32, float16 and bfloat16 tensors become float64 everywhere: graph inputs,
outputs and value types, initializers, ``Constant`` and ``ConstantOfShape`` values, and the
target of every ``Cast`` (in subgraphs and local functions too), so that each op computes what
it computed, rounded to float64's 53 bits instead of 24 (11, 8). ``onnx.reference`` runs it: its
NumPy kernels take float64 wherever they take float32.

With ``magnitudes``, every float input, initializer and constant is replaced by its absolute
value: for sums and products of them, each output is then the sum of its terms' magnitudes, the
quantity any order of summation rounds relative to.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import numpy_helper as nh

from scatter_rewrite.validate import engines
from scatter_rewrite.limits import DEFAULT_DOMAINS

__all__ = ["evaluate"]

WIDENED = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16)
_DTYPE_ATTRIBUTES = ("to", "dtype", "output_dtype")  # Cast, RandomNormal/EyeLike..., QuantizeLinear


def widened(model: onnx.ModelProto, magnitudes: bool = False) -> onnx.ModelProto:
    """A float64 copy of ``model`` (see the module's docstring); ``model`` is left as it is."""
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    graphs = [wide.graph]
    functions = list(wide.functions)
    while graphs or functions:
        if graphs:
            graph = graphs.pop()
            for info in list(graph.input) + list(graph.output) + list(graph.value_info):
                _widen_type(info.type)
            for k, tensor in enumerate(graph.initializer):
                graph.initializer[k].CopyFrom(_widen_tensor(tensor, magnitudes))
            nodes = graph.node
        else:
            function = functions.pop()
            for info in function.value_info:
                _widen_type(info.type)
            nodes = function.node
        for node in nodes:
            graphs += _widen_node(node, magnitudes)
    return wide


def _widen_type(type_proto: onnx.TypeProto) -> None:
    which = type_proto.WhichOneof("value")
    if which == "tensor_type" and type_proto.tensor_type.elem_type in WIDENED:
        type_proto.tensor_type.elem_type = TensorProto.DOUBLE
    elif which in ("sequence_type", "optional_type"):
        _widen_type(getattr(type_proto, which).elem_type)


def _widen_tensor(tensor: onnx.TensorProto, magnitudes: bool) -> onnx.TensorProto:
    if tensor.data_type not in WIDENED:
        return tensor
    array = nh.to_array(tensor).astype(np.float64)
    return nh.from_array(np.abs(array) if magnitudes else array, tensor.name)


def _widen_node(node: onnx.NodeProto, magnitudes: bool) -> list[onnx.GraphProto]:
    """Widen ``node``'s float attributes in place; its subgraphs, to widen in turn."""
    subgraphs = []
    if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS:
        for a in list(node.attribute):  # value_float(s) are float32: a float64 tensor instead
            if a.name in ("value_float", "value_floats"):
                values = np.array(a.f if a.name == "value_float" else list(a.floats), np.float64)
                node.attribute.remove(a)
                node.attribute.append(onnx.helper.make_attribute("value", nh.from_array(
                    np.abs(values) if magnitudes else values)))
    for a in node.attribute:
        if a.type == onnx.AttributeProto.TENSOR:
            a.t.CopyFrom(_widen_tensor(a.t, magnitudes))
        elif a.type == onnx.AttributeProto.INT and a.name in _DTYPE_ATTRIBUTES and a.i in WIDENED:
            a.i = TensorProto.DOUBLE
        elif a.type == onnx.AttributeProto.GRAPH:
            subgraphs.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            subgraphs.extend(a.graphs)
    return subgraphs


def widened_inputs(inputs: dict[str, np.ndarray], magnitudes: bool = False) -> dict:
    """The inputs as the widened model takes them: float inputs of 32 bits and less as float64."""
    wide = {}
    for name, array in inputs.items():
        array = np.asarray(array)
        if _is_narrow_float(array.dtype):
            array = array.astype(np.float64)
            array = np.abs(array) if magnitudes else array
        wide[name] = array
    return wide


def _is_narrow_float(dtype: np.dtype) -> bool:
    return dtype in (np.dtype(np.float32), np.dtype(np.float16)) or dtype.name == "bfloat16"


def evaluate(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> tuple[list, list]:
    """The float64 evaluation of ``model`` on ``inputs``, and the same on their magnitudes."""
    exact = engines.run_reference(widened(model), widened_inputs(inputs))
    magnitude = engines.run_reference(widened(model, magnitudes=True),
                                      widened_inputs(inputs, magnitudes=True))
    return exact, magnitude
