"""Where onnxruntime's constant folding would kill the process, and the optimizers a session of
such a model leaves out.

onnxruntime 1.32's ConstantFolding inlines an If whose condition is constant; on such Ifs nested
in a Loop body it crashes creating the session (SIGSEGV), with the graph optimizations a session
gets by default: dynamo's export of ``torch.nn.EmbeddingBag(mode="mean")`` (the mode as constant
Ifs three deep in the Loop over the bags; tests/data/torch/make_embedding_bag.py) does. A session
of a model with a constant-condition If in any subgraph is made without ConstantFolding, which
changes no value it computes (documented in docs/validation.md).
"""

from __future__ import annotations

import onnx

__all__ = ["folding_may_crash", "optimizers_left_out"]


def optimizers_left_out(proto: onnx.ModelProto, always: list[str]) -> list[str]:
    """``always`` (the optimizers every validation session leaves out), and ConstantFolding where
    :func:`folding_may_crash`."""
    return [*always, "ConstantFolding"] if folding_may_crash(proto) else list(always)


def folding_may_crash(proto: onnx.ModelProto) -> bool:
    """Whether ``proto`` (graph, subgraphs, local functions) has an If of constant condition inside
    a subgraph (an If, Loop or Scan body)."""
    bodies = [proto.graph, *proto.functions]
    return any(_constant_if_within(g) for body in bodies for g in _subgraphs(body))


def _subgraphs(graph) -> list[onnx.GraphProto]:
    found = []
    for node in graph.node:
        for a in node.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                      a.graphs if a.type == onnx.AttributeProto.GRAPHS else []):
                found += [g, *_subgraphs(g)]
    return found


def _constant_if_within(graph: onnx.GraphProto) -> bool:
    producers = {out: node for node in graph.node for out in node.output}
    seen: dict[str, bool] = {}

    def constant(name: str, depth: int = 0) -> bool:
        if name not in seen:
            node = producers.get(name)
            seen[name] = (node is not None and depth < 32 and node.op_type != "If"
                          and not any(a.type in (onnx.AttributeProto.GRAPH,
                                                 onnx.AttributeProto.GRAPHS)
                                      for a in node.attribute)
                          and (node.op_type == "Constant"
                               or (len(node.input) > 0
                                   and all(i and constant(i, depth + 1) for i in node.input))))
        return seen[name]

    return any(node.op_type == "If" and node.input and constant(node.input[0])
               for node in graph.node)
