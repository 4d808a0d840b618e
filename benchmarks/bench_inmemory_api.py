"""The Python API on a model held in memory: ``lower`` against the passes alone and against one
onnxruntime session of the original.

    python benchmarks/bench_inmemory_api.py [--mib 1024] [--runs 3]
    python benchmarks/bench_inmemory_api.py --smoke    # 8 MiB, 1 run, prints only (tests/project/test_benchmarks.py)

An ``onnx_ir.Model`` as ``torch.onnx.export(..., dynamo=True).model`` gives one: its weights
(16 float32 initializers, ``--mib`` in all) held in memory, read through cheap ops
(``s = x + W0[k0] + ... + W15[k15]``), and one ScatterElements max (``y = ScatterElements(s, idx,
upd, axis=1, reduction="max")``, opset 18). In one process, alternating, medians after a warm-up:

- ``scatter_rewrite.lower(model, opset=13, validate=False)`` against the passes alone
  (``verbs.lower_passes(13)`` run on a clone of the model, the clone not timed);
- ``scatter_rewrite.lower(model, opset=13)`` (validated) against one onnxruntime session of the
  original made from memory and one run (the model serialized to bytes, the session, the run:
  what a user with the model in memory pays to run it once).

Peak memory: the process's peak RSS during each call above its RSS before it (the model itself),
from /proc/self/status's VmHWM, reset before each call (/proc/self/clear_refs). Each lowered model
is checked against the original in onnxruntime (max: bit for bit). Writes
benchmarks/RESULTS-inmemory-api.md (not with --smoke).
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import scatter_rewrite as sr  # noqa: E402
from scatter_rewrite import verbs  # noqa: E402

HERE = Path(__file__).parent
WEIGHTS, ROWS = 16, 16
NOTE = ("Nothing is saved in either call. Validated, the two onnxruntime sessions get the weights as "
        "OrtValues over the model's own arrays; the peak above the model is onnxruntime's copy of them "
        "while a session is made, freed after it. The peer serializes the model (a copy), hands the "
        "bytes over (a second) and onnxruntime parses them (a third).")


def build(mib: int) -> ir.Model:
    """The model (see the module's docstring), its weights ``mib`` MiB of in-memory tensors."""
    cols = mib * 2**20 // (4 * ROWS * WEIGHTS)
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([1, cols]))
    idx = ir.Value(name="idx", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([1, 4]))
    upd = ir.Value(name="upd", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([1, 4]))
    nodes, initializers, total = [], [], x
    for w in range(WEIGHTS):
        array = np.empty((ROWS, cols), np.float32)
        array[:] = np.arange(cols, dtype=np.float32) * np.float32(1e-6)
        array += np.arange(ROWS, dtype=np.float32)[:, None] + np.float32(w * ROWS)
        weight = ir.Value(name=f"W{w}", const_value=ir.Tensor(array, name=f"W{w}"),
                          type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([ROWS, cols]))
        row = ir.Value(name=f"k{w}", const_value=ir.tensor(np.array([(3 * w + 1) % ROWS]),
                                                           name=f"k{w}"),
                       type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([1]))
        initializers += [weight, row]
        gather = ir.node("Gather", [weight, row], {"axis": 0}, name=f"gather_{w}")
        add = ir.node("Add", [total, gather.outputs[0]], name=f"add_{w}")
        nodes += [gather, add]
        total = add.outputs[0]
    scatter = ir.node("ScatterElements", [total, idx, upd], {"axis": 1, "reduction": "max"},
                      name="scatter_max")
    y = scatter.outputs[0]
    y.name, y.type, y.shape = "y", ir.TensorType(ir.DataType.FLOAT), ir.Shape([1, cols])
    graph = ir.Graph([x, idx, upd], [y], nodes=[*nodes, scatter], initializers=initializers,
                     opset_imports={"": 18}, name="inmemory")
    return ir.Model(graph, ir_version=10)


def feeds(model: ir.Model) -> dict[str, np.ndarray]:
    cols = model.graph.inputs[0].shape[1]
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((1, cols)).astype(np.float32),
            "idx": np.array([[0, cols - 1, 2, 2]], np.int64),
            "upd": rng.standard_normal((1, 4)).astype(np.float32) * 100}


def run_once(model: ir.Model, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """One onnxruntime session of ``model`` made from memory, and one run (the peer)."""
    data = ir.serde.serialize_model(model).SerializeToString()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    del data
    return session.run(None, inputs)[0]


def passes_alone(model: ir.Model) -> float:
    """Seconds the lowering's passes take on a clone of ``model`` (the clone not timed)."""
    clone = model.clone()
    passes = verbs.lower_passes(13)
    started = time.perf_counter()
    for p in passes:
        p(clone)
    return time.perf_counter() - started


def _rss_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field)) / 1024


def measured(call) -> tuple[float, float, object]:
    """(seconds, peak RSS above the RSS before, in MiB, result) of ``call()``."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # (resets VmHWM to the current RSS)
    before = _rss_mib("VmRSS")
    started = time.perf_counter()
    result = call()
    seconds = time.perf_counter() - started
    return seconds, max(0.0, _rss_mib("VmHWM") - before), result


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    return (f"{cpu}, {platform.machine()}; Python {platform.python_version()}, onnx_ir "
            f"{ir.__version__}, onnxruntime {ort.__version__}, onnx {onnx.__version__}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=1024, help="the weights' size")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--smoke", action="store_true",
                        help="8 MiB of weights, 1 run, print only: that the script still works")
    args = parser.parse_args()
    if args.smoke:
        args.mib, args.runs = 8, 1
        print("smoke run: tiny sizes and 1 run, so the numbers mean nothing; no RESULTS file "
              "written", flush=True)
    model = build(args.mib)
    inputs = feeds(model)
    expected = run_once(model, inputs)
    cases = {
        "passes alone (verbs.lower_passes(13), on a clone)":
            lambda: passes_alone(model),
        "lower(model, opset=13, validate=False)":
            lambda: sr.lower(model, opset=13, validate=False),
        "one onnxruntime session + run of the original, from memory":
            lambda: run_once(model, inputs),
        "lower(model, opset=13) (validated)":
            lambda: sr.lower(model, opset=13),
    }
    lowered = sr.lower(model, opset=13, validate=False)  # (warm-up, and checked)
    assert lowered.opset_imports[""] == 13
    assert np.array_equal(run_once(lowered, inputs), expected), "max must be bit for bit"
    del lowered
    times: dict[str, list[float]] = {name: [] for name in cases}
    peaks: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, call in cases.items():
            seconds, peak, result = measured(call)
            if name.startswith("passes"):
                seconds = result  # (the passes' own time, without the clone)
            del result
            times[name].append(seconds)
            peaks[name].append(peak)
            print(f"{name}: {seconds:.3f} s, +{peak:.0f} MiB", flush=True)
    median = {name: statistics.median(v) for name, v in times.items()}
    peak = {name: max(v) for name, v in peaks.items()}
    names = list(cases)
    ratios = {names[0]: "1x", names[1]: f"{median[names[1]] / median[names[0]]:.1f}x the passes",
              names[2]: "1x", names[3]: f"{median[names[3]] / median[names[2]]:.2f}x the session"}
    lines = [
        "### in-memory API: lower on an onnx_ir.Model, against the passes alone and one "
        "onnxruntime session",
        "",
        f"`python benchmarks/bench_inmemory_api.py --mib {args.mib} --runs {args.runs}`: an "
        f"onnx_ir.Model with {args.mib} MiB of float32 weights in memory ({WEIGHTS} "
        "initializers, read through Gather + Add) and one ScatterElements max, opset 18; median "
        f"of {args.runs} alternating runs in one process after a warm-up; the lowered model checked "
        "bit for bit against the original in onnxruntime. Peak memory: the process's peak RSS "
        "during the call above its RSS before it (which holds the model). Targets: "
        "validate=False within 10x the passes alone, validated within 4x one session + run.",
        "",
        "| call | median (s) | ratio | peak RSS above the model (MiB) |",
        "|---|---:|---:|---:|",
    ]
    for name in names:
        lines.append(f"| {name} | {median[name]:.3f} | {ratios[name]} | {peak[name]:.0f} |")
    lines += ["", NOTE, "", f"Machine: {machine()}."]
    if args.smoke:
        print("\n".join(lines))
    else:
        (HERE / "RESULTS-inmemory-api.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
