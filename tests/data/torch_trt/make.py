"""Make the PyTorch-exported scatter models the to_scatternd/tensorrt tests read (needs torch).

    pip install torch==2.13.0 onnxscript==0.7.2   # script only
    python tests/data/torch_trt/make.py

Each ``NAME.onnx`` comes with ``NAME.npz``: the inputs (``in_<input name>``) and PyTorch's own
outputs (``out_<output name>``), computed by the module in eager mode, so the tests compare
against PyTorch, not against onnxruntime. Torch is not a test dependency: the files are committed.

What the exporters emit (see docs/pytorch-exporters.md and docs/tensorrt.md):

* ``scatter_ts16``: ``x.scatter(1, idx, src)``, TorchScript exporter, opset 16 -> ScatterElements(axis=1).
* ``scatter_add_gnn_ts16``: GNN message aggregation ``zeros.scatter_add(0, dst[:, None].expand(-1, F), msg)``
  with more edges than nodes and dynamic sizes, TorchScript, opset 16 -> ScatterElements(reduction="add")
  fed by Expand (TensorRT 8.6 ignores the reduction; NVIDIA/TensorRT#3650 hits the shape check).
* ``scatter_amax_ts16``: ``scatter_reduce(..., "amax")``, TorchScript, opset 16 -> ScatterElements(max)
  at opset 16 (outside the spec, which has max from 18; onnxruntime runs it).
* ``index_put_ts16``: ``x.index_put((i,), v)`` (no accumulate), TorchScript, opset 16 -> ScatterND.
* ``index_put_dynamo18``: ``index_put(accumulate=True)`` and ``select_scatter``, dynamo exporter,
  opset 18 -> ScatterND(reduction="add") and ScatterElements with an explicit reduction="none".
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import torch

HERE = Path(__file__).resolve().parent
warnings.simplefilter("ignore")
torch.manual_seed(0)


class Scatter(torch.nn.Module):
    def forward(self, x, idx, src):
        return x.scatter(1, idx, src)


class ScatterAddGNN(torch.nn.Module):
    def forward(self, nodes, dst, msg):
        index = dst.unsqueeze(-1).expand(-1, msg.shape[1])
        return torch.zeros_like(nodes).scatter_add(0, index, msg) + nodes


class ScatterAmax(torch.nn.Module):
    def forward(self, x, idx, src):
        return x.scatter_reduce(0, idx, src, reduce="amax", include_self=True)


class IndexPut(torch.nn.Module):
    def forward(self, x, i, v):
        return x.index_put((i,), v)


class IndexPutAccumulate(torch.nn.Module):
    def forward(self, x, i, v):
        return x.index_put((i,), v, accumulate=True), torch.select_scatter(x, v[0], 0, 1)


def export(name: str, module: torch.nn.Module, inputs: dict[str, torch.Tensor], outputs: list[str], *,
           dynamo: bool, opset: int, dynamic_axes: dict | None = None) -> None:
    path = HERE / f"{name}.onnx"
    args = tuple(inputs.values())
    if dynamo:
        torch.onnx.export(module, args, path, dynamo=True, opset_version=opset, input_names=list(inputs),
                          output_names=outputs, external_data=False)
    else:
        torch.onnx.export(module, args, path, dynamo=False, opset_version=opset, input_names=list(inputs),
                          output_names=outputs, dynamic_axes=dynamic_axes)
    expected = module(*args)
    expected = expected if isinstance(expected, tuple) else (expected,)
    arrays = {f"in_{k}": v.numpy() for k, v in inputs.items()}
    arrays |= {f"out_{k}": v.detach().numpy() for k, v in zip(outputs, expected)}
    np.savez(HERE / f"{name}.npz", **arrays)
    model = onnx.load(path)
    ops = [n.op_type for n in model.graph.node if n.op_type.startswith("Scatter") or n.op_type in ("If", "Loop")]
    print(f"{path.name}: opset {opset}, {ops}")


def main() -> None:
    x = torch.randn(4, 6)
    idx = torch.stack([torch.randperm(6)[:3] for _ in range(4)])  # unique per row: reduction none
    export("scatter_ts16", Scatter(), {"x": x, "idx": idx, "src": torch.randn(4, 3)}, ["y"], dynamo=False, opset=16)

    nodes, edges, features = 5, 12, 3
    dst = torch.randint(0, nodes, (edges,))
    export("scatter_add_gnn_ts16", ScatterAddGNN(),
           {"nodes": torch.randn(nodes, features), "dst": dst, "msg": torch.randn(edges, features)}, ["h"],
           dynamo=False, opset=16, dynamic_axes={"nodes": {0: "num_nodes"}, "dst": {0: "num_edges"},
                                                 "msg": {0: "num_edges"}, "h": {0: "num_nodes"}})

    export("scatter_amax_ts16", ScatterAmax(),
           {"x": torch.randn(3, 4), "idx": torch.randint(0, 3, (7, 4)), "src": torch.randn(7, 4)}, ["y"],
           dynamo=False, opset=16)

    export("index_put_ts16", IndexPut(),
           {"x": torch.randn(6, 4), "i": torch.tensor([4, 0, 2]), "v": torch.randn(3, 4)}, ["y"],
           dynamo=False, opset=16)

    export("index_put_dynamo18", IndexPutAccumulate(),
           {"x": torch.randn(6, 4), "i": torch.tensor([0, 2, 2, 5, 2]), "v": torch.randn(5, 4)}, ["y", "z"],
           dynamo=True, opset=18)


if __name__ == "__main__":
    main()
