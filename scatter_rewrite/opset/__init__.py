"""Moving a model between opsets: the declared table of every version step (:mod:`.steps`, data),
the small engine that applies it (:mod:`.engine`), the exact forms, one file each, registered where
they are defined (:mod:`.registry`, :mod:`.forms`), onnx.version_converter's adapters and the ops'
function bodies (:mod:`.converter`, :mod:`.bodies`), schema fitting (:mod:`.fitting`) and the moved
model's verification (:mod:`.verify`)."""

from scatter_rewrite.opset.engine import (
    MIN_IR_VERSION,
    OpsetMove,
    convert_opset,
    move_to_opset,
    opset_note,
    scope_opsets,
)
from scatter_rewrite.opset.fitting import fits_schema, needs_conversion, since_version

__all__ = [
    "MIN_IR_VERSION",
    "OpsetMove",
    "convert_opset",
    "fits_schema",
    "move_to_opset",
    "needs_conversion",
    "opset_note",
    "scope_opsets",
    "since_version",
]
