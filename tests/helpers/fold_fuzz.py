"""A randomized generator of models for auditing ``fold`` (not collected by pytest: no ``test_`` prefix).

Each model holds scatters (ScatterElements 11/13/16/18 with every reduction, ScatterND 11/13/16/18,
the deprecated Scatter at opset 9/10, TensorScatter at opset 24) whose inputs come from constant-only
chains as exporters write them: initializers, ``Constant`` nodes in every attribute form, Cast,
Reshape (0/-1 entries, allowzero), Unsqueeze/Squeeze (attribute or input form by opset), Concat,
Slice, Transpose, Gather, Expand, Tile, Where, Add/Sub/Mul/Neg, Shape (start/end), Size, Range,
ConstantOfShape, NonZero, CumSum, Split, Flatten, Identity... Every chain is built top-down from
the array it must produce, so its value is known exactly. Scatters sit in the main graph, If branches,
Loop and Scan bodies (reading outer-scope and body constants) and model-local functions (nested
calls, attribute references).

Each scatter (a *site*) is marked: ``const`` (fold must fold it, unless ``size_limit`` says no),
``dynamic`` (it reads a graph input, an initializer that is also a graph input, a function input or
attribute, a Shape of a dynamic dim...: fold must leave it, with a reason) or ``bad`` (a constant
index out of range: fold must raise an error naming the node).

``generate(seed)`` returns a :class:`Case`; ``check_case(case)`` folds it and runs the oracle
(onnxruntime on one thread, onnx.reference where onnxruntime cannot run the original), returning a
list of findings (empty: all good). ``python -m tests.helpers.fold_fuzz --minutes 60`` runs a campaign.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto as TP
from onnx import numpy_helper as nh

from tests.helpers.runs import ort_run

# ---------------------------------------------------------------------------------------------- dtypes

DTYPES = {
    "bool": np.dtype(bool), "int8": np.dtype(np.int8), "int16": np.dtype(np.int16), "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64), "uint8": np.dtype(np.uint8), "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32), "uint64": np.dtype(np.uint64), "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16), "float": np.dtype(np.float32), "double": np.dtype(np.float64),
    "complex64": np.dtype(np.complex64), "complex128": np.dtype(np.complex128), "string": np.dtype(object),
}
ONNX_TYPE = {
    "bool": TP.BOOL, "int8": TP.INT8, "int16": TP.INT16, "int32": TP.INT32, "int64": TP.INT64, "uint8": TP.UINT8,
    "uint16": TP.UINT16, "uint32": TP.UINT32, "uint64": TP.UINT64, "float16": TP.FLOAT16, "bfloat16": TP.BFLOAT16,
    "float": TP.FLOAT, "double": TP.DOUBLE, "complex64": TP.COMPLEX64, "complex128": TP.COMPLEX128,
    "string": TP.STRING,
}
FLOATS = ("float16", "bfloat16", "float", "double")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def dtype_name(a: np.ndarray) -> str:
    if a.dtype == object:
        return "string"
    for k, v in DTYPES.items():
        if v == a.dtype:
            return k
    raise KeyError(a.dtype)


_SCHEMA_CACHE: dict = {}


def allowed(op: str, opset: int, dt: str, constraint: int = 0) -> bool:
    """Whether ``op`` at ``opset`` accepts ``dt`` in its ``constraint``-th type constraint."""
    key = (op, opset, constraint)
    if key not in _SCHEMA_CACHE:
        try:
            s = onnx.defs.get_schema(op, opset)
            c = s.type_constraints[constraint]
            _SCHEMA_CACHE[key] = {t[len("tensor("):-1] for t in c.allowed_type_strs if t.startswith("tensor(")}
        except Exception:
            _SCHEMA_CACHE[key] = set()
    return dt in _SCHEMA_CACHE[key]


def rand_array(rng: np.random.Generator, dt: str, shape, special: bool = False) -> np.ndarray:
    shape = tuple(int(s) for s in shape)
    n = int(np.prod(shape)) if shape else 1
    if dt == "string":
        words = ["", "a", "bb", "ccc", "x y", "Zz", "é", "0", "-1", "nan"]
        return np.array([words[i] for i in rng.integers(0, len(words), n)], dtype=object).reshape(shape)
    if dt == "bool":
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    if dt in INTS:
        info = np.iinfo(DTYPES[dt])
        lo, hi = max(info.min, -50), min(info.max, 50)
        a = rng.integers(lo, hi + 1, n).astype(DTYPES[dt])
        if special and n:
            a[rng.integers(0, n)] = np.array(info.max if rng.random() < 0.5 else info.min, DTYPES[dt])
        return a.reshape(shape)
    if dt in FLOATS:
        a = rng.integers(-40, 41, n) / 4.0
        if special and n:
            for _ in range(rng.integers(1, 3)):
                a[rng.integers(0, n)] = rng.choice([np.nan, -0.0, 0.0, np.inf, -np.inf, 1e-3])
        return a.astype(DTYPES[dt]).reshape(shape)
    re = rng.integers(-20, 21, n) / 4.0
    im = rng.integers(-20, 21, n) / 4.0
    return (re + 1j * im).astype(DTYPES[dt]).reshape(shape)


def to_tensor(a: np.ndarray, name: str) -> onnx.TensorProto:
    if a.dtype == object:
        t = oh.make_tensor(name, TP.STRING, a.shape, [s.encode() for s in a.ravel().tolist()])
        return t
    return nh.from_array(a, name)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit for bit (NaNs equal whatever their payload; -0.0 and 0.0 differ)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "OUS" or b.dtype.kind in "OUS":
        norm = lambda x: [s.decode() if isinstance(s, bytes) else str(s) for s in x.ravel().tolist()]  # noqa: E731
        return norm(a) == norm(b)
    if a.dtype != b.dtype:
        return False
    if a.dtype.kind == "c":
        return same(a.real, b.real) and same(a.imag, b.imag)
    if a.dtype.kind == "f" or a.dtype == DTYPES["bfloat16"]:
        fa, fb = a.astype(np.float64), b.astype(np.float64)
        na, nb = np.isnan(fa), np.isnan(fb)
        if not (na == nb).all():
            return False
        ua = a.view(f"u{a.itemsize}")[~na]
        ub = b.view(f"u{b.itemsize}")[~nb]
        return bool((ua == ub).all())
    return bool((a == b).all())


# ---------------------------------------------------------------------------------------------- models


@dataclasses.dataclass
class Site:
    name: str  # the scatter node's name
    op: str
    kind: str  # const | dynamic | bad
    where: str  # main | if | loop | scan | function
    dtype: str
    result_nbytes: int
    float_reduction: bool
    why: str = ""  # what makes it dynamic/bad


@dataclasses.dataclass
class Case:
    seed: int
    model: onnx.ModelProto
    feeds: dict
    sites: list
    size_limit: int | None
    features: set
    external: bool = False
    alt_feeds: dict | None = None  # feeds overriding defaults (initializers that are graph inputs)


class Body:
    """A graph or function body under construction."""

    def __init__(self, kind: str, parent: "Body | None" = None):
        self.kind = kind  # main | sub | function
        self.parent = parent
        self.nodes: list = []
        self.inits: list = []
        self.known: dict[str, np.ndarray] = {}  # constant names emitted here, and their values
        self.dyn_input: str | None = None  # the body input a dynamic site reads (function/scan/loop)
        self.dyn_value: np.ndarray | None = None
        self.attr_value: float | None = None  # call-site values of the function attributes fv / ax
        self.axis_value: int | None = None


class Gen:
    def __init__(self, seed: int):
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.counter = 0
        self.features: set[str] = set()
        self.functions: list = []
        self.sites: list[Site] = []
        self.feeds: dict = {}
        self.alt_feeds: dict = {}
        self.inputs: list = []
        self.outputs: list = []
        self.opset = 18
        self.container_op: str | None = None

    # -- small helpers
    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}_{self.counter}"

    def p(self, x: float) -> bool:
        return bool(self.rng.random() < x)

    def pick(self, seq):
        return seq[int(self.rng.integers(0, len(seq)))]

    def node(self, b: Body, op: str, inputs, outputs=None, /, **attrs) -> list[str]:
        outputs = outputs or [self.fresh(op.lower())]
        b.nodes.append(oh.make_node(op, list(inputs), list(outputs), **attrs))
        self.features.add(f"op:{op}")
        return outputs

    def ok(self, op: str, dt: str, c: int = 0) -> bool:
        return allowed(op, self.opset, dt, c)

    # -- the constant emitter: a name whose value is exactly `arr`
    def emit(self, arr: np.ndarray, body: Body, depth: int) -> str:
        arr = np.asarray(arr)
        dt = dtype_name(arr)
        choices: list[tuple[float, str]] = []
        if body.kind != "function":
            choices.append((2.0, "init"))
        if body.parent is not None and body.kind == "sub":
            choices.append((1.5, "outer"))
        choices.append((1.5, "constant"))
        if self.opset >= 12 and self._attr_form(arr) is not None:
            choices.append((1.5, "constant_attr"))
        if depth > 0:
            for w, op in self._chain_options(arr, dt):
                choices.append((w, op))
        weights = np.array([w for w, _ in choices])
        how = choices[int(self.rng.choice(len(choices), p=weights / weights.sum()))][1]
        name = getattr(self, f"_e_{how}")(arr, body, depth)
        body.known[name] = arr
        return name

    def _attr_form(self, arr: np.ndarray) -> str | None:
        dt = dtype_name(arr)
        table = {("float", 0): "value_float", ("float", 1): "value_floats", ("int64", 0): "value_int",
                 ("int64", 1): "value_ints", ("string", 0): "value_string", ("string", 1): "value_strings"}
        form = table.get((dt, arr.ndim))
        if form and form.endswith("s") and arr.size == 0:
            return None
        return form

    def _e_init(self, arr, body, depth):
        name = self.fresh("init")
        body.inits.append(to_tensor(arr, name))
        self.features.add("leaf:initializer")
        return name

    def _e_outer(self, arr, body, depth):
        self.features.add("leaf:outer_scope")
        return self.emit(arr, body.parent, max(depth - 1, 0))

    def _e_constant(self, arr, body, depth):
        self.features.add("leaf:Constant.value")
        return self.node(body, "Constant", [], value=to_tensor(arr, self.fresh("t")))[0]

    def _e_constant_attr(self, arr, body, depth):
        form = self._attr_form(arr)
        self.features.add(f"leaf:Constant.{form}")
        if form in ("value_float", "value_int"):
            value = arr.item()
        elif form == "value_string":
            value = arr.item().encode()
        elif form == "value_strings":
            value = [s.encode() for s in arr.tolist()]
        else:
            value = arr.tolist()
        return self.node(body, "Constant", [], **{form: value})[0]

    def _chain_options(self, arr: np.ndarray, dt: str) -> list[tuple[float, str]]:
        o = self.opset
        out = []
        n = arr.size
        if self.ok("Identity", dt):
            out.append((0.5, "identity"))
        if dt != "string" and self.ok("Cast", dt, 1):
            out.append((1.5, "cast"))
        if self.ok("Reshape", dt):
            out.append((1.5, "reshape"))
        if self.ok("Unsqueeze", dt) and 1 in arr.shape:
            out.append((1.0, "unsqueeze"))
        if self.ok("Squeeze", dt) and arr.ndim < 4:
            out.append((0.7, "squeeze"))
        if self.ok("Concat", dt) and arr.ndim >= 1 and n > 0 and max(arr.shape) >= 2:
            out.append((1.2, "concat"))
        if self.ok("Slice", dt) and arr.ndim >= 1:
            out.append((1.0, "slice"))
        if self.ok("Transpose", dt) and arr.ndim >= 2:
            out.append((0.8, "transpose"))
        if self.ok("Gather", dt) and arr.ndim >= 1:
            out.append((1.0, "gather"))
        if o >= 8 and self.ok("Expand", dt) and self._broadcast_axis(arr) is not None:
            out.append((2.0, "expand"))
        if self.ok("Tile", dt) and self._tile_axis(arr) is not None:
            out.append((2.0, "tile"))
        if o >= 9 and self.ok("Where", dt, 1) and n > 0:
            out.append((0.6, "where"))
        if dt in ("int32", "int64", "float", "double") or (dt in INTS + ("float16",) and self.ok("Add", dt)):
            if self.ok("Add", dt):
                out.append((0.8, "arith"))
        if dt == "int64" and arr.ndim == 1 and n <= 4 and (arr >= 0).all() and (arr <= 5).all() and np.prod(arr) <= 64:
            out.append((3.0, "shape"))
        if dt == "int64" and arr.ndim == 0 and 0 <= arr <= 40:
            out.append((1.5, "size"))
        if o >= 11 and dt in ("int32", "int64", "float", "double", "int16") and arr.ndim == 1 and self._is_range(arr):
            out.append((3.0, "range"))
        if o >= 9 and dt != "string" and n > 0 and (arr.reshape(-1) == arr.reshape(-1)[0]).all() \
                and self.ok("ConstantOfShape", dt, 1) and not (dt in FLOATS and np.isnan(arr.astype(np.float64)).any()):
            out.append((3.0, "constantofshape"))
        if o >= 11 and dt in ("int32", "int64") and arr.ndim >= 1 and n > 0 and self.ok("CumSum", dt):
            out.append((0.5, "cumsum"))
        if o >= 9 and dt == "int64" and arr.ndim == 2 and n > 0 and self._nonzero_ok(arr):
            out.append((4.0, "nonzero"))
        if self.ok("Split", dt) and arr.ndim >= 1 and n > 0:
            out.append((0.5, "split"))
        if self.ok("Flatten", dt) and arr.ndim == 2:
            out.append((0.5, "flatten"))
        if dt in ("int32", "int64", "float", "double") and self.ok("Abs", dt) and n > 0 \
                and (arr.astype(np.float64) >= 0).all():
            out.append((0.4, "abs"))
        if o >= 15 and dt != "string" and self.ok("CastLike", dt, 1):
            out.append((0.3, "castlike"))
        return out

    def _e_identity(self, arr, body, depth):
        return self.node(body, "Identity", [self.emit(arr, body, depth - 1)])[0]

    def _cast_sources(self, arr: np.ndarray, dt: str) -> list[str]:
        srcs = []
        for s in DTYPES:
            if s in (dt, "string") or not self.ok("Cast", s, 0) or not self.ok("Cast", dt, 1):
                continue
            if dt in ("complex64", "complex128") or s in ("complex64", "complex128"):
                continue  # Cast has no complex
            try:
                with np.errstate(all="ignore"):
                    src = arr.astype(DTYPES[s])
                    back = src.astype(arr.dtype)
            except Exception:
                continue
            if dt in FLOATS and s in INTS + ("bool",):
                fl = arr.astype(np.float64)
                if np.isnan(fl).any() or np.isinf(fl).any() or (np.signbit(fl) & (fl == 0)).any():
                    continue
            if s in INTS and dt in FLOATS + INTS:  # the source must hold the values exactly
                info = np.iinfo(DTYPES[s])
                fl = arr.astype(np.float64)
                if (fl < info.min).any() or (fl > info.max).any():
                    continue
            if s in FLOATS and not np.isfinite(src.astype(np.float64)).all() and dt not in FLOATS:
                continue  # a float out of range of the integer type: undefined
            if same(back, arr) and (dt != "bool" or s in INTS + ("bool",)):
                srcs.append(s)
        return srcs

    def _e_cast(self, arr, body, depth):
        dt = dtype_name(arr)
        srcs = self._cast_sources(arr, dt)
        if not srcs:
            return self._e_identity(arr, body, depth) if self.ok("Identity", dt) else self._e_constant(arr, body, depth)
        s = self.pick(srcs)
        self.features.add(f"cast:{s}->{dt}")
        return self.node(body, "Cast", [self.emit(arr.astype(DTYPES[s]), body, depth - 1)], to=ONNX_TYPE[dt])[0]

    def _e_castlike(self, arr, body, depth):
        dt = dtype_name(arr)
        srcs = [s for s in self._cast_sources(arr, dt) if self.ok("CastLike", s, 0)]
        if not srcs:
            return self._e_identity(arr, body, depth) if self.ok("Identity", dt) else self._e_constant(arr, body, depth)
        s = self.pick(srcs)
        like = self.emit(rand_array(self.rng, dt, (1,)), body, 0)
        return self.node(body, "CastLike", [self.emit(arr.astype(DTYPES[s]), body, depth - 1), like])[0]

    def _factor_shape(self, n: int) -> tuple[int, ...]:
        if n == 0:
            return self.pick([(0,), (0, 3), (2, 0)])
        dims = []
        rest = n
        for _ in range(int(self.rng.integers(0, 3))):
            divs = [d for d in range(1, rest + 1) if rest % d == 0]
            d = self.pick(divs)
            dims.append(d)
            rest //= d
        dims.append(rest)
        self.rng.shuffle(dims)
        return tuple(dims)

    def _e_reshape(self, arr, body, depth):
        src_shape = self._factor_shape(arr.size)
        src = arr.reshape(src_shape)
        target = list(arr.shape)
        allowzero = 0
        spec = list(target)
        if 0 in target:
            if self.opset >= 14 and self.p(0.7):
                allowzero = 1
            else:  # without allowzero a 0 copies the input's dim: have the input carry it
                src = arr.copy()
                spec = list(target)
        if not allowzero:
            for i in range(len(spec)):
                if i < len(src.shape) and src.shape[i] == target[i] and self.p(0.3):
                    spec[i] = 0
                    self.features.add("reshape:0")
            if arr.size > 0 and self.p(0.4) and spec:
                j = int(self.rng.integers(0, len(spec)))
                if spec[j] != 0:
                    spec[j] = -1
                    self.features.add("reshape:-1")
        if 0 in target and not allowzero:
            spec = [0 if (i < src.ndim and src.shape[i] == 0) else t for i, t in enumerate(target)]
        attrs = {}
        if allowzero:
            attrs["allowzero"] = 1
            self.features.add("reshape:allowzero")
        shape_name = self.emit(np.array(spec, np.int64), body, depth - 1)
        return self.node(body, "Reshape", [self.emit(src, body, depth - 1), shape_name], **attrs)[0]

    def _axes_input(self, body, axes, depth) -> tuple[list[str], dict]:
        if self.opset >= 13:
            return [self.emit(np.array(axes, np.int64), body, depth - 1)], {}
        return [], {"axes": list(axes)}

    def _e_unsqueeze(self, arr, body, depth):
        ones = [i for i, d in enumerate(arr.shape) if d == 1]
        k = int(self.rng.integers(1, len(ones) + 1))
        axes = sorted(self.rng.choice(ones, size=k, replace=False).tolist())
        src = arr.reshape([d for i, d in enumerate(arr.shape) if i not in axes])
        r = arr.ndim
        if self.opset >= 11 and self.p(0.4):
            axes = [a - r if self.p(0.5) else a for a in axes]
            self.features.add("unsqueeze:negative_axes")
        extra, attrs = self._axes_input(body, axes, depth)
        self.features.add("unsqueeze:" + ("input" if self.opset >= 13 else "attribute"))
        return self.node(body, "Unsqueeze", [self.emit(src, body, depth - 1)] + extra, **attrs)[0]

    def _e_squeeze(self, arr, body, depth):
        r = arr.ndim + 1
        pos = int(self.rng.integers(0, r))
        src = np.expand_dims(arr, pos)
        # without axes every size-1 dim goes: only when arr itself has none
        axes = None if (1 not in arr.shape and self.p(0.3)) else [pos]
        if axes is not None and self.opset >= 11 and self.p(0.4):
            axes = [a - r for a in axes]
            self.features.add("squeeze:negative_axes")
        inputs = [self.emit(src, body, depth - 1)]
        if axes is None:
            self.features.add("squeeze:all")
            return self.node(body, "Squeeze", inputs)[0]
        extra, attrs = self._axes_input(body, axes, depth)
        return self.node(body, "Squeeze", inputs + extra, **attrs)[0]

    def _e_concat(self, arr, body, depth):
        axes = [a for a in range(arr.ndim) if arr.shape[a] >= 2]
        axis = self.pick(axes)
        cut = int(self.rng.integers(1, arr.shape[axis]))
        parts = np.split(arr, [cut], axis=axis)
        if self.p(0.2):  # an empty part too
            empty_shape = list(arr.shape)
            empty_shape[axis] = 0
            parts.insert(int(self.rng.integers(0, 3)), np.empty(empty_shape, arr.dtype) if arr.dtype != object
                         else np.array([], dtype=object).reshape(empty_shape))
            self.features.add("concat:empty_part")
        ax = axis - arr.ndim if (self.opset >= 11 and self.p(0.4)) else axis
        names = [self.emit(p, body, depth - 1) for p in parts]
        return self.node(body, "Concat", names, axis=ax)[0]

    def _e_slice(self, arr, body, depth):
        axis = int(self.rng.integers(0, arr.ndim))
        before, after = int(self.rng.integers(0, 3)), int(self.rng.integers(0, 3))
        n = arr.shape[axis]
        dt = dtype_name(arr)
        big_shape = list(arr.shape)
        big_shape[axis] = before + n + after
        big = rand_array(self.rng, dt, big_shape)
        index = [slice(None)] * arr.ndim
        step = -1 if (self.opset >= 10 and n > 0 and self.p(0.3)) else 1
        index[axis] = slice(before, before + n)
        if step == 1:
            big[tuple(index)] = arr
            start, end = before, before + n
            if self.p(0.3) and after == 0:
                end = 2**62  # INT_MAX style end, clamped
                self.features.add("slice:huge_end")
            elif self.p(0.3):
                if start < big_shape[axis]:  # start == len stays len (len - len would be 0)
                    start -= big_shape[axis]
                if end < big_shape[axis]:
                    end -= big_shape[axis]
                self.features.add("slice:negative")
        else:
            big[tuple(index)] = np.flip(arr, axis)
            # reversed: element j of arr is big[before + n - 1 - j]
            start, end = before + n - 1, before - 1
            if end < 0:
                end = -(2**62)
            self.features.add("slice:negative_step")
        src = self.emit(big, body, depth - 1)
        if self.opset < 10:
            return self.node(body, "Slice", [src], starts=[start], ends=[end], axes=[axis])[0]
        ax = axis - arr.ndim if self.p(0.3) else axis
        ins = [src, self.emit(np.array([start], np.int64), body, depth - 1),
               self.emit(np.array([end], np.int64), body, depth - 1),
               self.emit(np.array([ax], np.int64), body, depth - 1)]
        if step != 1 or self.p(0.3):
            ins.append(self.emit(np.array([step], np.int64), body, depth - 1))
        return self.node(body, "Slice", ins)[0]

    def _e_transpose(self, arr, body, depth):
        perm = self.rng.permutation(arr.ndim).tolist()
        inv = np.argsort(perm).tolist()
        src = np.ascontiguousarray(arr.transpose(inv))
        return self.node(body, "Transpose", [self.emit(src, body, depth - 1)], perm=perm)[0]

    def _e_gather(self, arr, body, depth):
        dt = dtype_name(arr)
        axis = int(self.rng.integers(0, arr.ndim))
        if dt == "string":  # onnxruntime 1.32 copies one string per block when axis is not the last
            axis = arr.ndim - 1
        n = arr.shape[axis]
        extra = int(self.rng.integers(0, 3))
        table_n = n + extra
        perm = self.rng.permutation(table_n)  # arr's slot j lives at table position perm[j]
        tshape = list(arr.shape)
        tshape[axis] = table_n
        table = rand_array(self.rng, dt, tshape)
        idx = perm[:n]
        for j in range(n):
            sel = [slice(None)] * arr.ndim
            sel[axis] = idx[j]
            src_sel = [slice(None)] * arr.ndim
            src_sel[axis] = j
            table[tuple(sel)] = arr[tuple(src_sel)]
        if self.opset >= 11 and self.p(0.4):
            idx = np.where(self.rng.random(n) < 0.5, idx - table_n, idx)
            self.features.add("gather:negative_indices")
        idt = np.int32 if self.p(0.3) else np.int64
        ax = axis - arr.ndim if (self.opset >= 11 and self.p(0.3)) else axis
        return self.node(body, "Gather", [self.emit(table, body, depth - 1),
                                          self.emit(idx.astype(idt), body, depth - 1)], axis=ax)[0]

    def _broadcast_axis(self, arr):
        if arr.size == 0 or arr.ndim == 0:
            return None
        for a in range(arr.ndim):
            if arr.shape[a] > 1:
                first = np.take(arr, [0], axis=a)
                if all(same(np.take(arr, [i], axis=a), first) for i in range(arr.shape[a])):
                    return a
        return None

    def _e_expand(self, arr, body, depth):
        a = self._broadcast_axis(arr)
        small = np.take(arr, [0], axis=a)
        shape = list(arr.shape)
        if self.p(0.3):  # drop leading 1s from the small one
            while small.ndim > 1 and small.shape[0] == 1:
                small = small[0]
        if self.p(0.3):
            shape = [1 if (i != a and self.p(0.5) and arr.shape[i] == small.shape[i - (arr.ndim - small.ndim)]
                           if i - (arr.ndim - small.ndim) >= 0 else False) else d for i, d in enumerate(shape)]
            self.features.add("expand:ones_in_shape")
        return self.node(body, "Expand", [self.emit(small, body, depth - 1),
                                          self.emit(np.array(shape, np.int64), body, depth - 1)])[0]

    def _tile_axis(self, arr):
        if arr.size == 0:
            return None
        for a in range(arr.ndim):
            n = arr.shape[a]
            if n >= 2 and n % 2 == 0:
                h = n // 2
                if same(np.take(arr, range(h), axis=a), np.take(arr, range(h, n), axis=a)):
                    return a
        return None

    def _e_tile(self, arr, body, depth):
        a = self._tile_axis(arr)
        h = arr.shape[a] // 2
        reps = [1] * arr.ndim
        reps[a] = 2
        return self.node(body, "Tile", [self.emit(np.take(arr, range(h), axis=a), body, depth - 1),
                                        self.emit(np.array(reps, np.int64), body, depth - 1)])[0]

    def _e_where(self, arr, body, depth):
        dt = dtype_name(arr)
        cond = self.rng.random(arr.shape) < 0.5
        other = rand_array(self.rng, dt, arr.shape)
        a = np.where(cond, arr, other) if dt != "string" else np.where(cond, arr, other).astype(object)
        b = np.where(cond, other, arr) if dt != "string" else np.where(cond, other, arr).astype(object)
        if dt == "bfloat16" or dt in FLOATS:
            a, b = a.astype(arr.dtype), b.astype(arr.dtype)
        return self.node(body, "Where", [self.emit(np.asarray(cond), body, depth - 1),
                                         self.emit(a, body, depth - 1), self.emit(b, body, depth - 1)])[0]

    def _e_arith(self, arr, body, depth):
        dt = dtype_name(arr)
        kind = self.pick(["Add", "Sub", "Mul", "Neg"])
        with np.errstate(all="ignore"):
            if kind == "Neg" and self.ok("Neg", dt) and dt not in ("uint8", "uint16", "uint32", "uint64"):
                src = (-arr).astype(arr.dtype)
                if same((-src).astype(arr.dtype), arr):
                    return self.node(body, "Neg", [self.emit(src, body, depth - 1)])[0]
            if kind == "Mul" and self.ok("Mul", dt):
                one = np.ones(arr.shape[-1:] if arr.ndim and self.p(0.5) else (), dtype=arr.dtype)
                if same(arr * one, arr):
                    self.features.add("arith:broadcast")
                    return self.node(body, "Mul", [self.emit(arr, body, depth - 1), self.emit(one, body, depth - 1)])[0]
            other = rand_array(self.rng, dt, arr.shape)
            if kind == "Sub":
                a = (arr + other).astype(arr.dtype)
                if same((a - other).astype(arr.dtype), arr) and self._exact(a, other, arr, "sub"):
                    return self.node(body, "Sub", [self.emit(a, body, depth - 1), self.emit(other, body, depth - 1)])[0]
            b = (arr - other).astype(arr.dtype)
            if same((other + b).astype(arr.dtype), arr) and self._exact(other, b, arr, "add"):
                return self.node(body, "Add", [self.emit(other, body, depth - 1), self.emit(b, body, depth - 1)])[0]
        return self._e_identity(arr, body, depth)

    @staticmethod
    def _exact(a, b, want, op) -> bool:
        """Float a op b equals want exactly in real arithmetic (no rounding for runtimes to differ on)."""
        if want.dtype.kind != "f" and want.dtype != DTYPES["bfloat16"]:
            return True
        fa, fb, fw = a.astype(np.float64), b.astype(np.float64), want.astype(np.float64)
        if not (np.isfinite(fa).all() and np.isfinite(fb).all()):
            return False
        r = fa + fb if op == "add" else fa - fb
        return same(r, fw) if np.isfinite(fw).all() else False

    def _e_shape(self, arr, body, depth):
        dims = [int(d) for d in arr]
        pre = [int(self.rng.integers(1, 3)) for _ in range(int(self.rng.integers(0, 2)))] if self.opset >= 15 else []
        post = [int(self.rng.integers(1, 3)) for _ in range(int(self.rng.integers(0, 2)))] if self.opset >= 15 else []
        full = pre + dims + post
        dt = self.pick(["float", "int64", "bool", "string"])
        if not self.ok("Shape", dt):
            dt = "float"
        src = self.emit(rand_array(self.rng, dt, full), body, max(depth - 2, 0))
        attrs = {}
        if pre or post or (self.opset >= 15 and self.p(0.3)):
            start = len(pre) if (pre or self.p(0.5)) else None
            end = len(pre) + len(dims)
            if start is not None:
                attrs["start"] = start - len(full) if (self.p(0.3) and start < len(full)) else start
            if post or self.p(0.5):
                attrs["end"] = end - len(full) if (self.p(0.3) and end < len(full)) else (end if end < len(full) or self.p(0.5) else 100)
            self.features.add("shape:start_end")
        return self.node(body, "Shape", [src], **attrs)[0]

    def _e_size(self, arr, body, depth):
        n = int(arr)
        shape = self._factor_shape(n) if n else (0, 2)
        return self.node(body, "Size", [self.emit(rand_array(self.rng, "float", shape), body, max(depth - 2, 0))])[0]

    @staticmethod
    def _is_range(arr) -> bool:
        if arr.size < 1:
            return False
        f = arr.astype(np.float64)
        if not (np.isfinite(f).all() and np.abs(f).max() < 2**40):  # exact in float arithmetic
            return False
        if arr.size == 1:
            return True
        d = f[1] - f[0]
        if d == 0 or abs(d) > 1e6:
            return False
        return bool(np.all(np.diff(f) == float(d))) and np.isfinite(f).all() and float(d).is_integer() \
            and float(arr[0]).is_integer() and bool(np.abs(f).max() < 2**40)  # exact in float arithmetic

    def _e_range(self, arr, body, depth):
        dt = dtype_name(arr)
        start = arr[0]
        delta = (arr[1] - arr[0]) if arr.size > 1 else np.array(self.pick([1, 2, -1]), arr.dtype)
        limit = np.array(float(start) + float(delta) * arr.size).astype(arr.dtype) if dt in ("float", "double") \
            else np.array(int(start) + int(delta) * arr.size, np.int64)
        if dt not in ("float", "double"):
            info = np.iinfo(arr.dtype)
            if not info.min <= int(limit) <= info.max:
                return self._e_constant(arr, body, depth)
            limit = limit.astype(arr.dtype)
        if dt in ("float", "double") or self.p(0.4):  # a limit short of the next (floats: rounding)
            limit = limit - delta / 2 if dt in ("float", "double") else limit - (np.sign(delta) if abs(delta) > 1 else 0)
        ins = [self.emit(np.array(v, arr.dtype), body, depth - 1) for v in (start, limit, delta)]
        return self.node(body, "Range", ins)[0]

    def _e_constantofshape(self, arr, body, depth):
        value = arr.reshape(-1)[:1].copy()
        shape = self.emit(np.array(arr.shape, np.int64), body, depth - 1)
        if dtype_name(arr) == "float" and value[0] == 0 and not np.signbit(value[0]) and self.p(0.4):
            self.features.add("constantofshape:default")
            return self.node(body, "ConstantOfShape", [shape])[0]
        return self.node(body, "ConstantOfShape", [shape], value=to_tensor(value, self.fresh("v")))[0]

    def _e_cumsum(self, arr, body, depth):
        axis = int(self.rng.integers(0, arr.ndim))
        d = np.diff(arr.astype(np.int64), axis=axis, prepend=0).astype(arr.dtype)
        if not same(np.cumsum(d, axis=axis).astype(arr.dtype), arr):
            return self._e_identity(arr, body, depth)
        ax = np.array(axis - arr.ndim if self.p(0.3) else axis, np.int64 if self.p(0.5) else np.int32)
        return self.node(body, "CumSum", [self.emit(d, body, depth - 1), self.emit(ax, body, depth - 1)])[0]

    @staticmethod
    def _nonzero_ok(arr) -> bool:
        """arr = Transpose(NonZero(mask)): rows are distinct non-negative tuples in C order."""
        if arr.shape[1] < 1 or arr.shape[1] > 3 or (arr < 0).any() or arr.shape[0] == 0 or arr.max() > 16:
            return False
        rows = [tuple(r) for r in arr.tolist()]
        return rows == sorted(set(rows))

    def _e_nonzero(self, arr, body, depth):
        k = arr.shape[1]
        shape = tuple(int(arr[:, j].max()) + 1 + int(self.rng.integers(0, 2)) for j in range(k))
        mask = np.zeros(shape, bool)
        mask[tuple(arr.T)] = True
        self.features.add("nonzero")
        src_dt = self.pick(["bool", "float", "int64"])
        nz = self.node(body, "NonZero", [self.emit(mask.astype(DTYPES[src_dt]), body, depth - 1)])[0]
        return self.node(body, "Transpose", [nz], perm=[1, 0])[0]

    def _e_split(self, arr, body, depth):
        dt = dtype_name(arr)
        axis = int(self.rng.integers(0, arr.ndim))
        n = arr.shape[axis]
        extra_shape = list(arr.shape)
        extra_shape[axis] = n
        other = rand_array(self.rng, dt, extra_shape)
        first = self.p(0.5)
        big = np.concatenate([arr, other] if first else [other, arr], axis=axis)
        src = self.emit(big, body, depth - 1)
        outs = [self.fresh("split"), self.fresh("split")]
        ax = axis - arr.ndim if (self.opset >= 11 and self.p(0.3)) else axis
        if self.opset >= 18:
            if self.p(0.5):
                self.node(body, "Split", [src], outs, axis=ax, num_outputs=2)
            else:
                self.node(body, "Split", [src, self.emit(np.array([n, n], np.int64), body, depth - 1)], outs, axis=ax)
        elif self.opset >= 13:
            self.node(body, "Split", [src], outs, axis=ax)
        else:
            self.node(body, "Split", [src], outs, axis=ax, split=[n, n])
        return outs[0] if first else outs[1]

    def _e_flatten(self, arr, body, depth):
        a, b = arr.shape
        if arr.size == 0:
            return self._e_identity(arr, body, depth)
        shapes = []
        if b > 0:
            fb = [d for d in range(1, b + 1) if b % d == 0]
            db = self.pick(fb)
            shapes.append(((a, db, b // db), 2))
        if a > 0:
            fa = [d for d in range(1, a + 1) if a % d == 0]
            da = self.pick(fa)
            shapes.append(((da, a // da, b), 1 if self.p(0.5) else -2 if self.opset >= 11 else 1))
        if not shapes:
            return self._e_identity(arr, body, depth)
        shape, axis = self.pick(shapes)
        if len(shape) == 3 and axis in (1, -2) and shape[2] != b:
            return self._e_identity(arr, body, depth)
        src = arr.reshape(shape)
        if axis in (1, -2) and src.reshape(shape[0], -1).shape != arr.shape:
            return self._e_identity(arr, body, depth)
        if axis == 2 and src.reshape(shape[0] * shape[1], -1).shape != arr.shape:
            return self._e_identity(arr, body, depth)
        return self.node(body, "Flatten", [self.emit(src, body, depth - 1)], axis=axis)[0]

    def _e_abs(self, arr, body, depth):
        sign = np.where(self.rng.random(arr.shape) < 0.5, -1, 1).astype(arr.dtype)
        src = (arr * sign).astype(arr.dtype)
        if not same(np.abs(src), arr):
            return self._e_identity(arr, body, depth)
        return self.node(body, "Abs", [self.emit(src, body, depth - 1)])[0]

    # ------------------------------------------------------------------------------------------ sites

    def data_dims(self, rank: int, zero: bool = True) -> list[int]:
        dims = [int(self.rng.integers(1, 5)) for _ in range(rank)]
        if zero and self.p(0.04):
            dims[int(self.rng.integers(0, rank))] = 0
            self.features.add("zero_size")
        return dims

    def site_arrays(self, op: str, dt: str, reduction: str, bad: bool, data_shape=None):
        """data, indices, updates (or past_cache, update, write_indices) and the node attributes."""
        rng = self.rng
        special = self.p(0.25) and reduction in ("max", "min", "none", "add")
        attrs: dict = {}
        if op in ("ScatterElements", "Scatter"):
            shape = list(data_shape) if data_shape else self.data_dims(int(rng.integers(1, 4)))
            r = len(shape)
            axis = int(rng.integers(0, r))
            n = shape[axis]
            ind = []
            for d in range(r):
                if d == axis:
                    hi = n if reduction == "none" else n + 2
                    ind.append(int(rng.integers(1, hi + 1)) if n > 0 and hi > 0 else 0)
                else:
                    ind.append(int(rng.integers(1, shape[d] + 1)) if shape[d] > 0 else 0)
            if self.p(0.05) and any(ind):
                ind[int(rng.integers(0, r))] = 0
                self.features.add("empty_indices")
            idx = np.zeros(ind, np.int64)
            if idx.size:
                if reduction == "none":
                    moved = np.moveaxis(idx, axis, -1)
                    lines = moved.reshape(-1, ind[axis])
                    for line in lines:
                        line[:] = rng.permutation(n)[:ind[axis]]
                    idx = np.moveaxis(lines.reshape(moved.shape), -1, axis).copy()
                    if self.p(0.05) and ind[axis] >= 2:  # duplicates with none: last wins in ORT and ours
                        flat = np.moveaxis(idx, axis, -1).reshape(-1, ind[axis])
                        flat[:, 1] = flat[:, 0]
                        idx = np.moveaxis(flat.reshape(np.moveaxis(idx, axis, -1).shape), -1, axis).copy()
                        self.features.add("none_duplicates")
                else:
                    idx = rng.integers(0, n, size=ind)
                neg = rng.random(ind) < (0.3 if self.p(0.5) else 0.0)
                idx = np.where(neg, idx - n, idx)
                if neg.any():
                    self.features.add("negative_indices")
            if bad and idx.size:
                pos = tuple(int(rng.integers(0, s)) for s in ind)
                idx[pos] = self.pick([n, -n - 1, n + 7, 2**40])
            elif bad:
                bad = False
            idx = idx.astype(np.int32 if self.p(0.35) else np.int64)
            if idx.dtype == np.int32:
                self.features.add("indices:int32")
                if bad and np.abs(idx).max() >= 2**31 - 1:
                    idx = idx  # wrapped: still out of range (the generator checks below)
            data = rand_array(rng, dt, shape, special)
            updates = rand_array(rng, dt, ind, special)
            axis_attr = axis - r if (self.opset >= 11 and self.p(0.35)) else axis
            if axis_attr < 0:
                self.features.add("negative_axis")
            if axis_attr != 0 or self.p(0.5):
                attrs["axis"] = axis_attr
            if reduction != "none" or (op == "ScatterElements" and self.opset >= 16 and self.p(0.3)):
                attrs["reduction"] = reduction
            if bad:
                iv = idx.astype(np.int64)
                bad = bool(((iv < -n) | (iv >= n)).any())
            return [data, idx, updates], attrs, bad
        if op == "ScatterND":
            shape = list(data_shape) if data_shape else self.data_dims(int(rng.integers(1, 4)))
            r = len(shape)
            k = int(rng.integers(1, r + 1))
            batch = [int(rng.integers(1, 4)) for _ in range(int(rng.integers(0, 3)))]
            slots = int(np.prod(shape[:k]))
            count = int(np.prod(batch)) if batch else 1
            if reduction == "none" and count > slots:
                batch, count = ([slots] if slots else [0]), slots
            if slots == 0:
                batch, count = [0], 0
            if reduction == "none":
                chosen = rng.permutation(slots)[:count] if count else np.zeros(0, np.int64)
                if self.p(0.05) and count >= 2:
                    chosen[1] = chosen[0]
                    self.features.add("none_duplicates")
            else:
                chosen = rng.integers(0, slots, size=count) if count else np.zeros(0, np.int64)
            tuples = np.stack(np.unravel_index(chosen, shape[:k]), axis=-1) if count else np.zeros((0, k), np.int64)
            tuples = tuples.astype(np.int64)
            neg = rng.random(tuples.shape) < (0.3 if self.p(0.5) else 0.0)
            tuples = np.where(neg, tuples - np.array(shape[:k]), tuples)
            if neg.any():
                self.features.add("negative_indices")
            idx = tuples.reshape(batch + [k])
            if bad and idx.size:
                pos = tuple(int(rng.integers(0, s)) for s in idx.shape)
                idx[pos] = self.pick([shape[pos[-1]], -shape[pos[-1]] - 1, 99])
            elif bad:
                bad = False
            data = rand_array(rng, dt, shape, special)
            updates = rand_array(rng, dt, batch + shape[k:], special)
            if reduction != "none" or (self.opset >= 16 and self.p(0.3)):
                attrs["reduction"] = reduction
            return [data, idx, updates], attrs, bad
        # TensorScatter
        r = int(rng.integers(2, 5))
        shape = list(data_shape) if data_shape else self.data_dims(r, zero=False)
        r = len(shape)
        axis = int(rng.integers(1, r))
        max_len = shape[axis]
        seq = int(rng.integers(0, max_len + 1))
        mode = self.pick(["linear", "circular"])
        ushape = list(shape)
        ushape[axis] = seq
        batch = shape[0]
        if mode == "linear":
            wi = rng.integers(0, max_len - seq + 1, size=batch)
        else:
            wi = rng.integers(0, 2 * max_len + 1, size=batch)
        if bad:
            b = int(rng.integers(0, batch))
            wi[b] = -1 if (mode == "circular" or self.p(0.5)) else max_len - seq + 1
        past = rand_array(rng, dt, shape, special)
        upd = rand_array(rng, dt, ushape, special)
        if mode != "linear" or self.p(0.3):
            attrs["mode"] = mode
        ax = axis - r if self.p(0.4) else axis
        if ax != -2 or self.p(0.3):
            attrs["axis"] = ax
        arrays = [past, upd, wi.astype(np.int64)]
        if not bad and mode == "linear" and (wi == 0).all() and self.p(0.5):
            arrays = [past, upd, None]
            self.features.add("tensorscatter:no_write_indices")
        return arrays, attrs, bad

    def choose_site(self):
        """op, dtype, reduction for the model's opset."""
        o = self.opset
        ops = []
        if o <= 10:
            ops = ["Scatter"]
        else:
            ops = ["ScatterElements", "ScatterND"]
            if o >= 24:
                ops.append("TensorScatter")
        op = self.pick(ops)
        dts = [d for d in DTYPES if allowed(op, o, d)]
        if self.container_op:  # If/Loop/Scan outputs carry the result: their types too
            dts = [d for d in dts if allowed(self.container_op, o, d)] or ["float"]
        # bias toward the common float/int types, keep the rest frequent enough
        common = [d for d in ("float", "float16", "int64", "int32", "double", "bfloat16", "bool") if d in dts]
        dt = self.pick(common) if (common and self.p(0.55)) else self.pick(dts)
        reductions = ["none"]
        if op in ("ScatterElements", "ScatterND"):
            if o >= 16:
                reductions += ["add", "mul"]
            if o >= 18:
                reductions += ["max", "min"]
        red = self.pick(reductions)
        if dt == "string" and red == "mul":
            red = "add"
        return op, dt, red

    def make_site(self, body: Body, where: str, dynamic: str | None = None, bad: bool = False,
                  chain_from: tuple | None = None, forced=None) -> tuple[str, Site, np.ndarray | None]:
        """One scatter in ``body``: returns (output name, site, data array or None)."""
        op, dt, red = forced or self.choose_site()
        data_shape = list(chain_from[2].shape) if chain_from else None
        if chain_from:
            dt = chain_from[1].dtype
            op, red = chain_from[1].op if chain_from[1].op != "TensorScatter" else op, red
            if op == "TensorScatter" and len(data_shape) < 2:
                op = "ScatterElements"
            if op == "Scatter" and self.opset > 10:
                op = "ScatterElements"
            if not allowed(op, self.opset, dt):
                op = chain_from[1].op
            if op in ("ScatterElements", "ScatterND") and dt == "string" and red == "mul":
                red = "add"
            if op in ("Scatter", "TensorScatter"):
                red = "none"
        arrays, attrs, bad = self.site_arrays(op, dt, red, bad, data_shape)
        depth = int(self.rng.integers(0, 4))
        name = self.fresh(op.lower())
        kind = "bad" if bad else ("dynamic" if dynamic else "const")
        why = dynamic or ("out of range" if bad else "")
        names: list[str | None] = []
        dyn_slot = None
        if dynamic in ("graph_input", "default", "outer_input", "func_input", "scan_input", "loop_carried"):
            dyn_slot = 0 if dynamic in ("scan_input", "loop_carried") else int(self.rng.integers(0, 3 if arrays[2] is not None else 2))
            if dynamic in ("func_input",):
                dyn_slot = 0
        for i, a in enumerate(arrays):
            if i == 0 and chain_from is not None:
                names.append(self.passthrough(chain_from[0], chain_from[2], body))
                self.features.add("chain_of_scatters")
                continue
            if a is None:
                names.append("")
                continue
            if i == dyn_slot:
                names.append(self.dynamic_source(dynamic, a, body, i, op))
                continue
            names.append(self.emit(a, body, depth))
        if dynamic == "dyn_shape":
            # updates (ScatterElements/Scatter/ND) = Expand(scalar, Shape(x with a symbolic dim))
            upd = arrays[1] if op == "TensorScatter" else arrays[2]
            v = upd.reshape(-1)[:1] if upd.size else rand_array(self.rng, dt, (1,))
            full = np.broadcast_to(v.reshape(()), upd.shape).copy() if dt != "string" else np.full(upd.shape, v[0], object)
            slot = 1 if op == "TensorScatter" else 2
            arrays[slot] = full
            xname = self.fresh("dyn_x")
            dims = list(upd.shape)
            declared = [f"n{self.counter}_{j}" if j == 0 else d for j, d in enumerate(dims)] if dims else []
            if not dims:
                dynamic = None
                kind = "const"
            self.inputs.append(oh.make_tensor_value_info(xname, TP.FLOAT, declared))
            self.feeds[xname] = np.zeros(dims, np.float32)
            shp = self.node(body, "Shape", [xname])[0]
            names[slot] = self.node(body, "Expand", [self.emit(v.reshape(()).copy() if dt != "string" else np.array(v[0], object), body, 1), shp])[0]
            self.features.add("dyn:shape_of_dynamic_dim")
        if dynamic == "attr_ref_const":
            # updates = Expand(Constant(value_float=@fv), shape): a function attribute, unknown in the function
            slot = 1 if op == "TensorScatter" else 2
            if dt == "float" and self.opset >= 12:
                c = self.fresh("attr_const")
                node = oh.make_node("Constant", [], [c])
                node.attribute.append(aref("value_float", "fv", onnx.AttributeProto.FLOAT))
                body.nodes.append(node)
                shape_name = self.emit(np.array(arrays[slot].shape, np.int64), body, 1)
                names[slot] = self.node(body, "Expand", [c, shape_name])[0]
                body.attr_value = float(arrays[slot].reshape(-1)[0]) if arrays[slot].size else 1.0
                arrays[slot] = np.full(arrays[slot].shape, np.float32(body.attr_value), np.float32)
                self.features.add("dyn:attr_ref_constant")
            else:
                kind, why = "const", ""
        node = oh.make_node(op, names, [self.fresh(name + "_out")], name=name, **attrs)
        if dynamic == "attr_ref_axis" and "axis" in attrs and op in ("ScatterElements", "Scatter", "TensorScatter"):
            a = [x for x in node.attribute if x.name == "axis"][0]
            node.attribute.remove(a)
            node.attribute.append(aref("axis", "ax", onnx.AttributeProto.INT))
            body.axis_value = attrs["axis"]
            self.features.add("dyn:attr_ref_axis")
        elif dynamic == "attr_ref_axis":
            kind, why = "const", ""
        body.nodes.append(node)
        self.features.add(f"site:{op}:{red}:{dt}")
        self.features.add(f"where:{where}")
        data = arrays[0]
        nbytes = _nbytes(dt, data.shape)
        site = Site(name, op, kind, where, dt, nbytes, red in ("add", "mul") and dt in FLOATS + ("complex64", "complex128"), why)
        if chain_from is not None and chain_from[1].kind != "const":
            site.kind = chain_from[1].kind if chain_from[1].kind != "bad" else "dynamic"
            site.why = "fed by " + chain_from[1].name
        if chain_from is not None:
            site.why = (site.why + " chained:" + chain_from[1].name).strip()
            site.float_reduction |= chain_from[1].float_reduction
        self.sites.append(site)
        return node.output[0], site, None if dynamic or bad else data

    def passthrough(self, name: str, arr: np.ndarray, body: Body) -> str:
        """``name`` (a scatter output) through ops that need no values: Identity, Reshape to itself."""
        dt = dtype_name(arr)
        choice = self.pick(["none", "identity", "reshape", "unsqueeze_squeeze"])
        if choice == "identity" and self.ok("Identity", dt):
            return self.node(body, "Identity", [name])[0]
        if choice == "reshape" and self.ok("Reshape", dt):
            return self.node(body, "Reshape", [name, self.emit(np.array(arr.shape, np.int64), body, 1)])[0]
        if choice == "unsqueeze_squeeze" and self.ok("Unsqueeze", dt) and self.ok("Squeeze", dt):
            extra, attrs = self._axes_input(body, [0], 1)
            u = self.node(body, "Unsqueeze", [name] + extra, **attrs)[0]
            extra, attrs = self._axes_input(body, [0], 1)
            return self.node(body, "Squeeze", [u] + extra, **attrs)[0]
        return name

    def dynamic_source(self, how: str, arr: np.ndarray, body: Body, slot: int, op: str) -> str:
        dt = dtype_name(arr)
        if how in ("graph_input", "outer_input"):
            name = self.fresh("in")
            self.features.add(f"dyn:{how}")
            if dt == "bfloat16":  # onnxruntime's Python API takes no bfloat16 input: a float one, cast
                self.inputs.append(oh.make_tensor_value_info(name, TP.FLOAT, list(arr.shape)))
                self.feeds[name] = arr.astype(np.float32)
                root = body
                while root.parent is not None:
                    root = root.parent
                return self.node(root, "Cast", [name], to=TP.BFLOAT16)[0]
            self.inputs.append(oh.make_tensor_value_info(name, ONNX_TYPE[dt], list(arr.shape)))
            self.feeds[name] = arr
            return name
        if how == "default" and dt == "bfloat16":
            return self.dynamic_source("graph_input", arr, body, slot, op)
        if how == "default":
            name = self.fresh("default")
            root = body
            while root.parent is not None:
                root = root.parent
            root.inits.append(to_tensor(arr, name))
            self.inputs.append(oh.make_tensor_value_info(name, ONNX_TYPE[dt], list(arr.shape)))
            if op == "TensorScatter" and slot == 2 or (op != "TensorScatter" and slot == 1):
                self.feeds[name] = arr  # indices: the same valid values
            elif self.p(0.7):
                self.alt_feeds[name] = rand_array(self.rng, dt, arr.shape)
            self.features.add("dyn:initializer_is_graph_input")
            return name
        if how in ("func_input", "scan_input", "loop_carried"):
            name = body.dyn_input
            body.dyn_value = arr
            self.features.add(f"dyn:{how}")
            return name
        raise AssertionError(how)


def aref(name: str, ref: str, attr_type) -> onnx.AttributeProto:
    """``name = @ref`` inside a function body."""
    return oh.make_attribute_ref(name, attr_type, ref_attr_name=ref)


def _nbytes(dt: str, shape) -> int:
    n = int(np.prod(shape)) if len(shape) else 1
    if dt == "string":
        return n * 8
    bits = {"bool": 8, "bfloat16": 16}.get(dt) or DTYPES[dt].itemsize * 8
    return (n * bits + 7) // 8


# ---------------------------------------------------------------------------------------------- containers


def _value_info(name: str, arr_or_dt, shape) -> onnx.ValueInfoProto:
    dt = arr_or_dt if isinstance(arr_or_dt, str) else dtype_name(arr_or_dt)
    return oh.make_tensor_value_info(name, ONNX_TYPE[dt], list(shape))


class ModelGen(Gen):
    def site_mode(self, dynamics: list[str], bad_ok: bool = True) -> tuple[str | None, bool]:
        if bad_ok and not self.has_bad and self.p(0.04):
            self.has_bad = True
            return None, True
        if dynamics and self.p(0.22):
            return self.pick(dynamics), False
        return None, False

    def output(self, name: str, dt: str, shape, body: Body | None = None) -> None:
        shape = list(shape)
        if self.p(0.1) and shape:
            shape = [f"o{self.counter}_{i}" if self.p(0.5) else d for i, d in enumerate(shape)]
        self.outputs.append(oh.make_tensor_value_info(name, ONNX_TYPE[dt], shape))

    def site_series(self, body: Body, where: str, dynamics: list[str], n: int, forced=None, data_shape=None):
        """n sites in body, some chained; returns [(out name, site, data array)]."""
        made = []
        for i in range(n):
            dyn, bad = self.site_mode(dynamics)
            if dyn in ("func_input", "scan_input", "loop_carried") and body.dyn_value is not None:
                dyn = None
            chain = None
            if made and not bad and forced is None and self.p(0.3) and made[-1][1].kind != "bad":
                chain = made[-1]
                dyn = None
            if forced is not None and data_shape is not None:
                out, site, _ = self._forced_site(body, where, dyn, bad, forced, data_shape)
            else:
                out, site, _ = self.make_site(body, where, dyn, bad, chain_from=chain, forced=forced)
            data_arr = self._last_data
            made.append((out, site, data_arr))
        return made

    def _forced_site(self, body, where, dyn, bad, forced, data_shape):
        saved = self.site_arrays

        def with_shape(op, dt, red, b, ds=None):
            return saved(op, dt, red, b, data_shape)
        self.site_arrays = with_shape
        try:
            return self.make_site(body, where, dyn, bad, forced=forced)
        finally:
            self.site_arrays = saved

    def make_site(self, body, where, dynamic=None, bad=False, chain_from=None, forced=None):
        saved = self.site_arrays
        holder = {}

        def recording(*a, **k):
            arrays, attrs, b = saved(*a, **k)
            holder["data"] = arrays[0]
            return arrays, attrs, b
        self.site_arrays = recording
        try:
            out, site, data = super().make_site(body, where, dynamic, bad, chain_from, forced)
        finally:
            self.site_arrays = saved
        self._last_data = holder["data"]
        return out, site, data

    # -- main graph
    def c_main(self, main: Body):
        made = self.site_series(main, "main", ["graph_input", "default", "dyn_shape"], int(self.rng.integers(1, 4)))
        for i, (out, site, data) in enumerate(made):
            chained_next = i + 1 < len(made) and ("chained:" + site.name) in made[i + 1][1].why
            if chained_next and self.p(0.5):
                continue  # only consumed by the next scatter
            if self.p(0.25) and allowed("Identity", self.opset, site.dtype):
                out = self.node(main, "Identity", [out])[0]
            else:
                self.features.add("scatter_output_is_graph_output")
            self.output(out, site.dtype, data.shape)

    # -- If
    def c_if(self, main: Body):
        if self.p(0.8):
            cond = self.fresh("cond")
            self.inputs.append(oh.make_tensor_value_info(cond, TP.BOOL, []))
            self.feeds[cond] = np.array(self.p(0.5))
        else:
            cond = self.emit(np.array(self.p(0.5)), main, 1)
        self.container_op = "If"
        op, dt, red = self.choose_site()
        self.container_op = None
        rank = int(self.rng.integers(2 if op == "TensorScatter" else 1, 4))
        shape = self.data_dims(rank, zero=op != "TensorScatter")
        n = int(self.rng.integers(1, 3))
        branches, outs = [], []
        for tag in ("then", "else"):
            body = Body("sub", main)
            made = self.site_series(body, f"if_{tag}", ["outer_input"], n, forced=(op, dt, red), data_shape=shape)
            bouts = []
            for out, site, data in made:
                if self.p(0.2) and allowed("Identity", self.opset, dt):
                    out = self.node(body, "Identity", [out])[0]
                bouts.append(_value_info(out, dt, data.shape))
            self.maybe_shadow(body, main)
            branches.append(oh.make_graph(body.nodes, self.fresh(tag), [], bouts, body.inits))
        outs = [self.fresh("if_out") for _ in range(n)]
        self.node(main, "If", [cond], outs, then_branch=branches[0], else_branch=branches[1])
        for o in outs:
            self.output(o, dt, shape)
        self.features.add("container:if")

    def maybe_shadow(self, body: Body, main: Body):
        """Give one of body's initializers the name of a main-graph constant it does not read."""
        if not body.inits or not main.known or not self.p(0.2):
            return
        used = {i for n in body.nodes for i in n.input}
        init = self.pick(body.inits)
        arr = nh.to_array(init)
        # same type and shape (ONNX shape inference checks a subgraph initializer against the outer value)
        candidates = [k for k, v in main.known.items() if k not in used and v.shape == arr.shape
                      and dtype_name(v) == dtype_name(arr) and not same(v, arr)]
        if not candidates:
            return
        new = self.pick(candidates)
        if any(new == i.name for i in body.inits):
            return
        old = init.name
        init.name = new
        for n in body.nodes:
            for j, x in enumerate(n.input):
                if x == old:
                    n.input[j] = new
        self.features.add("shadowed_name")

    # -- Loop
    def c_loop(self, main: Body):
        trip = int(self.rng.integers(1, 4))
        m = self.emit(np.array(trip, np.int64), main, 1)
        body = Body("sub", main)
        it, cin = self.fresh("iter"), self.fresh("cond_in")
        body.dyn_input = self.fresh("carried_in")
        self.container_op = "Loop"
        made = self.site_series(body, "loop", ["outer_input", "loop_carried"], int(self.rng.integers(1, 3)))
        self.container_op = None
        cout = self.node(body, "Identity", [cin])[0]
        binputs = [oh.make_tensor_value_info(it, TP.INT64, []), oh.make_tensor_value_info(cin, TP.BOOL, [])]
        boutputs = [oh.make_tensor_value_info(cout, TP.BOOL, [])]
        loop_inputs = [m, self.emit(np.array(True), main, 0)]  # onnx.reference runs no iteration on ""
        loop_outs, main_outs = [], []
        carried = [(o, s, d) for o, s, d in made if s.why == "loop_carried"]
        scans = [(o, s, d) for o, s, d in made if s.why != "loop_carried"]
        for out, site, data in carried:
            binputs.append(_value_info(body.dyn_input, site.dtype, data.shape))
            boutputs.append(_value_info(out, site.dtype, data.shape))
            loop_inputs.append(self.emit(body.dyn_value, main, 1))
            o = self.fresh("loop_final")
            loop_outs.append(o)
            main_outs.append((o, site.dtype, data.shape))
        if not carried and self.opset < 11:  # Loop-1 needs a carried value
            d_in, d_out = self.fresh("dummy_in"), self.fresh("dummy_out")
            body.nodes.append(oh.make_node("Identity", [d_in], [d_out]))
            binputs.append(_value_info(d_in, "float", [1]))
            boutputs.append(_value_info(d_out, "float", [1]))
            loop_inputs.append(self.emit(np.zeros(1, np.float32), main, 0))
            o = self.fresh("loop_dummy")
            loop_outs.append(o)
            main_outs.append((o, "float", [1]))
        for out, site, data in scans:
            boutputs.append(_value_info(out, site.dtype, data.shape))
            o = self.fresh("loop_scan")
            loop_outs.append(o)
            main_outs.append((o, site.dtype, [trip] + list(data.shape)))
        self.maybe_shadow(body, main)
        graph = oh.make_graph(body.nodes, self.fresh("loop_body"), binputs, boutputs, body.inits)
        self.node(main, "Loop", loop_inputs, loop_outs, body=graph)
        for o, dt, shape in main_outs:
            self.output(o, dt, shape)
        self.features.add("container:loop")

    # -- Scan
    def c_scan(self, main: Body):
        T = int(self.rng.integers(1, 4))
        body = Body("sub", main)
        body.dyn_input = self.fresh("x_t")
        self.container_op = "Scan"
        made = self.site_series(body, "scan", ["outer_input", "scan_input"], int(self.rng.integers(1, 3)))
        self.container_op = None
        xs = self.fresh("xs")
        if body.dyn_value is not None:
            v = body.dyn_value
            dt = dtype_name(v)
            stacked = np.stack([v] + [rand_array(self.rng, dt, v.shape) for _ in range(T - 1)])
            self.inputs.append(_value_info(xs, dt, stacked.shape))
            self.feeds[xs] = stacked
            binputs = [_value_info(body.dyn_input, dt, v.shape)]
        else:
            self.inputs.append(_value_info(xs, "float", [T, 2]))
            self.feeds[xs] = np.zeros((T, 2), np.float32)
            binputs = [_value_info(body.dyn_input, "float", [2])]
        boutputs = [_value_info(out, site.dtype, data.shape) for out, site, data in made]
        self.maybe_shadow(body, main)
        graph = oh.make_graph(body.nodes, self.fresh("scan_body"), binputs, boutputs, body.inits)
        outs = [self.fresh("scan_out") for _ in made]
        self.node(main, "Scan", [xs], outs, body=graph, num_scan_inputs=1)
        for o, (_, site, data) in zip(outs, made):
            self.output(o, site.dtype, [T] + list(data.shape))
        self.features.add("container:scan")

    # -- model-local functions
    def c_function(self, main: Body, nested: bool = False):
        body = Body("function")
        body.dyn_input = self.fresh("fx")
        made = self.site_series(body, "function", ["func_input", "attr_ref_const", "attr_ref_axis"],
                                int(self.rng.integers(1, 3)))
        fname = self.fresh("F")
        attrs = []
        if body.attr_value is not None:
            attrs.append("fv")
        if body.axis_value is not None:
            attrs.append("ax")
        outs = [out for out, _, _ in made]
        inner_inputs = [body.dyn_input]
        fn_opsets = [oh.make_opsetid("", self.opset), oh.make_opsetid("local", 1)]
        func = oh.make_function("local", fname, inner_inputs, outs, body.nodes, fn_opsets, attributes=attrs)
        self.functions.append(func)
        callee = fname
        if nested:  # F2(fx) = F(fx), forwarding its attributes by reference
            outer_name = self.fresh("F_outer")
            fx2 = self.fresh("fx")
            couts = [self.fresh("fo") for _ in outs]
            call = oh.make_node(fname, [fx2], couts, domain="local")
            for a in attrs:
                call.attribute.append(aref(a, a, onnx.AttributeProto.FLOAT if a == "fv" else onnx.AttributeProto.INT))
            nodes = [call]
            fouts = []
            for c in couts:
                if self.p(0.5):
                    o = self.fresh("fi")
                    nodes.append(oh.make_node("Identity", [c], [o]))
                    fouts.append(o)
                else:
                    fouts.append(c)
            self.functions.append(oh.make_function("local", outer_name, [fx2], fouts, nodes, fn_opsets, attributes=attrs))
            callee = outer_name
            self.features.add("container:nested_function")
        calls = 2 if self.p(0.2) else 1
        for _ in range(calls):
            if body.dyn_value is not None:
                arg = self.emit(body.dyn_value, main, 1) if self.p(0.5) else self.dynamic_source("graph_input", body.dyn_value, main, 0, "")
            else:
                arg = self.emit(np.zeros((1,), np.float32), main, 0)
            couts = [self.fresh("call_out") for _ in outs]
            kw = {}
            if body.attr_value is not None:
                kw["fv"] = body.attr_value
            if body.axis_value is not None:
                kw["ax"] = body.axis_value
            self.node(main, callee, [arg], couts, domain="local", **kw)
            self.features.discard(f"op:{callee}")
            for o, (_, site, data) in zip(couts, made):
                self.output(o, site.dtype, data.shape)
        self.features.add("container:function")


def generate(seed: int) -> Case:
    with np.errstate(all="ignore"):  # casts of generated values are checked, not warned about
        return _generate(seed)


def _generate(seed: int) -> Case:
    g = ModelGen(seed)
    g.has_bad = False
    g._last_data = None
    g.opset = g.pick([9, 10, 11, 13, 13, 16, 16, 18, 18, 18, 24, 24, 24])
    main = Body("main")
    kinds = ["main", "main", "if", "loop", "scan", "function", "nested_function"]
    for _ in range(int(g.rng.integers(1, 4))):
        kind = g.pick(kinds)
        if kind == "nested_function":
            g.c_function(main, nested=True)
        else:
            getattr(g, f"c_{kind}")(main)
    # a constant that is also a graph output
    if main.known and g.p(0.15):
        name = g.pick(list(main.known))
        if name not in {o.name for o in g.outputs}:
            arr = main.known[name]
            g.outputs.append(_value_info(name, arr, arr.shape))
            g.features.add("constant_is_graph_output")
    if not g.outputs:
        g.output(g.emit(np.zeros(1, np.float32), main, 0), "float", [1])
    graph = oh.make_graph(main.nodes, "fuzz", g.inputs, g.outputs, main.inits)
    opsets = [oh.make_opsetid("", g.opset)] + ([oh.make_opsetid("local", 1)] if g.functions else [])
    model = oh.make_model(graph, opset_imports=opsets, functions=g.functions)
    model.ir_version = 10 if g.opset >= 21 else 8
    size_limit = None
    consts = [s for s in g.sites if s.kind == "const"]
    if consts and not g.has_bad and g.p(0.15):
        s = g.pick(consts)
        size_limit = max(0, s.result_nbytes - int(g.p(0.5)))
        g.features.add("size_limit")
    external = g.p(0.1)
    if external:
        g.features.add("external_data")
    return Case(seed, model, g.feeds, g.sites, size_limit, g.features, external, g.alt_feeds or None)


# ---------------------------------------------------------------------------------------------- oracle

_TOL = {"float16": (1e-2, 1e-2), "float": (1e-5, 1e-5), "double": (1e-12, 1e-12), "bfloat16": (4e-2, 4e-2),
        "complex64": (1e-5, 1e-5), "complex128": (1e-12, 1e-12)}


def run_ref(model: onnx.ModelProto, feeds: dict) -> list:
    from scatter_rewrite.evaluator.reference_ops import make_evaluator

    full = dict(feeds)
    inits = {t.name: t for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name not in full and vi.name in inits:
            full[vi.name] = nh.to_array(inits[vi.name])
    return make_evaluator(model).run(None, full)


def run_any(model, feeds) -> tuple[str, list | None, str]:
    """("ort"|"ref", outputs, why onnxruntime failed)."""
    try:
        return "ort", ort_run(model, feeds, threads=1, optimize=False, overridable=True), ""
    except Exception as e:  # noqa: BLE001 - any onnxruntime refusal: the reference decides
        why = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
    m = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
    try:
        return "ref", run_ref(m, feeds), why
    except Exception as e:  # noqa: BLE001
        return "none", None, why + " | reference: " + (str(e).strip().splitlines() or [type(e).__name__])[0][:160]


def close(a, b, dt: str) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if dt not in _TOL:
        return same(a, b)
    rtol, atol = _TOL[dt]
    if dt.startswith("complex"):
        return bool(np.allclose(a.real, b.real, rtol=rtol, atol=atol, equal_nan=True)
                    and np.allclose(a.imag, b.imag, rtol=rtol, atol=atol, equal_nan=True))
    fa, fb = a.astype(np.float64), b.astype(np.float64)
    return bool(np.allclose(fa, fb, rtol=rtol, atol=atol, equal_nan=True)
                and (np.isinf(fa) == np.isinf(fb)).all() and (fa[np.isinf(fa)] == fb[np.isinf(fb)]).all())


def compare(want: list, got: list, float_reduction: bool) -> str | None:
    if len(want) != len(got):
        return f"{len(want)} outputs vs {len(got)}"
    for i, (w, g) in enumerate(zip(want, got)):
        w, g = np.asarray(w), np.asarray(g)
        if w.dtype.kind in "OUS" or g.dtype.kind in "OUS":
            ok = same(w, g)
            dt = "string"
        else:
            dt = dtype_name(w)
            ok = close(w, g, dt) if float_reduction else same(w, g)
        if not ok:
            return f"output {i} ({dt} {w.shape} vs {g.dtype} {g.shape}): want {np.ravel(w)[:8]} got {np.ravel(g)[:8]}"
    return None


def _note_name(note: dict) -> str:
    import re

    m = re.match(r"^\w+ '([^']*)'", note["node"])
    return m.group(1) if m else ""


def count_scatters(model: onnx.ModelProto) -> int:
    ops = {"Scatter", "ScatterElements", "ScatterND", "TensorScatter"}

    def walk(nodes):
        n = 0
        for node in nodes:
            if node.op_type in ops and node.domain in ("", "ai.onnx"):
                n += 1
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    n += walk(a.g.node)
                for g in a.graphs:
                    n += walk(g.node)
        return n
    return walk(model.graph.node) + sum(walk(f.node) for f in model.functions)


def expected_fold(site: Site, sites: dict, size_limit) -> bool:
    if site.kind != "const":
        return False
    if size_limit is not None and site.result_nbytes > size_limit:
        return False
    if "chained:" in site.why:
        parent = site.why.split("chained:")[1].split()[0]
        return expected_fold(sites[parent], sites, size_limit)
    return True


def check_case(case: Case, workdir: Path | None = None, cli: bool = False) -> tuple[list[str], dict]:
    """Fold the case and judge it; returns (findings, stats)."""
    import scatter_rewrite as sr
    from scatter_rewrite.errors import ScatterRewriteError

    findings: list[str] = []
    stats: dict = {"engine": None, "folded": 0, "skipped": 0, "skip_reasons": []}
    model = case.model
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # noqa: BLE001
        stats["invalid"] = str(e).splitlines()[0][:200]
        return [], stats
    sites = {s.name: s for s in case.sites}
    bad = [s for s in case.sites if s.kind == "bad"]
    tmp = None
    try:
        if case.external:
            tmp = tempfile.TemporaryDirectory(prefix="foldfuzz-")
            src = Path(tmp.name, "m.onnx")
            copy = onnx.ModelProto()
            copy.CopyFrom(model)  # onnx.save moves the tensors of the proto it saves out
            onnx.save(copy, src, save_as_external_data=True, all_tensors_to_one_file=bool(case.seed % 2),
                      size_threshold=0 if case.seed % 3 == 0 else 16)
            out = Path(tmp.name, "out", "f.onnx")
            # (fold is judged below, on the case's own feeds: validation=False)
            _, outcome = sr.fold(str(src), size_limit=case.size_limit, output=str(out), return_report=True,
                                 validate=False)
            folded = onnx.load(str(out))
        else:
            folded, outcome = sr.fold(model, size_limit=case.size_limit, return_report=True, validate=False)
    except ScatterRewriteError as e:
        msg = str(e)
        if not bad and run_any(model, case.feeds)[1] is None:
            stats["unrunnable"] = f"neither runtime runs it; fold: {msg[:150]}"  # the generator's slip
        elif not bad:
            findings.append(f"UNEXPECTED_ERROR {type(e).__name__}: {msg[:400]}")
        elif not any(f"'{s.name}'" in msg for s in bad):
            findings.append(f"ERROR_DOES_NOT_NAME_NODE {type(e).__name__}: {msg[:300]} (bad: {[s.name for s in bad]})")
        elif "\n" in msg:
            findings.append(f"ERROR_NOT_ONE_LINE: {msg[:300]}")
        stats["error"] = type(e).__name__
        if cli and workdir is not None:
            findings += check_cli(case, workdir, expect_error=True)
        return findings, stats
    except Exception as e:  # noqa: BLE001
        findings.append(f"CRASH {type(e).__name__}: {str(e)[:300]}\n{traceback.format_exc()[-1500:]}")
        return findings, stats
    try:
        onnx.checker.check_model(folded, full_check=True)
    except Exception as e:  # noqa: BLE001
        findings.append(f"CHECKER: {str(e).splitlines()[0][:300]}")
    report = outcome.passes[0]
    rewritten = {_note_name(n) for n in report["rewritten"]}
    skipped = {_note_name(n): n["detail"] for n in report["skipped"]}
    stats["folded"], stats["skipped"] = len(report["rewritten"]), len(report["skipped"])
    left = count_scatters(folded)
    if left != len(report["skipped"]):
        findings.append(f"UNREPORTED: {left} scatters left, {len(report['skipped'])} skip notes")
    if len(report["rewritten"]) + len(report["skipped"]) != count_scatters(model):
        findings.append(f"COUNT: {count_scatters(model)} scatters, {len(report['rewritten'])} rewritten + "
                        f"{len(report['skipped'])} skipped")
    for n in report["skipped"]:
        if not n["detail"].strip():
            findings.append(f"EMPTY_REASON {n['node']}")
    shadow = "is the name of a subgraph initializer"  # graph.shadowed_names: left alone by design
    if bad and not all(shadow in skipped.get(s.name, "") for s in bad):
        findings.append(f"MISSING_ERROR: bad site(s) {[s.name for s in bad]} folded without an error")
    for name, site in sites.items():
        want = expected_fold(site, sites, case.size_limit)
        if name in rewritten and not want:
            findings.append(f"FOLDED_BUT_MUST_NOT {site.kind} {site.where} {site.op} {name}: {site.why}")
        elif name in skipped and want and (shadow in skipped[name] or (
                "which was left unfolded" in skipped[name] and "chained:" in site.why
                and site.why.split("chained:")[1].split()[0] in skipped)):  # its source scatter was left
            stats["shadow_skips"] = stats.get("shadow_skips", 0) + 1  # graph.shadowed_names: by design
        elif name in skipped and want:
            stats["skip_reasons"].append(f"{site.where} {site.op} {site.dtype}: {skipped[name]}")
            findings.append(f"LEFT_UNFOLDED {site.where} {site.op} {site.dtype} {name}: {skipped[name][:300]}")
        elif name in skipped and site.kind == "const" and case.size_limit is not None \
                and "size limit" not in skipped[name] and "which was left unfolded" not in skipped[name] \
                and shadow not in skipped[name]:
            findings.append(f"WRONG_REASON {name}: {skipped[name][:200]}")
    # the oracle: original and folded compute the same
    float_red = any(s.float_reduction for s in case.sites)
    for feeds in [case.feeds] + ([{**case.feeds, **case.alt_feeds}] if case.alt_feeds else []):
        e1, want, why1 = run_any(model, feeds)
        e2, got, why2 = run_any(folded, feeds)
        if e1 == "ref" and e2 == "ort":  # compare engine with engine (onnx.reference has its own bugs)
            try:
                got, e2 = run_ref(folded, feeds), "ref"
            except Exception:  # noqa: BLE001
                pass
        stats["engine"] = f"{e1}/{e2}"
        if want is None:
            stats["unrunnable"] = why1[:200]
            # neither runtime runs the original: a model the generator got wrong, not fold's to judge
            findings = [f for f in findings if not f.startswith("LEFT_UNFOLDED")]
            break
        if got is None:
            findings.append(f"FOLDED_UNRUNNABLE (original ran in {e1}): {why2}")
            break
        if e1 == "ort" and e2 == "ref":
            findings.append(f"FOLDED_NEEDS_REFERENCE: onnxruntime runs the original, not the result: {why2}")
        diff = compare(want, got, float_red)
        if diff and e1 == "ort":
            try:  # onnxruntime itself may be wrong (string Gather): does the reference agree with the fold?
                ref = run_ref(model, feeds)
                if compare(ref, got, float_red) is None:
                    stats["ort_wrong"] = diff[:200]
                    diff = None
            except Exception:  # noqa: BLE001
                pass
        if diff:
            findings.append(f"MISMATCH [{e1}/{e2}] {diff}")
    # idempotence
    try:
        again, outcome2 = sr.fold(folded, size_limit=case.size_limit, return_report=True, validate=False)
        if outcome2.passes[0]["modified"] or outcome2.passes[0]["rewritten"]:
            findings.append(f"NOT_IDEMPOTENT: second fold rewrote {[n['node'] for n in outcome2.passes[0]['rewritten']]}")
        elif again.SerializeToString() != folded.SerializeToString() and not case.external:
            findings.append("NOT_IDEMPOTENT: second fold changed the model bytes")
    except Exception as e:  # noqa: BLE001
        findings.append(f"SECOND_FOLD_FAILED {type(e).__name__}: {str(e)[:300]}")
    if tmp is not None:
        tmp.cleanup()
    if cli and workdir is not None:
        findings += check_cli(case, workdir, expect_error=False)
    return findings, stats


def check_cli(case: Case, workdir: Path, expect_error: bool) -> list[str]:
    """The CLI on the case, validation on: exit code, one line on stderr, no traceback."""
    src = workdir / f"cli_{case.seed}.onnx"
    out = workdir / f"cli_{case.seed}.out.onnx"
    if case.external:
        copy = onnx.ModelProto()
        copy.CopyFrom(case.model)
        onnx.save(copy, src, save_as_external_data=True, size_threshold=0)
    else:
        onnx.save(case.model, src)
    args = [str(Path(sys.executable).parent / "scatter-rewrite"), "fold", str(src), "-o", str(out)]
    if case.size_limit is not None:
        args += ["--size-limit", str(case.size_limit)]
    p = subprocess.run(args, capture_output=True, text=True, timeout=600)
    findings = []
    if "Traceback" in p.stderr or "Traceback" in p.stdout:
        findings.append(f"CLI_TRACEBACK rc={p.returncode}: {p.stderr[-800:]}")
    elif expect_error:
        lines = p.stderr.strip().splitlines()
        if p.returncode != 1 or len(lines) != 1 or not lines[0].startswith("scatter-rewrite: error:"):
            findings.append(f"CLI_BAD_ERROR rc={p.returncode} stderr={p.stderr[-400:]!r}")
        if out.exists():
            findings.append("CLI_WROTE_OUTPUT_ON_ERROR")
    elif p.returncode != 0:
        findings.append(f"CLI_FAILED rc={p.returncode}: {p.stderr.strip()[-600:]}")
    for f in workdir.glob(f"cli_{case.seed}*"):
        f.unlink()
    if (workdir / f"cli_{case.seed}.out.onnx.data").exists():
        (workdir / f"cli_{case.seed}.out.onnx.data").unlink()
    return findings


# ---------------------------------------------------------------------------------------------- campaign


def main(argv=None) -> int:
    import argparse
    import json
    import time

    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--count", type=int, default=10**9)
    ap.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "fold_fuzz"))
    ap.add_argument("--cli-every", type=int, default=40)
    ap.add_argument("--seeds", default="")
    args = ap.parse_args(argv)
    out = Path(args.out)
    (out / "findings").mkdir(parents=True, exist_ok=True)
    work = out / "work"
    work.mkdir(exist_ok=True)
    deadline = time.time() + args.minutes * 60
    totals: dict = {"models": 0, "invalid": 0, "with_findings": 0, "sites": 0, "folded": 0, "skipped": 0,
                    "engines": {}, "features": {}, "errors": 0, "cli": 0, "unrunnable": 0}
    seeds = [int(s) for s in args.seeds.split(",") if s] or range(args.start, args.start + args.count)
    for seed in seeds:
        if time.time() > deadline:
            break
        try:
            case = generate(seed)
        except Exception:  # noqa: BLE001 - a generator bug: note it and go on
            (out / "findings" / f"{seed}.genfail.txt").write_text(traceback.format_exc())
            continue
        # (not with a Shape of a symbolic dim: the model holds for one size, validation feeds 4)
        cli = args.cli_every > 0 and seed % args.cli_every == 0 and "dyn:shape_of_dynamic_dim" not in case.features
        findings, stats = check_case(case, work, cli=cli)
        totals["models"] += 1
        if "invalid" in stats:
            totals["invalid"] += 1
            totals.setdefault("invalid_reasons", {}).setdefault(stats["invalid"][:80], 0)
            totals["invalid_reasons"][stats["invalid"][:80]] += 1
            continue
        totals["sites"] += len(case.sites)
        totals["folded"] += stats["folded"]
        totals["skipped"] += stats["skipped"]
        totals["errors"] += "error" in stats
        totals["cli"] += cli
        totals["unrunnable"] += "unrunnable" in stats
        if "ort_wrong" in stats:
            totals.setdefault("ort_wrong", []).append(f"{seed}: {stats['ort_wrong']}")
        if "unrunnable" in stats:
            totals.setdefault("unrunnable_why", []).append(f"{seed}: {stats['unrunnable']}")
        totals["engines"][str(stats["engine"])] = totals["engines"].get(str(stats["engine"]), 0) + 1
        for f in case.features:
            totals["features"][f] = totals["features"].get(f, 0) + 1
        if findings:
            totals["with_findings"] += 1
            onnx.save(case.model, out / "findings" / f"{seed}.onnx")
            (out / "findings" / f"{seed}.txt").write_text(
                f"seed {seed} size_limit {case.size_limit} external {case.external}\n"
                + "\n".join(findings) + "\n\nsites:\n" + "\n".join(map(str, case.sites)) + "\n")
            print(f"seed {seed}: " + " | ".join(f.splitlines()[0][:200] for f in findings), flush=True)
        if totals["models"] % 100 == 0:
            (out / "totals.json").write_text(json.dumps(totals, indent=1, sort_keys=True))
            print(f"... {totals['models']} models, {totals['with_findings']} with findings", flush=True)
    (out / "totals.json").write_text(json.dumps(totals, indent=1, sort_keys=True))
    print(json.dumps({k: v for k, v in totals.items() if k != "features"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
