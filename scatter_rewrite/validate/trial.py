"""Whether the original model runs in onnxruntime on candidate inputs, before validation uses them.

Only the run decides whether inputs fit a model (what its ops need that :mod:`.dims` cannot see: a
shape computed at run time, a chain shape inference gives up on). The session is made once, as a
user makes one (default options; one thread where a kernel may refuse in parallel:
:func:`.engines.may_refuse_in_parallel`), from the in-memory model without copying its weights:
the main graph's initializers reach onnxruntime as OrtValues over the model's own arrays
(memory-mapped external data stays mapped).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from scatter_rewrite.type_inference import serialize_without_weights
from scatter_rewrite.ort_folding import optimizers_left_out
from scatter_rewrite.validate.engines import first_line, may_refuse_in_parallel, may_trap

__all__ = ["OriginalSession", "runs_in_reference"]


class OriginalSession:
    """The original model in onnxruntime, or why it could not be made (``refused``): a model
    onnxruntime cannot load at all (a missing kernel, our custom-domain ops, a model the checker
    would refuse) is not a matter of input sizes, and is left to validation."""

    def __init__(self, model: ir.Model):
        self.refused: str | None = None
        self._session = None
        self._model = model
        self._whole: onnx.ModelProto | bool | None = None  # trapping_division's, made once
        try:
            self._session = _session(model)
        except Exception as e:  # onnxruntime's own exception types
            self.refused = first_line(e)

    def failure(self, inputs: dict[str, np.ndarray]) -> str | None:
        """Why the original fails on ``inputs`` (None: it runs, or could not be loaded); never run
        where its integer division would kill the process (:func:`.engines.trapping_division`)."""
        if self._session is None:
            return None
        import onnxruntime as ort

        trap = self._trapping_division(inputs)
        if trap is not None:
            return trap

        run_options = ort.RunOptions()
        run_options.log_severity_level = 4
        names = {i.name for i in self._session.get_inputs()}
        try:
            self._session.run(None, {k: v for k, v in inputs.items() if k in names}, run_options)
        except Exception as e:  # onnxruntime's own exception types
            return first_line(e)
        return None


    def _trapping_division(self, inputs: dict[str, np.ndarray]) -> str | None:
        from scatter_rewrite.validate.engines import trapping_division

        if self._whole is None:  # (decided once: False where no Div may trap)
            self._whole = may_trap(self._model) and serialize_without_weights(self._model)
            if self._whole:
                _inline_swapped(self._model, self._whole, whole=True)
        return trapping_division(self._whole, inputs) if self._whole else None


def runs_in_reference(model: ir.Model, inputs: dict[str, np.ndarray]) -> str | None:
    """Why ``onnx.reference`` (with our kernels) fails to run ``model`` on ``inputs``; None if it
    runs: a model onnxruntime loads but cannot run (float16 ScatterElements add lacks a kernel at
    run time) is validated there, as :mod:`.proof` does. Copies the weights: only when onnxruntime
    never ran the original."""
    from scatter_rewrite.validate.engines import run_reference

    proto = serialize_without_weights(model)
    _inline_swapped(model, proto, whole=True)
    try:
        run_reference(proto, inputs)
    except Exception as e:  # whatever the evaluator raises
        return first_line(e)
    return None


def _session(model: ir.Model):
    import onnxruntime as ort

    proto = serialize_without_weights(model)
    arrays = _inline_swapped(model, proto)
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.enable_cpu_mem_arena = False
    if may_refuse_in_parallel(model):  # (or a refusal kills the process)
        options.intra_op_num_threads = 1
    options.add_session_config_entry("session.disable_prepacking", "1")  # (copies the weights)
    if arrays:
        names = list(arrays)
        options.add_external_initializers(
            names, [ort.OrtValue.ortvalue_from_numpy(arrays[n]) for n in names])
    if proto.ByteSize() >= 2**31 - 1:
        raise ValueError("the model's graph alone is over 2 GiB")
    return ort.InferenceSession(proto.SerializeToString(), options,
                                providers=["CPUExecutionProvider"],
                                disabled_optimizers=optimizers_left_out(proto, []))


def _inline_swapped(model: ir.Model, proto: onnx.ModelProto,
                    whole: bool = False) -> dict[str, np.ndarray]:
    """The main graph's initializers that ``proto`` references outside itself, as arrays for
    onnxruntime (external data, memory-mapped; big in-memory ones, as they are), or put back inline
    too where ``whole``. The big Constants and subgraph initializers ``serialize_without_weights``
    swapped out are put back inline."""
    arrays = {}
    for i, init in enumerate(proto.graph.initializer):
        if init.data_location == onnx.TensorProto.EXTERNAL:
            tensor = model.graph.initializers[init.name].const_value
            if whole:
                proto.graph.initializer[i].CopyFrom(_serialized(tensor, init.name))
            else:
                arrays[init.name] = np.ascontiguousarray(tensor.numpy())
    graphs = [(proto.graph, model.graph)]
    while graphs:
        g, body = graphs.pop()
        nodes = {n.name: n for n in body if n.name}
        by_output = {n.outputs[0].name: n for n in body if n.outputs}
        for i, init in enumerate(g.initializer):
            if init.data_location == onnx.TensorProto.EXTERNAL and g is not proto.graph:
                g.initializer[i].CopyFrom(_serialized(body.initializers[init.name].const_value,
                                                      init.name))
        for node in g.node:
            ir_node = nodes.get(node.name) if node.name else by_output.get(node.output[0])
            for a in node.attribute:
                if (node.op_type == "Constant" and a.name == "value"
                        and a.t.data_location == onnx.TensorProto.EXTERNAL):
                    a.t.CopyFrom(_serialized(ir_node.attributes["value"].value, a.t.name))
                subgraphs = [a.g] if a.HasField("g") else list(a.graphs)
                ir_subgraphs = ir_node.attributes[a.name].value if subgraphs else None
                ir_subgraphs = ([ir_subgraphs] if isinstance(ir_subgraphs, ir.Graph)
                                else list(ir_subgraphs or []))
                graphs.extend(zip(subgraphs, ir_subgraphs))
    return arrays


def _serialized(tensor: ir.TensorProtocol, name: str) -> onnx.TensorProto:
    return ir.serde.serialize_tensor(ir.Tensor(tensor.numpy(), dtype=tensor.dtype, name=name))
