"""Running a model in another runtime, each in a venv of its own (tests/runtimes/setup_venvs.sh builds
them; onnx2tf pins onnx, onnxruntime, numpy and tensorflow exactly, so never in the project's venv):
LiteRT through onnx2tf, OpenVINO's CPU plugin, Apache TVM's Relax, MNN. The package's runner
(scatter_rewrite/targets/runtimes.py, the one ``prepare``'s proof in the runtime uses) runs in that
venv as a subprocess and writes the outputs; the test judges them against onnxruntime on the
original model with validation's own comparison.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import onnx
import onnx.compose
import pytest
from onnx import TensorProto, numpy_helper

from scatter_rewrite.targets import get_target
from scatter_rewrite.targets import runtimes
from scatter_rewrite.targets.runtimes import Refused  # (re-exported: the tests catch it)
from scatter_rewrite.validate.comparison import compare
from scatter_rewrite.testing import scatter_model
from scatter_rewrite.validate.engines import run_onnxruntime
from tests.helpers import DATA


# where setup_venvs.sh builds them (its default, or the same variable)
VENVS = Path(os.environ.get("SCATTER_REWRITE_RUNTIME_VENVS", "/work/venvs"))


@dataclasses.dataclass(frozen=True)
class Runtime:
    name: str  # as the targets spell it: litert, openvino, tvm, mnn
    venv: str  # the venv under VENVS (setup_venvs.sh's name)

    @property
    def python(self) -> Path:
        return VENVS / self.venv / "bin" / "python"

    @property
    def declared(self) -> runtimes.Runtime:
        """The target's runtime, as the package declares it (Target.runner)."""
        return get_target(self.name).runner


RUNTIMES = {r.name: r for r in (Runtime("litert", "onnx2tf"), Runtime("openvino", "openvino"),
                                Runtime("tvm", "tvm"), Runtime("mnn", "mnn"))}


def require(name: str) -> Runtime:
    """The runtime, or the test skipped with what builds its venv."""
    runtime = RUNTIMES[name]
    if not (VENVS / runtime.venv / ".requirements").exists():
        pytest.skip(f"no {runtime.venv} venv in {VENVS}: run tests/runtimes/setup_venvs.sh "
                    f"{runtime.venv}")
    return runtime


def run_in(name: str, model: onnx.ModelProto, inputs: dict[str, np.ndarray],
           workdir: Path, options: tuple[str, ...] = ()) -> list[np.ndarray]:
    """``model``'s outputs in the runtime, in the model's order; Refused with its reason.
    ``options``: the runner's own (run_litert.py's ``--onnx2tf-default-layout``, ``--no-onnxsim``)."""
    runtime = require(name)
    workdir.mkdir(parents=True, exist_ok=True)
    model_path = workdir / f"{name}_model.onnx"
    onnx.save(model, model_path)
    try:
        return runtimes.run(runtime.declared, model_path, inputs, runtime.python, workdir,
                            options).outputs
    except runtimes.RunnerFailed as e:
        raise AssertionError(str(e)) from e


def original_outputs(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs of ``model``: what every runtime is judged against."""
    return run_onnxruntime(model.SerializeToString(), inputs)


def disagreement(model: onnx.ModelProto, expected: list[np.ndarray], actual: list[np.ndarray],
                 float_tolerance: bool) -> list[str]:
    """Validation's judgement (exact, or float32's tolerance where a float add/mul reorders sums):
    the outputs that disagree, said; empty when all agree."""
    names = [o.name for o in model.graph.output]
    if len(actual) != len(names):
        return [f"{len(actual)} outputs where the model has {len(names)}"]
    return compare(names, expected, actual, float_tolerance)[1]


Case = tuple[onnx.ModelProto, dict[str, np.ndarray]]

# The committed real exports (GNN aggregations, point-cloud/BEV pooling, MoE routing, index_add) that
# hold a scatter, by "<folder>/<name>" under tests/data (tests.helpers.exports.load_export loads one);
# not the float16 ones, nor this one, which onnxruntime does not load (TorchScript declared a wrong
# shape: test_torchscript_shapes.py).
UNLOADABLE = {"torch/scatter_amax_feeds_add_ts18"}
# Not torchvision's RoI heads (tests/data/torchvision), about RoiAlign's opset moves: none of the
# four runtimes runs them as exported, for their RoiAlign and its level arithmetic, not their
# scatter (measured: onnx2tf 1.29.24 refuses the dynamo exports and its RoiAlign comes out with the
# width as channels, TVM 0.27 "no value in Constant", MNN 3.6.1 crashes, SIGSEGV).
EXPORTS = sorted(name for p in DATA.glob("torch*/*.onnx")
                 if (name := str(p.relative_to(DATA).with_suffix(""))) not in UNLOADABLE
                 and not name.startswith("torchvision/")
                 and any(n.op_type.startswith("Scatter") for n in onnx.load(p).graph.node)
                 and "fp16" not in p.name)
REDUCTIONS = ("none", "add", "mul", "max", "min")

# TorchScript's BEV index_put_(accumulate=True) (make.py's BevIndexPut, a 4 x 5 grid): a ScatterND
# without reduction into zeros whose 24 points repeat cells, so which write lands is not defined
# (OpenVINO's order varies run to run). Fed points that share a cell the same features, every
# order gives one result, and the runtimes are compared on it.
BEV_REPEATS_CELLS = {f"torch_repair/bev_index_put_ts{opset}" for opset in (11, 13, 16, 17)}


def one_feature_row_per_cell(inputs: dict) -> dict:
    """The BEV export's inputs with every point of a cell given the features of its first."""
    one = np.float32(1.0)
    unit = (np.clip(inputs["points"], -one, np.float32(0.999)) + one) / np.float32(2.0)
    cells = ((unit[:, 1] * np.float32(4)).astype(np.int64) * 5
             + (unit[:, 0] * np.float32(5)).astype(np.int64))
    _, first = np.unique(cells, return_inverse=True)
    leaders = {cell: inputs["feats"][np.flatnonzero(first == cell)[0]] for cell in set(first)}
    return {**inputs, "feats": np.stack([leaders[cell] for cell in first])}


def _indices(rng: np.random.Generator, reduction: str, rows: int, shape: tuple[int, ...],
             axis: int) -> np.ndarray:
    """In range, repeated for a reduction; unique along ``axis`` for none (the scatter contract)."""
    if reduction != "none":
        return rng.integers(0, rows, shape).astype(np.int64)
    moved = (shape[axis],) + shape[:axis] + shape[axis + 1:]
    unique = np.stack([rng.permutation(rows)[:moved[0]]
                       for _ in range(int(np.prod(moved[1:])))], axis=-1)
    return np.moveaxis(unique.reshape(moved), 0, axis).astype(np.int64)


def scatter_cases(seed: int = 0) -> dict[str, Case]:
    """Scatter models at opset 18 with inputs respecting their contracts: ScatterElements on each
    axis and ScatterND, with every reduction; int32 and negative indices; int64 data; indices as
    initializers."""
    rng = np.random.default_rng(seed)
    cases: dict[str, Case] = {}

    def floats(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    for reduction in REDUCTIONS:
        for axis in (0, 1):
            shape = (3, 4) if axis else (3 if reduction == "none" else 6, 5)
            model = scatter_model("ScatterElements", data_shape=(4, 5), indices_shape=shape,
                                  reduction=reduction, axis=axis)
            cases[f"elements_{reduction}_axis{axis}"] = (model, {
                "data": floats(4, 5), "indices": _indices(rng, reduction, (4, 5)[axis], shape, axis),
                "updates": floats(*shape)})
        model = scatter_model("ScatterND", data_shape=(4, 5), indices_shape=(3 if reduction ==
                              "none" else 6, 1), updates_shape=(3 if reduction == "none" else 6, 5),
                              reduction=reduction)
        n = 3 if reduction == "none" else 6
        cases[f"nd_{reduction}"] = (model, {"data": floats(4, 5),
                                            "indices": _indices(rng, reduction, 4, (n, 1), 0),
                                            "updates": floats(n, 5)})
    model = scatter_model("ScatterElements", data_shape=(4, 5), indices_shape=(6, 5),
                          indices_type=TensorProto.INT32, reduction="add")
    cases["elements_add_int32_negative"] = (model, {
        "data": floats(4, 5), "indices": rng.integers(-4, 4, (6, 5)).astype(np.int32),
        "updates": floats(6, 5)})
    model = scatter_model("ScatterElements", data_shape=(4, 5), indices_shape=(6, 5),
                          data_type=TensorProto.INT64, reduction="max")
    cases["elements_max_int64"] = (model, {
        "data": rng.integers(-9, 9, (4, 5)), "indices": rng.integers(0, 4, (6, 5)),
        "updates": rng.integers(-9, 9, (6, 5))})
    for name in ("elements_add_axis0", "nd_max"):
        cases[f"{name}_constant_indices"] = constant_indices(*cases[name])
    return cases


def rank_3_and_4_cases(seed: int = 0) -> dict[str, Case]:
    """Scatters into rank-3 and rank-4 data (what onnx2tf's default mode makes channels-last):
    ScatterElements on every axis and ScatterND with 1- and 2-tuples (2-D and 3-D indices), none,
    add and max, the indices as inputs (and as initializers for none and add). Every dimension
    differs from the next, so that a layout mistake shows; no rank-4 input has 3 channels (onnx2tf
    would download calibration images for it)."""
    rng = np.random.default_rng(seed)
    cases: dict[str, Case] = {}

    def floats(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    for data_shape in ((3, 4, 5), (2, 4, 5, 6)):
        rank = len(data_shape)
        for reduction in ("none", "add", "max"):
            for axis in range(rank):
                shape = list(data_shape)
                shape[axis] += -1 if reduction == "none" else 2
                model = scatter_model("ScatterElements", data_shape=data_shape,
                                      indices_shape=shape, reduction=reduction, axis=axis)
                cases[f"elements{rank}_{reduction}_axis{axis}"] = (model, {
                    "data": floats(*data_shape),
                    "indices": _indices(rng, reduction, data_shape[axis], tuple(shape), axis),
                    "updates": floats(*shape)})
            for k, lead in ((1, (2,) if reduction == "none" else (7,)), (2, (7,)), (2, (2, 3))):
                rows = int(np.prod(data_shape[:k]))
                flat = (rng.permutation(rows)[:int(np.prod(lead))] if reduction == "none"
                        else rng.integers(0, rows, int(np.prod(lead))))
                indices = np.stack(np.unravel_index(flat, data_shape[:k]), -1).reshape(*lead, k)
                updates = lead + data_shape[k:]
                model = scatter_model("ScatterND", data_shape=data_shape, indices_shape=lead + (k,),
                                      updates_shape=updates, reduction=reduction)
                cases[f"nd{rank}_{reduction}_{k}of{len(lead) + 1}d"] = (model, {
                    "data": floats(*data_shape), "indices": indices.astype(np.int64),
                    "updates": floats(*updates)})
    for name in [n for n in cases if "_max" not in n]:
        cases[f"{name}_constant_indices"] = constant_indices(*cases[name])
    return cases


def constant_indices(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> Case:
    """The same model with its ``indices`` input made an initializer of the given values."""
    constant = onnx.ModelProto()
    constant.CopyFrom(model)
    kept = [i for i in constant.graph.input if i.name != "indices"]
    del constant.graph.input[:]
    constant.graph.input.extend(kept)
    constant.graph.initializer.append(numpy_helper.from_array(inputs["indices"], "indices"))
    return constant, {k: v for k, v in inputs.items() if k != "indices"}


def signed_zeros_and_nan(nan: bool) -> Case:
    """Float max and min, ScatterElements and ScatterND, indices as inputs, repeated, values among
    -0.0, +0.0, -1, 1 (and NaN): the results depend on the order the updates are applied in."""
    rng = np.random.default_rng(3)
    pool = np.array([0.0, -0.0, 1.0, -1.0] + [np.nan] * nan, np.float32)
    cases = {}
    for reduction in ("max", "min"):
        for op, indices in (("ScatterElements", (12, 5)), ("ScatterND", (12, 1))):
            model = scatter_model(op, data_shape=(4, 5), indices_shape=indices,
                                  updates_shape=(12, 5), reduction=reduction)
            cases[f"{op}_{reduction}"] = (model, {
                "data": rng.choice(pool, (4, 5)), "indices": rng.integers(0, 4, indices),
                "updates": rng.choice(pool, (12, 5))})
    return combined(cases)


def combined(cases: dict[str, Case]) -> Case:
    """One model running every case side by side (names prefixed by the case's): one runtime call
    instead of one per case."""
    merged, inputs = None, {}
    for name, (model, feeds) in cases.items():
        prefixed = onnx.compose.add_prefix(model, f"{name}__")
        inputs.update({f"{name}__{k}": v for k, v in feeds.items()})
        if merged is None:
            merged = prefixed
            continue
        graph = merged.graph
        graph.node.extend(prefixed.graph.node)
        graph.input.extend(prefixed.graph.input)
        graph.output.extend(prefixed.graph.output)
        graph.initializer.extend(prefixed.graph.initializer)
    return merged, inputs


def sums_floats(model: onnx.ModelProto) -> bool:
    """Whether a scatter of ``model`` adds or multiplies floats (its result may then differ by the
    order of the sums: judged within float tolerance, everything else bit for bit)."""
    floats = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE}
    types = {v.name: v.type.tensor_type.elem_type for v in model.graph.input}
    types.update({t.name: t.data_type for t in model.graph.initializer})
    return any(attribute.name == "reduction" and attribute.s in (b"add", b"mul")
               and types.get(node.input[0]) in floats
               for node in model.graph.node for attribute in node.attribute)
