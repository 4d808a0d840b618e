"""Whole-process wall time and peak memory for the benchmarks that run commands (bench_fold,
bench_scale): ``/usr/bin/time -v``, or for --smoke runs on a machine without it, a stand-in that
prints the same lines."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

TIME = "/usr/bin/time"

# The lines of /usr/bin/time -v the benchmarks read, from a small python process that forks the
# command and reads os.wait4. Not wait4 from the benchmark itself: until exec, Linux counts the
# parent's memory into the child's peak.
_FALLBACK = textwrap.dedent("""
    import os, sys, time
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.execvp(sys.argv[1], sys.argv[1:])
    _, status, usage = os.wait4(pid, 0)
    seconds = time.perf_counter() - started
    print(f"\\tCommand being timed: {' '.join(sys.argv[1:])!r}", file=sys.stderr)
    print(f"\\tElapsed (wall clock) time (h:mm:ss or m:ss): {int(seconds // 60)}:{seconds % 60:05.2f}", file=sys.stderr)
    print(f"\\tMaximum resident set size (kbytes): {usage.ru_maxrss}", file=sys.stderr)
    sys.exit(os.waitstatus_to_exitcode(status))
""")


def have_time() -> bool:
    return Path(TIME).exists()


def timer() -> list[str]:
    """The command prefix that times what follows it."""
    return [TIME, "-v"] if have_time() else [sys.executable, "-c", _FALLBACK]


def measure(command: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS bytes (from /usr/bin/time -v), and the first error line if it failed."""
    proc = subprocess.run(timer() + command, capture_output=True, text=True)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", proc.stderr)
    h, m, s = wall.groups()
    seconds = int(h or 0) * 3600 + int(m) * 60 + float(s)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1)) * 1024
    error = ""
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr + proc.stdout).splitlines()
                 if ln.strip() and not ln.startswith(("\t", "Command exited"))]
        error = lines[-1][:160] if lines else f"exit {proc.returncode}"
    return seconds, rss, error
