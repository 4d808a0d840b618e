"""The declared table of version steps (scatter_rewrite.opset.steps) covers the installed onnx."""

from __future__ import annotations

import onnx.defs
import pytest

from scatter_rewrite.opset import steps
from scatter_rewrite.opset.registry import down_form, load_forms


def _default_domain_versions():
    return sorted(
        {
            (s.name, s.since_version)
            for s in onnx.defs.get_all_schemas_with_history()
            if s.domain in ("", "ai.onnx") and s.since_version > steps.MIN_TARGET
        }
    )


def test_every_op_version_of_the_installed_onnx_is_declared():
    """A new onnx release's op versions fail here until their steps are reviewed and declared."""
    missing = [f"{op}-{v}" for op, v in _default_domain_versions() if (op, v) not in steps.STEPS]
    assert not missing, f"undeclared version steps: {', '.join(missing)}"


def test_the_table_declares_nothing_onnx_does_not_have():
    assert set(steps.STEPS) <= set(_default_domain_versions())


@pytest.mark.parametrize("key", sorted(steps.STEPS))
def test_each_step_is_complete(key):
    step = steps.STEPS[key]
    if step.kind == steps.Kind.REWRITE:  # a form registered for the step
        assert down_form(*key) is not None, f"{key[0]}-{key[1]}: REWRITE without a registered form"
    if step.kind == steps.Kind.NO_FORM:
        assert step.reason
    if step.kind == steps.Kind.SAME_IF:
        assert step.when or step.values
    if step.kind == steps.Kind.BODY:  # the op has a function body at or below that version
        schema = onnx.defs.get_schema(key[0], key[1], "")
        assert schema.has_function or schema.has_context_dependent_function


def test_steps_between_lists_the_versions_a_move_crosses():
    assert [v for v, _ in steps.steps_between("Reshape", 25, 13)] == [25, 24, 23, 21, 19, 14]
    assert steps.steps_between("Reshape", 13, 11) == [(13, steps.SAME)]
    assert steps.steps_between("Trilu", 14, 13) == [(14, steps.REWRITE)]


def test_every_registered_form_is_a_step_the_table_takes():
    """A form registered for a step down that the table does not declare REWRITE would never run,
    and one up must be a step between two versions the op has."""
    undeclared = []
    for (op, since, to), spec in load_forms().items():
        if spec.up:
            assert since in steps.versions(op) and to in steps.versions(op), spec.name
            assert steps.previous(op, to) == since, spec.name
            continue
        assert to == steps.previous(op, since), f"{spec.name}: {op}-{since} -> {op}-{to}"
        if steps.STEPS.get((op, since)) != steps.REWRITE:
            undeclared.append(f"{spec.name}: {op}-{since}")
    assert not undeclared, f"forms whose step the table does not declare REWRITE: {undeclared}"


def test_forms_live_one_per_file_named_after_their_step():
    """Finding a form is a file-name lookup: each module of opset/forms/ is one form, named
    ``op_from_to`` (its lower-cased op or ops, then its step: ReduceSum-13 -> 11 shares the form
    of the other Reduce*-18 -> 13, reduce_18_13)."""
    by_module = {}
    for (op, since, to), spec in load_forms().items():
        by_module.setdefault(spec.name, set()).add((op.lower(), since, to))
    for name, keys in by_module.items():
        named = {f"{op}_{since}" if to is None else f"{op}_{since}_{to}" for op, since, to in keys}
        assert any(name.endswith(n.split("_", 1)[1]) and n.split("_")[0].startswith(
            name.split("_")[0]) for n in named), f"{name} is not named after a step of {keys}"
