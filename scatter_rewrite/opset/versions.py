"""The versions of a default-domain op's schema, from onnx.defs: what the steps table
(:mod:`scatter_rewrite.opset.steps`) and the forms' registry (:mod:`scatter_rewrite.opset.registry`)
both key their steps by."""

from __future__ import annotations

import functools

import onnx.defs

from scatter_rewrite.limits import DEFAULT_DOMAINS

__all__ = ["previous", "versions"]


@functools.lru_cache(maxsize=None)
def versions(op_type: str) -> tuple[int, ...]:
    """The since-versions of ``op_type``'s default-domain schemas, oldest first."""
    return tuple(
        sorted(
            s.since_version
            for s in onnx.defs.get_all_schemas_with_history()
            if s.name == op_type and s.domain in DEFAULT_DOMAINS
        )
    )


def previous(op_type: str, since: int) -> int | None:
    """The version of ``op_type`` before ``since``; None when ``since`` is its first."""
    older = [v for v in versions(op_type) if v < since]
    return older[-1] if older else None
