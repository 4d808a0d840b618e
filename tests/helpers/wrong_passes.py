"""Passes that rewrite wrongly on purpose, to show that validation catches a wrong rewrite."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
from onnx import TensorProto
from onnx import numpy_helper as nh

from scatter_rewrite.graph import constant_tensor, iter_nodes
from scatter_rewrite.passes.base import ScatterPass
from scatter_rewrite.passes.repair import RepairPass, find_sites
from tests.helpers.models import vi


class NegateScatterOutputs(ScatterPass):
    """Negates every ScatterElements output (validation must catch it)."""

    name = "negate-output"

    def run(self, model):
        for node, scope in iter_nodes(model):
            if node.op_type == "ScatterElements":
                neg = ir.node("Neg", [node.outputs[0]])
                neg.outputs[0].type, neg.outputs[0].shape = node.outputs[0].type, node.outputs[0].shape
                ir.convenience.replace_all_uses_with(node.outputs[0], neg.outputs[0], replace_graph_outputs=True)
                neg.replace_input_with(0, node.outputs[0])
                scope.body.insert_after(node, neg)
                self.rewrote(node, scope, "negated (wrong on purpose)")


class UpgradeAndRetypeIndices(ScatterPass):
    """Scatter -> ScatterElements (right) and the graph input 'i' retyped to int32 (wrong on
    purpose: onnxruntime refuses the int64 inputs the original takes)."""

    name = "upgrade-and-retype"

    def run(self, model):
        for node, scope in iter_nodes(model):
            if node.op_type == "Scatter":
                node.op_type = "ScatterElements"
                self.rewrote(node, scope, "renamed")
        for value in model.graph.inputs:
            if value.name == "i":
                value.type = ir.TensorType(ir.DataType.INT32)


class IntegerSumThroughFloat64(ScatterPass):
    """An int64 ScatterElements(reduction="add") computed in float64 and cast back: exact on small
    integers, off past 2**53 (inexact on purpose: validation's integers near the type's limits
    must catch it)."""

    name = "integer-sum-through-float64"

    def run(self, model):
        for node, scope in iter_nodes(model):
            if (node.op_type != "ScatterElements" or node.attributes.get("reduction") is None
                    or node.attributes["reduction"].value != "add"):
                continue
            casts = [ir.node("Cast", [node.inputs[k]], attributes={"to": ir.DataType.DOUBLE})
                     for k in (0, 2)]
            for cast in casts:
                scope.body.insert_before(node, cast)
            node.replace_input_with(0, casts[0].outputs[0])
            node.replace_input_with(2, casts[1].outputs[0])
            back = ir.node("Cast", [node.outputs[0]], attributes={"to": ir.DataType.INT64})
            back.outputs[0].type, back.outputs[0].shape = node.outputs[0].type, node.outputs[0].shape
            node.outputs[0].type = ir.TensorType(ir.DataType.DOUBLE)
            ir.convenience.replace_all_uses_with(node.outputs[0], back.outputs[0],
                                                 replace_graph_outputs=True)
            back.replace_input_with(0, node.outputs[0])
            scope.body.insert_after(node, back)
            self.rewrote(node, scope, "summed in float64 (inexact on purpose)")


class Unregistered(ScatterPass):
    """An invalid rewrite on purpose: an Add becomes an op no opset has (onnx.checker must catch it)."""

    name = "unregistered-op"

    def run(self, model):
        for node, scope in iter_nodes(model):
            if node.op_type == "Add":
                node.op_type = "NoSuchOp"
                self.rewrote(node, scope, "-> NoSuchOp (invalid on purpose)")
                return


class _ChangeOneTerm(ScatterPass):
    """Changes the first element of the graph input ``name`` (a term of a float sum, or the slot it
    goes to) through a ScatterND on it, wrong on purpose: what a lowering that mishandles one update
    among many would do. Rank-2 inputs (the GNN's [E, F] updates and indices)."""

    value: object
    reduction: str

    def __init__(self, name: str):
        super().__init__()
        self.input_name = name

    def run(self, model):
        source = next(v for v in model.graph.inputs if v.name == self.input_name)
        dtype = source.dtype.numpy()
        where = ir.val("first", const_value=ir.tensor(np.zeros((1, 2), np.int64)))
        value = ir.val("changed_to", const_value=ir.tensor(np.array([self.value], dtype)))
        change = ir.node("ScatterND", [source, where, value], {"reduction": self.reduction})
        change.outputs[0].type, change.outputs[0].shape = source.type, source.shape
        change.outputs[0].name = f"{self.input_name}_{self.name}"
        for use, index in list(source.uses()):
            if use is not change:
                use.replace_input_with(index, change.outputs[0])
        for constant in (where, value):
            model.graph.register_initializer(constant)
        model.graph.insert_before(model.graph[0], change)
        self.note(f"{self.name} (wrong on purpose)", modified=True)


class DropOneTerm(_ChangeOneTerm):
    """The first update of a float sum is zeroed: one term dropped."""

    name, value, reduction = "drop-one-term", 0.0, "none"


class DoubleOneTerm(_ChangeOneTerm):
    """The first update of a float sum is doubled: one term counted twice."""

    name, value, reduction = "double-one-term", 2.0, "mul"


class OneTermToTheNextSlot(_ChangeOneTerm):
    """The first index gets 1 added: one term summed into the wrong slot (in range where that index
    is below the last slot)."""

    name, value, reduction = "one-term-to-the-next-slot", 1, "add"


class RepairIntoMax(RepairPass):
    """Repairs each chain, then makes every add-reducing scatter reduce with max (wrong on purpose:
    the wrong reduction). Named "repair", so that it is proven as repair is."""

    def run(self, model):
        super().run(model)
        for node, _ in iter_nodes(model):
            if node.op_type in ("ScatterElements", "ScatterND") and (
                    node.attributes.get("reduction") is not None
                    and node.attributes["reduction"].value == "add"):
                node.attributes["reduction"] = ir.AttrString("reduction", "max")


class RepairOffByOne(RepairPass):
    """Repairs each accumulating chain, then adds one to the tensor its Add accumulates into (wrong
    on purpose: an off-by-one count)."""

    def run(self, model):
        adds = [site.add for site in find_sites(model)[0] if site.add is not None]
        super().run(model)
        for add in adds:
            base = add.inputs[0]
            dtype = constant_tensor(base).dtype.numpy()  # the exporter's constant zeros
            one = ir.val(f"{base.name}_one", const_value=ir.tensor(np.ones((), dtype)))
            model.graph.register_initializer(one)
            bumped = ir.node("Add", [base, one])
            bumped.outputs[0].name = f"{base.name}_plus_one"
            model.graph.insert_before(add, bumped)
            add.replace_input_with(0, bumped.outputs[0])


class OneSymbolicDimForAll(ScatterPass):
    """Declares the output of every unary elementwise node of the main graph with the shape of its
    input, the first dimension renamed to one symbolic dim shared by all (``unk__0``), wrong on
    purpose: values of different sizes said to be equal, as spliced function bodies once declared
    them. onnxruntime (default session options) then reuses one's buffer for another and fails at
    run time ("Shape mismatch attempting to re-use buffer"); onnx.checker and onnx.reference
    accept it."""

    name = "one-symbolic-dim-for-all"

    def run(self, model):
        for node, scope in iter_nodes(model):
            first = node.inputs[0] if node.inputs else None
            if (scope.body is not model.graph or node.op_type not in ("Abs", "Neg", "Relu", "Exp")
                    or first is None or not first.shape):
                continue
            for value in node.outputs:
                value.type = value.type or first.type
                value.shape = ir.Shape(["unk__0", *list(first.shape)[1:]])
            self.rewrote(node, scope, "outputs declared [unk__0, ...] (wrong on purpose)")


class MoveOffByOneRounding(ScatterPass):
    """Moves the model to ``opset`` (the honest move) and multiplies the output of the middle node
    of its longest run of Mul nodes by 1 + 2^-20 (wrong on purpose: a few float32 ulps, far within
    any fixed tolerance, as a move that re-associated one product of a long chain wrongly)."""

    name = "move-off-by-one-rounding"

    def __init__(self, opset: int):
        super().__init__()
        self.opset = opset

    def run(self, model):
        from scatter_rewrite.opset import move_to_opset

        self.moved(move_to_opset(model, self.opset))
        muls = [node for node in model.graph if node.op_type == "Mul"]
        middle = muls[len(muls) // 2]
        factor = ir.val("one_plus_2_to_the_minus_20",
                        const_value=ir.tensor(np.array(1 + 2.0 ** -20, np.float32)))
        model.graph.register_initializer(factor)
        biased = ir.node("Mul", [middle.outputs[0], factor])
        biased.outputs[0].type = middle.outputs[0].type
        biased.outputs[0].shape = middle.outputs[0].shape
        ir.convenience.replace_all_uses_with(middle.outputs[0], biased.outputs[0],
                                             replace_graph_outputs=True)
        biased.replace_input_with(0, middle.outputs[0])
        model.graph.insert_after(middle, biased)
        self.note("one product of the chain off by 2^-20 (wrong on purpose)", modified=True)


# ---- the models the passes above are shown wrong on -----------------------------------------

FLOAT = TensorProto.FLOAT


def two_row_counts_model() -> onnx.ModelProto:
    """Two inputs of independent row counts, each through Neg and Abs and summed, times a Constant
    (as a function body spliced in holds Constants: onnxruntime has no kernel for Constant)."""
    two = nh.from_array(np.array(2.0, np.float32))
    nodes = [oh.make_node("Neg", ["x"], ["a"]), oh.make_node("Abs", ["a"], ["b"]),
             oh.make_node("ReduceSum", ["b"], ["s"], keepdims=1),
             oh.make_node("Neg", ["y"], ["c"]), oh.make_node("Abs", ["c"], ["d"]),
             oh.make_node("ReduceSum", ["d"], ["t"], keepdims=1),
             oh.make_node("Constant", [], ["k"], value=two),
             oh.make_node("Add", ["s", "t"], ["u"]), oh.make_node("Mul", ["u", "k"], ["z"])]
    graph = oh.make_graph(nodes, "g", [vi("x", FLOAT, ["N", 4]), vi("y", FLOAT, ["M", 4])], [vi("z", FLOAT, [1, 1])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)], ir_version=8)


def product_chain_model(opset: int = 17, links: int = 50) -> onnx.ModelProto:
    """x times 2 and 0.5 in turn, ``links`` times (exact in float32: the original has no rounding
    error), through a Reshape(allowzero=0) that an opset move rewrites."""
    nodes = [oh.make_node("Reshape", ["x", "shape"], ["h0"], allowzero=0)]
    for k in range(links):
        factor = "two" if k % 2 == 0 else "half"
        nodes.append(oh.make_node("Mul", [f"h{k}", factor], [f"h{k + 1}"]))
    nodes.append(oh.make_node("Identity", [f"h{links}"], ["y"]))
    weights = [nh.from_array(np.array([-1, 16], np.int64), "shape"),
               nh.from_array(np.array(2.0, np.float32), "two"),
               nh.from_array(np.array(0.5, np.float32), "half")]
    graph = oh.make_graph(nodes, "g", [vi("x", FLOAT, [64, 16])], [vi("y", FLOAT, [64, 16])], weights)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=8)
