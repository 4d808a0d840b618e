"""The Python API: discoverable (dir, __version__, docstrings), one signature per verb built on
the verbs' declaration, errors worded for Python callers, ``check`` returning data."""

from __future__ import annotations

import inspect
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import scatter_rewrite as sr
import scatter_rewrite.api as api
import scatter_rewrite.passes as passes
from scatter_rewrite.testing import constant_scatter_model, scatter_model
from scatter_rewrite.verbs import VERBS

API_OF_VERB = {"upgrade": sr.upgrade, "fold": sr.fold, "lower": sr.lower,
               "to_scatternd": sr.to_scatternd, "tensorrt": sr.prepare_for_tensorrt,
               "repair": sr.repair, "prepare": sr.prepare}
SHARED = ["validate", "inputs", "rtol", "atol", "output", "return_report"]


def test_dir_lists_the_api_without_importing_onnx():
    script = ("import json, sys, scatter_rewrite as sr\n"
              "print(json.dumps({'dir': dir(sr), 'onnx': 'onnx' in sys.modules,\n"
              "                  'version': sr.__version__}))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    shown = json.loads(done.stdout)
    assert not shown["onnx"]
    assert {"upgrade", "fold", "lower", "to_scatternd", "prepare_for_tensorrt", "repair", "check",
            "rewrite", "ScatterRewriteError", "__version__"} <= set(shown["dir"])
    assert not {"importlib", "annotations", "TYPE_CHECKING"} & set(shown["dir"])
    assert shown["version"][0].isdigit()


def test_every_exported_name_resolves():
    for name in sr.__all__:
        assert getattr(sr, name) is not None
    for name in passes.__all__:
        assert getattr(passes, name) is not None
    with pytest.raises(AttributeError):
        sr.no_such_thing  # noqa: B018


def test_every_pass_class_is_public():
    from scatter_rewrite.passes.base import ScatterPass

    exported = {name: getattr(passes, name) for name in passes.__all__}
    found = {name for name, value in exported.items() if inspect.isclass(value)
             and issubclass(value, ScatterPass) and value is not ScatterPass}
    assert found >= {"UpgradePass", "FoldPass", "LowerPass", "ToScatterNDPass", "TensorRTPass",
                     "FixDimsPass", "SpecializeCallsPass", "LowerTensorScatterPass", "CapOpsetPass",
                     "RepairPass"}
    # every pass tensorrt_passes runs is reachable by a public name
    public = {getattr(passes, name) for name in passes.__all__}
    assert {type(p) for p in passes.tensorrt_passes("10", {"n": 2})} <= public


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_each_verb_function_has_the_declared_keywords_and_an_example(verb: str):
    function = API_OF_VERB[verb]
    parameters = inspect.signature(function).parameters
    declared = VERBS[verb].options
    assert list(parameters) == ["model"] + [o.name for o in declared] + SHARED
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(parameters.values())[1:])
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    for option in declared:
        assert parameters[option.name].default == option.default, option.name
    assert "Example::" in function.__doc__


def test_check_in_the_api_returns_the_report_as_data(tmp_path: Path):
    model = scatter_model("ScatterElements", opset=16, reduction="add")
    report = sr.check(model, target="tensorrt-8.6")
    assert report.blocked and report.invalid is None
    (finding,) = report.findings
    assert finding.op == "ScatterElements" and finding.reduction == "add"
    assert any("silently ignored" in b for b in finding.blockers)
    assert json.loads(json.dumps(report.to_dict()))["findings"][0]["blocked"] is True
    assert not sr.check(model, target="tensorrt-10").blocked
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    (finding,) = sr.check(str(path), target="opset-15").findings
    assert finding.fix == "scatter-rewrite lower --opset 15"


def test_check_in_the_api_blocks_an_invalid_model():
    model = scatter_model("ScatterElements", opset=16)
    model.graph.node[0].input[2] = "undefined"
    report = sr.check(model)
    assert report.blocked and "fails onnx.checker" in report.invalid
    assert "undefined" in report.invalid


def test_option_type_errors_name_the_argument():
    model = scatter_model("ScatterElements", opset=16, reduction="add")
    with pytest.raises(TypeError, match=r"^lower\(\): opset must be an int, got str '13'$") \
            as raised:
        sr.lower(model, opset="13")
    assert isinstance(raised.value, sr.OptionError)  # a user error too
    with pytest.raises(TypeError, match=r"lower\(\) got an unexpected keyword argument 'bogus'"):
        sr.lower(model, bogus=1)
    with pytest.raises(sr.OptionError, match=r"^fold\(\): size_limit must be an int"):
        sr.fold(model, size_limit=1.5)
    unknown = r"^prepare_for_tensorrt\(\): trt_version='9' is unknown"
    with pytest.raises(sr.OptionError, match=unknown):
        sr.prepare_for_tensorrt(model, trt_version="9")
    for call, name in ((lambda: sr.lower(model, mode=3), "lower(): mode"),
                       (lambda: sr.repair(model, assume=1.0), "repair(): assume")):
        with pytest.raises(TypeError, match=rf"^{re.escape(name)} must be a str, one of "):
            call()  # (a number is a version's text for trt_version alone)


def test_an_input_that_is_not_an_array_is_a_type_error_before_any_work(monkeypatch):
    _no_work(monkeypatch)
    model = scatter_model("ScatterElements", opset=16, reduction="add")
    for value, kind in (("zeros", "str"), (None, "NoneType"), ({"a": 1}, "dict")):
        with pytest.raises(TypeError, match=rf"^upgrade\(\): inputs\['data'\] must be an array, "
                                            rf"got {kind}$"):
            sr.upgrade(model, inputs={"data": value})


def test_option_range_errors_name_the_argument_and_the_range():
    model = scatter_model("ScatterElements", opset=16, reduction="add")
    highest = onnx.defs.onnx_opset_version()
    expected = rf"^lower\(\): opset={highest + 1} is out of range: pick 11 to {highest}"
    with pytest.raises(sr.OptionError, match=expected) as raised:
        sr.lower(model, opset=highest + 1)
    assert "--opset" not in str(raised.value)
    with pytest.raises(sr.OptionError, match=r"^upgrade\(\): opset=10 is out of range: pick 11 to"):
        sr.upgrade(model, opset=10)


def test_a_trt_version_given_as_a_number_is_taken():
    model = scatter_model("ScatterElements", opset=16, reduction="add")
    _, outcome = sr.prepare_for_tensorrt(model, trt_version=10, return_report=True)
    assert outcome.options["trt_version"] == "10"


def test_the_api_collects_the_exporter_pattern_notes_as_the_cli_does():
    """The TorchScript export of scatter_add at opset < 16: zeros -> ScatterElements -> Add."""
    from scatter_rewrite.export_patterns import ACCUMULATE_NOTE_START

    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("ConstantOfShape", ["shape"], ["zeros"],
                               value=onnx.helper.make_tensor("v", onnx.TensorProto.FLOAT, [1],
                                                             [0.0])),
         onnx.helper.make_node("Scatter", ["zeros", "i", "u"], ["s"], axis=0),
         onnx.helper.make_node("Add", ["x", "s"], ["y"])],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4]),
         onnx.helper.make_tensor_value_info("i", onnx.TensorProto.INT64, [2]),
         onnx.helper.make_tensor_value_info("u", onnx.TensorProto.FLOAT, [2])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])],
        initializer=[onnx.numpy_helper.from_array(np.array([4], np.int64), "shape")])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 10)])
    _, outcome = sr.upgrade(model, return_report=True)
    assert any(ACCUMULATE_NOTE_START in note for note in outcome.notes), outcome.notes


def test_an_unchanged_model_is_reported_as_such():
    model = scatter_model("ScatterElements", opset=16)
    result, outcome = sr.upgrade(model, validate=True, return_report=True)
    assert outcome.status == "UNCHANGED" and not outcome.modified and outcome.validation is None
    assert [n.op_type for n in result.graph.node] == ["ScatterElements"]
    _, outcome = sr.upgrade(scatter_model("Scatter", opset=10), return_report=True, validate=False)
    assert outcome.status == "WRITTEN" and outcome.modified and outcome.verb == "upgrade"  # not validated
    _, outcome = sr.upgrade(scatter_model("Scatter", opset=10), return_report=True)
    assert outcome.status == "PASSED" and outcome.validation is not None  # validated by default


def test_an_ir_model_comes_back_as_an_ir_model_and_the_input_is_not_changed():
    model = ir.serde.deserialize_model(constant_scatter_model(
        "ScatterElements", data=np.zeros((4, 4), np.float32), indices=np.zeros((1, 4), np.int64),
        updates=np.ones((1, 4), np.float32)))
    before = [n.op_type for n in model.graph]
    folded = sr.fold(model, validate=True)
    assert isinstance(folded, ir.Model) and folded is not model
    assert [n.op_type for n in model.graph] == before and "ScatterElements" in before
    assert "ScatterElements" not in [n.op_type for n in folded.graph]


def test_output_is_for_paths_only():
    with pytest.raises(sr.OptionError, match=r"^upgrade\(\): output= is for a model given as a path"):
        sr.upgrade(scatter_model("Scatter", opset=10), output="x.onnx")
    with pytest.raises(ValueError, match=r"^prepare_for_tensorrt\(\): output= is for a model "):
        sr.prepare_for_tensorrt(scatter_model("Scatter", opset=10), output="x.onnx")


def test_the_api_and_the_cli_take_the_same_orchestration(monkeypatch, tmp_path: Path):
    calls = []
    real = api.rewrite_model

    def spy(*args, **kwargs):
        calls.append(kwargs.get("verb"))
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "rewrite_model", spy)
    sr.upgrade(scatter_model("Scatter", opset=10))
    import scatter_rewrite.pipeline as pipeline

    monkeypatch.setattr(pipeline, "rewrite_model", spy)
    path = tmp_path / "m.onnx"
    onnx.save(scatter_model("Scatter", opset=10), path)
    sr.upgrade(str(path), validate=True)  # (validated: not the on-proto shortcut)
    assert calls == ["upgrade", "upgrade"]


def test_option_errors_are_value_and_type_errors_in_python_terms():
    model = scatter_model("ScatterElements", opset=16, reduction="add")
    with pytest.raises(ValueError, match=r"^lower\(\): opset=40 is out of range") as raised:
        sr.lower(model, opset=40)
    assert isinstance(raised.value, sr.OptionError) and "--" not in str(raised.value)
    for validate in (False, True):  # refused whether or not validation would read it
        with pytest.raises(TypeError, match=r"^lower\(\): rtol must be a float, got str 'a'$"):
            sr.lower(model, rtol="a", validate=validate)
    with pytest.raises(ValueError, match=r"^fold\(\): atol=-1.0 is out of range"):
        sr.fold(model, atol=-1.0)
    with pytest.raises(TypeError, match=r"^repair\(\): inputs must be a dict"):
        sr.repair(model, inputs=[np.zeros(3)], validate=True)
    with pytest.raises(ValueError, match=r"^rewrite\(\): rtol=nan is out of range"):
        sr.rewrite(model, [passes.UpgradePass()], rtol=float("nan"))


@pytest.mark.parametrize("as_path", [False, True])
def test_a_missing_input_is_named_as_a_dict_key_before_any_work(tmp_path: Path, as_path: bool):
    model = scatter_model("ScatterElements", opset=16, reduction="add")
    given = model
    if as_path:
        given = tmp_path / "m.onnx"
        onnx.save(model, given)
    partial = {"data": np.zeros((4, 5), np.float32)}
    with pytest.raises(ValueError, match=r"^lower\(\): inputs lacks the key\(s\) 'indices', "
                                         r"'updates': give an array") as raised:
        sr.lower(given, inputs=partial, validate=True)
    assert ".npz" not in str(raised.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == (["m.onnx"] if as_path else [])


def test_a_failed_validation_in_memory_says_no_model_is_returned():
    from tests.helpers.wrong_passes import NegateScatterOutputs

    model = scatter_model("ScatterElements", opset=16, reduction="max")
    with pytest.raises(sr.ValidationError) as raised:
        sr.rewrite(model, [NegateScatterOutputs()], validate=True)
    assert "no model returned" in str(raised.value) and "nothing written" not in str(raised.value)


def test_findings_carry_the_fix_as_a_python_call():
    model = scatter_model("ScatterElements", opset=18, reduction="max")
    (finding,) = sr.check(model, target="opset-13").findings
    assert finding.fix == "scatter-rewrite lower --opset 13"
    assert finding.python_fix == "scatter_rewrite.lower(model, opset=13)"
    assert finding.to_dict()["python_fix"] == finding.python_fix
    (ready,) = sr.check(model, target="opset-18").findings
    assert ready.fix is None and ready.python_fix is None


def test_every_fix_form_is_one_call_said_both_ways():
    """A fix is a call (verbs.command): the Python call for the API, the command for the CLI,
    alternatives and SIZE placeholders included."""
    from scatter_rewrite.said import said
    from scatter_rewrite.verbs import command, spoken

    for fix, python, cli in [
        (said(command("upgrade"), " (or ", command("tensorrt", trt_version="8.6"), ")"),
         "scatter_rewrite.upgrade(model) (or scatter_rewrite.prepare_for_tensorrt(model, "
         "trt_version='8.6'))",
         "scatter-rewrite upgrade (or scatter-rewrite tensorrt --trt-version 8.6)"),
        (command("tensorrt", trt_version="8.6", fix_dims={"E": "SIZE"}),
         "scatter_rewrite.prepare_for_tensorrt(model, trt_version='8.6', fix_dims={'E': SIZE})",
         "scatter-rewrite tensorrt --trt-version 8.6 --fix-dim E=SIZE"),
        (command("to_scatternd"), "scatter_rewrite.to_scatternd(model)",
         "scatter-rewrite to-scatternd"),
    ]:
        assert (str(fix), spoken(fix, {})) == (python, cli)


def _no_work(monkeypatch) -> None:
    """Any work (loading, rewriting, checking a model) fails the test: the arguments must be
    refused before it."""
    import scatter_rewrite.readiness as readiness

    def work(*args, **kwargs):
        raise AssertionError("work started before the arguments were checked")

    for module, name in ((api, "rewrite_model"), (api, "rewrite_file"), (api, "_to_ir"),
                         (readiness, "check_report")):
        monkeypatch.setattr(module, name, work)


ENTRY_POINTS = {**{VERBS[v].function or v: f for v, f in API_OF_VERB.items()},
                "rewrite": lambda model, **kw: sr.rewrite(model, [passes.UpgradePass()], **kw),
                "check": sr.check}


@pytest.mark.parametrize("function", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("model, kind", [(12345, "int"), (None, "NoneType"),
                                         (b"\x08\x07", "bytes"), ([1, 2], "list")])
def test_a_model_of_the_wrong_kind_is_a_type_error_before_any_work(monkeypatch, function: str,
                                                                   model, kind: str):
    _no_work(monkeypatch)
    with pytest.raises(TypeError, match=rf"^{function}\(\): model must be .*got {kind}") as raised:
        ENTRY_POINTS[function](model)
    assert isinstance(raised.value, sr.ScatterRewriteError)  # (a user error too)
    assert "--" not in str(raised.value) and "scatter-rewrite " not in str(raised.value)
    assert "onnx.ModelProto, onnx_ir.Model, path (str or os.PathLike) or onnx_graphsurgeon.Graph" \
        in str(raised.value)  # (what to pass instead)
    if kind == "bytes":
        assert "onnx.load_from_string" in str(raised.value)


@pytest.mark.parametrize("function", sorted(set(ENTRY_POINTS) - {"check"}))
@pytest.mark.parametrize("flag", ["validate", "return_report"])
@pytest.mark.parametrize("value", ["no", 0, 1, None])
def test_a_flag_that_is_not_a_bool_is_a_type_error_before_any_work(monkeypatch, function: str,
                                                                   flag: str, value):
    _no_work(monkeypatch)
    model = scatter_model("ScatterElements", opset=16, reduction="add")
    with pytest.raises(TypeError, match=rf"^{function}\(\): {flag} must be a bool, got "
                                        rf"{type(value).__name__} {value!r}$"):
        ENTRY_POINTS[function](model, **{flag: value})


@pytest.mark.parametrize("function", sorted(set(ENTRY_POINTS) - {"check"}))
def test_an_output_that_is_not_a_path_is_a_type_error(monkeypatch, tmp_path: Path, function: str):
    _no_work(monkeypatch)
    with pytest.raises(TypeError, match=rf"^{function}\(\): output must be a path"):
        ENTRY_POINTS[function](str(tmp_path / "m.onnx"), output=3)


def test_check_takes_the_target_as_a_str_and_says_an_unknown_one_in_python_terms(monkeypatch):
    model = scatter_model("ScatterElements", opset=16, reduction="add")
    with pytest.raises(TypeError, match=r"^check\(\): target must be a str, got int 10$"):
        sr.check(model, target=10)
    with pytest.raises(ValueError, match=r"target='bogus' is unknown: pick ") as raised:
        sr.check(model, target="bogus")
    assert "--target" not in str(raised.value)


def test_rewrite_takes_a_list_of_passes():
    model = scatter_model("ScatterElements", opset=16, reduction="add")
    with pytest.raises(TypeError, match=r"^rewrite\(\): passes must be a list of onnx_ir passes"):
        sr.rewrite(model, passes.UpgradePass())
    with pytest.raises(TypeError, match=r"^rewrite\(\): passes must be a list"):
        sr.rewrite(model, ["upgrade"])


def test_api_messages_name_python_parameters_not_flags(tmp_path: Path):
    """prepare without a target, or for a target no verb reaches, and a write refused for
    permission: said as Python says it; the command line says the same with its flags."""
    from scatter_rewrite.errors import WriteError
    from scatter_rewrite.model_io import write_error

    model = scatter_model("ScatterElements", opset=16, reduction="add")
    with pytest.raises(ValueError, match=r"^prepare needs target=TARGET: pick tensorrt-") as raised:
        sr.prepare(model)
    assert "--" not in str(raised.value) and "scatter-rewrite" not in str(raised.value)
    assert "litert" in str(raised.value) and "tvm" in str(raised.value)
    with pytest.raises(ValueError, match=r"^no verb brings a model to opset-9: "
                                         r"scatter_rewrite\.check\(model, target='opset-9'\)"):
        sr.prepare(model, target="opset-9")
    refused = write_error(tmp_path / "x.onnx", PermissionError(13, "Permission denied"))
    assert isinstance(refused, WriteError)
    assert str(refused).endswith("write the output elsewhere (output=)")
    assert VERBS["lower"].cli_message(refused).endswith("write the output elsewhere (-o)")
    with pytest.raises(sr.OptionError) as raised:
        sr.prepare(model)
    said = VERBS["prepare"].cli_message(raised.value)
    assert said.startswith("prepare needs --target TARGET: pick tensorrt-"), said


@pytest.mark.parametrize("function", sorted(set(ENTRY_POINTS) - {"check"}))
def test_an_output_onto_the_model_given_is_a_value_error_before_any_work(monkeypatch,
                                                                        tmp_path: Path,
                                                                        function: str):
    path = tmp_path / "m.onnx"
    onnx.save(scatter_model("ScatterElements", opset=16, reduction="add"), path)
    _no_work(monkeypatch)
    for output in (str(path), path, tmp_path / "." / "m.onnx"):
        with pytest.raises(ValueError, match=rf"^{function}\(\): output='[^']*m.onnx' is the model "
                                             "given, which the API never replaces") as raised:
            ENTRY_POINTS[function](str(path), output=output,
                                   **({"target": "opset-13"} if function == "prepare" else {}))
        assert "--" not in str(raised.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


@pytest.mark.parametrize("as_path", [False, True])
def test_inputs_that_are_not_model_inputs_are_a_warning_naming_them(caplog, tmp_path: Path,
                                                                   as_path: bool):
    model = scatter_model("ScatterElements", opset=16, reduction="add")
    given = model
    if as_path:
        given = str(tmp_path / "m.onnx")
        onnx.save(model, given)
    inputs = {"data": np.zeros((4, 5), np.float32), "indices": np.zeros((2, 5), np.int64),
              "updates": np.ones((2, 5), np.float32)}
    kwargs = {"output": str(tmp_path / "out.onnx")} if as_path else {}
    with caplog.at_level(logging.WARNING, logger="scatter_rewrite"):
        _, exact = sr.lower(given, inputs=inputs, return_report=True, **kwargs)
    assert exact.notes == [] and caplog.records == []
    with caplog.at_level(logging.WARNING, logger="scatter_rewrite"):
        _, outcome = sr.lower(given, inputs={**inputs, "edge_idx": np.zeros(3), "x": np.zeros(1)},
                              return_report=True, **kwargs)
    said = "inputs= has 2 entries that the model does not take as an input, ignored: edge_idx, x"
    assert outcome.notes == [said]
    assert [r.getMessage() for r in caplog.records] == [
        f"{given if as_path else 'the model given'}: {said}"]


def test_what_makes_a_written_model_run_is_a_python_call_on_its_file(tmp_path: Path):
    """An UNRUNNABLE result of a path: the fix is the API's call on the written file, and the
    command line says the same as its command."""
    source, written = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(scatter_model(reduction="max", data_type=onnx.TensorProto.FLOAT16), source)
    _, outcome = sr.to_scatternd(str(source), output=str(written), return_report=True)
    assert outcome.status == "UNRUNNABLE"
    assert outcome.error.endswith(f"scatter_rewrite.lower({str(written)!r}, opset=13) writes a "
                                  "form it runs"), outcome.error
    assert "--" not in outcome.error and "scatter-rewrite " not in outcome.error
    from scatter_rewrite.verbs import spoken

    assert spoken(outcome.error, {}).endswith(f"scatter-rewrite lower {written} --opset 13 "
                                                "writes a form it runs")


def test_validation_arguments_without_validation_are_a_warning_naming_them(caplog):
    model = scatter_model("ScatterElements", opset=16, reduction="add")
    inputs = {"data": np.zeros((4, 5), np.float32), "indices": np.zeros((2, 5), np.int64),
              "updates": np.ones((2, 5), np.float32)}
    with caplog.at_level(logging.WARNING, logger="scatter_rewrite"):
        _, outcome = sr.lower(model, validate=False, inputs=inputs, rtol=0.1, return_report=True)
        _, alone = sr.lower(model, validate=False, atol=0.1, return_report=True)
        _, plain = sr.lower(model, validate=False, return_report=True)
    assert outcome.notes == ["inputs=, rtol= are not used: validate=False skips the validation "
                             "they are for"]
    assert alone.notes == ["atol= is not used: validate=False skips the validation it is for"]
    assert plain.notes == []
    assert [r.getMessage() for r in caplog.records] == [
        f"the model given: {n}" for n in outcome.notes + alone.notes]



def test_check_names_every_registered_target():
    from scatter_rewrite.targets import target_names

    listed = api.check.__doc__.split("docs/targets.md")[0]
    named = set(re.findall(r'"([A-Za-z0-9.-]+)"', listed))
    assert named == {n for n in target_names() if not n.startswith("opset-")} | {"opset-N"}
