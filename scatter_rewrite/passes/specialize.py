"""Give a model-local function one copy per call binding where a scatter in it reads a function
attribute.

A scatter inside a function whose ``axis``, ``reduction`` or ``mode`` is ``@ax`` (an attribute of
the function, known only at each call) cannot be lowered, converted or folded in the function as it
stands: the rewrite depends on the value. This pass gives every distinct binding of those attributes
its own copy of the function with the references replaced by the values, and points each call at its
copy. The first binding keeps the function's name when it covers every call (else it gets a new one,
as the others do: ``F__2``, ``F__3``...). Each call computes exactly what it did.

A function that passes such an attribute on to another (``G<ax=@ax>`` in its body) is specialized
too, then the copies of the other, round after round. Calls whose value is not known (a reference
the pass could not resolve, or no value and no default) keep the function as it is, and the pass
that ran this one declines its scatters there with the reason. A value a call gives that the
scatter's schema does not take (a float ``axis``) is InvalidModelError, as in any scatter.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir

from scatter_rewrite.graph import (
    SCATTER_OPS,
    attribute_key,
    body_nodes,
    function_calls,
    is_default_domain,
    is_reference,
)
from scatter_rewrite.passes.base import ScatterPass
from scatter_rewrite.spec import check_scatter_nodes

__all__ = ["SpecializeCallsPass"]

_KEYABLE = {ir.AttributeType.INT, ir.AttributeType.FLOAT, ir.AttributeType.STRING,
            ir.AttributeType.INTS, ir.AttributeType.FLOATS, ir.AttributeType.STRINGS}

FunctionKey = tuple[str, str, str]


class SpecializeCallsPass(ScatterPass):
    """``wants(node)``: whether a scatter node with a reference attribute is one the passes after
    this one would rewrite (default: every one); the others do not make their function
    specialized. ``wants_in(model)``: that predicate, where it depends on the model (what a fold
    can evaluate in it)."""

    name = "specialize"

    def __init__(self, wants: Callable[[ir.Node], bool] | None = None, *,
                 wants_in: Callable[[ir.Model], Callable[[ir.Node], bool]] | None = None) -> None:
        super().__init__()
        self.wants_in = wants_in or (lambda model: wants or (lambda node: True))

    def run(self, model: ir.Model) -> None:
        wants = self.wants_in(model)
        for _ in range(len(model.functions) + 1):  # one level of nesting per round
            if not self._round(model, wants):
                break
        # a call's value now in a scatter (axis=1.0 bound to axis=@ax): checked as any
        if self.result.modified:
            check_scatter_nodes(model)

    def _round(self, model: ir.Model, wants: Callable[[ir.Node], bool]) -> bool:
        needed = _needed_attributes(model, wants)
        calls = function_calls(model)
        changed = False
        for key, names in needed.items():
            function = model.functions[key]
            groups: dict[tuple, list[ir.Node]] = {}
            unresolved = 0
            for call in calls.get(key, []):
                binding = _binding(call, function, names)
                if binding is None:
                    unresolved += 1
                else:
                    groups.setdefault(
                        tuple(sorted((n, attribute_key(a)) for n, a in binding.items())), []
                    ).append(call)
            if not groups:
                continue
            targets = []
            for number, group in enumerate(groups.values(), start=1):
                if number == 1 and unresolved == 0:
                    target = function  # its calls all bind these values: resolved in place, last
                else:
                    target = function.clone()  # (before the function itself is resolved)
                    target.name = _free_name(model, function)
                    model.functions[target.identifier()] = target
                    for call in group:
                        call.op_type = target.name
                targets.append((target, group))
            labels = []
            for target, group in reversed(targets):
                binding = _binding(group[0], function, names)
                _resolve(target, binding)
                labels.insert(0, f"{target.name} ({_said(binding)}, {len(group)} call(s))")
            left = (
                f"; {unresolved} call(s) whose values are not known keep {function.name}"
                if unresolved
                else ""
            )
            self.note(
                f"function {function.domain}::{function.name}: a scatter in it reads "
                f"{', '.join(sorted(names))}, known only at its calls: specialized per binding as "
                f"{'; '.join(labels)}{left}",
                modified=True,
            )
            changed = True
        return changed


def _needed_attributes(
    model: ir.Model, wants: Callable[[ir.Node], bool]
) -> dict[FunctionKey, set[str]]:
    """For each function: its attributes a scatter in it that ``wants`` reads (``axis = @ax`` gives
    ``ax``), or a call in it passes on to another function's needed attribute; only functions with
    some."""
    needed: dict[FunctionKey, set[str]] = {}
    nodes = {key: list(body_nodes(function)) for key, function in model.functions.items()}
    for key, body in nodes.items():
        for node in body:
            if node.op_type in SCATTER_OPS and is_default_domain(node) and wants(node):
                needed.setdefault(key, set()).update(
                    a.ref_attr_name for a in node.attributes.values() if is_reference(a))
    grew = True
    while grew:  # a function passing @x to a needed attribute of another needs x
        grew = False
        for key, body in nodes.items():
            for node in body:
                inner = needed.get((node.domain, node.op_type, node.overload))
                if not inner:
                    continue
                for name in inner:
                    a = node.attributes.get(name)
                    if (
                        a is not None
                        and is_reference(a)
                        and a.ref_attr_name not in needed.get(key, set())
                    ):
                        needed.setdefault(key, set()).add(a.ref_attr_name)
                        grew = True
    return {key: names for key, names in needed.items() if names}


def _binding(call: ir.Node, function: ir.Function, names: set[str]) -> dict[str, ir.Attr] | None:
    """The value each of ``names`` has at ``call``: the call's, else the function's default; None
    when one is not known there (a reference to the caller's own attribute, or neither given)."""
    binding = {}
    for name in names:
        a = call.attributes.get(name)
        if a is None:
            a = function.attributes.get(name)
        if a is None or is_reference(a) or a.value is None or a.type not in _KEYABLE:
            return None
        binding[name] = a
    return binding


def _resolve(function: ir.Function, binding: dict[str, ir.Attr]) -> None:
    """Replace every reference to an attribute of ``binding`` in ``function`` (subgraphs included)
    by its value."""
    for node in body_nodes(function):
        for key, a in list(node.attributes.items()):
            if is_reference(a) and a.ref_attr_name in binding:
                value = binding[a.ref_attr_name]
                node.attributes[key] = ir.Attr(
                    key, value.type, value.value, doc_string=a.doc_string
                )


def _said(binding: dict[str, ir.Attr]) -> str:
    return ", ".join(f"{name}={binding[name].value!r}" for name in sorted(binding))


def _free_name(model: ir.Model, function: ir.Function) -> str:
    """``F__2``, or the next number no function of ``function``'s domain has."""
    taken = {f.name for f in model.functions.values() if f.domain == function.domain}
    k = 2
    while f"{function.name}__{k}" in taken:
        k += 1
    return f"{function.name}__{k}"
