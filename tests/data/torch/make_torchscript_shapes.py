"""Make two TorchScript exports (PyTorch 2.13, opset 18) whose declared shapes are false, which
onnxruntime refuses to load (needs torch; tests do not):

    python tests/data/torch/make_torchscript_shapes.py

``scatter_amax_feeds_add_ts18``: ``x.scatter_reduce(0, i, s, "amax") + x`` with static shapes. The
rank-0 If wrapper around the scatter has branches of different shapes ([40] and [10, 4]), and the
Add after it is declared [10, 40] from the wrong one.

``scatter_amax_functions_ts18``, with ``export_modules_as_functions``:
One module type, ``Agg`` (``scatter_reduce(self.dim, ..., "amax")``), used twice: along dim 0 on
[10, 4] data and along dim 1 on [5, 8] data. The exporter writes one local function ``Agg`` whose
ScatterElements reads ``axis = @inferred::ScatterElements_axis`` (known only at each call) inside
TorchScript's rank-0 If wrapper, and declares shapes from one call for the other: onnxruntime 1.32
refuses to load the model ("Inferred shape and existing shape differ"). Inputs and PyTorch's eager
outputs go to the ``.npz`` as for ``make.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import torch

HERE = Path(__file__).resolve().parent
NAME = "scatter_amax_functions_ts18"


class Agg(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x, index, src):
        return x.scatter_reduce(self.dim, index, src, reduce="amax", include_self=True) * 2


class FeedsAdd(torch.nn.Module):
    def forward(self, x, index, src):
        return x.scatter_reduce(0, index, src, reduce="amax", include_self=True) + x


def save(name, module, inputs, outputs, **options):
    path = HERE / f"{name}.onnx"
    torch.onnx.export(module, tuple(inputs.values()), path, dynamo=False, opset_version=18,
                      input_names=list(inputs), output_names=list(outputs), **options)
    np.savez(HERE / f"{name}.npz", **{f"in_{k}": v.numpy() for k, v in inputs.items()},
             **{f"out_{k}": v.detach().numpy() for k, v in outputs.items()})
    model = onnx.load(path)
    print(f"{path.name}: {path.stat().st_size} bytes, functions {[f.name for f in model.functions]}")


class TwoAggregations(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rows, self.columns = Agg(0), Agg(1)

    def forward(self, x, i0, s0, y, i1, s1):
        return self.rows(x, i0, s0) + 1, self.columns(y, i1, s1) + 1


if __name__ == "__main__":
    torch.manual_seed(0)
    inputs = {"x": torch.randn(10, 4), "i0": torch.randint(0, 10, (6, 4)), "s0": torch.randn(6, 4),
              "y": torch.randn(5, 8), "i1": torch.randint(0, 8, (5, 3)), "s1": torch.randn(5, 3)}
    module = TwoAggregations()
    rows, columns = module(*inputs.values())
    save(NAME, module, inputs, {"rows": rows, "columns": columns}, export_modules_as_functions={Agg})
    torch.manual_seed(1)
    inputs = {"x": torch.randn(10, 4), "i": torch.randint(0, 10, (6, 4)), "s": torch.randn(6, 4)}
    save("scatter_amax_feeds_add_ts18", FeedsAdd(), inputs, {"y": FeedsAdd()(*inputs.values())})
