"""Sessions of a model onnxruntime's constant folding would crash on (scatter_rewrite/ort_folding.py):
dynamo's EmbeddingBag mean export runs in validation and gives PyTorch's outputs; a model without a
constant-condition If in a subgraph keeps every optimization."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from scatter_rewrite.ort_folding import folding_may_crash, optimizers_left_out
from scatter_rewrite.validate import run_onnxruntime
from tests.helpers.exports import export_arrays

DATA = Path(__file__).parent / "data" / "torch"


def test_the_mean_export_runs_without_constant_folding():
    model = onnx.load(DATA / "embedding_bag_mean_dynamo18.onnx")
    assert folding_may_crash(model)
    assert optimizers_left_out(model, ["ExpandElimination"]) == ["ExpandElimination",
                                                                  "ConstantFolding"]
    feeds, pytorchs = export_arrays(DATA, "embedding_bag_mean_dynamo18")
    got = run_onnxruntime(str(DATA / "embedding_bag_mean_dynamo18.onnx"), feeds)[0]
    np.testing.assert_allclose(got, pytorchs["y"], rtol=1e-6, atol=1e-6)
    assert not got[1].any()  # (its empty bag: a row of zeros)


def test_a_constant_if_in_the_main_graph_alone_keeps_constant_folding():
    for name in ("scatter_reduce_sum_dynamo18", "gnn_max_layer_ts17"):
        model = onnx.load(DATA / f"{name}.onnx")
        assert not folding_may_crash(model)
        assert optimizers_left_out(model, []) == []
