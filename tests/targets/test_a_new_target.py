"""Adding a runtime is one module that registers a Target: a toy one, defined in a file outside the
package and imported, is checked and prepared for through the CLI and the API like the built-in
ones, with nothing else changed."""

from __future__ import annotations

import importlib.util
import textwrap

import onnx
import pytest

import scatter_rewrite
from scatter_rewrite import targets
from scatter_rewrite.testing import scatter_model
from tests.helpers.cli import invoke, save

TOY = textwrap.dedent('''
    """A toy runtime: ScatterElements without reduction runs, every other scatter does not."""
    from scatter_rewrite.targets import Preparation, ScatterSupport, Target, register_target


    register_target(Target(
        name="toy-rt", family="toy", summary="a toy runtime: only overwriting ScatterElements",
        opsets=(11, 18), runs=(ScatterSupport("ScatterElements", frozenset({"none"})),),
        sources=("tests/targets/test_a_new_target.py",), preparation=Preparation(),
        options=("max_intermediate_mib",)))
''')


@pytest.fixture
def toy(tmp_path, monkeypatch):
    targets.targets()  # (the package's own registered first)
    monkeypatch.setattr(targets, "TARGETS", dict(targets.TARGETS))  # (removed after the test)
    path = tmp_path / "toy_runtime.py"
    path.write_text(TOY)
    spec = importlib.util.spec_from_file_location("toy_runtime", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    return targets.get_target("toy-rt")


def _max() -> onnx.ModelProto:
    return scatter_model("ScatterElements", data_shape=(4, 5), indices_shape=(6, 5),
                         reduction="max")


def test_check_and_prepare_reach_a_target_registered_from_one_module(toy, tmp_path):
    assert "toy-rt" in targets.target_names()
    report = scatter_rewrite.check(_max(), target="toy-rt")
    assert report.status == "FIXABLE", report
    assert "prepare" in str(report.fix) and "toy-rt" in str(report.fix)
    prepared = scatter_rewrite.prepare(_max(), target="toy-rt")
    assert {n.op_type for n in prepared.graph.node}.isdisjoint({"ScatterElements", "ScatterND"})
    assert scatter_rewrite.check(prepared, target="toy-rt").status == "READY"
    overwrite = scatter_model("ScatterElements", data_shape=(4, 5), indices_shape=(2, 5))
    assert scatter_rewrite.check(overwrite, target="toy-rt").status == "READY"


def test_the_cli_takes_the_new_target_by_name(toy, tmp_path):
    source, out = save(_max(), tmp_path / "m.onnx"), tmp_path / "out.onnx"
    checked = invoke("check", source, "--target", "toy-rt")
    assert checked.exit_code == 1 and "FIXABLE" in checked.output, checked.output
    done = invoke("prepare", source, "--target", "toy-rt", "-o", out)
    assert done.exit_code == 0 and "PASSED" in done.output, done.output
    assert out.exists()
