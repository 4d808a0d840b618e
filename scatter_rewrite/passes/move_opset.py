"""Move a whole model to a default-domain opset (:func:`scatter_rewrite.opset.move_to_opset`: every
node of every scope converted, exactly, or ConversionError naming the one that cannot be).

The one pass that moves a model, so that a verb's list says where it moves
(:mod:`scatter_rewrite.verbs`): ``upgrade`` after the Scatter -> ScatterElements renames, ``lower``
before the lowering (``keep``: the nodes the lowering replaces are left as they are, and it builds
their replacements at the target), the TensorRT flow down to its parser's highest opset, last
(``only_down``).
"""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir

from scatter_rewrite.graph import KEPT_AT_OPSET, default_opset, iter_nodes, iter_scopes
from scatter_rewrite.limits import OPSET_FLOOR, check_opset
from scatter_rewrite.opset import move_to_opset
from scatter_rewrite.passes.base import ScatterPass
from scatter_rewrite.type_inference import (
    annotate_functions_with, borrow_inferred_types, restore_types,
)

__all__ = ["KEPT_TYPES", "MoveOpsetPass", "restore_kept_types"]

_KEPT_DOMAIN = "scatter_rewrite.kept"  # hides a kept node from the move
# model.meta: the types borrowed for the move where it keeps nodes, which the pass that replaces
# them reads too (inferred on the model before the move) and then gives back: restore_kept_types
KEPT_TYPES = "scatter_rewrite.kept_types"


class MoveOpsetPass(ScatterPass):
    """Every scope to ``opset`` (None: the model's own default opset, or the floor 11 below it);
    with ``only_down``, only a model above it. ``keep``: the nodes the move leaves as they are
    (for the pass after it, which replaces them). ``why``: what the report's note says after the
    move's."""

    name = "move-opset"

    def __init__(self, opset: int | None = None, *, only_down: bool = False, why: str = "",
                 keep: Callable[[ir.Node], bool] | None = None):
        super().__init__()
        self.opset = None if opset is None else check_opset(opset)
        self.only_down, self.why, self.keep = only_down, why, keep

    def kept(self, node: ir.Node) -> bool:
        """Whether the move leaves ``node`` as it is, for the pass after it."""
        return self.keep is not None and self.keep(node)

    def target(self, model: ir.Model) -> int:
        return self.opset or max(default_opset(model.opset_imports, fallback=1), OPSET_FLOOR)

    def run(self, model: ir.Model) -> None:
        target = self.target(model)
        if self.only_down and max(scope.opset for scope in iter_scopes(model)) <= target:
            return
        kept = [(node, node.domain, scope.opset) for node, scope in iter_nodes(model)
                if self.kept(node)]
        # The types the move needs, inferred before the kept nodes are hidden from it (ONNX
        # inference cannot see through a hidden node); the pass replacing them builds on them too
        # (inferred on the model before the move, they are sharper), then gives them back.
        borrowed = _borrowed_types(model, self.keep) if kept else []
        for node, _, _ in kept:
            node.domain = _KEPT_DOMAIN
        try:
            move = move_to_opset(model, target)
        except BaseException:
            restore_types(borrowed)
            raise
        finally:
            for node, domain, opset in kept:
                node.domain = domain
                node.meta[KEPT_AT_OPSET] = opset  # (its schema stays that opset's)
        if kept:
            model.meta[KEPT_TYPES] = borrowed
        self.moved(move, f" ({self.why})" if self.why else "")


def restore_kept_types(model: ir.Model) -> None:
    """Give back the types a move that kept nodes borrowed (:data:`KEPT_TYPES`): for the pass
    that replaced them, once done."""
    restore_types(model.meta.pop(KEPT_TYPES, []))


def _borrowed_types(model: ir.Model, kept: Callable[[ir.Node], bool]):
    """ONNX inference's dtypes and shapes where the model lacks them (sharpened: the static sizes
    TorchScript's wrappers hide), in the main graph and in the functions holding a kept node."""
    return borrow_inferred_types(model, sharpen=True) + annotate_functions_with(model, kept)
