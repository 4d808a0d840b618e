"""GridSample-16 (no older version): the gather-based decomposition, as ONNX's reference and
onnxruntime's kernel compute it.

Each output point (n, c, i, j) reads the grid's (x, y) in [-1, 1], denormalized to the input's
pixel coordinates (align_corners=1: ``(v + 1) / 2 * (size - 1)``; 0: ``((v + 1) * size - 1) / 2``).
``nearest`` takes the pixel at the coordinates rounded half to even; ``bilinear`` the four pixels
around them, weighted ``dy2 * (dx2 * p11 + dx1 * p12) + dy1 * (dx2 * p21 + dx1 * p22)``. A pixel
index outside the input is 0 (``zeros``), clamped (``border``), or reflected at the borders
(``reflection``: at 0 and size - 1 with align_corners, else at -0.5 and size - 0.5), then
truncated. Pixels are gathered from the input flattened to (N, C, H * W) with GatherElements.

The same arithmetic in the same order and type as onnxruntime's kernel, in separate ops: exact
where the kernel rounds each operation (its build may contract a product and a sum into one fused
multiply-add), so the move lists the op for validation's float tolerance. Refused: ``bicubic``
(16 pixels, not written here), an input of another rank than 4, a type onnxruntime's kernel lacks
(the input and the grid must be float or double, alike), an attribute from a function's.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.graph import NodeBuilder, Scope, attr, reference_reason
from scatter_rewrite.opset.fitting import input_dtype, text
from scatter_rewrite.opset.registry import Form, Replaced, register_form
from scatter_rewrite.opset.rewriting import refuse, replace

__all__ = ["gridsample_16"]

_I64, _BOOL = ir.DataType.INT64, ir.DataType.BOOL


@register_form("GridSample", 16, None, reads_rank=True)
def gridsample_16(node: ir.Node, scope: Scope, target: int) -> Form:
    """GridSample-16 at opset ``target`` < 16 (see the module docstring)."""
    why = _refusal(node)
    if why is not None:
        raise refuse(node, scope, target, f"GridSample-16 (no older version): {why}")
    x, grid = node.inputs[0], node.inputs[1]
    mode = text(attr(node, "mode", "bilinear"))
    padding = text(attr(node, "padding_mode", "zeros"))
    align = bool(attr(node, "align_corners", 0))
    b = NodeBuilder()
    sizes = _Sizes(b, x, grid)
    ix = _denormalize(b, b.add("Gather", [grid, b.const(np.int64(0))], {"axis": 3}, dtype=x.dtype),
                      sizes.w, align, x.dtype)
    iy = _denormalize(b, b.add("Gather", [grid, b.const(np.int64(1))], {"axis": 3}, dtype=x.dtype),
                      sizes.h, align, x.dtype)
    if mode == "nearest":
        xi = b.add("Cast", [b.add("Round", [ix], dtype=x.dtype)], {"to": _I64}, dtype=_I64)
        yi = b.add("Cast", [b.add("Round", [iy], dtype=x.dtype)], {"to": _I64}, dtype=_I64)
        y = _pixel(b, sizes, yi, xi, padding, align)
    else:
        y = _bilinear(b, sizes, ix, iy, padding, align)
    replace(node, scope, b.nodes, [y])
    return Replaced(tuple(b.nodes), rounding=mode != "nearest")


def _refusal(node: ir.Node) -> str | None:
    reason = reference_reason(node)
    if reason is not None:
        return f"its {reason}"
    x, grid = node.inputs[0], node.inputs[1]
    if x is None or x.shape is None or len(x.shape) != 4:
        rank = "unknown" if x is None or x.shape is None else len(x.shape)
        return f"its input's rank is {rank}, and the decomposition here takes 4-D input only"
    mode = text(attr(node, "mode", "bilinear"))
    if mode not in ("bilinear", "nearest"):
        return f"mode '{mode}' is not written here in older ops (bilinear and nearest are)"
    types = {input_dtype(x), input_dtype(grid)}
    if len(types) != 1 or not types <= {ir.DataType.FLOAT, ir.DataType.DOUBLE}:
        names = ", ".join(sorted("unknown" if t is None else t.name for t in types))
        return (f"its input and grid types ({names}) are not both float or both double, which "
                "onnxruntime's kernel the decomposition is judged against computes in")
    return None


class _Sizes:
    """The input's and the grid's dimensions, as the decomposition reads them."""

    def __init__(self, b: NodeBuilder, x: ir.Value, grid: ir.Value):
        self.dtype = x.dtype
        shape = b.add("Shape", [x], dtype=_I64, shape=ir.Shape([4]))
        grid_shape = b.add("Shape", [grid], dtype=_I64, shape=ir.Shape([4]))
        self.h = b.add("Gather", [shape, b.const(np.int64(2))], dtype=_I64, shape=ir.Shape([]))
        self.w = b.add("Gather", [shape, b.const(np.int64(3))], dtype=_I64, shape=ir.Shape([]))
        channels = b.add("Gather", [shape, b.const(np.array([1], np.int64))], dtype=_I64)
        one = b.const(np.array([1], np.int64))
        # [1, C, 1]: a gather index for every channel; the input as [N, C, H * W]
        self.every_channel = b.add("Concat", [one, channels, one], {"axis": 0}, dtype=_I64)
        self.flat_x = b.add("Reshape", [x, b.const(np.array([0, 0, -1], np.int64))], dtype=x.dtype)
        n, points = (b.add("Gather", [grid_shape, b.const(np.array(i, np.int64))], dtype=_I64)
                     for i in ([0], [1, 2]))
        # [N, 1, Ho, Wo]: a per-point value beside the channels
        self.per_point = b.add("Concat", [n, one, points],
                               {"axis": 0}, dtype=_I64, shape=ir.Shape([4]))
        self.out = b.add("Concat", [b.add("Gather", [shape, b.const(np.array([0, 1], np.int64))],
                                          dtype=_I64), points], {"axis": 0}, dtype=_I64,
                         shape=ir.Shape([4]))

    def beside_channels(self, b: NodeBuilder, value: ir.Value, dtype: ir.DataType) -> ir.Value:
        return b.add("Reshape", [value, self.per_point], dtype=dtype)


def _denormalize(b: NodeBuilder, v: ir.Value, size: ir.Value, align: bool,
                 dtype: ir.DataType) -> ir.Value:
    one, two = b.const(np.ones((), dtype.numpy())), b.const(np.full((), 2, dtype.numpy()))
    shifted = b.add("Add", [v, one], dtype=dtype)
    if align:  # (v + 1) / 2 * (size - 1)
        last = b.add("Cast", [b.add("Sub", [size, b.const(np.int64(1))], dtype=_I64)],
                     {"to": dtype}, dtype=dtype)
        return b.add("Mul", [b.add("Div", [shifted, two], dtype=dtype), last], dtype=dtype)
    length = b.add("Cast", [size], {"to": dtype}, dtype=dtype)  # ((v + 1) * size - 1) / 2
    scaled = b.add("Sub", [b.add("Mul", [shifted, length], dtype=dtype), one], dtype=dtype)
    return b.add("Div", [scaled, two], dtype=dtype)


def _bilinear(b: NodeBuilder, sizes: _Sizes, ix: ir.Value, iy: ir.Value, padding: str,
              align: bool) -> ir.Value:
    dtype = sizes.dtype
    corners, weights = [], []
    for v in (ix, iy):
        low = b.add("Cast", [b.add("Floor", [v], dtype=dtype)], {"to": _I64}, dtype=_I64)
        high = b.add("Add", [low, b.const(np.int64(1))], dtype=_I64)
        far = b.add("Sub", [b.add("Cast", [high], {"to": dtype}, dtype=dtype), v], dtype=dtype)
        near = b.add("Sub", [v, b.add("Cast", [low], {"to": dtype}, dtype=dtype)], dtype=dtype)
        corners.append((low, high))
        weights.append((sizes.beside_channels(b, far, dtype),
                        sizes.beside_channels(b, near, dtype)))
    (x1, x2), (y1, y2) = corners
    (dx2, dx1), (dy2, dy1) = weights
    p11, p12, p21, p22 = (_pixel(b, sizes, y, x, padding, align)
                          for y, x in ((y1, x1), (y1, x2), (y2, x1), (y2, x2)))

    def mix(p, q):  # dx2 * p + dx1 * q
        return b.add("Add", [b.add("Mul", [dx2, p], dtype=dtype),
                             b.add("Mul", [dx1, q], dtype=dtype)], dtype=dtype)

    return b.add("Add", [b.add("Mul", [dy2, mix(p11, p12)], dtype=dtype),
                         b.add("Mul", [dy1, mix(p21, p22)], dtype=dtype)], dtype=dtype)


def _pixel(b: NodeBuilder, sizes: _Sizes, yi: ir.Value, xi: ir.Value, padding: str,
           align: bool) -> ir.Value:
    """The input's pixels at integer coordinates (yi, xi) ([N, Ho, Wo]), by ``padding`` outside
    it: [N, C, Ho, Wo]."""
    valid = None
    if padding == "zeros":
        valid = b.add("And", [_inside(b, xi, sizes.w), _inside(b, yi, sizes.h)], dtype=_BOOL)
        zero = b.const(np.int64(0))
        xi, yi = (b.add("Where", [valid, v, zero], dtype=_I64) for v in (xi, yi))
    elif padding == "border":
        xi, yi = _clamp(b, xi, sizes.w), _clamp(b, yi, sizes.h)
    else:
        xi, yi = _reflect(b, xi, sizes.w, align), _reflect(b, yi, sizes.h, align)
    index = b.add("Add", [b.add("Mul", [yi, sizes.w], dtype=_I64), xi], dtype=_I64)
    flat_index = b.add("Reshape", [index, b.const(np.array([0, 1, -1], np.int64))], dtype=_I64)
    flat_index = b.add("Expand", [flat_index, sizes.every_channel], dtype=_I64)
    gathered = b.add("GatherElements", [sizes.flat_x, flat_index], {"axis": 2},
                     dtype=sizes.dtype)
    pixels = b.add("Reshape", [gathered, sizes.out], dtype=sizes.dtype)
    if valid is None:
        return pixels
    nothing = b.const(np.zeros((), sizes.dtype.numpy()))
    return b.add("Where", [sizes.beside_channels(b, valid, _BOOL), pixels, nothing],
                 dtype=sizes.dtype)


def _inside(b: NodeBuilder, v: ir.Value, size: ir.Value) -> ir.Value:
    """0 <= v < size."""
    negative = b.add("Less", [v, b.const(np.int64(0))], dtype=_BOOL)
    return b.add("And", [b.add("Not", [negative], dtype=_BOOL),
                         b.add("Less", [v, size], dtype=_BOOL)], dtype=_BOOL)


def _clamp(b: NodeBuilder, v: ir.Value, size: ir.Value) -> ir.Value:
    """v clamped to [0, size - 1] (Where: Clip and Max/Min take no integers before opset 12)."""
    zero, last = b.const(np.int64(0)), b.add("Sub", [size, b.const(np.int64(1))], dtype=_I64)
    v = b.add("Where", [b.add("Less", [v, zero], dtype=_BOOL), zero, v], dtype=_I64)
    return b.add("Where", [b.add("Greater", [v, last], dtype=_BOOL), last, v], dtype=_I64)


def _reflect(b: NodeBuilder, v: ir.Value, size: ir.Value, align: bool) -> ir.Value:
    """onnxruntime's GsReflect on an integer coordinate, in float32: beyond a border by d, the
    point d mod the range from that border (from the other one when d / range is odd), then
    truncated to an integer."""
    f32 = ir.DataType.FLOAT
    fx = b.add("Cast", [v], {"to": f32}, dtype=f32)
    length = b.add("Cast", [size], {"to": f32}, dtype=f32)
    if align:
        low = b.const(np.float32(0))
        high = b.add("Sub", [length, b.const(np.float32(1))], dtype=f32)
    else:
        low = b.const(np.float32(-0.5))
        high = b.add("Sub", [length, b.const(np.float32(0.5))], dtype=f32)
    span = b.add("Sub", [high, low], dtype=f32)
    below = b.add("Less", [fx, low], dtype=_BOOL)
    above = b.add("Greater", [fx, high], dtype=_BOOL)
    d = b.add("Where", [below, b.add("Sub", [low, fx], dtype=f32),
                        b.add("Sub", [fx, high], dtype=f32)], dtype=f32)
    turns = b.add("Floor", [b.add("Div", [d, span], dtype=f32)], dtype=f32)  # (d >= 0 where used)
    r = b.add("Sub", [d, b.add("Mul", [turns, span], dtype=f32)], dtype=f32)
    half = b.add("Floor", [b.add("Div", [turns, b.const(np.float32(2))], dtype=f32)], dtype=f32)
    even = b.add("Equal", [turns, b.add("Mul", [half, b.const(np.float32(2))], dtype=f32)],
                 dtype=_BOOL)
    from_low = b.add("Add", [low, r], dtype=f32)
    from_high = b.add("Sub", [high, r], dtype=f32)
    # below and even, or above and odd: from the low border; else from the high one
    reflected = b.add("Where", [b.add("Equal", [below, even], dtype=_BOOL), from_low, from_high],
                      dtype=f32)
    outside = b.add("Or", [below, above], dtype=_BOOL)
    fx = b.add("Where", [outside, reflected, fx], dtype=f32)
    return b.add("Cast", [fx], {"to": _I64}, dtype=_I64)
