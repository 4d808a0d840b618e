"""no-scatter: the exact scatter-free forms (prepare --target no-scatter) against the native scatter,
in onnxruntime, from a MoE router to a 20k-node GNN: the memory each form declares (the bound
prepare judges it by) beside the memory onnxruntime takes running it, and the time.

    python benchmarks/bench_no_scatter.py [--runs 5] [--repeats 3]
    python benchmarks/bench_no_scatter.py --smoke    # tiny sizes, 1 run, prints only (tests)

Cases (static shapes, float32, int64 indices): a MoE router's expert load (ScatterElements add of
4096 ones into 8 or 64 experts), its token rows gathered into expert slots (ScatterND add of 4096
rows of 256 into 8 or 64 expert rows), and a GNN aggregation (ScatterElements max/add, axis 0, index
``Expand(Unsqueeze(dst))``, 2000 nodes x 64 features with 10000 edges, and 20000 x 64 with 100000
edges), and the goal case: a GNN max/add into 2000 x 64 from 200000 edges prepared with
``--max-intermediate-mib 400``, whose runs must peak within that bound above the native scatter's
and take at most 3x (max) and 1.5x (add) its time (the "Goal" lines under the table). Each form
(mask, sort) is written for every node (passes/lowering/scatter_free.py ``scatter_free``).

Declared: the form's peak live bytes (passes/lowering/live_bytes.py), what ``prepare`` compares
with ``--max-intermediate-mib``: the form is refused below ceil(declared) MiB ("refused below").
Measured: each model runs in a process of its own (one intra-op thread), ``--repeats`` processes
per column, medians; in each, the peak RSS the runs add (``VmHWM`` reset through
``/proc/self/clear_refs`` once the session and the inputs are loaded, minus the RSS then) over a
first run and ``--runs`` timed runs: with onnxruntime's CPU arena on (its default), with it off,
and with it off and glibc returning every freed block at once (``MALLOC_MMAP_THRESHOLD_=65536``:
what the nodes hold, without the allocator's keeping); the memory pattern on (its default: from
the second run on, one block laid out from the first run's allocations). The native scatter is
measured alike.
A form declaring above 2 GiB is not run. Each process saves its output, which this script
checks against the native model's: max bit for bit, add within validation's float32 tolerance.
Writes benchmarks/RESULTS-no-scatter.md (not with --smoke).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
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
from scatter_rewrite.passes.lowering.scatter_free import scatter_free  # noqa: E402
from scatter_rewrite.passes import no_scatter as ns  # noqa: E402
from scatter_rewrite.type_inference import borrow_inferred_types  # noqa: E402

HERE = Path(__file__).parent
RUN_LIMIT = 2 << 30  # bytes: a form declaring more is not run
DEFAULT_BOUND = ns.DEFAULT_MAX_INTERMEDIATE_MIB
# a GNN max/add prepared with --max-intermediate-mib GOAL_MIB: its runs' peak above the native
# scatter's within that bound, its time within these factors of the native scatter's
GOAL_EDGES, GOAL_MIB = 200_000, 400
GOALS = {"max": 3.0, "add": 1.5}
# (column, arena on, glibc returning freed blocks at once)
SETTINGS = (("arena on", True, False), ("arena off", False, False),
            ("arena off, malloc returns", False, True))

CHILD = r"""
import json, statistics, sys, time
import numpy as np, onnxruntime as ort
model, feeds_path, out_path, runs, arena = sys.argv[1:6]
feeds = dict(np.load(feeds_path))
options = ort.SessionOptions()
options.intra_op_num_threads = options.inter_op_num_threads = 1
options.enable_cpu_mem_arena = arena == "1"
options.log_severity_level = 3
session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])

def status(key):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key)) * 1024

open("/proc/self/clear_refs", "w").write("5")  # VmHWM from here on
before = status("VmRSS")
out = session.run(None, feeds)[0]
np.save(out_path, out)  # (checked by the parent: no comparison's temporaries counted here)
del out
times = []
for _ in range(int(runs)):
    started = time.perf_counter()
    session.run(None, feeds)
    times.append(time.perf_counter() - started)
print(json.dumps({"ms": statistics.median(times) * 1000, "peak": status("VmHWM") - before}))
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


NOTE = ("How to read it: declared counts what the form's nodes hold at once in onnxruntime's run "
        "order (views free, Where's two temporaries, TopK's index vector); with the allocator "
        "returning freed memory at once it is what onnxruntime's run adds. Measured over "
        "declared: {factors}. The rest is the allocator's: with the arena, the second run's "
        "memory pattern is allocated beside the chunks the first run left in the arena; without "
        "it, glibc keeps freed blocks below its mmap threshold, which rises to 32 MiB after the "
        "first large free. The bound is what the form itself needs; a device running it under "
        "onnxruntime's defaults needs the arena's factor above. The native scatter's peak is "
        "its output and, for the GNN, the expanded [edges, 64] int64 index the export computes "
        "(the forms read only the edge vector). Time: the forms cost what a scatter does not (a "
        "MoE router's scatter takes microseconds natively; each form's fixed cost, a TopK and "
        "the scan's unrolled steps, dominates); a GNN's float max (the segment tree over the "
        "sorted rows, O(R+n)) and add (the doubling scan) come near onnxruntime's own scatter, "
        "which loops over the expanded [edges, 64] index. They are for runtimes with no "
        "scatter at all. A "
        "GNN's mask form ([R, n, w]) is never written.")


def forms(model: onnx.ModelProto) -> dict[str, tuple[int, onnx.ModelProto | None]]:
    """form -> (its declared peak live bytes, the model in that form, None when too big)."""
    working = ir.serde.deserialize_model(model)
    borrow_inferred_types(working, sharpen=True)
    node, scope = next((n, s) for n, s in iter_nodes(working) if n.op_type.startswith("Scatter"))
    out = {}
    for form in ns.forms_for(node, scope.opset):
        if form.bytes > RUN_LIMIT:
            out[form.name] = (form.bytes, None)
            continue
        copy = ir.serde.deserialize_model(model)
        borrow_inferred_types(copy, sharpen=True)
        names = seg.Names(value_names(copy))
        for n, scope in list(iter_nodes(copy)):
            if n.op_type.startswith("Scatter"):
                nodes, value = scatter_free(n, scope.opset, form.name, names)
                ns.NoScatterPass._splice(n, scope, nodes, value)
        out[form.name] = (form.bytes, ir.serde.serialize_model(copy))
    return out


def child(path: Path, feeds: str, runs: int, arena: bool, returns: bool) -> tuple[dict, Path]:
    """One process's time and peak, and the file holding its output."""
    env = dict(os.environ)
    if returns:
        env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    out = path.with_suffix(".out.npy")
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), feeds, str(out), str(runs),
                           "1" if arena else "0"], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.splitlines()[-1]), out


def measured(path: Path, feeds: str, expected: np.ndarray | None, exact: bool, args) -> dict:
    """column -> {"ms", "peak"}: medians over ``args.repeats`` processes, each output checked
    against ``expected`` (max bit for bit, add within validation's float32 tolerance); the
    native model's own output under "expected" when ``expected`` is None."""
    out = {}
    for column, arena, returns in SETTINGS:
        got = []
        for _ in range(args.repeats):
            numbers, written = child(path, feeds, args.runs, arena, returns)
            actual = np.load(written)
            if expected is None:
                expected = actual
            elif exact:
                assert actual.tobytes() == expected.tobytes(), f"{path.name}: not bit for bit"
            else:
                np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-4)
            got.append(numbers)
        out[column] = {key: statistics.median(g[key] for g in got) for key in ("ms", "peak")}
    out["expected"] = expected
    return out


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    return (f"{cpu}, {platform.machine()}; Python {platform.python_version()}, numpy "
            f"{np.__version__}, onnxruntime {ort.__version__}, onnx {onnx.__version__}")


def mib(size: float) -> str:
    return f"{size / 2 ** 20:.1f}"


def cases(smoke: bool) -> list:
    if smoke:
        return [("MoE load, 8 experts x 64 tokens", "add", *moe_load(8, 64)),
                ("MoE rows, 8 experts x 64 tokens x 16", "add", *moe_rows(8, 64, 16)),
                ("GNN 50 nodes x 8, 200 edges", "max", *gnn("max", 50, 8, 200))]
    out = [(f"MoE load, {e} experts x 4096 tokens", "add", *moe_load(e, 4096)) for e in (8, 64)]
    out += [(f"MoE rows, {e} experts x 4096 tokens x 256", "add", *moe_rows(e, 4096, 256))
            for e in (8, 64)]
    out += [(f"GNN {v} nodes x 64, {5 * v} edges", r, *gnn(r, v, 64, 5 * v))
            for v in (2000, 20000) for r in ("max", "add")]
    out += [(f"GNN 2000 nodes x 64, {GOAL_EDGES} edges", r, *gnn(r, 2000, 64, GOAL_EDGES))
            for r in GOALS]
    return out


def table(rows: list, args) -> list[str]:
    columns = [c for c, _, _ in SETTINGS]
    lines = [
        "### no-scatter: exact scatter-free forms vs the native scatter (onnxruntime, 1 thread)",
        "",
        f"`python benchmarks/bench_no_scatter.py --runs {args.runs} --repeats {args.repeats}`: "
        "declared is the form's peak live bytes (what `prepare` judges against "
        "`--max-intermediate-mib`; it refuses the form below the bound shown); measured is the "
        "peak RSS the runs add once the session and inputs are loaded (the output checked by "
        f"the parent), the median of {args.repeats} processes, each a first run and {args.runs} "
        "timed runs (time: the median run). Columns: onnxruntime's CPU arena on (default), "
        "off, and off with glibc returning freed blocks at once (`MALLOC_MMAP_THRESHOLD_="
        "65536`); its memory pattern on in all (default). max checked bit for bit, add within "
        "float32 tolerance.",
        "",
        "| case | reduction | form | declared (MiB) | refused below (MiB) | "
        + " | ".join(f"peak, {c}: native / form (MiB)" for c in columns)
        + " | time native / form (ms) | form over native: peak, arena on (MiB) | time |",
        "|---|---|---|---:|---:|" + "---:|" * len(columns) + "---:|---:|---:|",
    ]
    for label, reduction, form, native, got, size in rows:
        bound = math.ceil(size / 2 ** 20)
        said = f"{bound}" + ("" if bound <= DEFAULT_BOUND else " (default refuses)")
        if got is None:
            lines.append(f"| {label} | {reduction} | {form} | {mib(size)} | {said} | "
                         + " | ".join(f"{mib(native[c]['peak'])} / not run" for c in columns)
                         + f" | {native['arena on']['ms']:.2f} / - | - | - |")
            continue
        lines.append(f"| {label} | {reduction} | {form} | {mib(size)} | {said} | "
                     + " | ".join(f"{mib(native[c]['peak'])} / {mib(got[c]['peak'])}"
                                  for c in columns)
                     + f" | {native['arena on']['ms']:.2f} / {got['arena on']['ms']:.2f}"
                     + f" | {mib(_above(native, got))} | {_ratio(native, got):.2f}x |")
    return lines


def _above(native: dict, got: dict) -> float:
    return got["arena on"]["peak"] - native["arena on"]["peak"]


def _ratio(native: dict, got: dict) -> float:
    return got["arena on"]["ms"] / native["arena on"]["ms"]


def goals(rows: list) -> list[str]:
    """Whether the GNN max/add of GOAL_EDGES edges met the goal (under onnxruntime's defaults)."""
    lines = []
    for label, reduction, form, native, got, size in rows:
        if got is None or f"{GOAL_EDGES} edges" not in label or reduction not in GOALS:
            continue
        above, ratio = _above(native, got), _ratio(native, got)
        met = above <= GOAL_MIB * 2 ** 20 and ratio <= GOALS[reduction]
        lines.append(f"- {label}, {reduction} ({form} form, prepared with "
                     f"`--max-intermediate-mib {GOAL_MIB}`, which accepts it: declared "
                     f"{mib(size)} MiB): peak {mib(above)} MiB above the native scatter's (bound "
                     f"{GOAL_MIB} MiB), time {ratio:.2f}x the native scatter's (goal at most "
                     f"{GOALS[reduction]:g}x): {'met' if met else 'NOT met'}")
    return lines


def factors(rows: list) -> str:
    """Measured over declared, per column: the range of the ratio for forms declaring 16 MiB or
    more, and the most a smaller form's peak exceeds its declared bytes by."""
    said = []
    for column, _, _ in SETTINGS:
        run = [(got[column]["peak"], size) for *_, got, size in rows if got is not None]
        ratios = [peak / size for peak, size in run if size >= 16 * 2 ** 20]
        above = [peak - size for peak, size in run if size < 16 * 2 ** 20]
        if ratios and above:
            said.append(f"{column}, {min(ratios):.2f}-{max(ratios):.2f}x (smaller forms: at "
                        f"most {mib(max(above))} MiB above)")
    return "; ".join(said)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="processes per measurement")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 1 run, print only")
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.repeats = 1, 1
        print("smoke run: tiny sizes and 1 run, so the numbers mean nothing; no RESULTS file "
              "written", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for label, reduction, model, feeds in cases(args.smoke):
            feeds_path = str(tmp / "feeds.npz")
            np.savez(feeds_path, **feeds)
            onnx.save(model, tmp / "native.onnx")
            native = measured(tmp / "native.onnx", feeds_path, None, False, args)
            for form, (size, written) in forms(model).items():
                if written is None:
                    rows.append((label, reduction, form, native, None, size))
                    print(f"{label} {reduction} {form}: declares {mib(size)} MiB, not run",
                          flush=True)
                    continue
                onnx.save(written, tmp / "form.onnx")
                got = measured(tmp / "form.onnx", feeds_path, native["expected"],
                               reduction != "add", args)
                rows.append((label, reduction, form, native, got, size))
                print(f"{label} {reduction} {form}: declares {mib(size)} MiB, peak "
                      + ", ".join(f"{c} {mib(got[c]['peak'])}" for c, _, _ in SETTINGS),
                      flush=True)
    lines = table(rows, args)
    met = goals(rows)
    if met:
        lines += ["", "Goal (arena on, the medians above):", "", *met]
    lines += ["", NOTE.format(factors=factors(rows)), "", f"Machine: {machine()}."]
    if args.smoke:
        print("\n".join(lines))
    else:
        (HERE / "RESULTS-no-scatter.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
