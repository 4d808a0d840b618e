"""The bytes each verb writes, as a digest per (verb, options, model): run it before and after a
change that must not change what is written (a refactoring of how passes are composed) and compare.

    python benchmarks/written_bytes.py OUT.json            # every case (a few minutes)
    python benchmarks/written_bytes.py OUT.json --quick    # the models/ and small exports only
    python benchmarks/written_bytes.py --compare A.json B.json

The cases: upgrade (default and --opset 13) on every model below opset 11 and on models/; lower
--opset 11/13/16 on the whole-model and PyTorch exports (tests/data) and models/; tensorrt 8.6 and
10, repair, to-scatternd, fold and prepare --target opset-N on the small ones. Without validation
(it changes nothing written: tests/test_orchestration.py), so the run is the passes and the write.
A case that fails records its error's type (its text is not compared: wording may change).
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _models(folder: str) -> list[Path]:
    return sorted((ROOT / folder).glob("*.onnx"))


def _default_opset(path: Path) -> int:
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)


def cases(quick: bool = False) -> list[tuple[str, dict, Path]]:
    small = _models("models") + _models("tests/data/torch") + _models("tests/data/torch_trt")
    whole = [] if quick else _models("tests/data/whole_models")
    every = small + _models("tests/data/torch_repair") + whole
    found = []
    for path in every:
        if path.parent.name == "models" or _default_opset(path) < 11:
            found += [("upgrade", {}, path), ("upgrade", {"opset": 13}, path)]
    for path in small + whole:
        found += [("lower", {"opset": n}, path) for n in (11, 13, 16)]
    for path in small:
        found += [("tensorrt", {"trt_version": v}, path) for v in ("8.6", "10")]
        found += [("to_scatternd", {}, path), ("fold", {}, path)]
        found += [("prepare", {"target": f"opset-{n}"}, path) for n in (11, 13)]
    found += [("repair", {}, path) for path in _models("tests/data/torch_repair")]
    return found


def digest(verb: str, options: dict, path: Path, folder: Path) -> str:
    """sha256 of what ``verb`` writes for ``path`` (and its report's notes), or the error's type."""
    from scatter_rewrite.errors import ScatterRewriteError
    from scatter_rewrite.pipeline import VERBS, rewrite_file

    output = folder / f"{verb}.onnx"
    try:
        bound = VERBS[verb].bind(options)
        outcome = rewrite_file(verb, path, options=bound, output=output, validate=False)
    except ScatterRewriteError as e:
        return f"error {type(e).__name__}"
    if outcome.output is None or not output.exists():
        return f"{outcome.status} (nothing written)"
    written = hashlib.sha256(output.read_bytes()).hexdigest()[:16]
    output.unlink()
    return f"{outcome.status} {written}"


def run(quick: bool) -> dict[str, str]:
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for verb, options, path in cases(quick):
            key = f"{verb} {json.dumps(options, sort_keys=True)} {path.relative_to(ROOT)}"
            results[key] = digest(verb, options, path, Path(folder))
            print(f"{key}: {results[key]}", file=sys.stderr, flush=True)
    return results


def compare(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The cases whose digest differs (or that one run lacks)."""
    return [f"{key}: {before.get(key)} -> {after.get(key)}"
            for key in sorted(set(before) | set(after)) if before.get(key) != after.get(key)]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--compare"]:
        before, after = (json.loads(Path(p).read_text()) for p in argv[1:3])
        differences = compare(before, after)
        print("\n".join(differences) or f"{len(after)} cases, every one the same")
        return 1 if differences else 0
    Path(argv[0]).write_text(json.dumps(run("--quick" in argv), indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
