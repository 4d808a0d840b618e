"""Models whose scatter sits in a model-local function and reads an attribute of the function
(``axis = @ax``, ``reduction = @red``): known only at the call site. Shared by the tests of the
passes, check, validation and opset moves."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto

from scatter_rewrite.testing import LOCAL_DOMAIN


def make_model(nodes, inputs, outputs, opset=18, functions=()):
    imports = [oh.make_opsetid("", opset)] + ([oh.make_opsetid(LOCAL_DOMAIN, 1)] if functions else [])
    model = oh.make_model(oh.make_graph(nodes, "g", inputs, outputs), opset_imports=imports, functions=list(functions))
    model.ir_version = 8 if opset <= 17 else 10 if opset <= 23 else 11
    return model


def vi(name, elem_type, shape):
    return oh.make_tensor_value_info(name, elem_type, shape)


def ref_attribute(name: str, ref: str, kind) -> onnx.AttributeProto:
    a = onnx.AttributeProto(name=name, ref_attr_name=ref, type=kind)
    return a


def function_model(op="ScatterElements", reduction="none", axis=1, opset=18, reduction_ref=None, constant=False,
                   axis_ref=True):
    """main: out = local::F<ax=axis>(data[, indices, updates]); F holds ``op`` with ``axis = @ax``
    (a literal ``axis`` unless ``axis_ref``; ``reduction = @red`` when ``reduction_ref`` names the
    call's reduction)."""
    inner = oh.make_node(op, ["d", "i", "u"], ["o"])
    inner.attribute.append(ref_attribute("axis", "ax", onnx.AttributeProto.INT) if axis_ref
                           else oh.make_attribute("axis", axis))
    call_attrs = {"ax": axis}
    defaults = [oh.make_attribute("ax", 0)]
    if reduction_ref is not None:
        inner.attribute.append(ref_attribute("reduction", "red", onnx.AttributeProto.STRING))
        call_attrs["red"] = reduction_ref
        defaults.append(oh.make_attribute("red", "none"))
    elif op != "Scatter" and (opset >= 16 or reduction != "none"):  # (no reduction attribute before 16)
        inner.attribute.append(oh.make_attribute("reduction", reduction))
    nodes, params = [inner], ["d", "i", "u"]
    if constant:
        nodes = [oh.make_node("Constant", [], ["i"], value=oh.make_tensor("iv", TensorProto.INT64, [2, 3], [0, 1, 2, 2, 1, 0])),
                 oh.make_node("Constant", [], ["u"], value=oh.make_tensor("uv", TensorProto.FLOAT, [2, 3], [1, 2, 3, 4, 5, 6])),
                 inner]
        params = ["d"]
    function = oh.make_function(LOCAL_DOMAIN, "F", params, ["o"], nodes, opset_imports=[oh.make_opsetid("", opset)],
                                attributes=[], attribute_protos=defaults)
    args = ["data"] if constant else ["data", "indices", "updates"]
    call = oh.make_node("F", args, ["out"], domain=LOCAL_DOMAIN, name="call", **call_attrs)
    inputs = [vi("data", TensorProto.FLOAT, [4, 3])]
    if not constant:
        inputs += [vi("indices", TensorProto.INT64, [2, 3]), vi("updates", TensorProto.FLOAT, [2, 3])]
    model = make_model([call], inputs, [vi("out", TensorProto.FLOAT, [4, 3])], opset=opset, functions=[function])
    rng = np.random.default_rng(1)
    feeds = {"data": rng.standard_normal((4, 3)).astype(np.float32),
             "indices": np.array([[0, 1, 2], [2, 1, 0]]) if axis == 1 else np.array([[0, 1, 2], [3, 2, 1]]),
             "updates": rng.standard_normal((2, 3)).astype(np.float32)}
    return model, feeds


def function_node(model: onnx.ModelProto) -> onnx.NodeProto:
    (node,) = [n for n in model.functions[0].node if n.op_type.startswith("Scatter")]
    return node


def function_called_at_two_ranks(op: str, axis: int, dtype=TensorProto.FLOAT,
                                 opset: int = 18) -> onnx.ModelProto:
    """``op`` inside a function called with a rank-2 and a rank-3 input: its rank is unknown
    there."""
    function = oh.make_function("local", "F", ["a"], ["b"],
                                [oh.make_node(op, ["a"], ["b"], axis=axis)],
                                opset_imports=[oh.make_opsetid("", opset)])
    graph = oh.make_graph([oh.make_node("F", ["x"], ["y"], domain="local"),
                           oh.make_node("F", ["z"], ["w"], domain="local")], "g",
                          [vi("x", dtype, [2, 3]), vi("z", dtype, [2, 3, 4])],
                          [vi("y", dtype, [2, 3]), vi("w", dtype, [2, 3, 4])])
    return oh.make_model(graph, functions=[function],
                         opset_imports=[oh.make_opsetid("", opset), oh.make_opsetid("local", 1)])
