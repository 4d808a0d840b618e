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
* Of the exact scatter-free forms (passes/no_scatter.py), the ``mask`` form (one-hot Equal, Where,
  Reduce*) converts and runs exactly with the indices as graph inputs; the ``sort`` form (TopK of
  the keys, a doubling scan) runs wrong there (off by whole values; TFLite's TopK kept ONNX's tie
  rule in a test of its own, the cause is not isolated), and exactly where the indices are constant
  (onnx2tf's onnxsim then folds the index arithmetic into constants).

So ``prepare --target litert`` first evaluates each scatter's constant index chain into one
constant (which onnx2tf's onnxsim folds with the form's index arithmetic, before anything permutes
it), then writes every scatter as the ``mask`` form; a node that has only the
sort form (float max/min, whose result among NaNs and signed zeros depends on the update order a
mask reduction does not keep) gets it only where its indices are constant, and is refused
otherwise with that reason.
"""

from __future__ import annotations

from scatter_rewrite.targets import Target, op_table_file, register_target

__all__ = ["SORT_FORM_WRONG"]

SORT_FORM_WRONG = ("its only exact scatter-free form (sort: TopK and a doubling scan) runs wrong "
                   "after onnx2tf 1.29 unless the indices are constant (docs/targets.md, litert)")


def _passes(max_intermediate_mib: int | None = None) -> list:
    from scatter_rewrite.passes.mask_forms import MaskFormPass
    from scatter_rewrite.passes.no_scatter import DEFAULT_MAX_INTERMEDIATE_MIB, steps_for

    # (steps_for: the deprecated Scatter upgraded first, as for no-scatter)
    return steps_for(MaskFormPass("litert", SORT_FORM_WRONG, True,
                                  max_intermediate_mib or DEFAULT_MAX_INTERMEDIATE_MIB,
                                  fold_indices=True))


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
    passes=_passes, options=("max_intermediate_mib",), ops=op_table_file("litert")))
