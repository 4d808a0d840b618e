"""The TensorRT flow's TensorScatter step (:class:`LowerTensorScatterPass`): a TensorScatter
(opset 24) on a TensorRT whose parser does not import it is lowered by LowerPass at the parser's
highest opset; this pass first lowers, TensorRT-safely, the max/min reductions that opset lacks
(:func:`scatter_rewrite.verbs.tensorrt_passes` runs both)."""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.graph import attr, describe, is_default_domain, iter_nodes
from scatter_rewrite.passes.tensorrt_flow import (
    TensorRTFlowPass, UNLOWERABLE, count_fix, lower_tensorrt_safe,
)
from scatter_rewrite.targets.tensorrt.parser import PARSER_MAX_OPSET, PARSES_TENSORSCATTER
from scatter_rewrite.passes.to_scatternd import Decline, ModelNames, infer_missing_shapes
from scatter_rewrite.said import message_of, said

__all__ = ["has_tensor_scatter", "LowerTensorScatterPass"]


class LowerTensorScatterPass(TensorRTFlowPass):
    """Prepare a model holding a TensorScatter (opset 24, which no TensorRT before 11 parses) for
    LowerPass to the highest opset the TensorRT version documents, which the flow runs next
    (:func:`scatter_rewrite.verbs.tensorrt_passes`, only when :func:`has_tensor_scatter`): max/min
    reductions that opset lacks are lowered TensorRT-safely first; if one cannot be, the
    TensorScatter is declined with the reason (and the flow stops)."""

    name = "lower-tensorscatter"

    def run(self, model: ir.Model) -> None:
        found = [
            (n, s)
            for n, s in iter_nodes(model)
            if n.op_type == "TensorScatter" and is_default_domain(n)
        ]
        if not found or self.trt_version in PARSES_TENSORSCATTER:
            return
        target = PARSER_MAX_OPSET[self.trt_version]
        lacking = [
            (n, s)
            for n, s in iter_nodes(model)
            if n.op_type in ("ScatterElements", "ScatterND")
            and is_default_domain(n)
            and attr(n, "reduction", "none") in ("max", "min")
            and target < 18
        ]
        if lacking:
            # Moving to opset 17 would make LowerPass lower these max/min reductions with a run-time
            # TopK (K unbounded by TensorRT's 3840) and a shrinking Loop (which TensorRT rejects):
            # lower them TensorRT-safely first (the converter then takes their nodes to opset 17),
            # or, if one cannot be, leave the TensorScatter (check reports it).
            from scatter_rewrite.passes.lowering.network_reduce import (
                NOT_STATIC, network_blocker,
            )

            infer_missing_shapes(model)
            blocked = [(n, s, network_blocker(n, s.opset)) for n, s in lacking]
            blocked = [(n, s, reason) for n, s, reason in blocked if reason is not None]
            if blocked:
                node, scope, reason = blocked[0]
                if reason.startswith(NOT_STATIC):
                    reason += ": " + count_fix(model, node, scope.opset)
                for ts, ts_scope in found:
                    self.skip(
                        ts,
                        ts_scope,
                        said(f"not lowered: moving the model to opset {target} needs the "
                             f"{len(lacking)} max/min scatter(s) lowered too, and "
                             f"{describe(node, scope)} {UNLOWERABLE}: ", reason),
                    )
                return
            names = ModelNames(model)
            for node, scope in lacking:
                try:
                    detail = lower_tensorrt_safe(node, scope, names, self.trt_version,
                                                 f"opset {target} has no max/min reduction")
                except Decline as reason:
                    for ts, ts_scope in found:
                        self.skip(ts, ts_scope, said(f"not lowered: {describe(node, scope)}: ",
                                                     message_of(reason)))
                    return
                self.rewrote(node, scope, detail)


def has_tensor_scatter(model: ir.Model) -> bool:
    """Whether ``model`` holds a default-domain TensorScatter (which LowerPass lowers)."""
    return any(n.op_type == "TensorScatter" and is_default_domain(n) for n, _ in iter_nodes(model))
