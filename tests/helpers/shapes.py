"""Hypothesis strategies for a scatter's shapes, drawn by the lowering tests' differential runs
(tests/passes/test_lower.py, test_tensorrt_lowering.py): dims of 1 to 4, every rank up to
``max_rank``.
"""

from __future__ import annotations

from hypothesis import strategies as st


@st.composite
def elements_shapes(draw, max_rank: int, max_along_axis: int):
    """(data shape, indices shape, axis) of a ScatterElements: every axis (negative too), indices no
    larger than data off the axis and up to ``max_along_axis`` along it (more updates than rows:
    duplicates)."""
    data_shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=max_rank))
    axis = draw(st.integers(-len(data_shape), len(data_shape) - 1))
    idx_shape = [draw(st.integers(1, max_along_axis if d == axis % len(data_shape) else size))
                 for d, size in enumerate(data_shape)]
    return data_shape, idx_shape, axis


@st.composite
def nd_shapes(draw, max_rank: int):
    """(data shape, indices shape, updates shape) of a ScatterND: index tuples of 1 to rank, one or
    two batch dims of 1 to 6."""
    data_shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=max_rank))
    k = draw(st.integers(1, len(data_shape)))
    batch = draw(st.lists(st.integers(1, 6), min_size=1, max_size=2))
    return data_shape, [*batch, k], batch + data_shape[k:]
