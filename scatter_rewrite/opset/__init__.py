"""Moving a model between opsets: the declared table of every version step (:mod:`.steps`) and
the engine that applies it to a model (:mod:`.move`)."""

from scatter_rewrite.opset.move import (
    MAX_OPSET,
    MIN_IR_VERSION,
    MIN_OPSET,
    OpsetMove,
    convert_opset,
    fits_schema,
    move_to_opset,
    needs_conversion,
    opset_note,
    since_version,
)

__all__ = [
    "MAX_OPSET",
    "MIN_IR_VERSION",
    "MIN_OPSET",
    "OpsetMove",
    "convert_opset",
    "fits_schema",
    "move_to_opset",
    "needs_conversion",
    "opset_note",
    "since_version",
]
