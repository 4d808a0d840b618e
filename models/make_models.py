"""Make the sample models shipped in models/ (run: python models/make_models.py).

Each is small and shows one problem the tool fixes; the README's commands use them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto

from scatter_rewrite.testing import constant_scatter_model, scatter_model

HERE = Path(__file__).parent


def legacy_export() -> onnx.ModelProto:
    """An old export declaring opset 13 but still carrying the deprecated Scatter, in the main
    graph, in an If branch and in a model-local function: onnx.checker and onnxruntime reject it."""
    in_if = scatter_model("Scatter", opset=13, where="if", axis=1)
    in_fn = scatter_model("Scatter", opset=13, where="function", axis=-1)
    main = oh.make_node("Scatter", ["output", "indices", "updates"], ["final"], axis=0, name="scatter_main")
    call = in_fn.graph.node[0]
    call.input[0] = "final"
    call.output[0] = "result"
    graph = in_if.graph
    graph.node.extend([main, call])
    graph.output[0].CopyFrom(oh.make_tensor_value_info("result", TensorProto.FLOAT, [4, 5]))
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13), oh.make_opsetid("local", 1)],
                          functions=list(in_fn.functions))
    model.producer_name = "scatter-rewrite sample (legacy exporter)"
    return model


def gnn_aggregation(reduction: str, opset: int, nodes: int | str, edges: int | str) -> onnx.ModelProto:
    """One message-passing step as PyTorch's dynamo exporter writes ``scatter_reduce``: each edge's
    message (the features of its source node) is reduced into its target node with
    ``ScatterElements(axis=0, reduction=...)``, the indices ``Expand(Unsqueeze(edge_index[1]))``.
    ``nodes``/``edges`` are sizes, or names for dynamic dimensions."""
    features = 4
    inputs = [oh.make_tensor_value_info("x", TensorProto.FLOAT, [nodes, features]),
              oh.make_tensor_value_info("edge_index", TensorProto.INT64, [2, edges])]
    output = oh.make_tensor_value_info("aggregated", TensorProto.FLOAT, [nodes, features])
    initializers = [oh.make_tensor("zero", TensorProto.INT64, [], [0]),
                    oh.make_tensor("one", TensorProto.INT64, [], [1]),
                    oh.make_tensor("axis_1", TensorProto.INT64, [1], [1])]
    graph_nodes = [
        oh.make_node("Gather", ["edge_index", "zero"], ["src"], axis=0, name="src"),
        oh.make_node("Gather", ["edge_index", "one"], ["dst"], axis=0, name="dst"),
        oh.make_node("Gather", ["x", "src"], ["messages"], axis=0, name="messages"),
        oh.make_node("Unsqueeze", ["dst", "axis_1"], ["dst_column"], name="dst_column"),
        oh.make_node("Shape", ["messages"], ["messages_shape"], name="messages_shape"),
        oh.make_node("Expand", ["dst_column", "messages_shape"], ["targets"], name="targets"),
        oh.make_node("ScatterElements", ["x", "targets", "messages"], ["aggregated"], axis=0,
                     reduction=reduction, name=f"scatter_{reduction}"),
    ]
    graph = oh.make_graph(graph_nodes, f"gnn_{reduction}", inputs, [output], initializers)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 8
    model.producer_name = "scatter-rewrite sample (GNN aggregation)"
    onnx.checker.check_model(model, full_check=True)
    return model


def gnn_scatter_add_torchscript() -> onnx.ModelProto:
    """``x.scatter_add(0, dst[:, None].expand(-1, F), x[src])`` (8 edges, 10 nodes) as TorchScript's
    exporter (``dynamo=False``, opset 13) writes it: ``Add(x, ScatterElements(zeros, targets,
    messages))``, no reduction, zeros a ``Constant`` of x's static shape. A node with several
    incoming edges gets only the last message, where PyTorch sums them all: ``repair`` fixes it."""
    nodes, edges, features = 10, 8, 4
    inputs = [oh.make_tensor_value_info("x", TensorProto.FLOAT, [nodes, features]),
              oh.make_tensor_value_info("src", TensorProto.INT64, [edges]),
              oh.make_tensor_value_info("dst", TensorProto.INT64, [edges])]
    output = oh.make_tensor_value_info("aggregated", TensorProto.FLOAT, [nodes, features])
    zeros = oh.make_tensor("zeros", TensorProto.FLOAT, [nodes, features], [0.0] * nodes * features)
    graph_nodes = [
        oh.make_node("Gather", ["x", "src"], ["messages"], axis=0, name="messages"),
        oh.make_node("Unsqueeze", ["dst", "axis_1"], ["dst_column"], name="dst_column"),
        oh.make_node("Shape", ["messages"], ["messages_shape"], name="messages_shape"),
        oh.make_node("Expand", ["dst_column", "messages_shape"], ["targets"], name="targets"),
        oh.make_node("Constant", [], ["zeros"], value=zeros, name="zeros"),
        oh.make_node("ScatterElements", ["zeros", "targets", "messages"], ["written"], axis=0,
                     name="scatter_add"),
        oh.make_node("Add", ["x", "written"], ["aggregated"], name="accumulate"),
    ]
    graph = oh.make_graph(graph_nodes, "gnn_scatter_add", inputs, [output],
                          [oh.make_tensor("axis_1", TensorProto.INT64, [1], [1])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    model.ir_version = 7
    model.producer_name = "scatter-rewrite sample (TorchScript scatter_add)"
    onnx.checker.check_model(model, full_check=True)
    return model


def constant_float16_scatter() -> onnx.ModelProto:
    """``y = x + ScatterElements(table, indices, updates, reduction="add")``, every scatter input an
    initializer: a constant that onnxruntime cannot fold (its CPU kernels lack float16 add)."""
    rng = np.random.default_rng(0)
    model = constant_scatter_model(
        data=np.zeros((8, 4), np.float16),
        indices=rng.integers(0, 8, (6, 4)).astype(np.int64),
        updates=rng.standard_normal((6, 4)).astype(np.float16),
        opset=18, axis=0, reduction="add")
    model.producer_name = "scatter-rewrite sample (constant float16 scatter)"
    return model


SAMPLES = {
    "legacy_scatter_opset13.onnx": legacy_export,
    "legacy_scatter_opset10.onnx": lambda: scatter_model("Scatter", opset=10, axis=1),
    "constant_scatter_fp16.onnx": constant_float16_scatter,
    "gnn_max_opset18.onnx": lambda: gnn_aggregation("max", 18, "num_nodes", "num_edges"),
    "gnn_add_opset17.onnx": lambda: gnn_aggregation("add", 17, 10, 8),
    "gnn_scatter_add_ts13.onnx": gnn_scatter_add_torchscript,
}


def main() -> None:
    for name, build in SAMPLES.items():
        onnx.save(build(), HERE / name)
        print(f"wrote models/{name}")


if __name__ == "__main__":
    main()
