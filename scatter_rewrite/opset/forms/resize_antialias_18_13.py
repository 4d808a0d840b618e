"""Resize-18 with ``antialias=1`` -> Resize-13, which has no antialias: on static input and output
sizes, a constant linear map per resized axis.

Resizing is separable: each resized axis of length n to m is a fixed (m, n) matrix of the mode's
kernel weights (linear or cubic, stretched by 1/scale when downsampling, as antialias asks, with the
node's coordinate transformation, cubic_coeff_a and exclude_outside). The weights are computed here,
at conversion, by ONNX's reference implementation (``onnx.reference``) resizing the identity, and
applied with MatMul (the axis moved last and back with Transpose where it is not the last). Sums in
another order than onnxruntime's kernel, which also computes its weights in float32: within rtol and
atol 1e-5 of it (the tests'), so the move lists the op for validation's float tolerance.

Runs before the step's other form (:mod:`.resize_18_13`, the axes), on the node as it is. With
``antialias=0``, nothing to do. Refused: mode nearest (onnxruntime and onnx.reference refuse it
too), sizes or scales computed at run time, an input shape not static, a type other than float,
``tf_crop_and_resize`` (roi), ``keep_aspect_ratio_policy`` other than stretch, a weight matrix over
2^22 entries.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper
import onnx_ir as ir

from scatter_rewrite.graph import NodeBuilder, Scope, attr, reference_reason
from scatter_rewrite.opset.fitting import input_dtype, text
from scatter_rewrite.opset.registry import UNCHANGED, Form, Replaced, register_form
from scatter_rewrite.opset.rewriting import known_value, not_constant, refuse, replace

__all__ = ["resize_antialias_18_13"]

_MAX_WEIGHTS = 1 << 22  # entries of one axis's weight matrix (16 MiB of float32)
# The attributes the kernel weights depend on, passed to the reference as the node has them.
_KERNEL_ATTRIBUTES = ("mode", "coordinate_transformation_mode", "cubic_coeff_a",
                      "exclude_outside")


@register_form("Resize", 18, 13, neutral=True, order=-1)
def resize_antialias_18_13(node: ir.Node, scope: Scope, target: int) -> Form:
    """Resize with antialias as MatMuls by constant weights (see the module docstring)."""
    if "antialias" not in node.attributes or attr(node, "antialias", 0) == 0:
        node.attributes.pop("antialias", None)  # (0: the default, what Resize-13 does)
        return UNCHANGED
    reason = reference_reason(node)
    if reason is not None:
        raise refuse(node, scope, target, f"its {reason}, and Resize-13 has no antialias")
    if text(attr(node, "mode", "nearest")) == "nearest":
        raise refuse(node, scope, target, "antialias=1 with mode nearest, which onnxruntime and "
                                          "onnx.reference refuse too")
    axes, why = _resized_axes(node)
    if why is not None:
        raise refuse(node, scope, target, f"antialias=1: {why}, and Resize-13 has no antialias")
    x, b = node.inputs[0], NodeBuilder()
    kernel = tuple((name, _value(node.attributes[name])) for name in _KERNEL_ATTRIBUTES
                   if name in node.attributes)
    y, rank = x, len(x.shape)
    for axis, (n, m, scale, size) in axes.items():
        weights = _weights(n, m, scale, size, kernel).T.astype(np.float32)  # (n, m)
        if axis == rank - 1:
            y = b.add("MatMul", [y, b.const(weights)], dtype=x.dtype)
            continue
        perm = list(range(rank))
        perm[axis], perm[-1] = perm[-1], perm[axis]  # (a swap: its own inverse)
        moved = b.add("Transpose", [y], {"perm": perm}, dtype=x.dtype)
        y = b.add("Transpose", [b.add("MatMul", [moved, b.const(weights)], dtype=x.dtype)],
                  {"perm": perm}, dtype=x.dtype)
    if y is x:
        y = b.add("Identity", [x], dtype=x.dtype)
    replace(node, scope, b.nodes, [y])
    return Replaced(tuple(b.nodes), rounding=True)


def _value(a: ir.Attr):
    return text(a.value)


def _resized_axes(node: ir.Node) -> tuple[dict, str | None]:
    """{axis: (n, m, scale or None, size or None)} for each axis whose length changes, or why
    there is no constant linear map for the node."""
    x = node.inputs[0]
    if input_dtype(x) != ir.DataType.FLOAT:
        name = "unknown" if input_dtype(x) is None else input_dtype(x).name
        return {}, (f"its data type is {name} (float only: onnxruntime's kernel it is judged "
                    "against)")
    if x.shape is None or not all(isinstance(d, int) for d in x.shape):
        return {}, "its input's shape is not static"
    if text(attr(node, "coordinate_transformation_mode", "half_pixel")) == "tf_crop_and_resize":
        return {}, "coordinate_transformation_mode tf_crop_and_resize reads roi"
    inputs = list(node.inputs) + [None] * (4 - len(node.inputs))
    scales, sizes = inputs[2], inputs[3]
    given = sizes if sizes is not None else scales
    what = "sizes" if sizes is not None else "scales"
    values = None if given is None else known_value(given)
    if values is None:
        return {}, (f"{not_constant(given, what)}" if given is not None else "it has neither "
                    "scales nor sizes")
    if sizes is not None and text(attr(node, "keep_aspect_ratio_policy", "stretch")) != "stretch":
        return {}, "keep_aspect_ratio_policy is not stretch"
    rank = len(x.shape)
    axes = [int(a) % rank for a in attr(node, "axes", list(range(rank)))]
    values = values.numpy().reshape(-1)
    if len(values) != len(axes):  # (onnxruntime refuses it too)
        return {}, f"its {what} hold {len(values)} values for {len(axes)} axes"
    resized = {}
    for axis, v in zip(axes, values, strict=True):
        n = x.shape[axis]
        scale, size = (None, int(v)) if sizes is not None else (float(v), None)
        m = size if size is not None else int(np.floor(n * np.float32(scale)))
        if m == n and (scale is None or scale == 1.0):
            continue  # (scale 1: every kernel weighs its own sample 1 and the others 0)
        if n * m > _MAX_WEIGHTS:
            return {}, f"axis {axis}'s weights ({m} x {n}) are more than {_MAX_WEIGHTS} numbers"
        resized[axis] = (n, m, scale, size)
    return resized, None


@functools.lru_cache(maxsize=64)
def _weights(n: int, m: int, scale: float | None, size: int | None, kernel: tuple) -> np.ndarray:
    """The (m, n) weights of resizing an axis of length n to m, by ONNX's reference resizing the
    identity along one axis."""
    from onnx.reference import ReferenceEvaluator

    inputs, initializers = ["x", "", "scales"], []
    if size is not None:
        inputs = ["x", "", "", "sizes"]
        initializers.append(onnx.numpy_helper.from_array(np.array([size], np.int64), "sizes"))
    else:
        initializers.append(onnx.numpy_helper.from_array(np.array([scale], np.float32), "scales"))
    resize = onnx.helper.make_node("Resize", inputs, ["y"], axes=[1], antialias=1, **dict(kernel))
    graph = onnx.helper.make_graph(
        [resize], "weights", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE,
                                                                 [n, n])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, None)],
        initializer=initializers)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 19)])
    (columns,) = ReferenceEvaluator(model).run(None, {"x": np.eye(n)})
    return np.asarray(columns).T  # row j: the weights output j gives each input
