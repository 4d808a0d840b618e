"""Refusals on committed exports name the user's nodes: every node a message quotes is one of the
export's own (a node a pass wrote is named by the user's node it was written for, never by the
name onnx_ir gave it, ``node_Range_12``), and the written model keeps no such mark."""

from __future__ import annotations

import re
from pathlib import Path

import onnx
import onnx_ir as ir
import pytest

from scatter_rewrite.graph import WRITTEN_FOR, iter_nodes
from tests.helpers.cli import invoke

DATA = Path(__file__).parents[1] / "data"

REFUSED = [
    ("torch_trt/scatter_add_gnn_ts16", ["prepare", "--target", "rknn"], True),
    ("torch/scatter_reduce_prod_dynamo18", ["prepare", "--target", "rknn"], True),
    ("torch/gnn_amax_cond_dynamo18", ["prepare", "--target", "rknn"], False),
    ("torch/embedding_bag_max_dynamo18", ["prepare", "--target", "litert"], False),
    ("torch_trt/scatter_add_gnn_ts16", ["tensorrt", "--trt-version", "8.6"], False),
    # (three Shapes a form wrote, each named by its scatter: a new node never takes a freed one's id)
    ("whole_models/point_max_pool_ts16_dyn", ["prepare", "--target", "qnn"], True),
]


def own_node_names(model: onnx.ModelProto) -> set[str]:
    """Every node name of the model: main graph, subgraphs, functions."""
    return {node.name for node, _ in iter_nodes(ir.serde.deserialize_model(model))}


@pytest.mark.parametrize("name, verb, written_for", REFUSED, ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
def test_a_refusal_quotes_only_the_exports_own_nodes(tmp_path: Path, name: str, verb: list[str],
                                                     written_for: bool):
    source = DATA / f"{name}.onnx"
    result = invoke(*verb, source, "--no-validate", "-o", tmp_path / "out.onnx")
    assert result.exit_code == 1 and not (tmp_path / "out.onnx").exists(), result.output
    (line,) = result.stderr.splitlines()
    quoted = re.findall(r"\b[A-Z][A-Za-z]+ '([^']+)' \(opset", line)
    assert quoted, line
    own = own_node_names(onnx.load(source, load_external_data=False))
    assert [q for q in quoted if q not in own] == [], line
    assert ("written for" in line) is written_for, line


def test_the_written_model_keeps_no_mark(tmp_path: Path):
    out = tmp_path / "out.onnx"
    result = invoke("prepare", "--target", "rknn", DATA / "torch" / "scatter_reduce_sum_dynamo18.onnx",
                    "--no-validate", "-o", out)
    assert result.exit_code == 0, result.output
    model = onnx.load(out)

    def marks(nodes):
        return [p for n in nodes for p in n.metadata_props if p.key == WRITTEN_FOR]

    assert len(model.graph.node) > 10 and marks(model.graph.node) == []
