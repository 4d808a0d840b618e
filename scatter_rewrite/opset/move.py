"""The opset move's public functions, where earlier code imported them from: a re-export of
:mod:`scatter_rewrite.opset.engine` and :mod:`scatter_rewrite.opset.fitting`."""

from scatter_rewrite.opset.engine import (
    MAX_OPSET, MIN_IR_VERSION, MIN_OPSET, OpsetMove, convert_opset, move_to_opset, opset_note,
    scope_opsets,
)
from scatter_rewrite.opset.fitting import fits_schema, needs_conversion, since_version

__all__ = [
    "convert_opset", "fits_schema", "MAX_OPSET", "MIN_IR_VERSION", "MIN_OPSET", "move_to_opset",
    "needs_conversion", "opset_note", "OpsetMove", "scope_opsets", "since_version",
]
