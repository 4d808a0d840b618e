"""Make the TorchScript export the constant-identity tests read (needs torch; tests do not).

    python tests/data/torch/make_constants_ts11.py

* ``label_smoothing_ts11``: multi-hot labels scattered into zeros, smoothed with a constant of the
  same shape, beside a second same-shaped constant: TorchScript at opset 11 writes each as a
  ``Constant`` whose tensor has the name "" (4x16 float, 64 elements each).

Inputs and PyTorch's eager outputs go to ``NAME.npz`` as for ``make.py``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
warnings.simplefilter("ignore")
torch.manual_seed(0)


class LabelSmoothing(torch.nn.Module):
    def forward(self, labels, x):
        hot = torch.zeros(4, 16).scatter_(1, labels, 1.0)
        smooth = hot * 0.9 + torch.full((4, 16), 0.1 / 16)
        other = torch.zeros(4, 16) + torch.ones(4, 16) * 0.5
        return smooth + x, other * x


def main() -> None:
    name = "label_smoothing_ts11"
    inputs = {"labels": torch.tensor([[1], [3], [5], [7]]), "x": torch.randn(4, 16)}
    module = LabelSmoothing()
    torch.onnx.export(module, tuple(inputs.values()), str(HERE / f"{name}.onnx"), opset_version=11,
                      dynamo=False, input_names=list(inputs), output_names=["y", "z"])
    y, z = module(*inputs.values())
    arrays = {f"in_{k}": v.numpy() for k, v in inputs.items()}
    arrays.update(out_y=y.detach().numpy(), out_z=z.detach().numpy())
    np.savez(HERE / f"{name}.npz", **arrays)


if __name__ == "__main__":
    main()
