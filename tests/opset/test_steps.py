"""The declared table of version steps (scatter_rewrite.opset.steps) covers the installed onnx."""

from __future__ import annotations

import onnx.defs
import pytest

from scatter_rewrite.opset import steps
from scatter_rewrite.opset.move import REWRITES


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
    if step.kind == steps.Kind.REWRITE:
        assert step.rewrite in REWRITES
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
    assert steps.steps_between("Trilu", 14, 13)[0][1].rewrite == "trilu"
