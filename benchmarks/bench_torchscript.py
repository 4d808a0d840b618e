"""The PyG-style max layer exported both ways, through three commands, at three sizes.

    python benchmarks/bench_torchscript.py           # E = 2,000 / 20,000 / 200,000 (needs torch)
    python benchmarks/bench_torchscript.py --sizes 2000 --runs 3
    python benchmarks/bench_torchscript.py --smoke   # the committed 24-edge exports, prints only

The layer is tests/data/torch/make_gnn_layer.py's: ``out.scatter_reduce_(0,
edge_dst.unsqueeze(-1).expand_as(src), src, "amax")`` on N = E / 10 nodes with F = 64 features,
exported by TorchScript (``dynamo=False``, opset 17: the scatter inside the rank-0 If wrapper, the
output declared flat) and by dynamo (opset 18). For each size, export and command
(``lower --opset 13``, ``tensorrt --trt-version 8.6``, ``tensorrt``): the command's wall time and
peak RSS as a whole process (``/usr/bin/time -v``, under ``prlimit --as`` of :data:`MEMORY_CAP`
so that a blow-up fails instead of taking the shared machine down), validation on (the default),
and again with ``--no-validate`` (the rewrite alone), each the median of ``--repeats`` runs; the
result's node count, and the result's
onnxruntime latency (CPU, one intra-op thread, default optimizations; medians of ``--runs``
after 2 warm-ups) against the dynamo original's (the
TorchScript original does not load in onnxruntime: its output is declared [N * F]). Every
result's output is checked bit for bit against PyTorch's own before its row is printed.

Targets (issue "TorchScript-exported scatters at real sizes"): each command on the TorchScript
export within 1.5x the time and peak RSS of the same command on the dynamo export, never over
2 GiB peak at E = 200,000; the lowered TorchScript model within 1.5x of the lowered dynamo one in
onnxruntime; the TensorRT 8.6 form at most 2x the nodes of ``lower --opset 13``, or a reason.
Writes benchmarks/RESULTS-torchscript.md (not with --smoke).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from bench_scale import machine  # noqa: E402
from _timed import timer  # noqa: E402

RESULTS = HERE / "RESULTS-torchscript.md"
SIZES = (2_000, 20_000, 200_000)
EXPORTS = ("TorchScript", "dynamo")
VERBS = {"lower --opset 13": ["lower", "--opset", "13"],
         "tensorrt --trt-version 8.6": ["tensorrt", "--trt-version", "8.6"],
         "tensorrt": ["tensorrt"]}
MEMORY_CAP = 4_000_000_000  # bytes of address space per command
TARGET = 1.5
HEADER = ("| E | export | command | wall time | peak RSS | --no-validate: wall time | peak RSS "
          "| result nodes | result in onnxruntime | dynamo original in onnxruntime |")


def export_models(workdir: Path, edges: int,
                  smoke: bool) -> dict[str, tuple[Path, dict, np.ndarray]]:
    """{export: (model path, inputs, PyTorch's output)}."""
    found = {}
    for export in EXPORTS:
        if smoke:  # the committed exports (no torch needed)
            name = "gnn_max_layer_ts17" if export == "TorchScript" else "gnn_max_layer_dynamo18"
            path = ROOT / "tests" / "data" / "torch" / f"{name}.onnx"
            arrays = dict(np.load(path.with_suffix(".npz")))
        else:
            sys.path.insert(0, str(ROOT / "tests" / "data" / "torch"))
            from make_gnn_layer import export_layer

            path = workdir / f"{export}_{edges}.onnx"
            arrays = export_layer(path, edges // 10, edges, dynamo=export == "dynamo")
        inputs = {k[3:]: v for k, v in arrays.items() if k.startswith("in_")}
        np.savez(workdir / f"{export}_{edges}.npz", **inputs)  # (--inputs takes input names)
        found[export] = (path, inputs, arrays["out_y"])
    return found


def run_command(args: list[str], repeats: int = 1) -> tuple[float, float, str]:
    """(median wall seconds, median peak RSS MiB, the error line or "") of ``scatter-rewrite ARGS``
    run ``repeats`` times."""
    found = [_run_once(args) for _ in range(repeats)]
    errors = [e for _, _, e in found if e]
    return (statistics.median(t for t, _, _ in found), statistics.median(m for _, m, _ in found),
            errors[0] if errors else "")


def _run_once(args: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MiB, the error line or "") of ``scatter-rewrite ARGS``."""
    cli = Path(sys.executable).parent / "scatter-rewrite"
    cmd = [*timer(), "prlimit", f"--as={MEMORY_CAP}", str(cli), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)",
                     proc.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    seconds = int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3))
    error = ""
    if proc.returncode != 0:
        own = proc.stderr.split("\tCommand being timed")[0]
        lines = [line.strip() for line in own.splitlines()
                 if line.strip() and not line.startswith("Command exited")]
        error = (lines[-1] if lines else f"exit {proc.returncode}")[:160]
    return seconds, int(rss.group(1)) / 1024, error


def session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def latency(sess: ort.InferenceSession, feeds: dict, runs: int) -> float:
    for _ in range(2):
        sess.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def bench(sizes, runs: int, repeats: int, smoke: bool) -> tuple[list[str], dict]:
    rows, measured = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for edges in sizes:
            models = export_models(workdir, edges, smoke)
            dynamo_path, dynamo_feeds, _ = models["dynamo"]
            original_ms = latency(session(dynamo_path), dynamo_feeds, runs)
            for export, (path, feeds, expected) in models.items():
                npz = workdir / f"{export}_{edges}.npz"
                for verb, args in VERBS.items():
                    out = workdir / f"{export}_{edges}_{args[0]}_{len(args)}.onnx"
                    bare = workdir / "unvalidated.onnx"
                    bare_seconds, bare_rss, bare_error = run_command(
                        [*args, str(path), "-o", str(bare), "--no-validate"], repeats)
                    seconds, rss, error = run_command(
                        [*args, str(path), "-o", str(out), "--inputs", str(npz)], repeats)
                    if error or bare_error:
                        rows.append(f"| {edges:,} | {export} | `{verb}` | {seconds:.1f} s "
                                    f"| {rss:.0f} MiB | {bare_seconds:.1f} s | {bare_rss:.0f} MiB "
                                    f"| failed: {error or bare_error} | - | - |")
                        measured[(edges, export, verb)] = (
                            seconds, rss, None, None, bare_seconds, bare_rss)
                        continue
                    result = onnx.load(out, load_external_data=False)
                    nodes = len(result.graph.node)
                    sess = session(out)
                    got = sess.run(None, feeds)[0]
                    np.testing.assert_array_equal(got, expected)  # PyTorch's output, bit for bit
                    result_ms = latency(sess, feeds, runs)
                    measured[(edges, export, verb)] = (
                        seconds, rss, nodes, result_ms, bare_seconds, bare_rss)
                    rows.append(f"| {edges:,} | {export} | `{verb}` | {seconds:.1f} s "
                                f"| {rss:.0f} MiB "
                                f"| {bare_seconds:.1f} s | {bare_rss:.0f} MiB | {nodes} "
                                f"| {result_ms:.2f} ms | {original_ms:.2f} ms |")
                    print(rows[-1], flush=True)
    return rows, measured


def ratios(measured: dict, sizes) -> list[str]:
    """One line per size and command: TorchScript / dynamo for time, memory and the result's
    latency; the TensorRT 8.6 form's nodes against lower --opset 13's."""
    lines = []
    for edges in sizes:
        for verb in VERBS:
            ts = measured.get((edges, "TorchScript", verb))
            dyn = measured.get((edges, "dynamo", verb))
            if not ts or not dyn or ts[2] is None or dyn[2] is None:
                lines.append(f"| {edges:,} | `{verb}` | - | - | - | - | - |")
                continue
            lines.append(f"| {edges:,} | `{verb}` | {ts[0] / dyn[0]:.2f}x | {ts[1] / dyn[1]:.2f}x "
                         f"| {ts[4] / dyn[4]:.2f}x | {ts[5] / dyn[5]:.2f}x "
                         f"| {ts[3] / dyn[3]:.2f}x |")
        for export in EXPORTS:
            trt = measured.get((edges, export, "tensorrt --trt-version 8.6"))
            low = measured.get((edges, export, "lower --opset 13"))
            if trt and low and trt[2] and low[2]:
                lines.append(f"| {edges:,} | {export}: 8.6 nodes / lower nodes "
                             f"| {trt[2]} / {low[2]} "
                             f"= {trt[2] / low[2]:.1f}x | | | | |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each command per median")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    sizes = [24] if args.smoke else args.sizes
    runs = 1 if args.smoke else args.runs
    load_before = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    repeats = 1 if args.smoke else args.repeats
    rows, measured = bench(sizes, runs, repeats, args.smoke)
    table = "\n".join([HEADER, "|---|---|---|---|---|---|---|---|---|---|", *rows])
    ratio_table = "\n".join(["| E | command | TorchScript / dynamo: time | peak RSS "
                              "| --no-validate time | --no-validate peak RSS | result latency |",
                              "|---|---|---|---|---|---|---|", *ratios(measured, sizes)])
    text = f"""## TorchScript and dynamo exports of a PyG max layer: lower and tensorrt

`python benchmarks/bench_torchscript.py{' --smoke' if args.smoke else ''}` — N = E / 10 nodes,
F = 64 features, {runs} onnxruntime run(s) per median; each command validated (the default)
and with `--no-validate`, each the median of {repeats} run(s), under `prlimit --as={MEMORY_CAP}`.
Machine: {machine()}; load average at the start {load_before}.

{table}

{ratio_table}
"""
    print(text)
    if not args.smoke:
        RESULTS.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
