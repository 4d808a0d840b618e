"""Make the dynamo exports of ``torch.nn.EmbeddingBag`` the opset-move tests read (needs torch and
onnxscript; tests do not).

    python tests/data/torch/make_embedding_bag.py

Dynamo writes EmbeddingBag as a Loop over the bags whose body (Gather, ReduceSum/Mean/Max, Reshape,
CastLike...) reads typed body inputs but declares no type inside: moving it down needs the types
inferred in the body.

* ``embedding_bag_sum_dynamo{18,20}``: mode="sum" with ``per_sample_weights``.
* ``embedding_bag_max_dynamo{18,20}``: mode="max".
* ``embedding_bag_mean_dynamo18``: mode="mean" with an empty bag (its row is zeros). onnxruntime
  1.32's ConstantFolding crashes the process creating a session for this export with the default
  graph optimizations (scatter_rewrite/ort_folding.py says why; its sessions leave that out).

10 rows of width 4, 9 indices in 4 bags. Inputs and PyTorch's eager outputs go to ``NAME.npz``
as for ``make.py`` (``in_<input>``, ``out_y``).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import torch

HERE = Path(__file__).resolve().parent
ROWS, WIDTH = 10, 4
warnings.simplefilter("ignore")


class Bags(torch.nn.Module):
    def __init__(self, mode: str):
        super().__init__()
        self.bag = torch.nn.EmbeddingBag(ROWS, WIDTH, mode=mode)

    def forward(self, indices, offsets, *weights):
        return self.bag(indices, offsets, per_sample_weights=weights[0] if weights else None)


def export(name: str, module: torch.nn.Module, inputs: dict[str, torch.Tensor],
           opset: int) -> None:
    path = HERE / f"{name}.onnx"
    args = tuple(inputs.values())
    # optimize=False: onnxscript's optimizer rewrote ScatterND(add) into Identity(updates) (make.py)
    program = torch.onnx.export(module, args, dynamo=True, opset_version=opset,
                                input_names=list(inputs), output_names=["y"], optimize=False)
    program.save(str(path), external_data=False)
    expected = module(*args)
    np.savez(HERE / f"{name}.npz", **{f"in_{k}": v.numpy() for k, v in inputs.items()},
             out_y=expected.detach().numpy())
    model = onnx.load(path)
    version = next(o.version for o in model.opset_import if o.domain == "")
    print(f"{path.name}: opset {version}, {path.stat().st_size} bytes, "
          f"{sorted({n.op_type for n in model.graph.node})}")


def main() -> None:
    torch.manual_seed(0)
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0])
    weights = torch.rand(9)
    for opset in (18, 20):
        export(f"embedding_bag_sum_dynamo{opset}", Bags("sum").eval(),
               {"indices": indices, "offsets": torch.tensor([0, 2, 5, 7]),
                "per_sample_weights": weights}, opset)
        export(f"embedding_bag_max_dynamo{opset}", Bags("max").eval(),
               {"indices": indices, "offsets": torch.tensor([0, 2, 5, 7])}, opset)
    export("embedding_bag_mean_dynamo18", Bags("mean").eval(),
           {"indices": indices, "offsets": torch.tensor([0, 2, 2, 7])}, 18)


if __name__ == "__main__":
    main()
