"""Exact scatter-free forms: every ScatterElements, ScatterND (reduction none/add/mul/max/min),
TensorScatter and deprecated Scatter becomes Gather/Equal/Where/Reduce*/TopK-class standard ops,
with no scatter op left anywhere (main graph, If/Loop/Scan bodies, model-local functions), for
runtimes that have no scatter or a wrong one (NPUs: docs/targets.md).

Each node is first viewed as rows (:func:`.lowering.segment_reduce.update_rows`, no scatter): the data as
``rows`` [R, w], each update row's target row ``keys`` [n] (negative indices normalized; the GNN
``Expand(Unsqueeze(dst))`` pattern as whole rows of w features) and the update rows ``vals``
[n, w], in the order the scatter applies them. Then one of two forms, the one that holds fewer
bytes at once (Memory, below):

``mask`` (one-hot ``Equal(Range(R)[:, None], keys[None, :])``, [R, n]): for ``none`` the last
    writer of each row, ``ReduceMax(Where(mask, Range(n), -1))``, that writer's update row
    gathered (for a static n > 0; all n rows otherwise), then one Gather from it concatenated
    with the rows (index arithmetic only: bit for bit for every type); for add/mul and
    integer max/min, ``Reduce{Sum,Prod,Max,Min}(Where(mask[:, :, None], vals, identity))`` over
    the update axis, combined with the row. Largest intermediate: R*n int64 (none) or R*n*w of
    the compute type. Not used for float max/min: their result among NaNs and equal values
    (-0.0/+0.0) depends on the order onnxruntime applies the updates in, which a reduction does
    not keep; nor for int64 add/mul (onnxruntime's int64 ReduceSum/ReduceProd round past 2^53). A one-hot MatMul would be cheaper for add (R*n) but is not used: 0 * inf is NaN
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
    "a NaN came after" flag for float max/min: bit for bit, as onnxruntime folds. Float max/min
    with R and n static: a segment tree over the sorted rows instead of the scan (O(R+n) work,
    :mod:`.lowering.segment_tree`).

Exactness: none/max/min and integers bit for bit; float add/mul re-associated (float16/bfloat16
summed in float32, rounded once): judged by validation against the original's own rounding.

Memory: each form is built for the node and its peak live bytes counted from its own nodes
(:func:`.lowering.live_bytes.peak_live_bytes`: shapes inferred from the nodes, each value alive
from its node to its last reader in onnxruntime's run order, views free, Where's two temporaries
and TopK's index vector while they run). Measured in onnxruntime 1.32 (one thread,
benchmarks/bench_no_scatter.py), where the memory went when the figure was a hand formula of the
largest intermediate (a 20k-node GNN max: 58.6 MiB declared, 1,005 MiB peak RSS): (1) several
[R+n, w] tensors live at once (the scan's positions, their partners, the new positions);
(2) onnxruntime's Where selects X and Y into two temporaries of the output's size before merging
them (where_op.cc): x3 for a Where over [R+n, w], x2 for the mask form's [R, n, w]; (3) its run
order (a depth-first walk back from the output) computed the float max/min scan's per-step
Not(flags) for all 17 steps before the positions chain and held them all (17 x 7.3 MiB);
(4) the allocator: with the arena, the memory pattern of the second run is allocated beside the
arena's chunks from the first; without it, glibc keeps freed blocks below its (raised) mmap
threshold. The estimate counts (1)-(3): with the allocator returning freed memory at once
(MALLOC_MMAP_THRESHOLD_ fixed, arena and memory pattern off) the 20k-node GNN forms' runs added
it within 0.5%; (4) is the runtime's, stated in the benchmark as a factor. What the forms do about it: the flags are carried
negated (no per-step Not), the positions are int32 where R + n is static, the plain scan reads
an identity row instead of a Where over [R+n, w], and the ``none`` mask form gathers each row's
last writer before concatenating (R rows, not n): that GNN max now holds 193 MiB.

A form whose peak (static shapes) is above ``max_intermediate_mib`` is not written: the pass
raises ConversionError with the size and the option that raises the bound
(``--max-intermediate-mib``); with symbolic sizes the bound cannot be judged and the report says
the form's largest intermediate as a formula. A node it cannot rewrite (an unknown rank, a data
type without an exact form, a reduction that is a function attribute) is refused likewise, with
the reason.
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
from scatter_rewrite.passes.lowering import live_bytes as live
from scatter_rewrite.passes.lowering import segment_reduce as seg
from scatter_rewrite.passes.lowering import segment_tree
from scatter_rewrite.passes.lowering import tensor_scatter
from scatter_rewrite.passes.inline_if import inline_constant_ifs, scatter_of_unknown_rank
from scatter_rewrite.passes.base import NodeNote, ScatterPass, every_node
from scatter_rewrite.type_inference import (
    annotate_functions_with, borrow_inferred_types, restore_types,
)

__all__ = ["DEFAULT_MAX_INTERMEDIATE_MIB", "Form", "NoScatterPass", "ShapeWriting",
           "TargetScattersPass",
           "forms_for", "no_scatter_passes", "scatter_free", "scatter_free_blocker", "steps_for",
           "target_passes"]

DEFAULT_MAX_INTERMEDIATE_MIB = 256
INT64 = ir.DataType.INT64
# doubling steps of the scan when the number of updates is symbolic: runs up to 2^31 long
DYNAMIC_STEPS = 31
# the compute types onnxruntime's CPU Reduce* kernels take (ReduceProd/Max/Min lack the others);
# not int64 add/mul: its int64 ReduceSum and ReduceProd go through double, so a value past 2^53
# comes out rounded (2^55 + 1 summed alone gives 2^55, onnxruntime 1.32)
_MASK_REDUCE_TYPES = {ir.DataType.INT32, ir.DataType.INT64, ir.DataType.FLOAT, ir.DataType.DOUBLE}
_FLOATS = {ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.FLOAT, ir.DataType.DOUBLE}
# stands for a symbolic dimension when forms are compared (the form that grows slower wins)
_LARGE = 1 << 20


@dataclasses.dataclass(frozen=True)
class ShapeWriting:
    """How the forms write their shape changes, for a converter that gets some wrong (one value
    per target: targets/litert.py's for onnx2tf); the defaults suit every other runtime."""

    flatten: bool = True  # rows may be a Flatten (False: Reshapes only)
    # an Expand may take a shape computed at run time (False: only one whose entries are all
    # equal; below opset 14 the output is then reshaped through one: graph.py's reshape_to)
    computed_expands: bool = True
    # float max/min over static counts as a segment tree (False: the doubling scan; the tree's
    # rank-3 accumulators meet onnx2tf's channels-last layout: tf.where refused)
    segment_tree: bool = True


@dataclasses.dataclass(frozen=True)
class Form:
    """One exact scatter-free form of a node and the memory it needs: the most bytes its own
    nodes hold at once in onnxruntime (:func:`.lowering.live_bytes.peak_live_bytes`)."""

    name: str  # "mask" or "sort"
    bytes: int | None  # peak live bytes (None: a size is symbolic)
    itemsize: int  # bytes per element of its largest intermediate
    formula: str  # that intermediate in the row counts: "(R+n)*w", "R*n" (said when symbolic)
    estimate: int  # peak live bytes with each symbolic dimension taken as 2^20 (to compare forms)

    def said(self) -> str:
        if self.bytes is None:  # (R data rows, n update rows, w their width: docs/targets.md)
            return f"{self.name} form: largest intermediate {self.formula} x {self.itemsize} bytes"
        return f"{self.name} form: {_mib(self.bytes)} held at once"


def _mib(size: int) -> str:
    if size < 2 ** 10:
        return f"{size} bytes"
    if size >= 2 ** 30:
        return f"{size / 2 ** 30:,.1f} GiB"
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


def forms_for(node: ir.Node, opset: int, writing: ShapeWriting = ShapeWriting()) -> list[Form]:
    """The node's exact forms with the memory each needs, cheapest first (call
    :func:`scatter_free_blocker` first). Each form is built (``writing``: as :func:`scatter_free`)
    and its peak live bytes counted from its own nodes; the formula of its largest intermediate
    is said where a size is symbolic."""
    n, rows, w = seg.row_counts(node)
    reduction = _reduction(node)
    ct = _compute_dtype(node.inputs[0].dtype, reduction)

    def said(text: str) -> str:  # the formula, each static count written as its value
        for name, count in (("R", rows), ("n", n), ("w", w)):
            text = text.replace(name, "?" + name if count is None else str(count))
        return text.replace("?", "")

    def sized(*counts) -> int:
        return math.prod(_LARGE if c is None else c for c in counts)

    shapes = []  # (name, formula, itemsize, the formula's elements with symbols as 2^20)
    if reduction == "none":
        shapes.append(("mask", "R*n", 8, sized(rows, n)))
    elif ct in _MASK_REDUCE_TYPES and not (ct in _FLOATS and reduction in ("max", "min")) \
            and not (ct == INT64 and reduction in ("add", "mul")):
        shapes.append(("mask", "R*n*w", _itemsize(ct), sized(rows, n, w)))
    # (float max/min carry a position per element through the scan: int32 when static)
    positional = reduction in ("max", "min") and ct in _FLOATS
    itemsize = (8 if None in (rows, n) else 4) if positional else _itemsize(ct)
    total = (rows if rows is not None else _LARGE) + (n if n is not None else _LARGE)
    shapes.append(("sort", "(R+n)*w", itemsize, total * (w if w is not None else _LARGE)))
    forms = []
    for name, formula, size, elements in shapes:
        exact, compared = _peak_bytes(node, opset, name, writing)
        forms.append(Form(name, exact, size, said(formula),
                          compared if compared is not None else elements * size))
    return sorted(forms, key=lambda f: (f.estimate, f.name != "mask"))


def _peak_bytes(node: ir.Node, opset: int, form: str,
                writing: ShapeWriting = ShapeWriting()) -> tuple[int | None, int | None]:
    """(the peak live bytes of ``node`` written in ``form``, None when a size is symbolic; the
    same with each symbolic dimension of what it reads taken as 2^20, None when unknown). The
    trial nodes are built beside the model and let go: they leave no use on its values."""
    nodes, out = scatter_free(node, opset, form, writing=writing)
    try:
        exact = live.peak_live_bytes(nodes, [out])
        if exact is not None:
            return exact.bytes, exact.bytes
        produced = {v for n in nodes for v in n.outputs}
        large = {v: tuple(d if isinstance(d, int) else _LARGE for d in v.shape)
                 for n in nodes for v in n.inputs
                 if v is not None and v not in produced and v.shape is not None}
        compared = live.peak_live_bytes(nodes, [out], large)
        return None, None if compared is None else compared.bytes
    finally:
        for trial in nodes:
            trial.resize_inputs(0)


class NoScatterPass(ScatterPass):
    """Every scatter becomes an exact scatter-free form (see the module docstring)."""

    name = "no-scatter"
    refusal = "no scatter-free form written"

    def __init__(self, max_intermediate_mib: int = DEFAULT_MAX_INTERMEDIATE_MIB,
                 writing: ShapeWriting = ShapeWriting()):
        super().__init__()
        self.writing = writing
        if (isinstance(max_intermediate_mib, bool) or not isinstance(max_intermediate_mib, int)
                or max_intermediate_mib < 1):
            raise OptionError(f"max_intermediate_mib={max_intermediate_mib!r}: pick a positive "
                              "number of MiB", parameters=("max_intermediate_mib",))
        self.max_bytes = max_intermediate_mib * 2 ** 20
        self.max_intermediate_mib = max_intermediate_mib

    def wanted(self, node: ir.Node) -> bool:
        """Whether the pass rewrites ``node`` (its types borrowed from inference): every
        default-domain scatter here; a target's pass, those its runtime cannot run."""
        return _is_scatter(node)

    def form_for(self, node: ir.Node, opset: int) -> tuple[Form | None, str | None]:
        """The form ``node`` is written in, or why none fits: the cheapest here; a target whose
        runtime gets some form wrong picks among the others (targets/litert.py)."""
        return forms_for(node, opset, self.writing)[0], None

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
            reason = tensor_scatter.tensor_scatter_blocker(node, scope.opset) or reference_reason(node)
            if reason is not None:
                raise ConversionError(f"no scatter-free form of {describe(node, scope)}: {reason}")
            nodes, out = tensor_scatter.lower_tensor_scatter(
                node, scope.opset, names, self.writing.computed_expands)
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
                form, reason = self.form_for(node, scope.opset)
            if reason is None:
                if form.bytes is not None and form.bytes > self.max_bytes:
                    reason = (f"its cheapest exact scatter-free form ({form.said()}) is above the "
                              f"bound of {self.max_intermediate_mib} MiB: raise it with "
                              f"max_intermediate_mib={math.ceil(form.bytes / 2 ** 20)}")
            if reason is not None:
                found = made.get(id(node))
                shown = describe(node, scope) if found is None else describe(found, scope)
                self.skip(node, scope, reason)
                blocked.append(NodeNote(shown, reason))
            else:
                plans.append((node, scope, form))
        if blocked:
            raise ConversionError(f"{self.refusal}: {every_node(blocked)}",
                                  parameters=("max_intermediate_mib",))
        planned = {id(node) for node, _, _ in plans}  # (a TensorScatter's ScatterElements the
        for node, scope in tensor_scatters:  # target runs is what it is rewritten as)
            if not any(made[k] is node for k in made if k in planned):
                self.rewrote(node, scope, f"-> ScatterElements ({self.target.name} runs it)")
        for node, scope, form in plans:
            source = made.get(id(node))
            what = "TensorScatter -> ScatterElements -> " if source is not None else ""
            exactness, reduction = _exactness(node), _reduction(node)
            if form is None:
                nodes, out = seg.lower_reduction(node, scope.opset, names)
                detail = (f"{len(nodes)} standard nodes (sort + segmented {reduction} + "
                          f"ScatterND(none); {exactness})")
            else:
                nodes, out = scatter_free(node, scope.opset, form.name, names, self.writing)
                detail = (f"{what}{len(nodes)} scatter-free nodes ({form.said()}; {reduction}, "
                          f"{exactness})")
            self._splice(node, scope, nodes, out)
            self.rewrote(source or node, scope, detail)

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


def _exactness(node: ir.Node) -> str:
    reduction, dtype = _reduction(node), node.inputs[0].dtype
    if reduction in ("add", "mul") and dtype in _FLOATS:
        return "float sums re-associated, judged against the original's rounding"
    return "bit for bit"


def _is_scatter(node: ir.Node) -> bool:
    return is_default_domain(node) and node.op_type in SCATTER_OPS


# --------------------------------------------------------------------------- the forms


def scatter_free(node: ir.Node, opset: int, form: str, names: seg.Names | None = None,
                 writing: ShapeWriting = ShapeWriting()) -> tuple[list[ir.Node], ir.Value]:
    """Standard nodes without any scatter computing ``node`` (ScatterElements or ScatterND) in
    ``form`` ("mask" or "sort"); the value replacing its output. ``writing.flatten=False``: no
    Flatten, also where no side of a rows axis is static (a Reshape to sizes computed from the
    shape: onnx2tf's Flatten comes out wrong there, targets/litert.py)."""
    names = names or seg.Names()
    names.prefix = seg.name_prefix(node)
    b = seg.Builder(names, writing.computed_expands)
    data = node.inputs[0]
    if seg.is_empty(data):
        return b.nodes, b.op("Identity", data, dtype=data.dtype)
    reduction = _reduction(node)
    rows, keys, vals = seg.update_rows(b, node,
                                       reshape_opset=None if writing.flatten else opset)
    count, row_count, _ = seg.row_counts(node)
    if form == "mask":
        out = _mask_form(b, rows, keys, vals, reduction, data.dtype, opset, count)
    else:
        out = _sort_form(b, rows, keys, vals, reduction, data.dtype, opset, count,
                         _position_dtype(count, row_count),
                         row_count if writing.segment_tree else None)
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
               opset: int, count: int | None) -> ir.Value:
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
        unwritten = b.op("Less", last, b.const(0))
        if count:  # each row's last writer's update first: [R, w], not all n rows copied
            writer = b.op("Where", unwritten, b.const(0), last, dtype=INT64)
            vals = b.op("Gather", vals, writer, axis=0, dtype=dtype)
            last = row_ids
        source = b.op("Where", unwritten, row_ids, b.op("Add", last, row_count, dtype=INT64),
                      dtype=INT64)
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


def _position_dtype(count: int | None, row_count: int | None) -> ir.DataType:
    """int32 for the float max/min scan's positions where the R + n rows are static and fewer
    than 2^31 (half the bytes of its largest tensors); int64 otherwise."""
    static = count is not None and row_count is not None and count + row_count < 2 ** 31
    return ir.DataType.INT32 if static else INT64


def _sort_form(b: seg.Builder, rows, keys, vals, reduction: str, dtype: ir.DataType,
               opset: int, count: int | None, position_dtype: ir.DataType = INT64,
               static_rows: int | None = None) -> ir.Value:
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
    kind = seg.Kind(reduction, ct, int_minmax=opset >= 12)
    both = b.cast(b.op("Concat", rows, vals, axis=0, dtype=dtype), ct, dtype)
    if kind.nan_aware and segment_tree.applies(count, static_rows):  # (O(R+n): static counts)
        return b.cast(segment_tree.positional_tree(b, both, order, end_at, kind, static_rows,
                                                   static_rows + count), dtype, ct)
    x = b.op("Gather", both, order, axis=0, dtype=ct)
    steps = DYNAMIC_STEPS if count is None else math.ceil(math.log2(count + 1))
    if kind.nan_aware:
        scanned = _positional_scan(b, x, sorted_keys, positions, end_at, kind, steps,
                                   position_dtype)
        return b.cast(scanned, dtype, ct)
    out = _identity_row_scan(b, x, sorted_keys, positions, end_at, kind, steps, total,
                             b.dims(both, 1, 2))
    return b.cast(out, dtype, ct)


def _identity_row_scan(b: seg.Builder, x, sorted_keys, positions, end_at, kind: seg.Kind,
                       steps: int, total, width) -> ir.Value:
    """The scan of add/mul, integer max/min and bool: ``x`` [total, w] with one more row, the
    reduction's identity (combine(identity, v) is v bit for bit), that an element whose partner
    lies outside its run reads instead: a Gather of [total] indices picks the partners, no Where
    over [total, w] (whose two temporaries onnxruntime allocates: live_bytes.py). Every step's
    index arithmetic is built first, so that onnxruntime's run order (live_bytes.run_order) walks
    the rows' chain first and computes each step's partners when that step runs. ``width``:
    the rows' width as a [1] vector, read from the unsorted rows (static where shapes are, so a
    target's op table step folds it; x's comes after TopK)."""
    ct = kind.dtype
    last = _as_vector(b, total)
    partners = [b.op("Concat", b.op("Where", b.op("Reshape", same_col, b.const([-1]),
                                                  dtype=ir.DataType.BOOL), back, total,
                                    dtype=INT64), last, axis=0, dtype=INT64)
                for _, same_col, back in _doubling(b, sorted_keys, positions, steps)]
    identity = kind.identity()
    # (Tile, not Expand: onnx2tf refuses an Expand its onnxsim has folded to a constant)
    row = b.op("Tile", b.const(identity.reshape(1, 1), identity.dtype),
               b.op("Concat", b.const([1]), width, axis=0, dtype=INT64), dtype=ct)
    x = b.op("Concat", x, row, axis=0, dtype=ct)  # [total + 1, w]
    for partner in partners:
        x, _ = kind.combine(b, b.op("Gather", x, partner, axis=0, dtype=ct), x)
    return b.op("Gather", x, end_at, axis=0, dtype=ct)


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
                     steps: int, position_dtype: ir.DataType) -> ir.Value:
    """Float max/min: the scan carries, per element, the position of the winning value (picked
    with Where) and "no NaN at or after it" (Kind's flagged fold, associative, carried negated so
    that no step negates a [total, w] tensor); the values are gathered once at the end. No float
    passes through Where, whose -0.0 onnxruntime loses (and whose arithmetic repair,
    Builder.select(exact=True), its graph optimizer undoes: measured on onnxruntime 1.23 with
    optimizations on), so the result is bit for bit.

    Memory: each step's inputs are built before what reads them and the positions' chain is
    the last input of each join, so onnxruntime's run order (:func:`.lowering.live_bytes.run_order`)
    walks the positions first and computes each step's flags when that step runs. A negation
    of the flags in each step would be a chain of its own, which that order computes for every
    step first and holds (17 steps x [total, w] bool for a 20k-node GNN)."""
    ct = kind.dtype
    at = b.op("Expand", b.op("Reshape", b.cast(positions, position_dtype, INT64),
                             b.const([-1, 1]), dtype=position_dtype),
              b.shape(x), dtype=position_dtype)  # [total, w]
    clean = b.op("Not", b.op("IsNaN", x))
    for _, same_col, back in _doubling(b, sorted_keys, positions, steps):
        early_at = b.op("Gather", at, back, axis=0, dtype=position_dtype)
        early = b.op("GatherElements", x, early_at, axis=0, dtype=ct)
        late = b.op("GatherElements", x, at, axis=0, dtype=ct)
        loses = b.op("And", b.op("And", kind.loses(b, late, early), clean), same_col)
        early_clean = b.op("Or", b.op("Gather", clean, back, axis=0), b.op("Not", same_col))
        at = b.op("Where", loses, early_at, at, dtype=position_dtype)
        clean = b.op("And", early_clean, clean)
    final = b.op("Gather", at, end_at, axis=0, dtype=position_dtype)
    return b.op("GatherElements", x, final, axis=0, dtype=ct)


def no_scatter_passes(max_intermediate_mib: int = DEFAULT_MAX_INTERMEDIATE_MIB) -> list:
    """What ``prepare --target no-scatter`` runs."""
    return steps_for(NoScatterPass(max_intermediate_mib))


def target_passes(target: str, max_intermediate_mib: int = DEFAULT_MAX_INTERMEDIATE_MIB,
                  preceded_by: tuple = (), writing: ShapeWriting = ShapeWriting()) -> list:
    """What ``prepare --target T`` runs for a target whose scatters are rewritten here
    (``preceded_by``: passes the target needs just before the rewrite; ``writing``: as
    :func:`scatter_free`)."""
    return steps_for(TargetScattersPass(target, max_intermediate_mib, writing), preceded_by)


def steps_for(pass_: NoScatterPass, preceded_by: tuple = ()) -> list:
    """``pass_`` after what it needs, one report line: the deprecated Scatter upgraded (where the
    model has one), functions whose scatters read a function attribute specialized, then
    ``preceded_by``."""
    from scatter_rewrite.passes.compose import OnlyIf, Steps
    from scatter_rewrite.passes.specialize import SpecializeCallsPass
    from scatter_rewrite.passes.upgrade import has_scatter, upgrade_steps

    return [Steps(OnlyIf(has_scatter, upgrade_steps()), SpecializeCallsPass(_is_scatter),
                  *preceded_by, pass_, name=pass_.name)]


class TargetScattersPass(NoScatterPass):
    """The scatters a target (:mod:`scatter_rewrite.targets`) does not run, rewritten: as lower's
    sort + segmented reduction + ScatterND(none) where the target runs that ScatterND for the
    node's type, as a scatter-free form otherwise; the scatters it runs are left alone.
    ``sort_float_minmax``: float max/min always in the scatter-free sort form, whose values pass
    through no Where (MNN turned the segmented form's -0.0 into +0.0: targets/mnn.py)."""

    name = "prepare"
    refusal = "not prepared"

    def __init__(self, target: str, max_intermediate_mib: int = DEFAULT_MAX_INTERMEDIATE_MIB,
                 writing: ShapeWriting = ShapeWriting(), sort_float_minmax: bool = False):
        from scatter_rewrite.targets import get_target

        super().__init__(max_intermediate_mib, writing)
        self.target = get_target(target)
        self.sort_float_minmax = sort_float_minmax
        self.refusal = f"not prepared for {self.target.name}"

    def wanted(self, node: ir.Node) -> bool:
        if not _is_scatter(node):
            return False
        data = node.inputs[0] if node.inputs else None
        index = node.inputs[2 if node.op_type == "TensorScatter" else 1] \
            if len(node.inputs) > 2 else None
        dtype = data.dtype.name if data is not None and data.dtype is not None else None
        index_dtype = index.dtype.name if index is not None and index.dtype is not None else None
        if not self.target.supports(node.op_type, _reduction(node), dtype, index_dtype):
            return True
        # (a form it runs but gets wrong for this node's shapes: MNN's ScatterND of 2-tuples)
        fault = self.target.node_fault
        return fault is not None and fault(node, dtype) is not None

    def segment_form(self, node: ir.Node) -> bool:
        dtype = node.inputs[0].dtype
        if self.sort_float_minmax and _reduction(node) in ("max", "min") and dtype in _FLOATS:
            return False
        return (_reduction(node) != "none" and dtype is not None
                and self.target.supports("ScatterND", "none", dtype.name, "INT64"))
