"""Exact scatter-free forms: every ScatterElements, ScatterND (reduction none/add/mul/max/min),
TensorScatter and deprecated Scatter becomes Gather/Equal/Where/Reduce*/TopK-class standard ops,
with no scatter op left anywhere (main graph, If/Loop/Scan bodies, model-local functions), for
runtimes that have no scatter or a wrong one (NPUs: docs/targets.md).

Each node is first viewed as rows (:func:`.lowering.segment_reduce.update_rows`, no scatter): the data as
``rows`` [R, w], each update row's target row ``keys`` [n] (negative indices normalized; the GNN
``Expand(Unsqueeze(dst))`` pattern as whole rows of w features) and the update rows ``vals``
[n, w], in the order the scatter applies them. Then one of two forms, the one with the smaller
largest intermediate (from static shapes; with symbolic dimensions, the form whose size grows
slower, its size said as a formula):

``mask`` (one-hot ``Equal(Range(R)[:, None], keys[None, :])``, [R, n]): for ``none`` the last
    writer of each row, ``ReduceMax(Where(mask, Range(n), -1))``, then one Gather from
    ``Concat(rows, vals)`` (index arithmetic only: bit for bit for every type); for add/mul and
    integer max/min, ``Reduce{Sum,Prod,Max,Min}(Where(mask[:, :, None], vals, identity))`` over
    the update axis, combined with the row. Largest intermediate: R*n int64 (none) or R*n*w of
    the compute type. Not used for float max/min: their result among NaNs and equal values
    (-0.0/+0.0) depends on the order onnxruntime applies the updates in, which a reduction does
    not keep. A one-hot MatMul would be cheaper for add (R*n) but is not used: 0 * inf is NaN
    (an infinite update would poison every row) and runtimes may lower MatMul's precision
    (OpenVINO's bf16 default on Xeons: 0.023 off, issue #32).
``sort`` (any reduction, any type the lowering supports): the data rows and the update rows
    concatenated, with keys ``Range(R)`` and ``keys``, sorted with ``TopK(largest=0)`` by
    ``key * (R+n) + position`` (int64; distinct, so no runtime's tie rule matters: each row's
    data comes first and its updates in order); then an inclusive segmented scan by doubling
    (Hillis-Steele: step d combines element i with i-d when both lie in the same key run;
    ceil(log2(n+1)) steps for n static in the indices' or the updates' shape, 31 when n is
    symbolic, enough for any n below 2^31), unrolled (no Loop); every run's last element,
    picked with ``TopK`` of ``position + (R+n) * (not a run end)`` (distinct too; exactly R run
    ends, in key order: the output rows).
    ``none`` needs no scan: the run's last element is the last writer. Largest intermediate:
    (R+n)*w of the compute type. The combine is :class:`.lowering.segment_reduce.Kind`'s, with its
    "a NaN came after" flag for float max/min: bit for bit, as onnxruntime folds.

Exactness: none/max/min and integers bit for bit; float add/mul re-associated (float16/bfloat16
summed in float32, rounded once): judged by validation against the original's own rounding.

A form whose largest intermediate (static shapes) is above ``max_intermediate_mib`` is not
written: the pass raises ConversionError with the size and the option that raises the bound
(``--max-intermediate-mib``); a node it cannot rewrite (an unknown rank, a data type without an
exact form, a reduction that is a function attribute) likewise, with the reason.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx_ir as ir

from scatter_rewrite.errors import ConversionError, OptionError
from scatter_rewrite.graph import (
    SCATTER_OPS, Scope, attr, describe, is_default_domain, iter_nodes, nodes_within,
    reference_reason, remove_unused_expands, value_names,
)
from scatter_rewrite.passes.lowering import segment_reduce as seg
from scatter_rewrite.passes.inline_if import inline_constant_ifs, scatter_of_unknown_rank
from scatter_rewrite.passes.base import ScatterPass, first_and_more
from scatter_rewrite.type_inference import (
    annotate_functions_with, borrow_inferred_types, restore_types,
)

__all__ = ["DEFAULT_MAX_INTERMEDIATE_MIB", "Form", "NoScatterPass", "TargetScattersPass",
           "forms_for", "no_scatter_passes", "scatter_free", "scatter_free_blocker", "steps_for",
           "target_passes"]

DEFAULT_MAX_INTERMEDIATE_MIB = 256
INT64 = ir.DataType.INT64
# doubling steps of the scan when the number of updates is symbolic: runs up to 2^31 long
DYNAMIC_STEPS = 31
# the compute types onnxruntime's CPU Reduce* kernels take (ReduceProd/Max/Min lack the others)
_MASK_REDUCE_TYPES = {ir.DataType.INT32, ir.DataType.INT64, ir.DataType.FLOAT, ir.DataType.DOUBLE}
_FLOATS = {ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.FLOAT, ir.DataType.DOUBLE}
# stands for a symbolic dimension when forms are compared (the form that grows slower wins)
_LARGE = 1 << 20


@dataclasses.dataclass(frozen=True)
class Form:
    """One exact scatter-free form of a node and its largest intermediate."""

    name: str  # "mask" or "sort"
    elements: int | None  # the largest intermediate's elements (None: symbolic)
    itemsize: int  # bytes per element
    formula: str  # the same in the node's row counts: "(R+n)*w", "R*n"
    estimate: int  # elements with each symbolic count taken as 2^20 (to compare forms)

    @property
    def bytes(self) -> int | None:
        return None if self.elements is None else self.elements * self.itemsize

    def said(self) -> str:
        if self.bytes is None:  # (R data rows, n update rows, w their width: docs/targets.md)
            return f"{self.name} form: largest intermediate {self.formula} x {self.itemsize} bytes"
        return f"{self.name} form: largest intermediate {_mib(self.bytes)}"


def _mib(size: int) -> str:
    if size < 2 ** 10:
        return f"{size} bytes"
    return f"{size / 2 ** 10:.3g} KiB" if size < 2 ** 20 else f"{size / 2 ** 20:.3g} MiB"


def _reduction(node: ir.Node) -> str:
    if node.op_type in ("ScatterElements", "ScatterND"):
        return attr(node, "reduction", "none")
    return "none"


def scatter_free_blocker(node: ir.Node, opset: int) -> str | None:
    """Why a default-domain ScatterElements/ScatterND has no scatter-free form here (None: it
    has one). TensorScatter and Scatter are first made ScatterElements (the pass does)."""
    if (why := reference_reason(node)) is not None:
        return why
    if opset < 11:
        return f"opset {opset}: the forms' ops (Range, TopK with K as input) need opset >= 11"
    if len(node.inputs) != 3 or any(v is None for v in node.inputs):
        return "needs exactly 3 inputs (data, indices, updates)"
    reduction = _reduction(node)
    dtype = node.inputs[0].dtype
    if dtype is None:
        return "the data type is unknown"
    if reduction != "none":
        return seg.reduction_blocker(node, opset)
    # (none: only Gather moves the values, whatever their type; the row view needs the rank)
    if node.op_type == "ScatterElements":
        if all(v.shape is None for v in node.inputs):
            return "the rank of data/indices/updates is unknown"
    else:
        k = seg.index_tuple_length(node.inputs[1])
        if k is None or k < 1:
            return "the index tuple length (last dimension of indices) is not static"
        if node.inputs[1].shape is None and (node.inputs[0].shape is None
                                             or len(node.inputs[0].shape) < k):
            return "the ranks of indices and data are unknown"
    return None


def _compute_dtype(dtype: ir.DataType, reduction: str) -> ir.DataType:
    return dtype if reduction == "none" else seg.compute_dtype(dtype, reduction)


def _itemsize(dtype: ir.DataType) -> int:
    return max(1, int(dtype.itemsize)) if dtype != ir.DataType.STRING else 8


def forms_for(node: ir.Node) -> list[Form]:
    """The node's exact forms with their largest intermediate, cheapest first (call
    :func:`scatter_free_blocker` first)."""
    n, rows, w = seg.row_counts(node)
    reduction = _reduction(node)
    dtype = node.inputs[0].dtype
    ct = _compute_dtype(dtype, reduction)

    def sized(*counts):
        known = None if None in counts else math.prod(counts)
        return known, math.prod(_LARGE if c is None else c for c in counts)

    def said(text: str) -> str:  # the formula, each static count written as its value
        for name, count in (("R", rows), ("n", n), ("w", w)):
            text = text.replace(name, "?" + name if count is None else str(count))
        return text.replace("?", "")

    forms = []
    if reduction == "none":
        elements, estimate = sized(rows, n)
        forms.append(Form("mask", elements, 8, said("R*n"), estimate))
    elif ct in _MASK_REDUCE_TYPES and not (ct in _FLOATS and reduction in ("max", "min")):
        elements, estimate = sized(rows, n, w)
        forms.append(Form("mask", elements, _itemsize(ct), said("R*n*w"), estimate))
    total = None if rows is None or n is None else rows + n
    elements, _ = sized(total, w)
    estimate = ((rows if rows is not None else _LARGE) + (n if n is not None else _LARGE)) * (
        w if w is not None else _LARGE)
    # (float max/min carry an int64 position per element through the scan: 8 bytes each)
    positional = reduction in ("max", "min") and ct in _FLOATS
    forms.append(Form("sort", elements, 8 if positional else _itemsize(ct), said("(R+n)*w"),
                      estimate))
    return sorted(forms, key=lambda f: (f.estimate * f.itemsize, f.name != "mask"))


class NoScatterPass(ScatterPass):
    """Every scatter becomes an exact scatter-free form (see the module docstring)."""

    name = "no-scatter"
    refusal = "no scatter-free form written"

    def __init__(self, max_intermediate_mib: int = DEFAULT_MAX_INTERMEDIATE_MIB):
        super().__init__()
        if (isinstance(max_intermediate_mib, bool) or not isinstance(max_intermediate_mib, int)
                or max_intermediate_mib < 1):
            raise OptionError(f"--max-intermediate-mib {max_intermediate_mib!r}: pick a positive "
                              "number of MiB")
        self.max_bytes = max_intermediate_mib * 2 ** 20
        self.max_intermediate_mib = max_intermediate_mib

    def wanted(self, node: ir.Node) -> bool:
        """Whether the pass rewrites ``node`` (its types borrowed from inference): every
        default-domain scatter here; a target's pass, those its runtime cannot run."""
        return _is_scatter(node)

    def form_for(self, node: ir.Node) -> tuple[Form | None, str | None]:
        """The form ``node`` is written in, or why none fits: the cheapest here; a target whose
        runtime gets some form wrong picks among the others (targets/litert.py)."""
        return forms_for(node)[0], None

    def segment_form(self, node: ir.Node) -> bool:
        """Whether ``node`` is written as lower's sort + segmented reduction + ScatterND(none)
        (:func:`.lowering.segment_reduce.lower_reduction`) instead of a scatter-free form: never here."""
        return False

    def run(self, model: ir.Model) -> None:
        if not any(_is_scatter(n) for n, _ in iter_nodes(model)):
            return
        # (the deprecated Scatter upgraded and functions specialized first: steps_for)
        # TorchScript's constant Ifs around a scatter hide its rank: their taken branch, as lower
        for text in inline_constant_ifs(model, near=scatter_of_unknown_rank):
            self.note(text, modified=True)
        borrowed = borrow_inferred_types(model, sharpen=True) + annotate_functions_with(
            model, _is_scatter)
        try:
            self._run(model)
        finally:
            restore_types(borrowed)

    def _run(self, model: ir.Model) -> None:
        names = seg.Names(value_names(model))
        tensor_scatters = [(n, s) for n, s in iter_nodes(model)
                           if n.op_type == "TensorScatter" and is_default_domain(n)
                           and self.wanted(n)]
        made: dict[int, ir.Node] = {}  # id of a ScatterElements a TensorScatter became -> it
        for node, scope in tensor_scatters:
            reason = seg.tensor_scatter_blocker(node, scope.opset) or reference_reason(node)
            if reason is not None:
                raise ConversionError(f"no scatter-free form of {describe(node, scope)}: {reason}")
            nodes, out = seg.lower_tensor_scatter(node, scope.opset, names)
            made[id(out.producer())] = node
            self._splice(node, scope, nodes, out)
        plans, blocked = [], []
        for node, scope in iter_nodes(model):
            # (a TensorScatter's ScatterElements too: left where the target runs it)
            if not (_is_scatter(node) and self.wanted(node)):
                continue
            if self.segment_form(node):
                reason = seg.reduction_blocker(node, scope.opset)
                if reason is None:
                    plans.append((node, scope, None))
                    continue
            reason = scatter_free_blocker(node, scope.opset)
            if reason is None:
                form, reason = self.form_for(node)
            if reason is None:
                if form.bytes is not None and form.bytes > self.max_bytes:
                    reason = (f"its cheapest exact scatter-free form ({form.said()}) is above the "
                              f"bound of {self.max_intermediate_mib} MiB: raise it with "
                              f"--max-intermediate-mib {math.ceil(form.bytes / 2 ** 20)}")
            if reason is not None:
                found = made.get(id(node))
                shown = describe(node, scope) if found is None else describe(found, scope)
                self.skip(node, scope, reason)
                blocked.append(f"{shown}: {reason}")
            else:
                plans.append((node, scope, form))
        if blocked:
            raise ConversionError(f"{self.refusal}: {first_and_more(blocked)}")
        for node, scope, form in plans:
            source = made.get(id(node))
            what = "TensorScatter -> ScatterElements -> " if source is not None else ""
            exactness, reduction = _exactness(node), _reduction(node)
            shown = describe(source or node, scope)
            if form is None:
                nodes, out = seg.lower_reduction(node, scope.opset, names)
                detail = (f"{len(nodes)} standard nodes (sort + segmented {reduction} + "
                          f"ScatterND(none); {exactness})")
            else:
                nodes, out = scatter_free(node, scope.opset, form.name, names)
                detail = (f"{what}{len(nodes)} scatter-free nodes ({form.said()}; {reduction}, "
                          f"{exactness})")
            self._splice(node, scope, nodes, out)
            self.result.rewritten.append(_note(shown, detail))
            self.result.modified = True

    @staticmethod
    def _splice(node: ir.Node, scope: Scope, nodes: list[ir.Node], out: ir.Value) -> None:
        old_inputs = list(node.inputs)
        ir.convenience.replace_nodes_and_values(scope.body, node, [node], nodes,
                                                [node.outputs[0]], [out])
        remove_unused_expands(scope.body, old_inputs)
        if isinstance(scope.body, ir.Function):  # function values stay untyped, as lower's
            for new_node in nodes_within(nodes):
                for value in new_node.outputs:
                    value.type, value.shape = None, None


def _note(node: str, detail: str):
    from scatter_rewrite.passes.base import NodeNote

    return NodeNote(node, detail)


def _exactness(node: ir.Node) -> str:
    reduction, dtype = _reduction(node), node.inputs[0].dtype
    if reduction in ("add", "mul") and dtype in _FLOATS:
        return "float sums re-associated, judged against the original's rounding"
    return "bit for bit"


def _is_scatter(node: ir.Node) -> bool:
    return is_default_domain(node) and node.op_type in SCATTER_OPS


# --------------------------------------------------------------------------- the forms


def scatter_free(node: ir.Node, opset: int, form: str,
                 names: seg.Names | None = None) -> tuple[list[ir.Node], ir.Value]:
    """Standard nodes without any scatter computing ``node`` (ScatterElements or ScatterND) in
    ``form`` ("mask" or "sort"); the value replacing its output."""
    names = names or seg.Names()
    names.prefix = seg.name_prefix(node)
    b = seg.Builder(names)
    data = node.inputs[0]
    if seg.is_empty(data):
        return b.nodes, b.op("Identity", data, dtype=data.dtype)
    reduction = _reduction(node)
    rows, keys, vals = seg.update_rows(b, node)
    build = _mask_form if form == "mask" else _sort_form
    out = build(b, rows, keys, vals, reduction, data.dtype, opset, seg.row_counts(node)[0])
    return b.nodes, b.reshape_like(out, data, opset)


def _unsqueeze(b: seg.Builder, value: ir.Value, axes: list[int], opset: int,
               dtype: ir.DataType) -> ir.Value:
    if opset >= 13:
        return b.op("Unsqueeze", value, b.const(axes), dtype=dtype)
    return b.op("Unsqueeze", value, axes=axes, dtype=dtype)


def _reduce(b: seg.Builder, op: str, value: ir.Value, axis: int, opset: int,
            dtype: ir.DataType) -> ir.Value:
    """``op`` over ``axis``, dropped (the axes attribute became an input: ReduceSum at 13, the
    others at 18)."""
    takes_input = opset >= (13 if op == "ReduceSum" else 18)
    if takes_input:
        return b.op(op, value, b.const([axis]), keepdims=0, dtype=dtype)
    return b.op(op, value, axes=[axis], keepdims=0, dtype=dtype)


def _mask_form(b: seg.Builder, rows, keys, vals, reduction: str, dtype: ir.DataType,
               opset: int, count: int | None = None) -> ir.Value:
    updates = b.op("Size", keys, dtype=INT64)
    row_count = b.dim(rows, 0)
    row_ids = b.op("Range", b.const(0), row_count, b.const(1), dtype=INT64)
    mask = b.op("Equal", _unsqueeze(b, row_ids, [1], opset, INT64),
                _unsqueeze(b, keys, [0], opset, INT64))  # [R, n]
    if reduction == "none":
        positions = b.op("Range", b.const(0), updates, b.const(1), dtype=INT64)
        # the last writer of each row (-1: none), then one Gather from the rows and the updates
        last = _reduce(b, "ReduceMax", b.op("Where", mask, _unsqueeze(b, positions, [0], opset,
                                                                       INT64),
                                            b.const(-1), dtype=INT64), 1, opset, INT64)
        source = b.op("Where", b.op("Less", last, b.const(0)), row_ids,
                      b.op("Add", last, row_count, dtype=INT64), dtype=INT64)
        both = b.op("Concat", rows, vals, axis=0, dtype=dtype)
        return b.op("Gather", both, source, axis=0, dtype=dtype)
    ct = seg.compute_dtype(dtype, reduction)
    kind = seg.Kind(reduction, ct, int_minmax=opset >= 12)
    picked = b.op("Where", _unsqueeze(b, mask, [2], opset, ir.DataType.BOOL),
                  _unsqueeze(b, b.cast(vals, ct, dtype), [0], opset, ct),
                  b.const(kind.identity(), kind.identity().dtype), dtype=ct)  # [R, n, w]
    op = {"add": "ReduceSum", "mul": "ReduceProd", "max": "ReduceMax", "min": "ReduceMin"}
    folded = _reduce(b, op[reduction], picked, 1, opset, ct)
    merged, _ = kind.combine(b, b.cast(rows, ct, dtype), folded)
    return b.cast(merged, dtype, ct)


def _sort_form(b: seg.Builder, rows, keys, vals, reduction: str, dtype: ir.DataType,
               opset: int, count: int | None) -> ir.Value:
    row_count = b.dim(rows, 0)
    row_ids = b.op("Range", b.const(0), row_count, b.const(1), dtype=INT64)
    all_keys = b.op("Concat", row_ids, keys, axis=0, dtype=INT64)
    total = b.op("Size", all_keys, dtype=INT64)
    positions = b.op("Range", b.const(0), total, b.const(1), dtype=INT64)
    order = _ascending(b, b.op("Add", b.op("Mul", all_keys, total, dtype=INT64), positions,
                               dtype=INT64), total)
    sorted_keys = b.op("Gather", all_keys, order, axis=0, dtype=INT64)
    # run ends: the key changes after them (the last element ends the last run); the slice's end
    # is the length itself (onnx2tf reads a huge constant end as int32: an empty slice)
    following = b.op("Concat", b.op("Slice", sorted_keys, b.const([1]), _as_vector(b, total)),
                     b.const([-1]), axis=0, dtype=INT64)
    inner = b.cast(b.op("Equal", sorted_keys, following), INT64, ir.DataType.BOOL)
    # exactly R ends, in position order: each position, plus the length where it ends no run
    end_at = _ascending(b, b.op("Add", b.op("Mul", inner, total, dtype=INT64), positions,
                                dtype=INT64), row_count)
    if reduction == "none":
        both = b.op("Concat", rows, vals, axis=0, dtype=dtype)
        return b.op("Gather", both, b.op("Gather", order, end_at, axis=0, dtype=INT64), axis=0,
                    dtype=dtype)
    ct = seg.compute_dtype(dtype, reduction)
    kind = seg.Kind(reduction, ct)
    both = b.cast(b.op("Concat", rows, vals, axis=0, dtype=dtype), ct, dtype)
    x = b.op("Gather", both, order, axis=0, dtype=ct)
    steps = DYNAMIC_STEPS if count is None else math.ceil(math.log2(count + 1))
    if kind.nan_aware:
        return b.cast(_positional_scan(b, x, sorted_keys, positions, end_at, kind, steps), dtype,
                      ct)
    for d, same_col, back in _doubling(b, sorted_keys, positions, steps):
        prev = b.op("Gather", x, back, axis=0, dtype=ct)
        if ct == ir.DataType.BOOL:  # Or/And commute: the partner masked where absent
            x, _ = kind.combine(b, x, prev, has=same_col)
            continue
        identity = kind.identity()  # (combine(identity, x) is x)
        early = b.select(same_col, prev, b.const(identity, identity.dtype), ct)
        x, _ = kind.combine(b, early, x)
    out = b.op("Gather", x, end_at, axis=0, dtype=ct)
    return b.cast(out, dtype, ct)


def _as_vector(b: seg.Builder, scalar: ir.Value) -> ir.Value:
    return b.op("Reshape", scalar, b.const([1]), dtype=INT64)


def _ascending(b: seg.Builder, unique: ir.Value, k: ir.Value) -> ir.Value:
    """The positions of ``unique``'s ``k`` smallest values, smallest first (``TopK``'s indices).
    The values are distinct (a key times the length plus the position), so the result does not
    depend on how a runtime's TopK orders equal values: ONNX puts the lower index first, OpenVINO's
    does not (docs/targets.md)."""
    _, at = b.op("TopK", unique, _as_vector(b, k), outputs=2, axis=0, largest=0, sorted=1)
    at.dtype = INT64
    return at


def _doubling(b: seg.Builder, sorted_keys, positions, steps: int):
    """The scan's steps: (the distance d, whether element i-d is in i's run [total, 1], i-d
    clipped to 0)."""
    for step in range(steps):
        d = b.const(1 << step)
        shifted = b.op("Sub", positions, d, dtype=INT64)
        inside = b.op("Not", b.op("Less", shifted, b.const(0)))
        back = b.op("Where", inside, shifted, b.const(0), dtype=INT64)
        same = b.op("And", inside, b.op("Equal", b.op("Gather", sorted_keys, back, axis=0,
                                                      dtype=INT64), sorted_keys))
        yield d, b.op("Reshape", same, b.const([-1, 1]), dtype=ir.DataType.BOOL), back


def _positional_scan(b: seg.Builder, x, sorted_keys, positions, end_at, kind: seg.Kind,
                     steps: int) -> ir.Value:
    """Float max/min: the scan carries, per element, the position of the winning value (int64,
    picked with Where) and "a NaN came at or after" (Kind's flagged fold, associative); the values
    are gathered once at the end. No float passes through Where, whose -0.0 onnxruntime loses
    (and whose arithmetic repair, Builder.select(exact=True), its graph optimizer undoes: measured
    on onnxruntime 1.23 with optimizations on), so the result is bit for bit."""
    ct = kind.dtype
    at = b.op("Expand", b.op("Reshape", positions, b.const([-1, 1]), dtype=INT64), b.shape(x),
              dtype=INT64)  # [total, w]
    flags = b.op("IsNaN", x)
    for _, same_col, back in _doubling(b, sorted_keys, positions, steps):
        early_at = b.op("Gather", at, back, axis=0, dtype=INT64)
        early = b.op("GatherElements", x, early_at, axis=0, dtype=ct)
        late = b.op("GatherElements", x, at, axis=0, dtype=ct)
        loses = b.op("And", kind.loses(b, late, early), b.op("Not", flags))
        loses = b.op("And", loses, same_col)
        early_flag = b.op("And", b.op("Gather", flags, back, axis=0), same_col)
        at = b.op("Where", loses, early_at, at, dtype=INT64)
        flags = b.op("Or", early_flag, flags)
    final = b.op("Gather", at, end_at, axis=0, dtype=INT64)
    return b.op("GatherElements", x, final, axis=0, dtype=ct)


def no_scatter_passes(max_intermediate_mib: int = DEFAULT_MAX_INTERMEDIATE_MIB) -> list:
    """What ``prepare --target no-scatter`` runs."""
    return steps_for(NoScatterPass(max_intermediate_mib))


def target_passes(target: str, max_intermediate_mib: int = DEFAULT_MAX_INTERMEDIATE_MIB,
                  preceded_by: tuple = ()) -> list:
    """What ``prepare --target T`` runs for a target whose scatters are rewritten here
    (``preceded_by``: passes the target needs just before the rewrite)."""
    return steps_for(TargetScattersPass(target, max_intermediate_mib), preceded_by)


def steps_for(pass_: NoScatterPass, preceded_by: tuple = ()) -> list:
    """``pass_`` after what it needs, one report line: the deprecated Scatter upgraded (where the
    model has one), functions whose scatters read a function attribute specialized, then
    ``preceded_by``."""
    from scatter_rewrite.passes.compose import OnlyIf, Steps
    from scatter_rewrite.passes.specialize import SpecializeCallsPass
    from scatter_rewrite.passes.upgrade import UpgradePass, has_scatter

    return [Steps(OnlyIf(has_scatter, UpgradePass()), SpecializeCallsPass(_is_scatter),
                  *preceded_by, pass_, name=pass_.name)]


class TargetScattersPass(NoScatterPass):
    """The scatters a target (:mod:`scatter_rewrite.targets`) does not run, rewritten: as lower's
    sort + segmented reduction + ScatterND(none) where the target runs that ScatterND for the
    node's type, as a scatter-free form otherwise; the scatters it runs are left alone."""

    name = "prepare"
    refusal = "not prepared"

    def __init__(self, target: str, max_intermediate_mib: int = DEFAULT_MAX_INTERMEDIATE_MIB):
        from scatter_rewrite.targets import get_target

        super().__init__(max_intermediate_mib)
        self.target = get_target(target)
        self.refusal = f"not prepared for {self.target.name}"

    def wanted(self, node: ir.Node) -> bool:
        if not _is_scatter(node):
            return False
        data = node.inputs[0] if node.inputs else None
        index = node.inputs[2 if node.op_type == "TensorScatter" else 1] \
            if len(node.inputs) > 2 else None
        dtype = data.dtype.name if data is not None and data.dtype is not None else None
        index_dtype = index.dtype.name if index is not None and index.dtype is not None else None
        return not self.target.supports(node.op_type, _reduction(node), dtype, index_dtype)

    def segment_form(self, node: ir.Node) -> bool:
        dtype = node.inputs[0].dtype
        return (_reduction(node) != "none" and dtype is not None
                and self.target.supports("ScatterND", "none", dtype.name, "INT64"))
