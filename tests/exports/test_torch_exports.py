"""Models PyTorch 2.x exports (TorchScript ``dynamo=False`` at several opsets, and ``dynamo=True``),
static and dynamic, through every verb: each result runs in onnxruntime and equals torch eager where the
export itself does, on the export's inputs and on fresh ones of another size; ``check`` on the
``tensorrt`` result. Exported in the test (small modules, a few seconds); skipped without torch (CI
installs only ``.[test]``).
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest

torch = pytest.importorskip("torch")

import scatter_rewrite as sr  # noqa: E402
from scatter_rewrite.readiness import check  # noqa: E402
from scatter_rewrite.errors import ScatterRewriteError  # noqa: E402
from scatter_rewrite.model_io import load_model  # noqa: E402
from tests.helpers.runs import ort_run

ort.set_default_logger_severity(3)
N, F, E = 10, 4, 16


class ScatterSrc(torch.nn.Module):
    def forward(self, x, idx, src):
        return torch.scatter(x, 1, idx, src)


class ScatterValue(torch.nn.Module):
    def forward(self, x, idx):
        y = x.clone()
        y.scatter_(1, idx, 2.5)
        return y


class ScatterAdd(torch.nn.Module):
    def forward(self, x, idx, src):
        return torch.scatter_add(x, 1, idx, src)


class ScatterReduce(torch.nn.Module):
    def __init__(self, reduce: str, include_self: bool):
        super().__init__()
        self.reduce, self.include_self = reduce, include_self

    def forward(self, x, idx, src):
        return torch.scatter_reduce(x, 1, idx, src, reduce=self.reduce, include_self=self.include_self)


class IndexPutAcc(torch.nn.Module):
    def forward(self, x, i, v):
        y = x.clone()
        y.index_put_((i,), v, accumulate=True)
        return y


class IndexCopy(torch.nn.Module):
    def forward(self, x, i, v):
        return torch.index_copy(x, 0, i, v)


class SetItem(torch.nn.Module):
    def forward(self, x, i, v):
        y = x.clone()
        y[i] = v
        return y


class MaskedScatter(torch.nn.Module):
    def forward(self, x, m, s):
        return x.masked_scatter(m, s)


class Gnn(torch.nn.Module):
    """Message passing: gather the source nodes' features, sum and max them into the destinations."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(F, F)

    def forward(self, x, edge_index):
        src, dst = edge_index[0], edge_index[1]
        msg = torch.relu(self.lin(x).index_select(0, src))
        d = dst.unsqueeze(1).expand(-1, F)
        return (torch.zeros_like(x).scatter_add(0, d, msg)
                + torch.zeros_like(x).scatter_reduce(0, d, msg, "amax", include_self=True))


def _elements(n: int, unique: bool):
    x = torch.randn(n, F)
    idx = (torch.stack([torch.randperm(F)[:3] for _ in range(n)]) if unique else torch.randint(0, F, (n, 3)))
    return x, idx, torch.randn(n, 3)


def _row_scatter_args(n: int, unique: bool):
    k = 5
    i = torch.randperm(n)[:k] if unique else torch.randint(0, n, (k,))
    return torch.randn(n, F), i, torch.randn(k, F)


def _graph(n: int):
    return torch.randn(n, F), torch.randint(0, n, (2, E + n))


# name: (module, inputs(n), input names, dynamic axes for TorchScript, dynamo dynamic_shapes maker)
CASES = {
    "scatter": (ScatterSrc, lambda n: _elements(n, True), ["x", "idx", "src"]),
    "scatter_value": (ScatterValue, lambda n: _elements(n, True)[:2], ["x", "idx"]),
    "scatter_add": (ScatterAdd, lambda n: _elements(n, False), ["x", "idx", "src"]),
    "reduce_amax": (lambda: ScatterReduce("amax", True), lambda n: _elements(n, False), ["x", "idx", "src"]),
    "reduce_prod_noself": (lambda: ScatterReduce("prod", False), lambda n: _elements(n, False), ["x", "idx", "src"]),
    "index_put_acc": (IndexPutAcc, lambda n: _row_scatter_args(n, False), ["x", "i", "v"]),
    "index_copy": (IndexCopy, lambda n: _row_scatter_args(n, True), ["x", "i", "v"]),
    "setitem": (SetItem, lambda n: _row_scatter_args(n, True), ["x", "i", "v"]),
    "masked_scatter": (MaskedScatter, lambda n: (torch.randn(n, F), torch.rand(n, F) > 0.5, torch.randn(n, F)),
                       ["x", "m", "s"]),
    "gnn": (Gnn, _graph, ["x", "edge_index"]),
}
ROW_CASES = {"index_put_acc", "index_copy", "setitem"}

# (case, exporter, opset, dynamic): what the verbs are run on. TorchScript below opset 16 exports
# scatter_add as zeros -> Scatter -> Add (wrong with repeated indices): taken at 16 here.
EXPORTS = [
    ("scatter", "ts", 9, True), ("scatter_value", "ts", 11, False), ("scatter_add", "ts", 16, True),
    ("reduce_amax", "ts", 16, False), ("reduce_amax", "ts", 17, True), ("index_put_acc", "ts", 11, True),
    ("index_copy", "ts", 13, False), ("setitem", "ts", 11, True), ("masked_scatter", "ts", 11, True),
    ("gnn", "ts", 16, True),
    ("reduce_prod_noself", "dynamo", 18, False), ("index_put_acc", "dynamo", 18, True),
    ("masked_scatter", "dynamo", 18, False), ("gnn", "dynamo", 18, False),
]


# Exports that differ from torch eager themselves (the rewrite keeps what the model computes):
# TorchScript's index_put_(accumulate=True) below opset 16 is ConstantOfShape -> ScatterND -> Add,
# which drops repeated rows (pytorch/pytorch#61034).
WRONG_EXPORTS = {"index_put_acc_ts11_dyn"}


def _dynamo_dynamic_shapes(case: str, names: list[str]):
    from torch.export import Dim

    if case == "gnn":
        return {"x": {0: Dim("num_nodes", min=2)}, "edge_index": {1: Dim("num_edges", min=2)}}
    if case in ROW_CASES:
        k = Dim("k", min=2)
        return {"x": {0: Dim("n", min=2)}, "i": {0: k}, "v": {0: k}}
    b = Dim("batch", min=2)
    return {name: {0: b} for name in names}


def _ts_axes(case: str, names: list[str]):
    if case == "gnn":
        return {"x": {0: "num_nodes"}, "edge_index": {1: "num_edges"}}
    if case in ROW_CASES:
        return {"x": {0: "n"}, "i": {0: "k"}, "v": {0: "k"}}
    return {name: {0: "batch"} for name in names}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, tuple[Path, object, list[str]]]:
    folder = tmp_path_factory.mktemp("torch_exports")
    models = {}
    for case, exporter, opset, dynamic in EXPORTS:
        make, _, names = CASES[case]
        torch.manual_seed(0)
        module = make().eval()
        args = CASES[case][1](N)
        name = f"{case}_{exporter}{opset}_{'dyn' if dynamic else 'static'}"
        path = folder / f"{name}.onnx"
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            if exporter == "ts":
                torch.onnx.export(module, args, path, dynamo=False, opset_version=opset, input_names=names,
                                  output_names=["y"], dynamic_axes=_ts_axes(case, names) if dynamic else None)
            else:
                program = torch.onnx.export(module, args, path, dynamo=True, opset_version=opset, input_names=names,
                                            output_names=["y"], external_data=False,
                                            dynamic_shapes=_dynamo_dynamic_shapes(case, names) if dynamic else None)
                models[f"{name} program"] = (program, module, names)
        models[name] = (path, module, names)
    return models


def _torch_inputs(case: str, names: list[str], n: int, seed: int) -> tuple[dict[str, np.ndarray], tuple]:
    torch.manual_seed(seed)
    args = CASES[case][1](n)
    return {k: a.numpy() for k, a in zip(names, args)}, args


VERB_CALLS = {
    "upgrade": lambda m, **kw: sr.upgrade(m, **kw),
    "fold": lambda m, **kw: sr.fold(m, **kw),
    "lower-11": lambda m, **kw: sr.lower(m, opset=11, **kw),
    "lower-13": lambda m, **kw: sr.lower(m, opset=13, **kw),
    "tensorrt-8.6": lambda m, **kw: sr.prepare_for_tensorrt(m, trt_version="8.6", **kw),
    "tensorrt-10": lambda m, **kw: sr.prepare_for_tensorrt(m, trt_version="10", **kw),
}


def _case(name: str) -> str:
    return name.rsplit("_", 2)[0]


@pytest.mark.parametrize("name", [f"{c}_{e}{o}_{'dyn' if d else 'static'}" for c, e, o, d in EXPORTS])
def test_every_verb_matches_torch(exported, name: str):
    path, module, names = exported[name]
    case, dynamic = _case(name), name.endswith("_dyn")
    original = onnx.load(path)
    given = None  # generated inputs (a GNN's edge_index too: test_gnn_validates_on_generated_inputs)
    sizes = [N, 7] if dynamic else [N]
    for verb, call in VERB_CALLS.items():
        try:
            rewritten = call(original, validate=True, inputs=given)
        except sr.ConversionError as refused:
            # only a reduction with a dynamic count on 8.6 (which would ignore it; it cannot be
            # lowered): check, on the export, names the --fix-dim that makes it go
            assert verb == "tensorrt-8.6" and dynamic, refused
            assert "number of updates is not static" in str(refused)
            blocked = [f for f in check(ir.serde.deserialize_model(original), verb) if f.blocked]
            assert any(f.fix and "--fix-dim" in f.fix for f in blocked), [(f.node, f.fix) for f in blocked]
            if case == "gnn":
                assert any(f.fix and "--fix-dim num_edges=SIZE" in f.fix for f in blocked), blocked
            continue
        onnx.checker.check_model(rewritten, full_check=True)
        for n in sizes:
            feeds, args = _torch_inputs(case, names, n, seed=10 + n)
            with torch.no_grad():
                eager = module(*args).numpy()
            got, before = ort_run(rewritten, feeds)[0], ort_run(original, feeds)[0]
            np.testing.assert_allclose(got, before, rtol=1e-5, atol=1e-5, err_msg=f"{verb} on {n}")
            if name not in WRONG_EXPORTS:
                np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5, err_msg=f"{verb} on {n} vs torch")
        if verb.startswith("tensorrt"):
            target = verb
            blocked = [f for f in check(ir.serde.deserialize_model(rewritten), target) if f.blocked]
            assert blocked == [], [(f.node, f.blockers) for f in blocked]  # what it writes is ready


def test_check_suggestion_then_tensorrt_with_it_is_ready(exported, tmp_path):
    """The fix check names for a dynamic scatter_add on 8.6, applied, leaves nothing blocked."""
    path, module, names = exported["scatter_add_ts16_dyn"]
    (finding,) = [f for f in check(load_model(path), "tensorrt-8.6") if f.blocked]
    assert "--fix-dim batch=SIZE" in finding.fix
    fixed = sr.prepare_for_tensorrt(str(path), trt_version="8.6", fix_dims={"batch": N}, validate=True,
                                    output=str(tmp_path / "fixed.onnx"))
    assert [f.node for f in check(load_model(fixed), "tensorrt-8.6") if f.blocked] == []
    feeds, args = _torch_inputs("scatter_add", names, N, seed=3)
    with torch.no_grad():
        np.testing.assert_allclose(ort_run(fixed, feeds)[0], module(*args).numpy(), rtol=1e-5, atol=1e-5)


def test_onnx_program_is_refused_with_what_to_pass_and_its_model_works(exported):
    """torch.onnx.export(..., dynamo=True) returns an ONNXProgram: its .model (an onnx_ir.Model) is what to pass."""
    program, module, names = exported["reduce_prod_noself_dynamo18_static program"]
    with pytest.raises(ScatterRewriteError, match=r"torch\.onnx\.ONNXProgram.*\.model"):
        sr.lower(program, opset=13)
    lowered = sr.lower(program.model, opset=13, validate=True)
    assert isinstance(lowered, ir.Model) and lowered.opset_imports[""] == 13
    feeds, args = _torch_inputs("reduce_prod_noself", names, N, seed=4)
    with torch.no_grad():
        np.testing.assert_allclose(ort_run(ir.serde.serialize_model(lowered), feeds)[0], module(*args).numpy(),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["gnn_ts16_dyn", "gnn_dynamo18_static"])
def test_gnn_validates_on_generated_inputs(exported, name: str):
    """edge_index reaches the scatter through Gather(edge_index, 1) and feeds x[src]: validation
    generates it in range of both (it used to be arbitrary, and the original model could not run)."""
    path, _, _ = exported[name]
    for call in (lambda m: sr.lower(m, opset=13, validate=True),
                 lambda m: sr.prepare_for_tensorrt(m, trt_version="10", validate=True)):
        onnx.checker.check_model(call(onnx.load(path)))


def test_torchscript_gnn_with_fixed_edges_lowers_both_reductions_for_8_6(exported):
    path, _, names = exported["gnn_ts16_dyn"]
    feeds = _torch_inputs("gnn", names, N, seed=1)[0]
    fixed = sr.prepare_for_tensorrt(onnx.load(path), trt_version="8.6", validate=True, inputs=feeds,
                                    fix_dims={"num_edges": feeds["edge_index"].shape[1]})
    assert [f.node for f in check(ir.serde.deserialize_model(fixed), "tensorrt-8.6") if f.blocked] == []
