"""Make the dynamo exports the opset-move tests read: a PyG-style message-passing layer and a layer
built with ``view``/``reshape``, at PyTorch 2.13's default opset and at 18, with a static and a
dynamic edge (row) count (needs torch and onnxscript; tests do not).

    python tests/data/torch/make_opset_moves.py

* ``mp_layer_dynamo{default,18}[_dynamic]``:
  ``h = relu(lin_self(x) + scatter_add(lin_msg(x[src]), dst) + scatter_amax(...))``,
  edges ``edge_index`` [2, E] (E = 20, or dynamic).
* ``view_layer_dynamo{default,18}[_dynamic]``: heads split with ``view``, mixed, joined with
  ``reshape`` and normalized over the last axis (rows N = 6, or dynamic): dynamo writes Reshape
  with ``allowzero=1`` and, with a dynamic N, the shape computed from ``Shape(start, end)``.

Inputs and PyTorch's eager outputs go to ``NAME.npz`` as for ``make.py``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import torch

HERE = Path(__file__).resolve().parent
F, HEADS = 8, 2
warnings.simplefilter("ignore")


class MessagePassing(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin_self = torch.nn.Linear(F, F)
        self.lin_msg = torch.nn.Linear(F, F)

    def forward(self, x, edge_index):
        src, dst = edge_index[0], edge_index[1]
        msg = self.lin_msg(x[src])
        index = dst.unsqueeze(-1).expand(-1, F)
        total = torch.zeros_like(x).scatter_add(0, index, msg)
        top = torch.zeros_like(x).scatter_reduce(0, index, msg, "amax", include_self=False)
        return torch.relu(self.lin_self(x) + total + top)


class ViewLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mix = torch.nn.Linear(F // HEADS, F // HEADS)

    def forward(self, x):
        n = x.shape[0]
        heads = x.view(n, HEADS, F // HEADS)
        mixed = self.mix(heads).transpose(0, 1).reshape(HEADS, -1).softmax(-1)
        joined = mixed.reshape(HEADS, n, F // HEADS).transpose(0, 1).reshape(n, F)
        return joined * x.mean(-1, keepdim=True)


def export(
    name: str,
    module: torch.nn.Module,
    inputs: dict[str, torch.Tensor],
    opset: int | None,
    dynamic: dict | None,
) -> None:
    path = HERE / f"{name}.onnx"
    args = tuple(inputs.values())
    # optimize=False: onnxscript's optimizer rewrote ScatterND(add) into Identity(updates) (make.py)
    program = torch.onnx.export(
        module,
        args,
        dynamo=True,
        opset_version=opset,
        input_names=list(inputs),
        output_names=["y"],
        dynamic_shapes=dynamic,
        optimize=False,
    )
    program.save(str(path), external_data=False)
    expected = module(*args)
    np.savez(
        HERE / f"{name}.npz",
        **{f"in_{k}": v.numpy() for k, v in inputs.items()},
        out_y=expected.detach().numpy(),
    )
    model = onnx.load(path)
    version = next(o.version for o in model.opset_import if o.domain == "")
    print(
        f"{path.name}: opset {version}, {path.stat().st_size} bytes, "
        f"{sorted({n.op_type for n in model.graph.node})}"
    )


def main() -> None:
    torch.manual_seed(0)
    mp, view = MessagePassing().eval(), ViewLayer().eval()
    x, edges = torch.randn(6, F), torch.randint(0, 6, (2, 20))
    edge_count = torch.export.Dim("edges", min=2)
    rows = torch.export.Dim("rows", min=2)
    for opset, tag in ((None, "default"), (18, "18")):
        export(f"mp_layer_dynamo{tag}", mp, {"x": x, "edge_index": edges}, opset, None)
        export(f"view_layer_dynamo{tag}", view, {"x": x}, opset, None)
    export(
        "mp_layer_dynamo18_dynamic",
        mp,
        {"x": x, "edge_index": edges},
        18,
        {"x": None, "edge_index": {1: edge_count}},
    )
    export("view_layer_dynamo18_dynamic", view, {"x": x}, 18, {"x": {0: rows}})


if __name__ == "__main__":
    main()
