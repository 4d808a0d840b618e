"""Each verb's passes, as a list in the order they run (verbs.py declares which verb takes which,
with its options; a target's pass list, targets/, is built from these too). No pass runs another
inside itself: what ``lower`` needs first (the deprecated ``Scatter`` upgraded, functions
specialized) is in ``lower``'s list, and so is every opset move. Each function imports its passes
when called: importing this module imports none (the command line starts without them)."""

from __future__ import annotations

from scatter_rewrite.limits import DEFAULT_LOWER_OPSET, DEFAULT_TRT_VERSION, OPSET_FLOOR

__all__ = ["fold_passes", "lower_passes", "lowering_steps", "repair_passes", "target_passes",
           "tensorrt_passes", "to_scatternd_passes", "upgrade_passes"]


def upgrade_passes(opset: int | None = None) -> list:
    from scatter_rewrite.passes.upgrade import upgrade_steps

    return [upgrade_steps(opset)]


def fold_passes(size_limit: int | None = None) -> list:
    from scatter_rewrite.passes.compose import Steps
    from scatter_rewrite.passes.fold import FoldPass
    from scatter_rewrite.passes.specialize import SpecializeCallsPass

    return [Steps(SpecializeCallsPass(wants_in=FoldPass.foldable_in),
                  FoldPass(size_limit=size_limit), name=FoldPass.name)]


def lower_passes(opset: int = DEFAULT_LOWER_OPSET, mode: str = "standard") -> list:
    from scatter_rewrite.passes.compose import OnlyIf, Steps
    from scatter_rewrite.passes.lower import LowerPass
    from scatter_rewrite.passes.specialize import SpecializeCallsPass
    from scatter_rewrite.passes.upgrade import has_scatter, upgrade_steps

    lower = LowerPass(opset=opset, mode=mode)
    return [Steps(OnlyIf(has_scatter, upgrade_steps()), SpecializeCallsPass(lower.lowers),
                  *lowering_steps(lower), name=lower.name)]


def lowering_steps(lower) -> list:
    """``lower`` (a LowerPass) after what it needs, in order: the Ifs with a constant condition
    near a node to lower inlined, then the move to its opset, which keeps the nodes to lower as
    they are (the lowering builds them at the target, on the types inferred before the move)."""
    from scatter_rewrite.passes.compose import OnlyIf
    from scatter_rewrite.passes.inline_if import InlineConstantIfsPass
    from scatter_rewrite.passes.move_opset import MoveOpsetPass

    return [OnlyIf(lower.has_work, InlineConstantIfsPass(lower.inlining_helps)),
            MoveOpsetPass(lower.opset, keep=lower.lowers), lower]


def to_scatternd_passes() -> list:
    from scatter_rewrite.passes.compose import Steps
    from scatter_rewrite.passes.specialize import SpecializeCallsPass
    from scatter_rewrite.passes.to_scatternd import ToScatterNDPass

    return [Steps(SpecializeCallsPass(ToScatterNDPass.converts), ToScatterNDPass(),
                  name=ToScatterNDPass.name)]


def tensorrt_passes(trt_version: str = DEFAULT_TRT_VERSION, fix_dims: dict[str, int] | None = None) -> list:
    """The whole TensorRT preparation for ``trt_version`` ("8.6", "10" or "11"), in order
    (passes/tensorrt.py and the modules it names say what each does); first, when given,
    ``fix_dims`` (symbolic dimension name -> size: passes/fix_dims.py)."""
    from scatter_rewrite.passes.compose import OnlyIf, Steps
    from scatter_rewrite.passes.fix_dims import FixDimsPass
    from scatter_rewrite.passes.fold import FoldPass
    from scatter_rewrite.passes.lower import LowerPass
    from scatter_rewrite.passes.specialize import SpecializeCallsPass
    from scatter_rewrite.passes.tensorrt import TensorRTPass
    from scatter_rewrite.passes.tensorrt_flow import check_trt_version
    from scatter_rewrite.passes.tensorrt_opset_cap import CapOpsetPass, cap_reason
    from scatter_rewrite.targets.tensorrt.parser import PARSER_MAX_OPSET, PARSES_TENSORSCATTER
    from scatter_rewrite.passes.tensorrt_tensorscatter import (
        LowerTensorScatterPass, has_tensor_scatter,
    )
    from scatter_rewrite.passes.move_opset import MoveOpsetPass
    from scatter_rewrite.passes.upgrade import upgrade_steps

    version = check_trt_version(trt_version)
    tensor_scatter = LowerTensorScatterPass(version)
    if version not in PARSES_TENSORSCATTER:  # (lowered to ScatterElements at the parser's opset)
        lower = LowerPass(opset=PARSER_MAX_OPSET[version], mode="standard")
        lower_steps = Steps(*lowering_steps(lower), name=lower.name)
        tensor_scatter = Steps(tensor_scatter, OnlyIf(has_tensor_scatter, lower_steps),
                               name=tensor_scatter.name)
    return [
        *([FixDimsPass(fix_dims)] if fix_dims else []),
        SpecializeCallsPass(),
        upgrade_steps(),
        FoldPass(),
        tensor_scatter,
        TensorRTPass(version),
        Steps(CapOpsetPass(version), MoveOpsetPass(PARSER_MAX_OPSET[version], only_down=True,
                                                   why=cap_reason(version)),
              name=CapOpsetPass.name),
    ]


def repair_passes(assume: str | None = None) -> list:
    from scatter_rewrite.passes.compose import OnlyIf, Steps
    from scatter_rewrite.passes.repair import RepairPass
    from scatter_rewrite.passes.upgrade import upgrade_steps

    repair = RepairPass(assume)
    # (a site below opset 11: Scatter -> ScatterElements, the model at opset 11, as `upgrade` does)
    return [Steps(OnlyIf(repair.needs_upgrade, upgrade_steps(OPSET_FLOOR)), repair,
                  name=repair.name)]


def target_passes(target: str, **options) -> list:
    """What ``prepare --target T`` runs, built from the target's declaration
    (scatter_rewrite.targets): its verb's list with the verb's options, or its
    :class:`~scatter_rewrite.targets.Preparation`; ``options`` are the ``prepare`` options the
    target takes (checked by the caller)."""
    from scatter_rewrite.targets import get_target

    found = get_target(target)
    if found.verb is not None:
        verb, arguments = found.verb
        return _VERB_LISTS[verb](**arguments, **options)
    return _prepared(found, found.preparation, **options)


def _prepared(target, plan, max_intermediate_mib: int | None = None) -> list:
    from scatter_rewrite.passes.compose import OnlyIf, Steps
    from scatter_rewrite.passes.lowering.scatter_free import ShapeWriting
    from scatter_rewrite.passes.move_opset import MoveOpsetPass
    from scatter_rewrite.passes.no_scatter import (
        DEFAULT_MAX_INTERMEDIATE_MIB, NoScatterPass, TargetScattersPass, is_scatter,
    )
    from scatter_rewrite.passes.specialize import SpecializeCallsPass
    from scatter_rewrite.passes.upgrade import has_rejected_scatter, has_scatter, upgrade_steps

    mib = max_intermediate_mib or DEFAULT_MAX_INTERMEDIATE_MIB
    writing = ShapeWriting(**plan.writing)
    if plan.scatters == "all":
        scatters = NoScatterPass(mib, writing)
    elif plan.scatters == "mask":
        from scatter_rewrite.passes.mask_forms import MaskFormPass

        scatters = MaskFormPass(target.name, plan.no_sort, mib)
    else:
        scatters = TargetScattersPass(target.name, mib, writing, plan.sort_float_minmax)
    before = []
    if plan.constant_indices:
        from scatter_rewrite.passes.constant_indices import ConstantIndicesPass

        before.append(ConstantIndicesPass())
    if plan.upgrade == "rejected":
        first = [OnlyIf(has_rejected_scatter, upgrade_steps())]
    else:  # (functions whose scatters read a function attribute specialized too)
        first = [OnlyIf(has_scatter, upgrade_steps()), SpecializeCallsPass(is_scatter)]
    passes = [Steps(*first, *before, scatters, name=scatters.name)]
    if plan.float_comparisons:
        from scatter_rewrite.passes.float_comparisons import (
            ORDERED_SINCE, FloatComparisonsPass, needs_opset,
        )

        passes += [OnlyIf(needs_opset, MoveOpsetPass(ORDERED_SINCE, why=plan.float_comparisons)),
                   FloatComparisonsPass(target.name)]
    if plan.max_opset is not None:
        opset, why = plan.max_opset
        passes.append(MoveOpsetPass(opset, only_down=True, why=f" ({why})"))
    return passes


# the verbs a target's ``verb`` may name, by name (verbs.py declares every verb)
_VERB_LISTS = {"lower": lower_passes, "tensorrt": tensorrt_passes}
