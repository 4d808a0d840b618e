"""Give named symbolic dimensions fixed sizes (``tensorrt --fix-dim E=200000``).

TensorRT 8.6 runs a reducing scatter only as the sorting network of :mod:`._network_reduce`,
which is built for a static number of updates; a model exported with a dynamic edge or batch
count gets it once that dimension is fixed. Like onnxruntime's ``make_dynamic_shape_fixed``, this
replaces the symbolic dimension ``NAME`` by ``SIZE`` wherever a value's shape declares it: the
main graph's inputs and outputs, and every value of every graph, subgraph and function. The model
then accepts inputs of that size only. Validation feeds both models inputs of that size
(:attr:`FixDimsPass.dim_sizes`).
"""

from __future__ import annotations

import onnx_ir as ir

from scatter_rewrite.errors import OptionError
from scatter_rewrite.graph import iter_scopes
from scatter_rewrite.passes.base import ScatterPass


class FixDimsPass(ScatterPass):
    name = "fix-dims"

    def __init__(self, dim_sizes: dict[str, int]):
        super().__init__()
        for name, size in dim_sizes.items():
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise OptionError(f"--fix-dim {name}={size}: the size must be a positive integer")
        self.dim_sizes = dict(dim_sizes)

    def run(self, model: ir.Model) -> None:
        declared = _input_dim_names(model)
        unknown = sorted(set(self.dim_sizes) - declared)
        if unknown:
            known = ", ".join(sorted(declared)) or "none: every input dimension is fixed or unnamed"
            raise OptionError(f"--fix-dim: no model input has a dimension named {', '.join(map(repr, unknown))}; "
                              f"the named input dimensions are: {known}")
        changed = 0
        for value in _all_values(model):
            shape = value.shape
            if shape is None or not any(_name(d) in self.dim_sizes for d in shape):
                continue
            value.shape = ir.Shape([self.dim_sizes.get(_name(d), d) if _name(d) else d for d in shape])
            changed += 1
        for name, size in sorted(self.dim_sizes.items()):
            self.note(f"dimension {name!r} fixed to {size}", modified=True)
        self.note(f"{changed} value shape(s) now static in the fixed dimension(s)")


def _name(dim) -> str | None:
    return dim.value if isinstance(dim, ir.SymbolicDim) and dim.value else None


def _input_dim_names(model: ir.Model) -> set[str]:
    return {_name(d) for v in model.graph.inputs if v.shape is not None for d in v.shape} - {None}


def _all_values(model: ir.Model):
    """Each value once: scope inputs and outputs, and every node output (subgraphs, functions)."""
    seen: set[int] = set()
    for scope in iter_scopes(model):
        body = scope.body
        for value in [*body.inputs, *body.outputs, *(o for node in body for o in node.outputs)]:
            if id(value) not in seen:
                seen.add(id(value))
                yield value
