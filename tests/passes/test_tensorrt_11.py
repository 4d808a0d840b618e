"""--trt-version 11 (TensorRT 11.0-11.5; sources in docs/tensorrt-11.md): the opset cap, the
ScatterElements plugin for reductions, TensorScatter left to the parser, ScatterND reductions
lowered."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import scatter_rewrite as sr
from scatter_rewrite.targets.tensorrt.parser import PARSER_MAX_OPSET
from scatter_rewrite.testing import scatter_model
from tests.helpers.models import model_opset, tensor_scatter_model
from tests.helpers.cli import invoke

def _scatters(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node
            if n.op_type.startswith(("Scatter", "TensorScatter"))]


def test_the_model_moves_down_to_the_opset_every_11_x_parses():
    model = scatter_model("ScatterElements", opset=26, reduction="add")
    out, outcome = sr.prepare_for_tensorrt(model, trt_version="11", validate=True,
                                           return_report=True)
    assert PARSER_MAX_OPSET["11"] == 24 and model_opset(out) == 24
    # the reduction runs through the ScatterElements plugin, as on 10: left a ScatterElements(add)
    assert _scatters(out) == ["ScatterElements"] and outcome.status == "PASSED"
    assert not sr.check(out, target="tensorrt-11").blocked


def test_tensor_scatter_is_left_to_the_11_parser_and_lowered_for_10():
    model = tensor_scatter_model()
    on_11, outcome = sr.prepare_for_tensorrt(model, trt_version="11", return_report=True)
    assert _scatters(on_11) == ["TensorScatter"] and outcome.status == "UNCHANGED"
    (finding,) = sr.check(model, target="tensorrt-11").findings
    assert not finding.blocked and any("imports TensorScatter" in n for n in finding.notes)
    assert _scatters(sr.prepare_for_tensorrt(model, trt_version="10")) == ["ScatterND"]
    assert sr.check(model, target="tensorrt-10").blocked


def test_explicit_none_on_scatternd_blocks_10_only():
    model = scatter_model("ScatterND", opset=18, reduction="none", indices_shape=(2, 1),
                          updates_shape=(2, 5))
    assert sr.check(model, target="tensorrt-10").blocked
    assert not sr.check(model, target="tensorrt-11").blocked


def test_scatternd_reductions_are_still_lowered_for_11():
    model = scatter_model("ScatterND", opset=18, reduction="max", indices_shape=(2, 1),
                          updates_shape=(2, 5))
    (finding,) = sr.check(model, target="tensorrt-11").findings
    assert finding.blocked and finding.fix == "scatter-rewrite tensorrt --trt-version 11"
    out = sr.prepare_for_tensorrt(model, trt_version="11", validate=True)
    assert not sr.check(out, target="tensorrt-11").blocked


def test_the_cli_takes_11(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(scatter_model("ScatterElements", opset=18, reduction="add"), path)
    result = invoke("tensorrt", path, "--trt-version", "11")
    assert result.exit_code == 0, result.output
    assert model_opset(onnx.load(tmp_path / "m.tensorrt.onnx")) == 18
    bad = invoke("tensorrt", path, "--trt-version", "12")
    assert bad.exit_code == 2 and "8.6" in bad.stderr and "11" in bad.stderr


@pytest.mark.parametrize("version", ["8.6", "10", "11"])
def test_every_version_has_its_tables(version):
    from scatter_rewrite.targets.tensorrt.parser import PARSER_CASTS, SUPPORTED_TYPES
    from scatter_rewrite.limits import TRT_VERSIONS
    from scatter_rewrite.targets.tensorrt.parser import TOPK_MAX_K
    from scatter_rewrite.verbs import TRT_VERSIONS as DECLARED

    assert TRT_VERSIONS == DECLARED
    for table in (PARSER_MAX_OPSET, TOPK_MAX_K, SUPPORTED_TYPES, PARSER_CASTS):
        assert version in table
    assert np.all([PARSER_MAX_OPSET[v] <= onnx.defs.onnx_opset_version() for v in TRT_VERSIONS])
