"""Make ``gnn_gelu_layernorm_dynamo20``: a message-passing layer as PyTorch 2.13's dynamo exporter
writes it at its default opset (20), with the ops that have no older version (Gelu-20,
LayerNormalization-17) beside the scatters (needs torch; tests do not).

    python tests/data/torch/make_default_opset.py

``h = LayerNorm(amax_aggregate(gelu(lin(x[src])), dst) + sum_aggregate(..., dst) + x)``: the amax
through ``scatter_reduce`` (ScatterElements max), the sum through ``index_add`` (ScatterND add).
Inputs and PyTorch's eager outputs go to the ``.npz`` as for ``make.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make import export  # noqa: E402

F = 8


class GeluLayerNormGnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(F, F)
        self.norm = torch.nn.LayerNorm(F)

    def forward(self, x, edge_index):
        src, dst = edge_index[0], edge_index[1]
        msg = torch.nn.functional.gelu(self.lin(x[src]))
        top = torch.zeros_like(x).scatter_reduce(0, dst.unsqueeze(-1).expand(-1, F), msg, "amax", include_self=False)
        total = torch.zeros_like(x).index_add(0, dst, msg)
        return self.norm(top + total + x)


if __name__ == "__main__":
    torch.manual_seed(0)
    export("gnn_gelu_layernorm_dynamo20", GeluLayerNormGnn(),
           {"x": torch.randn(6, F), "edge_index": torch.randint(0, 6, (2, 20))}, dynamo=True, opset=20)
