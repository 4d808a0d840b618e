"""Run every benchmark (benchmarks/bench_*.py) and put their tables into benchmarks/README.md.

    python benchmarks/run_all.py                # all of them
    python benchmarks/run_all.py fold lower     # only bench_fold.py and bench_lower.py
    python benchmarks/run_all.py --tables-only  # no benchmark run: only rebuild the README's tables

Each bench script runs its cases side by side with the peer in one process (medians of several runs)
and writes benchmarks/RESULTS-<area>.md, with the area's underscores as hyphens
(bench_opset_moves.py writes RESULTS-opset-moves.md). This script then replaces the section of
benchmarks/README.md between the ``benchmarks:start`` and ``benchmarks:end`` markers with those
files, in a fixed order.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
README = HERE / "README.md"
ORDER = ["evaluator", "fold", "cli_start", "lower", "lower_modes", "tensorrt", "scale", "torchscript", "opset_moves",
         "no_scatter", "inmemory_api"]
START, END = "<!-- benchmarks:start -->", "<!-- benchmarks:end -->"


def results_file(area: str) -> Path:
    """The RESULTS file ``bench_<area>.py`` writes."""
    return HERE / f"RESULTS-{area.replace('_', '-')}.md"


def update_readme() -> None:
    """Replace the README's section between the markers with every RESULTS file, in ORDER."""
    sections = [results_file(a).read_text().strip() for a in ORDER if results_file(a).exists()]
    text = README.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{README} lacks the {START} / {END} markers")
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    README.write_text(head + START + "\n" + "\n\n".join(sections) + "\n" + END + tail)
    print("benchmarks/README.md tables updated")


def main(args: list[str]) -> int:
    if "--tables-only" in args:
        update_readme()
        return 0
    areas = args or [a for a in ORDER if (HERE / f"bench_{a}.py").exists()]
    failed = []
    for area in areas:
        started = time.perf_counter()
        print(f"== bench_{area}.py", flush=True)
        if subprocess.call([sys.executable, str(HERE / f"bench_{area}.py")]) != 0:
            failed.append(area)
        print(f"== bench_{area}.py took {time.perf_counter() - started:.0f} s", flush=True)
    update_readme()
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
