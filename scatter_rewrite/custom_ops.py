"""onnxruntime implementations of the custom-domain nodes `lower --mode custom` emits.

``register(session_options)`` is called for every onnxruntime session validation opens, so a
model holding our custom-domain nodes runs in onnxruntime exactly like a standard one.
"""

from __future__ import annotations


def register(session_options) -> None:
    """Make our custom-domain ops known to an onnxruntime session (none are defined yet)."""
    return None
