"""A float16 PyTorch export for the TensorRT plugin-form tests (needs torch, like make.py).

    python tests/data/torch_trt/make_fp16.py

* ``voxel_centroid_fp16_dynamo18``: float16 point coordinates summed per voxel
  (``index_put_(accumulate=True)``) and divided by the per-voxel point count, dynamo exporter,
  opset 18: two float16 ScatterND(reduction="add"), which onnxruntime's CPU provider has no kernel
  for. ``tensorrt --trt-version 10`` writes them in the ScatterElements plugin form (float16 add),
  which TensorRT runs and onnxruntime does not either.
"""

from __future__ import annotations

import torch
from make import export


class VoxelCentroid(torch.nn.Module):
    def __init__(self, voxels: int = 6):
        super().__init__()
        self.voxels = voxels

    def forward(self, points, voxel):
        sums = torch.zeros(self.voxels, points.shape[1], dtype=points.dtype)
        sums.index_put_((voxel,), points, accumulate=True)
        counts = torch.zeros(self.voxels, dtype=points.dtype)
        counts.index_put_((voxel,), torch.ones_like(points[:, 0]), accumulate=True)
        return sums / counts.clamp(min=1).unsqueeze(1)


def main() -> None:
    torch.manual_seed(0)
    voxels = {"points": torch.randn(20, 3).half(), "voxel": torch.randint(0, 5, (20,))}
    export("voxel_centroid_fp16_dynamo18", VoxelCentroid(), voxels, ["centroids"], dynamo=True,
           opset=18)  # (voxel 5 of 6 gets no point)


if __name__ == "__main__":
    main()
