"""The benchmark scripts (benchmarks/bench_*.py), each run whole in its smoke mode: tiny sizes, one
run, printed only. Nothing else runs them between full benchmark runs, so they rotted unnoticed
(bench_tensorrt.py's trt86 part once crashed on a renamed keyword). The numbers mean nothing here;
what is checked is that each script exits 0, prints its tables with one row per case, that its own
comparison with onnxruntime passed, and that it wrote no RESULTS file and left benchmarks/README.md
alone.

Every script checks its outputs before it prints a case's row (np.testing / assert on onnxruntime's
result, or our CLI's validation, which exits non-zero on a mismatch), so a row per case means every
check ran and passed; PYTHONOPTIMIZE is dropped so that those asserts are not compiled away.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def run_benchmark(script: str, *args: str) -> str:
    """Run ``benchmarks/<script>`` as `python benchmarks/<script> ARGS` from the repository root; its stdout."""
    kept = {path: path.read_bytes()
            for path in [*BENCH.glob("RESULTS-*.md"), BENCH / "README.md"]}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONOPTIMIZE", None)
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{script} exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    for path, before in kept.items():
        assert path.read_bytes() == before, f"{script} {' '.join(args)} changed {path.relative_to(ROOT)}"
    return proc.stdout


def table(out: str, header: str, exact: bool = True) -> list[list[str]]:
    """The rows (stripped cells) of the Markdown table in ``out`` whose header line is ``header``
    (or, not ``exact``, begins with it)."""
    lines = out.splitlines()
    found = [i for i, line in enumerate(lines) if line == header or not exact and line.startswith(header)]
    assert found, f"no table with header {header!r} in:\n{out}"
    start = found[0]
    header = lines[start]
    assert lines[start + 1].startswith("|---"), lines[start + 1]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip()[1:-1].split("|")])
    assert all(len(row) == header.count("|") - 1 for row in rows), rows
    return rows


def test_bench_evaluator_quick():
    out = run_benchmark("bench_evaluator.py", "--quick", "--no-reference", "--runs", "1")
    # only the columns read here are pinned: the script's later columns change with its analysis
    rows = table(out, "| case | ours ms | ORT 1-thread ms | onnx.reference ms |", exact=False)
    spec = importlib.util.spec_from_file_location("bench_evaluator", BENCH / "bench_evaluator.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    # each row follows the check of our kernel's output against onnxruntime's for that case
    assert [row[0] for row in rows] == [case.name for case in module.build_cases(True)]
    assert all(row[3] == "-" for row in rows)  # --no-reference


def test_bench_fold_smoke():
    out = run_benchmark("bench_fold.py", "--smoke")
    assert "### fold: a 1 MiB constant scatter" in out
    has_onnxsim = (Path(sys.executable).parent / "onnxsim").exists()  # the script's own test
    if not has_onnxsim:
        assert "onnxsim not installed" in out  # the peer left out, and said so in the Machine line
    rows = {row[0]: row for row in table(
        out, "| tool | wall time | peak RSS | peak RSS / model size | scatters left | note |")}
    ours, validated = "scatter-rewrite fold --no-validate", "scatter-rewrite fold (validated)"
    floor = "scatter-rewrite fold on a 16-element scatter (floor)"
    shared = "python -c 'import onnx' (the floor both tools share)"
    assert list(rows) == [ours, "onnx-graphsurgeon fold_constants", *(["onnxsim"] if has_onnxsim else []),
                          shared, floor, validated]
    assert rows[ours][4] == "0", rows[ours]
    assert "Beyond the floor both share (the interpreter and `import onnx`" in out
    for name in (ours, shared, floor, validated):
        # the note is the error line of a failed run; the validated one compares the folded model
        # with the original in onnxruntime and exits non-zero when they differ
        assert rows[name][5] == "", rows[name]
        assert rows[name][2].endswith(" MiB") and int(rows[name][2].split()[0]) > 0, rows[name]
    f16 = {row[0]: row for row in table(out, "| tool | scatter nodes left (of 1) | error |")}
    assert list(f16) == [ours, "onnx-graphsurgeon fold_constants", *(["onnxsim"] if has_onnxsim else [])]
    assert f16[ours][1:] == ["0", ""], f16[ours]


def test_bench_cli_start_smoke():
    out = run_benchmark("bench_cli_start.py", "--smoke")
    rows = {row[0]: row for row in table(
        out, "| process | wall time | peak RSS | over the interpreter | note |")}
    fold, plain = ("scatter-rewrite fold --no-validate (16-element scatter)",
                   "the same fold, sympy not deferred")
    assert list(rows) == ["python -c pass (the interpreter)", "python -c 'import pydantic'",
                          "pydantic: import, one TypeAdapter built and used",
                          "scatter-rewrite --help", fold, plain]
    for name, row in rows.items():
        assert row[4] == "", row  # the note is the error line of a failed run
        assert row[2].endswith(" MiB") and int(row[2].split()[0]) > 0, row
    imports = {row[0]: row for row in table(
        out, "| import time of the process (`-X importtime`, self times, ms) |", exact=False)}
    assert list(imports) == [fold, plain]
    # what the deferral keeps out: no sympy in the fold's imports, some without the deferral
    assert imports[fold][3] == "0" and int(imports[plain][3]) > 0, imports


def test_bench_lower_smoke():
    out = run_benchmark("bench_lower.py", "--smoke")
    rows = table(out, "| indices | reduction | native opset 18 (ms) | lowered opset 13 (ms) | ratio | main-graph nodes |")
    # a row follows the check of the lowered model's output against the native one's in onnxruntime
    assert [(row[0].split(" ")[0], row[1]) for row in rows] == [
        ("GNN-shaped", "max"), ("GNN-shaped", "add"), ("arbitrary", "max"), ("arbitrary", "add")]
    assert all(row[4].endswith("x") and int(row[5]) > 1 for row in rows), rows


def test_bench_lower_modes_smoke():
    out = run_benchmark("bench_lower_modes.py", "--smoke")
    rows = {row[0]: row for row in table(
        out, "| command | wall time | peak RSS | / standard (time, memory) | note |")}
    assert list(rows)[:2] == ["lower --mode standard", "lower --mode custom"]
    for name in ("lower --mode standard", "lower --mode custom"):
        # the note is the error line of a failed run: validation runs the custom nodes in onnxruntime
        assert rows[name][4] == "", rows[name]
        assert rows[name][2].endswith(" MiB") and int(rows[name][2].split()[0]) > 0, rows[name]


def test_bench_tensorrt_smoke():
    out = run_benchmark("bench_tensorrt.py", "--smoke")
    nd = table(out, "| shapes | ScatterElements (ms) | ScatterND form (ms) | ratio | rewritten graph |")
    # a row follows the check that both forms' outputs are bit-identical in onnxruntime
    assert [row[0] for row in nd] == ["static shapes", "dynamic shapes"]
    assert all(row[4].endswith("-> ScatterND") and "ScatterElements" not in row[4] for row in nd), nd
    trt86 = table(out, "| case | ScatterElements (ms) | 8.6 form (ms) | ratio | nodes |")
    # a row follows validate.compare of the 8.6 form against the native reduction in onnxruntime
    assert [row[0] for row in trt86] == ["GNN-shaped, add", "GNN-shaped, max", "arbitrary indices, add",
                                         "arbitrary indices, max"]
    assert all(int(row[4]) > 1 for row in trt86), trt86


def test_bench_scale_smoke():
    out = run_benchmark("bench_scale.py", "--smoke")
    chains = table(out, "| model | scatter-rewrite | onnx.version_converter | ours / converter | our peak RSS "
                        "| converter peak RSS |")
    assert [row[0] for row in chains] == ["100 nodes (10 Scatter)", "500 nodes (50 Scatter)"]  # each upgrade exited 0
    memory = {row[0]: row for row in table(out, "| command | result | time | peak RSS | peak / model size on disk |")}
    ours = [f"`scatter-rewrite {verb} {flag}`" for verb in ("upgrade", "fold") for flag in ("--no-validate", "--validate")]
    assert list(memory) == [*ours, "onnx.load + convert_version(m, 11) + onnx.save (external)"]
    for label in ours:  # --validate runs both models in onnxruntime and exits non-zero when they differ
        assert memory[label][1] == "ok", memory[label]
    ort = table(out, "| onnxruntime session | RSS after session creation | after one run | process peak |")
    assert len(ort) == 2 and all(cell.endswith(" MiB") and cell != "? MiB" for row in ort for cell in row[1:]), ort


def test_bench_torchscript_smoke():
    out = run_benchmark("bench_torchscript.py", "--smoke")
    rows = table(out, "| E | export | command | wall time | peak RSS | --no-validate: wall time "
                      "| peak RSS | result nodes | result in onnxruntime "
                      "| dynamo original in onnxruntime |")
    # a row follows the check of the result's output against PyTorch's, bit for bit, in onnxruntime
    commands = ["`lower --opset 13`", "`tensorrt --trt-version 8.6`", "`tensorrt`"]
    exports = ("TorchScript", "dynamo")
    assert [(row[1], row[2]) for row in rows] == [(e, c) for e in exports for c in commands]
    assert all(row[7].isdigit() and int(row[7]) > 1 for row in rows), rows  # no "failed: ..."
    by_command = {(row[1], row[2]): int(row[7]) for row in rows}
    # the same row-key lowering for both exports: the TorchScript export has fewer other nodes
    assert by_command[("TorchScript", commands[1])] <= by_command[("dynamo", commands[1])]


def test_bench_no_scatter_smoke():
    out = run_benchmark("bench_no_scatter.py", "--smoke")
    rows = table(out, "| case | reduction | form | declared (MiB) | refused below (MiB) |",
                 exact=False)
    # a row follows this script's check of the form's output against the native model's
    assert sorted((row[0].split(",")[0], row[2]) for row in rows) == [
        ("GNN 50 nodes x 8", "sort"), ("MoE load", "mask"), ("MoE load", "sort"),
        ("MoE rows", "mask"), ("MoE rows", "sort")]
    # tiny forms: the smallest bound, 1 MiB, accepts each; every column was measured
    assert all(row[4] == "1" and "not run" not in "".join(row) for row in rows), rows


def test_bench_inmemory_api_smoke():
    out = run_benchmark("bench_inmemory_api.py", "--smoke")
    rows = table(out, "| call | median (s) | ratio | peak RSS above the model (MiB) |")
    # the rows follow the script's check of the lowered model against the original in onnxruntime
    assert [row[0].split(" (")[0] for row in rows] == [
        "passes alone", "lower(model, opset=13, validate=False)",
        "one onnxruntime session + run of the original, from memory", "lower(model, opset=13)"]
    assert rows[1][2].endswith("x the passes") and rows[3][2].endswith("x the session"), rows
    assert all(float(row[1]) > 0 and row[3].isdigit() for row in rows), rows
