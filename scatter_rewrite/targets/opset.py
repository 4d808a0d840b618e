"""A runtime frozen at default-domain opset N (``opset-N``, N from 9, Scatter's first opset, to
the highest the installed onnx defines): ``prepare --target opset-N`` is ``lower --opset N``
(:mod:`scatter_rewrite.passes.lower`; from 11, the lowest it reaches), check's judgement
readiness's opset one. Source: the ONNX operator schemas (onnx/docs/Changelog.md): ScatterElements
and ScatterND from 11, their add/mul from 16 and max/min from 18, TensorScatter from 24, Scatter
deprecated from 11."""

from __future__ import annotations

__all__ = ["FLOOR"]

from scatter_rewrite.limits import OPSET_FLOOR
from scatter_rewrite.targets import ALL_REDUCTIONS, ScatterSupport, Target, register_target

FLOOR = 9  # Scatter's first opset: the lowest at which there is anything to say
_SOURCES = ("https://github.com/onnx/onnx/blob/main/docs/Changelog.md",)


def _reductions(n: int) -> frozenset[str]:
    from scatter_rewrite.spec import REDUCTIONS_SINCE

    return frozenset(r for r in ALL_REDUCTIONS if REDUCTIONS_SINCE[r] <= n)


def _runs(n: int) -> tuple[ScatterSupport, ...]:
    if n < OPSET_FLOOR:
        return (ScatterSupport("Scatter", frozenset({"none"})),)
    forms = (ScatterSupport("ScatterElements", _reductions(n)),
             ScatterSupport("ScatterND", _reductions(n)))
    return forms + ((ScatterSupport("TensorScatter", frozenset({"none"})),) if n >= 24 else ())


def _register_all() -> None:
    from scatter_rewrite.limits import highest_opset

    for n in range(FLOOR, highest_opset() + 1):
        register_target(Target(
            name=f"opset-{n}", family="opset", summary=f"a runtime at default-domain opset {n}",
            opsets=(1, n), runs=_runs(n), sources=_SOURCES,
            verb=("lower", {"opset": n}) if n >= OPSET_FLOOR else None, judge=("opset", n)))


_register_all()
