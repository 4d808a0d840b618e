"""Make the PyG-style max-aggregation layer in both PyTorch exports (needs torch; tests do not):

    python tests/data/torch/make_gnn_layer.py

The layer (``GnnMaxLayer``): messages ``src = x[edge_src] * w`` (a learned per-feature scale: one
correctly rounded multiply, so onnxruntime's result is PyTorch's bit for bit, which a MatMul's
summation order would not promise), then
``out = zeros(N, F); out.scatter_reduce_(0, edge_dst.unsqueeze(-1).expand_as(src), src, "amax")``.
Inputs ``x`` [N, F] float32, ``edge_src`` and ``edge_dst`` [E] int64 (duplicates: several edges
per node). Two files per size, each with ``NAME.npz`` (inputs ``in_*`` and PyTorch's eager output
``out_y``):

* ``gnn_max_layer_ts17``: TorchScript exporter (``dynamo=False``), opset 17: the index goes through
  Unsqueeze, then ``expand_as`` is a Shape of ``src`` into Expand, and the scatter sits in the
  exporter's rank-0 If wrapper.
* ``gnn_max_layer_dynamo18``: dynamo exporter, opset 18.
* ``gnn_max_view_expand_ts17``: ``GnnMaxViewExpand``, the other spelling,
  ``edge_dst.view(-1, 1).expand(-1, F)``, by TorchScript at opset 17 with the edge count dynamic
  (``num_edges``): a Reshape to [-1, 1], then Expand to sizes from TorchScript's
  ``Where(Equal(sizes, -1), ConstantOfShape(...), sizes)`` chain over a Shape of the messages.

``export_layer`` is what benchmarks/bench_torchscript.py calls for its bigger sizes.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
F = 64


class GnnMaxLayer(torch.nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.randn(features))

    def forward(self, x, edge_src, edge_dst):
        src = x[edge_src] * self.scale
        out = torch.zeros(x.shape[0], src.shape[1], dtype=src.dtype)
        out.scatter_reduce_(0, edge_dst.unsqueeze(-1).expand_as(src), src, "amax")
        return out


class GnnMaxViewExpand(GnnMaxLayer):
    def forward(self, x, edge_src, edge_dst):
        src = x[edge_src] * self.scale
        out = torch.zeros(x.shape[0], src.shape[1], dtype=src.dtype)
        out.scatter_reduce_(0, edge_dst.view(-1, 1).expand(-1, src.shape[1]), src, "amax")
        return out


def layer_inputs(nodes: int, edges: int, features: int = F,
                 seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(nodes, features, generator=generator),
            "edge_src": torch.randint(0, nodes, (edges,), generator=generator),
            "edge_dst": torch.randint(0, nodes, (edges,), generator=generator)}


def export_layer(path: Path, nodes: int, edges: int, *, dynamo: bool,
                 features: int = F) -> dict[str, np.ndarray]:
    """Export the layer to ``path``; return its inputs and PyTorch's output (in_*, out_y)."""
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    module = GnnMaxLayer(features).eval()
    inputs = layer_inputs(nodes, edges, features)
    args = tuple(inputs.values())
    if dynamo:
        torch.onnx.export(module, args, path, dynamo=True, opset_version=18,
                          input_names=list(inputs), output_names=["y"], external_data=False,
                          optimize=False)
    else:
        torch.onnx.export(module, args, path, dynamo=False, opset_version=17,
                          input_names=list(inputs), output_names=["y"])
    with torch.no_grad():
        expected = module(*args)
    return {f"in_{k}": v.numpy() for k, v in inputs.items()} | {"out_y": expected.numpy()}


def main() -> None:
    nodes, edges, features = 6, 24, 8  # small: 4 edges per node on average, some nodes with none
    for name, dynamo in (("gnn_max_layer_ts17", False), ("gnn_max_layer_dynamo18", True)):
        arrays = export_layer(HERE / f"{name}.onnx", nodes, edges, dynamo=dynamo, features=features)
        np.savez(HERE / f"{name}.npz", **arrays)
        print(f"{name}.onnx: {(HERE / f'{name}.onnx').stat().st_size} bytes", file=sys.stderr)
    torch.manual_seed(0)
    module = GnnMaxViewExpand(features).eval()
    inputs = layer_inputs(nodes, edges, features, seed=1)
    name = "gnn_max_view_expand_ts17"
    edges_dynamic = {"edge_src": {0: "num_edges"}, "edge_dst": {0: "num_edges"}}
    torch.onnx.export(module, tuple(inputs.values()), HERE / f"{name}.onnx", dynamo=False,
                      opset_version=17, input_names=list(inputs), output_names=["y"],
                      dynamic_axes=edges_dynamic)
    with torch.no_grad():
        expected = module(*inputs.values())
    np.savez(HERE / f"{name}.npz", **{f"in_{k}": v.numpy() for k, v in inputs.items()},
             out_y=expected.numpy())


if __name__ == "__main__":
    main()
