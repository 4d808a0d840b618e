"""CLI start-up benchmark: what pydantic (imported by typer 0.29 and later) and sympy (imported by
onnx_ir, deferred by the command) cost a run, whole processes side by side.

    python benchmarks/bench_cli_start.py            # 7 runs per row (about two minutes)
    python benchmarks/bench_cli_start.py --runs 3
    python benchmarks/bench_cli_start.py --smoke    # 1 run, prints only (tests/project/test_benchmarks.py)

Rows, each a whole process timed by ``/usr/bin/time -v`` (wall clock, peak RSS), runs alternating
between rows, medians reported:
- the interpreter alone (``python -c pass``), the floor of every row;
- ``import pydantic``, and what typer does with it for each parameter that is not a flag: a
  ``pydantic.TypeAdapter`` built and used (pydantic imports its validators lazily: the first
  adapter is most of its cost);
- ``scatter-rewrite --help`` (neither onnx nor pydantic) and ``scatter-rewrite fold MODEL -o OUT
  --no-validate`` on a 16-element scatter (the fold benchmark's floor), and that fold again with
  the command's deferral of sympy switched off (what cli/lazy_imports.py saves).
Also the fold run's import time by package (``python -X importtime``, self times summed, medians
of the runs): pydantic's share of the command's own start-up, which cannot be run without it
while typer needs it.

Writes benchmarks/RESULTS-cli-start.md (not with --smoke).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
from importlib.metadata import version
from pathlib import Path

from _timed import TIME, have_time, measure  # benchmarks/_timed.py

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS-cli-start.md"
PYTHON = sys.executable
CLI = str(Path(PYTHON).parent / "scatter-rewrite")

ADAPTER = textwrap.dedent("""
    from pydantic import TypeAdapter
    assert TypeAdapter(list[str]).validate_python(["m.onnx"]) == ["m.onnx"]
""")
# The command as its console script runs it, with the deferral of sympy made a no-op.
WITHOUT_DEFERRAL = textwrap.dedent("""
    import sys
    import scatter_rewrite.cli
    sys.modules["scatter_rewrite.cli.app"].defer_imports = lambda: None
    sys.argv = ["scatter-rewrite", *sys.argv[1:]]
    scatter_rewrite.cli.main()
""")
PYDANTIC_PACKAGES = ("pydantic", "pydantic_core", "typing_inspection", "annotated_types")
FOLD = "scatter-rewrite fold --no-validate (16-element scatter)"
NO_DEFERRAL = "the same fold, sympy not deferred"
FOLD_MODEL_BYTES = 79692013  # bench_fold.py's 64 MiB scatter model file


def tiny_model(folder: Path) -> Path:
    import numpy as np
    import onnx

    from scatter_rewrite.testing import constant_scatter_model

    path = folder / "tiny.onnx"
    onnx.save(constant_scatter_model("ScatterElements", data=np.zeros((4, 4), np.float32),
                                     indices=np.zeros((1, 4), np.int64),
                                     updates=np.ones((1, 4), np.float32)), path)
    return path


def rows(model: Path, out: Path) -> dict[str, list[str]]:
    fold = ["fold", str(model), "-o", str(out), "--no-validate", "-q"]
    return {
        "python -c pass (the interpreter)": [PYTHON, "-c", "pass"],
        "python -c 'import pydantic'": [PYTHON, "-c", "import pydantic"],
        "pydantic: import, one TypeAdapter built and used": [PYTHON, "-c", ADAPTER],
        "scatter-rewrite --help": [CLI, "--help"],
        FOLD: [CLI, *fold],
        NO_DEFERRAL: [PYTHON, "-c", WITHOUT_DEFERRAL, *fold],
    }


def import_times(command: list[str]) -> tuple[float, float, float]:
    """(all imports, pydantic's packages, sympy's) self times in ms of one ``-X importtime`` run."""
    proc = subprocess.run([PYTHON, "-X", "importtime", *command[1:]] if command[0] == PYTHON
                          else [PYTHON, "-X", "importtime", command[0], *command[1:]],
                          capture_output=True, text=True)
    total = pydantic = sympy = 0.0
    for line in proc.stderr.splitlines():
        found = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if not found:
            continue
        ms, top = int(found.group(1)) / 1000, found.group(2).split(".")[0]
        total += ms
        pydantic += ms if top in PYDANTIC_PACKAGES else 0.0
        sympy += ms if top in ("sympy", "mpmath") else 0.0
    return total, pydantic, sympy


def machine() -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    cores = len([ln for ln in Path("/proc/cpuinfo").read_text().splitlines()
                 if ln.startswith("processor")])
    versions = [f"python {platform.python_version()}"] + [
        f"{name} {version(name)}" for name in ("typer", "pydantic", "pydantic-core", "onnx-ir", "sympy")]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{cpu}, {cores} cores (load average at the end {load}: a shared machine); " + ", ".join(versions)


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.0f} MiB"


def results_text(samples: dict[str, list[tuple[float, int, str]]],
                 imports: dict[str, list[tuple[float, float, float]]], runs: int) -> str:
    med = {name: (statistics.median(s[0] for s in got), statistics.median(s[1] for s in got),
                  next((s[2] for s in got if s[2]), "")) for name, got in samples.items()}
    floor_t, floor_m, _ = med["python -c pass (the interpreter)"]
    lines = [
        "### CLI start-up: what pydantic (typer >= 0.29) and sympy (onnx_ir) cost a run",
        "",
        f"Whole processes, medians of {runs} runs (rows alternating), wall time and peak RSS from "
        "`/usr/bin/time -v`; \"over the interpreter\" subtracts the `python -c pass` row. Times move "
        "with the machine's load (the Machine line), peak RSS does not.",
        "",
        "| process | wall time | peak RSS | over the interpreter | note |",
        "|---|---|---|---|---|",
    ]
    for name, (t, m, err) in med.items():
        lines.append(f"| {name} | {t:.2f} s | {mib(m)} | +{t - floor_t:.2f} s, +{mib(m - floor_m)} "
                     f"| {err} |")
    fold_t, fold_m, _ = med[FOLD]
    plain_t, plain_m, _ = med[NO_DEFERRAL]
    adapter_t, adapter_m, _ = med["pydantic: import, one TypeAdapter built and used"]
    pyd_t, pyd_m, _ = med["python -c 'import pydantic'"]
    lines += ["", "| import time of the process (`-X importtime`, self times, ms) | all imports | "
              "pydantic's packages | sympy with mpmath |", "|---|---|---|---|"]
    for name, got in imports.items():
        total, pyd, sym = (statistics.median(x[i] for x in got) for i in range(3))
        lines.append(f"| {name} | {total:.0f} | {pyd:.0f} ({pyd / total:.0%}) | {sym:.0f} |")
    fold_total, fold_pyd, _ = (statistics.median(x[i] for x in imports[FOLD]) for i in range(3))
    lines += [
        "",
        f"- pydantic, as typer uses it, costs a process about {adapter_t - floor_t:.2f} s and "
        f"{mib(adapter_m - floor_m)} over the bare interpreter (`import pydantic` alone "
        f"+{pyd_t - floor_t:.2f} s and {mib(pyd_m - floor_m)}: the first adapter loads its core and "
        "validators). In the fold's own run its "
        f"packages take {fold_pyd:.0f} ms of {fold_total:.0f} ms of imports (imports only: the "
        "adapters' schema building comes on top, as in the adapter row). typer 0.29 and later "
        "coerce every parameter that is not a flag through a pydantic TypeAdapter (the MODEL "
        "argument of every verb), with no public way around it; `--help` and `--version` do not "
        "load it. Below typer 0.29 none of it is paid. Against the fold benchmark's model "
        f"(76 MiB, RESULTS-fold.md) that memory is {(adapter_m - floor_m) / FOLD_MODEL_BYTES:.2f}x "
        "the model's size, of the 2x its peak must stay under.",
        f"- sympy's deferral (cli/lazy_imports.py) saves the fold {plain_t - fold_t:.2f} s and "
        f"{mib(plain_m - fold_m)}.",
    ]
    lines += ["", f"Machine: {machine()}.", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--smoke", action="store_true",
                        help="1 run, print only (no RESULTS file): that the script still works")
    args = parser.parse_args()
    if args.smoke:
        args.runs = 1
        print("smoke run: 1 run, so the numbers mean nothing; no RESULTS file written", flush=True)
    elif not have_time():
        print(f"{TIME} is missing: apt-get update && apt-get install -y time", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="bench_cli_start_") as folder:
        model = tiny_model(Path(folder))
        out = Path(folder) / "out.onnx"
        commands = rows(model, out)
        samples: dict[str, list[tuple[float, int, str]]] = {name: [] for name in commands}
        imports: dict[str, list[tuple[float, float, float]]] = {FOLD: [], NO_DEFERRAL: []}
        for run in range(args.runs):
            for name, command in commands.items():  # alternating, so drift hits every row alike
                samples[name].append(measure(command))
                print(f"run {run + 1}/{args.runs} {name}: {samples[name][-1][0]:.2f} s, "
                      f"{mib(samples[name][-1][1])} {samples[name][-1][2]}", flush=True)
            for name in imports:
                imports[name].append(import_times(commands[name]))
        if not out.exists():
            print("the fold wrote no output", file=sys.stderr)
            return 1
    text = results_text(samples, imports, args.runs)
    if not args.smoke:
        RESULTS.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
