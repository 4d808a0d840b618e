"""Make the sample models shipped in models/ (run: python models/make_models.py).

Each is small and shows one problem the tool fixes; the README's commands use them.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx.helper as oh
from onnx import TensorProto

from scatter_rewrite.testing import scatter_model

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


SAMPLES = {
    "legacy_scatter_opset13.onnx": legacy_export,
    "legacy_scatter_opset10.onnx": lambda: scatter_model("Scatter", opset=10, axis=1),
}


def main() -> None:
    for name, build in SAMPLES.items():
        onnx.save(build(), HERE / name)
        print(f"wrote models/{name}")


if __name__ == "__main__":
    main()
