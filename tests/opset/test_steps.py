"""The declared version steps (scatter_rewrite.opset.steps: the table, and the steps the registered
forms declare) cover the installed onnx."""

from __future__ import annotations

import onnx
import onnx.defs
import onnx.helper as oh
import onnx.shape_inference
import onnx_ir as ir
import pytest

from scatter_rewrite.errors import ConversionError
from scatter_rewrite.graph import DEFAULT_DOMAINS
from scatter_rewrite.limits import OPSET_FLOOR
from scatter_rewrite.opset import convert_opset, steps
from scatter_rewrite.opset.fitting import allowed_types
from scatter_rewrite.opset.registry import down_forms, load_forms


def _default_domain_versions():
    return sorted(
        {
            (s.name, s.since_version)
            for s in onnx.defs.get_all_schemas_with_history()
            if s.domain in DEFAULT_DOMAINS and s.since_version > OPSET_FLOOR
        }
    )


def test_every_op_version_of_the_installed_onnx_is_declared():
    """A new onnx release's op versions fail here until their steps are reviewed and declared."""
    declared = steps.declared()
    missing = [f"{op}-{v}" for op, v in _default_domain_versions() if (op, v) not in declared]
    assert not missing, f"undeclared version steps: {', '.join(missing)}"


def test_the_table_declares_nothing_onnx_does_not_have():
    assert set(steps.declared()) <= set(_default_domain_versions())


@pytest.mark.parametrize("key", sorted(steps.declared()))
def test_each_step_is_complete(key):
    step = steps.step(*key)
    if step.kind == steps.Kind.REWRITE:  # a form registered for the step
        assert down_forms(*key), f"{key[0]}-{key[1]}: REWRITE without a registered form"
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


def test_every_registered_form_is_a_step_between_versions_the_op_has():
    """A form registered for a step down declares it (REWRITE, whatever the table says: the table
    writes no REWRITE); one up must be a step between two versions the op has."""
    assert steps.REWRITE not in steps.STEPS.values()
    for (op, since, to), forms in load_forms().items():
        spec = forms[0]
        if spec.up:
            assert since in steps.versions(op) and to in steps.versions(op), spec.name
            assert steps.previous(op, to) == since, spec.name
            continue
        assert since in steps.versions(op), f"{spec.name}: {op} has no version {since}"
        assert to == steps.previous(op, since), f"{spec.name}: {op}-{since} -> {op}-{to}"
        assert steps.step(op, since) == steps.REWRITE, spec.name


def test_forms_live_one_per_file_named_after_their_step():
    """Finding a form is a file-name lookup: each module of opset/forms/ is one form, named
    ``op_from_to`` (its lower-cased op or ops, then its step: ReduceSum-13 -> 11 shares the form
    of the other Reduce*-18 -> 13, reduce_18_13)."""
    by_module = {}
    for (op, since, to), forms in load_forms().items():
        for spec in forms:
            by_module.setdefault(spec.name, set()).add((op.lower(), since, to))
    for name, keys in by_module.items():
        named = {f"{op}_{since}" if to is None else f"{op}_{since}_{to}" for op, since, to in keys}
        assert any(name.endswith(n.split("_", 1)[1]) and n.split("_")[0].startswith(
            name.split("_")[0]) for n in named), f"{name} is not named after a step of {keys}"


# --- SAME and CONVERTER steps, each moved on a one-node model built from the schema -------------

_ATTRIBUTE_VALUES = {  # a valid value of each attribute type, for required attributes
    onnx.defs.OpSchema.AttrType.INT: 1, onnx.defs.OpSchema.AttrType.FLOAT: 1.0,
    onnx.defs.OpSchema.AttrType.STRING: "x", onnx.defs.OpSchema.AttrType.INTS: [1],
    onnx.defs.OpSchema.AttrType.FLOATS: [1.0], onnx.defs.OpSchema.AttrType.STRINGS: ["x"],
}
# The tensor type an input takes, in this order of preference, among those both versions allow.
_PREFERRED = ("tensor(float)", "tensor(int64)", "tensor(int32)", "tensor(int8)", "tensor(uint8)",
              "tensor(bool)")
_REQUIRED = onnx.defs.OpSchema.FormalParameterOption.Optional


def _input_types(newer, older) -> list[str] | None:
    """A tensor type for each required input that both schemas take there; None if one has none."""
    types = []
    for i, formal in enumerate(newer.inputs):
        if formal.option == _REQUIRED:
            break
        both = allowed_types(newer, formal) & allowed_types(
            older, older.inputs[min(i, len(older.inputs) - 1)])
        tensors = [t for t in _PREFERRED if t in both] or sorted(
            t for t in both if t.startswith("tensor("))
        if not tensors:
            return None
        types.append(tensors[0])
    return types


def _one_node_model(op: str, since: int) -> tuple[onnx.ModelProto | None, str]:
    """``op`` at version ``since`` alone, built from its schema: its required inputs of a type
    both versions of the step take, of the first rank (4 down to 0) ONNX's inference and checker
    accept, its required attributes at a valid value; (None, why) when it cannot be built so."""
    newer = onnx.defs.get_schema(op, since, "")
    older = onnx.defs.get_schema(op, steps.previous(op, since), "")
    types = _input_types(newer, older)
    if types is None:
        return None, "an input no tensor type of both versions fits (sequence, optional)"
    attributes = {}
    for name, formal in newer.attributes.items():
        if formal.required:
            if formal.type not in _ATTRIBUTE_VALUES:
                return None, "a required attribute of a kind not built generically (graph, tensor)"
            attributes[name] = _ATTRIBUTE_VALUES[formal.type]
    outputs = [f"out{i}" for i, f in enumerate(newer.outputs) if f.option != _REQUIRED] or ["out0"]
    node = oh.make_node(op, [f"in{i}" for i in range(len(types))], outputs, **attributes)
    for rank in (4, 3, 2, 1, 0):
        inputs = [oh.make_tensor_value_info(f"in{i}", onnx.TensorProto.DataType.Value(
            t[len("tensor("):-1].upper()), [f"d{k}" for k in range(rank)])
                  for i, t in enumerate(types)]
        graph = oh.make_graph([node], "g", inputs,
                              [oh.make_value_info(o, onnx.TypeProto()) for o in outputs])
        model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", since)])
        try:
            model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
            onnx.checker.check_model(model, full_check=True)
        except Exception:  # (onnx's own C++ errors: this rank or these values do not fit the op)
            continue
        return model, ""
    return None, "no rank and attribute values generic enough for ONNX's inference and checker"


_KEPT_STEPS = sorted(k for k, s in steps.STEPS.items() if s.kind in (steps.Kind.SAME,
                                                                      steps.Kind.CONVERTER))


def _moved_one_step(op: str, since: int):
    """(the model before, after its move to ``since - 1``, or the error) or (None, why not
    built)."""
    model, why = _one_node_model(op, since)
    if model is None:
        return None, why
    moved = ir.serde.deserialize_model(model)
    try:
        convert_opset(moved, since - 1)
    except ConversionError as e:
        return model, e
    return model, ir.serde.serialize_model(moved)



# Steps whose one-node model moves to no model, with why (the refusal names the step).
_REFUSED = {
    ("DequantizeLinear", 13): "onnx.version_converter has no adapter",  # (per-axis scales from 13)
    ("QuantizeLinear", 13): "onnx.version_converter has no adapter",
    # (no input: an empty optional, which OptionalHasElement-15 cannot be given)
    ("OptionalHasElement", 18): "No input to operator 'OptionalHasElement' is unallowed",
}
# How many steps cannot be built from the schema alone, by why: a change here is a change in onnx
# or in this builder, to review.
_NOT_BUILT = {
    "no rank and attribute values generic enough for ONNX's inference and checker": 34,
    "a required attribute of a kind not built generically (graph, tensor)": 20,
    "an input no tensor type of both versions fits (sequence, optional)": 1,
}


def test_the_steps_not_built_generically_are_counted():
    import collections

    counts = collections.Counter(_one_node_model(op, since)[1] for op, since in _KEPT_STEPS)
    del counts[""]
    assert dict(counts) == _NOT_BUILT
    assert len(_KEPT_STEPS) - sum(_NOT_BUILT.values()) - len(_REFUSED) == 191


@pytest.mark.parametrize("key", _KEPT_STEPS, ids=[f"{op}-{v}" for op, v in _KEPT_STEPS])
def test_a_same_or_converter_step_keeps_the_node(key):
    """One step down (to opset ``since - 1``): the node stays one node of its op, with its inputs,
    its outputs and its attributes, but those the older schema lacks (dropped at their default);
    a CONVERTER step may write an input the older op takes as an attribute (DFT-20's axis) as
    that attribute."""
    op, since = key
    before, after = _moved_one_step(op, since)
    if before is None:
        pytest.skip(f"not built from the schema: {after} (counted above)")
    if key in _REFUSED:
        assert isinstance(after, ConversionError) and _REFUSED[key] in str(after), after
        assert str(after).startswith(f"cannot convert {op} ")
        return
    assert not isinstance(after, Exception), after
    older = onnx.defs.get_schema(op, steps.previous(op, since), "")
    (old,), (new,) = before.graph.node, after.graph.node
    assert new.op_type == op
    assert list(new.input) == list(old.input) and list(new.output) == list(old.output)
    kept = {a.name: a for a in old.attribute if a.name in older.attributes}
    written = {a.name: a for a in new.attribute if a.name not in kept}
    newer = onnx.defs.get_schema(op, since, "")
    assert {a.name: a for a in new.attribute if a.name in kept} == kept
    as_attributes = {f.name for f in newer.inputs} - {f.name for f in older.inputs}
    assert set(written) <= as_attributes and (not written or steps.STEPS[key] == steps.CONVERTER)
    assert [o.type for o in after.graph.output] == [o.type for o in before.graph.output]
    assert [i.version for i in after.opset_import if i.domain in ("", "ai.onnx")] == [since - 1]
