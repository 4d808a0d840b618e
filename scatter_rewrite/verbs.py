"""The rewriting verbs, declared once: name, output suffix, options (type, default, range, help)
and how the options become passes.

The command line (:mod:`scatter_rewrite.cli`), the Python API (:mod:`scatter_rewrite.api`) and the
report (:class:`scatter_rewrite.pipeline.Outcome`) are built from :data:`VERBS`. This module imports
neither onnx nor any pass at import time, so that ``scatter-rewrite --help`` stays instant.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

from scatter_rewrite.errors import OptionError, OptionTypeError

__all__ = ["Option", "Verb", "VERBS", "OPSET_FLOOR", "highest_opset", "opset_range", "TRT_VERSIONS",
           "python_call"]

# The lowest opset each verb can target: ScatterElements (what they write) starts at 11.
OPSET_FLOOR = 11
# TensorRT versions ``tensorrt`` prepares for (see passes/tensorrt.py and docs/tensorrt-11.md).
TRT_VERSIONS = ("8.6", "10", "11")
LOWER_MODES = ("standard", "custom", "tensorrt-plugin")


def highest_opset() -> int:
    """The highest default-domain opset the installed onnx defines (every verb's ceiling)."""
    import onnx

    return onnx.defs.onnx_opset_version()


def opset_range(floor: int = OPSET_FLOOR) -> str:
    return f"{floor} to {highest_opset()}"


@dataclasses.dataclass(frozen=True)
class Option:
    """One option of a verb: the API's keyword argument, the CLI's ``--flag``, the report's key."""

    name: str  # the keyword argument and the report's key
    kind: type  # int, str or dict (dict: the CLI's repeatable NAME=SIZE)
    default: Any
    help: str
    metavar: str
    flag: str = ""  # the CLI's; default: --name with dashes
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    opset: bool = False  # an opset: minimum..the installed onnx's highest

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def check(self, verb: str, value: Any, cli: bool) -> Any:
        """``value`` checked against the declaration (and normalized: a TensorRT version given as a
        number becomes its text). The error names the flag for the CLI, the argument for the API."""
        if value is None and self.default is None:
            return None
        where = f"{self.cli_flag} {value}" if cli else f"{verb}(): {self.name}={value!r}"
        if self.choices:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                value = str(value)
            if not isinstance(value, str):
                raise OptionTypeError(f"{verb}(): {self.name} must be a str, one of "
                                      f"{', '.join(self.choices)}; got {type(value).__name__}")
            if value not in self.choices:
                said = (f"{self.cli_flag} {value!r} is unknown for {verb}" if cli
                        else f"{verb}(): {self.name}={value!r} is unknown")
                raise OptionError(f"{said}: pick one of {', '.join(self.choices)}")
            return value
        if self.kind is str:
            if not isinstance(value, str):
                raise OptionTypeError(f"{verb}(): {self.name} must be a str, got "
                                      f"{type(value).__name__} {value!r}")
            return value
        if self.kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionTypeError(f"{verb}(): {self.name} must be an int, got "
                                      f"{type(value).__name__} {value!r}")
            low = self.minimum
            high = highest_opset() if self.opset else None
            if (low is not None and value < low) or (high is not None and value > high):
                span = f"{low} to {high}" if high is not None else f">= {low}"
                why = " (the highest this onnx defines)" if high is not None else ""
                raise OptionError(f"{where} is out of range for {verb}: pick {span}{why}" if cli
                                  else f"{where} is out of range: pick {span}{why}")
            return value
        if self.kind is dict:
            if not isinstance(value, Mapping):
                raise OptionTypeError(f"{verb}(): {self.name} must be a dict of str to int, got "
                                      f"{type(value).__name__}")
            for name, size in value.items():
                positive = isinstance(size, int) and not isinstance(size, bool) and size >= 1
                if not isinstance(name, str) or not positive:
                    shown = (f"{self.cli_flag} {name}={size}" if cli
                             else f"{verb}(): {self.name}[{name!r}]={size!r}")
                    raise OptionError(f"{shown}: expected a dimension name and a positive int")
            return dict(value)
        raise AssertionError(f"option kind {self.kind} is not handled")  # a declaration bug


@dataclasses.dataclass(frozen=True)
class Verb:
    """A rewriting command: its output-name suffix, its options and how they become passes."""

    name: str
    suffix: str  # model.<suffix>.onnx
    make_passes: Callable[..., list]
    # The same rewrite done on the parsed file when the model allows (None: it does not), taken
    # when nothing needs the IR afterwards (no validation); called with the verb's options.
    on_proto: Callable[..., Any] | None = None
    options: tuple[Option, ...] = ()
    summary: str = ""  # the CLI command's help line
    function: str = ""  # the API's function, when not named as the verb

    @property
    def command(self) -> str:
        """The CLI command's name."""
        return self.name.replace("_", "-")

    def bind(self, values: Mapping[str, Any], cli: bool = False) -> dict[str, Any]:
        """The verb's options: ``values`` checked (see :meth:`Option.check`), defaults filled in.
        A name the verb does not declare is a bug of the caller's (the API's signatures are
        explicit)."""
        caller = self.name if cli else self.function or self.name
        unknown = set(values) - {o.name for o in self.options}
        if unknown:
            raise TypeError(f"{caller}() got unexpected option(s) {', '.join(sorted(unknown))}")
        return {o.name: o.check(caller, values.get(o.name, o.default), cli) for o in self.options}


def _upgrade_passes(opset: int | None = None) -> list:
    from scatter_rewrite.passes.upgrade import UpgradePass

    return [UpgradePass(opset)]


def _upgrade_proto(proto, opset: int | None = None):
    from scatter_rewrite.passes.upgrade import upgrade_proto

    return upgrade_proto(proto, opset)


def _fold_passes(size_limit: int | None = None) -> list:
    from scatter_rewrite.passes.fold import FoldPass

    return [FoldPass(size_limit=size_limit)]


def _lower_passes(opset: int = 13, mode: str = "standard") -> list:
    from scatter_rewrite.passes.lower import LowerPass

    return [LowerPass(opset=opset, mode=mode)]


def _to_scatternd_passes() -> list:
    from scatter_rewrite.passes.to_scatternd import ToScatterNDPass

    return [ToScatterNDPass()]


def _tensorrt_passes(trt_version: str = "10", fix_dims: dict[str, int] | None = None) -> list:
    from scatter_rewrite.passes.tensorrt import tensorrt_passes

    return tensorrt_passes(trt_version, fix_dims)


def _prepare_passes(target: str | None = None, max_intermediate_mib: int | None = None,
                    fix_dims: dict[str, int] | None = None) -> list:
    """The passes of the target (scatter_rewrite.targets) named: an option it does not take, or
    no target, is a usage error."""
    from scatter_rewrite.targets import get_target

    if target is None:
        raise OptionError("prepare needs --target TARGET (target= in the Python API): "
                          "scatter-rewrite check --help lists them")
    found = get_target(target)
    if found.passes is None:
        raise OptionError(f"no verb brings a model to {found.name}: scatter-rewrite check "
                          f"--target {found.name} says what blocks it")
    given = {"max_intermediate_mib": max_intermediate_mib, "fix_dims": fix_dims}
    given = {name: value for name, value in given.items() if value is not None}
    for name in given:
        if name not in found.options:
            flag = next(o.cli_flag for o in VERBS["prepare"].options if o.name == name)
            raise OptionError(f"{flag} does not apply to --target {found.name}")
    return found.passes(**given)


def _repair_passes(assume: str | None = None) -> list:
    from scatter_rewrite.passes.repair import RepairPass

    return [RepairPass(assume)]


_OPSET_HELP = "Target default-domain opset, 11 to the highest the installed onnx defines"

VERBS: dict[str, Verb] = {
    "upgrade": Verb(
        "upgrade", "upgraded", _upgrade_passes, on_proto=_upgrade_proto,
        options=(
            Option("opset", int, None,
                   f"{_OPSET_HELP}. Default: the model's own if >= 11, else 11.", "N",
                   minimum=OPSET_FLOOR, opset=True),
        ),
        summary="Upgrade deprecated Scatter to ScatterElements (main graph, subgraphs, "
                "functions)."),
    "fold": Verb(
        "fold", "folded", _fold_passes,
        options=(
            Option("size_limit", int, None, "Leave scatters whose result exceeds BYTES unfolded.",
                   "BYTES", minimum=0),
        ),
        summary="Fold scatters whose inputs are all constant into initializers (our NumPy "
                "evaluator)."),
    "lower": Verb(
        "lower", "lowered", _lower_passes,
        options=(
            Option("opset", int, 13, f"{_OPSET_HELP} (the model moves to it, up or down).", "N",
                   minimum=OPSET_FLOOR, opset=True),
            Option("mode", str, "standard",
                   "standard: exact standard ops; custom: ai.onnx.contrib nodes "
                   "(docs/custom-ops.md); tensorrt-plugin: the form TensorRT's ScatterElements "
                   "plugin takes.",
                   "MODE", choices=LOWER_MODES),
        ),
        summary="Lower scatter reductions and TensorScatter that an older opset lacks."),
    "to_scatternd": Verb(
        "to_scatternd", "scatternd", _to_scatternd_passes,
        summary="Rewrite every ScatterElements as an exactly equivalent ScatterND."),
    "tensorrt": Verb(
        "tensorrt", "tensorrt", _tensorrt_passes,
        options=(
            Option("trt_version", str, "10",
                   f"The TensorRT version to prepare for: {', '.join(TRT_VERSIONS)}.", "VERSION",
                   choices=TRT_VERSIONS),
            Option("fix_dims", dict, None,
                   "Fix the symbolic input dimension NAME to SIZE first (repeatable): on TensorRT "
                   "8.6 a reduction with a dynamic number of updates is lowered only once that "
                   "number is static.", "NAME=SIZE", flag="--fix-dim"),
        ),
        summary="Prepare every scatter for TensorRT: upgrade, fold, lower, ScatterElements -> "
                "ScatterND.",
        function="prepare_for_tensorrt"),
    "repair": Verb(
        "repair", "repaired", _repair_passes,
        options=(
            Option("assume", str, None,
                   "scatter-reduce-mean: assume a ScatterElements without reduction named "
                   "node_scatter_reduce (dynamo's name) is scatter_reduce(reduce='mean', "
                   "include_self=True), and compute that mean.", "WHAT",
                   choices=("scatter-reduce-mean",)),
        ),
        summary="Make TorchScript's scatter_add/index_add/index_put_ exports sum repeated "
                "indices."),
    "prepare": Verb(
        "prepare", "prepared", _prepare_passes,
        options=(
            Option("target", str, None,
                   "The runtime to prepare for: tensorrt-8.6/10/11, opset-N, no-scatter, qnn, "
                   "rknn, ort-cpu, ... (docs/targets.md).", "TARGET"),
            Option("max_intermediate_mib", int, None,
                   "Scatter-free forms: refuse a node whose cheapest exact form has an "
                   "intermediate above MIB (default 256).", "MIB", minimum=1),
            Option("fix_dims", dict, None,
                   "tensorrt-X targets: fix the symbolic input dimension NAME to SIZE first "
                   "(repeatable), as tensorrt --fix-dim.", "NAME=SIZE", flag="--fix-dim"),
        ),
        summary="Prepare a model for a target runtime (tensorrt-X, opset-N, no-scatter, qnn, "
                "rknn, ort-cpu, ...): rewrite what it cannot run, exactly."),
}


# A command of the form readiness writes as a fix: ``scatter-rewrite VERB [--flag VALUE]...``.
_COMMAND = re.compile(r"scatter-rewrite ([a-z-]+)((?: --[a-z-]+ [^\s;()]+)*)")


def python_call(fix: str | None) -> str | None:
    """``fix`` with each ``scatter-rewrite VERB --flag VALUE...`` command in it written as the
    Python call that does the same (``scatter_rewrite.lower(model, opset=13)``); None for None."""
    if fix is None:
        return None
    commands = {v.command: v for v in VERBS.values()}

    def call(match: re.Match) -> str:
        verb = commands.get(match.group(1))
        if verb is None:
            return match.group(0)
        flags = {o.cli_flag: o for o in verb.options}
        words = match.group(2).split()
        arguments, sizes = ["model"], []
        for flag, value in zip(words[::2], words[1::2]):
            option = flags.get(flag)
            if option is None:
                return match.group(0)
            if option.kind is dict:  # NAME=SIZE, repeatable: one dict
                name, _, size = value.partition("=")
                sizes.append(f"{name!r}: {size}")
            else:
                arguments.append(f"{option.name}={value if option.kind is int else repr(value)}")
        if sizes:
            option = next(o for o in verb.options if o.kind is dict)
            arguments.append(f"{option.name}={{{', '.join(sizes)}}}")
        return f"scatter_rewrite.{verb.function or verb.name}({', '.join(arguments)})"

    return _COMMAND.sub(call, fix)
