"""Make the PyTorch-exported reduction models the lower tests read (needs torch; tests do not).

    pip install torch==2.13.0 onnxscript==0.7.2   # script only
    python tests/data/torch/make.py

Each ``NAME.onnx`` comes with ``NAME.npz``: the inputs (``in_<input name>``) and PyTorch's own
outputs (``out_<output name>``) computed in eager mode, with duplicate (and, where PyTorch
allows, negative) indices, so the tests compare the lowered model against PyTorch itself.

* ``scatter_reduce_{amax,amin,sum,prod}_dynamo18``: ``x.scatter_reduce(0, idx, src, reduce)``,
  dynamo exporter, opset 18 -> ScatterElements(reduction=max/min/add/mul).
* ``scatter_reduce_amax_ts16``: the TorchScript exporter at opset 16 emits max although the spec
  has it from 18 (onnxruntime runs it).
* ``index_put_acc_dynamo18``: ``x.index_put((i,), v, accumulate=True)`` -> ScatterND(add).
* ``index_add_dynamo18``: ``x.index_add(0, i, v)``.
* ``gnn_amax_cond_dynamo18``: PyG-style max aggregation ``scatter_reduce(0, dst[:, None].expand(-1, F),
  msg, "amax")`` inside ``torch.cond`` (an If whose branches the exporter may put in local functions).
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


class ScatterReduce(torch.nn.Module):
    def __init__(self, reduce: str):
        super().__init__()
        self.reduce = reduce

    def forward(self, x, idx, src):
        return x.scatter_reduce(0, idx, src, reduce=self.reduce, include_self=True)


class IndexPutAccumulate(torch.nn.Module):
    def forward(self, x, i, v):
        return x.index_put((i,), v, accumulate=True)


class IndexAdd(torch.nn.Module):
    def forward(self, x, i, v):
        return x.index_add(0, i, v)


class GnnAmaxCond(torch.nn.Module):
    def forward(self, h, dst, msg, flag):
        def aggregate(h, dst, msg):
            index = dst.unsqueeze(-1).expand(-1, msg.shape[1])
            return h.scatter_reduce(0, index, msg, reduce="amax", include_self=True)

        def skip(h, dst, msg):
            return h * 2

        return torch.cond(flag.sum() > 0, aggregate, skip, (h, dst, msg))


def export(name: str, module: torch.nn.Module, inputs: dict[str, torch.Tensor], *, dynamo: bool, opset: int) -> None:
    path = HERE / f"{name}.onnx"
    args = tuple(inputs.values())
    if dynamo:
        # optimize=False: onnxscript 0.7.2's optimizer turns some ScatterND(add) into Identity(updates)
        torch.onnx.export(module, args, path, dynamo=True, opset_version=opset, input_names=list(inputs),
                          output_names=["y"], external_data=False, optimize=False)
    else:
        torch.onnx.export(module, args, path, dynamo=False, opset_version=opset, input_names=list(inputs),
                          output_names=["y"])
    expected = module(*args)
    arrays = {f"in_{k}": v.numpy() for k, v in inputs.items()} | {"out_y": expected.detach().numpy()}
    np.savez(HERE / f"{name}.npz", **arrays)
    model = onnx.load(path)
    ops = sorted({n.op_type for n in model.graph.node})
    print(f"{path.name}: opset {opset}, {path.stat().st_size} bytes, {ops}, functions {[f.name for f in model.functions]}")


def main() -> None:
    x = torch.randn(4, 3)
    idx = torch.randint(0, 4, (9, 3))  # 9 updates into 4 rows: duplicates
    src = torch.randn(9, 3)
    src[0, 0] = 0.0
    for reduce in ("amax", "amin", "sum", "prod"):
        export(f"scatter_reduce_{reduce}_dynamo18", ScatterReduce(reduce), {"x": x, "idx": idx, "src": src},
               dynamo=True, opset=18)
    export("scatter_reduce_amax_ts16", ScatterReduce("amax"), {"x": x, "idx": idx, "src": src}, dynamo=False, opset=16)
    i = torch.tensor([0, 2, 2, -1, 2, 5])
    export("index_put_acc_dynamo18", IndexPutAccumulate(), {"x": torch.randn(6, 4), "i": i, "v": torch.randn(6, 4)},
           dynamo=True, opset=18)
    export("index_add_dynamo18", IndexAdd(), {"x": torch.randn(6, 4), "i": torch.tensor([0, 2, 2, 5, 2, 1]),
                                              "v": torch.randn(6, 4)}, dynamo=True, opset=18)
    export("gnn_amax_cond_dynamo18", GnnAmaxCond(),
           {"h": torch.randn(5, 3), "dst": torch.randint(0, 5, (12,)), "msg": torch.randn(12, 3),
            "flag": torch.ones(2)}, dynamo=True, opset=18)


if __name__ == "__main__":
    main()
