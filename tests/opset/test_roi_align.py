"""RoiAlign-16 moved to opsets 11-15: with coordinate_transformation_mode="output_half_pixel" it is
RoiAlign-10 (the move drops the attribute; outputs bit for bit); "half_pixel" is refused, naming
the mode."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as h
import onnxruntime as ort
import pytest

import scatter_rewrite


def _roi_align(mode: str) -> onnx.ModelProto:
    node = h.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], name="roi_heads",
                       coordinate_transformation_mode=mode, output_height=2, output_width=3,
                       spatial_scale=0.5, sampling_ratio=2)
    graph = h.make_graph(
        [node], "g",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3, 8, 8]),
         h.make_tensor_value_info("rois", onnx.TensorProto.FLOAT, [3, 4]),
         h.make_tensor_value_info("batch", onnx.TensorProto.INT64, [3])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3, 3, 2, 3])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 16)])


@pytest.mark.parametrize("opset", [11, 13, 15])
def test_output_half_pixel_moves_as_roi_align_10_bit_for_bit(opset):
    model = _roi_align("output_half_pixel")
    moved = scatter_rewrite.lower(model, opset=opset, validate=False)
    node = moved.graph.node[0]
    assert node.op_type == "RoiAlign"
    assert "coordinate_transformation_mode" not in {a.name for a in node.attribute}
    assert next(o.version for o in moved.opset_import if o.domain == "") == opset
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32),
             "rois": np.array([[0, 0, 10, 10], [2.5, 3, 9, 12.25], [1, 1, 4, 5]], np.float32),
             "batch": np.array([0, 1, 1], np.int64)}
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    got = ort.InferenceSession(moved.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)


def test_half_pixel_is_refused_naming_the_mode():
    with pytest.raises(scatter_rewrite.ScatterRewriteError, match="'half_pixel'"):
        scatter_rewrite.lower(_roi_align("half_pixel"), opset=13, validate=False)
