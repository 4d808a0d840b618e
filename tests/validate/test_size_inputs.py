"""Generated values for inputs that reach a size, count, scale or shape: positive (ones where only 1
fits), so the original runs as on a real input."""

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper

from scatter_rewrite.validate.index_paths import size_inputs
from scatter_rewrite.validate.inputs import plan_validation


def _resize_topk_model() -> ir.Model:
    # scale (float) reaches Resize's scales through arithmetic; k reaches TopK; data only its shape.
    nodes = [
        helper.make_node("Mul", ["scale", "two"], ["scales_half"]),
        helper.make_node("Concat", ["ones2", "scales_half"], ["scales"], axis=0),
        helper.make_node("Resize", ["data", "", "scales"], ["resized"], mode="nearest"),
        helper.make_node("Shape", ["data"], ["shape"]),
        helper.make_node("ConstantOfShape", ["shape"], ["zeros"]),
        helper.make_node("TopK", ["flat", "k"], ["top", "where"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 1, 4, 4]),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("flat", TensorProto.FLOAT, [1, 8]),
         helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("resized", TensorProto.FLOAT, [1, 1, None, None]),
         helper.make_tensor_value_info("zeros", TensorProto.FLOAT, [1, 1, 4, 4]),
         helper.make_tensor_value_info("top", TensorProto.FLOAT, [1, None])],
        [helper.make_tensor("two", TensorProto.FLOAT, [1], [2.0]),
         helper.make_tensor("ones2", TensorProto.FLOAT, [2], [1.0, 1.0])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(proto, full_check=False)
    return ir.serde.deserialize_model(proto)


def test_inputs_reaching_a_size_are_found_through_arithmetic_and_not_through_shape():
    assert size_inputs(_resize_topk_model()) == {"scale": False, "k": True}


def test_the_generated_inputs_make_the_original_run():
    import onnxruntime as ort

    model = _resize_topk_model()
    plan = plan_validation(model)
    inputs = plan.inputs
    assert np.all(inputs["scale"] >= 1) and inputs["k"].tolist() == [1]
    session = ort.InferenceSession(ir.serde.serialize_model(model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    session.run(None, inputs)
