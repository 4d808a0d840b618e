"""The rewriting verbs, declared once: name, output suffix, options (type, default, range, help)
and how the options become passes.

The command line (:mod:`scatter_rewrite.cli`), the Python API (:mod:`scatter_rewrite.api`) and the
report (:class:`scatter_rewrite.pipeline.Outcome`) are built from :data:`VERBS`. This module imports
neither onnx nor any pass at import time, so that ``scatter-rewrite --help`` stays instant.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from scatter_rewrite.errors import OptionError, OptionTypeError
from scatter_rewrite.said import (
    BARE, Call, Param, Said, call, message_of as message, param, python_value, said,
)
from scatter_rewrite.targets import TARGETS_HELP
from scatter_rewrite.limits import (
    DEFAULT_LOWER_OPSET, DEFAULT_TRT_VERSION, OPSET_FLOOR, TRT_VERSIONS, check_choice, check_opset, check_size, highest_opset, opset_range,
)
# (each verb's pass list, declared below by its function; re-exported: scatter_rewrite.verbs.X)
from scatter_rewrite.passes.lists import (
    fold_passes, lower_passes, repair_passes, tensorrt_passes, to_scatternd_passes,
    upgrade_passes,
)

__all__ = ["Option", "Verb", "VERBS", "OPSET_FLOOR", "highest_opset", "opset_range", "TRT_VERSIONS",
           "SHARED_FLAGS", "command", "spoken", "target_of", "fold_passes", "lower_passes", "prepare_passes", "repair_passes",
           "tensorrt_passes",
           "to_scatternd_passes", "upgrade_passes"]

@dataclasses.dataclass(frozen=True)
class Option:
    """One option of a verb: the API's keyword argument, the CLI's ``--flag``, the report's key."""

    name: str  # the keyword argument and the report's key
    kind: type  # int, str, bool or dict (dict: the CLI's repeatable NAME=SIZE; bool: --x/--no-x)
    default: Any
    help: str
    metavar: str
    flag: str = ""  # the CLI's; default: --name with dashes
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    opset: bool = False  # an opset: minimum..the installed onnx's highest
    parameter: str = ""  # the passes' parameter, where they name it otherwise (fix_dims: dim_sizes)

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def check(self, verb: str, value: Any, cli: bool) -> Any:
        """``value`` checked against the declaration (and normalized: a TensorRT version given as a
        number becomes its text). The error names the flag for the CLI, the argument for the API."""
        if value is None and self.default is None:
            return None
        if self.choices:
            numbers = all(c.replace(".", "", 1).isdigit() for c in self.choices)
            if numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
                value = str(value)  # (a version: 10 for "10"; a word's choices take no number)
            if not isinstance(value, str):
                raise OptionTypeError(f"{verb}(): {self.name} must be a str, one of "
                                      f"{', '.join(self.choices)}; got {type(value).__name__}")
            return self._checked(verb, cli, check_choice, value, self.choices, self.name)
        if self.kind is bool:
            if not isinstance(value, bool):
                raise OptionTypeError(f"{verb}(): {self.name} must be a bool, got "
                                      f"{type(value).__name__} {value!r}")
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
            if self.opset:
                return self._checked(verb, cli, check_opset, value, self.name, self.minimum)
            return self._checked(verb, cli, check_size, value, self.name, self.minimum)
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

    def _checked(self, verb: str, cli: bool, check: Callable[..., Any], *arguments: Any) -> Any:
        """``check(*arguments)`` (scatter_rewrite.limits), its error said as the caller says it:
        ``lower(): opset=9 is out of range...``, or ``--opset 9 is out of range for lower...``."""
        try:
            return check(*arguments)
        except OptionError as e:
            raise OptionError(self.cli_message(e, verb) if cli else said(f"{verb}(): ", message(e)),
                              parameter=self.name) from e

    def cli_message(self, error: OptionError, verb: str) -> str:
        """``error``, whose message starts by naming a parameter of this option's (``opset=9 is
        out of range: ...``), as the command line says it: ``--opset 9 is out of range for lower:
        ...``; another message as :func:`spoken` says it."""
        text = message(error)
        first = text.parts[0] if isinstance(text, Said) and text.parts else None
        if not isinstance(first, Param) or first.name not in (self.name, self.parameter):
            return spoken(text, {})
        rest = spoken(Said(*text.parts[1:]), {})
        if first.value is not BARE and rest.startswith(" is ") and ":" in rest:
            rest = rest.replace(":", f" for {verb}:", 1)
        if first.value is BARE:
            return f"{self.cli_flag}{rest}"
        value = str(first.value) if self.kind is int else python_value(first.value)
        return f"{self.cli_flag} {value}{rest}"


@dataclasses.dataclass(frozen=True)
class Verb:
    """A rewriting command: its output-name suffix, its options and how they become passes."""

    name: str
    suffix: str  # model.<suffix>.onnx
    make_passes: Callable[..., list]
    options: tuple[Option, ...] = ()
    summary: str = ""  # the CLI command's help line
    function: str = ""  # the API's function, when not named as the verb

    @property
    def command(self) -> str:
        """The CLI command's name."""
        return self.name.replace("_", "-")

    def cli_message(self, error: Exception) -> str:
        """``error`` as the command line says it: an OptionError about one of the verb's options
        as the option says it (``opset=9 is out of range`` -> ``--opset 9 is out of range for
        lower``), and each parameter its message names as its flag, each call as its command
        (:func:`spoken`: ``validate=False`` -> ``--no-validate``, ``inputs=`` -> ``--inputs``)."""
        first = getattr(error, "parameter", None)
        option = next((o for o in self.options if first in (o.name, o.parameter)), None)
        if option is not None:
            return spoken(option.cli_message(error, self.name), self.flags)
        return spoken(message(error), self.flags)

    def cli_text(self, text: str) -> str:
        """A note or skip reason of this verb's report (a :class:`~scatter_rewrite.said.Said`
        where it names parameters or the API's functions: ``inputs=``,
        ``scatter_rewrite.upgrade(model, opset=16)``) as the command line says it: ``--inputs``,
        ``scatter-rewrite upgrade --opset 16``."""
        return spoken(text, self.flags)

    @property
    def flags(self) -> dict[str, str]:
        """The flag of each Python parameter the verb takes (its options', by their name and their
        passes' name, and :data:`SHARED_FLAGS`)."""
        return SHARED_FLAGS | {name: o.cli_flag for o in self.options
                               for name in (o.name, o.parameter) if name}

    def bind(self, values: Mapping[str, Any], cli: bool = False) -> dict[str, Any]:
        """The verb's options: ``values`` checked (see :meth:`Option.check`), defaults filled in.
        A name the verb does not declare is a bug of the caller's (the API's signatures are
        explicit)."""
        caller = self.name if cli else self.function or self.name
        unknown = set(values) - {o.name for o in self.options}
        if unknown:
            raise TypeError(f"{caller}() got unexpected option(s) {', '.join(sorted(unknown))}")
        return {o.name: o.check(caller, values.get(o.name, o.default), cli) for o in self.options}


# The parameters every rewriting verb takes besides its own options, and their flags: declared
# here once, for what a message names (Verb.cli_message, Verb.cli_text) and for the command line's
# options (cli/options.py, whose SHARED lists them all, those the API lacks too: --report, -q, -v).
SHARED_FLAGS = {"inputs": "--inputs", "validate": "--validate", "rtol": "--rtol", "atol": "--atol",
                "in_place": "--in-place", "output": "-o"}


def spoken(text: Any, flags: Mapping[str, str]) -> str:
    """``text`` as the command line says it: in a :class:`~scatter_rewrite.said.Said`, each
    parameter with a flag in ``flags`` (parameter -> flag) as that flag (``validate=False`` ->
    ``--no-validate``, ``fix_dims={'N': 8}`` -> ``--fix-dim N=8``, ``inputs=`` -> ``--inputs``) and
    each call of a verb's function as the command that does the same
    (``scatter_rewrite.lower('m.onnx', opset=13)`` -> ``scatter-rewrite lower m.onnx --opset 13``;
    ``check``'s too); other text as it is."""
    if not isinstance(text, Said):
        return text if text is None else str(text)
    return text.spoken(lambda p: _flag_said(p, flags[p.name]) if p.name in flags else p.python,
                       _command_said)


def _flag_said(part: Param, flag: str) -> str:
    value = part.value
    if part.text is not None:  # (the value as the message writes it, a path in quotes)
        return f"{flag} {part.text.strip(chr(39))}"
    if value is BARE:
        return flag
    if isinstance(value, bool):
        return flag if value else "--no-" + flag.lstrip("-")
    if isinstance(value, Mapping):
        return " ".join(f"{flag} {k}={v}" for k, v in value.items()) or flag
    return f"{flag} {value}"


def _command_said(part: Call) -> str:
    """A call of a verb's function (or check) as its command; another call as Python writes it."""
    if part.function == "check":  # (not a rewriting verb: its one option)
        name, flags = "check", {"target": "--target"}
    else:
        verb = next((v for v in VERBS.values() if (v.function or v.name) == part.function), None)
        if verb is None or any(n not in {o.name for o in verb.options} for n, _ in part.arguments):
            return part.python
        name, flags = verb.command, {o.name: o.cli_flag for o in verb.options}
    words = [f"scatter-rewrite {name}", *([part.path] if part.path is not None else [])]
    words += [_flag_said(Param(n, v), flags[n]) for n, v in part.arguments]
    return " ".join(words)


def command(verb: str, **options: Any) -> Said:
    """The call of ``verb``'s function with ``options`` (a target's fix, as check names it): the
    command line says it as the command (``scatter-rewrite lower --opset 13``)."""
    return call(VERBS[verb].function or verb, **options)


# Each verb's passes, declared here in the order they run; no pass runs another inside itself.
# A named Steps is reported as one pass (passes/compose.py).

def prepare_passes(target: str | None = None, max_intermediate_mib: int | None = None,
                    fix_dims: dict[str, int] | None = None, runtime_proof: bool = True,
                    runtime_python: str | None = None) -> list:
    """The passes of the target (scatter_rewrite.targets) named: an option it does not take, or
    no target, is a usage error. ``runtime_proof``/``runtime_python`` are the proof's (the
    pipeline reads them), checked here: a python for a target without a runtime of its own, or
    one that is not an executable file, is a usage error."""
    from scatter_rewrite.targets import get_target

    if target is None:
        from scatter_rewrite.targets import target_names_help

        raise OptionError(said("prepare needs ", param("target", text="TARGET"),
                               f": pick {target_names_help()}"))
    found = get_target(target)
    if found.fix_verb is None:
        raise OptionError(said(f"no verb brings a model to {found.name}: ",
                               call("check", target=found.name), " says what blocks it"))
    given = {"max_intermediate_mib": max_intermediate_mib, "fix_dims": fix_dims}
    given = {name: value for name, value in given.items() if value is not None}
    for name in given:
        if name not in found.options:
            raise OptionError(said(param(name), " does not apply to ",
                                   param("target", found.name)))
    if runtime_python is not None:
        _check_runtime_python(found, runtime_python, runtime_proof)
    from scatter_rewrite.passes.lists import target_passes

    if found.ops is None:
        return target_passes(found.name, **given)
    from scatter_rewrite.passes.op_support import OpSupportPass

    # (last: what the target's passes wrote is held to its published op table too)
    return [*target_passes(found.name, **given), OpSupportPass(found.name)]


def _check_runtime_python(target: Any, python: str, runtime_proof: bool) -> None:
    import os

    if target.runner is None:
        raise OptionError(said(param("runtime_python"), " does not apply to ",
                               param("target", target.name), ": no runtime of its own runs here"))
    if not runtime_proof:
        raise OptionError(said(param("runtime_python"), " is for the proof in the runtime, which ",
                               param("runtime_proof", False), " turns off"))
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise OptionError(said(param("runtime_python", python), " is not an executable file: "
                               f"name the python of a venv that has {target.runner.name}"))


_OPSET_HELP = "Target default-domain opset, 11 to the highest the installed onnx defines"

VERBS: dict[str, Verb] = {
    "upgrade": Verb(
        "upgrade", "upgraded", upgrade_passes,
        options=(
            Option("opset", int, None,
                   f"{_OPSET_HELP}. Default: the model's own if >= {OPSET_FLOOR}, else "
                   f"{OPSET_FLOOR}.", "N",
                   minimum=OPSET_FLOOR, opset=True),
        ),
        summary="Upgrade deprecated Scatter to ScatterElements (main graph, subgraphs, "
                "functions)."),
    "fold": Verb(
        "fold", "folded", fold_passes,
        options=(
            Option("size_limit", int, None, "Leave scatters whose result exceeds BYTES unfolded.",
                   "BYTES", minimum=0),
        ),
        summary="Fold scatters whose inputs are all constant into initializers (our NumPy "
                "evaluator)."),
    "lower": Verb(
        "lower", "lowered", lower_passes,
        options=(
            Option("opset", int, DEFAULT_LOWER_OPSET,
                   f"{_OPSET_HELP} (the model moves to it, up or down).", "N",
                   minimum=OPSET_FLOOR, opset=True),
            Option("mode", str, "standard",
                   "standard: exact standard ops; custom: ai.onnx.contrib nodes "
                   "(docs/custom-ops.md); tensorrt-plugin: the form TensorRT's ScatterElements "
                   "plugin takes.",
                   "MODE", choices=("standard", "custom", "tensorrt-plugin")),
        ),
        summary="Lower scatter reductions and TensorScatter that an older opset lacks."),
    "to_scatternd": Verb(
        "to_scatternd", "scatternd", to_scatternd_passes,
        summary="Rewrite every ScatterElements as an exactly equivalent ScatterND."),
    "tensorrt": Verb(
        "tensorrt", "tensorrt", tensorrt_passes,
        options=(
            Option("trt_version", str, DEFAULT_TRT_VERSION,
                   f"The TensorRT version to prepare for: {', '.join(TRT_VERSIONS)}.", "VERSION",
                   choices=TRT_VERSIONS),
            Option("fix_dims", dict, None,
                   "Fix the symbolic input dimension NAME to SIZE first (repeatable): on TensorRT "
                   "8.6 a reduction with a dynamic number of updates is lowered only once that "
                   "number is static.", "NAME=SIZE", flag="--fix-dim", parameter="dim_sizes"),
        ),
        summary="Prepare every scatter for TensorRT: upgrade, fold, lower, ScatterElements -> "
                "ScatterND.",
        function="prepare_for_tensorrt"),
    "repair": Verb(
        "repair", "repaired", repair_passes,
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
        "prepare", "prepared", prepare_passes,
        options=(
            Option("target", str, None,
                   f"The runtime to prepare for: {TARGETS_HELP}.", "TARGET"),
            Option("max_intermediate_mib", int, None,
                   "Scatter-free forms: refuse a node whose cheapest exact form holds more than "
                   "MIB at once (default 256).", "MIB", minimum=1),
            Option("fix_dims", dict, None,
                   "tensorrt-X targets: fix the symbolic input dimension NAME to SIZE first "
                   "(repeatable), as tensorrt --fix-dim.", "NAME=SIZE", flag="--fix-dim"),
            Option("runtime_proof", bool, True,
                   "openvino, tvm, mnn, litert: run the prepared model in the target's runtime "
                   "too, where it runs here, and write nothing if it differs "
                   "(docs/validation.md).", ""),
            Option("runtime_python", str, None,
                   "The python of a venv that has the target's runtime, for the runtime proof "
                   "(default: this python, where the runtime is importable; litert: always a "
                   "venv of its own).", "PATH"),
        ),
        summary="Prepare a model for a target runtime (see --target): rewrite what it cannot "
                "run, exactly."),
}


def target_of(verb: str | None, options: Mapping[str, Any]) -> str | None:
    """The target (scatter_rewrite.targets) a run of ``verb`` with ``options`` writes its model
    for: ``prepare``'s target, ``tensorrt-X`` for ``tensorrt``, ``opset-N`` for ``lower`` (its
    standard ops, for any runtime at that opset); None for the verbs written for no runtime in
    particular (``upgrade``, ``fold``, ``to_scatternd``, ``repair``; ``lower``'s custom modes),
    whose models onnxruntime runs."""
    if verb == "prepare":
        return options.get("target")
    if verb == "tensorrt":
        return f"tensorrt-{options.get('trt_version') or '10'}"
    if verb == "lower" and options.get("mode", "standard") == "standard":
        return f"opset-{options.get('opset') or 13}"
    return None
