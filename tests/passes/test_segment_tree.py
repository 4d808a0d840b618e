"""The segment tree of float max/min in the scatter-free sort form
(scatter_rewrite/passes/lowering/segment_tree.py): bit for bit against onnxruntime's own scatter
among NaNs (their payloads too), -0.0/+0.0 and ties, over runs of every length; the doubling scan
kept where the update count is symbolic; the memory it declares."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

import scatter_rewrite
from scatter_rewrite.graph import iter_nodes
from scatter_rewrite.passes import no_scatter as ns
from scatter_rewrite.passes.lowering import scatter_free, segment_tree
from scatter_rewrite.type_inference import borrow_inferred_types
from tests.helpers.models import gnn_model, op_types, scatters_left
from tests.helpers.runs import ort_run

# every value an exact max/min must keep apart: both zeros, both infinities, NaNs of two payloads
TREE_POOL = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 2.0, np.nan, -np.nan], np.float32)


def tree_feeds(rng, nodes: int, edges: int, feats: int) -> dict:
    dst = rng.integers(0, nodes, edges)
    if edges > 4:  # one row takes most updates: a run as long as the edges
        dst[rng.random(edges) < 0.6] = rng.integers(0, nodes)
    return {"x": rng.choice(TREE_POOL, (nodes, feats)), "dst": dst,
            "msg": rng.choice(TREE_POOL, (edges, feats))}


@pytest.mark.parametrize("reduction", ["max", "min"])
@pytest.mark.parametrize("nodes, edges", [(1, 1), (1, 9), (3, 2), (7, 33), (16, 64), (29, 300)])
def test_the_tree_keeps_onnxruntimes_bits(reduction, nodes, edges):
    model = gnn_model(reduction, nodes=nodes, edges=edges, feats=3)
    prepared = scatter_rewrite.prepare(model, target="no-scatter", validate=False)
    assert not scatters_left(prepared) and "Loop" not in op_types(prepared)
    rng = np.random.default_rng(nodes * 1000 + edges)
    for _ in range(4):
        feeds = tree_feeds(rng, nodes, edges, 3)
        expected, actual = ort_run(model, feeds)[0], ort_run(prepared, feeds)[0]
        assert expected.view(np.uint32).tolist() == actual.view(np.uint32).tolist(), feeds


def test_a_symbolic_update_count_keeps_the_doubling_scan():
    # (the tree's levels are sized from R + n: with n symbolic, the scan's 31 steps instead)
    model = gnn_model("max", nodes=6, edges="e", feats=3, expand_to="shape")
    prepared = scatter_rewrite.prepare(model, target="no-scatter", validate=False)
    feeds = tree_feeds(np.random.default_rng(3), 6, 40, 3)
    assert ort_run(model, feeds)[0].tobytes() == ort_run(prepared, feeds)[0].tobytes()
    assert op_types(prepared).count("GatherElements") == 2 * scatter_free.DYNAMIC_STEPS + 1
    assert not segment_tree.applies(None, 6) and not segment_tree.applies(40, None)
    assert not segment_tree.applies(0, 6) and segment_tree.applies(40, 6)


def test_a_gnn_max_declares_what_its_levels_hold():
    # 2000 nodes x 64 from 200000 edges: the doubling scan would hold 325 MiB (18 steps over all
    # 202000 sorted rows); the tree at most a level and the next, at its largest while the first
    # level is built from the sorted rows' pairs (2 x 101000 rows of 64 float32): 164 MiB
    model = gnn_model("max", nodes=2000, edges=200_000, feats=64)
    prepared = scatter_rewrite.prepare(model, target="no-scatter", validate=False,
                                       max_intermediate_mib=400)
    assert not scatters_left(prepared)
    working = ir.serde.deserialize_model(model)
    borrow_inferred_types(working, sharpen=True)
    node, scope = next((n, s) for n, s in iter_nodes(working) if n.op_type == "ScatterElements")
    (form,) = ns.forms_for(node, scope.opset)
    assert form.name == "sort" and 2 * 101_000 * 64 * 4 < form.bytes < 170 * 2 ** 20
