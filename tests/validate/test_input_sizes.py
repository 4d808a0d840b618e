"""Generated validation inputs fit the model: symbolic dims get sizes its ops can take (a
convolution front-end's windows, a Reshape to a constant shape, dims two inputs share), grown until
the original runs in onnxruntime, or an error that says what was tried."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto, numpy_helper

from scatter_rewrite.errors import ValidationError
from scatter_rewrite.validate import plan_validation, run_onnxruntime
from scatter_rewrite.validate.trial import OriginalSession
from tests.helpers.models import vi
from tests.helpers.cli import invoke
from tests.helpers.exports import export_arrays

FEATURES = 4
FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


def model_of(nodes, inputs, outputs, initializers=(), opset: int = 17) -> onnx.ModelProto:
    graph = oh.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def conv_front_end(opset: int, scatter: str | None) -> onnx.ModelProto:
    """Wav2Vec2's feature extractor in small: audio [batch, length] -> Conv1d kernel 10 stride 5,
    then four Conv1d kernel 3 stride 2 (each with a Relu); with ``scatter`` (a reduction), a
    ScatterElements of ``updates`` into the features at ``indices`` (both [batch, 4, picks]) along
    the time axis."""
    rng = np.random.default_rng(0)
    initializers = [numpy_helper.from_array(np.array([1], np.int64), "channel_axis")]
    nodes = [oh.make_node("Unsqueeze", ["audio", "channel_axis"], ["x0"])]
    previous, channels = "x0", 1
    for i, (kernel, stride) in enumerate([(10, 5)] + [(3, 2)] * 4):
        weight = rng.standard_normal((FEATURES, channels, kernel)).astype(np.float32)
        initializers.append(numpy_helper.from_array(weight, f"w{i}"))
        nodes += [oh.make_node("Conv", [previous, f"w{i}"], [f"c{i}"], name=f"conv{i}",
                               kernel_shape=[kernel], strides=[stride]),
                  oh.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        previous, channels = f"r{i}", FEATURES
    inputs = [vi("audio", FLOAT, ["batch", "length"])]
    if scatter:
        nodes.append(oh.make_node("ScatterElements", [previous, "indices", "updates"],
                                  ["features"], axis=2, reduction=scatter))
        inputs += [vi("indices", INT64, ["batch", FEATURES, "picks"]),
                   vi("updates", FLOAT, ["batch", FEATURES, "picks"])]
    else:
        nodes.append(oh.make_node("Identity", [previous], ["features"]))
    return model_of(nodes, inputs, [vi("features", FLOAT, ["batch", FEATURES, None])], initializers,
                    opset)


def rewritten(tmp_path, model: onnx.ModelProto, *verb: str):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    result = invoke(*verb, path, "-o", tmp_path / "out.onnx")
    return result, tmp_path / "out.onnx"


def runs_on_its_plan(model: onnx.ModelProto):
    """The plan's inputs, after onnxruntime ran the original on them (it raises if not)."""
    inputs = plan_validation(ir.serde.deserialize_model(model)).inputs
    run_onnxruntime(model.SerializeToString(), inputs)
    return inputs


@pytest.mark.parametrize("verb, scatter", [
    (("lower", "--opset", "13"), None), (("lower", "--opset", "13"), "add"),
    (("upgrade", "--opset", "13"), None), (("upgrade", "--opset", "13"), "none"),
])
@pytest.mark.parametrize("opset", [17, 18])
def test_a_conv_front_end_with_a_dynamic_length_is_validated(tmp_path, verb, scatter, opset):
    """``lower`` lowers the scatter's add and moves the rest; ``upgrade`` moves the model, its
    scatter (reduction none: unique indices along a time axis long enough for them) included."""
    result, out = rewritten(tmp_path, conv_front_end(opset, scatter), *verb)
    assert result.exit_code == 0, result.output
    assert "validation: onnxruntime on the original model" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("PASSED")
    assert {o.version for o in onnx.load(out).opset_import if o.domain == ""} == {13}


def test_the_front_end_gets_audio_its_convolutions_take():
    inputs = runs_on_its_plan(conv_front_end(17, scatter="none"))
    length = inputs["audio"].shape[1]
    for _ in range(4):  # each kernel-3 stride-2 layer's input at least 3 long
        length = (length - 10) // 5 + 1 if _ == 0 else (length - 3) // 2 + 1
        assert length >= 3
    bound = (length - 3) // 2 + 1  # the scatter's time axis
    indices = inputs["indices"]
    assert indices.min() >= -bound and indices.max() < bound
    assert indices.shape[2] <= bound  # room for unique ones
    assert all(len(set(np.mod(row, bound))) == len(row) for row in indices.reshape(-1, indices.shape[2]))


def reshape_to(target: list[int], opset: int = 17) -> onnx.ModelProto:
    """x [n, 6] -> Reshape to the constant ``target`` -> Relu."""
    nodes = [oh.make_node("Reshape", ["x", "target"], ["r"]), oh.make_node("Relu", ["r"], ["y"])]
    target_init = numpy_helper.from_array(np.array(target, np.int64), "target")
    return model_of(nodes, [vi("x", FLOAT, ["n", 6])], [vi("y", FLOAT, [None] * len(target))], [target_init],
                    opset)


@pytest.mark.parametrize("target, rows", [([-1, 5, 6], lambda n: n % 5 == 0),
                                          ([3, 2, 6], lambda n: n == 6),
                                          ([0, 2, 3], lambda n: True),
                                          ([-1, 7, 2], lambda n: n * 6 % 14 == 0)])
def test_a_reshape_to_a_constant_shape_gets_a_count_it_takes(tmp_path, target, rows):
    inputs = runs_on_its_plan(reshape_to(target))
    assert rows(inputs["x"].shape[0]), inputs["x"].shape
    result, _ = rewritten(tmp_path, reshape_to(target), "lower", "--opset", "13")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1].startswith("PASSED")


def test_two_inputs_that_share_a_dim_name_grow_together(tmp_path):
    """The audio and its mask share ``length``: the convolutions need it long, and the mask (which
    multiplies the audio) gets the same."""
    model = conv_front_end(17, scatter=None)
    model.graph.input.append(vi("mask", FLOAT, ["batch", "length"]))
    multiply = oh.make_node("Mul", ["audio", "mask"], ["masked"])
    model.graph.node[0].input[0] = "masked"
    model.graph.node.insert(0, multiply)
    inputs = runs_on_its_plan(model)
    assert inputs["mask"].shape == inputs["audio"].shape and inputs["audio"].shape[1] >= 10
    result, _ = rewritten(tmp_path, model, "lower", "--opset", "13")
    assert result.exit_code == 0, result.output


def test_two_dims_an_add_joins_get_one_size(tmp_path):
    """``a`` [n] and ``b`` [m], added: one size for both, and one that a Reshape of ``a`` to
    [3, -1] takes."""
    nodes = [oh.make_node("Reshape", ["a", "rows"], ["grid"]),
             oh.make_node("Add", ["a", "b"], ["sum"])]
    model = model_of(nodes, [vi("a", FLOAT, ["n"]), vi("b", FLOAT, ["m"])],
                     [vi("grid", FLOAT, [3, None]), vi("sum", FLOAT, [None])],
                     [numpy_helper.from_array(np.array([3, -1], np.int64), "rows")])
    inputs = runs_on_its_plan(model)
    assert inputs["a"].shape == inputs["b"].shape and inputs["a"].shape[0] % 3 == 0
    result, _ = rewritten(tmp_path, model, "lower", "--opset", "13")
    assert result.exit_code == 0, result.output


def window_model(op: str, **attributes) -> onnx.ModelProto:
    """An image [1, 2, h, w] -> ``op`` with a 5x5 window -> itself again (``attributes``). (A
    ConvTranspose with these pads: out = 2 (in - 1) + 5 - 10, at least 1 from in = 4 on; the
    second needs 4, so the image at least 6.)"""
    initializers = [numpy_helper.from_array(np.ones((2, 2, 5, 5), np.float32), "w")]
    weights = ["w"] if op.startswith("Conv") else []
    window = {} if weights else {"kernel_shape": [5, 5]}
    nodes = [oh.make_node(op, ["image", *weights], ["once"], **window, **attributes),
             oh.make_node(op, ["once", *weights], ["twice"], **window, **attributes)]
    return model_of(nodes, [vi("image", FLOAT, [1, 2, "h", "w"])], [vi("twice", FLOAT, [1, 2, None, None])],
                    initializers)


@pytest.mark.parametrize("op, attributes", [
    ("Conv", {"dilations": [3, 2], "strides": [2, 1]}),
    ("Conv", {"pads": [1, 1, 1, 1]}),
    ("MaxPool", {"strides": [2, 2]}),
    ("AveragePool", {"strides": [3, 3], "pads": [0, 1, 0, 1]}),
    ("ConvTranspose", {"strides": [2, 2], "pads": [5, 5, 5, 5], "kernel_shape": [5, 5]}),
])
def test_windows_fit_on_every_spatial_axis(op, attributes):
    inputs = runs_on_its_plan(window_model(op, **attributes))
    assert min(inputs["image"].shape[2:]) > 4


def test_constant_positions_and_sizes_are_found():
    """A Gather of position 9, a Slice of [2:8], a Split into [3, 5] along three dims."""
    positions = numpy_helper.from_array(np.array([9, 1], np.int64), "positions")
    bounds = [numpy_helper.from_array(np.array([v], np.int64), n)
              for v, n in ((2, "start"), (8, "end"), (1, "axis"))]
    split = numpy_helper.from_array(np.array([3, 5], np.int64), "split")
    nodes = [oh.make_node("Gather", ["x", "positions"], ["picked"], axis=0),
             oh.make_node("Slice", ["x", "start", "end", "axis"], ["sliced"]),
             oh.make_node("Split", ["x", "split"], ["p", "q"], axis=2)]
    model = model_of(nodes, [vi("x", FLOAT, ["a", "b", "c"])],
                     [vi(n, FLOAT, [None] * rank) for n, rank in (("picked", 4), ("sliced", 3), ("p", 3), ("q", 3))],
                     [positions, *bounds, split])
    x = runs_on_its_plan(model)["x"]
    assert x.shape[0] >= 10 and x.shape[1] >= 8 and x.shape[2] == 8


def test_sizes_no_run_takes_are_refused_with_what_was_tried(tmp_path):
    """Reshapes of the same input to [6] and to [4]: no size runs; the error names the sizes tried
    and onnxruntime's reason, and the command writes nothing."""
    shapes = [numpy_helper.from_array(np.array([k], np.int64), f"to{k}") for k in (6, 4)]
    nodes = [oh.make_node("Reshape", ["x", "to6"], ["six"]),
             oh.make_node("Reshape", ["x", "to4"], ["four"])]
    model = model_of(nodes, [vi("x", FLOAT, ["n"])], [vi("six", FLOAT, [6]), vi("four", FLOAT, [4])], shapes)
    with pytest.raises(ValidationError) as caught:
        plan_validation(ir.serde.deserialize_model(model))
    message = str(caught.value)
    assert message.startswith("cannot find inputs the original model runs with")
    assert "onnxruntime fails with n=" in message and "Reshape" in message
    assert "(the count it reshapes) needs 4: no input size found for it" in message
    assert ("pass inputs it runs on with inputs= (the proof then uses them), or use "
            "validate=False to skip the proof") in message  # (the API's words)
    result, out = rewritten(tmp_path, model, "lower", "--opset", "13")
    assert result.exit_code == 1 and not out.exists()
    assert "cannot find inputs" in result.output and "Traceback" not in result.output
    assert "pass inputs it runs on with --inputs" in result.output  # (the command line's)


def test_sizes_a_pass_fixed_stay_fixed():
    """``dim_sizes`` (what fix-dims gives a dim) is kept even where the convolutions want more."""
    model = ir.serde.deserialize_model(conv_front_end(17, scatter=None))
    inputs = plan_validation(model, dim_sizes={"length": 400, "batch": 1}).inputs
    assert inputs["audio"].shape == (1, 400)


# ---- transformers' Wav2Vec2Model, tiny, exported (tests/data/whole_models/make_wav2vec2.py) ----

WHOLE_MODELS = Path(__file__).parents[1] / "data" / "whole_models"


@pytest.mark.parametrize("verb", [("lower", "--opset", "13"), ("upgrade", "--opset", "13")])
@pytest.mark.parametrize("name", ["wav2vec2_ts17", "wav2vec2_mask_ts17", "wav2vec2_dynamo18"])
def test_a_wav2vec2_export_is_validated_and_computes_what_pytorch_does(tmp_path, name, verb):
    """Validated on generated inputs its convolutions take (and, with the mask, a mask whose
    ScatterND gets frames in range), and the written model gives PyTorch's outputs."""
    out = tmp_path / "out.onnx"
    result = invoke(*verb, WHOLE_MODELS / f"{name}.onnx", "-o", out)
    assert result.exit_code == 0, result.output
    assert "validation: onnxruntime on the original model" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("PASSED")
    inputs, pytorchs = export_arrays(WHOLE_MODELS, name)
    (hidden,) = run_onnxruntime(out, inputs)
    np.testing.assert_allclose(hidden, pytorchs["last_hidden_state"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("weights", ["external data", "Constant nodes"])
def test_the_trial_run_takes_weights_where_the_model_keeps_them(tmp_path, weights):
    """The original runs in onnxruntime from memory: external weights (given to onnxruntime over
    their memory map) and big Constant nodes (which shape inference gets as dims only) included."""
    rng = np.random.default_rng(0)
    arrays = {"w0": rng.standard_normal((128, 1, 10)).astype(np.float32),
              "w1": rng.standard_normal((4, 128, 3)).astype(np.float32)}
    axis = numpy_helper.from_array(np.array([1], np.int64), "channel_axis")
    nodes = [oh.make_node("Unsqueeze", ["audio", "channel_axis"], ["x"]),
             oh.make_node("Conv", ["x", "w0"], ["c0"], kernel_shape=[10], strides=[5]),
             oh.make_node("Relu", ["c0"], ["r0"]),
             oh.make_node("Conv", ["r0", "w1"], ["y"], kernel_shape=[3], strides=[2])]
    tensors = [numpy_helper.from_array(a, n) for n, a in arrays.items()]
    if weights == "Constant nodes":
        nodes = [oh.make_node("Constant", [], [t.name], value=t) for t in tensors] + nodes
        tensors = []
    model = model_of(nodes, [vi("audio", FLOAT, ["batch", "length"])], [vi("y", FLOAT, ["batch", 4, None])],
                     [axis, *tensors])
    path = tmp_path / "model.onnx"
    onnx.save(model, path, save_as_external_data=weights == "external data",
              all_tensors_to_one_file=True, location="model.weights", size_threshold=1024)
    session = OriginalSession(ir.load(path))
    assert session.refused is None
    assert session.failure({"audio": np.ones((1, 400), np.float32)}) is None
    assert session.failure({"audio": np.ones((1, 8), np.float32)}) is not None
    result = invoke("lower", "--opset", "13", path, "-o", tmp_path / "out" / "out.onnx")
    assert result.exit_code == 0, result.output
    assert "validation: onnxruntime on the original model" in result.stdout


def test_sizes_grow_until_the_original_runs(tmp_path):
    """A convolution over ``Range(n)``, whose length shape inference cannot follow: the sizes
    double until the original runs, and the notes say what failed before."""
    scalars = {"zero": 0, "step": 1, "last": 0}
    initializers = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in scalars.items()]
    initializers += [numpy_helper.from_array(np.array([0, 1], np.int64), "axes"),
                     numpy_helper.from_array(np.ones((1, 1, 12), np.float32), "w")]
    nodes = [oh.make_node("Shape", ["x"], ["shape"]),
             oh.make_node("Gather", ["shape", "last"], ["n"], axis=0),
             oh.make_node("Range", ["zero", "n", "step"], ["positions"]),
             oh.make_node("Cast", ["positions"], ["ramp"], to=TensorProto.FLOAT),
             oh.make_node("Unsqueeze", ["ramp", "axes"], ["signal"]),
             oh.make_node("Conv", ["signal", "w"], ["y"], kernel_shape=[12])]
    model = model_of(nodes, [vi("x", FLOAT, ["n"])], [vi("y", FLOAT, [1, 1, None])], initializers)
    the_plan = plan_validation(ir.serde.deserialize_model(model))
    assert the_plan.inputs["x"].shape == (16,)
    (note,) = [n for n in the_plan.notes if n.startswith("the original runs with")]
    assert note.startswith("the original runs with n=16, not with n=4 (") and "; n=8 (" in note
    result, _ = rewritten(tmp_path, model, "lower", "--opset", "13")
    assert result.exit_code == 0, result.output


def test_the_sizes_the_export_traced_are_the_starting_sizes():
    """An export that declares the size its example had (an output [7, 3] of an input [n, 3]) gets
    that size, where nothing needs another."""
    model = model_of([oh.make_node("Relu", ["x"], ["y"])], [vi("x", FLOAT, ["n", 3])], [vi("y", FLOAT, [7, 3])])
    the_plan = plan_validation(ir.serde.deserialize_model(model))
    assert the_plan.inputs["x"].shape == (7, 3)
    assert "sizes from the model's own shapes: n=7" in the_plan.notes
