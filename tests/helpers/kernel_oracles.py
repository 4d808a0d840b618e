"""Oracles for the evaluator's kernels: one-node models run in onnxruntime and onnx.reference,
plain Python loops that spell out the spec (with onnxruntime's max/min fold), random values, and a
kernel run that proves its inputs untouched (``run_kernel``). The assertions are in equivalence.py."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper
from onnx.reference import ReferenceEvaluator

from tests.helpers.equivalence import assert_same

INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
FLOATS = [np.float32, np.float64]


_INPUT_NAMES = {
    "TensorScatter": ["past_cache", "update", "write_indices"],
}


def _elem_type(a: np.ndarray) -> int:
    if a.dtype.kind in "OUS":
        return onnx.TensorProto.STRING
    return helper.np_dtype_to_tensor_dtype(a.dtype)


def one_node_model(op: str, inputs: list[np.ndarray], opset: int, **attrs) -> onnx.ModelProto:
    names = _INPUT_NAMES.get(op, ["data", "indices", "updates"])[: len(inputs)]
    node = helper.make_node(op, names, ["y"], name="n0", **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, _elem_type(a), a.shape) for n, a in zip(names, inputs)],
        [helper.make_tensor_value_info("y", _elem_type(inputs[0]), None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if opset < 24 else 11
    return model


def _named_inputs(model: onnx.ModelProto, inputs: list[np.ndarray]) -> dict[str, np.ndarray]:
    return {vi.name: (a.astype(object) if a.dtype.kind in "US" else a)
            for vi, a in zip(model.graph.input, inputs)}


def run_ort(op: str, inputs: list[np.ndarray], opset: int = 18, **attrs) -> np.ndarray:
    model = one_node_model(op, inputs, opset, **attrs)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, _named_inputs(model, inputs))[0]


def run_reference(op: str, inputs: list[np.ndarray], opset: int = 18, **attrs) -> np.ndarray:
    model = one_node_model(op, inputs, opset, **attrs)
    return ReferenceEvaluator(model).run(None, _named_inputs(model, inputs))[0]


def run_kernel(kernel, inputs: list[np.ndarray], **attrs) -> np.ndarray:
    """``kernel(*inputs, **attrs)``, asserting it left every input as it was (kernels never mutate)."""
    copies = [a.copy() for a in inputs]
    got = kernel(*inputs, **attrs)
    for a, c in zip(inputs, copies):
        assert_same(a, c)
    return got


def _fold(reduction: str):
    """One step of the reduction, as onnxruntime's CPU kernels compute it."""
    return {
        "none": lambda dst, src: src,
        "add": lambda dst, src: dst + src,
        "mul": lambda dst, src: dst * src,
        "max": lambda dst, src: dst if src < dst else src,
        "min": lambda dst, src: dst if dst < src else src,
    }[reduction]


def loop_scatter_elements(data, indices, updates, axis=0, reduction="none"):
    f = _fold(reduction)
    axis = axis % data.ndim
    out = data.copy()
    for p in np.ndindex(indices.shape):
        t = list(p)
        i = int(indices[p])
        t[axis] = i + data.shape[axis] if i < 0 else i
        t = tuple(t)
        out[t] = f(out[t], updates[p])
    return out


def loop_scatter_nd(data, indices, updates, reduction="none"):
    f = _fold(reduction)
    out = data.copy()
    for p in np.ndindex(indices.shape[:-1]):
        t = tuple(int(i) + data.shape[j] if i < 0 else int(i) for j, i in enumerate(indices[p]))
        if out[t].ndim == 0:
            out[t] = f(out[t], updates[p])
        else:
            view = out[t]
            for q in np.ndindex(view.shape):
                view[q] = f(view[q], updates[p][q])
    return out


# --------------------------------------------------------------------------- shared by the kernel tests


def random_values(rng: np.random.Generator, shape, dtype: np.dtype, special: bool) -> np.ndarray:
    """Random values of ``dtype``; ``special`` mixes in NaN, +-0.0 and +-inf for floats."""
    return np.asarray(_random_values(rng, shape, dtype, special))


def _random_values(rng: np.random.Generator, shape, dtype: np.dtype, special: bool):
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    if dtype.kind in "US":
        return rng.choice(np.array(["", "a", "bc", "xyz", "é"]), shape).astype(dtype.kind)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    values = rng.choice(np.array([-2.5, -1.0, -0.5, 0.5, 1.0, 1.5, 2.0, 3.0]), shape)
    values = values + rng.standard_normal(shape).round(2)
    if special:
        pick = rng.random(shape)
        specials = np.array([np.nan, 0.0, -0.0, np.inf, -np.inf])
        values = np.where(pick < 0.25, rng.choice(specials, shape), values)
    return values.astype(dtype)
