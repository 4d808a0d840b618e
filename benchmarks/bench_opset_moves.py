"""Opset moves on ONNX's own backend node test cases: ours against onnx.version_converter.

    python benchmarks/bench_opset_moves.py            # every case, targets 11, 13, 17 (minutes)
    python benchmarks/bench_opset_moves.py --smoke    # a sample of cases, prints only

Every node case whose model is above the target and which onnxruntime runs correctly as it is, moved
to the target by ``scatter_rewrite.lower(model, opset=T, validate=False)`` and by
``onnx.version_converter.convert_version``, each result judged in onnxruntime against the case's
expected outputs (floats rtol=1e-3, atol=1e-5, everything else exact) and by onnx.checker (full):
tests/helpers/backend_cases.py. Writes benchmarks/RESULTS-opset-moves.md (not with
--smoke).
"""

from __future__ import annotations

import argparse
import collections
import platform
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

from tests.helpers import backend_cases  # noqa: E402  (the sweep's harness)

RESULTS = Path(__file__).resolve().parent / "RESULTS-opset-moves.md"
SMOKE_EVERY = 40  # --smoke: every 40th case above the target


def _reason(why: str) -> str:
    """A refusal's reason without the node's name, to group them."""
    why = re.sub(r" '[^']*' \(opset \d+, [^)]*\)", "", why)
    return re.sub(r"^cannot convert ", "", why)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    rows, reasons, wrong = [], {}, []
    start = time.perf_counter()
    for target in backend_cases.TARGETS:
        names = None
        if args.smoke:
            above = [
                c.name
                for c in backend_cases.node_cases()
                if backend_cases.model_opset(c.model) > target
            ]
            names = set(above[::SMOKE_EVERY])
        judged = backend_cases.sweep(target, names)
        counts = backend_cases.counts(judged)
        ours, converter, total = counts["ours"], counts["converter"], len(judged)
        rows.append(
            f"| {target} | {total} | {ours['correct']} ({100 * ours['correct'] / total:.1f}%) | "
            f"{ours['refused']} | {ours['wrong']} | {converter['correct']} "
            f"({100 * converter['correct'] / total:.1f}%) | {converter['refused']} | "
            f"{converter['wrong']} |"
        )
        reasons[target] = collections.Counter(_reason(j.why) for j in judged if j.ours == "refused")
        wrong += [f"{j.case} at {target}: {j.why}" for j in judged if j.ours == "wrong"]
        print(rows[-1], flush=True)
    lines = [
        "## Opset moves on ONNX's backend node test cases",
        "",
        f"`python benchmarks/bench_opset_moves.py`{' --smoke (a sample)' if args.smoke else ''}: "
        "every node case whose model is above the target and which onnxruntime runs correctly as "
        "it is (the base), moved by `scatter_rewrite.lower(model, opset=T, validate=False)` and by "
        "`onnx.version_converter`, judged by onnx.checker (full) and by onnxruntime against the "
        "case's expected outputs (floats rtol=1e-3, atol=1e-5, everything else exact). Wrong: a "
        "model came back that fails the checker, that onnxruntime refuses, or "
        "whose outputs differ; refused: an error instead of a model.",
        f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, "
        f"Python {platform.python_version()}; "
        f"{time.perf_counter() - start:.0f} s.",
        "",
        "| target | base | ours: correct | ours: refused | ours: wrong | converter: correct "
        "| converter: refused "
        "| converter: wrong |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]
    if wrong:
        lines += ["Wrong results:", "", *[f"- {w}" for w in wrong], ""]
    for target, counter in reasons.items():
        lines += [
            f"### Our refusals at opset {target}, by reason",
            "",
            "| cases | op and reason |",
            "|---|---|",
        ]
        lines += [f"| {n} | {why.replace('|', '/')} |" for why, n in counter.most_common()]
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if not args.smoke:
        RESULTS.write_text(text)


if __name__ == "__main__":
    main()
