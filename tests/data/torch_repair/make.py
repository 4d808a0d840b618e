"""Make the exports whose scatters ``repair`` fixes or warns about (needs torch; tests do not).

    python tests/data/torch_repair/make.py    # torch 2.13 CPU, onnxscript 0.7.2
    python tests/data/torch_repair/make.py --real-layers    # only export_real_layers()
    python tests/data/torch_repair/make.py --sparse-conv    # only export_sparse_conv(): torch 2.14
    python tests/data/torch_repair/make.py --moe-blocks    # only export_moe_blocks(): transformers 5.24

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

Real layers whose scatters ``repair`` fixes, with indices computed inside the model:

* ``moe_router_ts{9,11,13}``: a Shazeer-style top-2 gate; tokens per expert counted with
  ``zeros.scatter_add_(0, topk_idx.flatten(), ones)`` (12 slots into 4 experts always repeat).
* ``moe_sort_ts13``: tokens grouped by their expert (``sort``), tokens per expert counted with
  ``scatter_add_`` and their offsets by ``cumsum``.
* ``jagged_bag_sum_ts13``: a DLRM-style jagged bag sum: segment ids from ``cumsum(lengths)``
  (a value past the last boundary goes to the last bag, so any lengths give in-range ids),
  summed with ``scatter_add``; ``jagged_bag_sum_strict_ts13``: the same, a value past every
  boundary getting the id ``len(lengths)`` (in range only where the lengths sum to at least the
  number of values).
* ``bev_index_put_ts{11,13,16,17}``: LSS-style BEV pooling, ``bev.index_put_((ys, xs), feats,
  accumulate=True)`` with the cells computed from point coordinates: ScatterND with an index tuple
  of length 2 built by Unsqueeze + Concat.
* ``pyg_mean_dynamo18`` / ``pyg_mean_self_dynamo18``: PyG's mean aggregation,
  ``scatter_reduce(0, dst, msg, "mean", include_self=False / True)``, dynamo exporter.
* ``voxel_centroid_fp16_ts{16,17}``: float16 point coordinates summed per voxel with
  ``index_put_(accumulate=True)``
  and divided by the per-voxel count.
* ``sparse_conv_ts{11,17}`` (``export_sparse_conv``): a sparse-convolution layer from its rulebook: per kernel offset, input
  features gathered (``feats[in_idx[k]]``), multiplied by the offset's weight and summed into the
  output rows with ``out.index_add_(0, out_idx[k], ...)``: three accumulations chained, each Add
  reading the previous one (rows repeat within each offset).

transformers' sparse MoE blocks (``export_moe_blocks``), hidden size 16, 8 experts, top 2, weights
drawn from N(0, 0.5) (a block built from its config alone is not initialized), input (2, 5, 16):

* ``qwen2_moe_block_ts{11,17}`` (``Qwen2MoeSparseMoeBlock``, with its shared expert),
  ``olmoe_block_ts{11,17}`` (``OlmoeSparseMoeBlock``): the trace unrolls the loop over the experts
  the example hits (all 8: ``Split`` of ``NonZero`` into 8), each ``index_add_`` into the tokens it
  routes to; the export runs only on inputs that hit every expert (others fail in that Split).
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


class MoeRouter(torch.nn.Module):
    def __init__(self, dim: int = 8, experts: int = 4, k: int = 2):
        super().__init__()
        self.gate = torch.nn.Linear(dim, experts, bias=False)
        self.experts, self.k = experts, k

    def forward(self, x):
        weights, topk_idx = self.gate(x).softmax(-1).topk(self.k, dim=-1)
        flat = topk_idx.flatten()
        counts = torch.zeros(self.experts, dtype=torch.long)
        return weights, counts.scatter_add_(0, flat, torch.ones_like(flat))


class MoeSortByExpert(torch.nn.Module):
    def __init__(self, dim: int = 8, experts: int = 4):
        super().__init__()
        self.gate = torch.nn.Linear(dim, experts, bias=False)
        self.experts = experts

    def forward(self, x):
        expert = self.gate(x).argmax(-1)
        sorted_expert, _ = expert.sort()
        counts = torch.zeros(self.experts, dtype=torch.long)
        counts = counts.scatter_add_(0, expert, torch.ones_like(expert))
        return sorted_expert, counts, counts.cumsum(0)


class JaggedBagSum(torch.nn.Module):
    def __init__(self, strict: bool = False):
        super().__init__()
        self.strict = strict

    def forward(self, values, lengths):
        offsets = lengths.cumsum(0)
        bounds = offsets if self.strict else offsets[:-1]
        positions = torch.arange(values.shape[0]).unsqueeze(1)
        segment = (positions >= bounds.unsqueeze(0)).sum(1)
        bags = torch.zeros(lengths.shape[0], values.shape[1])
        return bags.scatter_add(0, segment.unsqueeze(1).expand(-1, values.shape[1]), values)


class BevIndexPut(torch.nn.Module):
    def __init__(self, height: int = 4, width: int = 5):
        super().__init__()
        self.height, self.width = height, width

    def forward(self, feats, points):
        unit = (points.clamp(-1.0, 0.999) + 1.0) / 2.0  # coordinates in [0, 1)
        ys = (unit[:, 1] * self.height).long()
        xs = (unit[:, 0] * self.width).long()
        bev = torch.zeros(self.height, self.width, feats.shape[1])
        bev.index_put_((ys, xs), feats, accumulate=True)
        return bev.permute(2, 0, 1)


class PygMeanAggregation(torch.nn.Module):
    def __init__(self, include_self: bool, features: int = 4):
        super().__init__()
        self.include_self = include_self
        self.linear = torch.nn.Linear(features, features)

    def forward(self, x, edge_index):
        msg = self.linear(x)[edge_index[0]]
        index = edge_index[1].unsqueeze(-1).expand(-1, msg.shape[1])
        return x.scatter_reduce(0, index, msg, reduce="mean", include_self=self.include_self)


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


class SparseConv(torch.nn.Module):
    def __init__(self, offsets: int = 3, features: int = 4, out_features: int = 5):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(offsets, features, out_features))
        self.out_features = out_features

    def forward(self, feats, in_idx, out_idx):
        out = torch.zeros(feats.shape[0], self.out_features)
        for k in range(self.weight.shape[0]):
            out.index_add_(0, out_idx[k], feats[in_idx[k]] @ self.weight[k])
        return out


OUTPUTS = {ScatterReduceMean: ["y", "y_without_self"], MoeRouter: ["weights", "counts"],
           MoeSortByExpert: ["sorted_expert", "counts", "offsets"]}


def export(name: str, module: torch.nn.Module, inputs: dict[str, torch.Tensor], opset: int,
           dynamo: bool = False, dynamic_axes: dict | None = None) -> None:
    path = HERE / f"{name}.onnx"
    args = tuple(inputs.values())
    outputs = OUTPUTS.get(type(module), ["y"])
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
    export_real_layers()
    export_sparse_conv()
    export_moe_blocks()


def export_real_layers() -> None:
    torch.manual_seed(0)  # the same files whether run alone (--real-layers) or after main()'s
    tokens = torch.randn(6, 8)
    router = MoeRouter()
    for opset in (9, 11, 13):
        export(f"moe_router_ts{opset}", router, {"x": tokens}, opset)
    export("moe_sort_ts13", MoeSortByExpert(), {"x": tokens}, 13)
    jagged = {"values": torch.randn(9, 3), "lengths": torch.tensor([2, 0, 4, 3])}
    export("jagged_bag_sum_ts13", JaggedBagSum(), jagged, 13)
    export("jagged_bag_sum_strict_ts13", JaggedBagSum(strict=True), jagged, 13)
    bev = {"feats": torch.randn(24, 3), "points": torch.rand(24, 2) * 2 - 1}
    for opset in (11, 13, 16, 17):
        export(f"bev_index_put_ts{opset}", BevIndexPut(), bev, opset)
    graph = {"x": torch.randn(5, 4), "edge_index": torch.tensor([[0, 1, 2, 3, 4, 0, 2, 1],
                                                                 [1, 1, 3, 1, 0, 3, 3, 0]])}
    export("pyg_mean_dynamo18", PygMeanAggregation(include_self=False), graph, 18, dynamo=True)
    export("pyg_mean_self_dynamo18", PygMeanAggregation(include_self=True), graph, 18,
           dynamo=True)
    voxels = {"points": torch.randn(20, 3).half(), "voxel": torch.randint(0, 5, (20,))}
    for opset in (16, 17):  # voxel 5 of 6 gets no point
        export(f"voxel_centroid_fp16_ts{opset}", VoxelCentroid(), voxels, opset)


def export_sparse_conv() -> None:
    torch.manual_seed(1)
    # 8 rulebook pairs per offset into 10 rows (the exporter refuses index_add_ with more updates
    # than rows)
    rulebook = {"feats": torch.randn(10, 4), "in_idx": torch.randint(0, 10, (3, 8)),
                "out_idx": torch.randint(0, 10, (3, 8))}
    sparse_conv = SparseConv()
    for opset in (11, 17):
        export(f"sparse_conv_ts{opset}", sparse_conv, rulebook, opset)


def export_moe_blocks() -> None:
    from transformers import OlmoeConfig, Qwen2MoeConfig
    from transformers.models.olmoe.modeling_olmoe import OlmoeSparseMoeBlock
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock

    torch.manual_seed(0)
    common = {"hidden_size": 16, "num_experts": 8, "num_experts_per_tok": 2}
    blocks = {
        "qwen2_moe_block": Qwen2MoeSparseMoeBlock(Qwen2MoeConfig(
            moe_intermediate_size=8, shared_expert_intermediate_size=8, **common)),
        "olmoe_block": OlmoeSparseMoeBlock(OlmoeConfig(intermediate_size=8, **common)),
    }
    for name, block in blocks.items():
        with torch.no_grad():
            for weight in block.parameters():
                weight.normal_(0, 0.5)
        x = torch.randn(2, 5, 16)
        for opset in (11, 17):
            export(f"{name}_ts{opset}", block.eval(), {"x": x}, opset)


if __name__ == "__main__":
    import sys

    chosen = {"--real-layers": export_real_layers, "--sparse-conv": export_sparse_conv,
              "--moe-blocks": export_moe_blocks}
    chosen.get(sys.argv[1] if sys.argv[1:] else "", main)()
