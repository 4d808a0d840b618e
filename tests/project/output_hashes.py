"""The sha256 of what every verb and target writes (validate=False) for the committed models, one
line per (model, verb or target): what must not change when the code is reorganised.

    python tests/project/output_hashes.py > before.txt           # every model (about 5 minutes)
    python tests/project/output_hashes.py --sample                # the sample test_output_hashes.py checks
    python tests/project/output_hashes.py --sample > tests/project/output_hashes.txt   # (a change meant)
    python tests/project/output_hashes.py --compare before.txt after.txt

A run that fails records its error (its type and the start of its text, paths as ROOT/ and TMP/) in
place of a hash; a file written beside the model (external data) is hashed with it.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import scatter_rewrite as sr
from scatter_rewrite.targets import target_names

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
# The sample the test recomputes (about 20 s): the README's models and every fifth export, which
# covers each folder of tests/data (bodies, functions, SAM, TorchScript's repairs, TensorRT's).
SAMPLE_EVERY = 5


def models(sample: bool = False) -> list[Path]:
    exports = sorted(DATA.rglob("*.onnx"))
    if sample:
        exports = exports[::SAMPLE_EVERY]
    return sorted((ROOT / "models").glob("*.onnx")) + exports


def runs() -> Iterator[tuple[str, object, dict]]:
    yield "upgrade", sr.upgrade, {}
    yield "fold", sr.fold, {}
    yield "lower", sr.lower, {}
    yield "to_scatternd", sr.to_scatternd, {}
    yield "tensorrt", sr.prepare_for_tensorrt, {}
    yield "repair", sr.repair, {}
    for name in target_names():
        if name.startswith("opset-") and name not in ("opset-11", "opset-13", "opset-18"):
            continue
        yield f"prepare:{name}", sr.prepare, {"target": name}


def output_lines(sample: bool = False) -> Iterator[str]:
    """``model<TAB>verb<TAB>sha256 or error`` for each model and run."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        out = folder / "out.onnx"

        def said(error: Exception) -> str:
            # (its start: ours; the rest may quote a dependency, whose wording is its own)
            text = str(error).replace(str(folder), "TMP").replace(str(ROOT), "ROOT")
            return f"{type(error).__name__}: {' '.join(text.split())[:120]}"

        for model in models(sample):
            name = model.relative_to(ROOT).as_posix()
            for label, verb, options in runs():
                try:
                    verb(str(model), validate=False, output=str(out), **options)
                    digest = hashlib.sha256()
                    for written in sorted(folder.iterdir()):
                        digest.update(written.name.encode() + b"\0" + written.read_bytes())
                    result = digest.hexdigest()
                except Exception as error:  # the outcome is the record: which error, not a hash
                    result = said(error)
                for written in folder.iterdir():
                    written.unlink()
                yield f"{name}\t{label}\t{result}"
            yield f"{name}\tcheck\t{sr.check(str(model)).status}"


def differing_lines(before: list[str], after: list[str]) -> list[str]:
    """The lines that differ, as ``- before`` / ``+ after``."""
    old, new = set(before), set(after)
    return ([f"- {line}" for line in before if line not in new]
            + [f"+ {line}" for line in after if line not in old])


def main(argv: list[str]) -> int:
    if argv[:1] == ["--compare"] and len(argv) == 3:
        differ = differing_lines(*(Path(p).read_text().splitlines() for p in argv[1:]))
        print("\n".join(differ) or "the same")
        return 1 if differ else 0
    if argv not in ([], ["--sample"]):
        print(__doc__, file=sys.stderr)
        return 2
    for line in output_lines(sample=bool(argv)):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
