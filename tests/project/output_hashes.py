"""The sha256 of what every verb writes (validate=False) for every committed model under
tests/data, one line per (model, verb, options): run before and after a refactor that must not change
behaviour, and compare the two files.

    python tests/project/output_hashes.py > before.txt
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path

import scatter_rewrite as sr
from scatter_rewrite.targets import target_names

DATA = Path(__file__).resolve().parents[1] / "data"


def runs():
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


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.onnx"
        for model in sorted(DATA.rglob("*.onnx")):
            for label, verb, options in runs():
                try:
                    verb(str(model), validate=False, output=str(out), **options)
                    digest = hashlib.sha256(out.read_bytes()).hexdigest()
                except Exception as error:  # the outcome is the record: which error, not a hash
                    digest = f"{type(error).__name__}: {str(error)[:200]}".replace("\n", " ")
                out.unlink(missing_ok=True)
                for extra in Path(tmp).iterdir():
                    extra.unlink()
                print(f"{model.relative_to(DATA)}\t{label}\t{digest}", flush=True)
            checked = sr.check(str(model)).status if hasattr(sr, "check") else ""
            print(f"{model.relative_to(DATA)}\tcheck\t{checked}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
