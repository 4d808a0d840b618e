"""Run every benchmark (benchmarks/bench_*.py) and put their tables into benchmarks/README.md.

    python benchmarks/run_all.py            # all of them
    python benchmarks/run_all.py fold lower # only bench_fold.py and bench_lower.py

Each bench script runs its cases side by side with the peer in one process (medians of several runs)
and writes benchmarks/RESULTS-<area>.md. This script then replaces the section of
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
ORDER = ["evaluator", "fold", "lower", "tensorrt", "scale", "torchscript"]
START, END = "<!-- benchmarks:start -->", "<!-- benchmarks:end -->"


def main(selected: list[str]) -> int:
    areas = selected or [a for a in ORDER if (HERE / f"bench_{a}.py").exists()]
    failed = []
    for area in areas:
        started = time.perf_counter()
        print(f"== bench_{area}.py", flush=True)
        if subprocess.call([sys.executable, str(HERE / f"bench_{area}.py")]) != 0:
            failed.append(area)
        print(f"== bench_{area}.py took {time.perf_counter() - started:.0f} s", flush=True)
    sections = [(HERE / f"RESULTS-{a}.md").read_text().strip() for a in ORDER if (HERE / f"RESULTS-{a}.md").exists()]
    text = README.read_text()
    if START in text and END in text:
        head, rest = text.split(START, 1)
        tail = rest.split(END, 1)[1]
        README.write_text(head + START + "\n" + "\n\n".join(sections) + "\n" + END + tail)
        print("benchmarks/README.md tables updated")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
