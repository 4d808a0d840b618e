"""lower: the opset-13 lowering vs the native opset-18 ScatterElements reduction, in onnxruntime.

    python benchmarks/bench_lower.py [--runs 7]
    python benchmarks/bench_lower.py --smoke    # tiny sizes, 1 run, prints only (tests/project/test_benchmarks.py)

float32 data 20000x64, 200000 update rows of 64 features (12.8M update elements), axis 0,
reductions max and add. "GNN-shaped": the model takes dst[E] and builds the index
``Expand(Unsqueeze(dst, 1), [1, 64])`` (PyG message passing); "arbitrary": the model takes a full
int64 index tensor [E, 64] with independent random rows. Both models run in one process, one
intra-op thread, alternating, medians after a warm-up; outputs are checked (max bit-exact, add
within validation's float32 tolerance). Writes benchmarks/RESULTS-lower.md (not with --smoke).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort
from onnx import TensorProto

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import scatter_rewrite as sr  # noqa: E402

N, F, E = 20000, 64, 200000
SMOKE_N, SMOKE_F, SMOKE_E = 500, 8, 4000
HERE = Path(__file__).parent
NOTE = ("Why the arbitrary case is slow: each of the 12.8M update elements is its own key, so the lowering "
        "sorts 12.8M int64 keys (TopK) and reduces element by element in the Loop. The native kernel is a single "
        "pass. GNN-shaped indices sort only the 200000 row keys and move 64-float rows; they beat the native "
        "kernel, which also materializes the [E, 64] Expand.")


def model(reduction: str, gnn: bool) -> onnx.ModelProto:
    vi = oh.make_tensor_value_info
    if gnn:
        nodes = [
            oh.make_node("Constant", [], ["one"], value=oh.make_tensor("one_v", TensorProto.INT64, [1], [1])),
            oh.make_node("Unsqueeze", ["dst", "one"], ["dst2"]),
            oh.make_node("Constant", [], ["shape"], value=oh.make_tensor("s_v", TensorProto.INT64, [2], [1, F])),
            oh.make_node("Expand", ["dst2", "shape"], ["index"]),
        ]
        index_input = vi("dst", TensorProto.INT64, ["E"])
    else:
        nodes = []
        index_input = vi("index", TensorProto.INT64, ["E", F])
    nodes.append(oh.make_node("ScatterElements", ["x", "index", "msg"], ["y"], axis=0, reduction=reduction))
    graph = oh.make_graph(nodes, "bench", [vi("x", TensorProto.FLOAT, ["N", F]), index_input,
                                           vi("msg", TensorProto.FLOAT, ["E", F])], [vi("y", TensorProto.FLOAT, ["N", F])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


def session(proto: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), platform.processor())
    return (f"{cpu}, {platform.machine()}; Python {platform.python_version()}, numpy {np.__version__}, "
            f"onnxruntime {ort.__version__}, onnx {onnx.__version__}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--smoke", action="store_true",
                        help=f"data {SMOKE_N}x{SMOKE_F}, {SMOKE_E} updates, 1 run, print only: that the script still works")
    args = parser.parse_args()
    global N, F, E
    if args.smoke:
        N, F, E, args.runs = SMOKE_N, SMOKE_F, SMOKE_E, 1
        print("smoke run: tiny sizes and 1 run, so the numbers mean nothing; no RESULTS file written", flush=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, F)).astype(np.float32)
    msg = rng.standard_normal((E, F)).astype(np.float32)
    dst = rng.integers(0, N, E)
    rows = []
    for gnn in (True, False):
        feeds = {"x": x, "msg": msg, ("dst" if gnn else "index"): dst if gnn else rng.integers(0, N, (E, F))}
        for reduction in ("max", "add"):
            native = model(reduction, gnn)
            lowered = sr.lower(native, opset=13, validate=False)  # (compared below)
            sessions = {"native": session(native), "lowered": session(lowered)}
            outs = {k: s.run(None, feeds)[0] for k, s in sessions.items()}  # warm-up
            if reduction == "max":
                assert np.array_equal(outs["native"], outs["lowered"]), "max must be bit-exact"
            else:
                np.testing.assert_allclose(outs["lowered"], outs["native"], rtol=1e-5, atol=1e-5)
            times = {k: [] for k in sessions}
            for _ in range(args.runs):
                for k, s in sessions.items():
                    started = time.perf_counter()
                    s.run(None, feeds)
                    times[k].append(time.perf_counter() - started)
            med = {k: statistics.median(v) * 1000 for k, v in times.items()}
            label = "GNN-shaped (Expand(Unsqueeze(dst)))" if gnn else f"arbitrary indices [E, {F}]"
            rows.append((label, reduction, med["native"], med["lowered"], len(lowered.graph.node)))
            print(f"{label:40s} {reduction}: native {med['native']:.1f} ms, lowered {med['lowered']:.1f} ms "
                  f"({med['lowered'] / med['native']:.2f}x)", flush=True)
    lines = [
        "### lower: opset-13 lowering vs native opset-18 ScatterElements reduction (onnxruntime, 1 thread)",
        "",
        f"`python benchmarks/bench_lower.py --runs {args.runs}`: float32 data {N}x{F}, {E} update rows of {F} "
        f"features ({E * F / 1e6:.1f}M update elements), axis 0, median of {args.runs} alternating runs after a "
        "warm-up; max checked bit-exact, add within float32 tolerance. Target: GNN-shaped <= 1.5x native.",
        "",
        "| indices | reduction | native opset 18 (ms) | lowered opset 13 (ms) | ratio | main-graph nodes |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for label, reduction, native_ms, lowered_ms, count in rows:
        lines.append(f"| {label} | {reduction} | {native_ms:.1f} | {lowered_ms:.1f} | {lowered_ms / native_ms:.2f}x | {count} |")
    lines += ["", NOTE, "", f"Machine: {machine()}."]
    if args.smoke:
        print("\n".join(lines))
    else:
        (HERE / "RESULTS-lower.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
