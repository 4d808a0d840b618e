"""Exact scatter-free forms: every ScatterElements, ScatterND (reduction none/add/mul/max/min),
TensorScatter and deprecated Scatter becomes Gather/Equal/Where/Reduce*/TopK-class standard ops,
with no scatter op left anywhere (main graph, If/Loop/Scan bodies, model-local functions), for
runtimes that have no scatter or a wrong one (NPUs: docs/targets.md).

Each node is written in one of two exact forms, ``mask`` and ``sort``
(:mod:`.lowering.scatter_free`: how each is built, and how exact it is), the one that holds fewer
bytes at once.

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

import onnx_ir as ir

from scatter_rewrite.errors import ConversionError, OptionError
from scatter_rewrite.limits import OPSET_FLOOR
from scatter_rewrite.graph import (
    FLOAT_TYPES, SCATTER_OPS, Scope, describe, is_default_domain, iter_nodes, nodes_within, reference_reason,
    remove_unused_expands, value_names,
)
from scatter_rewrite.passes.lowering import live_bytes as live
from scatter_rewrite.passes.lowering.scatter_free import ShapeWriting, reduction_of, scatter_free
from scatter_rewrite.passes.lowering import segment_reduce as seg
from scatter_rewrite.passes.lowering import tensor_scatter
from scatter_rewrite.passes.inline_if import inline_constant_ifs, scatter_of_unknown_rank
from scatter_rewrite.passes.base import NodeNote, ScatterPass, every_node
from scatter_rewrite.type_inference import (
    annotate_functions_with, borrow_inferred_types, restore_types,
)
from scatter_rewrite.said import param, said

__all__ = ["DEFAULT_MAX_INTERMEDIATE_MIB", "Form", "NoScatterPass", "TargetScattersPass",
           "forms_for", "is_scatter", "scatter_free_blocker"]

DEFAULT_MAX_INTERMEDIATE_MIB = 256
# the compute types onnxruntime's CPU Reduce* kernels take (ReduceProd/Max/Min lack the others);
# not int64 add/mul: its int64 ReduceSum and ReduceProd go through double, so a value past 2^53
# comes out rounded (2^55 + 1 summed alone gives 2^55, onnxruntime 1.32)
_MASK_REDUCE_TYPES = {ir.DataType.INT32, ir.DataType.INT64, ir.DataType.FLOAT, ir.DataType.DOUBLE}
# stands for a symbolic dimension when forms are compared (the form that grows slower wins)
_LARGE = 1 << 20


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



def scatter_free_blocker(node: ir.Node, opset: int) -> str | None:
    """Why a default-domain ScatterElements/ScatterND has no scatter-free form here (None: it
    has one). TensorScatter and Scatter are first made ScatterElements (the pass does)."""
    if (why := reference_reason(node)) is not None:
        return why
    if opset < OPSET_FLOOR:
        return (f"opset {opset}: the forms' ops (Range, TopK with K as input) need opset >= "
                f"{OPSET_FLOOR}")
    if len(node.inputs) != 3 or any(v is None for v in node.inputs):
        return "needs exactly 3 inputs (data, indices, updates)"
    reduction = reduction_of(node)
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
    reduction = reduction_of(node)
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
    elif ct in _MASK_REDUCE_TYPES and not (ct in FLOAT_TYPES and reduction in ("max", "min")) \
            and not (ct == ir.DataType.INT64 and reduction in ("add", "mul")):
        shapes.append(("mask", "R*n*w", _itemsize(ct), sized(rows, n, w)))
    # (float max/min carry a position per element through the scan: int32 when static)
    positional = reduction in ("max", "min") and ct in FLOAT_TYPES
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
            raise OptionError(said(param("max_intermediate_mib", max_intermediate_mib),
                                   ": pick a positive number of MiB"))
        self.max_bytes = max_intermediate_mib * 2 ** 20
        self.max_intermediate_mib = max_intermediate_mib

    def wanted(self, node: ir.Node) -> bool:
        """Whether the pass rewrites ``node`` (its types borrowed from inference): every
        default-domain scatter here; a target's pass, those its runtime cannot run."""
        return is_scatter(node)

    def form_for(self, node: ir.Node, opset: int) -> tuple[Form | None, str | None]:
        """The form ``node`` is written in, or why none fits: the cheapest here; a target whose
        runtime gets some form wrong picks among the others (targets/litert.py)."""
        return forms_for(node, opset, self.writing)[0], None

    def segment_form(self, node: ir.Node) -> bool:
        """Whether ``node`` is written as lower's sort + segmented reduction + ScatterND(none)
        (:func:`.lowering.segment_reduce.lower_reduction`) instead of a scatter-free form: never here."""
        return False

    def run(self, model: ir.Model) -> None:
        if not any(is_scatter(n) for n, _ in iter_nodes(model)):
            return
        # (the deprecated Scatter upgraded and functions specialized first: passes/lists.py)
        # TorchScript's constant Ifs around a scatter hide its rank: their taken branch, as lower
        for text in inline_constant_ifs(model, near=scatter_of_unknown_rank):
            self.note(text, modified=True)
        borrowed = borrow_inferred_types(model, sharpen=True) + annotate_functions_with(
            model, is_scatter)
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
                raise ConversionError(said(f"no scatter-free form of {describe(node, scope)}: ",
                                           reason))
            nodes, out = tensor_scatter.lower_tensor_scatter(
                node, scope.opset, names, self.writing.computed_expands)
            made[id(out.producer())] = node
            self._splice(node, scope, nodes, out)
        plans, blocked = [], []
        for node, scope in iter_nodes(model):
            # (a TensorScatter's ScatterElements too: left where the target runs it)
            if not (is_scatter(node) and self.wanted(node)):
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
                    reason = said(f"its cheapest exact scatter-free form ({form.said()}) is "
                                  f"above the bound of {self.max_intermediate_mib} MiB: raise it "
                                  "with ", param("max_intermediate_mib",
                                                 math.ceil(form.bytes / 2 ** 20)))
            if reason is not None:
                found = made.get(id(node))
                shown = describe(node, scope) if found is None else describe(found, scope)
                self.skip(node, scope, reason)
                blocked.append(NodeNote(shown, reason))
            else:
                plans.append((node, scope, form))
        if blocked:
            raise ConversionError(said(f"{self.refusal}: ", every_node(blocked)))
        planned = {id(node) for node, _, _ in plans}  # (a TensorScatter's ScatterElements the
        for node, scope in tensor_scatters:  # target runs is what it is rewritten as)
            if not any(made[k] is node for k in made if k in planned):
                self.rewrote(node, scope, f"-> ScatterElements ({self.target.name} runs it)")
        for node, scope, form in plans:
            source = made.get(id(node))
            what = "TensorScatter -> ScatterElements -> " if source is not None else ""
            exactness, reduction = _exactness(node), reduction_of(node)
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
    reduction, dtype = reduction_of(node), node.inputs[0].dtype
    if reduction in ("add", "mul") and dtype in FLOAT_TYPES:
        return "float sums re-associated, judged against the original's rounding"
    return "bit for bit"


def is_scatter(node: ir.Node) -> bool:
    """Whether ``node`` is a default-domain scatter (the four ops, the deprecated one too)."""
    return is_default_domain(node) and node.op_type in SCATTER_OPS



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
        if not is_scatter(node):
            return False
        data = node.inputs[0] if node.inputs else None
        index = node.inputs[2 if node.op_type == "TensorScatter" else 1] \
            if len(node.inputs) > 2 else None
        dtype = data.dtype.name if data is not None and data.dtype is not None else None
        index_dtype = index.dtype.name if index is not None and index.dtype is not None else None
        if not self.target.supports(node.op_type, reduction_of(node), dtype, index_dtype):
            return True
        # (a form it runs but gets wrong for this node's shapes: MNN's ScatterND of 2-tuples)
        fault = self.target.node_fault
        return fault is not None and fault(node, dtype) is not None

    def segment_form(self, node: ir.Node) -> bool:
        dtype = node.inputs[0].dtype
        if self.sort_float_minmax and reduction_of(node) in ("max", "min") and dtype in FLOAT_TYPES:
            return False
        return (reduction_of(node) != "none" and dtype is not None
                and self.target.supports("ScatterND", "none", dtype.name, "INT64"))
