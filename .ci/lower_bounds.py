"""Print a pip constraints file pinning each dependency to the lower bound pyproject.toml declares.

    python .ci/lower_bounds.py [--extra test] > lower-bounds.txt
    pip install -c lower-bounds.txt ".[test]"

Each requirement must declare its minimum as ``>=X`` (``name>=X`` becomes ``name==X``); one that
declares none is an error, so a new dependency cannot go untested at its minimum. Markers (``;``)
are kept, so a dependency for another platform or Python stays conditional.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;]*?)\s*(;.*)?$")


def lower_bound(requirement: str) -> str:
    """``name>=X,<Y ; marker`` -> ``name==X ; marker``."""
    match = _REQUIREMENT.match(requirement)
    if match is None:
        raise ValueError(f"{requirement!r}: not a requirement this script reads")
    name, _, specifiers, marker = match.groups()
    minimums = [s.strip()[2:].strip() for s in specifiers.split(",") if s.strip().startswith(">=")]
    if len(minimums) != 1:
        raise ValueError(f"{requirement!r}: declares no minimum (>=X) to test")
    return f"{name}=={minimums[0]}" + (f" {marker}" if marker else "")


def constraints(pyproject: Path, extras: list[str]) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    return [lower_bound(r) for r in requirements]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", action="append", default=[],
                        help="also pin an optional dependency group's requirements (e.g. test)")
    parser.add_argument("--pyproject", type=Path, default=PYPROJECT)
    args = parser.parse_args(argv)
    try:
        lines = constraints(args.pyproject, args.extra)
    except (ValueError, KeyError) as e:
        print(f"lower_bounds.py: {e}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
