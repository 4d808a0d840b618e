"""The targets a model is checked for (``check --target T``) and brought to (``prepare --target T``):
one :class:`Target` per runtime, registered where it is defined.

A target says which default-domain opsets it loads, which scatter forms it runs exactly (op,
reductions, data and index types, shape limits: :class:`ScatterSupport`), what it silently gets
wrong, where that is published (``sources``, also in docs/targets.md), the ONNX ops it runs as
its maker publishes them (``ops``: an :class:`OpTable`, most stored in ``op_tables/*.json``), and
how ``prepare`` brings a model there, as data (a verb's list, or a :class:`Preparation`, which
passes/lists.py builds into passes). One module per target family in this package
(``tensorrt.py``, ``opset.py``, ``no_scatter.py``, ``ort_cpu.py``, ...) calls
:func:`register_target` at import; :func:`get_target` and :func:`targets` import every module of
the package on first use, so that a new family is one new file.

This module imports neither onnx nor any pass: ``scatter-rewrite --help`` stays instant.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import pkgutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from scatter_rewrite.errors import OptionError
from scatter_rewrite.limits import DEFAULT_DOMAINS
from scatter_rewrite.said import param, said

__all__ = ["ALL_REDUCTIONS", "NO_PATH", "SCATTER_DATA_TYPES", "Judge", "OpTable", "Preparation", "ScatterSupport",
           "Target", "TARGETS",
           "TARGETS_HELP", "get_target", "op_table_file", "register_target", "target_names", "target_names_help",
           "targets"]

# Every target's name for --target's help, written out (the help must not import the target
# modules, which import onnx; tests/targets hold it to target_names()).
TARGETS_HELP = ("tensorrt-8.6, tensorrt-10, tensorrt-11, opset-N (N from 9 to the installed "
                "onnx's highest), litert, mnn, no-scatter, qnn, rknn, openvino, openvino-npu, "
                "ort-cpu, ort-web, tvm (docs/targets.md)")
# Runtimes asked for that no rewrite reaches, and why (measured; docs/targets.md): named, so that
# --target says why rather than "unknown".
NO_PATH = {
    "ncnn": "no scatter-rewrite form runs in ncnn: pnnx's ONNX import fails on scatter indices "
            "given as inputs (its shape inference runs made-up indices out of range), with constant "
            "indices it writes a ScatterElements layer ncnn cannot load, and ncnn has no comparison, "
            "select or TopK layer for a scatter-free form (ncnn 1.0.20261020, pnnx 20261020; "
            "docs/targets.md)",
}
ALL_REDUCTIONS = frozenset({"none", "add", "mul", "max", "min"})
# every data type the scatter schemas allow (ONNX's tensor types through opset 24, by name)
SCATTER_DATA_TYPES = frozenset({
    "FLOAT", "FLOAT16", "BFLOAT16", "DOUBLE", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16",
    "UINT32", "UINT64", "BOOL", "STRING", "COMPLEX64", "COMPLEX128"})


@dataclasses.dataclass(frozen=True)
class ScatterSupport:
    """One scatter form a target runs exactly: ``op`` with any of ``reductions``, data of one of
    ``data_types`` and indices of one of ``index_types`` (ONNX type names, ``ir.DataType`` member
    names; None: every type the op's schema allows), within ``limits`` (said in words)."""

    op: str  # "ScatterElements", "ScatterND", "TensorScatter" or "Scatter"
    reductions: frozenset[str] = ALL_REDUCTIONS  # TensorScatter/Scatter: {"none"}
    data_types: frozenset[str] | None = None
    index_types: frozenset[str] | None = None
    limits: str = ""

    def runs(self, op: str, reduction: str, data_type: str | None,
             index_type: str | None) -> bool:
        """Whether this form covers a node (a type not known, None, is taken as covered: the
        check then says what it could not tell elsewhere)."""
        return (op == self.op and reduction in self.reductions
                and (self.data_types is None or data_type is None
                     or data_type in self.data_types)
                and (self.index_types is None or index_type is None
                     or index_type in self.index_types))


# (domain, op type) -> the opset ranges of that domain in which the target runs it, (first, last);
# None: open. The default domain is "".
OpRanges = Mapping[tuple[str, str], tuple[tuple[int | None, int | None], ...]]
OP_TABLES = Path(__file__).parent / "op_tables"  # one JSON file per table, with its source


@dataclasses.dataclass(frozen=True)
class OpTable:
    """The ONNX ops a target runs, as its maker publishes them (``source`` at ``version``, read
    from ``url`` on ``retrieved``): ``prepare --target T`` refuses a model with a node outside it
    and ``check --target T`` says so (passes/op_support.py)."""

    target: str
    source: str
    url: str
    version: str
    retrieved: str
    ops: OpRanges
    any_domain: bool = False  # the runtime looks converters up by op type alone (TVM)
    limits: Mapping[str, str] = dataclasses.field(default_factory=dict)  # op -> its remark

    @property
    def cited(self) -> str:
        return f"{self.version}: {self.url}"

    def lacks(self, domain: str, op: str, opset: int | None) -> str | None:
        """Why a node (``op`` of ``domain`` at that domain's ``opset``) is outside the table, or
        None when the target publishes it as supported."""
        domain = "" if domain in DEFAULT_DOMAINS else domain
        ranges = self.ops.get((domain, op))
        if ranges is None and self.any_domain:
            ranges = next((r for (d, o), r in self.ops.items() if o == op), None)
        what = f"{domain}::{op}" if domain else op
        if ranges is None:
            return f"{what} is not in {self.target}'s published support ({self.cited})"
        if opset is None or any((lo is None or lo <= opset) and (hi is None or opset <= hi)
                                for lo, hi in ranges):
            return None
        return (f"{what} at opset {opset} is not in {self.target}'s published support "
                f"({self.cited})")


def op_table_file(name: str) -> Callable[[], OpTable]:
    """The table in ``op_tables/<name>.json``, read on first use: ``{"target", "source", "url",
    "version", "retrieved", "ops": {"Op" or "domain::Op": {"since": N, "until": M, "limit":
    words}}}``, ``"opsets": [first, last]`` bounding every default-domain op, ``"any_domain"``."""
    @functools.cache
    def load() -> OpTable:
        data = json.loads((OP_TABLES / f"{name}.json").read_text(encoding="utf-8"))
        first, last = data.get("opsets", [None, None])
        ops, limits = {}, {}
        for key, entry in data["ops"].items():
            domain, _, op = key.rpartition("::")
            since, until = entry.get("since"), entry.get("until")
            if not domain:
                since = max(since or 0, first or 0) or None
                until = min(x for x in (until, last) if x is not None) \
                    if until is not None or last is not None else None
            ops[(domain, op)] = ((since, until),)
            if "limit" in entry:
                limits[key] = entry["limit"]
        return OpTable(data["target"], data["source"], data["url"], data["version"],
                       data["retrieved"], ops, bool(data.get("any_domain")), limits)

    return load


# A target's own judgement of one node for ``check``, named as data: (kind, argument), e.g.
# ("tensorrt", "10"), ("opset", 13); check's scatter_rewrite.readiness.judges.judged_by gives each
# kind its function, so that this package imports nothing of check's.
Judge = tuple[str, Any]


@dataclasses.dataclass(frozen=True)
class Preparation:
    """How ``prepare --target T`` brings a model to a target no verb of its own reaches, as data
    (scatter_rewrite.passes.lists.target_passes builds the passes, in this order): the deprecated
    Scatter upgraded, the scatters rewritten, the float comparisons rewritten, the opset moved
    down; ``--max-intermediate-mib`` bounds the forms."""

    # which scatters are rewritten: "unsupported" (those ``runs`` does not cover or ``node_fault``
    # finds wrong: passes/no_scatter.py's TargetScattersPass), "all" (every one, in its cheapest
    # scatter-free form: NoScatterPass), "mask" (every one in the mask form alone, ``no_sort``
    # saying why the sort form is not written: passes/mask_forms.py)
    scatters: str = "unsupported"
    # when the deprecated Scatter is upgraded first: "any" (wherever there is one; functions whose
    # scatters read a function attribute specialized too), "rejected" (only where the checker
    # rejects it, at opset 11 or later)
    upgrade: str = "any"
    # each scatter's constant index chain evaluated into one constant just before the rewrite
    # (passes/constant_indices.py)
    constant_indices: bool = False
    # ShapeWriting's fields that differ from its defaults (passes/lowering/scatter_free.py)
    writing: Mapping[str, bool] = dataclasses.field(default_factory=dict)
    # float max/min always in the sort form (its values pass through no Where)
    sort_float_minmax: bool = False
    no_sort: str = ""  # scatters="mask": why the sort form is not written
    # the float Less/Equal/IsNaN the target computes wrongly rewritten (passes/float_comparisons.py),
    # a model below opset 12 moved there first for the reason said here; "": not rewritten
    float_comparisons: str = ""
    # the highest opset the target loads, and why (said after the opset): a model above it moved
    # down after the rewrite; None: no such move
    max_opset: tuple[int, str] | None = None


@dataclasses.dataclass(frozen=True)
class Target:
    """A runtime a model is checked for and prepared for."""

    name: str  # as --target spells it: "tensorrt-10", "opset-13", "no-scatter", "ort-cpu"
    family: str  # the module that registered it, "-" for "_": "tensorrt", "opset", "no-scatter", ...
    summary: str  # one line: what the target is
    # the default-domain opsets it loads, (lowest, highest); highest None: the installed onnx's
    opsets: tuple[int, int | None]
    # the scatter forms it runs exactly; () : none (a model for it has no scatter left)
    runs: tuple[ScatterSupport, ...]
    gets_wrong: tuple[str, ...] = ()  # what it silently computes wrongly (said in docs and check)
    sources: tuple[str, ...] = ()  # URLs or citations for the above
    # How prepare brings a model there when no verb of its own does (``verb`` None); neither:
    # nothing reaches the target (check says what blocks).
    preparation: Preparation | None = None
    # The ``prepare`` options this target takes (their names in verbs.py), handed to its passes;
    # another one given to ``prepare --target`` is a usage error.
    options: tuple[str, ...] = ()
    # The verb whose passes bring a model there, and its options: ("tensorrt", {"trt_version":
    # "10"}) for tensorrt-10, ("lower", {"opset": 13}) for opset-13; check names it as the fix.
    # None: the ``preparation``, named as ("prepare", {"target": name}).
    verb: tuple[str, Mapping[str, Any]] | None = None
    # check's per-node judgement when the target has one of its own (TensorRT's, opset-N's); None:
    # judged from ``runs`` and ``opsets`` (readiness.judges.judge_by_support).
    judge: Judge | None = None
    # The ONNX ops it runs, as published (read on first use); None: not judged op by op (TensorRT's
    # own tables, opset-N's schemas, no-scatter: any runtime).
    ops: Callable[[], OpTable] | None = None
    # Whether its runtime is onnxruntime (ort-cpu): a written model onnxruntime cannot run is then
    # UNRUNNABLE. For any other target the proof (onnx.reference with our kernels, or the target's
    # runtime) judges it, and onnxruntime's missing kernels are a note (pipeline.py).
    onnxruntime: bool = False
    # What it computes wrongly in a node its ``runs`` does not rule out (MNN's float Less, its
    # ScatterND of 2-tuples), which its passes rewrite: called with the node and its (first)
    # input's element type by name (None: unknown), the reason said, or None; ``check`` blocks
    # such a node with it. None: no such node.
    node_fault: Callable[[Any, str | None], str | None] | None = None
    # Its own runtime, where ``prepare`` runs the written model too (targets/runtimes.py: a
    # runtimes.Runtime, declared in the target's module); None: none that runs here.
    runner: Any = None

    @property
    def scatter_free(self) -> bool:
        """Whether the target runs no scatter at all (its models are prepared scatter-free)."""
        return not self.runs

    @property
    def fix_verb(self) -> tuple[str, Mapping[str, Any]] | None:
        """The verb and options that bring a model to this target, as ``check`` names them (None:
        no verb does)."""
        if self.verb is None and self.preparation is None:
            return None
        return self.verb or ("prepare", {"target": self.name})

    def supports(self, op: str, reduction: str | None, data_type: str | None,
                 index_type: str | None) -> bool:
        """Whether one of :attr:`runs` covers the node."""
        return any(form.runs(op, reduction or "none", data_type, index_type)
                   for form in self.runs)


# name -> Target, every target registered so far (filled by the family modules: use targets())
TARGETS: dict[str, Target] = {}
_loaded = False
_FIRST = ("tensorrt", "opset")  # the families listed first (the rest by module name)


def register_target(target: Target) -> Target:
    """Add ``target`` to :data:`TARGETS` (called by the module that defines it, at import); a
    name registered twice is a declaration bug."""
    if target.name in TARGETS:
        raise AssertionError(f"target {target.name!r} is registered twice")
    TARGETS[target.name] = target
    return target


def _load() -> None:
    """Import every module of this package (each registers its targets), once."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for name in pkgutil.iter_modules(__path__):
        if not name.name.startswith("_"):
            importlib.import_module(f"{__name__}.{name.name}")
    # The order shown, whichever module was imported first: the families in _FIRST, then the
    # others by module name (a family's name, "-" for "_"), each's targets in the order it
    # registered them.
    order = list(TARGETS)
    ordered = sorted(order, key=lambda n: (_family_rank(TARGETS[n].family.replace("-", "_")),
                                           order.index(n)))
    TARGETS.update({n: TARGETS.pop(n) for n in ordered})


def _family_rank(family: str) -> tuple:
    return (family not in _FIRST, _FIRST.index(family) if family in _FIRST else 0, family)


def targets() -> dict[str, Target]:
    """Every registered target, by name: the families in _FIRST, then the others by module
    name."""
    _load()
    return TARGETS


def target_names() -> list[str]:
    """Every target's name, as ``--target`` takes it."""
    return list(targets())


def get_target(name: str) -> Target:
    """The target ``name`` names (case and surrounding spaces ignored); OptionError naming the
    known ones otherwise."""
    found = targets().get(name.strip().lower())
    if found is None and name.strip().lower() in NO_PATH:
        raise OptionError(said(param("target", name), f": {NO_PATH[name.strip().lower()]}"))
    if found is None:
        raise OptionError(said(param("target", name), f" is unknown: pick {target_names_help()}"))
    return found


def target_names_help() -> str:
    """The known names, opset-N written once as a range."""
    names = target_names()
    opsets = [n for n in names if n.startswith("opset-")]
    rest = [n for n in names if not n.startswith("opset-")]
    if opsets:
        numbers = sorted(int(n.split("-")[1]) for n in opsets)
        rest.append(f"opset-N (N from {numbers[0]} to {numbers[-1]})")
    return ", ".join(rest)
