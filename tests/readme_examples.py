"""Run every ``scatter-rewrite`` command README.md shows and compare what it prints with the README.

    python tests/readme_examples.py            # check: exit 1 with a diff when an output differs
    python tests/readme_examples.py --update   # rewrite the README's sample outputs in place

The examples are the ```` ```console ```` blocks: a line ``$ scatter-rewrite ...`` is a command, the
lines after it (up to the next ``$`` line or the block's end) are what it prints, stdout and stderr
as one stream. The commands run in order, in a temporary copy of ``models/`` (a later command may
read what an earlier one wrote), with ``COLUMNS=100`` so that tables wrap the same everywhere.
Only times, temporary paths and nonzero float differences are normalized before comparing.

Uses nothing but the standard library and the installed ``scatter-rewrite`` command, so that CI can
run it from a fresh clone (``.ci/run``) as well as pytest (``tests/project/test_readme.py``).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_LIMIT = 10_240  # bytes
COLUMNS = "100"
COMMAND_PREFIX = "$ scatter-rewrite "
TIME = re.compile(r"\b\d+(\.\d+)? s\b")
# A float difference that is not exactly 0 depends on how the CPU rounds: compare its presence only.
DIFFERENCE = re.compile(r"(max \|difference\| )(?!0\b)[-+.\deE]+")


@dataclass
class Example:
    command: str  # the text after "$ "
    expected: list[str]  # README lines of its output
    start: int  # index in the README's lines of the "$" line
    end: int  # index one past its last output line


def examples(text: str) -> list[Example]:
    """Every ``$ scatter-rewrite`` command of the README's console blocks, with its output."""
    lines = text.split("\n")
    found: list[Example] = []
    in_console = False
    for index, line in enumerate(lines):
        if line.startswith("```"):
            in_console = line.strip() == "```console"
            continue
        if not in_console:
            continue
        if line.startswith("$ "):
            if not line.startswith(COMMAND_PREFIX):
                raise ValueError(f"README.md line {index + 1}: a console example runs "
                                 f"something else: {line}")
            found.append(Example(line[2:], [], index, index + 1))
        elif found and found[-1].end == index:
            found[-1].expected.append(line)
            found[-1].end = index + 1
    return found


def install_command(text: str) -> str:
    """The command of the README's ``## Install`` section (its first code block)."""
    section = text.split("\n## Install", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return block.strip()


def normalize(output: str) -> str:
    output = TIME.sub("<time> s", output)
    output = DIFFERENCE.sub(r"\1<nonzero>", output)
    return "\n".join(line.rstrip() for line in output.rstrip("\n").split("\n"))


def executable(name: str) -> str:
    """``name`` from the environment of the Python running this (a venv need not be activated)."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name) or name


def run_all(found: list[Example], models: Path = ROOT / "models") -> list[str]:
    """Run each example's command in a fresh copy of ``models``; their outputs, in order."""
    env = {**os.environ, "COLUMNS": COLUMNS, "PYTHONUNBUFFERED": "1", "NO_COLOR": "1"}
    env.pop("FORCE_COLOR", None)
    outputs = []
    with tempfile.TemporaryDirectory(prefix="readme-examples-") as tmp:
        workdir = Path(tmp)
        written = [f"*.{verb}.onnx*" for verb in ("upgraded", "folded", "lowered", "tensorrt")]
        shutil.copytree(models, workdir / "models",
                        ignore=shutil.ignore_patterns("*.py", "__pycache__", *written))
        for example in found:
            argv = shlex.split(example.command)
            argv[0] = executable(argv[0])
            proc = subprocess.run(argv, cwd=workdir, env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
            output = proc.stdout.replace(str(workdir) + os.sep, "").replace(str(workdir), ".")
            outputs.append(output.rstrip("\n"))
    return outputs


def mismatches(found: list[Example], outputs: list[str]) -> list[str]:
    """A unified diff per example whose output differs from the README's (normalized)."""
    diffs = []
    for example, output in zip(found, outputs):
        expected = normalize("\n".join(example.expected))
        actual = normalize(output)
        if expected != actual:
            diff = difflib.unified_diff(expected.split("\n"), actual.split("\n"),
                                        "README.md", "actual", lineterm="")
            diffs.append(f"$ {example.command}\n" + "\n".join(diff))
    return diffs


def update(text: str, found: list[Example], outputs: list[str]) -> str:
    """The README with each example's output replaced by ``outputs`` (from the last one up)."""
    lines = text.split("\n")
    for example, output in reversed(list(zip(found, outputs))):
        lines[example.start + 1:example.end] = [line.rstrip() for line in output.split("\n")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--update", action="store_true", help="rewrite the README's sample outputs")
    parser.add_argument("--install-command", action="store_true",
                        help="print the README's install command")
    args = parser.parse_args(argv)
    text = README.read_text(encoding="utf-8")
    if args.install_command:
        print(install_command(text))
        return 0
    found = examples(text)
    outputs = run_all(found)
    if args.update:
        README.write_text(update(text, found, outputs), encoding="utf-8")
        text = README.read_text(encoding="utf-8")
        print(f"README.md: {len(found)} example outputs rewritten")
    else:
        diffs = mismatches(found, outputs)
        for diff in diffs:
            print(diff, file=sys.stderr)
        if diffs:
            print(f"{len(diffs)} of {len(found)} README example(s) print something else; "
                  "refresh with python tests/readme_examples.py --update", file=sys.stderr)
            return 1
        print(f"README.md: the {len(found)} examples print what it says")
    size = len(text.encode("utf-8"))
    if size > README_LIMIT:
        print(f"README.md is {size} bytes, over the {README_LIMIT}-byte limit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
