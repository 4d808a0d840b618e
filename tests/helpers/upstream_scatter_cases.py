"""The scatter cases of onnxruntime's, PyTorch's and ONNX's own tests, as data, each on each of its data types.

Sources (each case names its file and test):

* onnxruntime ``onnxruntime/test/providers/cpu/tensor/scatter_op_test.cc``: ``RunTestWrapper``'s 20
  shapes, each run as ``Scatter`` (opset 9) and ``ScatterElements`` (opset 11) for the 11 types
  its typed tests list (``TEST(Scatter, int8_t)`` ... ``TEST(Scatter, MLFloat16)``). Upstream
  draws the indices from ``std::rand`` seeded by the time; here they are drawn from a seed fixed
  per shape by the same rule (an index in [-n, n) on the axis; a position written twice gets the
  same value both times), and the expected output is computed by that rule, in plain Python. The
  explicit tests (BoolInputWithAxis, the add/mul/max/min reductions) as written; the two that
  expect a failure (IndicesUpdatesDontMatch, InvalidIndex) are left out.
* onnxruntime ``scatter_nd_op_test.cc``: every ``OpTester`` of the ScatterND tests (one case per
  ``OpTester``), as written; ``ScatterND_nonempty_indices_reject_indexed_zero_dimension`` calls a
  shape check, not the op, and is left out.
* PyTorch ``test/test_scatter_gather_ops.py``: the one scatter test with explicit values that ONNX
  expresses as written, ``test_scatter_add_mult_index_base`` (``scatter_add_`` on dims 0 and 1 of
  zeros [30, 40], every index 0, ones: ScatterElements(reduction="add")). The others draw their
  inputs at random (``_test_scatter_base``); the amax/amin NaN/inf checks use ``include_self=False``
  or propagate NaN as PyTorch does, and its empty-index check has indices of another rank than the
  data, which ScatterElements does not take: left out.
* ONNX: ``onnx.backend.test.case.node.collect_testcases()``, every case whose node is a Scatter,
  ScatterElements, ScatterND or TensorScatter, its first data set.

Every case also runs on INT16, UINT8, UINT16 and UINT32 data (the types TensorRT's scatter lacks
and ``scatter-rewrite tensorrt`` writes through a wider integer), its values cast, unless it is
upstream's already: a value that does not fit the type (a fraction like 0.1, a negative value for
an unsigned type, a value past the type's range, in data, updates or the expected output) drops
that (case, type) pair rather than being wrapped or rounded. Strings are never retyped.

The set: 626 (case, data type) pairs (``all_cases()``): 443 from scatter_op_test.cc, 114 from
scatter_nd_op_test.cc, 10 from PyTorch's, 59 from ONNX's; by type INT16 77, UINT8 72, UINT16 73,
UINT32 73, FLOAT 75, FLOAT16 45, INT64 44, DOUBLE 41, INT32 38, UINT64 38, INT8 33, STRING 10,
BFLOAT16 4, BOOL 3
(``tests/passes/test_tensorrt_case_set.py`` asserts the total and the four retyped counts).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import onnx
from onnx import TensorProto, helper

__all__ = ["all_cases", "Case", "RETYPED", "by_type"]

ORT_SCATTER = "onnxruntime/test/providers/cpu/tensor/scatter_op_test.cc"
ORT_SCATTER_ND = "onnxruntime/test/providers/cpu/tensor/scatter_nd_op_test.cc"
ONNX_BACKEND = "onnx.backend.test.case.node"
TORCH_SCATTER = "pytorch test/test_scatter_gather_ops.py"
RETYPED = ("INT16", "UINT8", "UINT16", "UINT32")
SCATTER_OPS = ("Scatter", "ScatterElements", "ScatterND", "TensorScatter")


@dataclasses.dataclass(frozen=True)
class Case:
    """One scatter case on one data type: the model, its inputs in graph-input order, and the
    output the upstream test expects."""

    source: str  # file and test name
    dtype: str  # TensorProto name of the data
    upstream_type: bool  # whether the upstream test itself runs this type (else retyped here)
    model: onnx.ModelProto
    inputs: tuple
    expected: np.ndarray

    @property
    def op(self) -> str:
        (node,) = [n for n in self.model.graph.node if n.op_type in SCATTER_OPS]
        return node.op_type

    @property
    def reduction(self) -> str:
        (node,) = [n for n in self.model.graph.node if n.op_type in SCATTER_OPS]
        return next((a.s.decode() for a in node.attribute if a.name == "reduction"), "none")


def _np_type(name: str):
    return object if name == "STRING" else helper.tensor_dtype_to_np_dtype(TensorProto.DataType.Value(name))


def _fits(values: np.ndarray, name: str) -> bool:
    """Whether every value is one of type ``name`` exactly (for retyping)."""
    if name in ("FLOAT", "DOUBLE", "FLOAT16", "BFLOAT16", "STRING") or values.size == 0:
        return name != "STRING" or values.dtype == object
    if name == "BOOL":
        return bool(np.isin(values.astype(np.float64), (0, 1)).all())
    as_float = values.astype(np.float64)
    info = np.iinfo(_np_type(name))
    return bool((as_float == np.round(as_float)).all() and (as_float >= info.min).all()
                and (as_float <= info.max).all())


def _cast(values: np.ndarray, name: str) -> np.ndarray:
    if name == "STRING":
        return np.asarray(values, dtype=object)
    return np.asarray(values).astype(np.float64 if values.dtype == object else values.dtype).astype(_np_type(name))


# ---- onnxruntime scatter_op_test.cc: RunTestWrapper (shape, indices shape, axis or None, index type)
_WRAPPER_SHAPES = (
    ((2, 3), (1, 2), None, "INT32"), ((2, 2), (2, 2), 1, "INT32"), ((2, 2), (2, 2), -1, "INT64"),
    ((2, 2, 2), (1, 2, 1), 1, "INT32"), ((2, 2, 2), (1, 2, 1), 2, "INT64"),
    ((3, 3), (3, 2), 1, "INT32"), ((3, 3), (3, 2), None, "INT64"), ((3,), (2,), 0, "INT32"),
    ((2, 2, 2), (2, 2, 2), None, "INT32"), ((2, 2, 2), (3, 2, 2), 0, "INT64"),
    ((2, 2, 2, 3), (3, 2, 2, 2), 0, "INT32"), ((2, 2, 3, 3, 2), (2, 2, 3, 2, 2), None, "INT64"),
    ((2, 2, 1, 3, 1), (2, 2, 1, 2, 1), None, "INT32"), ((2, 3, 2), (2, 3, 2), -2, "INT64"),
    ((2, 2, 2), (2, 2, 3), 2, "INT64"), ((2, 2, 3, 2), (2, 2, 2, 3), -1, "INT32"),
    ((2, 1, 2, 3, 1, 2), (2, 1, 2, 2, 1, 2), 5, "INT64"),
    ((2, 1, 2, 2, 3, 2, 2), (2, 1, 2, 3, 2, 2, 2), 3, "INT32"),
    ((2, 1, 1, 2, 3, 2, 3), (2, 1, 1, 2, 3, 2, 2), -5, "INT64"),
)
# TEST(Scatter, int8_t) ... TEST(Scatter, MLFloat16)
_WRAPPER_TYPES = ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "FLOAT",
                  "DOUBLE", "FLOAT16")


def _wrapper_case(seed: int, shape, indices_shape, axis):
    """RunTest's data, indices, updates and expected output (in float64; typed later)."""
    data = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) * 2  # ValueRange(0, 2)
    updates = (np.arange(np.prod(indices_shape), dtype=np.float64) * 2 + 1).reshape(indices_shape)
    n = shape[axis or 0]
    rng = np.random.default_rng(seed)
    indices = rng.integers(-n, n, size=indices_shape)
    out = data.copy()
    for position in np.ndindex(*indices_shape):
        target = list(position)
        target[axis or 0] = int(indices[position]) % n
        target = tuple(target)
        if out[target] != data[target]:
            updates[position] = out[target]
        else:
            out[target] = updates[position]
    return data, indices, updates, out


def _raw_ort_cases():
    """(source, op, opset, attributes, upstream types, data, indices (values, type), updates,
    expected), values as nested lists or arrays."""
    for seed, (shape, ishape, axis, itype) in enumerate(_WRAPPER_SHAPES):
        data, indices, updates, out = _wrapper_case(seed, shape, ishape, axis)
        attrs = {} if axis is None else {"axis": axis}
        label = f"RunTestWrapper RunTest({list(shape)}, {list(ishape)}, axis={axis}, {itype})"
        for op, opset in (("Scatter", 9), ("ScatterElements", 11)):
            yield (f"{ORT_SCATTER} {label} {op}", op, opset, attrs, _WRAPPER_TYPES, data,
                   (indices, itype), updates, out)
    bools = ([1, 5], [0, 0, 0, 1, 0]), ([1, 2], [1, 3], "INT64"), ([1, 2], [1, 0]), ([1, 5], [0, 1, 0, 0, 0])
    for op, opset in (("Scatter", 9), ("ScatterElements", 11)):
        yield (f"{ORT_SCATTER} BoolInputWithAxis {op}", op, opset, {"axis": 1}, ("BOOL",), *_arrays(*bools))
    neg = [-9, -4, -1, -7, -3, -6]
    pos = [9, 4, 1, 7, 3, 6]
    explicit = (
        ("AddReduction", 0, "add", ("FLOAT",), neg, _ones(4, 3), ([4, 3], [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]),
         [-9, -4, -1, 3, 7, 4]),
        ("AddReductionAxis1", 1, "add", ("FLOAT",), pos, _ones(2, 4), ([2, 4], [2, 5, 3, 6, 7, 9, 8, 10]),
         [9, 20, 1, 7, 37, 6]),
        ("MulReduction", 0, "mul", ("FLOAT",), neg, _ones(2, 3), ([2, 3], [7, 3, 6, 7, 3, 6]),
         [-9, -4, -1, -343, -27, -216]),
        ("MulReductionAxis1", 1, "mul", ("FLOAT",), pos, _ones(2, 4), ([2, 4], [2, 3, 4, 5, 6, 7, 8, 9]),
         [9, 480, 1, 7, 9072, 6]),
        ("MaxReduction", 0, "max", ("FLOAT16", "FLOAT", "DOUBLE"), neg, _ones(2, 3),
         ([2, 3], [1, 5, 3, 7, 3, 6]), [-9, -4, -1, 7, 5, 6]),
        ("MinReduction", 0, "min", ("FLOAT16", "FLOAT", "DOUBLE"), [-9, -4, -1, 8, -3, 5], _ones(2, 3),
         ([2, 3], [1, 5, 3, 7, 3, 6]), [-9, -4, -1, 1, -3, 3]),
    )
    for name, axis, reduction, types, data, indices, updates, out in explicit:
        # MaxReduction_MLFloat16/_Float/_Double (and Min) are one case on three types
        yield (f"{ORT_SCATTER} ScatterElements {name}", "ScatterElements", 18,
               {"axis": axis, "reduction": reduction}, types,
               *_arrays(([2, 3], data), indices, updates, ([2, 3], out)))
    yield from _raw_ort_nd_cases()
    for dim in (0, 1):
        out = np.zeros((30, 40))
        out[(0, slice(None)) if dim == 0 else (slice(None), 0)] = 30 if dim == 0 else 40
        yield (f"{TORCH_SCATTER} test_scatter_add_mult_index_base dim={dim}", "ScatterElements", 18,
               {"axis": dim, "reduction": "add"}, ("FLOAT",), np.zeros((30, 40)),
               (np.zeros((30, 40), np.int64), "INT64"), np.ones((30, 40)), out)


def _ones(*shape):
    """Indices all 1, INT64, of ``shape``."""
    return [*shape], [1] * int(np.prod(shape)), "INT64"


def _arrays(data, indices, updates, expected):
    def arr(shape, values):
        return np.asarray(values, dtype=object if values and isinstance(values[0], str) else np.float64).reshape(shape)

    return arr(*data), (np.asarray(indices[1], dtype=np.int64).reshape(indices[0]), indices[2]), arr(*updates), arr(*expected)


def _nd(name, types, data, indices, updates, expected, opset=11, reduction=None):
    attrs = {} if reduction is None else {"reduction": reduction}
    return (f"{ORT_SCATTER_ND} {name}", "ScatterND", opset, attrs, types,
            *_arrays(data, (*indices, "INT64"), updates, expected))


def _raw_ort_nd_cases():
    s, i8 = ("STRING",), list(range(8))
    half = ("FLOAT16", "BFLOAT16")
    slices = {"add": (11, 5), "mul": (16, 4), "min": (1, 1), "max": (8, 4)}
    for reduction, (first, second) in slices.items():
        # ScatterND_18_<reduction>_MLFloat16 and _BFloat16: one case on two types
        yield _nd(f"ScatterND_18_{reduction}_MLFloat16/BFloat16", half, ([2, 2, 3], [1] * 12),
                  ([3, 1], [0, 1, 0]), ([3, 2, 3], [2] * 6 + [4] * 6 + [8] * 6),
                  ([2, 2, 3], [first] * 6 + [second] * 6), 18, reduction)
    yield _nd("ScatterND_18_add_MLFloat16_RoundsAfterEachUpdate", ("FLOAT16",), ([2, 1], [1024, 0]),
              ([8, 1], [0] * 8), ([8, 1], [0.25] * 8), ([2, 1], [1024, 0]), 18, "add")
    yield _nd("ScatterND_scaler_string_int64 test1", s, ([2, 2], ["h", "h", "o", "z"]), ([2], [0, 1]),
              ([], ["k"]), ([2, 2], ["h", "k", "o", "z"]))
    yield _nd("ScatterND_scaler_string_int64 test2", s, ([6], list("hkoolt")), ([1], [3]), ([], ["z"]),
              ([6], list("hkozlt")))
    yield _nd("ScatterND_scaler_string_int64 test3", s, ([3, 2], list("hkozlz")), ([2], [2, 1]),
              ([], ["t"]), ([3, 2], list("hkozlt")))
    for suffix, idx in (("", [0, 0, 1, 1]), ("_neg_indices", [0, 0, -1, -1])):
        yield _nd(f"ScatterND_matrice_int64_int64{suffix}", ("INT64",), ([2, 2], [1, 1, 2, 2]),
                  ([2, 2], idx), ([2], [0, 3]), ([2, 2], [0, 1, 2, 3]))
    words = ["egg", "dance", "bob", "air", "smart", "terry", "laugh", "kite"]
    grid = ["egg", "", "air", "", "terry", "smart", "laugh", "", "hop"]
    for suffix, idx1, idx2 in (("", [0, 1, 1, 0], [2, 1, 1, 0, 0, 1]),
                               ("_neg_indices", [0, -1, -1, 0], [-1, -2, 1, 0, 0, -2])):
        yield _nd(f"ScatterND_matrice_string_int64{suffix} test1", s, ([2, 2, 2], words), ([2, 1, 2], idx1),
                  ([2, 1, 2], ["air", "bob", "terry", "smart"]),
                  ([2, 2, 2], ["egg", "dance", "air", "bob", "terry", "smart", "laugh", "kite"]))
        yield _nd(f"ScatterND_matrice_string_int64{suffix} test2", s, ([3, 3], grid), ([3, 2], idx2),
                  ([3], ["kite", "bob", "dance"]),
                  ([3, 3], ["egg", "dance", "air", "bob", "terry", "smart", "laugh", "kite", "hop"]))
    for name, types in (("float", ("FLOAT",)), ("double", ("DOUBLE",))):
        yield _nd(f"ScatterND_slice_{name}_int64_t", types, ([2, 2], [0, 0.1, 0.1, 0.1]), ([2, 1], [1, 0]),
                  ([2, 2], [0.2, 0.3, 0, 0.1]), ([2, 2], [0, 0.1, 0.2, 0.3]))
    yield _nd("ScatterND_3tensor_int64 test1", ("INT64",), ([2, 2, 2], [0, 1, 1, 1, 1, 1, 6, 7]),
              ([2, 2], [0, 1, -1, 0]), ([2, 2], [2, 3, 4, 5]), ([2, 2, 2], i8))
    yield _nd("ScatterND_3tensor_int64 test2", ("INT8",), ([2, 2, 2], [0, 0, 2, 3, 4, 0, 6, 7]),
              ([2, 3], [0, 0, 1, -1, 0, -1]), ([2], [1, 5]), ([2, 2, 2], i8))
    yield _nd("ScatterND_3tensor_int64 test3", ("INT16",), ([2, 2, 2], [0, 1, 2, 3, 0, 1, 2, 3]),
              ([1, 1], [1]), ([1, 2, 2], [4, 5, 6, 7]), ([2, 2, 2], i8))
    yield _nd("ScatterND_batched_index_int64", ("INT64",), ([2, 2], [2, 3, 2, 3]), ([2, 1, 2], [0, 0, 0, 1]),
              ([2, 1], [0, 1]), ([2, 2], [0, 1, 2, 3]))
    yield _nd("ScatterND_batched_index_bool_int64", ("BOOL",), ([2, 2], [0, 1, 0, 1]),
              ([2, 1, 2], [0, 0, 0, 1]), ([2, 1], [1, 0]), ([2, 2], [1, 0, 0, 1]))
    yield _nd("ScatterND_sliced_index_int64", ("INT64",), ([2, 2], [0, 0, 0, 0]), ([2, 1, 1], [1, 0]),
              ([2, 1, 2], [2, 3, 0, 1]), ([2, 2], [0, 1, 2, 3]))
    yield _nd("ScatterND_sliced_index_string_int64", s, ([2, 2], ["", "", "", ""]), ([2, 1, 1], [1, 0]),
              ([2, 1, 2], ["f", "ghi", "ab", "cde"]), ([2, 2], ["ab", "cde", "f", "ghi"]))
    long = [f"{w} value longer than the small string optimization" for w in ("first", "second", "last")]
    yield _nd("ScatterND_string_duplicate_indices", s, ([2], ["original", "untouched"]), ([3, 1], [0, 0, 0]),
              ([3], long), ([2], [long[2], "untouched"]), 18)
    yield _nd("ScatterND_string_add_duplicate_indices", s, ([2], ["base", "untouched"]), ([3, 1], [0, 0, 0]),
              ([3], ["-first", "-second", "-last"]), ([2], ["base-first-second-last", "untouched"]), 18, "add")
    yield _nd("ScatterND_batched_3tensor_int64 test1", ("UINT32",), ([2, 2, 2], [0] * 8),
              ([2, 2, 2], [0, 1, 1, 0, 0, 0, 1, 1]), ([2, 2, 2], [2, 3, 4, 5, 0, 1, 6, 7]), ([2, 2, 2], i8))
    yield _nd("ScatterND_batched_3tensor_int64 test2", ("UINT32",), ([2, 2, 2], [0, 0, 2, 0, 4, 0, 0, 7]),
              ([2, 2, 3], [0, 0, -1, -1, 0, -1, 0, 1, -1, 1, -1, 0]), ([2, 2], [1, 5, 3, 6]), ([2, 2, 2], i8))
    yield _nd("ScatterND_batched_3tensor_int64 test3", ("INT64",), ([2, 2, 2], [1] + [0] * 7),
              ([2, 1, 1], [1, 0]), ([2, 1, 2, 2], [4, 5, 6, 7, 0, 1, 2, 3]), ([2, 2, 2], i8))
    powers = [2.0 ** k for k in range(1, 19)]
    float_18 = {
        "add": [8194.1, 16388.1, 32776.10, 65552.10, 131104.1, 262208.1, 128.1, 256.1, 512.1, 1024.1, 2048.1,
                4096.1],
        "mul": [1638.4, 6553.6, 26214.4, 104857.6, 419430.4, 1677721.625, 12.8, 25.6, 51.2, 102.4, 204.8, 409.6],
        "min": [0.1] * 12,
        "max": [8192.0, 16384.0, 32768.0, 65536.0, 131072.0, 262144.0, 128.0, 256.0, 512.0, 1024.0, 2048.0,
                4096.0],
    }
    for reduction, out in float_18.items():
        yield _nd(f"ScatterND_18_{reduction}", ("FLOAT",), ([2, 2, 3], [0.1] * 12), ([3, 1], [0, 1, 0]),
                  ([3, 2, 3], powers), ([2, 2, 3], out), 18, reduction)
    long_shape = [2, 2, 3, 1, 1, 1, 1]
    yield _nd("ScatterND_18_mul_long_shape", ("FLOAT",), (long_shape, [0.1] * 12), ([3, 1], [0, 1, 0]),
              ([3, *long_shape[1:]], powers), (long_shape, float_18["mul"]), 18, "mul")
    yield _nd("ScatterND_empty_indices", ("FLOAT",), ([2, 3], [1, 2, 3, 4, 5, 6]), ([0, 1], []), ([0, 3], []),
              ([2, 3], [1, 2, 3, 4, 5, 6]))
    yield _nd("ScatterND_zero_index_depth_updates_entire_tensor", ("FLOAT",), ([2, 3], [1, 2, 3, 4, 5, 6]),
              ([1, 0], []), ([1, 2, 3], [10, 20, 30, 40, 50, 60]), ([2, 3], [10, 20, 30, 40, 50, 60]), 18)
    yield _nd("ScatterND_zero_index_depth_adds_multiple_updates", ("FLOAT",), ([2], [1, 2]), ([2, 0], []),
              ([2, 2], [10, 20, 100, 200]), ([2], [111, 222]), 18, "add")
    yield _nd("ScatterND_zero_index_depth_empty_data", ("FLOAT",), ([0, 3], []), ([1, 0], []), ([1, 0, 3], []),
              ([0, 3], []), 18)


def _case_model(op, opset, attrs, dtype, data, indices, itype, updates) -> onnx.ModelProto:
    elem = TensorProto.DataType.Value(dtype)
    index_elem = TensorProto.DataType.Value(itype)
    node = helper.make_node(op, ["data", "indices", "updates"], ["y"], name="scatter", **attrs)
    graph = helper.make_graph(
        [node], "case",
        [helper.make_tensor_value_info("data", elem, data.shape),
         helper.make_tensor_value_info("indices", index_elem, indices.shape),
         helper.make_tensor_value_info("updates", elem, updates.shape)],
        [helper.make_tensor_value_info("y", elem, data.shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _ort_cases() -> list[Case]:
    found = []
    for source, op, opset, attrs, types, data, (indices, itype), updates, expected in _raw_ort_cases():
        is_string = data.dtype == object
        targets = types if is_string else (*types, *(t for t in RETYPED if t not in types))
        for dtype in targets:
            arrays = (data, updates, expected)
            if not all(_fits(a, dtype) for a in arrays):
                continue  # a value that is not one of this type: the pair is left out
            d, u, e = (_cast(a, dtype) for a in arrays)
            index_values = indices.astype(_np_type(itype))
            found.append(Case(source, dtype, dtype in types,
                              _case_model(op, opset, attrs, dtype, d, index_values, itype, u),
                              (d, index_values, u), e))
    return found


def _backend_cases() -> list[Case]:
    from tests.helpers.backend_cases import node_cases

    found = []
    for case in node_cases():
        if not any(n.op_type in SCATTER_OPS for n in case.model.graph.node):
            continue
        inputs, outputs = case.data_sets[0]
        graph = case.model.graph
        float_inputs = [k for k, vi in enumerate(graph.input) if vi.type.tensor_type.elem_type == TensorProto.FLOAT]
        upstream = "FLOAT"
        for dtype in (upstream, *RETYPED):
            arrays = [inputs[k] for k in float_inputs] + [outputs[0]]
            if not all(_fits(a, dtype) for a in arrays):
                continue
            model = onnx.ModelProto()
            model.CopyFrom(case.model)
            for vi in [*(model.graph.input[k] for k in float_inputs), *model.graph.output]:
                vi.type.tensor_type.elem_type = TensorProto.DataType.Value(dtype)
            feeds = tuple(_cast(a, dtype) if k in float_inputs else a for k, a in enumerate(inputs))
            found.append(Case(f"{ONNX_BACKEND} {case.name}", dtype, dtype == upstream, model, feeds,
                              _cast(outputs[0], dtype)))
    return found


@functools.lru_cache(maxsize=1)
def all_cases() -> tuple[Case, ...]:
    """The set, built once (ONNX's backend cases take a few seconds to collect)."""
    return (*_ort_cases(), *_backend_cases())


def by_type(dtypes) -> list[Case]:
    """The cases whose data is one of ``dtypes`` (TensorProto names)."""
    return [c for c in all_cases() if c.dtype in dtypes]
