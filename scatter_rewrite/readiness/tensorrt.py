"""Readiness's TensorRT judgement (``check --target tensorrt-X``): what blocks a scatter node on
TensorRT 8.6, 10 or 11 as it is, and whether ``scatter-rewrite tensorrt`` fixes it, judged on the
model as that pass sees it (:class:`TensorrtTwins`). The cases, with their sources, are listed
in :mod:`scatter_rewrite.readiness`; the tables are the tensorrt pass's
(:mod:`scatter_rewrite.passes.tensorrt`, docs/tensorrt.md).
"""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.graph import is_default_domain, iter_nodes
from scatter_rewrite.passes.fix_dims import FixDimsPass, data_sized_source, dims_reaching
from scatter_rewrite.passes.lowering.network_reduce import NOT_STATIC, network_blocker
from scatter_rewrite.passes.tensorrt_flow import no_fixed_count
from scatter_rewrite.passes.tensorrt import (
    is_reducing_scatter, one_row_twin, scatter_carrier, scatter_data_blocker,
)
from scatter_rewrite.passes.to_scatternd import infer_missing_shapes
from scatter_rewrite.readiness.judges import unknown_reduction
from scatter_rewrite.readiness.report import Finding
from scatter_rewrite.targets.tensorrt.facts import PARSES_TENSORSCATTER, PLUGIN_TYPES
from scatter_rewrite.targets.tensorrt.parser import CARRIED_DATA_TYPES, no_tensor_type
from scatter_rewrite.type_inference import annotate_functions_with, restore_types
from scatter_rewrite.said import Said, said
from scatter_rewrite.verbs import command, spoken

__all__ = ["TensorrtTwins", "judge_tensorrt"]



class TensorrtTwins:
    """The model as ``scatter-rewrite tensorrt`` sees it before lowering: a copy with the constant
    Ifs that hide a reducing scatter's rank inlined, and, per set of dimension names, one with those
    dimensions fixed first (``--fix-dim``); each made on first use. The copies are made without
    the function types ``borrowed`` from the call sites, and get them again from their own call
    sites (whose shapes fixing a dimension may have made static)."""

    def __init__(self, model: ir.Model, borrowed):
        self.model = model
        self._borrowed = borrowed
        self._copies: dict[tuple[str, ...], ir.Model] = {}

    def twin(self, node: ir.Node, fixed: tuple[str, ...] = ()) -> ir.Node | None:
        """``node`` in the copy with the ``fixed`` dimensions fixed (found by op and name), None
        when it has no name or is not found."""
        if not node.name:
            return None
        copy = self._copies.get(fixed)
        if copy is None:
            from scatter_rewrite.type_inference import weightless_copy
            from scatter_rewrite.passes.tensorrt import inline_rank_hiding_ifs

            annotated = [(value, value.type, value.shape) for value, _ in self._borrowed]
            restore_types(self._borrowed)
            try:
                copy = self._copies[fixed] = weightless_copy(self.model)
            finally:
                for value, type_, shape in annotated:
                    value.type, value.shape = type_, shape
            if fixed:  # fixed to 2: shapes inferred again, shape arithmetic folded (fix_dims)
                FixDimsPass({name: 2 for name in fixed})(copy)
            if inline_rank_hiding_ifs(copy):
                infer_missing_shapes(copy)
            annotate_functions_with(copy, is_reducing_scatter)
        return next((n for n, _ in iter_nodes(copy)
                     if n.op_type == node.op_type and n.name == node.name), None)


def _static_dims(value: ir.Value | None):
    if value is None or value.shape is None:
        return None
    return [d if isinstance(d, int) else None for d in value.shape]


def judge_tensorrt(node: ir.Node, f: Finding, version: str, inlined: TensorrtTwins) -> None:
    """Fill ``f`` (blockers, notes, fix) for ``node`` on TensorRT ``version``."""
    fix = command("tensorrt", trt_version=version)
    fix_options: list[str] = []  # the dimensions the fix fixes first (--fix-dim NAME=SIZE)
    # A custom-domain node is judged as the ONNX op the parser imports it as; our passes rewrite
    # default-domain nodes only, so its fix is on the model it was lowered from.
    rewritable = is_default_domain(node)
    if not rewritable:
        f.notes.append(f"TensorRT's parser ignores the domain {node.domain!r} and imports this "
                       f"node as ONNX {node.op_type}")
    if node.op_type in ("Scatter", "TensorScatter"):
        _judge_tensorrt_other_scatter(node.op_type, f, version, fix)
        return
    if unknown_reduction(f, f"whether TensorRT {version} runs it"):
        return
    fixable = _judge_tensorrt_data_type(f, version, rewritable)
    # the data type the scatter has once the fix writes it through a wider integer
    wide = scatter_carrier(ir.DataType[f.data_type] if f.data_type else None, version)
    data_type = wide.name if wide is not None else f.data_type
    if node.op_type == "ScatterND":
        fixable = _judge_tensorrt_scatter_nd(node, f, version, inlined, fix_options, fixable,
                                             data_type)
    else:
        fixable = _judge_tensorrt_scatter_elements(node, f, version, inlined, fix_options, fixable,
                                                   data_type)
    _above_parser_opset(f, version, None)
    if f.blockers:
        dims = {"fix_dims": dict.fromkeys(fix_options, "SIZE")} if fix_options else {}
        f.remedy = command("tensorrt", trt_version=version, **dims) if fixable else None
        if not rewritable:
            f.notes.append(f"scatter-rewrite rewrites default-domain nodes only: run "
                           f"{spoken(fix, {})} on the model before it was lowered to "
                           "custom-domain nodes")
        elif not fixable:
            f.notes.append(f"no exact rewrite TensorRT {version} accepts is known for this node")


def _judge_tensorrt_other_scatter(op: str, f: Finding, version: str, fix: Said) -> None:
    """The deprecated Scatter (the parser expects ScatterElements) and TensorScatter (parsed from
    onnx-tensorrt 10.15 on)."""
    if op == "Scatter":
        f.blockers.append("deprecated Scatter (replaced by ScatterElements from opset 11): "
                          "TensorRT's parser expects ScatterElements")
        f.remedy = said(command("upgrade"), " (or ", fix, ")")
    elif version in PARSES_TENSORSCATTER:
        f.notes.append(f"TensorRT {version}'s parser imports TensorScatter (onnx-tensorrt 10.15 "
                       "and later)")
        _above_parser_opset(f, version, fix)
    else:
        f.blockers.append("TensorScatter (opset 24) is not supported by TensorRT's ONNX parser "
                          "before 10.15")
        f.remedy = said(fix, " (lowers it to ScatterElements; or ", command("lower", opset=20),
                        ")")


def _judge_tensorrt_data_type(f: Finding, version: str, fixable: bool) -> bool:
    """The data types the scatter layer takes, as the tensorrt pass decides them (sources there):
    BOOL written through INT32 by the fix, UINT8/INT16/UINT16 through INT32 and UINT32 through
    INT64 (10/11), BFLOAT16 absent from TensorRT 8.x, ...; whether the node stays ``fixable``."""
    dtype = ir.DataType[f.data_type] if f.data_type else None
    gate = scatter_data_blocker(dtype, version)
    if gate is not None:
        f.blockers.append(gate[0])
        fixable = fixable and gate[1]
        if (caveat := no_tensor_type(dtype)) is not None and gate[1]:
            f.notes.append(caveat)
        if fixable and dtype in CARRIED_DATA_TYPES and (f.reduction or "none") == "none":
            f.notes.append("scatter-rewrite tensorrt writes it through INT32 (Cast, ScatterND, "
                           "Cast back: exact)")
    elif (f.data_type, version) in (("INT64", "8.6"), ("DOUBLE", "8.6"), ("DOUBLE", "10"),
                                    ("DOUBLE", "11")):
        # onnx-tensorrt docs/operators.md: "TensorRT will attempt to cast down INT64 to INT32 and
        # DOUBLE down to FLOAT, clamping values" (10.x: DOUBLE only). Accepted, but not bit for bit.
        narrow = "INT32" if f.data_type == "INT64" else "FLOAT"
        f.notes.append(f"TensorRT {version}'s parser casts {f.data_type} data down to {narrow} "
                       f"(values beyond {narrow}'s range are clamped)")
    return fixable


def _judge_tensorrt_scatter_nd(node: ir.Node, f: Finding, version: str, inlined: TensorrtTwins,
                               fix_options: list[str], fixable: bool, data_type: str | None) -> bool:
    """ScatterND's reduction: no TensorRT version runs one, and 10.0-10.8 reject even an explicit
    "none"; whether the node stays ``fixable`` (a reduction the tensorrt pass lowers).
    ``data_type``: the data's type as the fix scatters it."""
    reduction = f.reduction or "none"
    if reduction == "none" and f.reduction is not None and version == "10":
        f.blockers.append('explicit reduction="none": TensorRT 10.0-10.8 rejects any reduction '
                          'attribute on ScatterND')
    elif reduction != "none":
        ignored = " (8.6 silently ignores it: wrong results)" if version == "8.6" else ""
        f.blockers.append(f"ScatterND reduction={reduction}: no TensorRT version supports it"
                          f"{ignored}")
        if version == "8.6" or data_type not in PLUGIN_TYPES:
            fixable = fixable and _lowerable(node, f, inlined, fix_options)
    return fixable


def _judge_tensorrt_scatter_elements(node: ir.Node, f: Finding, version: str,
                                     inlined: TensorrtTwins, fix_options: list[str],
                                     fixable: bool, data_type: str | None) -> bool:
    """ScatterElements' reduction (ignored by 8.6; else run by the plugin, for the types it takes:
    ``data_type``, the data's as the fix scatters it) and the indices and updates no larger than
    the data; whether the node stays ``fixable``."""
    reduction = f.reduction or "none"
    if reduction != "none" and version == "8.6":
        f.blockers.append(f"reduction={reduction} is silently ignored by TensorRT 8.6 (wrong "
                          "results, NVIDIA/TensorRT#3750)")
        fixable = fixable and _lowerable(node, f, inlined, fix_options)
    elif reduction != "none":
        if f.indices_type not in ("INT64", None):
            f.blockers.append(f"{f.indices_type} indices: the ScatterElements plugin takes "
                              "INT64 only")
        if data_type is not None and data_type not in PLUGIN_TYPES:
            f.blockers.append(f"{data_type} data: the ScatterElements plugin takes FP32, "
                              "FP16, INT32, INT64")
            fixable = fixable and _lowerable(node, f, inlined, fix_options)
        else:
            f.notes.append("runs through TensorRT's ScatterElements plugin: the application "
                           "must load the standard plugins (trt.init_libnvinfer_plugins)")
    if reduction == "none" or version == "8.6":
        _block_dims_over_data(node, f)
    return fixable


def _block_dims_over_data(node: ir.Node, f: Finding) -> None:
    """Block ``f`` where a static dimension of the indices or updates exceeds the data's (TensorRT
    asserts on it)."""
    data, indices, updates = (list(node.inputs) + [None, None, None])[:3]
    limit = _static_dims(data)
    for name, value in (("indices", indices), ("updates", updates)):
        dims = _static_dims(value)
        if limit is None or dims is None or len(dims) != len(limit):
            continue
        over = [i for i, (a, b) in enumerate(zip(dims, limit))
                if a is not None and b is not None and a > b]
        if over:
            f.blockers.append(f"{name} dimension {over[0]} ({dims[over[0]]}) exceeds "
                              f"data's ({limit[over[0]]}): TensorRT asserts 'Indices "
                              "dimensions must be less than data dimensions!'")


def _above_parser_opset(f: Finding, version: str, fix: Said | None) -> None:
    """Block ``f`` when its opset is above the highest TensorRT ``version``'s parser documents (the
    scatter's own schema is then one the parser does not know); ``fix``: set as its fix."""
    from scatter_rewrite.targets.tensorrt.parser import PARSER_MAX_OPSET as MAX_OPSET

    if f.opset > MAX_OPSET[version]:
        f.blockers.append(f"opset {f.opset}: TensorRT {version}'s parser documents opsets up to "
                          f"{MAX_OPSET[version]}")
        f.remedy = fix or f.remedy


def _lowerable(node: ir.Node, f: Finding, inlined: TensorrtTwins, fix_options: list[str]) -> bool:
    """Whether ``scatter-rewrite tensorrt`` lowers this reduction TensorRT-safely (with the options
    it adds to ``fix_options``); the notes say how, or why not."""
    reason = network_blocker(node, f.opset)
    if reason is not None and any(v is not None and v.shape is None for v in node.inputs):
        twin = inlined.twin(node)  # the rank may be hidden by an If the tensorrt pass inlines
        if twin is not None:
            reason = network_blocker(twin, f.opset)
    lowers = ("scatter-rewrite tensorrt lowers it to standard ops TensorRT accepts (bitonic sort "
              "of the keys, segmented scan, one ScatterND with unique targets)")
    if reason is not None and one_row_twin(node, f.opset) is not None:
        reason = None  # (an empty index tuple: the pass writes it as one_row_twin first)
        lowers += " (its empty index tuple written as the tuple (0) into the data as one row)"
    if reason is None:
        f.notes.append(lowers)
        return True
    dims = _fixing_dims(inlined, node, f.opset) if reason.startswith(NOT_STATIC) else []
    if dims:
        fix_options += [name for name in dims if name not in fix_options]
        f.notes.append(f"{lowers} once the number of updates is static: fix {', '.join(dims)} with "
                       "--fix-dim")
        return True
    if reason.startswith(NOT_STATIC):
        reason += ": " + no_fixed_count(inlined.model, node)
    # (check's notes speak the command line, as its fix does: fix_dims= -> --fix-dim)
    f.notes.append(spoken(said("cannot be lowered TensorRT-safely: ", reason),
                          {"fix_dims": "--fix-dim"}))
    return False


def _fixing_dims(inlined: TensorrtTwins, node: ir.Node, opset: int) -> list[str]:
    """The named model-input dimensions whose fixing (``tensorrt --fix-dim``) makes the node's
    number of updates static: those its indices and updates come from, tried on a weightless copy
    (as the tensorrt pass would see it); [] when that fails."""
    names = dims_reaching(inlined.model, node.inputs[1:3])
    if data_sized_source(inlined.model, node.inputs[1:3]) is not None:
        return []
    twin = inlined.twin(node, tuple(names)) if names else None
    return names if twin is not None and network_blocker(twin, opset) is None else []
