"""How passes are put together: the verbs' pass lists (:mod:`scatter_rewrite.verbs`) are built from
these, and no pass runs another inside itself.

* :class:`Steps`: passes run in order, ``onnx_ir``'s ``Sequential``, keeping each pass's result
  (:attr:`Steps.results`) and our errors as raised (``Sequential`` wraps every error in
  ``PassError``, and a user's bad model is not our pass failing). A named ``Steps`` is reported as
  one pass: the steps a verb takes for one rewrite (``lower``: the deprecated Scatter upgraded,
  functions specialized, then the lowering) are one line of its report.
* :class:`OnlyIf`: a pass run only when the model calls for it (LowerPass after the TensorRT
  flow's preparation, only for a model holding a TensorScatter).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import onnx
import onnx_ir as ir

from scatter_rewrite.passes.base import ScatterPassResult

__all__ = ["OnlyIf", "Steps", "merged", "pass_name"]

logger = logging.getLogger("scatter_rewrite")


def pass_name(pass_: ir.passes.PassBase) -> str:
    return getattr(pass_, "name", None) or type(pass_).__name__


class Steps(ir.passes.Sequential):
    """``passes`` run in order on the model, in place. ``name``: the one pass the report shows for
    them (their results merged: :func:`merged`); None for a verb's whole list, whose results the
    pipeline reports one by one (:attr:`results`). ``progress``: called with each pass's name
    before it runs. ``call_on_proto``: the same steps done on the parsed file, where the model
    allows it (None from it: the IR path; :func:`scatter_rewrite.pipeline.parsed_form`)."""

    def __init__(self, *passes: ir.passes.PassBase, name: str | None = None,
                 progress: Callable[[str], None] | None = None,
                 call_on_proto: Callable[[onnx.ModelProto], ScatterPassResult | None] | None = None):
        super().__init__(*passes)
        self.name = name
        self.progress = progress
        self.call_on_proto = call_on_proto
        self.results: list[ir.passes.PassResult] = []

    def leaves(self) -> list[ir.passes.PassBase]:
        """Every pass this runs, the steps of nested ones in their place."""
        found = []
        for pass_ in self.passes:
            inner = pass_.pass_ if isinstance(pass_, OnlyIf) else pass_
            found += inner.leaves() if isinstance(inner, Steps) else [inner]
        return found

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.results = []
        for pass_ in self.passes:
            if self.progress is not None:
                self.progress(pass_name(pass_))
            logger.debug("running %s", pass_name(pass_))
            result = pass_(model)
            if result.model is not model:
                raise RuntimeError(f"pass {pass_} is not in place")  # ours all are: a bug if not
            self.results.append(result)
        return merged(model, self.name or "steps", self.results)


class OnlyIf(ir.passes.InPlacePass):
    """``pass_`` when ``condition(model)``; else nothing (an unmodified result of its name)."""

    def __init__(self, condition: Callable[[ir.Model], bool], pass_: ir.passes.PassBase):
        super().__init__()
        self.condition, self.pass_ = condition, pass_
        self.name = pass_name(pass_)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if self.condition(model):
            return self.pass_(model)
        return ScatterPassResult(model, False, name=self.name)


def merged(model: ir.Model, name: str, results: list[ir.passes.PassResult]) -> ScatterPassResult:
    """One result for ``results``, in the order they came: what each rewrote, declined and noted."""
    into = ScatterPassResult(model, False, name=name)
    for result in results:
        into.modified |= result.modified
        if isinstance(result, ScatterPassResult):
            into.rewritten += result.rewritten
            into.skipped += result.skipped
            into.notes += result.notes
            into.float_rounding += result.float_rounding
            into.repairs |= result.repairs
    return into
