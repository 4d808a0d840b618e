"""to_scatternd benchmark: onnxruntime latency of the ScatterND form vs the original ScatterElements.

    python benchmarks/bench_tensorrt.py            # 15 timed runs per model (about a minute)
    python benchmarks/bench_tensorrt.py --runs 9

The case: float32 ``data`` 4096x4096, int64 ``indices`` and float32 ``updates`` 4096x256 (256
distinct columns per row, a quarter of them negative), ``ScatterElements(axis=1)``, all graph
inputs. Two shapes: static (the rewrite uses a constant coordinate grid) and dynamic (every
dimension symbolic: the grid is built at run time with Shape/Range/Expand). Each model runs in
onnxruntime on CPU with one intra-op thread and default graph optimizations; runs alternate
between original and rewritten after 3 warm-ups; medians reported, and the outputs are checked
bit-identical. Target: rewritten <= 1.5x the original. Writes benchmarks/RESULTS-tensorrt.md.
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


def bench(name: str, original: onnx.ModelProto, runs: int, feeds: dict) -> dict:
    rewritten = sr.to_scatternd(original)
    ops = [n.op_type for n in rewritten.graph.node]
    a, b = session(original), session(rewritten)
    np.testing.assert_array_equal(a.run(None, feeds)[0], b.run(None, feeds)[0])
    for _ in range(3):
        timed(a, feeds), timed(b, feeds)
    ta, tb = [], []
    for _ in range(runs):
        ta.append(timed(a, feeds))
        tb.append(timed(b, feeds))
    ma, mb = statistics.median(ta), statistics.median(tb)
    row = {"case": name, "original": ma * 1e3, "rewritten": mb * 1e3, "ratio": mb / ma, "ops": " -> ".join(ops)}
    print(f"{name}: ScatterElements {row['original']:.2f} ms, ScatterND form {row['rewritten']:.2f} ms, "
          f"ratio {row['ratio']:.2f}x ({row['ops']})", flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    feeds = inputs()
    static = scatter_model("ScatterElements", opset=18, data_shape=(N, N), indices_shape=(N, K), axis=1)
    dynamic = scatter_model("ScatterElements", opset=18, data_shape=("n", "m"), indices_shape=("r", "k"), axis=1)
    rows = [bench("static shapes", static, args.runs, feeds), bench("dynamic shapes", dynamic, args.runs, feeds)]
    lines = [
        "### to_scatternd: ScatterND form vs the original ScatterElements (onnxruntime, 1 thread)",
        "",
        f"`python benchmarks/bench_tensorrt.py --runs {args.runs}`: float32 data {N}x{N}, {K} updates per row "
        "along axis 1 (int64 indices, a quarter negative), median of "
        f"{args.runs} alternating runs after 3 warm-ups, outputs checked bit-identical. Target: <= {TARGET}x.",
        "",
        "| shapes | ScatterElements (ms) | ScatterND form (ms) | ratio | rewritten graph |",
        "|---|---:|---:|---:|---|",
    ]
    lines += [f"| {r['case']} | {r['original']:.2f} | {r['rewritten']:.2f} | {r['ratio']:.2f}x | {r['ops']} |" for r in rows]
    lines += [
        "",
        f"Machine: {cpu_model()}, {platform.machine()}; Python {platform.python_version()}, numpy {np.__version__}, "
        f"onnxruntime {ort.__version__}, onnx {onnx.__version__}; {os.cpu_count()} cores, 1-minute load average "
        f"{load_before:.1f} before and {os.getloadavg()[0]:.1f} after the run (other jobs share the machine: "
        "compare the ratio, measured with alternating runs, more than the absolute times).",
        "",
        "Where the time goes (onnxruntime profiling of the static case): the ScatterND kernel itself is ~1.15-1.3x "
        "the ScatterElements kernel; building the [4096, 256, 2] coordinates costs a Concat (~7 ms, a last-axis "
        "interleave) and the negative-index normalization ~4 ms (Less/Cast/Mul/Add; the same formula with `Where` "
        "took 13.6 ms for `Where` alone). The dynamic form adds an Expand of the row coordinates (~2-3 ms).",
    ]
    RESULTS.write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS}")
    worst = max(r["ratio"] for r in rows)
    if worst > TARGET:
        print(f"rewritten is {worst:.2f}x the original: above the {TARGET}x target", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
