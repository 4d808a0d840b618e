"""Small scatter models built in code, for the tests and for the sample models in ``models/``.

Every builder returns an ``onnx.ModelProto``. ``wrap`` puts a one-node graph where the tests want
it: the main graph, both branches of an ``If``, a ``Loop`` body, or a model-local function.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto

__all__ = [
    "constant_scatter_model", "external_weights_model", "legacy_chain_model",
    "LOCAL_DOMAIN", "scatter_model", "wrap",
]

LOCAL_DOMAIN = "local"


def _vi(name: str, elem_type: int, shape: Sequence[int | str | None] | None):
    return oh.make_tensor_value_info(name, elem_type, shape)


def scatter_model(
    op_type: str = "ScatterElements",
    *,
    opset: int = 18,
    data_shape: Sequence[int | str] = (4, 5),
    indices_shape: Sequence[int | str] = (2, 5),
    updates_shape: Sequence[int | str] | None = None,
    data_type: int = TensorProto.FLOAT,
    indices_type: int = TensorProto.INT64,
    where: str = "main",
    **attributes,
) -> onnx.ModelProto:
    """A model whose inputs ``data``, ``indices``, ``updates`` feed one scatter node.

    ``where``: "main", "if" (the node in both branches of an If on a bool input ``cond``),
    "loop" (in a Loop body run twice, data carried), or "function" (in a local function).
    For ScatterND pass ``indices_shape`` with the index tuple last and ``updates_shape``.
    """
    updates_shape = list(indices_shape if updates_shape is None else updates_shape)
    inputs = [
        _vi("data", data_type, list(data_shape)),
        _vi("indices", indices_type, list(indices_shape)),
        _vi("updates", data_type, updates_shape),
    ]
    output = _vi("output", data_type, list(data_shape))
    node = oh.make_node(
        op_type,
        ["data", "indices", "updates"],
        ["output"],
        name=f"{op_type.lower()}_0",
        **attributes,
    )
    graph = wrap(node, inputs, output, where, opset)
    functions = graph.pop("functions", [])
    model = oh.make_model(
        graph["graph"],
        opset_imports=[oh.make_opsetid("", opset)]
        + ([oh.make_opsetid(LOCAL_DOMAIN, 1)] if functions else []),
        functions=functions,
    )
    model.ir_version = min(model.ir_version, 8) if opset <= 17 else model.ir_version
    return model


def wrap(node: onnx.NodeProto, inputs: list, output, where: str, opset: int) -> dict:
    """A graph holding ``node`` at the place ``where`` names (see :func:`scatter_model`)."""
    names = [i.name for i in inputs]
    if where == "main":
        return {"graph": oh.make_graph([node], "main", inputs, [output])}
    if where == "if":
        branches = []
        for branch in ("then", "else"):
            inner = onnx.NodeProto()
            inner.CopyFrom(node)
            inner.output[0] = f"{branch}_out"
            inner.name = f"{node.name}_{branch}"
            branches.append(
                oh.make_graph(
                    [inner],
                    f"{branch}_branch",
                    [],
                    [_vi(f"{branch}_out", output.type.tensor_type.elem_type, None)],
                )
            )
        if_node = oh.make_node(
            "If",
            ["cond"],
            [output.name],
            name="if_0",
            then_branch=branches[0],
            else_branch=branches[1],
        )
        return {
            "graph": oh.make_graph(
                [if_node], "main", inputs + [_vi("cond", TensorProto.BOOL, [])], [output]
            )
        }
    if where == "loop":
        elem = output.type.tensor_type.elem_type
        inner = onnx.NodeProto()
        inner.CopyFrom(node)
        inner.input[0] = "carried_in"
        inner.output[0] = "carried_out"
        cond_out = oh.make_node("Identity", ["cond_in"], ["cond_out"])
        body = oh.make_graph(
            [inner, cond_out],
            "loop_body",
            [
                _vi("iter", TensorProto.INT64, []),
                _vi("cond_in", TensorProto.BOOL, []),
                _vi("carried_in", elem, None),
            ],
            [_vi("cond_out", TensorProto.BOOL, []), _vi("carried_out", elem, None)],
        )
        trip = oh.make_node(
            "Constant", [], ["trip"], value=oh.make_tensor("trip_v", TensorProto.INT64, [], [2])
        )
        true = oh.make_node(
            "Constant", [], ["true"], value=oh.make_tensor("true_v", TensorProto.BOOL, [], [True])
        )
        loop = oh.make_node(
            "Loop", ["trip", "true", names[0]], [output.name], name="loop_0", body=body
        )
        return {"graph": oh.make_graph([trip, true, loop], "main", inputs, [output])}
    if where == "function":
        inner = onnx.NodeProto()
        inner.CopyFrom(node)
        inner.input[:] = ["d", "i", "u"]
        inner.output[:] = ["o"]
        function = oh.make_function(LOCAL_DOMAIN, "ScatterFn", ["d", "i", "u"], ["o"], [inner],
                                    opset_imports=[oh.make_opsetid("", opset)])
        call = oh.make_node("ScatterFn", names, [output.name], domain=LOCAL_DOMAIN, name="call_0")
        return {"graph": oh.make_graph([call], "main", inputs, [output]), "functions": [function]}
    raise ValueError(f"unknown place {where!r}")


def legacy_chain_model(num_nodes: int, scatter_every: int = 10, opset: int = 10) -> onnx.ModelProto:
    """A chain of Add/Mul on a 4x4 tensor with a ``Scatter`` every ``scatter_every`` nodes: a big
    legacy-opset model for the scale tests and benchmarks (upgrading thousands of nodes)."""
    nodes, inits = [], [
        oh.make_tensor("one", TensorProto.FLOAT, [4, 4], np.ones(16, np.float32)),
        oh.make_tensor("idx", TensorProto.INT64, [1, 4], [3, 2, 1, 0]),
        oh.make_tensor("upd", TensorProto.FLOAT, [1, 4], [1, 2, 3, 4]),
    ]
    prev = "x"
    for i in range(num_nodes):
        out = f"t{i}" if i < num_nodes - 1 else "y"
        if i % scatter_every == scatter_every - 1:
            nodes.append(
                oh.make_node("Scatter", [prev, "idx", "upd"], [out], axis=0, name=f"scatter_{i}")
            )
        else:
            nodes.append(
                oh.make_node("Add" if i % 2 else "Mul", [prev, "one"], [out], name=f"op_{i}")
            )
        prev = out
    graph = oh.make_graph(
        nodes,
        "chain",
        [_vi("x", TensorProto.FLOAT, [4, 4])],
        [_vi("y", TensorProto.FLOAT, [4, 4])],
        inits,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 7
    return model


def external_weights_model(
    folder,
    total_bytes: int,
    *,
    num_weights: int = 4,
    rows: int = 16,
    opset: int = 10,
    name: str = "big.onnx",
    data_name: str = "big.weights",
):
    """Write a model whose float32 weights (``num_weights`` initializers, ``total_bytes`` in all)
    sit in the external data file ``data_name`` beside ``name`` in ``folder``; return its path.

    The weights are only read through cheap ops: ``y = Scatter(x + W0[k0] + W1[k1] + ..., idx, upd,
    axis=1)`` with ``x`` [1, C], ``idx`` [1, 4] and ``upd`` [1, 4] graph inputs, so running it
    touches one row per weight; and a constant scatter (what fold folds), ``z = Scatter(W0[k0],
    cidx, cupd, axis=1)`` with constant indices and updates. Weights are written in chunks (a
    deterministic pattern, different per weight and row), so building a multi-GiB model needs little
    memory."""
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cols = max(total_bytes // (4 * rows * num_weights), 4)
    row_bytes = cols * 4
    nodes, inits = [], []
    prev = "x"
    with open(folder / data_name, "wb") as data:
        for w in range(num_weights):
            offset = data.tell()
            for r in range(rows):
                data.write(
                    (
                        np.arange(cols, dtype=np.float32) * np.float32(1e-6)
                        + np.float32(w * rows + r)
                    ).tobytes()
                )
            tensor = onnx.TensorProto(name=f"W{w}", data_type=TensorProto.FLOAT, dims=[rows, cols])
            tensor.data_location = TensorProto.EXTERNAL
            for key, value in (
                ("location", data_name),
                ("offset", str(offset)),
                ("length", str(rows * row_bytes)),
            ):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
            inits.append(tensor)
            inits.append(oh.make_tensor(f"k{w}", TensorProto.INT64, [1], [(3 * w + 1) % rows]))
            nodes.append(
                oh.make_node("Gather", [f"W{w}", f"k{w}"], [f"row{w}"], axis=0, name=f"gather_{w}")
            )
            nodes.append(oh.make_node("Add", [prev, f"row{w}"], [f"sum{w}"], name=f"add_{w}"))
            prev = f"sum{w}"
    nodes.append(oh.make_node("Scatter", [prev, "idx", "upd"], ["y"], axis=1, name="scatter_0"))
    inits.append(oh.make_tensor("cidx", TensorProto.INT64, [1, 4], [0, cols - 1, 2, 1]))
    inits.append(oh.make_tensor("cupd", TensorProto.FLOAT, [1, 4], [-1.0, -2.0, -3.0, -4.0]))
    nodes.append(
        oh.make_node("Scatter", ["row0", "cidx", "cupd"], ["z"], axis=1, name="scatter_const")
    )
    graph = oh.make_graph(
        nodes,
        "external_weights",
        [
            _vi("x", TensorProto.FLOAT, [1, cols]),
            _vi("idx", TensorProto.INT64, [1, 4]),
            _vi("upd", TensorProto.FLOAT, [1, 4]),
        ],
        [_vi("y", TensorProto.FLOAT, [1, cols]), _vi("z", TensorProto.FLOAT, [1, cols])],
        inits,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 7
    onnx.save(model, folder / name)
    return folder / name


def constant_scatter_model(
    op_type: str = "ScatterElements",
    *,
    data: np.ndarray,
    indices: np.ndarray,
    updates: np.ndarray,
    opset: int = 18,
    where: str = "main",
    **attributes,
) -> onnx.ModelProto:
    """A model whose one scatter (``op_type`` with ``attributes``) has only constant inputs.

    The model has one input ``x`` (shaped like ``data``) and computes ``y = x + scatter(...)``
    (``Or`` for bool, so every dtype with Add works), so there is something to run and vary.
    ``where`` puts the scatter: "main" (inputs are main-graph initializers), "if" (then branch:
    data from the outer scope, indices/updates Constant nodes; else branch: the branch's own
    initializers; both branches hold the scatter), "loop" (in a Loop body run twice: data from
    the outer scope, indices a Constant node, updates a body initializer), "function" (in a
    model-local function, every input a Constant node). For TensorScatter pass ``indices`` as the
    write_indices (or None to omit them) and ``updates`` as the update.
    """
    names = ["data", "indices", "updates"]
    if op_type == "TensorScatter":
        names = ["data", "updates"] + ([] if indices is None else ["indices"])
    scatter = _ConstantScatter(op_type, names, {"data": data, "indices": indices,
                                                "updates": updates}, attributes, opset)
    x = _vi("x", scatter.elem, list(data.shape))
    y = _vi("y", scatter.elem, list(data.shape))
    if where not in _PLACES:
        raise ValueError(f"unknown place {where!r}")
    nodes, inits, functions, extra_inputs = _PLACES[where](scatter)
    nodes.append(oh.make_node(scatter.combine, ["x", "s"], ["y"], name="combine"))
    graph = oh.make_graph(nodes, "constant_scatter", [x] + extra_inputs, [y], inits)
    model = oh.make_model(
        graph,
        opset_imports=[oh.make_opsetid("", opset)]
        + ([oh.make_opsetid(LOCAL_DOMAIN, 1)] if functions else []),
        functions=functions,
    )
    model.ir_version = min(model.ir_version, 8) if opset <= 17 else model.ir_version
    return model


@dataclasses.dataclass
class _ConstantScatter:
    """constant_scatter_model's scatter: its op, its inputs in order (``names``), their constant
    values (``arrays``), its attributes; the nodes and tensors each place builds from them."""

    op_type: str
    names: list[str]
    arrays: dict[str, np.ndarray]
    attributes: dict
    opset: int

    @property
    def elem(self) -> int:
        return oh.np_dtype_to_tensor_dtype(self.arrays["data"].dtype)

    @property
    def combine(self) -> str:
        """The op that adds the scatter's result to ``x``: ``Or`` for bool."""
        return "Or" if self.arrays["data"].dtype == np.bool_ else "Add"

    def node(self, out: str, renames: dict | None = None,
             name: str = "scatter_0") -> onnx.NodeProto:
        renames = renames or {}
        return oh.make_node(
            self.op_type, [renames.get(n, n) for n in self.names], [out], name=name,
            **self.attributes
        )

    def tensor(self, name: str, source: str) -> onnx.TensorProto:
        return onnx.numpy_helper.from_array(self.arrays[source], name)

    def constant(self, out: str, source: str) -> onnx.NodeProto:
        return oh.make_node("Constant", [], [out], value=self.tensor(f"{out}_value", source))


# Each place of constant_scatter_model: (nodes computing "s", initializers, functions, the graph
# inputs besides x).
_Placed = tuple[list, list, list, list]


def _in_main(scatter: _ConstantScatter) -> _Placed:
    return [scatter.node("s")], [scatter.tensor(n, n) for n in scatter.names], [], []


def _in_if(scatter: _ConstantScatter) -> _Placed:
    elem, used = scatter.elem, scatter.names
    then_nodes = [scatter.constant(f"then_{n}", n) for n in used if n != "data"]
    then_nodes.append(
        scatter.node("then_out", {n: f"then_{n}" for n in used if n != "data"}, "scatter_then")
    )
    else_graph = oh.make_graph(
        [scatter.node("else_out", {n: f"else_{n}" for n in used}, "scatter_else")],
        "else_branch",
        [],
        [_vi("else_out", elem, None)],
        [scatter.tensor(f"else_{n}", n) for n in used],
    )
    then_graph = oh.make_graph(then_nodes, "then_branch", [], [_vi("then_out", elem, None)])
    nodes = [
        oh.make_node(
            "If", ["cond"], ["s"], name="if_0", then_branch=then_graph, else_branch=else_graph
        )
    ]
    return nodes, [scatter.tensor("data", "data")], [], [_vi("cond", TensorProto.BOOL, [])]


def _in_loop(scatter: _ConstantScatter) -> _Placed:
    elem, data = scatter.elem, scatter.arrays["data"]
    renames = {"indices": "body_indices", "updates": "body_updates"}
    body_nodes = [scatter.constant("body_indices", "indices")] if "indices" in scatter.names else []
    body_nodes += [
        scatter.node("scattered", renames),
        oh.make_node("Identity", ["cond_in"], ["cond_out"]),
        oh.make_node(scatter.combine, ["carried_in", "scattered"], ["carried_out"]),
    ]
    body = oh.make_graph(
        body_nodes,
        "loop_body",
        [
            _vi("iter", TensorProto.INT64, []),
            _vi("cond_in", TensorProto.BOOL, []),
            _vi("carried_in", elem, None),
        ],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("carried_out", elem, None)],
        [scatter.tensor("body_updates", "updates")],
    )
    inits = [
        scatter.tensor("data", "data"),
        onnx.numpy_helper.from_array(np.zeros_like(data), "zeros"),
        oh.make_tensor("trip", TensorProto.INT64, [], [2]),
        oh.make_tensor("true", TensorProto.BOOL, [], [True]),
    ]
    nodes = [oh.make_node("Loop", ["trip", "true", "zeros"], ["s"], name="loop_0", body=body)]
    return nodes, inits, [], []


def _in_function(scatter: _ConstantScatter) -> _Placed:
    body = [scatter.constant(f"f_{n}", n) for n in scatter.names]
    body.append(scatter.node("o", {n: f"f_{n}" for n in scatter.names}))
    functions = [oh.make_function(LOCAL_DOMAIN, "ConstScatter", [], ["o"], body,
                                  opset_imports=[oh.make_opsetid("", scatter.opset)])]
    nodes = [oh.make_node("ConstScatter", [], ["s"], domain=LOCAL_DOMAIN, name="call_0")]
    return nodes, [], functions, []


_PLACES = {"main": _in_main, "if": _in_if, "loop": _in_loop, "function": _in_function}
