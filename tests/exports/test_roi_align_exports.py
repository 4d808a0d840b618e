"""torchvision's RoI pooling exported for real (tests/data/torchvision/make_roi_heads.py) moved down.

``MultiScaleRoIAlign`` (Mask R-CNN's RoI heads; TorchScript at opsets 16 and 17, dynamo at 18 and
20): one RoiAlign per level with coordinate_transformation_mode="output_half_pixel" (aligned=False),
which RoiAlign-10 computes (the move drops the attribute), the level mapping, and the levels merged by
ScatterElements/ScatterND without reduction. ``lower --opset 13`` and ``--opset 11`` pass and the
result equals PyTorch within float tolerance: rtol=1e-5, atol=1e-5 (RoiAlign's bilinear sums are
PyTorch's and onnxruntime's own loops: bit for bit on the machine that made the exports,
within a few ulps where a build fuses a multiply-add).

``RoIAlign(aligned=True)`` writes coordinate_transformation_mode="half_pixel": refused below opset 16.
Shifting the rois by 0.5 / spatial_scale is not a form of it: RoiAlign-10 widens a roi under one
feature pixel to one pixel, half_pixel does not (the last test shows the difference)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import scatter_rewrite
from tests.helpers.cli import invoke
from tests.helpers.exports import export_arrays
from tests.helpers.models import model_opset, op_types
from tests.helpers.runs import ort_run

DATA = Path(__file__).parents[1] / "data" / "torchvision"
WAYS = ("ts16", "ts17", "dynamo18", "dynamo20")
MULTISCALE = [f"multiscale_roi_align_{way}" for way in WAYS]
ALIGNED = [f"roi_align_aligned_{way}" for way in WAYS]
RTOL = ATOL = 1e-5


def _transformation_mode(node: onnx.NodeProto) -> str | None:
    return next((oh.get_attribute_value(a).decode() for a in node.attribute
                 if a.name == "coordinate_transformation_mode"), None)


def _roi_aligns(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == "RoiAlign"]


def _assert_pools_as_pytorch(path: Path, name: str) -> None:
    feeds, pytorchs = export_arrays(DATA, name)
    got = ort_run(path, feeds)[0]
    assert got.shape == pytorchs["y"].shape
    np.testing.assert_allclose(got, pytorchs["y"], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("opset", [13, 11])
@pytest.mark.parametrize("name", MULTISCALE)
def test_lower_moves_multiscale_roi_align_and_gives_pytorchs_outputs(tmp_path, name, opset):
    out = tmp_path / f"{name}.onnx"
    result = invoke("lower", DATA / f"{name}.onnx", "--opset", str(opset), "-o", out)
    assert result.exit_code == 0, result.output
    assert "PASSED" in result.output
    model = onnx.load(out)
    assert model_opset(model) == opset
    roi_aligns = _roi_aligns(model)
    assert len(roi_aligns) == 2 and all(_transformation_mode(n) is None for n in roi_aligns)
    _assert_pools_as_pytorch(out, name)


def test_lower_11_unvalidated_gives_pytorchs_outputs(tmp_path):
    name = "multiscale_roi_align_dynamo20"
    lowered = scatter_rewrite.lower(onnx.load(DATA / f"{name}.onnx"), opset=11, validate=False)
    assert model_opset(lowered) == 11
    out = tmp_path / f"{name}.onnx"
    onnx.save(lowered, out)
    _assert_pools_as_pytorch(out, name)


@pytest.mark.parametrize("name", MULTISCALE)
def test_the_exports_hold_output_half_pixel_roi_aligns_per_level_and_a_merge(name):
    """(So that the tests above move what they are about: a RoiAlign-16 with the attribute, two
    levels, and the scatter that merges them.)"""
    model = onnx.load(DATA / f"{name}.onnx")
    assert model_opset(model) >= 16
    roi_aligns = _roi_aligns(model)
    assert [_transformation_mode(n) for n in roi_aligns] == ["output_half_pixel"] * 2
    scales = sorted(oh.get_attribute_value(a) for n in roi_aligns for a in n.attribute
                    if a.name == "spatial_scale")
    assert scales == [0.125, 0.25]
    ops = set(op_types(model))
    assert {"Log", "Floor"} <= ops and ops & {"ScatterElements", "ScatterND"}
    # the committed boxes reach both levels (torchvision's LevelMapper: level 3 from a box's
    # sqrt(area) of 224 / 2), and each row of PyTorch's output is pooled
    feeds, pytorchs = export_arrays(DATA, name)
    boxes = np.concatenate([feeds["boxes0"], feeds["boxes1"]])
    sides = np.sqrt((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]))
    assert (sides >= 112).any() and (sides < 112).any()
    assert np.all(np.abs(pytorchs["y"]).reshape(len(boxes), -1).max(axis=1) > 0)


@pytest.mark.parametrize("opset", [13, 11])
@pytest.mark.parametrize("name", ALIGNED[::3])
def test_lower_refuses_half_pixel_naming_the_node_and_the_mode(tmp_path, name, opset):
    node = _roi_aligns(onnx.load(DATA / f"{name}.onnx"))[0]
    assert _transformation_mode(node) == "half_pixel"
    out = tmp_path / f"{name}.onnx"
    result = invoke("lower", DATA / f"{name}.onnx", "--opset", str(opset), "-o", out)
    assert result.exit_code == 1 and not out.exists(), result.output
    assert f"RoiAlign '{node.name}'" in result.stderr
    assert "'half_pixel'" in result.stderr


def test_shifted_rois_are_no_form_of_half_pixel_under_one_feature_pixel():
    """RoiAlign-10 on rois shifted by -0.5 / spatial_scale computes half_pixel for a roi of at least
    one feature pixel, not for a smaller one (which RoiAlign-10 widens to one pixel)."""
    model = onnx.load(DATA / "roi_align_aligned_ts16.onnx")
    node = _roi_aligns(model)[0]
    scale = next(oh.get_attribute_value(a) for a in node.attribute if a.name == "spatial_scale")
    kept = [a for a in node.attribute if a.name != "coordinate_transformation_mode"]
    x = export_arrays(DATA, "roi_align_aligned_ts16")[0]["p2"][:1]

    def one_node(opset, attributes):
        made = oh.make_node("RoiAlign", ["x", "rois", "batch"], ["y"])
        made.attribute.extend(attributes)
        graph = oh.make_graph([made], "g", [oh.make_tensor_value_info("x", 1, list(x.shape)),
                                            oh.make_tensor_value_info("rois", 1, [1, 4]),
                                            oh.make_tensor_value_info("batch", 7, [1])],
                              [oh.make_tensor_value_info("y", 1, None)])
        return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])

    half_pixel, ten = one_node(16, node.attribute), one_node(10, kept)
    differences = []
    for box in ([1.0, 2.0, 20.0, 18.0], [10.0, 10.0, 11.0, 13.0]):  # 4.75 and 0.25 feature pixels wide
        rois = np.array([box], np.float32)
        args = {"x": x, "batch": np.zeros(1, np.int64)}
        want = ort_run(half_pixel, args | {"rois": rois})[0]
        got = ort_run(ten, args | {"rois": rois - 0.5 / scale})[0]
        differences.append(float(np.abs(got - want).max()))
    assert differences[0] <= 1e-5 and differences[1] > 0.01, differences
