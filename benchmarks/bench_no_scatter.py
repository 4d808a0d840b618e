"""no-scatter: the exact scatter-free forms (prepare --target no-scatter) against the native scatter,
in onnxruntime, from a MoE router to a 20k-node GNN.

    python benchmarks/bench_no_scatter.py [--runs 5]
    python benchmarks/bench_no_scatter.py --smoke    # tiny sizes, 1 run, prints only (tests)

Cases (static shapes, float32, int64 indices): a MoE router's expert load (ScatterElements add of
4096 ones into 8 or 64 experts), its token rows gathered into expert slots (ScatterND add of 4096
rows of 256 into 8 or 64 expert rows), and a GNN aggregation (ScatterElements max/add, axis 0, index
``Expand(Unsqueeze(dst))``, 20000 nodes x 64 features, 100000 edges). Each form (mask, sort) is
written for every node (passes/no_scatter.py ``scatter_free``) and run in its own process: median
time of a run after a warm-up, one intra-op thread, and the process's peak RSS (``VmHWM``) beside
that of the same process with the native model (the bound limits the largest single intermediate;
the peak holds every tensor onnxruntime keeps alive at once). "bound" is the largest intermediate the form
declares: the smallest ``--max-intermediate-mib`` that accepts it (the default, 256, refuses above).
A form above 2 GiB is not run. Outputs are checked in the child against the native model's: max
bit for bit, add within validation's float32 tolerance. Writes benchmarks/RESULTS-no-scatter.md
(not with --smoke).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import onnxruntime as ort
from onnx import TensorProto

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scatter_rewrite.graph import iter_nodes, value_names  # noqa: E402
from scatter_rewrite.passes.lowering import segment_reduce as seg  # noqa: E402
from scatter_rewrite.passes import no_scatter as ns  # noqa: E402
from scatter_rewrite.type_inference import borrow_inferred_types  # noqa: E402

HERE = Path(__file__).parent
NOTE = ("How to read it: the forms cost what a scatter does not. A MoE router's scatter is a few "
        "microseconds natively, and each form's fixed cost (a TopK, the scan's unrolled steps, "
        "tens of nodes) dominates; they are for runtimes that have no scatter at all, where the "
        "alternative is falling back to the CPU. prepare picks the form with the smaller declared "
        "largest intermediate, not the faster one (the mask form is faster for 8 experts and "
        "slower for 64). The bound limits the largest single intermediate; the peak RSS holds "
        "every tensor onnxruntime keeps alive at once, several times that (the GNN max's scan "
        "carries int64 positions through 17 unrolled steps). A GNN's mask form (R*n*w) is "
        "never written: the sort form, (R+n)*w, is what such a model gets.")
RUN_LIMIT = 2 << 30  # bytes: a form whose largest intermediate is above is not run
DEFAULT_BOUND = ns.DEFAULT_MAX_INTERMEDIATE_MIB

CHILD = r"""
import json, statistics, sys, time
import numpy as np, onnxruntime as ort
model, feeds_path, expected_path, exact, runs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", int(sys.argv[5])
feeds = dict(np.load(feeds_path))
options = ort.SessionOptions()
options.intra_op_num_threads = options.inter_op_num_threads = 1
options.log_severity_level = 3
session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
out = session.run(None, feeds)[0]
if expected_path != "-":
    expected = np.load(expected_path)
    if exact:
        assert out.tobytes() == expected.tobytes(), "not bit for bit"
    else:
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)
else:
    np.save(feeds_path + ".out.npy", out)
times = []
for _ in range(runs):
    started = time.perf_counter()
    session.run(None, feeds)
    times.append(time.perf_counter() - started)
# (VmHWM, not ru_maxrss: until exec, Linux counts the parent's memory into the child's ru_maxrss)
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
print(json.dumps({"ms": statistics.median(times) * 1000, "rss": peak * 1024}))
"""


def vi(name, dtype, shape):
    return oh.make_tensor_value_info(name, dtype, shape)


def moe_load(experts: int, tokens: int) -> tuple[onnx.ModelProto, dict]:
    graph = oh.make_graph(
        [oh.make_node("ScatterElements", ["load", "expert", "ones"], ["y"], axis=0,
                      reduction="add")], "moe_load",
        [vi("load", TensorProto.FLOAT, [experts]), vi("expert", TensorProto.INT64, [tokens]),
         vi("ones", TensorProto.FLOAT, [tokens])], [vi("y", TensorProto.FLOAT, [experts])])
    rng = np.random.default_rng(0)
    return (oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]),
            {"load": np.zeros(experts, np.float32), "expert": rng.integers(0, experts, tokens),
             "ones": np.ones(tokens, np.float32)})


def moe_rows(experts: int, tokens: int, hidden: int) -> tuple[onnx.ModelProto, dict]:
    graph = oh.make_graph(
        [oh.make_node("ScatterND", ["slots", "expert", "h"], ["y"], reduction="add")], "moe_rows",
        [vi("slots", TensorProto.FLOAT, [experts, hidden]),
         vi("expert", TensorProto.INT64, [tokens, 1]), vi("h", TensorProto.FLOAT, [tokens, hidden])],
        [vi("y", TensorProto.FLOAT, [experts, hidden])])
    rng = np.random.default_rng(0)
    return (oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]),
            {"slots": np.zeros((experts, hidden), np.float32),
             "expert": rng.integers(0, experts, (tokens, 1)),
             "h": rng.standard_normal((tokens, hidden)).astype(np.float32)})


def gnn(reduction: str, nodes: int, features: int, edges: int) -> tuple[onnx.ModelProto, dict]:
    graph = oh.make_graph(
        [oh.make_node("Unsqueeze", ["dst", "one"], ["dst2"]),
         oh.make_node("Expand", ["dst2", "shape"], ["index"]),
         oh.make_node("ScatterElements", ["x", "index", "msg"], ["y"], axis=0,
                      reduction=reduction)], "gnn",
        [vi("x", TensorProto.FLOAT, [nodes, features]), vi("dst", TensorProto.INT64, [edges]),
         vi("msg", TensorProto.FLOAT, [edges, features])],
        [vi("y", TensorProto.FLOAT, [nodes, features])],
        [oh.make_tensor("one", TensorProto.INT64, [1], [1]),
         oh.make_tensor("shape", TensorProto.INT64, [2], [1, features])])
    rng = np.random.default_rng(0)
    return (oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]),
            {"x": rng.standard_normal((nodes, features)).astype(np.float32),
             "dst": rng.integers(0, nodes, edges),
             "msg": rng.standard_normal((edges, features)).astype(np.float32)})


def forms(model: onnx.ModelProto) -> dict[str, tuple[int, onnx.ModelProto | None]]:
    """form -> (its largest intermediate in bytes, the model in that form, None when too big)."""
    working = ir.serde.deserialize_model(model)
    borrow_inferred_types(working, sharpen=True)
    node = next(n for n, _ in iter_nodes(working) if n.op_type.startswith("Scatter"))
    out = {}
    for form in ns.forms_for(node):
        if form.bytes > RUN_LIMIT:
            out[form.name] = (form.bytes, None)
            continue
        copy = ir.serde.deserialize_model(model)
        borrow_inferred_types(copy, sharpen=True)
        names = seg.Names(value_names(copy))
        for n, scope in list(iter_nodes(copy)):
            if n.op_type.startswith("Scatter"):
                nodes, value = ns.scatter_free(n, scope.opset, form.name, names)
                ns.NoScatterPass._splice(n, scope, nodes, value)
        out[form.name] = (form.bytes, ir.serde.serialize_model(copy))
    return out


def child(model: onnx.ModelProto, feeds: str, expected: str, exact: bool, runs: int,
          tmp: Path) -> dict:
    path = tmp / "model.onnx"
    onnx.save(model, path)
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), feeds, expected,
                           "1" if exact else "0", str(runs)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.splitlines()[-1])


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    return (f"{cpu}, {platform.machine()}; Python {platform.python_version()}, numpy "
            f"{np.__version__}, onnxruntime {ort.__version__}, onnx {onnx.__version__}")


def mib(size: float) -> str:
    return f"{size / 2 ** 20:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 1 run, print only")
    args = parser.parse_args()
    if args.smoke:
        args.runs = 1
        cases = [("MoE load, 8 experts x 64 tokens", "add", *moe_load(8, 64)),
                 ("MoE rows, 8 experts x 64 tokens x 16", "add", *moe_rows(8, 64, 16)),
                 ("GNN 50 nodes x 8, 200 edges", "max", *gnn("max", 50, 8, 200))]
        print("smoke run: tiny sizes and 1 run, so the numbers mean nothing; no RESULTS file "
              "written", flush=True)
    else:
        cases = [(f"MoE load, {e} experts x 4096 tokens", "add", *moe_load(e, 4096))
                 for e in (8, 64)]
        cases += [(f"MoE rows, {e} experts x 4096 tokens x 256", "add", *moe_rows(e, 4096, 256))
                  for e in (8, 64)]
        cases += [(f"GNN 20000 nodes x 64, 100000 edges", r, *gnn(r, 20000, 64, 100000))
                  for r in ("max", "add")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for label, reduction, model, feeds in cases:
            feeds_path = str(tmp / "feeds.npz")
            np.savez(feeds_path, **feeds)
            native = child(model, feeds_path, "-", False, args.runs, tmp)
            expected = feeds_path + ".out.npy"
            for form, (size, written) in forms(model).items():
                if written is None:
                    rows.append((label, reduction, form, native, None, size))
                    print(f"{label} {reduction} {form}: {mib(size)} MiB, not run", flush=True)
                    continue
                measured = child(written, feeds_path, expected, reduction != "add", args.runs, tmp)
                rows.append((label, reduction, form, native, measured, size))
                print(f"{label} {reduction} {form}: native {native['ms']:.2f} ms, "
                      f"{measured['ms']:.2f} ms", flush=True)
    lines = [
        "### no-scatter: exact scatter-free forms vs the native scatter (onnxruntime, 1 thread)",
        "",
        f"`python benchmarks/bench_no_scatter.py --runs {args.runs}`: median of {args.runs} runs "
        "after a warm-up, each model in its own process; peak RSS of that process over the "
        "native model's; bound: the form's declared largest intermediate, the smallest "
        f"`--max-intermediate-mib` that accepts it (default {DEFAULT_BOUND}: above it, refused). "
        "max checked bit for bit, add within float32 tolerance.",
        "",
        "| case | reduction | form | native (ms) | form (ms) | ratio | peak RSS native / form (MiB) "
        "| bound (MiB) | default bound |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for label, reduction, form, native, measured, size in rows:
        accepted = "accepts" if size <= DEFAULT_BOUND * 2 ** 20 else "refuses"
        if measured is None:
            lines.append(f"| {label} | {reduction} | {form} | {native['ms']:.2f} | not run | | "
                         f"{mib(native['rss'])} / - | {mib(size)} | {accepted} |")
            continue
        lines.append(f"| {label} | {reduction} | {form} | {native['ms']:.2f} | "
                     f"{measured['ms']:.2f} | {measured['ms'] / native['ms']:.2f}x | "
                     f"{mib(native['rss'])} / {mib(measured['rss'])} | {mib(size)} | {accepted} |")
    lines += ["", NOTE, "", f"Machine: {machine()}."]
    if args.smoke:
        print("\n".join(lines))
    else:
        (HERE / "RESULTS-no-scatter.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
