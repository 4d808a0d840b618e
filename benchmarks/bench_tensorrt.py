"""TensorRT-form benchmarks in onnxruntime (CPU, one intra-op thread), side by side with the original.

    python benchmarks/bench_tensorrt.py                 # both parts (a few minutes)
    python benchmarks/bench_tensorrt.py --part nd --runs 9
    python benchmarks/bench_tensorrt.py --part trt86 --runs 5
    python benchmarks/bench_tensorrt.py --smoke    # tiny sizes, 1 run, prints only (tests/project/test_benchmarks.py)

Part ``nd`` (to_scatternd): the ScatterND form vs the original ScatterElements. Float32 ``data``
4096x4096, int64 ``indices`` and float32 ``updates`` 4096x256 (256 distinct columns per row, a
quarter of them negative), ``ScatterElements(axis=1)``, all graph inputs. Two shapes: static (the
rewrite uses a constant coordinate grid) and dynamic (every dimension symbolic: the grid is built at
run time with Shape/Range/Expand). Outputs checked bit-identical. Target: rewritten <= 1.5x.

Part ``trt86``: the TensorRT 8.6 form of a reduction (``scatter-rewrite tensorrt --trt-version 8.6``:
bitonic sort of the keys, segmented scan, one ScatterND) vs the native ``ScatterElements(add/max)``
on float32 data 20000x64 with 200000 updates: GNN-shaped (``Expand(Unsqueeze(dst))`` indices, 200000
edge rows of 64 features: 200000 keys sorted) and arbitrary indices (a [3125, 64] index tensor of
random rows on axis 0: 200000 element keys). Outputs checked (max bit for bit, add within the
validation tolerance). No target: the ratio is reported as measured.

Each model runs with default graph optimizations; runs alternate between original and rewritten
after 3 warm-ups; medians reported. Writes the parts it ran into benchmarks/RESULTS-tensorrt.md
(keeping the other part's section; not with --smoke, which prints them).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto

import scatter_rewrite as sr
from scatter_rewrite.testing import scatter_model

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS-tensorrt.md"
N, K = 4096, 256
TARGET = 1.5
SMOKE_N, SMOKE_K = 256, 16


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    columns = np.argsort(rng.random((N, N)), axis=1)[:, :K]  # distinct per row
    columns = np.where(rng.random((N, K)) < 0.25, columns - N, columns)
    return {"data": rng.standard_normal((N, N)).astype(np.float32), "indices": columns.astype(np.int64),
            "updates": rng.standard_normal((N, K)).astype(np.float32)}


def timed(sess: ort.InferenceSession, feeds: dict) -> float:
    started = time.perf_counter()
    sess.run(None, feeds)
    return time.perf_counter() - started


def alternate(a: ort.InferenceSession, b: ort.InferenceSession, feeds: dict, runs: int) -> tuple[float, float]:
    """Median seconds of ``a`` and ``b`` over ``runs`` alternating runs after 3 warm-ups each."""
    for _ in range(3):
        timed(a, feeds), timed(b, feeds)
    ta, tb = [], []
    for _ in range(runs):
        ta.append(timed(a, feeds))
        tb.append(timed(b, feeds))
    return statistics.median(ta), statistics.median(tb)


def bench(name: str, original: onnx.ModelProto, runs: int, feeds: dict) -> dict:
    rewritten = sr.to_scatternd(original, validate=False)  # (compared below, bit for bit)
    ops = [n.op_type for n in rewritten.graph.node]
    a, b = session(original), session(rewritten)
    np.testing.assert_array_equal(a.run(None, feeds)[0], b.run(None, feeds)[0])
    ma, mb = alternate(a, b, feeds, runs)
    row = {"case": name, "original": ma * 1e3, "rewritten": mb * 1e3, "ratio": mb / ma, "ops": " -> ".join(ops)}
    print(f"{name}: ScatterElements {row['original']:.2f} ms, ScatterND form {row['rewritten']:.2f} ms, "
          f"ratio {row['ratio']:.2f}x ({row['ops']})", flush=True)
    return row


def machine_line(load_before: float) -> str:
    return (f"Machine: {cpu_model()}, {platform.machine()}; Python {platform.python_version()}, numpy {np.__version__}, "
            f"onnxruntime {ort.__version__}, onnx {onnx.__version__}; {os.cpu_count()} cores, 1-minute load average "
            f"{load_before:.1f} before and {os.getloadavg()[0]:.1f} after the run (other jobs share the machine: "
            "compare the ratio, measured with alternating runs, more than the absolute times).")


def table_section(heading: str, intro: str, columns: list[str], rows: list[list[str]], notes: list[str]) -> list[str]:
    """A RESULTS section: heading, how it was run, the table, the machine and the notes."""
    lines = [heading, "", intro, "", "| " + " | ".join(columns) + " |",
             "|---|" + "---:|" * (len(columns) - 2) + ("---|" if columns[-1] == "rewritten graph" else "---:|")]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines + [line for note in notes for line in ("", note)]


def write_section(lines: list[str], write: bool = True) -> None:
    """Put one part's section (from its "### " heading) into RESULTS, keeping the others
    (``write=False``, --smoke: print it instead)."""
    if not write:
        print("\n".join(lines))
        return
    heading = lines[0]
    sections, current = [], []
    for line in (RESULTS.read_text().splitlines() if RESULTS.exists() else []):
        if line.startswith("### ") and current:
            sections.append(current)
            current = []
        current.append(line)
    if current:
        sections.append(current)
    sections = [lines if sec[0] == heading else sec for sec in sections]
    if not any(sec[0] == heading for sec in sections):
        sections.append(lines)
    RESULTS.write_text("\n\n".join("\n".join(sec).strip() for sec in sections) + "\n")
    print(f"wrote {RESULTS}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=None, help="timed runs per model (default: nd 15, trt86 5)")
    parser.add_argument("--part", choices=["nd", "trt86", "all"], default="all")
    parser.add_argument("--smoke", action="store_true",
                        help=f"nd {SMOKE_N}x{SMOKE_N}, trt86 {SMOKE_ROWS}x{SMOKE_FEATURES} with {SMOKE_UPDATES} updates, "
                             "1 run, print only (no RESULTS file): that the script still works")
    args = parser.parse_args()
    global N, K, ROWS, FEATURES, UPDATES
    if args.smoke:
        N, K, args.runs = SMOKE_N, SMOKE_K, 1
        ROWS, FEATURES, UPDATES = SMOKE_ROWS, SMOKE_FEATURES, SMOKE_UPDATES
        print("smoke run: tiny sizes and 1 run, so the numbers mean nothing; no RESULTS file written", flush=True)
    if args.part in ("nd", "all"):
        bench_nd(args.runs or 15, write=not args.smoke)
    if args.part in ("trt86", "all"):
        bench_trt86(args.runs or 5, write=not args.smoke)
    return 0


def bench_nd(runs: int, write: bool = True) -> None:
    load_before = os.getloadavg()[0]
    feeds = inputs()
    static = scatter_model("ScatterElements", opset=18, data_shape=(N, N), indices_shape=(N, K), axis=1)
    dynamic = scatter_model("ScatterElements", opset=18, data_shape=("n", "m"), indices_shape=("r", "k"), axis=1)
    rows = [bench("static shapes", static, runs, feeds), bench("dynamic shapes", dynamic, runs, feeds)]
    lines = table_section(
        "### to_scatternd: ScatterND form vs the original ScatterElements (onnxruntime, 1 thread)",
        f"`python benchmarks/bench_tensorrt.py --part nd --runs {runs}`: float32 data {N}x{N}, {K} updates per row "
        f"along axis 1 (int64 indices, a quarter negative), median of {runs} alternating runs after 3 warm-ups, "
        f"outputs checked bit-identical. Target: <= {TARGET}x.",
        ["shapes", "ScatterElements (ms)", "ScatterND form (ms)", "ratio", "rewritten graph"],
        [[r["case"], f"{r['original']:.2f}", f"{r['rewritten']:.2f}", f"{r['ratio']:.2f}x", r["ops"]] for r in rows],
        [machine_line(load_before),
         "Where the time goes (onnxruntime profiling, kernel medians): the ScatterND kernel itself is 1.2-1.3x "
         "the ScatterElements kernel on the VM of 2026-11-23 (16-17.5 ms against 13-14) and 1.67x on that of "
         "2026-11-24 (10.6 ms against 6.3: the ScatterElements kernel gained more from its faster memory); "
         "building the [4096, 256, 2] coordinates costs a Concat (0.9-1.4 ms, a last-axis interleave) and the "
         "negative-index normalization 1.4-2 ms (Less/Cast/Mul/Add, 0.3-0.5 ms each; the same formula with "
         "`Where` took 13.6 ms for `Where` alone). The dynamic form adds an Expand of the row coordinates "
         "(~0.5 ms) and a dozen small shape nodes. So the ratio follows the machine more than the form: static "
         "1.50-1.60x and dynamic 1.62-1.72x over three runs on 2026-11-23, static 1.83-1.91x and dynamic 1.99-2.01x "
         "over four runs on an AMD VM on 2026-11-24, static 1.38-1.45x and dynamic 1.43-1.49x over two runs on an Intel Xeon VM the same day, "
         "whose ScatterElements run is 3.5x slower (25-26 ms against 7) while the form adds 10-12 ms to it "
         "(6-7 ms on the AMD VM) "
         "(the forms unchanged)."])
    write_section(lines, write)
    worst = max(r["ratio"] for r in rows)
    if worst > TARGET:
        print(f"rewritten is {worst:.2f}x the original: above the {TARGET}x target", file=sys.stderr)


# ---- part trt86: the TensorRT 8.6 form of a reduction vs the native kernel ---------------------------

ROWS, FEATURES, UPDATES = 20000, 64, 200000
SMOKE_ROWS, SMOKE_FEATURES, SMOKE_UPDATES = 100, 8, 512  # UPDATES a multiple of FEATURES (the arbitrary case's shape)


def gnn_model(reduction: str) -> onnx.ModelProto:
    vi = onnx.helper.make_tensor_value_info
    make = onnx.helper.make_node
    graph = onnx.helper.make_graph([
        make("Constant", [], ["one"], value=onnx.helper.make_tensor("one", TensorProto.INT64, [1], [1])),
        make("Unsqueeze", ["dst", "one"], ["dst2"]),
        make("Constant", [], ["width"], value=onnx.helper.make_tensor("width", TensorProto.INT64, [2], [1, FEATURES])),
        make("Expand", ["dst2", "width"], ["index"]),
        make("ScatterElements", ["x", "index", "msg"], ["y"], axis=0, reduction=reduction),
    ], "gnn", [vi("x", TensorProto.FLOAT, [ROWS, FEATURES]), vi("dst", TensorProto.INT64, [UPDATES]),
               vi("msg", TensorProto.FLOAT, [UPDATES, FEATURES])], [vi("y", TensorProto.FLOAT, [ROWS, FEATURES])])
    return onnx.shape_inference.infer_shapes(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)]))


def trt86_cases(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((ROWS, FEATURES)).astype(np.float32)
    gnn_feeds = {"x": x, "dst": rng.integers(0, ROWS, UPDATES),
                 "msg": rng.standard_normal((UPDATES, FEATURES)).astype(np.float32)}
    shape = (UPDATES // FEATURES, FEATURES)
    arbitrary_feeds = {"data": x, "indices": rng.integers(0, ROWS, shape),
                       "updates": rng.standard_normal(shape).astype(np.float32)}
    for reduction in ("add", "max"):
        yield f"GNN-shaped, {reduction}", gnn_model(reduction), gnn_feeds, reduction
    for reduction in ("add", "max"):
        model = scatter_model("ScatterElements", opset=18, data_shape=(ROWS, FEATURES), indices_shape=shape,
                              axis=0, reduction=reduction)
        yield f"arbitrary indices, {reduction}", model, arbitrary_feeds, reduction


def bench_trt86(runs: int, write: bool = True) -> None:
    import onnx_ir as ir

    from scatter_rewrite.passes.tensorrt_violations import tensorrt_violations
    from scatter_rewrite.validate import compare

    load_before = os.getloadavg()[0]
    rows = []
    for name, original, feeds, reduction in trt86_cases():
        rewritten = sr.prepare_for_tensorrt(original, trt_version="8.6", validate=False)
        ops = [n.op_type for n in rewritten.graph.node]
        assert "ScatterElements" not in ops and "TopK" not in ops
        # its Loops (the sort, the scan) keep their shapes, as TensorRT's ILoop needs
        assert not tensorrt_violations(list(ir.serde.deserialize_model(rewritten).graph), "8.6")
        a, b = session(original), session(rewritten)
        _, failures = compare(["y"], a.run(None, feeds), b.run(None, feeds), float_tolerance=reduction == "add")
        assert not failures, failures
        ma, mb = alternate(a, b, feeds, runs)
        rows.append({"case": name, "native": ma * 1e3, "form": mb * 1e3, "ratio": mb / ma, "nodes": len(ops)})
        print(f"{name}: ScatterElements {ma * 1e3:.1f} ms, 8.6 form {mb * 1e3:.1f} ms, ratio {mb / ma:.2f}x "
              f"({len(ops)} nodes)", flush=True)
    lines = table_section(
        "### tensorrt --trt-version 8.6: reductions as a sorting network vs the native ScatterElements (onnxruntime, 1 thread)",
        f"`python benchmarks/bench_tensorrt.py --part trt86 --runs {runs}`: float32 data {ROWS}x{FEATURES}, "
        f"{UPDATES} updates (GNN-shaped: {UPDATES} edge rows of {FEATURES} features, so {UPDATES} keys sorted; "
        f"arbitrary: a [{UPDATES // FEATURES}, {FEATURES}] index tensor of random rows on axis 0, {UPDATES} element "
        f"keys), median of {runs} alternating runs after 3 warm-ups, outputs checked (max bit for bit, add within "
        "the validation tolerance). No target: this is the price of running the reduction at all on TensorRT 8.6 "
        "(which silently ignores the attribute); onnxruntime only measures the form's cost on a CPU.",
        ["case", "ScatterElements (ms)", "8.6 form (ms)", "ratio", "nodes"],
        [[r["case"], f"{r['native']:.1f}", f"{r['form']:.1f}", f"{r['ratio']:.2f}x", str(r["nodes"])] for r in rows],
        [machine_line(load_before),
         "Where the time goes (onnxruntime profiling of the GNN max case, E = 200,000, TorchScript export): the segmented scan's Loop, 18 steps over [200001, 64] rows (a row Gather and the combine each; for max the combine carries the NaN flag and the -0.0-exact select, onnxruntime's Where alone ~0.6 s), ~1.85 s of ~2.3 s; the sort's Loop, 171 compare-exchange steps over 2^18 (key, position) int32 pairs (GatherElements for each slot's partner, integer arithmetic for the exchange), ~0.4 s. The same steps unrolled took about as long (the Loop form measured 1.05x at this size, 1.12-1.17x at E = 20,000). "
         "Memory: `tensorrt --trt-version 8.6` with validation peaks at ~840 MiB on the E = 200,000 GNN layer (RESULTS-torchscript.md), 1,186 MiB with the unrolled network."])
    write_section(lines, write)


if __name__ == "__main__":
    sys.exit(main())
