"""Fixed-shape PyTorch exports for the TensorRT 8.6 lowering tests (needs torch, like make.py).

    python tests/data/torch_trt/make_static.py

* ``scatter_add_gnn_static_ts16``: make.py's GNN aggregation ``zeros.scatter_add(0, dst[:, None].expand(-1, F),
  msg) + nodes`` exported by TorchScript at opset 16 without dynamic axes, as a fixed-shape TensorRT
  engine would take it: ScatterElements(reduction="add") with a static number of updates, which
  the sorting-network lowering needs (make.py's dynamic-edge export is left alone on 8.6).
"""

from __future__ import annotations

import torch
from make import ScatterAddGNN, export


def main() -> None:
    torch.manual_seed(1)
    nodes, edges, features = 6, 40, 3
    dst = torch.randint(0, nodes, (edges,))
    export("scatter_add_gnn_static_ts16", ScatterAddGNN(),
           {"nodes": torch.randn(nodes, features), "dst": dst, "msg": torch.randn(edges, features)}, ["h"],
           dynamo=False, opset=16)


if __name__ == "__main__":
    main()
