"""Prepare every scatter for TensorRT's ONNX parser (``scatter-rewrite tensorrt``).

:func:`tensorrt_passes` is the whole flow: upgrade the deprecated ``Scatter`` (UpgradePass), fold
constant scatters (FoldPass), lower ``TensorScatter`` (LowerPass, only when the model has one),
then :class:`TensorRTPass` for the chosen TensorRT version.

What TensorRT accepts (facts and sources: /work/shared/reference/tensorrt-and-exporters.md; the
onnx-tensorrt importer ``addScatterLayer`` in onnx2trt_utils.cpp; NVIDIA/TensorRT
plugin/scatterElementsPlugin/README.md):

* ``reduction="none"``: ``IScatterLayer``. Its ELEMENT mode (ScatterElements) asserts
  ``indices.d[i] <= data.d[i]`` and ``updates.d[i] <= data.d[i]`` ("Indices dimensions must be less
  than data dimensions!", NVIDIA/TensorRT#3650); its ND mode (ScatterND) has no such check. So every
  ScatterElements(none) becomes an exactly equivalent ScatterND (:mod:`.to_scatternd`). UINT8 data is
  rejected by the importer on both paths: reported, left alone.
* ScatterND with a ``reduction`` attribute, even ``"none"``: rejected by TensorRT 10.0-10.8
  (``Assertion failed: !attrs.count("reduction")``, onnx/onnx-tensorrt#957,
  microsoft/onnxruntime#23618): ``"none"`` is dropped. ScatterND add/mul/max/min: no TensorRT version
  supports them (IScatterLayer has no reduction).
* TensorRT 10: ScatterElements add/mul/max/min go to the built-in ``ScatterElements`` plugin, which
  takes INT64 indices only and data FP32/FP16/INT32/INT64 (README "Known issues": BFLOAT16 and INT8
  not supported). Kept; int32 indices get a ``Cast`` to int64. ScatterND reductions become that
  form: ScatterElements(axis=0, same reduction) on the data viewed as [rows, row size] (exact: every
  update row lands on one data row, in update order).
* TensorRT 8.6: the importer never reads ``reduction``: add/mul/max/min are silently ignored
  (wrong results, NVIDIA/TensorRT#3750). Every reduction must be lowered to ops TensorRT 8.6
  accepts. The standard lowering (:func:`scatter_rewrite.passes._segment_reduce.lower_reduction`)
  is tried and its nodes are checked against the parser's documented restrictions
  (:func:`tensorrt_violations`); today it sorts with ``TopK`` whose ``K`` is computed at run time,
  which TensorRT's parser rejects ("K input must be an initializer", onnx-tensorrt
  docs/operators.md), so such nodes are left alone with that reason rather than emitting a model
  TensorRT refuses. The same applies on TensorRT 10 to reductions the plugin cannot take.

Everything rewritten is exact (the pipeline validates it in onnxruntime).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from scatter_rewrite.errors import OptionError
from scatter_rewrite.graph import Scope, attr, is_default_domain, iter_nodes
from scatter_rewrite.passes.base import ScatterPass
from scatter_rewrite.passes.to_scatternd import (
    Builder, Decline, Names, convert_to_scatternd, drop_none_reduction, infer_missing_shapes, known_rank,
    value_dtype,
)

TRT_VERSIONS = ("8.6", "10")
REDUCTIONS = ("add", "mul", "max", "min")
# NVIDIA/TensorRT plugin/scatterElementsPlugin/README.md: int64 indices only; BF16/INT8 unsupported.
PLUGIN_DATA_TYPES = {ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.INT32, ir.DataType.INT64}
# onnx-tensorrt addScatterLayer: checkNotInvalidType(data, {"UINT8"}) for ScatterND and ScatterElements.
REJECTED_DATA_TYPES = {ir.DataType.UINT8}
# The highest opset each TensorRT's parser documents (onnx-tensorrt docs/operators.md: "TensorRT 10.0
# supports operators in the inclusive range of opset 9 to opset 20"; 8.5/8.6: "up to Opset 17").
MAX_OPSET = {"8.6": 17, "10": 20}
# Ops the parser does not support at all (onnx-tensorrt docs/operators.md, 8.x and 10.x tables).
UNSUPPORTED_OPS = {"Compress", "Unique", "StringNormalizer", "TfIdfVectorizer"}


def check_trt_version(trt_version: str) -> str:
    version = str(trt_version)
    if version not in TRT_VERSIONS:
        raise OptionError(f"--trt-version {trt_version!r} is unknown: pick one of {', '.join(TRT_VERSIONS)}")
    return version


def _is_constant(value: ir.Value | None) -> bool:
    if value is None:
        return False
    if value.is_initializer() and not value.is_graph_input():
        return True
    producer = value.producer()
    return producer is not None and producer.op_type == "Constant"


def _all(nodes):
    for node in nodes:
        yield node
        for a in node.attributes.values():
            if isinstance(a, ir.Attr) and a.type == ir.AttributeType.GRAPH:
                yield from _all(a.value)
            elif isinstance(a, ir.Attr) and a.type == ir.AttributeType.GRAPHS:
                for g in a.value:
                    yield from _all(g)


def tensorrt_violations(nodes, trt_version: str) -> list[str]:
    """Why TensorRT's ONNX parser would reject any of ``nodes`` (and their subgraphs); [] if none known.

    Only documented restrictions are checked (onnx-tensorrt docs/operators.md): TopK needs K as an
    initializer (and FP32/FP16 data on 8.x), Compress/Unique/... are unsupported, scatter data
    may not be UINT8, ScatterND may not carry a reduction, ScatterElements reductions are ignored on 8.6.
    """
    found = []
    for node in _all(nodes):
        op = node.op_type
        if op in UNSUPPORTED_OPS:
            found.append(f"{op} is not supported by TensorRT's ONNX parser")
        elif op == "TopK":
            if len(node.inputs) > 1 and not _is_constant(node.inputs[1]):
                found.append("TopK's K is computed at run time; TensorRT's parser needs K as an initializer")
            if trt_version == "8.6" and node.inputs[0] is not None and node.inputs[0].dtype not in (
                    ir.DataType.FLOAT, ir.DataType.FLOAT16, None):
                found.append(f"TopK on {node.inputs[0].dtype.name} (TensorRT 8.x: FP32/FP16 only)")
        elif op in ("ScatterND", "ScatterElements"):
            if node.inputs[0] is not None and node.inputs[0].dtype in REJECTED_DATA_TYPES:
                found.append(f"{op} on UINT8 data")
            reduction = attr(node, "reduction", None)
            if op == "ScatterND" and reduction is not None:
                found.append(f'ScatterND with reduction="{reduction}"')
            if op == "ScatterElements" and reduction not in (None, "none") and trt_version == "8.6":
                found.append(f"ScatterElements reduction={reduction} (silently ignored by TensorRT 8.6)")
    return list(dict.fromkeys(found))


class TensorRTPass(ScatterPass):
    """Make every scatter TensorRT-ready for ``trt_version`` (see the module docstring)."""

    name = "tensorrt"

    def __init__(self, trt_version: str = "10"):
        super().__init__()
        self.trt_version = check_trt_version(trt_version)

    def run(self, model: ir.Model) -> None:
        infer_missing_shapes(model)
        names = Names(model)
        for node, scope in iter_nodes(model):
            if not is_default_domain(node) or node.op_type not in ("ScatterElements", "ScatterND", "TensorScatter", "Scatter"):
                continue
            try:
                detail = self._prepare(model, node, scope, names)
            except Decline as reason:
                self.skip(node, scope, str(reason))
                continue
            if detail is not None:
                self.rewrote(node, scope, detail)
        if any("TopK" in s.detail for s in self.result.skipped):
            self.note("reductions left alone: the standard lowering sorts with a run-time TopK K, which "
                      "TensorRT's parser rejects; on TensorRT 10 use FP32/FP16/INT32/INT64 data (plugin), "
                      "on 8.6 upgrade TensorRT or compute the scatter outside the engine")

    def _prepare(self, model: ir.Model, node: ir.Node, scope: Scope, names: Names) -> str | None:
        op, reduction = node.op_type, attr(node, "reduction", "none")
        data = node.inputs[0] if node.inputs else None
        if op in ("Scatter", "TensorScatter"):
            raise Decline(f"{op} is left for the upgrade/lower passes of this flow (TensorRT does not support it)")
        if value_dtype(model, scope, data) in REJECTED_DATA_TYPES:
            raise Decline("TensorRT's importer rejects UINT8 scatter data (addScatterLayer: "
                          "checkNotInvalidType UINT8); change the model's dtype")
        if reduction == "none":
            if op == "ScatterND":
                if drop_none_reduction(node):
                    return 'explicit reduction="none" dropped (TensorRT 10.0-10.8 rejects any reduction attribute)'
                return None
            return convert_to_scatternd(model, node, scope, names, reduction="none") + \
                " (ND mode: no indices/updates <= data dimension limit)"
        if reduction not in REDUCTIONS:
            raise Decline(f"unknown reduction {reduction!r}")
        if self.trt_version == "10":
            plugin_reason = self._plugin_blocker(model, node, scope)
            if plugin_reason is None:
                return self._to_plugin_form(model, node, scope, names)
            return self._lower(model, node, scope, names, f"the ScatterElements plugin cannot take it: {plugin_reason}")
        return self._lower(model, node, scope, names, "TensorRT 8.6 silently ignores scatter reductions (NVIDIA/TensorRT#3750)")

    # ---- TensorRT 10: the built-in ScatterElements plugin -------------------------------------

    def _plugin_blocker(self, model: ir.Model, node: ir.Node, scope: Scope) -> str | None:
        data, indices, updates = node.inputs
        dtype = value_dtype(model, scope, data)
        if dtype not in PLUGIN_DATA_TYPES:
            kind = dtype.name if dtype is not None else "unknown"
            return f"data type {kind} (the plugin takes FP32, FP16, INT32, INT64)"
        if node.op_type == "ScatterND":
            if indices.shape is None or not indices.shape or not isinstance(indices.shape[-1], int) or indices.shape[-1] < 1:
                return "the index tuple length (last dimension of indices) is not static"
            if known_rank(model, scope, [data]) is None:
                return "the rank of data is unknown"
        return None  # a ScatterElements needs nothing else: the plugin reads axis and reduction as they are

    def _to_plugin_form(self, model: ir.Model, node: ir.Node, scope: Scope, names: Names) -> str | None:
        data, indices, updates = node.inputs
        reduction = attr(node, "reduction")
        b = Builder(model, scope, names, node.name or "scatter")
        if node.op_type == "ScatterElements":
            if value_dtype(model, scope, indices) == ir.DataType.INT64:
                return None  # already what the plugin takes
            final = ir.node("ScatterElements", [data, b.to_int64(indices), updates],
                            {"axis": attr(node, "axis", 0), "reduction": reduction}, num_outputs=1)
            b.replace(node, final)
            return f"indices cast to int64 (the TensorRT ScatterElements plugin takes INT64 only), reduction={reduction} kept"
        # ScatterND(data, indices[..., k], updates) == ScatterElements(axis=0) on data [rows, row size]
        # with each update row's linear row index repeated along the row.
        k = indices.shape[-1]
        q = len(indices.shape)
        flat = b.op("Reshape", [b.to_int64(indices), b.const(np.array([-1, k], np.int64), "tuple_shape")],
                    dtype=ir.DataType.INT64, suffix="tuples")
        linear = None
        for j in range(k):
            column = b.op("Gather", [flat, b.const(np.array(j, np.int64), "component")], {"axis": 1},
                          dtype=ir.DataType.INT64, suffix=f"component{j}")
            size = b.dim(data, j, scalar=True)
            column = b.normalize(column, size)
            linear = column if linear is None else b.op(
                "Add", [b.op("Mul", [linear, size], dtype=ir.DataType.INT64, suffix="scaled"), column],
                dtype=ir.DataType.INT64, suffix="linear")
        rows = b.op("Flatten", [data], {"axis": k}, dtype=data.dtype, suffix="rows")
        values = b.op("Flatten", [updates], {"axis": q - 1}, dtype=data.dtype, suffix="row_updates")
        column = b.op("Reshape", [linear, b.const(np.array([-1, 1], np.int64), "column_shape")],
                      dtype=ir.DataType.INT64, suffix="row_keys")
        values_shape = b.op("Shape", [values], dtype=ir.DataType.INT64, suffix="updates_shape")
        keys = b.op("Expand", [column, values_shape], dtype=ir.DataType.INT64, suffix="keys")
        scattered = b.op("ScatterElements", [rows, keys, values], {"axis": 0, "reduction": reduction},
                         dtype=data.dtype, suffix="scattered")
        data_shape = b.op("Shape", [data], dtype=ir.DataType.INT64, suffix="data_shape")
        final = ir.node("Reshape", [scattered, data_shape], num_outputs=1)
        b.replace(node, final)
        return (f"-> ScatterElements(axis=0, reduction={reduction}) on data as [rows, row size] "
                f"(TensorRT has no ScatterND reduction; its ScatterElements plugin has)")

    # ---- lowering to standard ops -------------------------------------------------------------

    def _lower(self, model: ir.Model, node: ir.Node, scope: Scope, names: Names, why: str) -> str:
        try:
            from scatter_rewrite.passes import _segment_reduce as seg
        except ImportError as e:  # the lowering module is another pass's; report, never crash
            raise Decline(f"{why}; the standard lowering is unavailable ({e})") from None
        blocker = seg.reduction_blocker(node, scope.opset)
        if blocker is not None:
            raise Decline(f"{why}; it cannot be lowered either: {blocker}")
        nodes, out = seg.lower_reduction(node, scope.opset, seg.Names(names.taken, prefix="trt"))
        violations = tensorrt_violations(nodes, self.trt_version)
        if violations:
            # Nothing was spliced in: detach the built nodes from the values they read, so no
            # orphan consumer stays registered on the model's values, and leave the node alone.
            for built in _all(nodes):
                for i in range(len(built.inputs)):
                    built.replace_input_with(i, None)
            raise Decline(f"{why}; the standard lowering would emit what TensorRT {self.trt_version} "
                          f"rejects ({'; '.join(violations)}), so the node is left alone")
        ir.convenience.replace_nodes_and_values(scope.body, node, [node], nodes, [node.outputs[0]], [out])
        return f"lowered to {len(nodes)} standard nodes ({why})"


class _LowerTensorScatter(ScatterPass):
    """Run LowerPass only when the model holds a TensorScatter (opset 24, which no TensorRT parses):
    it becomes ScatterElements and the model moves to the highest opset the TensorRT version documents."""

    name = "lower-tensorscatter"

    def __init__(self, trt_version: str):
        super().__init__()
        self.trt_version = trt_version

    def run(self, model: ir.Model) -> None:
        found = [(n, s) for n, s in iter_nodes(model) if n.op_type == "TensorScatter" and is_default_domain(n)]
        if not found:
            return
        target = MAX_OPSET[self.trt_version]
        lacking = [n for n, _ in iter_nodes(model) if n.op_type in ("ScatterElements", "ScatterND")
                   and is_default_domain(n) and attr(n, "reduction", "none") in ("max", "min") and target < 18]
        if lacking:
            # Moving to opset 17 would lower these max/min reductions with a run-time TopK, which
            # TensorRT's parser rejects: leave the TensorScatter (check reports it) instead.
            for node, scope in found:
                self.skip(node, scope, f"not lowered: moving the model to opset {target} would also lower "
                          f"{len(lacking)} max/min scatter(s) into ops TensorRT {self.trt_version} rejects")
            return
        from scatter_rewrite.passes.lower import LowerPass

        inner = LowerPass(opset=target, mode="standard")(model)
        self.result.rewritten += inner.rewritten
        self.result.skipped += inner.skipped
        self.result.notes += inner.notes
        self.result.modified |= inner.modified


def tensorrt_passes(trt_version: str = "10") -> list[ir.passes.PassBase]:
    """The whole TensorRT preparation for ``trt_version`` ("8.6" or "10"), in order."""
    version = check_trt_version(trt_version)
    from scatter_rewrite.passes.fold import FoldPass
    from scatter_rewrite.passes.upgrade import UpgradePass

    return [UpgradePass(), FoldPass(), _LowerTensorScatter(version), TensorRTPass(version)]

