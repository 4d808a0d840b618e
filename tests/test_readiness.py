"""check: the readiness report finds each blocker, reports clean after the fix, and its CLI."""

from __future__ import annotations

import json

import onnx
import onnx.helper as oh
import onnx_ir as ir
import pytest
from onnx import TensorProto

import scatter_rewrite as sr
from scatter_rewrite.readiness import check, parse_target
from scatter_rewrite.testing import scatter_model

from tests.helpers.models import function_model, scatter_nd_model, tensor_scatter_model
from tests.helpers.cli import invoke

def findings(model: onnx.ModelProto, target: str):
    return check(ir.serde.deserialize_model(model), target)


def blockers(model: onnx.ModelProto, target: str) -> list[str]:
    return [b for f in findings(model, target) for b in f.blockers]


# (model, target, a phrase of the blocker, the fix command or None)
BLOCKERS = {
    "opset above 8.6's parser": (lambda: scatter_model("ScatterElements", opset=18), "tensorrt-8.6",
                                 "TensorRT 8.6's parser documents opsets up to 17",
                                 "scatter-rewrite tensorrt --trt-version 8.6"),
    "deprecated Scatter": (lambda: scatter_model("Scatter", opset=10), "tensorrt-10", "deprecated Scatter",
                           "scatter-rewrite upgrade"),
    "ScatterND none attr on 10": (lambda: scatter_nd_model("none"), "tensorrt-10", 'explicit reduction="none"',
                                  "scatter-rewrite tensorrt --trt-version 10"),
    "ScatterND add on 10": (lambda: scatter_nd_model("add"), "tensorrt-10", "ScatterND reduction=add",
                            "scatter-rewrite tensorrt --trt-version 10"),
    "ScatterND max on 8.6": (lambda: scatter_nd_model("max"), "tensorrt-8.6", "8.6 silently ignores",
                             "scatter-rewrite tensorrt --trt-version 8.6"),
    "reduction on 8.6": (lambda: scatter_model("ScatterElements", opset=16, reduction="add"), "tensorrt-8.6",
                         "silently ignored by TensorRT 8.6", "scatter-rewrite tensorrt --trt-version 8.6"),
    "dynamic count on 8.6": (lambda: scatter_model("ScatterElements", opset=16, reduction="add", data_shape=(4, 5),
                                                   indices_shape=("e", 5)), "tensorrt-8.6",
                             "silently ignored by TensorRT 8.6", "scatter-rewrite tensorrt --trt-version 8.6 --fix-dim e=SIZE"),
    "dynamic count in a function on 8.6": (
        lambda: scatter_model("ScatterElements", opset=16, reduction="add", data_shape=(4, 5), indices_shape=("e", 5),
                              where="function"), "tensorrt-8.6",
        "silently ignored by TensorRT 8.6", "scatter-rewrite tensorrt --trt-version 8.6 --fix-dim e=SIZE"),
    "unnamed dynamic count on 8.6": (lambda: scatter_model("ScatterElements", opset=16, reduction="add",
                                                           data_shape=(4, 5), indices_shape=(None, 5)), "tensorrt-8.6",
                                     "silently ignored by TensorRT 8.6", None),
    "ScatterND dynamic count on 8.6": (lambda: scatter_model("ScatterND", opset=18, data_shape=(4, 5), reduction="min",
                                                             indices_shape=("m", 1), updates_shape=("m", 5)),
                                       "tensorrt-8.6", "8.6 silently ignores",
                                       "scatter-rewrite tensorrt --trt-version 8.6 --fix-dim m=SIZE"),
    "int32 indices plugin": (lambda: scatter_model("ScatterElements", opset=18, reduction="max",
                                                   indices_type=TensorProto.INT32), "tensorrt-10",
                             "INT32 indices: the ScatterElements plugin takes INT64 only",
                             "scatter-rewrite tensorrt --trt-version 10"),
    "plugin dtype": (lambda: scatter_model("ScatterElements", opset=18, reduction="mul", data_type=TensorProto.DOUBLE),
                     "tensorrt-10", "DOUBLE data: the ScatterElements plugin", "scatter-rewrite tensorrt --trt-version 10"),
    "plugin dtype, dynamic count": (lambda: scatter_model("ScatterElements", opset=18, reduction="mul",
                                                          data_type=TensorProto.DOUBLE, indices_shape=("e", 3)),
                                    "tensorrt-10", "DOUBLE data: the ScatterElements plugin",
                                    "scatter-rewrite tensorrt --trt-version 10 --fix-dim e=SIZE"),
    "uint8": (lambda: scatter_model("ScatterElements", opset=18, data_type=TensorProto.UINT8), "tensorrt-10",
              "UINT8 data", "scatter-rewrite tensorrt --trt-version 10"),
    "uint64": (lambda: scatter_model("ScatterElements", opset=18, data_type=TensorProto.UINT64), "tensorrt-10",
               "UINT64 data", None),
    "TensorScatter": (tensor_scatter_model, "tensorrt-10", "TensorScatter (opset 24) is not supported",
                      "scatter-rewrite tensorrt --trt-version 10"),
    "more updates than rows": (lambda: scatter_model("ScatterElements", opset=18, data_shape=(3, 5),
                                                     indices_shape=(6, 5)), "tensorrt-10",
                               "indices dimension 0 (6) exceeds data's (3)", "scatter-rewrite tensorrt --trt-version 10"),
    "more updates on 8.6": (lambda: scatter_model("ScatterElements", opset=18, data_shape=(3, 5),
                                                  indices_shape=(6, 5)), "tensorrt-8.6",
                            "Indices dimensions must be less than data dimensions", "scatter-rewrite tensorrt --trt-version 8.6"),
    "Scatter at opset 13": (lambda: scatter_model("Scatter", opset=13), "opset-13", "deprecated from opset 11",
                            "scatter-rewrite upgrade --opset 13"),
    "ScatterElements below 11": (lambda: scatter_model("ScatterElements", opset=11), "opset-10",
                                 "exists from opset 11 only", None),
    "add below 16": (lambda: scatter_model("ScatterElements", opset=16, reduction="add"), "opset-13",
                     "reduction=add exists from opset 16", "scatter-rewrite lower --opset 13"),
    "max below 18": (lambda: scatter_nd_model("max"), "opset-17", "reduction=max exists from opset 18",
                     "scatter-rewrite lower --opset 17"),
    "TensorScatter below 24": (tensor_scatter_model, "opset-20", "TensorScatter exists from opset 24",
                               "scatter-rewrite lower --opset 20"),
}


@pytest.mark.parametrize("name", BLOCKERS)
def test_finds_each_blocker(name):
    make, target, phrase, fix = BLOCKERS[name]
    (finding,) = findings(make(), target)
    assert finding.blocked
    assert any(phrase in b for b in finding.blockers), finding.blockers
    assert finding.fix == fix or (fix and finding.fix.startswith(fix))
    if "dynamic count" in name:  # the notes say why no fix, or which dimension the fix fixes
        why = "once the number of updates is static" if fix else "number of updates is not static"
        assert any(why in note for note in finding.notes), finding.notes


@pytest.mark.parametrize("make, target", [
    (lambda: scatter_model("ScatterElements", opset=18), "tensorrt-10"),
    (lambda: scatter_model("ScatterElements", opset=17), "tensorrt-8.6"),
    (lambda: scatter_model("ScatterElements", opset=18, reduction="max"), "tensorrt-10"),
    (lambda: scatter_nd_model("none", opset=17), "tensorrt-8.6"),  # 8.6 never reads the attribute
    (lambda: scatter_nd_model("none"), "opset-18"),
    (lambda: scatter_model("ScatterElements", opset=16, reduction="add"), "opset-16"),
    (lambda: scatter_model("Scatter", opset=10), "opset-10"),
])
def test_clean_models(make, target):
    result = findings(make(), target)
    assert result and not any(f.blocked for f in result)


def test_reports_op_opset_reduction_dtypes_and_containers():
    model = scatter_model("ScatterElements", opset=16, where="function", reduction="add", indices_type=TensorProto.INT32)
    (f,) = findings(model, "tensorrt-10")
    assert (f.op, f.opset, f.reduction, f.data_type, f.indices_type) == ("ScatterElements", 16, "add", "FLOAT", "INT32")
    assert f.where == "function local::ScatterFn"
    assert len(findings(scatter_model("Scatter", opset=10, where="if"), "tensorrt-10")) == 2
    assert len(findings(scatter_model("Scatter", opset=10, where="loop"), "tensorrt-10")) == 1


@pytest.mark.parametrize("target", ["tensorrt-12", "tensorrt-7", "opset-x", "tensorrt"])
def test_unknown_target(target):
    with pytest.raises(sr.OptionError, match="^target=.* is unknown"):  # (the API's words)
        parse_target(target)


def test_opset_targets_span_what_the_installed_onnx_defines():
    """One opset range: from 9 (Scatter's first) to onnx's highest; beyond: out of range, not
    unknown."""
    highest = onnx.defs.onnx_opset_version()
    assert parse_target(f"opset-{highest}") == ("opset", highest)
    assert parse_target("opset-9") == ("opset", 9)
    for beyond in (8, highest + 1):
        with pytest.raises(sr.OptionError, match=f"out of range: pick opset-9 to opset-{highest}"):
            parse_target(f"opset-{beyond}")
    assert parse_target("tensorrt-11") == ("tensorrt", "11")


# ---- clean after the fix ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["deprecated Scatter", "ScatterND none attr on 10", "ScatterND add on 10",
                                  "int32 indices plugin", "TensorScatter", "more updates than rows", "plugin dtype"])
def test_clean_after_tensorrt_10(name):
    make, target, _, _ = BLOCKERS[name]
    fixed = sr.prepare_for_tensorrt(make(), trt_version="10", validate=True)
    assert not any(f.blocked for f in findings(fixed, target))


@pytest.mark.parametrize("where", ["main", "if", "loop", "function"])
def test_clean_after_tensorrt_8_6(where):
    model = scatter_model("Scatter", opset=10, where=where, data_shape=(3, 5), indices_shape=(3, 5))
    assert any(f.blocked for f in findings(model, "tensorrt-8.6"))
    fixed = sr.prepare_for_tensorrt(model, trt_version="8.6", validate=True)
    result = findings(fixed, "tensorrt-8.6")
    assert result and not any(f.blocked for f in result)


@pytest.mark.parametrize("name", ["ScatterND max on 8.6", "reduction on 8.6", "more updates on 8.6"])
def test_clean_after_tensorrt_8_6_for_reductions(name):
    make, target, _, fix = BLOCKERS[name]
    assert fix == "scatter-rewrite tensorrt --trt-version 8.6"
    fixed = sr.prepare_for_tensorrt(make(), trt_version="8.6", validate=True)
    result = findings(fixed, target)
    assert result and not any(f.blocked for f in result)


def test_clean_after_lower_and_upgrade():
    model = scatter_model("ScatterElements", opset=16, reduction="add")
    assert blockers(sr.lower(model, opset=13), "opset-13") == []
    assert blockers(sr.upgrade(scatter_model("Scatter", opset=13), opset=13), "opset-13") == []


# ---- CLI -----------------------------------------------------------------------------------------

def test_cli_table_and_exit_codes(tmp_path):
    blocked, clean = tmp_path / "blocked.onnx", tmp_path / "clean.onnx"
    onnx.save(scatter_nd_model("none"), blocked)
    onnx.save(scatter_model("ScatterElements", opset=17), clean)
    result = invoke("check", blocked, terminal_width=100)
    assert result.exit_code == 1, result.output
    assert "scatternd_0" in result.stdout
    assert (f"{blocked}: FIXABLE for tensorrt-10 (1 scatter node(s), 1 node(s) blocked as it is)"
            in result.stdout)
    assert "fix: scatter-rewrite tensorrt --trt-version 10 (1 node(s))" in result.stdout
    assert result.stderr == ("scatter-rewrite: error: not ready for tensorrt-10; fix: scatter-rewrite tensorrt "
                             "--trt-version 10\n")
    result = invoke("check", clean, "--target", "tensorrt-8.6", terminal_width=100)
    assert result.exit_code == 0, result.output
    assert f"{clean}: READY for tensorrt-8.6" in result.stdout and result.stderr == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocked.onnx", "clean.onnx"]  # nothing written


def test_cli_json(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(scatter_model("ScatterElements", opset=16, reduction="add", where="if"), path)
    result = invoke("check", path, "--target", "opset-13", "--json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)  # stdout is the JSON alone; the one-line reason goes to stderr
    assert result.stderr == "scatter-rewrite: error: not ready for opset-13; fix: scatter-rewrite lower --opset 13\n"
    (report,) = document["models"]
    assert document["target"] == "opset-13" and report["blocked_nodes"] == 2
    assert report["status"] == "FIXABLE" and report["fix"] == "scatter-rewrite lower --opset 13"
    assert {f["fix"] for f in report["findings"]} == {"scatter-rewrite lower --opset 13"}
    assert all(f["where"].startswith("main graph > If") for f in report["findings"])


def test_cli_json_has_one_schema_whatever_the_number_of_models(tmp_path):
    ready, fixable = tmp_path / "ready.onnx", tmp_path / "fixable.onnx"
    onnx.save(scatter_model("ScatterElements", opset=13), ready)
    onnx.save(scatter_model("ScatterElements", opset=16, reduction="add"), fixable)
    one = json.loads(invoke("check", ready, "--target", "opset-13", "--json").stdout)
    result = invoke("check", ready, fixable, "--target", "opset-13", "--json")
    two = json.loads(result.stdout)
    assert result.exit_code == 1
    assert set(one) == set(two) == {"schema_version", "target", "models", "summary"}
    assert one["schema_version"] == two["schema_version"] == 1
    assert set(one["models"][0]) == set(two["models"][0]) == set(two["models"][1])
    assert one["summary"] == {"models": 1, "ready": 1, "fixable": 0, "blocked": 0, "invalid": 0,
                              "unreadable": 0,
                              "exit_code": 0}
    assert two["summary"] == {"models": 2, "ready": 1, "fixable": 1, "blocked": 0, "invalid": 0,
                              "unreadable": 0,
                              "exit_code": 1}
    assert [m["status"] for m in two["models"]] == ["READY", "FIXABLE"]
    assert [m["ready"] for m in two["models"]] == [True, False]
    assert [m["reachable"] for m in two["models"]] == [True, True]


def test_a_model_that_fails_the_checker_is_invalid_with_no_ready_rows(tmp_path):
    model = scatter_model("ScatterElements", opset=18)
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 9  # data is [4, 5]
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    for extra in ([], ["--json"]):
        result = invoke("check", path, *extra, terminal_width=100)
        assert result.exit_code == 1, result.output
        assert result.stderr.startswith(f"scatter-rewrite: error: {path}: fails onnx.checker: ")
        assert "Inferred shape and existing shape differ" in result.stderr
    assert "ready" not in invoke("check", path, terminal_width=100).stdout
    (report,) = json.loads(result.stdout)["models"]
    assert report["status"] == "INVALID" and report["findings"] == [] and not report["reachable"]


def test_cli_errors(tmp_path):
    result = invoke("check", tmp_path / "missing.onnx")
    assert result.exit_code == 1 and "no such file" in result.stderr
    path = tmp_path / "m.onnx"
    onnx.save(scatter_model("ScatterElements", opset=18), path)
    result = invoke("check", path, "--target", "tensorrt-7")
    assert result.exit_code == 2 and "--target tensorrt-7 is unknown" in result.stderr


# ---- attributes that refer to an attribute of the enclosing function ----------------------------------

@pytest.mark.parametrize("target, blocked", [("tensorrt-8.6", True), ("tensorrt-10", True), ("opset-17", True),
                                             ("opset-18", False)])
def test_a_reduction_known_only_at_the_call_site_is_reported_as_such(target, blocked):
    model, _ = function_model(reduction_ref="add", axis_ref=False)  # reduction = @red, red="add" at the call
    (finding,) = findings(model, target)
    assert finding.reduction == "@red"  # not "-" (which reads as no reduction)
    assert finding.blocked is blocked
    if blocked:
        assert "known only at a call site" in finding.blockers[0]
        verb = "lower --opset 17" if target == "opset-17" else f"tensorrt --trt-version {target.split('-')[1]}"
        assert finding.fix == f"scatter-rewrite {verb}"
        assert any("one copy per call" in note for note in finding.notes)
        # The fix does what it says: its output passes the same check.
        fixed = (sr.lower(model, opset=17, validate=True) if target == "opset-17"
                 else sr.prepare_for_tensorrt(model, trt_version=target.split("-")[1], validate=True))
        assert not any(f.blocked for f in findings(fixed, target))
    else:
        assert finding.fix is None


def test_an_axis_known_only_at_the_call_site_blocks_lowering_with_the_reason():
    model, _ = function_model(reduction="add")  # axis = @ax
    (finding,) = findings(model, "tensorrt-8.6")  # used to raise TypeError (axis None % rank)
    assert finding.blocked and finding.fix == "scatter-rewrite tensorrt --trt-version 8.6"
    assert any("cannot be lowered TensorRT-safely" in n and "'axis' refers to the function's attribute 'ax'" in n
               for n in finding.notes), finding.notes
    fixed = sr.prepare_for_tensorrt(model, trt_version="8.6", validate=True)
    assert not any(f.blocked for f in findings(fixed, "tensorrt-8.6"))


@pytest.mark.parametrize("op, reduction", [("ScatterElements", "none"), ("ScatterND", "none"),
                                           ("ScatterElements", "max")])
def test_opset_target_below_the_models_opset_blocks_and_lower_fixes_it(op, reduction):
    """An opset-18 export is not READY for a runtime at opset 13 (it does not load it), even where
    opset 13 has the op: lower --opset 13 moves it down, and check then finds it ready."""
    shape = ({"indices_shape": (2, 4), "axis": 0} if op == "ScatterElements"
             else {"indices_shape": (2, 1), "updates_shape": (2, 4)})
    model = scatter_model(op, opset=18, data_shape=(4, 4), reduction=reduction, **shape)
    (finding,) = findings(model, "opset-13")
    assert finding.blocked and any("opset 18" in b for b in finding.blockers), finding.blockers
    assert finding.fix == "scatter-rewrite lower --opset 13"
    (after,) = findings(sr.lower(model, opset=13, validate=True), "opset-13")
    assert not after.blocked, after.blockers
    assert findings(model, "opset-18")[0].blocked is False


def test_the_table_says_none_for_a_default_reduction_and_marks_a_written_one():
    from scatter_rewrite.cli.check import _reduction_cell

    cells = {name: _reduction_cell(findings(make(), "tensorrt-10")[0]) for name, make in {
        "default": lambda: scatter_nd_model(),
        "written": lambda: scatter_nd_model("none"),
        "add": lambda: scatter_nd_model("add"),
        "scatter": lambda: scatter_model("Scatter", opset=10)}.items()}
    assert cells == {"default": "none", "written": "none (written)", "add": "add", "scatter": "-"}


def test_a_deprecated_scatter_in_an_opset_13_model_is_not_called_an_opset_9_10_node():
    (finding,) = findings(scatter_model("Scatter", opset=10), "tensorrt-10")
    assert "opset 9/10" not in finding.blockers[0] and "from opset 11" in finding.blockers[0]


@pytest.mark.parametrize("mode", ["custom", "tensorrt-plugin"])
def test_custom_domain_scatters_are_judged_as_the_onnx_op_tensorrt_imports(mode):
    """TensorRT's parser dispatches on op_type and ignores the domain: lower's custom-domain
    ScatterElements is the ONNX one to it. Before, check skipped such nodes and called a model whose
    reduction TensorRT 8.6 silently ignores READY."""
    model = scatter_model("ScatterElements", opset=18, data_shape=(4, 3), indices_shape=(2, 3), reduction="max")
    lowered = ir.serde.deserialize_model(sr.lower(model, opset=17, mode=mode))
    (on_10,) = check(lowered, "tensorrt-10")
    assert on_10.op == "ai.onnx.contrib::ScatterElements" and not on_10.blocked
    assert any("imports this node as ONNX ScatterElements" in n for n in on_10.notes)
    assert any("ScatterElements plugin" in n for n in on_10.notes)
    (on_86,) = check(lowered, "tensorrt-8.6")
    assert on_86.blocked and on_86.fix is None
    assert "silently ignored by TensorRT 8.6" in on_86.blockers[0]
    assert any("on the model before it was lowered to custom-domain nodes" in n for n in on_86.notes)
    assert check(lowered, "opset-17") == []  # (not an ONNX op there: a runtime implements it)


def test_a_custom_domain_scatternd_reduction_is_blocked_on_tensorrt_10():
    model = scatter_model("ScatterND", opset=18, data_shape=(4, 3), indices_shape=(2, 1), updates_shape=(2, 3),
                          reduction="add")
    (finding,) = check(ir.serde.deserialize_model(sr.lower(model, opset=13, mode="custom")), "tensorrt-10")
    assert finding.blocked and finding.fix is None
    assert finding.blockers == ["ScatterND reduction=add: no TensorRT version supports it"]


# ---- check is a dry run of the target's verb ------------------------------------------------------

def resize_model(antialias: int) -> onnx.ModelProto:
    """An opset-20 model with no scatter: one Resize, halving an 8x8 image. ``antialias=1`` (opset 18
    on) on a batch of dynamic size has no exact form below 18 (on static sizes: a constant linear
    map), so neither lower --opset 17 nor tensorrt --trt-version 8.6 can move it there; without it
    the model moves down to 13."""
    node = oh.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear", antialias=antialias,
                        name="resize")
    batch = "n" if antialias else 1
    graph = oh.make_graph(
        [node], "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 1, 8, 8])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 1, 4, 4])],
        initializer=[oh.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, 0.5, 0.5])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 20)])


def saved(model: onnx.ModelProto, folder, name: str = "m.onnx") -> str:
    path = folder / name
    onnx.save(model, path)
    return str(path)


def error_line(result) -> str:
    """What a failed command said on stderr, without its prefix."""
    (line,) = result.stderr.splitlines()
    return line.removeprefix("scatter-rewrite: error: ")


def check_json(path: str, target: str) -> tuple[int, dict]:
    result = invoke("check", path, "--target", target, "--json")
    (report,) = json.loads(result.stdout)["models"]
    return result.exit_code, report


def test_tensorrt_8_6_refuses_a_model_it_cannot_bring_to_opset_17(tmp_path):
    path = saved(resize_model(antialias=1), tmp_path)
    result = invoke("tensorrt", path, "--trt-version", "8.6")
    assert result.exit_code == 1, result.output
    said = error_line(result)
    assert "TensorRT 8.6's parser documents opsets up to 17" in said and "antialias=1" in said
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # nothing written
    lowered = invoke("lower", path, "--opset", "17")
    assert lowered.exit_code == 1 and "antialias=1" in error_line(lowered)
    # check says what the verb says: BLOCKED, with its refusal, on the node it names
    code, report = check_json(path, "tensorrt-8.6")
    assert code == 1 and report["status"] == "BLOCKED" and not report["reachable"]
    assert report["dry_run"]["error"] == said
    (resize,) = report["findings"]
    assert resize["op"] == "Resize" and resize["blocked"] and resize["fix"] is None


def test_check_on_an_opset_20_model_without_scatter_is_a_dry_run_of_lower(tmp_path):
    path = saved(resize_model(antialias=0), tmp_path)
    code, report = check_json(path, "opset-13")
    assert code == 1 and report["status"] == "FIXABLE" and report["reachable"]
    assert report["fix"] == "scatter-rewrite lower --opset 13"
    assert report["blockers"] == ["the model is at opset 20: a runtime at opset 13 does not load it"]
    assert report["dry_run"]["would"] == ["lower: default-domain opset 20 -> 13 (0 other node(s) converted)"]
    assert invoke("lower", path, "--opset", "13", "--no-validate").exit_code == 0
    code, report = check_json(str(tmp_path / "m.lowered.onnx"), "opset-13")
    assert code == 0 and report["status"] == "READY" and report["dry_run"]["would"] == []
    text = invoke("check", path, "--target", "opset-13", terminal_width=100).stdout
    assert "a dry run of scatter-rewrite lower --opset 13 would:" in text
    assert "default-domain opset 20 -> 13" in text


@pytest.mark.parametrize("target, verb", [("opset-13", ["lower", "--opset", "13"]),
                                          ("opset-17", ["lower", "--opset", "17"]),
                                          ("tensorrt-8.6", ["tensorrt", "--trt-version", "8.6"])])
def test_check_on_a_model_the_verb_refuses_is_blocked_with_its_reason(tmp_path, target, verb):
    path = saved(resize_model(antialias=1), tmp_path)
    refused = invoke(verb[0], path, *verb[1:], "--no-validate")
    assert refused.exit_code == 1
    code, report = check_json(path, target)
    assert code == 1 and report["status"] == "BLOCKED" and report["fix"] is None
    assert report["dry_run"]["error"] == error_line(refused)
    result = invoke("check", path, "--target", target, terminal_width=100)
    assert result.exit_code == 1
    assert error_line(result) == (f"blocked on {target}: scatter-rewrite {' '.join(verb)} refuses it: "
                                  f"{error_line(refused)}")
    assert f"{path}: BLOCKED for {target}" in result.stdout


def test_a_reduction_the_tensorrt_flow_must_leave_makes_it_refuse(tmp_path):
    """TensorRT 8.6 ignores reductions; one with a dynamic number of updates cannot be lowered
    TensorRT-safely: tensorrt exits 1 and writes nothing; with the dimension fixed it succeeds, so
    check is FIXABLE, its fix that command, naming the dimension."""
    model = scatter_model("ScatterElements", opset=16, reduction="add", data_shape=(4, 5),
                          indices_shape=("e", 5))
    path = saved(model, tmp_path)
    refused = invoke("tensorrt", path, "--trt-version", "8.6")
    assert refused.exit_code == 1 and "number of updates is not static" in error_line(refused)
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]
    code, report = check_json(path, "tensorrt-8.6")
    command = "scatter-rewrite tensorrt --trt-version 8.6 --fix-dim e=SIZE"
    assert code == 1 and report["status"] == "FIXABLE" and report["fix"] == command
    assert report["dry_run"]["command"] == command and report["dry_run"]["succeeded"]
    (finding,) = report["findings"]
    assert finding["fix"] == command
    assert any("silently ignored by TensorRT 8.6" in b for b in finding["blockers"])
    fixed = invoke("tensorrt", path, "--trt-version", "8.6", "--fix-dim", "e=3")
    assert fixed.exit_code == 0, fixed.output


def test_check_on_the_gnn_export_agrees_with_tensorrt_8_6_with_and_without_fix_dim(tmp_path):
    """The TorchScript GNN export: tensorrt --trt-version 8.6 refuses it as it is and succeeds with
    --fix-dim num_edges=SIZE (validated); check says FIXABLE with that fix, on the command line as
    in --json."""
    from pathlib import Path

    path = str(Path(__file__).parent / "data" / "torch_trt" / "scatter_add_gnn_ts16.onnx")
    refused = invoke("tensorrt", path, "--trt-version", "8.6", "-o", tmp_path / "out.onnx")
    assert refused.exit_code == 1 and "--fix-dim num_edges=SIZE" in error_line(refused)
    fixed = invoke("tensorrt", path, "--trt-version", "8.6", "--fix-dim", "num_edges=12",
                   "-o", tmp_path / "out.onnx")
    assert fixed.exit_code == 0 and "PASSED" in fixed.output, fixed.output
    command = "scatter-rewrite tensorrt --trt-version 8.6 --fix-dim num_edges=SIZE"
    code, report = check_json(path, "tensorrt-8.6")
    assert code == 1 and (report["status"], report["fix"]) == ("FIXABLE", command)
    result = invoke("check", path, "--target", "tensorrt-8.6", terminal_width=200)
    assert f"{path}: FIXABLE for tensorrt-8.6" in result.stdout
    assert error_line(result) == f"not ready for tensorrt-8.6; fix: {command}"
    assert "fixed to SIZE (2 in this dry run)" in result.stdout


def test_a_fix_dim_that_does_not_reach_the_target_is_not_offered(tmp_path):
    """One reduction fixed by --fix-dim e=SIZE, another (bfloat16 data) that TensorRT 8.6 takes in
    no form: tensorrt refuses the model with the dimension fixed too, so check is BLOCKED, its
    reason the refusal of the command with --fix-dim, and no node keeps that fix."""
    vi = oh.make_tensor_value_info
    graph = oh.make_graph(
        [oh.make_node("ScatterElements", ["data", "indices", "updates"], ["out"], name="by_edge",
                      reduction="add"),
         oh.make_node("ScatterElements", ["half", "half_indices", "half_updates"], ["half_out"],
                      name="bfloat", reduction="add")],
        "two", [vi("data", TensorProto.FLOAT, [4, 5]), vi("indices", TensorProto.INT64, ["e", 5]),
                vi("updates", TensorProto.FLOAT, ["e", 5]), vi("half", TensorProto.BFLOAT16, [4]),
                vi("half_indices", TensorProto.INT64, [3]),
                vi("half_updates", TensorProto.BFLOAT16, [3])],
        [vi("out", TensorProto.FLOAT, [4, 5]), vi("half_out", TensorProto.BFLOAT16, [4])])
    path = saved(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 16)]), tmp_path)
    command = "scatter-rewrite tensorrt --trt-version 8.6 --fix-dim e=SIZE"
    still = invoke("tensorrt", path, "--trt-version", "8.6", "--fix-dim", "e=3", "--no-validate",
                   "-o", tmp_path / "out.onnx")
    assert still.exit_code == 1 and "'bfloat'" in error_line(still), still.output
    code, report = check_json(path, "tensorrt-8.6")
    assert code == 1 and report["status"] == "BLOCKED" and report["fix"] is None
    assert report["dry_run"]["command"] == command and not report["dry_run"]["succeeded"]
    assert [f["fix"] for f in report["findings"]] == [None, None]
    result = invoke("check", path, "--target", "tensorrt-8.6", terminal_width=200)
    assert error_line(result).startswith(f"blocked on tensorrt-8.6: {command} refuses it: ")
    assert "fix: " not in result.stdout


# ---- the table at 80 and 200 columns ---------------------------------------------------------------

TABLE_MODELS = [("models/gnn_max_opset18.onnx", "opset-13"),
                ("tests/data/torch/gnn_max_layer_ts17.onnx", "tensorrt-8.6"),
                ("tests/data/torch_trt/scatter_add_gnn_ts16.onnx", "tensorrt-8.6")]


@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("model, target", TABLE_MODELS)
def test_the_table_fits_the_width_and_keeps_words_whole(model, target, width):
    from pathlib import Path

    from scatter_rewrite.readiness import check_report

    path = str(Path(__file__).resolve().parents[1] / model)
    # (COLUMNS says otherwise: the Click context's width is the one taken)
    result = invoke("check", path, "--target", target, terminal_width=width, env={"COLUMNS": "37"})
    rows = [line for line in result.stdout.splitlines() if line[:1] in "+|"]
    assert rows and all(len(line) == len(rows[0]) <= width for line in rows), result.stdout
    assert all(line[-1] in "+|" for line in rows)  # the right border is there
    cells = [w for f in check_report(path, target).findings
             for text in [f.node, *f.blockers, *f.notes, f.fix or ""] for w in text.split()]
    assert cells and all(any(w in row for row in rows) for w in cells), result.stdout
