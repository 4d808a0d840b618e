"""MNN (``mnn``), Alibaba's mobile and server runtime: a model converted by its ONNX converter
(``MNNConvert -f ONNX``) and run by its runtime. Measured with MNN 3.6.1 from PyPI, its compiled
converter (``MNN.tools._tools.mnnconvert``; the ``mnnconvert`` Python wrapper pip-installs a
logging SDK and sends conversion logs to a remote service) and its Python runtime on the CPU
(tests/targets/test_mnn.py reproduces each):

* The converter drops ``reduction``: every ScatterElements/ScatterND add/mul/max/min runs as an
  overwrite (the last write wins), silently: of the tests' scatter cases only those without a
  reduction come out right. (int32 negative indices into a reducing scatter killed the process
  with SIGBUS.) Scatter-9 runs exactly.
* A ScatterND without reduction of 2-tuples (2-D indices) into rank-3 or rank-4 data writes its
  slices to the wrong places; 1-tuples, and tuples of the data's rank, are right.
* TensorScatter and IsNaN are refused ("These Op Not Support: ONNX::TensorScatter").
* float32 ``Less`` is wrong where both operands are negative (a 64 x 64 grid over [-3, 3]: every
  wrong pair has both negative) or one is NaN (``Less(0, NaN)`` true); float32 ``Equal`` compares
  bit patterns (NaN equals itself, -0.0 differs from +0.0), so ``Equal(x, x)`` does not tell a
  NaN; ``Greater``, ``GreaterOrEqual`` and ``LessOrEqual`` are right on NaN, infinities and signed
  zeros. ``Abs(NaN)`` is 0 (no form written here uses Abs).
* lower's sort + segmented reduction + ScatterND(none) runs exactly for add/mul and integer
  max/min, but its float max/min gave +0.0 where onnxruntime's fold gives -0.0 (updates among
  -0.0/+0.0); the scatter-free sort form (no float through Where) is bit for bit, NaN included.
* MNN takes float32 and int32 tensors (its converter makes int64 int32): int64 data beyond int32's
  range, and the forms' int64 sort keys (a row times the count plus a position) past 2^31, are
  beyond what MNN computes (not measured at that size).

So ``prepare --target mnn`` keeps ScatterElements without a reduction, ScatterND without one of
1-tuples or tuples of the data's rank, and Scatter-9; writes every reducing scatter as lower's
sort + segmented reduction + ScatterND(none) (1-tuples), float max/min in the scatter-free sort
form instead, any other ScatterND scatter-free, TensorScatter as ScatterElements(none); then
writes every float Less, Equal and IsNaN, the forms' and the model's own, with comparisons MNN
computes right (:mod:`scatter_rewrite.passes.float_comparisons`; a model below opset 12 holding a
float Equal or IsNaN is moved to 12 first, exactly). ``check --target mnn`` blocks each node it
rewrites, with the reason.
"""

from __future__ import annotations

__all__ = ["COMPARISONS", "comparison_fault"]  # (and registers its target at import)

from typing import Any

from scatter_rewrite.targets import (
    Preparation, ScatterSupport, Target, op_table_file, register_target,
)
from scatter_rewrite.targets.runtimes import Runtime

# the comparisons MNN 3.6.1 gets wrong for floats (below)
COMPARISONS = frozenset({"Less", "Equal", "IsNaN"})
_RUNS = (ScatterSupport("ScatterElements", frozenset({"none"})),
         ScatterSupport("ScatterND", frozenset({"none"}),
                        limits="index tuples of length 1 or of the data's rank"),
         ScatterSupport("Scatter", frozenset({"none"})))

# what MNN 3.6.1 gets wrong in each op the comparisons pass rewrites (measured)
_FAULTS = {
    "Less": "MNN 3.6.1's float32 Less is wrong where both operands are negative or one is NaN",
    "Equal": "MNN 3.6.1's float32 Equal compares bit patterns (NaN equals itself, -0.0 differs "
             "from +0.0)",
    "IsNaN": "MNN 3.6.1's converter refuses IsNaN (and its Equal(x, x) is true for a NaN)",
}


def comparison_fault(node: Any, dtype: str | None) -> str | None:
    """How ``prepare --target mnn`` rewrites a comparison MNN computes wrongly
    (passes/float_comparisons.py writes it; ``check`` says it), or None where MNN is right;
    ``dtype``: the element type of its operands (None: unknown)."""
    from scatter_rewrite.graph import FLOAT_TYPES, is_default_domain  # (loading targets reads no onnx)

    if not is_default_domain(node) or node.op_type not in COMPARISONS:
        return None
    if len(node.inputs) != (1 if node.op_type == "IsNaN" else 2) or None in node.inputs:
        return None
    floats = dtype in {t.name for t in FLOAT_TYPES}
    if node.op_type == "Less" and (floats or dtype is None):
        return "float Less(a, b): written as Greater(b, a)"
    if node.op_type == "Equal" and floats:
        return "float Equal(a, b): written as And(GreaterOrEqual(a, b), LessOrEqual(a, b))"
    if node.op_type == "IsNaN" and (floats or dtype is None):
        return "IsNaN(x): written as Not(GreaterOrEqual(x, x))"
    return None


def _node_fault(node, dtype: str | None) -> str | None:
    if node.op_type == "ScatterND":
        return _scatter_nd_fault(node)
    said = comparison_fault(node, dtype)
    if said is None:
        return None
    return f"{_FAULTS[node.op_type]}; prepare --target mnn: {said}"


def _scatter_nd_fault(node) -> str | None:
    """A ScatterND without reduction MNN 3.6.1 gets wrong: index tuples of 2 or more into data of
    a higher rank (rows of slices written to the wrong places; 1-tuples, and tuples of data's
    rank, were right). Unknown lengths or ranks count as wrong: the rewrite is exact anyway."""
    from scatter_rewrite.graph import attr
    from scatter_rewrite.index_tuples import index_tuple_length

    if attr(node, "reduction", "none") != "none" or len(node.inputs) < 2:
        return None  # (a reduction: not run at all, said from runs)
    k = index_tuple_length(node.inputs[1])
    data = node.inputs[0]
    rank = len(data.shape) if data is not None and data.shape is not None else None
    if k == 1 or (k is not None and rank is not None and k >= rank):
        return None
    return (f"MNN 3.6.1 writes a ScatterND of {k or 'unknown-length'}-tuples into data of rank "
            f"{rank if rank is not None else 'unknown'} wrongly (1-tuples, and tuples of the "
            "data's rank, are right); prepare --target mnn writes it scatter-free")


register_target(Target(
    name="mnn", family="mnn",
    summary="MNN 3.6.1 (its ONNX converter and runtime): scatters without a reduction",
    opsets=(7, None), runs=_RUNS,
    gets_wrong=(
        "ScatterElements/ScatterND add/mul/max/min: the converter drops reduction, and the node "
        "runs as an overwrite (last write wins), without a warning",
        "ScatterND of 2-tuples into rank-3+ data: slices written to the wrong places",
        "TensorScatter and IsNaN: refused by the converter",
        "float32 Less is wrong where both operands are negative or one is NaN; float32 Equal "
        "compares bit patterns (true for NaN against itself, false for -0.0 against +0.0)",
    ),
    sources=("measured: MNN 3.6.1 (PyPI), its compiled converter MNN.tools._tools.mnnconvert and "
             "its Python runtime, CPU (tests/targets/test_mnn.py)",
             "https://github.com/alibaba/MNN/tree/3.6.1/tools/converter/source/onnx (its ONNX "
             "op converters, listed by MNNConvert -f ONNX --OP)"),
    preparation=Preparation(
        upgrade="rejected", sort_float_minmax=True,
        float_comparisons="GreaterOrEqual/LessOrEqual, which replace MNN's wrong float "
                          "comparisons, exist from opset 12"),
    options=("max_intermediate_mib",), ops=op_table_file("mnn"),
    node_fault=_node_fault,
    runner=Runtime("MNN", "run_mnn.py", "MNN", "pip install MNN",
                   int64_as_int32=True)))
