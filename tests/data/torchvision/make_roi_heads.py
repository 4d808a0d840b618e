"""Make the exports of torchvision's RoI pooling (Mask R-CNN's RoI heads) the opset-move tests read
(needs torch, torchvision and onnxscript; tests do not).

    python tests/data/torchvision/make_roi_heads.py

* ``multiscale_roi_align_ts{16,17}``: ``torchvision.ops.MultiScaleRoIAlign`` over two feature maps
  (levels 2 and 3 of a 128x128 image: 32x32 and 16x16, 2 channels), TorchScript exporter. torchvision's
  symbolic writes each level's ``RoiAlign`` with coordinate_transformation_mode="output_half_pixel"
  (aligned=False), the level mapping (Sqrt, Log, Floor, Clip...) and the merge of the levels as
  ``Scatter``/``ScatterElements`` of each level's rows into one result.
* ``multiscale_roi_align_dynamo{18,20}``: the same module, dynamo exporter (optimize=False, as
  tests/data/torch/make.py).
* ``roi_align_aligned_ts{16,17}``, ``roi_align_aligned_dynamo{18,20}``: ``torchvision.ops.RoIAlign``
  with aligned=True: RoiAlign with coordinate_transformation_mode="half_pixel".

Two images with 3 and 2 boxes, two of them large enough for level 3 (torchvision's
LevelMapper: sqrt(area) >= 112),, 3x3 outputs, sampling_ratio=2. Inputs
and PyTorch's eager outputs go to ``NAME.npz`` as for tests/data/torch/make.py (``in_<input>``,
``out_y``).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
import torchvision

HERE = Path(__file__).resolve().parent
IMAGE = (128, 128)
warnings.simplefilter("ignore")


class MultiScale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = torchvision.ops.MultiScaleRoIAlign(["p2", "p3"], output_size=3, sampling_ratio=2)

    def forward(self, p2, p3, boxes0, boxes1):
        return self.pool({"p2": p2, "p3": p3}, [boxes0, boxes1], [IMAGE, IMAGE])


class Aligned(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = torchvision.ops.RoIAlign(output_size=3, spatial_scale=0.25, sampling_ratio=2,
                                             aligned=True)

    def forward(self, p2, rois):
        return self.pool(p2, rois)


def export(name: str, module: torch.nn.Module, inputs: dict[str, torch.Tensor], *, dynamo: bool,
           opset: int) -> None:
    path = HERE / f"{name}.onnx"
    args = tuple(inputs.values())
    if dynamo:
        program = torch.onnx.export(module, args, dynamo=True, opset_version=opset,
                                    input_names=list(inputs), output_names=["y"], optimize=False)
        program.save(str(path), external_data=False)
    else:
        torch.onnx.export(module, args, path, dynamo=False, opset_version=opset,
                          input_names=list(inputs), output_names=["y"])
    expected = module(*args)
    np.savez(HERE / f"{name}.npz", **{f"in_{k}": v.numpy() for k, v in inputs.items()},
             out_y=expected.detach().numpy())
    model = onnx.load(path)
    version = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    print(f"{path.name}: opset {version}, {path.stat().st_size} bytes, "
          f"{sorted({n.op_type for n in model.graph.node})}")


def main() -> None:
    torch.manual_seed(0)
    p2, p3 = torch.randn(2, 2, 32, 32), torch.randn(2, 2, 16, 16)
    # small boxes map to level 2 (p2), large ones to level 3 (p3)
    boxes0 = torch.tensor([[1.0, 2.0, 20.0, 18.0], [4.5, 3.25, 122.0, 126.0], [60.0, 10.0, 81.5, 45.0]])
    boxes1 = torch.tensor([[0.0, 0.0, 127.0, 127.0], [12.0, 40.0, 19.0, 47.5]])
    rois = torch.tensor([[0.0, 1.0, 2.0, 20.0, 18.0], [1.0, 4.5, 3.25, 122.0, 126.0],
                         [1.0, 60.0, 10.0, 81.5, 45.0]])
    for opset, dynamo in ((16, False), (17, False), (18, True), (20, True)):
        way = "dynamo" if dynamo else "ts"
        export(f"multiscale_roi_align_{way}{opset}", MultiScale().eval(),
               {"p2": p2, "p3": p3, "boxes0": boxes0, "boxes1": boxes1}, dynamo=dynamo, opset=opset)
        export(f"roi_align_aligned_{way}{opset}", Aligned().eval(), {"p2": p2, "rois": rois},
               dynamo=dynamo, opset=opset)


if __name__ == "__main__":
    main()
