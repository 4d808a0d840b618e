"""passes/lowering/live_bytes.py: the peak live bytes of new nodes, the figure prepare's bound
judges the scatter-free forms by. A hand-counted chain; a written form's estimate against the
sizes onnxruntime gives its values and the order its profiler shows it running the nodes."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest

from scatter_rewrite.graph import iter_nodes, value_names
from scatter_rewrite.passes import no_scatter as ns
from scatter_rewrite.passes.lowering import live_bytes as live
from scatter_rewrite.passes.lowering import scatter_rows
from scatter_rewrite.passes.lowering import segment_reduce as seg
from scatter_rewrite.passes.lowering.scatter_free import scatter_free
from scatter_rewrite.testing import scatter_model
from scatter_rewrite.type_inference import borrow_inferred_types

INT64, FLOAT, BOOL = ir.DataType.INT64, ir.DataType.FLOAT, ir.DataType.BOOL


def test_a_hand_counted_chain():
    """Range(1000) int64 (8000 bytes) -> Cast float (4000) -> Reshape [10, 100] (a view: free)
    -> Where(cond [10, 1], view, 0.0) (4000, and its two temporaries: [10, 100] and [10, 1]
    floats, 4000 + 40) -> Add with the view (4000). During the Cast the Range and its cast
    live: 12000; during the Where the cast (the view's buffer), the Where's output and its
    temporaries: 4000 + 4000 + 4040 = 12040; during the Add the view's buffer, the Where's output
    and the sum: 12000."""
    b = seg.Builder(seg.Names())
    cond = ir.Value(name="cond", type=ir.TensorType(BOOL), shape=ir.Shape([10, 1]))
    counted = b.op("Range", b.const(0), b.const(1000), b.const(1), dtype=INT64)
    cast = b.cast(counted, FLOAT, INT64)
    view = b.op("Reshape", cast, b.const([10, 100]), dtype=FLOAT)
    picked = b.op("Where", cond, view, b.const(0.0, np.float32), dtype=FLOAT)
    total = b.op("Add", picked, view, dtype=FLOAT)
    constants = 3 * 8 + 2 * 8 + 4  # 0, 1000, 1 and [10, 100] int64; 0.0 float
    peak = live.peak_live_bytes(b.nodes, [total])
    assert peak.bytes == 12040 + constants
    assert peak.node is picked.producer()
    assert [size for _, size in peak.alive] == [4000, 4000]  # the cast and the Where's output


def _written(model: onnx.ModelProto, form: str) -> tuple[ir.Model, list[ir.Node], ir.Value]:
    working = ir.serde.deserialize_model(model)
    borrow_inferred_types(working, sharpen=True)
    node, scope = next((n, s) for n, s in iter_nodes(working) if n.op_type.startswith("Scatter"))
    nodes, out = scatter_free(node, scope.opset, form, seg.Names(value_names(working)))
    ns.NoScatterPass._splice(node, scope, nodes, out)
    for each in working.graph:
        each.name = each.outputs[0].name  # (the profiler names nodes by name)
    return working, nodes, out


def _every_value_as_output(model: ir.Model) -> onnx.ModelProto:
    proto = ir.serde.serialize_model(model)
    shown = {o.name for o in proto.graph.output}
    for node in proto.graph.node:
        proto.graph.output.extend(onnx.ValueInfoProto(name=name) for name in node.output
                                  if name and name not in shown)
    return proto


def _feeds(rng, data_shape, updates_shape, rows):
    return {"data": rng.standard_normal(data_shape).astype(np.float32),
            "indices": rng.integers(0, rows, size=updates_shape[:1] + (1,)).astype(np.int64),
            "updates": rng.standard_normal(updates_shape).astype(np.float32)}


FORMS = [("max", "sort", (6, 5), (9, 5)), ("add", "mask", (6, 5), (9, 5)),
         ("none", "mask", (6, 5), (4, 5)), ("add", "sort", (7, 3), (20, 3))]


@pytest.mark.parametrize("reduction, form, data_shape, updates_shape", FORMS)
def test_the_estimate_is_the_liveness_sum_of_the_sizes_onnxruntime_gives(
        reduction, form, data_shape, updates_shape):
    """Every value the written form produces, fetched from onnxruntime: its bytes, alive from
    its node to its last reader (views share their input's buffer), Where's two temporaries
    while it runs: the peak of that sum is the estimate."""
    model = scatter_model("ScatterND", reduction=reduction, data_shape=data_shape,
                          indices_shape=(updates_shape[0], 1), updates_shape=updates_shape)
    working, nodes, out = _written(model, form)
    feeds = _feeds(np.random.default_rng(0), data_shape, updates_shape, data_shape[0])
    if reduction == "none":
        feeds["indices"] = np.arange(updates_shape[0]).reshape(-1, 1)
    proto = _every_value_as_output(working)
    values = dict(zip((o.name for o in proto.graph.output),
                      ort.InferenceSession(proto.SerializeToString()).run(None, feeds)))
    order = live.run_order(nodes)
    views = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}
    buffer = {}
    for node in order:
        for v in node.outputs:
            source = node.inputs[0] if node.op_type in views else None
            buffer[v.name] = buffer.get(source.name, source.name) if source is not None else v.name
    own = {v.name for node in order if node.op_type not in views for v in node.outputs}
    ends = {name: len(order) if name == out.name else
            max([i for i, n in enumerate(order) for v in n.inputs if v is not None
                 and buffer.get(v.name) == name] + [order.index(next(
                     n for n in order if any(o.name == name for o in n.outputs)))])
            for name in own}
    constants = sum(values[v.name].nbytes for n in nodes if n.op_type == "Constant"
                    for v in n.outputs)
    sums = []
    for i, node in enumerate(order):
        begun = {v.name for n in order[:i + 1] for v in n.outputs}
        held = sum(values[name].nbytes for name in own if name in begun and ends[name] >= i)
        if node.op_type == "Where":
            cond, x, y = (values.get(v.name, feeds.get(v.name)) for v in node.inputs)
            item = values[node.outputs[0].name].itemsize
            held += item * (np.broadcast(cond, x).size + np.broadcast(cond, y).size)
        if node.op_type == "TopK":
            held += 8 * values[node.inputs[0].name].size
        sums.append(held)
    assert live.peak_live_bytes(nodes, [out]).bytes == max(sums) + constants


@pytest.mark.parametrize("reduction, form, data_shape, updates_shape", FORMS[:2])
def test_the_run_order_is_the_one_onnxruntimes_profiler_shows(reduction, form, data_shape,
                                                               updates_shape, tmp_path):
    model = scatter_model("ScatterND", reduction=reduction, data_shape=data_shape,
                          indices_shape=(updates_shape[0], 1), updates_shape=updates_shape)
    working, nodes, _ = _written(model, form)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "profile")
    session = ort.InferenceSession(ir.serde.serialize_model(working).SerializeToString(),
                                   options, providers=["CPUExecutionProvider"])
    session.run(None, _feeds(np.random.default_rng(0), data_shape, updates_shape,
                             data_shape[0]))
    events = json.loads(open(session.end_profiling()).read())
    ran = [e["name"].removesuffix("_kernel_time") for e in sorted(events, key=lambda e: e["ts"])
           if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    assert ran == [n.name for n in live.run_order(nodes)]


def test_rows_reshaped_to_sizes_computed_from_the_shape_are_a_view_of_known_shape():
    """litert's rows where no side of the axis is static (no Flatten): Reshape to
    Concat(ReduceProd(Shape[:1]), ReduceProd(Shape[1:])) of a [6, 4, 5] value, counted as a view
    of shape [6, 20] (the shape's products followed), as the Flatten it replaces is."""
    b = seg.Builder(seg.Names())
    value = ir.Value(name="v", type=ir.TensorType(FLOAT), shape=ir.Shape(["N", "C", "D"]))
    rows = scatter_rows._flatten(b, value, 1, FLOAT, reshape_opset=18)
    assert "Flatten" not in {n.op_type for n in b.nodes}
    total = b.op("Add", rows, rows, dtype=FLOAT)
    known = live.static_shapes(b.nodes, {value: (6, 4, 5)})
    assert known[rows].shape == (6, 20)
    # the sum, and the Slices' bounds 0, 1 and 3 (int64 constants, held for the whole run)
    assert live.peak_live_bytes(b.nodes, [total], {value: (6, 4, 5)}).bytes == 6 * 20 * 4 + 3 * 8
