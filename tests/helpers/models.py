"""Small models built in code that several test files share (the package's own builders, used
by models/ and benchmarks/ too, are in ``scatter_rewrite.testing``):

- ``gnn_model``: a GNN aggregation, messages scattered into node rows along axis 0;
  ``gnn_sum``: the bare ScatterElements add of one.
- ``function_model``: a scatter in a model-local function reading the function's attributes
  (``axis = @ax``, ``reduction = @red``): known only at the call site; ``function_called_at_two_ranks``:
  a function whose input rank is unknown inside it.
- ``accumulate_model``: TorchScript's accumulating chain, zeros -> scatter -> Add.
- ``tensor_scatter_model``: a TensorScatter (opset 24) KV-cache write; ``scatter_nd_model``: one
  ScatterND, by default on [4, 5, 3] data.
- ``scatter_reshaped_at_run_time``: a scatter whose ranks are unknown (shapes given at run time);
- ``reads_an_undeclared_value``: a model onnx.checker rejects, whose loading onnx_ir warns of;

what a model holds: ``op_types``, ``scatter_nodes``, ``scatters_left``, ``model_opset``,
``weight_bytes``; and ``vi``, a value info by (name, element type, shape).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
from onnx import TensorProto, numpy_helper

from scatter_rewrite.graph import SCATTER_OPS, iter_nodes
from scatter_rewrite.testing import LOCAL_DOMAIN, scatter_model, wrap


def make_model(nodes, inputs, outputs, opset=18, functions=()):
    imports = [oh.make_opsetid("", opset)] + ([oh.make_opsetid(LOCAL_DOMAIN, 1)] if functions else [])
    model = oh.make_model(oh.make_graph(nodes, "g", inputs, outputs), opset_imports=imports, functions=list(functions))
    model.ir_version = 8 if opset <= 17 else 10 if opset <= 23 else 11
    return model


def vi(name, elem_type, shape):
    return oh.make_tensor_value_info(name, elem_type, shape)


def ref_attribute(name: str, ref: str, kind) -> onnx.AttributeProto:
    a = onnx.AttributeProto(name=name, ref_attr_name=ref, type=kind)
    return a


def function_model(op="ScatterElements", reduction="none", axis=1, opset=18, reduction_ref=None, constant=False,
                   axis_ref=True):
    """main: out = local::F<ax=axis>(data[, indices, updates]); F holds ``op`` with ``axis = @ax``
    (a literal ``axis`` unless ``axis_ref``; ``reduction = @red`` when ``reduction_ref`` names the
    call's reduction)."""
    inner = oh.make_node(op, ["d", "i", "u"], ["o"])
    inner.attribute.append(ref_attribute("axis", "ax", onnx.AttributeProto.INT) if axis_ref
                           else oh.make_attribute("axis", axis))
    call_attrs = {"ax": axis}
    defaults = [oh.make_attribute("ax", 0)]
    if reduction_ref is not None:
        inner.attribute.append(ref_attribute("reduction", "red", onnx.AttributeProto.STRING))
        call_attrs["red"] = reduction_ref
        defaults.append(oh.make_attribute("red", "none"))
    elif op != "Scatter" and (opset >= 16 or reduction != "none"):  # (no reduction attribute before 16)
        inner.attribute.append(oh.make_attribute("reduction", reduction))
    nodes, params = [inner], ["d", "i", "u"]
    if constant:
        nodes = [oh.make_node("Constant", [], ["i"], value=oh.make_tensor("iv", TensorProto.INT64, [2, 3], [0, 1, 2, 2, 1, 0])),
                 oh.make_node("Constant", [], ["u"], value=oh.make_tensor("uv", TensorProto.FLOAT, [2, 3], [1, 2, 3, 4, 5, 6])),
                 inner]
        params = ["d"]
    function = oh.make_function(LOCAL_DOMAIN, "F", params, ["o"], nodes, opset_imports=[oh.make_opsetid("", opset)],
                                attributes=[], attribute_protos=defaults)
    args = ["data"] if constant else ["data", "indices", "updates"]
    call = oh.make_node("F", args, ["out"], domain=LOCAL_DOMAIN, name="call", **call_attrs)
    inputs = [vi("data", TensorProto.FLOAT, [4, 3])]
    if not constant:
        inputs += [vi("indices", TensorProto.INT64, [2, 3]), vi("updates", TensorProto.FLOAT, [2, 3])]
    model = make_model([call], inputs, [vi("out", TensorProto.FLOAT, [4, 3])], opset=opset, functions=[function])
    rng = np.random.default_rng(1)
    feeds = {"data": rng.standard_normal((4, 3)).astype(np.float32),
             "indices": np.array([[0, 1, 2], [2, 1, 0]]) if axis == 1 else np.array([[0, 1, 2], [3, 2, 1]]),
             "updates": rng.standard_normal((2, 3)).astype(np.float32)}
    return model, feeds


def function_node(model: onnx.ModelProto) -> onnx.NodeProto:
    (node,) = [n for n in model.functions[0].node if n.op_type.startswith("Scatter")]
    return node


def function_called_at_two_ranks(op: str, axis: int, dtype=TensorProto.FLOAT,
                                 opset: int = 18) -> onnx.ModelProto:
    """``op`` inside a function called with a rank-2 and a rank-3 input: its rank is unknown
    there."""
    function = oh.make_function(LOCAL_DOMAIN, "F", ["a"], ["b"],
                                [oh.make_node(op, ["a"], ["b"], axis=axis)],
                                opset_imports=[oh.make_opsetid("", opset)])
    graph = oh.make_graph([oh.make_node("F", ["x"], ["y"], domain=LOCAL_DOMAIN),
                           oh.make_node("F", ["z"], ["w"], domain=LOCAL_DOMAIN)], "g",
                          [vi("x", dtype, [2, 3]), vi("z", dtype, [2, 3, 4])],
                          [vi("y", dtype, [2, 3]), vi("w", dtype, [2, 3, 4])])
    return oh.make_model(graph, functions=[function],
                         opset_imports=[oh.make_opsetid("", opset), oh.make_opsetid(LOCAL_DOMAIN, 1)])

def gnn_model(reduction: str, *, nodes: int | str = "n", edges: int | str = "e", feats: int = 8,
              dtype: int = TensorProto.FLOAT, opset: int = 18, messages: str = "input",
              expand_to: str = "constant", outer_type: int | None = None) -> onnx.ModelProto:
    """A GNN aggregation as PyTorch exports it: ``y[N, F] = ScatterElements(x, index, msg, axis=0)``
    with ``index = Expand(Unsqueeze(dst, 1), ...)``, shapes inferred.

    messages: "input" (a graph input ``msg[E, F]``, inputs x, dst, msg) or "gathered" (``x[src]``,
    inputs x, src, dst). expand_to: "constant" (a Constant ``[1, F]``) or "shape" (``Shape(msg)``,
    for a dynamic ``E``). outer_type: inputs and output of that type, cast to and from ``dtype``
    inside the graph.
    """
    io_type = outer_type or dtype
    x, out, body = "x", "y", []
    if outer_type is not None:
        x, out = "x_inner", "y_inner"
        body.append(oh.make_node("Cast", ["x"], [x], to=dtype))
    inputs = [vi("x", io_type, [nodes, feats])]
    if messages == "gathered":
        body.append(oh.make_node("Gather", [x, "src"], ["msg"], axis=0))
        inputs += [vi("src", TensorProto.INT64, [edges]), vi("dst", TensorProto.INT64, [edges])]
    else:
        inputs += [vi("dst", TensorProto.INT64, [edges]), vi("msg", io_type, [edges, feats])]
    body += [oh.make_node("Constant", [], ["one"], value=oh.make_tensor("one_v", TensorProto.INT64, [1], [1])),
             oh.make_node("Unsqueeze", ["dst", "one"], ["dst2"])]
    if expand_to == "shape":
        body.append(oh.make_node("Shape", ["msg"], ["msg_shape"]))
    else:
        body.append(oh.make_node("Constant", [], ["msg_shape"],
                                 value=oh.make_tensor("s_v", TensorProto.INT64, [2], [1, feats])))
    body += [oh.make_node("Expand", ["dst2", "msg_shape"], ["index"]),
             oh.make_node("ScatterElements", [x, "index", "msg"], [out], axis=0, reduction=reduction,
                          name="aggregate")]
    if outer_type is not None:
        body.append(oh.make_node("Cast", [out], ["y"], to=outer_type))
    graph = oh.make_graph(body, "gnn", inputs, [vi("y", io_type, [nodes, feats])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)


def gnn_sum(edges: int | str = "E", dtype: int = TensorProto.FLOAT, nodes: int = 10, feats: int = 4) -> onnx.ModelProto:
    """ScatterElements add, data d[N, F], indices i[E, F], updates u[E, F], opset 18: a GNN's
    neighbour sum as one node."""
    node = oh.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=0, reduction="add")
    inputs = [vi("d", dtype, [nodes, feats]), vi("i", TensorProto.INT64, [edges, feats]),
              vi("u", dtype, [edges, feats])]
    graph = oh.make_graph([node], "g", inputs, [vi("y", dtype, [nodes, feats])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=9)


def _renamed(node: onnx.NodeProto, branch: str) -> onnx.NodeProto:
    """``node`` for an If branch: its own outputs (and the graph output y) suffixed by the branch."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.output[:] = [f"{o}_{branch}" for o in node.output]
    own = {"z0", "z", "s", "scattered"}
    copy.input[:] = [f"{i}_{branch}" if i in own else i for i in node.input]
    if copy.name:
        copy.name = f"{copy.name}_{branch}"
    return copy



def accumulate_model(op: str = "ScatterElements", *, zeros: str = "constant", consumer: str = "Add",
                     reduction: str | None = None, where: str = "main", opset: int | None = None) -> onnx.ModelProto:
    """x + scatter(zeros, indices, updates), as TorchScript exports scatter_add/index_add/index_put_.

    zeros: "constant", "constant_of_shape" (ConstantOfShape without value: zeros), "cast" (a Cast
    of a zero Constant), "initializer", "input_initializer" (an initializer a graph input overrides:
    not constant), "nonzero" (a Constant of ones). consumer: the op the scatter's result goes to.
    where: "main", "if" (both branches), "function". opset: 9 for Scatter, 18 otherwise, unless given.
    """
    opset = opset or (9 if op == "Scatter" else 18)
    shape = [4, 5]
    nodes, inits, extra_inputs = [], [], []
    zero_array = np.zeros(shape, np.float32)
    if zeros in ("constant", "nonzero", "cast"):
        value = zero_array if zeros != "nonzero" else np.ones(shape, np.float32)
        nodes.append(oh.make_node("Constant", [], ["z0" if zeros == "cast" else "z"],
                                  value=numpy_helper.from_array(value.astype(np.float64) if zeros == "cast" else value)))
        if zeros == "cast":
            nodes.append(oh.make_node("Cast", ["z0"], ["z"], to=TensorProto.FLOAT))
    elif zeros == "constant_of_shape":
        nodes += [oh.make_node("Shape", ["x"], ["s"]), oh.make_node("ConstantOfShape", ["s"], ["z"])]
    elif zeros in ("initializer", "input_initializer"):
        inits.append(numpy_helper.from_array(zero_array, "z"))
        if zeros == "input_initializer":
            extra_inputs.append(oh.make_tensor_value_info("z", TensorProto.FLOAT, shape))
    if op == "ScatterND":
        indices = oh.make_tensor_value_info("indices", TensorProto.INT64, [3, 1])
        updates = oh.make_tensor_value_info("updates", TensorProto.FLOAT, [3, 5])
    else:
        indices = oh.make_tensor_value_info("indices", TensorProto.INT64, [3, 5])
        updates = oh.make_tensor_value_info("updates", TensorProto.FLOAT, [3, 5])
    attrs = {"reduction": reduction} if reduction else {}
    nodes.append(oh.make_node(op, ["z", "indices", "updates"], ["scattered"], name="scatter_0", **attrs))
    nodes.append(oh.make_node(consumer, ["x", "scattered"], ["y"], name="accumulate_0"))
    x = oh.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = oh.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    inputs = [x, indices, updates]
    opsets = [oh.make_opsetid("", opset)]
    functions = []
    if where == "main":
        graph = oh.make_graph(nodes, "main", inputs + extra_inputs, [y], inits)
    elif where == "if":
        assert not inits
        branches = [oh.make_graph([_renamed(n, branch) for n in nodes], branch, [],
                                  [oh.make_tensor_value_info(f"y_{branch}", TensorProto.FLOAT, shape)])
                    for branch in ("then", "else")]
        graph = oh.make_graph([oh.make_node("If", ["cond"], ["y"], then_branch=branches[0], else_branch=branches[1])],
                              "main", inputs + [oh.make_tensor_value_info("cond", TensorProto.BOOL, [])], [y])
    else:
        assert not inits
        functions = [oh.make_function("local", "Accumulate", ["x", "indices", "updates"], ["y"], nodes,
                                      opset_imports=opsets)]
        graph = oh.make_graph([oh.make_node("Accumulate", ["x", "indices", "updates"], ["y"], domain="local")],
                              "main", inputs, [y])
        opsets = opsets + [oh.make_opsetid("local", 1)]
    model = oh.make_model(graph, opset_imports=opsets, functions=functions)
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model



def tensor_scatter_model(mode: str = "linear", with_indices: bool = True, axis: int = -2, where: str = "main",
                         cache_shape=(2, 3, 8, 4), update_shape=(2, 3, 2, 4)) -> onnx.ModelProto:
    """A TensorScatter (opset 24) KV-cache write ``present = TensorScatter(past, update[, write_indices])``
    named "kv", ``where`` ``scatter_rewrite.testing.wrap`` puts it."""
    inputs = [vi("past", TensorProto.FLOAT, list(cache_shape)), vi("update", TensorProto.FLOAT, list(update_shape))]
    if with_indices:
        inputs.append(vi("write_indices", TensorProto.INT64, [cache_shape[0]]))
    node = oh.make_node("TensorScatter", [i.name for i in inputs], ["present"], axis=axis, mode=mode, name="kv")
    graph = wrap(node, inputs, vi("present", TensorProto.FLOAT, list(cache_shape)), where, 24)
    functions = graph.pop("functions", [])
    imports = [oh.make_opsetid("", 24)] + ([oh.make_opsetid(LOCAL_DOMAIN, 1)] if functions else [])
    return oh.make_model(graph["graph"], opset_imports=imports, functions=functions)


def model_opset(model: onnx.ModelProto) -> int:
    """The model's default-domain opset (0 without one)."""
    return max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] or [0])


def weight_bytes(path) -> dict[str, bytes]:
    """The bytes of every initializer named W*, read through onnx's own external-data loader."""
    model = onnx.load(str(path), load_external_data=True)
    return {t.name: numpy_helper.to_array(t).tobytes() for t in model.graph.initializer if t.name.startswith("W")}


def op_types(model: onnx.ModelProto) -> list[str]:
    """The op type of every node in the main graph, subgraphs and functions, in graph order."""
    return [node.op_type for node, _ in iter_nodes(ir.serde.deserialize_model(model))]


def scatter_nodes(model: onnx.ModelProto) -> list[ir.Node]:
    """Every scatter node (``SCATTER_OPS``, any domain) in the main graph, subgraphs and functions."""
    return [n for n, _ in iter_nodes(ir.serde.deserialize_model(model)) if n.op_type in SCATTER_OPS]


def scatter_nd_model(reduction: str | None = None, *, data_shape=(4, 5, 3), indices_shape=(6, 2),
                     updates_shape=(6, 3), **kw) -> onnx.ModelProto:
    """``scatter_rewrite.testing.scatter_model``'s ScatterND (its keywords: ``opset``, ``data_type``,
    ``where``, ...), on [4, 5, 3] data unless told; a ``reduction`` attribute only when given (so
    ``"none"`` is written)."""
    extra = {} if reduction is None else {"reduction": reduction}
    return scatter_model("ScatterND", data_shape=data_shape, indices_shape=indices_shape,
                         updates_shape=updates_shape, **kw, **extra)


def scatters_left(model: onnx.ModelProto) -> list[str]:
    """The op type of every scatter a model still holds (``scatter_nodes``)."""
    return [n.op_type for n in scatter_nodes(model)]


def scatter_reshaped_at_run_time() -> onnx.ModelProto:
    """A ScatterElements on data, indices and updates reshaped to a shape given at run time (of
    run-time length): their ranks are unknown, the model valid, and no generated inputs run it."""
    graph = oh.make_graph(
        [oh.make_node("Reshape", ["flat", "shape"], ["data"]),
         oh.make_node("Reshape", ["flat_indices", "shape"], ["indices"]),
         oh.make_node("Reshape", ["flat_updates", "shape"], ["updates"]),
         oh.make_node("ScatterElements", ["data", "indices", "updates"], ["scattered"]),
         oh.make_node("ReduceSum", ["scattered"], ["out"], keepdims=0)], "g",
        [vi("flat", TensorProto.FLOAT, [20]), vi("shape", TensorProto.INT64, ["n"]),
         vi("flat_indices", TensorProto.INT64, [10]), vi("flat_updates", TensorProto.FLOAT, [10])],
        [vi("out", TensorProto.FLOAT, [])])  # (a graph output needs a shape)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


def integer_scatter(reduction: str, dtype=TensorProto.INT64, rows: int = 4,
                    updates: int = 6) -> onnx.ModelProto:
    """An integer ScatterElements on axis 0 with the given reduction, every input a graph input."""
    graph = oh.make_graph(
        [oh.make_node("ScatterElements", ["data", "indices", "updates"], ["out"], axis=0,
                      reduction=reduction)], "integer_scatter",
        [oh.make_tensor_value_info("data", dtype, [rows, 3]),
         oh.make_tensor_value_info("indices", TensorProto.INT64, [updates, 3]),
         oh.make_tensor_value_info("updates", dtype, [updates, 3])],
        [oh.make_tensor_value_info("out", dtype, [rows, 3])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


def reads_an_undeclared_value(opset: int = 18) -> onnx.ModelProto:
    """A max scatter whose result an Add adds to ``ghost``, which nothing declares: onnx.checker
    rejects the model, and onnx_ir's loader warns of it (then makes ``ghost`` a dangling value)."""
    nodes = [oh.make_node("ScatterElements", ["x", "i", "u"], ["s"], axis=0, reduction="max",
                          name="scatter_max"),
             oh.make_node("Add", ["s", "ghost"], ["y"], name="add_ghost")]
    return make_model(nodes, [vi("x", TensorProto.FLOAT, [4, 3]), vi("i", TensorProto.INT64, [2, 3]),
                              vi("u", TensorProto.FLOAT, [2, 3])],
                      [vi("y", TensorProto.FLOAT, [4, 3])], opset=opset)
