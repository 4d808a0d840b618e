"""LiteRT (TensorFlow Lite) reached through onnx2tf (``litert``), the usual path from ONNX. Measured
with onnx2tf 1.29.24, tensorflow 2.19.0 and ai-edge-litert 2.1.0 (tests/targets/test_litert.py
reproduces each):

* ScatterElements with any reduction is refused ("ScatterElements currently supports only
  reduction=['none']", exit 1).
* ScatterND with add/mul/max/min converts without a warning into TFLite's summing SCATTER_ND and
  computes ``data * (1 - count) + sum(updates)`` for every reduction.
* A constant 1-D initializer fed to Unsqueeze comes out permuted (``Unsqueeze(arange(30), 1)`` as
  0, 2, 3, ..., 29, 1).
* lower's sort + segmented reduction (Loop, If, NonZero) is refused (a KeyError in the converter).
* A ``Slice`` whose end is a huge constant (2^62, "to the end") comes out empty (read as int32); a
  ``Flatten`` of a vector to a column comes out a row, and of a ConstantOfShape's result (its output
  shape not declared) one axis too early ([6, 4] at axis 1 as [1, 24]), and so of any tensor whose
  dimensions are symbolic on both sides of the axis (an input [N, C] given as [6, 4]: [1, 24]);
  an ``Expand`` to the shape its input already has is refused ("Output tensors of a Functional
  model must be the output of a TensorFlow Layer"). The scatter-free forms (passes/no_scatter.py)
  avoid all four (no Flatten at all here: rows by a static Reshape where one side is static,
  otherwise a Reshape to both sides' products computed from the shape), and both the ``mask`` and
  the ``sort`` form then convert and run exactly, with the indices as graph inputs or constant
  (float max/min with NaN and -0.0/+0.0 included; in the doubling scan: the segment tree's
  [R, 2, w] accumulators came out of onnx2tf refused, its ``tf.where`` on them failing).
* An ``Expand`` to a shape computed at run time, of rank 3+, reads it as channels-last
  (``Expand(Reshape(rows, Shape(x)), Shape(x))`` of [5, 2, 3] as [5, 3, 2]: refused; of [5, 1, 3]
  a result of shape [5, 3, 3]). The forms expand only to computed shapes whose entries are equal
  (``ShapeWriting(computed_expands=False)``): below opset 14 (no ``allowzero``) their output of a
  symbolic shape is the rows as a vector expanded to [m, ..., m] (m = 0 when empty) and reshaped
  (graph.py's ``reshape_to``), and a batched GNN's keys ([P, E, 1] of an axis-1 scatter) are
  broadcast by a Gather.
* Without onnxsim (``not_use_onnxsim``) a rank-3+ value reshaped to a computed shape is flattened
  again in channels-last order: a TensorScatter's positions are gathered (keys from 2-D outer
  sums of ranges) and reshaped to the update's shape, and the ScatterElements form reads that
  Reshape's vector as it is (passes/lowering/tensor_scatter.py, ``computed_expands=False``).
* In onnx2tf's default mode (rank-3+ inputs made channels-last, no ``-kat``) an elementwise op
  between such an input and a broadcast ``[1, d, 1]`` range is refused or, where the shapes
  cannot tell the layouts apart, computed in the wrong layout; its Reshape undoes the layout. The
  forms Reshape a rank-3+ input before any arithmetic (ScatterElements' indices to 1-D), and
  convert exactly with or without ``-kat``.

So ``prepare --target litert`` first evaluates each scatter's constant index chain into one
constant (passes/constant_indices.py: onnx2tf's onnxsim folds it with the form's index arithmetic
before anything permutes it), then writes every scatter in its cheapest exact scatter-free form,
as ``no-scatter`` does, and moves a model above opset 23 down to 23 (onnx2tf's onnxruntime 1.23
loads no higher: onnxsim fails on an opset-24 model, whose computed shapes then reach the converter
unfolded; a TensorScatter prepared at opset 24 came out silently wrong).
"""

from __future__ import annotations

__all__: list[str] = []  # (registers its target at import; nothing else to use)

from scatter_rewrite.targets import Preparation, Target, op_table_file, register_target
from scatter_rewrite.targets.runtimes import Runtime


# onnx2tf 1.29.24 runs with onnx 1.19.1 and onnxruntime 1.23.0 (its pins), which load opsets up to
# 23: an opset-24 model is not simplified (onnxsim fails on it), and its computed shapes reach the
# converter unfolded, where a TensorScatter's prepared positions came out silently wrong.
ONNX2TF_MAX_OPSET = 23


register_target(Target(
    name="litert", family="litert",
    summary="LiteRT (TensorFlow Lite) through onnx2tf: no scatter it converts exactly",
    opsets=(7, None), runs=(),
    gets_wrong=(
        "ScatterND add/mul/max/min: converted into TFLite's summing SCATTER_ND, computing "
        "data*(1-count)+sum(updates), without a warning",
        "a constant 1-D initializer fed to Unsqueeze is permuted (arange(30) -> 0,2,...,29,1)",
        "ScatterElements add/mul/max/min: refused",
    ),
    sources=("measured: onnx2tf 1.29.24, tensorflow 2.19.0, ai-edge-litert 2.1.0 "
             "(tests/targets/test_litert.py)",
             "onnx2tf/ops/ScatterElements.py (reduction none only), onnx2tf/ops/ScatterND.py"),
    # (constant index chains folded first; a model above opset 23 moved down, exactly, after its
    # scatters are rewritten)
    preparation=Preparation(
        constant_indices=True,
        writing={"flatten": False, "computed_expands": False, "segment_tree": False},
        max_opset=(ONNX2TF_MAX_OPSET, f"onnx2tf 1.29.24's onnxruntime 1.23 loads opsets up to "
                                      f"{ONNX2TF_MAX_OPSET}")),
    options=("max_intermediate_mib",), ops=op_table_file("litert"),
    # (onnx2tf pins onnx, onnxruntime, numpy and tensorflow exactly: a venv of its own)
    runner=Runtime("LiteRT", "run_litert.py", None,
                   "a venv of onnx2tf's own: tests/runtimes/setup_venvs.sh onnx2tf builds one")))
