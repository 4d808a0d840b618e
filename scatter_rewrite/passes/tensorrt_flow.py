"""What the passes of the TensorRT flow share (:mod:`.tensorrt`, :mod:`.tensorrt_tensorscatter`,
:mod:`.tensorrt_opset_cap`): the TensorRT version they prepare for, the error for a model they
cannot bring to what it takes (:class:`TensorRTFlowPass`), and the TensorRT-safe lowering of a
reducing scatter (:func:`lower_tensorrt_safe`: the sorting network of
:mod:`.lowering.network_reduce`, its nodes checked by
:func:`.tensorrt_violations.tensorrt_violations`)."""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir

from scatter_rewrite.errors import ConversionError
from scatter_rewrite.limits import DEFAULT_TRT_VERSION, REDUCTIONS, TRT_VERSIONS, check_choice
from scatter_rewrite.graph import Scope, attr, nodes_within, remove_unused_expands
from scatter_rewrite.passes.base import ScatterPass, ScatterPassResult, every_node
from scatter_rewrite.passes.tensorrt_violations import tensorrt_violations
from scatter_rewrite.passes.to_scatternd import Decline, ModelNames
from scatter_rewrite.said import param, said

__all__ = [
    "check_trt_version", "count_fix", "inline_rank_hiding_ifs", "lower_tensorrt_safe",
    "no_fixed_count", "TensorRTFlowPass", "UNLOWERABLE",
]


def check_trt_version(trt_version: str) -> str:
    return check_choice(trt_version, TRT_VERSIONS, "trt_version")


class TensorRTFlowPass(ScatterPass):
    """A pass of the TensorRT flow: it knows which TensorRT version it prepares for. A node it must
    leave as it is (TensorRT would reject it or compute it wrong) makes the target unreachable: the
    pass raises ConversionError naming it and why (``error.declined``: every such node), as
    LowerPass does for an opset it cannot reach."""

    def __init__(self, trt_version: str = DEFAULT_TRT_VERSION):
        super().__init__()
        self.trt_version = check_trt_version(trt_version)

    def call(self, model: ir.Model) -> ScatterPassResult:
        result = super().call(model)
        if result.skipped:
            advice = self.advice(result.skipped)
            error = self.unreachable(said(every_node(result.skipped),
                                          *(("; ", advice) if advice else ())))
            error.declined = list(result.skipped)
            raise error
        return result

    def advice(self, skipped: list) -> str | None:
        """What the user can do about the nodes left alone (None: their reasons say it)."""
        return None

    def unreachable(self, why: str) -> ConversionError:
        """The error for a model this pass cannot bring to what the TensorRT version takes."""
        return ConversionError(said(f"cannot prepare for TensorRT {self.trt_version}: ", why))


# In every decline the TensorRT-safe lowering gives (TensorRTPass.advice keys its advice on it).
UNLOWERABLE = "cannot be lowered TensorRT-safely"


def inline_rank_hiding_ifs(
    model: ir.Model, needs_rank: Callable[[ir.Node], bool] = lambda node: True
) -> list[str]:
    """Inline, in place, the Ifs with a constant condition around a reducing scatter whose rank is
    unknown (TorchScript's rank-0 wrapper of ``scatter_reduce``) and whose rewrite ``needs_rank``:
    TensorRT would fold such an If at build time anyway. Returns what was done, for the notes."""
    from scatter_rewrite.passes.inline_if import inline_ifs_hiding_rank

    return inline_ifs_hiding_rank(
        model, lambda node: attr(node, "reduction", "none") in REDUCTIONS and needs_rank(node)
    )


def lower_tensorrt_safe(node: ir.Node, scope: Scope, names: ModelNames, trt_version: str,
                        why: str, model: ir.Model | None = None) -> str:
    """Replace the reducing ``node`` by its sorting-network lowering and return what was done;
    Decline with the reason (the model unchanged) when the lowering does not apply or would emit
    what TensorRT ``trt_version`` rejects (with ``model``: which fixed dimensions would let it)."""
    from scatter_rewrite.passes.lowering import network_reduce as net
    from scatter_rewrite.passes.lowering import segment_reduce as seg

    blocker = net.network_blocker(node, scope.opset)
    if blocker is not None:
        if model is not None and blocker.startswith(net.NOT_STATIC):
            blocker += ": " + count_fix(model, node, scope.opset)
        raise Decline(said(f"{why}; it {UNLOWERABLE} either: ", blocker))
    nodes, out = net.lower_reduction_network(
        node, scope.opset, seg.Names(names.taken, prefix="trt")
    )
    violations = tensorrt_violations(nodes, trt_version)
    if violations:
        # Nothing was spliced in: detach the built nodes from the values they read, so no
        # orphan consumer stays registered on the model's values, and leave the node alone.
        for built in nodes_within(nodes):
            for i in range(len(built.inputs)):
                built.replace_input_with(i, None)
        raise Decline(
            f"{why}; it {UNLOWERABLE}: the lowering would emit what TensorRT {trt_version} "
            f"rejects ({'; '.join(violations)}), so the node is left alone"
        )
    old_inputs = list(node.inputs)
    ir.convenience.replace_nodes_and_values(
        scope.body, node, [node], nodes, [node.outputs[0]], [out]
    )
    remove_unused_expands(scope.body, old_inputs)  # the GNN index Expand the lowering reads around
    return (f"lowered to {len(nodes)} TensorRT-safe standard nodes (bitonic sort of the keys, "
            f"segmented scan, each a fixed-shape Loop; one ScatterND with unique targets) ({why})")


def count_fix(model: ir.Model, node: ir.Node, opset: int) -> str:
    """What makes the dynamic number of updates of the reducing ``node`` static: the model-input
    dimensions to fix, named, where fixing them does; else why none does."""
    from scatter_rewrite.passes.fix_dims import dims_that_fix
    from scatter_rewrite.passes.lowering.network_reduce import network_blocker

    dims = dims_that_fix(model, node, lambda twin: network_blocker(twin, opset) is None)
    if dims:
        return said(f"fix {', '.join(dims)} to the size you run: ",
                    param("fix_dims", {name: "SIZE" for name in dims}))
    return no_fixed_count(model, node)


def no_fixed_count(model: ir.Model, node: ir.Node) -> str:
    """Why no fixed model-input dimension makes the number of updates of ``node`` static."""
    from scatter_rewrite.passes.fix_dims import data_sized_source

    source = data_sized_source(model, node.inputs[1:3])
    if source is not None:
        label = f" '{source.name}'" if source.name else ""
        return said(f"it counts what {source.op_type}{label} finds in the data, so no ",
                    param("fix_dims"), " makes it static")
    return said("it does not follow from the model's input dimensions, so no ", param("fix_dims"),
                " makes it static")
