"""The TensorRT flow's opset cap (:class:`CapOpsetPass`): whether a model above the highest opset
the TensorRT version's parser documents can move down to it (the move itself is MoveOpsetPass,
which :func:`scatter_rewrite.verbs.tensorrt_passes` runs next)."""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.errors import ConversionError
from scatter_rewrite.limits import REDUCTIONS
from scatter_rewrite.graph import attr, describe, is_default_domain, iter_nodes
from scatter_rewrite.passes.tensorrt_flow import TensorRTFlowPass
from scatter_rewrite.targets.tensorrt.parser import PARSER_MAX_OPSET

__all__ = ["cap_reason", "CapOpsetPass"]


class CapOpsetPass(TensorRTFlowPass):
    """Whether a model above the highest opset the TensorRT version's parser documents (8.6: 17,
    10: 20) can move down to it, once its scatters are TensorRT-ready: ConversionError saying why
    when a scatter kept a reduction that the lower opset lacks or a node cannot be converted (tried
    on a copy: the model given is left as it is). The move itself is MoveOpsetPass, which the flow
    runs next (:func:`scatter_rewrite.verbs.tensorrt_passes`, with :func:`cap_reason`)."""

    name = "opset-cap"

    def run(self, model: ir.Model) -> None:
        from scatter_rewrite.graph import iter_scopes
        from scatter_rewrite.opset import move_to_opset
        target = PARSER_MAX_OPSET[self.trt_version]
        highest = max(scope.opset for scope in iter_scopes(model))
        if highest <= target:
            return
        kept = [(n, s) for n, s in iter_nodes(model)
                if n.op_type in ("ScatterElements", "ScatterND") and is_default_domain(n)
                and _reduction_opset(attr(n, "reduction", "none")) > target]
        why = cap_reason(self.trt_version)
        if kept:
            node, scope = kept[0]
            raise self.unreachable(
                f"the model is at opset {highest} ({why}), and {describe(node, scope)} keeps a "
                f"reduction opset {target} lacks"
            )
        try:
            # On a copy: a conversion that stops at a later node has changed the earlier ones, and
            # a model given to this pass must be left as it was, not half-converted.
            move_to_opset(model.clone(), target)
        except ConversionError as e:
            raise self.unreachable(f"the model is at opset {highest} ({why}) and cannot move "
                                   f"there: {e}") from e


def cap_reason(trt_version: str) -> str:
    """Why the flow moves a model down to the TensorRT version's highest opset."""
    return (f"TensorRT {trt_version}'s parser documents opsets up to "
            f"{PARSER_MAX_OPSET[trt_version]}")


def _reduction_opset(reduction: str | None) -> int:
    """The first opset with a scatter ``reduction``; for one unknown here (a reference to a function
    attribute, None; an unknown name), the one where every reduction exists."""
    from scatter_rewrite.passes.lowering.segment_reduce import first_opset_with

    return (
        first_opset_with(reduction)
        if reduction in ("none", *REDUCTIONS)
        else first_opset_with("max")
    )
