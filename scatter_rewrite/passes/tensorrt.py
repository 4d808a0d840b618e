"""Prepare every scatter for TensorRT's ONNX parser (``scatter-rewrite tensorrt``).

:func:`scatter_rewrite.verbs.tensorrt_passes` is the whole flow: upgrade the deprecated
``Scatter`` (UpgradePass), fold constant scatters (FoldPass), lower ``TensorScatter`` (LowerPass,
only when the model has one: :mod:`.tensorrt_tensorscatter`), then :class:`TensorRTPass` (this
module) for the chosen TensorRT version, and last the model moves down to the highest opset that
version's parser documents (:data:`scatter_rewrite.targets.tensorrt.parser.PARSER_MAX_OPSET`) when
it is above it (:mod:`.tensorrt_opset_cap`, then MoveOpsetPass). What these passes share is in
:mod:`.tensorrt_flow`.

What TensorRT accepts (facts and sources: docs/tensorrt.md; the
onnx-tensorrt importer ``addScatterLayer`` in onnx2trt_utils.cpp; NVIDIA/TensorRT
plugin/scatterElementsPlugin/README.md):

* ``reduction="none"``: ``IScatterLayer``. Its ELEMENT mode (ScatterElements) asserts
  ``indices.d[i] <= data.d[i]`` and ``updates.d[i] <= data.d[i]`` ("Indices dimensions must be less
  than data dimensions!", NVIDIA/TensorRT#3650); its ND mode (ScatterND) has no such check. So every
  ScatterElements(none) becomes an exactly equivalent ScatterND (:mod:`.to_scatternd`).
* Data types (:func:`scatter_data_blocker`; the scatter layer takes 8.6: FP32/FP16/INT8/INT32, with
  INT64 and DOUBLE cast down by the parser; 10: also BF16/INT64): BOOL, which no TensorRT scatter
  takes, is written through INT32 (Cast, ScatterND, Cast back: exact); UINT8 (rejected by the
  importer), INT16 and UINT16 through INT32, UINT32 through INT64 on 10/11 (Cast, the scatter,
  add/mul wrapped into the narrow range by Mod, Cast back: exact;
  :data:`scatter_rewrite.targets.tensorrt.parser.SCATTER_CARRIERS`); BFLOAT16 on 8.6 (no such type
  in TensorRT 8), UINT32 on 8.6 (no 64-bit integers) and types with no exact carrier (UINT64,
  STRING, ...) are reported and left alone.
* ScatterND with a ``reduction`` attribute, even ``"none"``: rejected by TensorRT 10.0-10.8
  (``Assertion failed: !attrs.count("reduction")``, onnx/onnx-tensorrt#957,
  microsoft/onnxruntime#23618): ``"none"`` is dropped. ScatterND add/mul/max/min: no TensorRT
  version supports them (IScatterLayer has no reduction).
* TensorRT 10: ScatterElements add/mul/max/min go to the built-in ``ScatterElements`` plugin, which
  takes INT64 indices only and data FP32/FP16/INT32/INT64 (README "Known issues": BFLOAT16 and INT8
  not supported). Kept; int32 indices get a ``Cast`` to int64. ScatterND reductions become that
  form: ScatterElements(axis=0, same reduction) on the data viewed as [rows, row size] (exact: every
  update row lands on one data row, in update order).
* TensorRT 8.6: the importer never reads ``reduction``: add/mul/max/min are silently ignored
  (wrong results, NVIDIA/TensorRT#3750). Every reduction is lowered to ops TensorRT 8.6 accepts:
  :func:`~.lowering.network_reduce.lower_reduction_network` (keys sorted by a bitonic
  network run as one fixed-shape Loop, a segmented scan as another, one ScatterND with unique
  targets; no TopK, NonZero or If). It needs a static number of updates (and a static ScatterND
  index tuple length); nodes it cannot take are left alone with the reason. The same lowering
  serves TensorRT 10 for reductions the plugin cannot take (data other than FP32/FP16/INT32/INT64).
  The standard lowering (:mod:`.lowering.segment_reduce`) is not used here: it sorts all n keys
  with one
  ``TopK`` (TensorRT takes K <= 3840 only) and reduces in a ``Loop`` whose carried values shrink
  (TensorRT's ILoop needs fixed-shape recurrences).
  :func:`.tensorrt_violations.tensorrt_violations` checks every emitted node against the
  documented restrictions, op and data type (the one table:
  :mod:`scatter_rewrite.targets.tensorrt.parser`).
  The lowering needs the scatter's rank: Ifs with a constant condition that hide it (TorchScript's
  rank-0 wrapper of ``scatter_reduce``) are inlined first (:func:`inline_rank_hiding_ifs`). Where
  nothing needs the rank (a ScatterElements the TensorRT 10/11 plugin takes as it is) such an If is
  left, unless shape inference refuses the model's declared shapes: TensorRT's parser imports
  only the branch it takes.
  When a TensorScatter takes the model to opset 17 on 8.6,
  its max/min reductions are lowered this way before LowerPass runs (else LowerPass would sort them
  with TopK); if one cannot be, the TensorScatter is left alone with the reason.

* A reducing ScatterND with an empty index tuple (``indices.shape[-1] == 0``: every update reduces
  into the whole data): on 10/11 the plugin form above with one row, every key 0; where it is
  lowered, first written as the equal ScatterND with tuples (0) into the data unsqueezed to one row
  (:func:`one_row_twin`), which the lowering takes.

Custom-domain scatters (what ``lower --mode custom|tensorrt-plugin`` writes) are not rewritten, but
the parser ignores their domain and imports them as the ONNX op: one whose reduction this TensorRT
ignores (8.6) or rejects (ScatterND) is reported left alone with the reason.

Everything rewritten is exact (the pipeline validates it in onnxruntime). A node a pass of the flow
must leave as it is (TensorRT rejects it, or computes it wrong), or a model it cannot bring down to
the parser's highest opset, makes the target unreachable: the pass raises ConversionError with the
reason (``scatter-rewrite tensorrt`` exits 1 and writes nothing; ``check --target tensorrt-X``,
a dry run of the same passes, says BLOCKED with that reason).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnx_ir as ir

from scatter_rewrite.limits import REDUCTIONS, TRT_VERSIONS
from scatter_rewrite.graph import (
    CUSTOM_SCATTER_OPS, Scope, attr, is_default_domain, iter_nodes, reference_reason,
)
from scatter_rewrite.type_inference import (
    annotate_functions_with, borrow_inferred_types, restore_types, serialize_without_weights,
)
from scatter_rewrite.targets.tensorrt.parser import (
    CARRIED_DATA_TYPES, CARRIER_CASTS_VIA, PARSES_TENSORSCATTER, PLUGIN_DATA_TYPES,
    SCATTER_CARRIERS, as_parsed, no_tensor_type, scatter_types, type_names,
)
from scatter_rewrite.passes.tensorrt_flow import (
    TensorRTFlowPass, UNLOWERABLE, check_trt_version, inline_rank_hiding_ifs, lower_tensorrt_safe,
)
from scatter_rewrite.passes.tensorrt_violations import tensorrt_violations
# The flow's other passes, importable from here with the rest of the flow.
from scatter_rewrite.passes.tensorrt_opset_cap import CapOpsetPass, cap_reason
from scatter_rewrite.passes.tensorrt_tensorscatter import LowerTensorScatterPass, has_tensor_scatter
from scatter_rewrite.passes.to_scatternd import (
    Decline, ModelNames, ReplacementBuilder, convert_to_scatternd, drop_none_reduction,
    infer_missing_shapes, known_rank, scatter_nd_through, value_dtype,
)
from scatter_rewrite.said import message_of, param, said

__all__ = [
    "cap_reason", "CapOpsetPass", "check_trt_version", "CUSTOM_AS_ONNX",
    "inline_rank_hiding_ifs", "is_reducing_scatter", "LowerTensorScatterPass",
    "scatter_carrier", "scatter_data_blocker", "has_tensor_scatter", "one_row_twin",
    "tensorrt_violations", "TensorRTPass", "TRT_VERSIONS",
]

def scatter_carrier(dtype: ir.DataType | None, trt_version: str) -> ir.DataType | None:
    """The wider integer type a scatter on ``dtype`` data is written through for TensorRT
    ``trt_version`` (:data:`scatter_rewrite.targets.tensorrt.parser.SCATTER_CARRIERS`), or None."""
    return SCATTER_CARRIERS[trt_version].get(dtype) if dtype is not None else None


def scatter_data_blocker(dtype: ir.DataType | None, trt_version: str) -> tuple[str, bool] | None:
    """Why TensorRT ``trt_version`` cannot run a ScatterND/ScatterElements on ``dtype`` data as it
    stands, and whether ``scatter-rewrite tensorrt`` fixes that (None: nothing to fix; unknown
    dtype).

    The scatter layer's types (TensorRT operator docs Scatter.html; onnx-tensorrt docs/operators.md,
    :func:`scatter_rewrite.targets.tensorrt.parser.scatter_types`): 8.6 FP32, FP16, INT8, INT32
    (INT64 and DOUBLE cast down by the parser); 10 also BF16 and INT64. BOOL is in neither: the pass writes it through
    INT32 (exact). UINT8 (rejected by the importer: addScatterLayer checkNotInvalidType UINT8),
    INT16 and UINT16 are written through INT32, UINT32 through INT64 on 10/11
    (:data:`scatter_rewrite.targets.tensorrt.parser.SCATTER_CARRIERS`). TensorRT 8.x has no BFLOAT16
    at all (onnx2trt_utils convertDtype: "Unsupported ONNX data type"); UINT64, STRING and complex
    data have no exact carrier."""
    if dtype is None:
        return None
    takes = (f"TensorRT {trt_version}'s scatter takes {type_names(scatter_types(trt_version))} "
             "only (operators/docs/Scatter.html, onnx-tensorrt docs/operators.md)")
    if dtype in CARRIED_DATA_TYPES:
        return f"{dtype.name} data: {takes}", True
    if (carrier := scatter_carrier(dtype, trt_version)) is not None:
        importer = (" and its importer rejects UINT8 (addScatterLayer: checkNotInvalidType UINT8)"
                    if dtype == ir.DataType.UINT8 else "")
        return (f"{dtype.name} data: {takes}{importer}; scatter-rewrite tensorrt writes it "
                f"through {carrier.name} (exact Casts around the scatter)", True)
    if as_parsed(dtype, trt_version) in scatter_types(trt_version):
        return None
    if dtype == ir.DataType.BFLOAT16:
        return (
            said('BFLOAT16 data: TensorRT 8.6 has no bfloat16 type (onnx2trt_utils convertDtype: '
                 '"Unsupported ONNX data type"; bfloat16 arrived in TensorRT 9); use ',
                 param("trt_version", "10"), ' or another dtype'),
            False,
        )
    if dtype == ir.DataType.UINT32 and trt_version == "8.6":
        return (said("UINT32 data: not a type TensorRT 8.6's scatter takes, and 8.6 has no "
                     "64-bit integer to carry it exactly (its parser clamps INT64 to INT32); use ",
                     param("trt_version", "10"), " or another dtype"), False)
    return (
        f"{dtype.name} data: not a type TensorRT {trt_version}'s scatter takes "
        f"({type_names(scatter_types(trt_version))}; onnx-tensorrt docs/operators.md), and no "
        "wider type it takes holds every value exactly; change the model's dtype",
        False,
    )


def is_reducing_scatter(node: ir.Node) -> bool:
    return (is_default_domain(node) and node.op_type in ("ScatterElements", "ScatterND")
            and attr(node, "reduction", "none") != "none")


class TensorRTPass(TensorRTFlowPass):
    """Make every scatter TensorRT-ready for ``trt_version`` (see the module docstring)."""

    name = "tensorrt"

    def run(self, model: ir.Model) -> None:
        for text in inline_rank_hiding_ifs(model, self._inlining_needed(model)):
            self.note(text, modified=True)
        infer_missing_shapes(model)
        names = ModelNames(model)
        # A reduction in a function is lowered with the dtype and shapes all its call sites agree on
        # (borrowed for the pass: the function's values stay untyped in the saved model).
        borrowed = annotate_functions_with(model, is_reducing_scatter)
        if any(is_reducing_scatter(node) and not scope.is_function
               for node, scope in iter_nodes(model)):
            # The row-key layout reads the shape of the value an index Expand broadcasts (an
            # Unsqueeze or Reshape TorchScript writes no type for) and the data's row width
            # (TorchScript's is a symbolic dim): borrowed for the pass too.
            borrowed += borrow_inferred_types(model, sharpen=True)
        try:
            for node, scope in iter_nodes(model):
                if (
                    not is_default_domain(node)
                    and (why := self._custom_domain_blocker(node)) is not None
                ):
                    self.skip(node, scope, why)
                if not is_default_domain(node) or node.op_type not in (
                    "ScatterElements",
                    "ScatterND",
                    "TensorScatter",
                    "Scatter",
                ):
                    continue
                try:
                    detail = self._prepare(model, node, scope, names)
                except Decline as reason:
                    self.skip(node, scope, message_of(reason))
                    continue
                if detail is not None:
                    self.rewrote(node, scope, detail)
        finally:
            restore_types(borrowed)

    def advice(self, skipped: list) -> str | None:
        if not any(UNLOWERABLE in s.detail for s in skipped):
            return None
        return ("on TensorRT 10 use FP32/FP16/INT32/INT64 data (plugin), or compute the scatter "
                "outside the engine")

    def _inlining_needed(self, model: ir.Model) -> Callable[[ir.Node], bool]:
        """Which reducing scatters of unknown rank need the constant-condition Ifs around them
        inlined: those whose rewrite needs the rank (every lowering, and the plugin form of a
        ScatterND), and all of them in a model whose declared shapes ONNX shape inference
        refuses (TorchScript declares shapes from the branch not taken, which inlining corrects).
        A ScatterElements the plugin takes as it is needs nothing: TensorRT's parser imports only
        the branch such an If takes (onnx-tensorrt 8.6 and 10, ``If`` importer), so the model is
        left as it is."""
        refused: list[bool] = []  # decided once, on the first node that needs it

        def needed(node: ir.Node) -> bool:
            if self.trt_version == "8.6" or node.op_type == "ScatterND":
                return True
            data = node.inputs[0] if node.inputs else None
            if data is None or (scatter_carrier(data.dtype, self.trt_version)
                                or data.dtype) not in PLUGIN_DATA_TYPES:
                return True
            if not refused:
                refused.append(_contradicts_inference(model))
            return refused[0]

        return needed

    def _custom_domain_blocker(self, node: ir.Node) -> str | None:
        """Why a custom-domain scatter (lower --mode custom/tensorrt-plugin) fails on this TensorRT:
        its parser ignores the domain and imports it as the ONNX op. None when it runs (or is not
        one)."""
        reduction = attr(node, "reduction", "none")
        if node.op_type not in CUSTOM_AS_ONNX or reduction == "none":
            return None
        if self.trt_version == "8.6":
            why = f"TensorRT 8.6 silently ignores its reduction={reduction} (wrong results)"
        elif node.op_type == "ScatterND":
            why = f"no TensorRT version supports ScatterND reduction={reduction}"
        else:
            return None  # the ScatterElements plugin's form
        return (
            f"a node of domain {node.domain!r}, which TensorRT's parser imports as ONNX "
            f"{node.op_type} (it ignores the domain): {why}; this pass rewrites default-domain "
            "nodes only, so run it on the model before it was lowered to custom-domain nodes"
        )

    def _prepare(self, model: ir.Model, node: ir.Node, scope: Scope,
                 names: ModelNames) -> str | None:
        op, reduction = node.op_type, attr(node, "reduction", "none")
        data = node.inputs[0] if node.inputs else None
        if op == "TensorScatter" and self.trt_version in PARSES_TENSORSCATTER:
            return None
        if op in ("Scatter", "TensorScatter"):
            raise Decline(
                f"{op} is left for the upgrade/lower passes of this flow (TensorRT does not "
                "support it)"
            )
        if (why := reference_reason(node)) is not None:
            raise Decline(
                f"{why} (TensorRT's parser needs it as a constant: call the function's body "
                "inline, or give the attribute a value in the function)"
            )
        dtype = value_dtype(model, scope, data)
        if (wide := scatter_carrier(dtype, self.trt_version)) is not None:
            return self._through_carrier(model, node, scope, names, dtype, wide)
        blocked = scatter_data_blocker(dtype, self.trt_version)
        if blocked is not None and not blocked[1]:
            raise Decline(blocked[0])
        carrier = ir.DataType.INT32 if dtype in CARRIED_DATA_TYPES else None
        if reduction == "none":
            why = f" ({blocked[0]})" if blocked is not None else ""
            if op == "ScatterND":
                if carrier is not None:
                    return scatter_nd_through(model, node, scope, names, carrier) + why
                if drop_none_reduction(node):
                    return (
                        'explicit reduction="none" dropped (TensorRT 10.0-10.8 rejects any '
                        "reduction attribute)"
                    )
                return None
            return (
                convert_to_scatternd(model, node, scope, names, reduction="none", carrier=carrier)
                + " (TensorRT's ScatterND importer has no 'indices/updates dimensions <= data's' "
                "limit, unlike its ScatterElements one: NVIDIA/TensorRT#3650)" + why
            )
        if reduction not in REDUCTIONS:
            raise Decline(f"unknown reduction {reduction!r}")
        if self.trt_version != "8.6":  # (10 and 11: the ScatterElements plugin)
            plugin_reason = self._plugin_blocker(model, node, scope)
            if plugin_reason is None:
                return self._to_plugin_form(model, node, scope, names)
            return self._lower(
                model,
                node,
                scope,
                names,
                f"the ScatterElements plugin cannot take it: {plugin_reason}",
            )
        return self._lower(
            model,
            node,
            scope,
            names,
            "TensorRT 8.6 silently ignores scatter reductions (NVIDIA/TensorRT#3750)",
        )

    def _as_one_row(self, model: ir.Model, node: ir.Node, scope: Scope,
                    names: ModelNames) -> ir.Node | None:
        """The node written as :func:`one_row_twin` says, in the graph (the data unsqueezed to
        one row, the result squeezed back); that ScatterND, or None (the node is left as it is)."""
        if one_row_twin(node, scope.opset) is None:
            return None
        data, indices, updates = node.inputs
        batch, dims = list(indices.shape)[:-1], list(data.shape)
        b = ReplacementBuilder(model, scope, names, node.name or "scatter")
        row = b.op("Unsqueeze", [data, b.const(np.array([0], np.int64), "row_axis")],
                   dtype=data.dtype, shape=[1, *dims], suffix="one_row")
        row_updates = b.op("Unsqueeze", [updates, b.const(np.array([len(batch)], np.int64),
                                                          "update_axis")],
                           dtype=data.dtype, shape=[*batch, 1, *dims], suffix="row_updates")
        keys = b.const(np.zeros((*batch, 1), np.int64), "row_keys")
        scattered = ir.Value(name=names(f"{b.prefix}_scattered"), type=ir.TensorType(data.dtype),
                             shape=ir.Shape([1, *dims]))
        inner = ir.node("ScatterND", [row, keys, row_updates],
                        {"reduction": attr(node, "reduction")}, outputs=[scattered],
                        name=names(f"{b.prefix}_ScatterND"))
        b.nodes.append(inner)
        b.replace(node, ir.node("Squeeze", [scattered, b.const(np.array([0], np.int64),
                                                               "row_axis_back")], num_outputs=1))
        return inner

    def _through_carrier(self, model: ir.Model, node: ir.Node, scope: Scope, names: ModelNames,
                         dtype: ir.DataType, wide: ir.DataType) -> str:
        """Write ``node`` on ``dtype`` data through the wider integer ``wide``: Cast data and
        updates, the same scatter (then prepared as one on ``wide`` data), and add/mul brought
        back into ``dtype``'s range by its wrap-around (Mod in ``wide``: what the narrow type's
        own arithmetic gives, as the wider one wraps modulo a multiple of its size) before the
        Cast back, so no Cast sees an out-of-range value. A type TensorRT converts through one
        other only (:data:`scatter_rewrite.targets.tensorrt.parser.CARRIER_CASTS_VIA`: UINT8, FLOAT)
        goes through it."""
        data, indices, updates = node.inputs
        reduction = attr(node, "reduction", "none")
        b = ReplacementBuilder(model, scope, names, node.name or "scatter")
        shape = list(data.shape) if data.shape is not None else None
        via = CARRIER_CASTS_VIA.get(dtype)

        def cast(v: ir.Value, steps: list, part: str) -> ir.Value:
            for step in steps:
                v = b.op("Cast", [v], {"to": step}, dtype=step,
                         shape=list(v.shape) if v.shape is not None else None,
                         suffix=f"{part}_{step.name.lower()}")
            return v

        steps = ([via] if via is not None else []) + [wide]
        wide_data, wide_updates = cast(data, steps, "data"), cast(updates, steps, "updates")
        attributes = {a.name: a.value for a in node.attributes.values()}
        out = b.op(node.op_type, [wide_data, indices, wide_updates], attributes, dtype=wide,
                   shape=shape, suffix="scattered")
        inner = out.producer()
        if reduction in ("add", "mul"):
            out = _wrap_into(b, out, dtype, wide, shape)
        if via is not None:
            out = cast(out, [via], "result")
        final = ir.node("Cast", [out], {"to": dtype}, num_outputs=1)
        b.replace(node, final)
        inner.name, final.name = final.name, b.names(f"{b.prefix}_cast_back")
        how = (f"{dtype.name} data written through {wide.name} (Cast"
               + (f" via {via.name}" if via is not None else "") + ", scatter"
               + (f", wrap-around into {dtype.name}" if reduction in ("add", "mul") else "")
               + f", Cast back: exact; TensorRT's scatter has no {dtype.name})")
        if (caveat := no_tensor_type(dtype)) is not None:
            how += f"; note: {caveat}"
        detail = self._prepare(model, inner, scope, names)
        return how + (f"; then {detail}" if detail else "")

    # ---- TensorRT 10: the built-in ScatterElements plugin -------------------------------------

    def _plugin_blocker(self, model: ir.Model, node: ir.Node, scope: Scope) -> str | None:
        data, indices, updates = node.inputs
        dtype = value_dtype(model, scope, data)
        if dtype not in PLUGIN_DATA_TYPES:
            kind = dtype.name if dtype is not None else "unknown"
            return f"data type {kind} (the plugin takes FP32, FP16, INT32, INT64)"
        if node.op_type == "ScatterND":
            if (
                indices.shape is None
                or not indices.shape
                or not isinstance(indices.shape[-1], int)
            ):
                return "the index tuple length (last dimension of indices) is not static"
            if known_rank(model, scope, [data]) is None:
                return "the rank of data is unknown"
        # A ScatterElements needs nothing else: the plugin reads axis and reduction as they are.
        return None

    def _to_plugin_form(self, model: ir.Model, node: ir.Node, scope: Scope,
                        names: ModelNames) -> str | None:
        data, indices, updates = node.inputs
        reduction = attr(node, "reduction")
        b = ReplacementBuilder(model, scope, names, node.name or "scatter")
        if node.op_type == "ScatterElements":
            if value_dtype(model, scope, indices) == ir.DataType.INT64:
                return None  # already what the plugin takes
            final = ir.node("ScatterElements", [data, b.to_int64(indices), updates],
                            {"axis": attr(node, "axis", 0), "reduction": reduction}, num_outputs=1)
            b.replace(node, final)
            return (
                "indices cast to int64 (the TensorRT ScatterElements plugin takes INT64 only), "
                f"reduction={reduction} kept"
            )
        # ScatterND(data, indices[..., k], updates) == ScatterElements(axis=0) on data [rows, row
        # size] with each update row's linear row index repeated along the row (k == 0: one row,
        # the whole data, every key 0).
        k = indices.shape[-1]
        q = len(indices.shape)
        linear = None
        if k:
            flat = b.op(
                "Reshape",
                [b.to_int64(indices), b.const(np.array([-1, k], np.int64), "tuple_shape")],
                dtype=ir.DataType.INT64,
                suffix="tuples",
            )
        for j in range(k):
            column = b.op(
                "Gather",
                [flat, b.const(np.array(j, np.int64), "component")],
                {"axis": 1},
                dtype=ir.DataType.INT64,
                suffix=f"component{j}",
            )
            size = b.dim(data, j, scalar=True)
            column = b.normalize(column, size)
            linear = (
                column
                if linear is None
                else b.op(
                    "Add",
                    [b.op("Mul", [linear, size], dtype=ir.DataType.INT64, suffix="scaled"), column],
                    dtype=ir.DataType.INT64,
                    suffix="linear",
                )
            )
        if linear is None:
            linear = b.const(np.zeros((1, 1), np.int64), "whole_data_row")
        rows = b.op("Flatten", [data], {"axis": k}, dtype=data.dtype, suffix="rows")
        values = b.op("Flatten", [updates], {"axis": q - 1}, dtype=data.dtype, suffix="row_updates")
        column = b.op("Reshape", [linear, b.const(np.array([-1, 1], np.int64), "column_shape")],
                      dtype=ir.DataType.INT64, suffix="row_keys")
        values_shape = b.op("Shape", [values], dtype=ir.DataType.INT64, suffix="updates_shape")
        keys = b.op("Expand", [column, values_shape], dtype=ir.DataType.INT64, suffix="keys")
        scattered = b.op(
            "ScatterElements",
            [rows, keys, values],
            {"axis": 0, "reduction": reduction},
            dtype=data.dtype,
            suffix="scattered",
        )
        data_shape = b.op("Shape", [data], dtype=ir.DataType.INT64, suffix="data_shape")
        # A 0 in the data's shape means "copy the input's dimension" to Reshape unless allowzero=1
        # (opset >= 14; this ScatterND reduction is >= 16): needed unless the shape is static
        # without a 0.
        static = data.shape is not None and all(isinstance(d, int) and d > 0 for d in data.shape)
        final = ir.node(
            "Reshape",
            [scattered, data_shape],
            {} if static or b.opset < 14 else {"allowzero": 1},
            num_outputs=1,
        )
        b.replace(node, final)
        return (f"-> ScatterElements(axis=0, reduction={reduction}) on data as [rows, row size] "
                f"(TensorRT has no ScatterND reduction; its ScatterElements plugin has)")

    # ---- lowering to standard ops -------------------------------------------------------------

    def _lower(self, model: ir.Model, node: ir.Node, scope: Scope, names: ModelNames,
               why: str) -> str:
        if (one_row := self._as_one_row(model, node, scope, names)) is not None:
            return lower_tensorrt_safe(one_row, scope, names, self.trt_version, why + "; its empty "
                                       "index tuple written as the tuple (0) into the data as one "
                                       "row", model)
        return lower_tensorrt_safe(node, scope, names, self.trt_version, why, model)


def one_row_twin(node: ir.Node, opset: int) -> ir.Node | None:
    """For a reducing ScatterND with an empty index tuple (every update reduces into the whole
    data), which the TensorRT-safe lowering does not take: the equal ScatterND, detached, with
    index tuples of length 1, all 0, into the data as one row ([1, *data]; updates [*batch, 1,
    *data]), when its shapes are static and the lowering takes it; else None."""
    from scatter_rewrite.passes.lowering.network_reduce import network_blocker

    if node.op_type != "ScatterND" or len(node.inputs) != 3:
        return None
    data, indices, _ = node.inputs
    if indices is None or indices.shape is None or not indices.shape or indices.shape[-1] != 0:
        return None
    batch, dims = list(indices.shape)[:-1], data.shape
    if dims is None or data.dtype is None or not all(isinstance(d, int) for d in [*batch, *dims]):
        return None
    keys = np.zeros((*batch, 1), np.int64)
    inputs = [ir.Value(name="row", type=ir.TensorType(data.dtype), shape=ir.Shape([1, *dims])),
              ir.Value(name="keys", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape(keys.shape),
                       const_value=ir.tensor(keys)),
              ir.Value(name="updates", type=ir.TensorType(data.dtype),
                       shape=ir.Shape([*batch, 1, *dims]))]
    twin = ir.node("ScatterND", inputs, {"reduction": attr(node, "reduction")}, num_outputs=1)
    return twin if network_blocker(twin, opset) is None else None


def _wrap_into(b: ReplacementBuilder, value: ir.Value, dtype: ir.DataType, wide: ir.DataType,
               shape) -> ir.Value:
    """``value`` (``wide`` integers) reduced into ``dtype``'s range modulo its size, as its own
    two's complement arithmetic would give: ``Mod(x, 2**bits)`` (fmod=0: the divisor's sign, so
    in [0, 2**bits)), shifted by half the size around it for a signed type."""
    bits = int(dtype.itemsize * 8)
    np_wide = wide.numpy()
    signed = dtype.numpy().kind == "i"
    if signed:
        value = b.op("Add", [value, b.const(np.array(2 ** (bits - 1), np_wide), "half_range")],
                     dtype=wide, shape=shape, suffix="shifted")
    value = b.op("Mod", [value, b.const(np.array(2 ** bits, np_wide), "range")], {"fmod": 0},
                 dtype=wide, shape=shape, suffix="wrapped")
    if signed:
        value = b.op("Sub", [value, b.const(np.array(2 ** (bits - 1), np_wide), "half_range")],
                     dtype=wide, shape=shape, suffix="unshifted")
    return value


# Custom-domain ops TensorRT's parser imports as the ONNX ones (it dispatches on op_type, ignoring
# the domain): those lower --mode custom|tensorrt-plugin writes.
CUSTOM_AS_ONNX = CUSTOM_SCATTER_OPS


def _contradicts_inference(model: ir.Model) -> bool:
    """Whether ONNX shape inference in strict mode, as onnx.checker's full check runs it, refuses
    ``model``: a declared shape it contradicts (checked without the big weights, whose bytes it
    does not need)."""
    try:
        onnx.shape_inference.infer_shapes(serialize_without_weights(model), strict_mode=True)
    except onnx.shape_inference.InferenceError:
        return True
    return False
