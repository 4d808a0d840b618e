"""Move a model's default-domain opset to a target, node by node, by the declared version steps.

Every step of every default-domain op is declared in :mod:`scatter_rewrite.opset.steps`; moving a
node down walks its steps from its version to the one in force at the target, newest first:

* SAME / SAME_IF: the older schema means the same (SAME_IF: when the node's attributes hold the
  step's condition; else no form, or the op's function body where the step says so). The node is
  kept, without the attributes the older schema lacks (at their newer defaults), when the older
  schema takes its data types (:mod:`.fitting`); else the converter, which names the type.
* REWRITE: the exact forms registered for the step (:mod:`.registry`; one file per form in
  :mod:`.forms`), each with one explicit :data:`Form` result; a replaced node's new nodes are
  moved on in turn.
* CONVERTER: ``onnx.version_converter``'s adapter (:mod:`.converter`), on a one-node model per
  distinct node signature (cached), spliced back; where it has none, the node kept as the older
  schema takes it, or moved from an opset between, or its function body.
* BODY: the op's ONNX function body (:mod:`.bodies`), the spec's own definition of the op, whose
  nodes are then moved in turn; a runtime's fused kernel and the body's separate ops may round
  float results differently, so :class:`OpsetMove` lists such expansions (and the forms that
  compute floats otherwise, ``Replaced(rounding=True)``) for validation.
* NO_FORM: a ConversionError naming the node, the step and why.

Cost: linear in the number of nodes (one-node conversions cached by signature). Constant means known
before run time: an initializer that is also a graph input is a default callers may override
(:func:`scatter_rewrite.graph.is_overridable`), and no form reads its value. A moved model that
fails onnx.checker (full) or onnxruntime's session creation, where the model given did not, is a
ConversionError naming the step, raised before anything is returned (:mod:`.verify`).

Moving up, a node crosses its newer versions; where one has a form registered for the step up
(Softmax-11 -> Softmax-13), that form; else the converter.
"""

from __future__ import annotations

import dataclasses
import logging

import onnx_ir as ir

from scatter_rewrite.errors import ConversionError
from scatter_rewrite.graph import (
    DEFAULT_DOMAINS, Scope, default_opset, describe, is_default_domain, iter_scopes, mark_written,
    written_for,
)
from scatter_rewrite.opset import steps
from scatter_rewrite.opset.bodies import EXACT_BODIES
from scatter_rewrite.opset.converter import Adapter, distinct_nested_names
from scatter_rewrite.opset.fitting import (
    CONTAINER_OPS, condition_gap, fits_schema, needs_conversion, since_version, step_name, type_gap,
)
from scatter_rewrite.opset.registry import (
    Done, Form, Prepared, Replaced, Unchanged, down_forms, up_forms,
)
from scatter_rewrite.opset.rewriting import refuse
from scatter_rewrite.opset.sequence_carries import scan_outputs_for_sequences
from scatter_rewrite.opset.verify import Moved, checkable, verify_move

__all__ = [
    "convert_opset", "MIN_IR_VERSION", "move_to_opset", "opset_note",
    "OpsetMove", "scope_opsets",
]

logger = logging.getLogger("scatter_rewrite")

MIN_IR_VERSION = 7  # opset >= 11 needs IR >= 6; 7 keeps training-free models loadable everywhere


class _Mover(Adapter):
    """Moves nodes to ``target`` by the declared steps and the registered forms, the converter's
    adapters (:class:`Adapter`) for the rest."""

    def __init__(self, target: int):
        super().__init__(target, convert_opset)
        self.decomposed: dict[str, int] = {}  # op -> nodes a form computed with other float ops

    def convert_node(self, node: ir.Node, scope: Scope) -> None:
        """Move ``node`` from ``scope.opset`` to the target: downwards by the declared steps
        (:mod:`scatter_rewrite.opset.steps`), newest first."""
        if scope.opset < self.target:
            form = self._up(node, scope)
            if isinstance(form, Unchanged):
                self.convert(node, scope)
            else:
                self._follow(node, scope, form)
            return
        converter = False
        for since, step in steps.steps_between(node.op_type, scope.opset, self.target):
            if step.kind in (steps.Kind.SAME_IF, steps.Kind.NO_FORM):
                gap = (condition_gap(node, step, since) if step.kind == steps.Kind.SAME_IF
                       else step.reason)
                if gap is None:
                    continue
                if step.otherwise != steps.Kind.BODY:
                    raise refuse(node, scope, self.target, f"{step_name(node.op_type, since)}: "
                                                           f"{gap}")
                self.convert(node, scope, body_only=True)
                return
            if step.kind == steps.Kind.BODY:
                self.convert(node, scope, body_only=True)
                return
            if step.kind == steps.Kind.REWRITE and self._rewrite(node, scope, since):
                return
            converter = converter or step.kind == steps.Kind.CONVERTER
        if converter:
            self.convert(node, scope)
            return
        drop = fits_schema(node, scope.opset, self.target)
        # (an attribute off its default, a type the older op lacks: the converter says which)
        if drop is None:
            self.convert(node, scope)
            return
        self._keep(node, drop)

    def _keep(self, node: ir.Node, drop: list[str]) -> None:
        """A node the older schema takes and means the same by: without the attributes it lacks
        (``drop``, at their newer defaults) and omitted trailing inputs."""
        for name in drop:
            del node.attributes[name]
        # (an omitted trailing input the older schema lacks)
        while node.inputs and node.inputs[-1] is None:
            node.resize_inputs(len(node.inputs) - 1)
        self.kept += 1

    def _rewrite(self, node: ir.Node, scope: Scope, since: int) -> bool:
        """The forms of the step down from ``since``, in turn; True when one replaced the node or
        put it in its form at the target (False: the node goes on to its older steps)."""
        for spec in down_forms(node.op_type, since):
            form = spec.function(node, scope, self.target)
            if isinstance(form, (Done, Replaced)):
                self._follow(node, scope, form)
                return True
            if isinstance(form, Prepared):  # its inputs' new nodes moved on; the node goes on
                self._follow(node, scope, form)
        return False

    def _up(self, node: ir.Node, scope: Scope) -> Form:
        """The form registered for the first step up ``node`` crosses to the target, if any."""
        for newer in steps.versions(node.op_type):
            if scope.opset < newer <= self.target:
                for spec in up_forms(node.op_type, steps.previous(node.op_type, newer), newer):
                    form = spec.function(node, scope, self.target)
                    if not isinstance(form, Unchanged):
                        return form
        return Unchanged()

    def _follow(self, node: ir.Node, scope: Scope, form: Done | Replaced | Prepared) -> None:
        """After a rewrite of ``node``: the new nodes moved on in turn (constants no node reads any
        more dropped); a replacement that rounds floats otherwise counted as an expansion."""
        if isinstance(form, Done):
            self.kept += 1
            return
        if isinstance(form, Replaced) and form.rounding:
            self.decomposed[node.op_type] = self.decomposed.get(node.op_type, 0) + 1
        mark_written(form.nodes, written_for(node, scope))  # (every form's, replace()'s or not)
        # (the sizes a Split-11 takes in)
        for new in sorted(form.nodes, key=lambda n: n.op_type == "Constant"):
            if new.op_type == "Constant" and not new.outputs[0].uses():
                scope.body.remove(new)
            elif is_default_domain(new) and needs_conversion(new.op_type, scope.opset, self.target):
                self.convert_node(new, scope)


@dataclasses.dataclass
class OpsetMove:
    """What moving a model to opset ``target`` did: for the pass's notes and validation's
    tolerance."""

    opsets: set[int]  # the default-domain opsets of the model and its functions before
    target: int
    converted: int = 0  # nodes handed to the converter (or replaced by a function body)
    # op -> nodes replaced by its body
    expanded: dict[str, int] = dataclasses.field(default_factory=dict)
    # op -> nodes an exact form computed with other float ops (Replaced(rounding=True))
    decomposed: dict[str, int] = dataclasses.field(default_factory=dict)
    scanned: int = 0  # sequences Loops build, written as scan outputs (Loop-13 -> Loop-11)

    @property
    def rounding(self) -> list[str]:
        """The ops whose body or form may round float results differently from a fused kernel."""
        return sorted({op for op in self.expanded if op not in EXACT_BODIES} | set(self.decomposed))

    @property
    def note(self) -> str:
        text = opset_note(self.opsets, self.target, self.converted)
        if self.expanded:
            ops = ", ".join(f"{op} x{n}" for op, n in sorted(self.expanded.items()))
            text += (f"; with no version at opset {self.target}, replaced by their ONNX function "
                     f"bodies: {ops}")
        if self.decomposed:
            ops = ", ".join(f"{op} x{n}" for op, n in sorted(self.decomposed.items()))
            text += f"; computed by other ops at opset {self.target}: {ops}"
        if self.scanned:
            text += (f"; {self.scanned} sequence(s) built in a Loop written as its scan output "
                     f"(Loop takes sequences from opset 13)")
        if self.rounding:
            text += (f" ({', '.join(self.rounding)}: float results may round differently from "
                     "a fused kernel)")
        return text


def _reads_rank(node: ir.Node, source: int, target: int) -> bool:
    """Whether a form of a step down from ``source`` to ``target`` needs the node's input's rank
    (registered ``reads_rank``), unrecorded."""
    x = node.inputs[0] if node.inputs else None
    if x is None or x.shape is not None:
        return False
    for since, step in steps.steps_between(node.op_type, source, target):
        forms = down_forms(node.op_type, since) if step.kind == steps.Kind.REWRITE else ()
        if any(spec.needs_rank(node) for spec in forms):
            return True
    return False


def scope_opsets(model: ir.Model) -> set[int]:
    current = default_opset(model.opset_imports, fallback=1)
    return {current} | {default_opset(f.opset_imports, current) for f in model.functions.values()}


def convert_opset(model: ir.Model, target: int) -> OpsetMove:
    """Set every default-domain opset import (model and functions) to ``target``, converting the
    nodes whose schema changes."""
    from scatter_rewrite.type_inference import (
        annotate_function_types, borrow_inferred_types, restore_types,
    )

    move = OpsetMove(scope_opsets(model), target)
    converter = _Mover(target)
    work = [(node, scope) for scope in list(iter_scopes(model)) if scope.opset != target
            for node in list(scope.body)
            if is_default_domain(node) and needs_conversion(node.op_type, scope.opset, target)]
    # If/Loop/Scan keep their node (their bodies are scopes of their own), but their types must fit
    # the older schema: If took bfloat16 only from 16.
    containers = [(node, scope) for scope in iter_scopes(model) if scope.opset > target
                  for node in scope.body
                  if is_default_domain(node) and node.op_type in CONTAINER_OPS]
    # (before any borrowed type: as the model was given)
    before = checkable(model) if work else None
    borrowed = []
    if any(scope.opset > target
           and (any(v is not None and v.dtype is None for v in (*node.inputs, *node.outputs))
                or _reads_rank(node, scope.opset, target))
           for node, scope in work + containers):
        # Downgrades: the converter and fits_schema need dtypes, some exact forms a rank, that
        # exporters often leave unrecorded (TorchScript writes no value_info, a lowering's output
        # has no shape): borrow ONNX shape inference's for the conversion, then give them back.
        borrowed = borrow_inferred_types(model)
        for function in {id(s.body): s.body for _, s in work if s.is_function}.values():
            borrowed += annotate_function_types(model, function)
    moved = [Moved(describe(node, scope), node.op_type, since_version(node.op_type, scope.opset),
                   node.name)
             for node, scope in work]
    try:
        if target < 13:  # (Loop takes sequences from 13: one it builds becomes a scan output)
            for node, scope in list(containers):
                if node.op_type == "Loop" and type_gap(node, target):
                    containers.remove((node, scope))
                    move.scanned += scan_outputs_for_sequences(node, scope, target)
            containers = [(n, s) for s in iter_scopes(model) if s.opset > target for n in s.body
                          if is_default_domain(n) and n.op_type in CONTAINER_OPS]
        for node, scope in containers:
            gap = type_gap(node, target)
            if gap is not None:
                raise ConversionError(f"{describe(node, scope)} cannot move to opset {target}: "
                                      f"{gap}")
        for node, scope in work:
            converter.convert_node(node, scope)
    finally:
        restore_types(borrowed)
    for imports in [model.opset_imports] + [f.opset_imports for f in model.functions.values()]:
        for domain in DEFAULT_DOMAINS:
            if domain in imports:
                imports[domain] = target
    if not any(d in model.opset_imports for d in DEFAULT_DOMAINS):
        model.opset_imports[""] = target
    if model.ir_version is not None and model.ir_version < MIN_IR_VERSION:
        model.ir_version = MIN_IR_VERSION
    if any(" > " in scope.where for _, scope in work):
        distinct_nested_names(model)
    if before is not None:
        verify_move(model, before, moved, target)
    logger.info("opset conversion to %d: %d node(s) converted, %d kept as they are (the older "
                "schema accepts them unchanged), %d replaced by function "
                "bodies", target, converter.converted,
                converter.kept, sum(converter.expanded.values()))
    move.converted, move.expanded = converter.converted, converter.expanded
    move.decomposed = converter.decomposed
    return move


def move_to_opset(model: ir.Model, target: int) -> OpsetMove | None:
    """:func:`convert_opset` when the model or a function is not at ``target`` yet; None when
    nothing had to move."""
    if scope_opsets(model) == {target}:
        return None
    return convert_opset(model, target)


def opset_note(opsets: set[int], target: int, converted: int) -> str:
    """The report line for a model whose scopes were at ``opsets`` and are now at ``target``."""
    return (f"default-domain opset {', '.join(map(str, sorted(opsets)))} -> {target} ({converted} "
            "other node(s) converted)")


