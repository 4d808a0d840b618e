"""Make the exports whose scatters ``repair`` fixes or warns about (needs torch; tests do not).

    python tests/data/torch_repair/make.py    # torch 2.13 CPU, onnxscript 0.7.2

Each ``NAME.onnx`` comes with ``NAME.npz``: the inputs (``in_<input name>``) and PyTorch's own
outputs (``out_<output name>``) in eager mode, on inputs with repeated indices, where the export
(zeros -> Scatter/ScatterElements/ScatterND without reduction -> Add) counts a repeated index once.

* ``scatter_add_ts{9,11,13}``: ``x.scatter_add(0, idx, src)``, TorchScript at opset 9 (Scatter),
  11 and 13 (ScatterElements).
* ``index_add_ts13``: ``x.index_add(0, i, v)`` (through the scatter_add path).
* ``index_put_acc_ts{11,17}``: ``x.index_put((i,), v, accumulate=True)`` -> ConstantOfShape ->
  ScatterND -> Add.
* ``gnn_sum_ts13``: a GCN-style layer: ``Linear``, messages gathered by source node, summed into
  destination nodes with ``zeros.scatter_add`` (``dst[:, None].expand(-1, F)``), then a ReLU.
* ``degree_count_ts13``: a GCN degree count, ``zeros(N, long).scatter_add(0, dst, ones_like(dst))``,
  int64, dynamic node and edge counts (zeros = ConstantOfShape(Shape(self))).
* ``bev_pool_ts17``: BEV pooling: point features summed into a flat grid of cells with
  ``index_put_(accumulate=True)``, reshaped to (C, H, W).
* ``scatter_reduce_mean_dynamo18``: ``scatter_reduce(0, idx, src, "mean")`` with ``include_self``
  True and False, dynamo exporter, opset 18: two plain ScatterElements (reduction "none", the
  second after a scatter of zeros), named ``node_scatter_reduce*``; the mean is lost and nothing
  but the names tells them from ``scatter`` (not repaired: warned about).
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


class ScatterAdd(torch.nn.Module):
    def forward(self, x, idx, src):
        return x.scatter_add(0, idx, src)


class IndexAdd(torch.nn.Module):
    def forward(self, x, i, v):
        return x.index_add(0, i, v)


class IndexPutAccumulate(torch.nn.Module):
    def forward(self, x, i, v):
        return x.index_put((i,), v, accumulate=True)


class GnnSum(torch.nn.Module):
    def __init__(self, features: int = 4):
        super().__init__()
        self.linear = torch.nn.Linear(features, features)

    def forward(self, h, src, dst):
        msg = self.linear(h)[src]
        index = dst.unsqueeze(-1).expand(-1, msg.shape[1])
        return torch.relu(torch.zeros_like(h).scatter_add(0, index, msg))


class DegreeCount(torch.nn.Module):
    def forward(self, h, dst):
        return torch.zeros(h.shape[0], dtype=torch.long).scatter_add(0, dst, torch.ones_like(dst))


class BevPool(torch.nn.Module):
    def __init__(self, height: int = 4, width: int = 5):
        super().__init__()
        self.height, self.width = height, width

    def forward(self, feats, cell):
        grid = torch.zeros(self.height * self.width, feats.shape[1])
        grid.index_put_((cell,), feats, accumulate=True)
        return grid.t().reshape(feats.shape[1], self.height, self.width)


class ScatterReduceMean(torch.nn.Module):
    def forward(self, x, idx, src):
        with_self = x.scatter_reduce(0, idx, src, reduce="mean", include_self=True)
        return with_self, x.scatter_reduce(0, idx, src, reduce="mean", include_self=False)


def export(name: str, module: torch.nn.Module, inputs: dict[str, torch.Tensor], opset: int,
           dynamo: bool = False, dynamic_axes: dict | None = None) -> None:
    path = HERE / f"{name}.onnx"
    args = tuple(inputs.values())
    outputs = ["y", "y_without_self"] if isinstance(module, ScatterReduceMean) else ["y"]
    if dynamo:  # optimize=False: as the exporter translates it, before onnxscript's optimizer
        torch.onnx.export(module, args, path, dynamo=True, opset_version=opset,
                          input_names=list(inputs), output_names=outputs, external_data=False,
                          optimize=False)
    else:
        torch.onnx.export(module, args, path, dynamo=False, opset_version=opset,
                          input_names=list(inputs), output_names=outputs, dynamic_axes=dynamic_axes)
    expected = module(*args)
    expected = expected if isinstance(expected, tuple) else (expected,)
    arrays = {f"in_{k}": v.numpy() for k, v in inputs.items()}
    arrays |= {f"out_{o}": e.detach().numpy() for o, e in zip(outputs, expected)}
    np.savez(HERE / f"{name}.npz", **arrays)
    model = onnx.load(path)
    ops = [n.op_type for n in model.graph.node]
    print(f"{path.name}: opset {opset}, {path.stat().st_size} bytes, {ops}")


def main() -> None:
    x, src = torch.randn(4, 3), torch.randn(9, 3)
    idx = torch.randint(0, 4, (9, 3))  # 9 updates into 4 rows: repeated indices
    for opset in (9, 11, 13):
        export(f"scatter_add_ts{opset}", ScatterAdd(), {"x": x, "idx": idx, "src": src}, opset)
    i = torch.tensor([0, 2, 2, 5, 2, 1])
    export("index_add_ts13", IndexAdd(), {"x": torch.randn(6, 4), "i": i, "v": torch.randn(6, 4)},
           13)
    i = torch.tensor([0, 2, 2, 4, 2, 5])
    for opset in (11, 17):
        export(f"index_put_acc_ts{opset}", IndexPutAccumulate(),
               {"x": torch.randn(6, 4), "i": i, "v": torch.randn(6, 4)}, opset)
    export("gnn_sum_ts13", GnnSum(), {"h": torch.randn(5, 4), "src": torch.randint(0, 5, (12,)),
                                      "dst": torch.randint(0, 5, (12,))}, 13)
    export("bev_pool_ts17", BevPool(),
           {"feats": torch.randn(30, 3), "cell": torch.randint(0, 20, (30,))}, 17)
    degree_inputs = {"h": torch.randn(5, 4), "dst": torch.tensor([0, 1, 1, 4, 1, 0, 3])}
    export("degree_count_ts13", DegreeCount(), degree_inputs,
           13, dynamic_axes={"h": {0: "nodes"}, "dst": {0: "edges"}})
    export("scatter_reduce_mean_dynamo18", ScatterReduceMean(), {"x": x, "idx": idx, "src": src},
           18, dynamo=True)


if __name__ == "__main__":
    main()
