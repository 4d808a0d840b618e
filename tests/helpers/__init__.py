"""What the tests share, by concept (tests/README.md lists where the tests of each module are):

- models.py: small models built in code (a GNN aggregation, a scatter in a model-local function,
  TorchScript's accumulating chain, a TensorScatter, a ScatterND) and what a model holds; the
  package's own builders are ``scatter_rewrite.testing`` (also used by models/make_models.py and
  benchmarks/).
- equivalence.py: the assertions that two results are the same, each named by what it allows.
- runs.py: onnxruntime runs of a model (as a user runs it, as validation does), ONNX's reduction
  backend cases, a one-scatter model's expected output.
- cli.py: the command line run in-process, and what it leaves on disk.
- exports.py: the committed real exports in tests/data, with their inputs and PyTorch's outputs.
- shapes.py: hypothesis strategies for a scatter's shapes.
- kernel_oracles.py: one-node models and plain-loop oracles for the evaluator's kernels.
- backend_cases.py: ONNX's backend node cases moved down and judged (the opset tests, benchmarks/).
- runtimes.py: LiteRT, OpenVINO, TVM and MNN run in venvs of their own by the package's runner, judged against onnxruntime.
- wrong_passes.py: passes that rewrite wrongly on purpose (validation must catch each one).
- fold_fuzz.py: the randomized fold audit (``python -m tests.helpers.fold_fuzz --minutes 60``).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
