"""README.md as a new user meets it: every ``scatter-rewrite`` command it shows prints what it says
it prints, its Python example runs, its test command is the one CI runs, it stays under 10 KB,
and the sample models in ``models/`` are what ``models/make_models.py`` makes.

When the CLI's output changes on purpose, refresh the README's sample outputs with one command:

    python tests/readme_examples.py --update

(then read the diff: it is what a new user will see). ``python tests/readme_examples.py`` alone
checks, as ``.ci/run`` does from a fresh clone.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import onnx
import pytest
from tests import readme_examples

ROOT = readme_examples.ROOT
TEXT = readme_examples.README.read_text(encoding="utf-8")
VERBS = ["upgrade", "fold", "lower", "tensorrt", "to-scatternd", "check", "repair", "prepare"]


def test_readme_is_under_10_kib():
    assert len(TEXT.encode("utf-8")) <= readme_examples.README_LIMIT


def test_every_verb_has_an_example_on_a_shipped_model():
    found = readme_examples.examples(TEXT)
    verbs = [example.command.split()[1] for example in found]
    assert set(VERBS) <= set(verbs), verbs
    for example in found:
        model = next(arg for arg in example.command.split() if arg.endswith(".onnx"))
        assert (ROOT / model).is_file() and model.startswith("models/"), example.command
        assert example.expected, f"no output shown for {example.command}"


def test_every_example_prints_what_the_readme_says():
    found = readme_examples.examples(TEXT)
    outputs = readme_examples.run_all(found)
    diffs = readme_examples.mismatches(found, outputs)
    assert not diffs, "\n\n".join(diffs) + "\n\nrefresh: python tests/readme_examples.py --update"


def test_a_changed_output_is_reported_and_only_times_and_float_differences_are_normalized():
    text = ("```console\n$ scatter-rewrite fold m.onnx\n"
            "PASSED in 0.30 s\nmax |difference| 2.38e-07\n```\n")
    [example] = readme_examples.examples(text)
    assert example.expected == ["PASSED in 0.30 s", "max |difference| 2.38e-07"]
    assert not readme_examples.mismatches([example], ["PASSED in 12 s\nmax |difference| 1.19e-07"])
    for changed in ["FAILED in 0.30 s\nmax |difference| 2.38e-07",
                    "PASSED in 0.30 s\nmax |difference| 0", "PASSED in 0.30 s"]:
        assert readme_examples.mismatches([example], [changed]), changed


def test_update_rewrites_only_the_outputs():
    text = "intro\n```console\n$ scatter-rewrite a\nold\nold 2\n$ scatter-rewrite b\n```\nafter\n"
    found = readme_examples.examples(text)
    updated = readme_examples.update(text, found, ["new", "b out\nb out 2"])
    assert updated == ("intro\n```console\n$ scatter-rewrite a\nnew\n"
                       "$ scatter-rewrite b\nb out\nb out 2\n```\nafter\n")


def test_the_readme_test_command_is_what_ci_runs():
    command = 'pip install ".[test]" && pytest -q -p no:cacheprovider'
    assert f"```bash\n{command}\n```" in TEXT
    assert command in (ROOT / ".ci" / "run").read_text()
    assert readme_examples.install_command(TEXT) == "pip install ."


def test_the_python_api_example_runs_on_an_ir_model(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch):
    """The README's export-pipeline example, with the export itself replaced by loading a shipped
    model as the ``onnx_ir.Model`` that ``ONNXProgram.model`` is (torch is not a test
    dependency)."""
    import onnx_ir as ir

    code = re.search(r"```python\n(.*?)```", TEXT, re.S).group(1)
    assert "torch.onnx.export(" in code and "dynamo=True" in code
    lines = [line for line in code.split("\n") if line != "import torch"]
    export = next(i for i, line in enumerate(lines) if "torch.onnx.export(" in line)
    lines[export] = "onnx_program = Exported(ir.load(MODEL))"
    monkeypatch.chdir(tmp_path)
    exported = type("Exported", (), {"__init__": lambda self, m: setattr(self, "model", m)})
    namespace = {"Exported": exported, "ir": ir,
                 "MODEL": str(ROOT / "models" / "gnn_max_opset18.onnx")}
    exec("\n".join(lines), namespace)
    saved = onnx.load(next(tmp_path.glob("*.onnx")))
    onnx.checker.check_model(saved, full_check=True)
    assert {o.domain: o.version for o in saved.opset_import}[""] == 13
    assert "ScatterElements" not in {node.op_type for node in saved.graph.node}


def _make_models():
    spec = importlib.util.spec_from_file_location("make_models", ROOT / "models" / "make_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(_make_models().SAMPLES))
def test_shipped_models_are_what_make_models_makes(name: str):
    """(The legacy ones are invalid on purpose: onnx.checker rejects Scatter at opset 13.)"""
    model = _make_models().SAMPLES[name]()
    assert (ROOT / "models" / name).read_bytes() == model.SerializeToString()
