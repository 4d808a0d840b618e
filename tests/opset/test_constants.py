"""Every constant keeps its own value through a rewrite: conversions are cached by what a node is
(op, attributes, constant inputs), and a constant's tensor is keyed by its content or by identity,
never by its name. TorchScript writes every Constant's tensor with the name "" (and hand-made models
repeat names), so a key by name or by an abbreviated description would give every same-dtype,
same-shape constant the first one's value.

Each model runs in onnxruntime with default session options before and after, outputs compared
bit for bit; the verbs run with validate=False, as the Python API and ``--no-validate`` write."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

import scatter_rewrite as sr
from scatter_rewrite.passes import FoldPass, LowerPass, MoveOpsetPass, UpgradePass
from scatter_rewrite.testing import LOCAL_DOMAIN
from tests.helpers.runs import ort_run  # onnxruntime with default session options
from tests.helpers.exports import export_arrays

F = TensorProto.FLOAT


def _tensor(array: np.ndarray, name: str = "") -> onnx.TensorProto:
    """``array`` as a Constant's value tensor named ``name`` ("" as TorchScript writes it)."""
    tensor = numpy_helper.from_array(array)
    tensor.name = name
    return tensor


def _constant_adds(values: list[np.ndarray], names: list[str], prefix: str = "",
                   source: str = "x") -> tuple[list[onnx.NodeProto], list[str]]:
    """One ``Constant`` per value (its tensor named as ``names`` says), each added to ``source``:
    the nodes and the sums' names."""
    nodes, sums = [], []
    for i, (value, name) in enumerate(zip(values, names)):
        nodes.append(oh.make_node("Constant", [], [f"{prefix}c{i}"], value=_tensor(value, name)))
        nodes.append(oh.make_node("Add", [source, f"{prefix}c{i}"], [f"{prefix}y{i}"]))
        sums.append(f"{prefix}y{i}")
    return nodes, sums


def two_constants_model(opset: int, where: str = "main") -> onnx.ModelProto:
    """x + 4x4 of 0.5 and x + 4x4 of 0, both Constants' tensors unnamed, at ``opset``; ``where``:
    "main", "if" (the four nodes in both branches of an If on ``cond``, the branches' constants
    differing) or "function" (in a model-local function)."""
    values = [np.full((4, 4), 0.5, np.float32), np.zeros((4, 4), np.float32)]
    x, outputs = oh.make_tensor_value_info("x", F, [4, 4]), ["y0", "y1"]
    declared = [oh.make_tensor_value_info(o, F, [4, 4]) for o in outputs]
    functions, imports = [], [oh.make_opsetid("", opset)]
    if where == "main":
        nodes, _ = _constant_adds(values, ["", ""])
        graph = oh.make_graph(nodes, "main", [x], declared)
    elif where == "if":
        branches = []
        for branch, shift in (("then", 0.0), ("else", 2.0)):
            nodes, sums = _constant_adds([v + shift for v in values], ["", ""], f"{branch}_")
            branches.append(oh.make_graph(nodes, branch, [],
                                          [oh.make_tensor_value_info(s, F, [4, 4]) for s in sums]))
        cond = oh.make_tensor_value_info("cond", TensorProto.BOOL, [])
        node = oh.make_node("If", ["cond"], outputs, then_branch=branches[0],
                            else_branch=branches[1])
        graph = oh.make_graph([node], "main", [x, cond], declared)
    elif where == "function":
        nodes, sums = _constant_adds(values, ["", ""], source="fx")
        functions = [oh.make_function(LOCAL_DOMAIN, "TwoConstants", ["fx"], sums, nodes,
                                      opset_imports=[oh.make_opsetid("", opset)])]
        call = oh.make_node("TwoConstants", ["x"], outputs, domain=LOCAL_DOMAIN)
        graph = oh.make_graph([call], "main", [x], declared)
        imports.append(oh.make_opsetid(LOCAL_DOMAIN, 1))
    else:
        raise ValueError(where)
    model = oh.make_model(graph, opset_imports=imports, functions=functions)
    model.ir_version = 7
    onnx.checker.check_model(model, full_check=True)
    return model


def _inputs_per_branch(model: onnx.ModelProto, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Seeded inputs (each branch of an If on ``cond``)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        t = value.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        if t.elem_type == TensorProto.BOOL:
            continue
        if t.elem_type == TensorProto.INT64:  # (idx: one row, so no index repeats along axis 0)
            feeds[value.name] = rng.integers(0, shape[0], shape).astype(np.int64)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    if any(v.name == "cond" for v in model.graph.input):
        return [feeds | {"cond": np.array(True)}, feeds | {"cond": np.array(False)}]
    return [feeds]


def assert_same_in_onnxruntime(original: onnx.ModelProto, rewritten: onnx.ModelProto) -> None:
    """Both models run in onnxruntime (default session options); every output bit for bit."""
    for feeds in _inputs_per_branch(original):
        expected, actual = ort_run(original, feeds), ort_run(rewritten, feeds)
        assert len(expected) == len(actual)
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert e.dtype == a.dtype and e.shape == a.shape, i
            assert e.tobytes() == a.tobytes(), f"output {i} differs"


MOVES = [(11, 13, "lower"), (11, 17, "lower"), (12, 13, "lower"), (11, 13, "upgrade")]


@pytest.mark.parametrize("where", ["main", "if", "function"])
@pytest.mark.parametrize(("source", "target", "verb"), MOVES)
def test_unnamed_constants_of_one_shape_keep_their_values_through_an_opset_move(source, target,
                                                                                verb, where):
    original = two_constants_model(source, where)
    moved = getattr(sr, verb)(original, opset=target, validate=False)
    assert moved.opset_import[0].version == target
    assert_same_in_onnxruntime(original, moved)


# Constants that a key by name, or by an abbreviated description of the tensor, would merge:
# same dtype and shape, distinct values; unnamed (TorchScript), all named alike, over the size up to
# which tensors are keyed by content, of an integer type; and one -0.0 beside a 0.0.
def _many_constants() -> tuple[list[np.ndarray], list[str]]:
    rng = np.random.default_rng(7)
    small = [rng.standard_normal((4, 4)).astype(np.float32) for _ in range(8)]
    zeros = [np.zeros((4, 4), np.float32), np.full((4, 4), -0.0, np.float32)]
    values = small + zeros
    names = [""] * 4 + ["c"] * 4 + ["", ""]
    return values, names


def many_constants_model(opset: int) -> onnx.ModelProto:
    """Distinct constants of equal dtype and shape, each added to an input and each its own
    output, beside a ScatterElements on the inputs (for the verbs that rewrite scatters) and a
    constant one (for fold)."""
    values, names = _many_constants()
    nodes, outputs = _constant_adds(values, names)
    rng = np.random.default_rng(8)
    big = [rng.standard_normal((40, 40)).astype(np.float32) for _ in range(2)]  # 6400 bytes each
    big_nodes, big_sums = _constant_adds(big, ["", ""], "big_", source="z")
    ints = [rng.integers(-9, 9, (4, 4)).astype(np.int64) for _ in range(3)]
    int_nodes, int_sums = _constant_adds(ints, ["", "k", "k"], "int_", source="n")
    scatter_constants = [np.arange(16, dtype=np.float32).reshape(4, 4),
                         np.array([[1, 0, 3, 2]], np.int64), np.ones((1, 4), np.float32)]
    scatter_nodes = [oh.make_node("Constant", [], [f"s{i}"], value=_tensor(v))
                     for i, v in enumerate(scatter_constants)]
    scatter_nodes += [
        oh.make_node("ScatterElements", ["s0", "s1", "s2"], ["folded"], axis=1),
        oh.make_node("ScatterElements", ["x", "idx", "upd"], ["scattered"], axis=0),
    ]
    graph_outputs = outputs + big_sums + int_sums + ["folded", "scattered"]
    types = {**{o: (F, [4, 4]) for o in outputs}, **{o: (F, [40, 40]) for o in big_sums},
             **{o: (TensorProto.INT64, [4, 4]) for o in int_sums},
             "folded": (F, [4, 4]), "scattered": (F, [4, 4])}
    graph = oh.make_graph(
        nodes + big_nodes + int_nodes + scatter_nodes, "main",
        [oh.make_tensor_value_info("x", F, [4, 4]), oh.make_tensor_value_info("z", F, [40, 40]),
         oh.make_tensor_value_info("n", TensorProto.INT64, [4, 4]),
         oh.make_tensor_value_info("idx", TensorProto.INT64, [1, 4]),
         oh.make_tensor_value_info("upd", F, [1, 4])],
        [oh.make_tensor_value_info(o, *types[o]) for o in graph_outputs])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 7
    onnx.checker.check_model(model, full_check=True)
    return model


VERBS = {
    "upgrade 13": lambda m: sr.upgrade(m, opset=13, validate=False),
    "fold": lambda m: sr.fold(m, validate=False),
    "lower 11": lambda m: sr.lower(m, opset=11, validate=False),
    "lower 13": lambda m: sr.lower(m, opset=13, validate=False),
    "lower 17": lambda m: sr.lower(m, opset=17, validate=False),
    "to_scatternd": lambda m: sr.to_scatternd(m, validate=False),
    "tensorrt 8.6": lambda m: sr.prepare_for_tensorrt(m, trt_version="8.6", validate=False),
    "tensorrt 10": lambda m: sr.prepare_for_tensorrt(m, trt_version="10", validate=False),
    "repair": lambda m: sr.repair(m, validate=False),
    "rewrite": lambda m: sr.rewrite(m, [UpgradePass(16), MoveOpsetPass(16), FoldPass(), LowerPass(opset=16)],
                                    validate=False),
}


@pytest.mark.parametrize("verb", sorted(VERBS))
@pytest.mark.parametrize("source", [11, 13])
def test_many_constants_of_one_shape_keep_their_values_through_every_verb(source, verb):
    original = many_constants_model(source)
    rewritten = VERBS[verb](original)
    assert_same_in_onnxruntime(original, rewritten)


@pytest.mark.parametrize(("source", "target"), [(12, 13), (12, 17), (13, 11)])
def test_float_attributes_differing_only_in_the_sign_of_zero_keep_it(source, target):
    """Constant's value_float -0.0 and 0.0 are equal as Python floats, yet 1 / x is -inf for one
    and inf for the other: attributes are keyed by their bits."""
    nodes = [oh.make_node("Constant", [], ["neg"], value_float=-0.0),
             oh.make_node("Constant", [], ["pos"], value_float=0.0),
             oh.make_node("Div", ["one", "neg"], ["y0"]),
             oh.make_node("Div", ["one", "pos"], ["y1"])]
    graph = oh.make_graph(nodes, "main", [oh.make_tensor_value_info("one", F, [])],
                          [oh.make_tensor_value_info(o, F, []) for o in ("y0", "y1")])
    original = oh.make_model(graph, opset_imports=[oh.make_opsetid("", source)])
    original.ir_version = 7
    moved = sr.lower(original, opset=target, validate=False)
    [y0, y1] = ort_run(moved, {"one": np.array(1.0, np.float32)})
    assert (y0, y1) == (-np.inf, np.inf)


@pytest.mark.parametrize("verb", ["lower", "upgrade"])
def test_constants_over_the_external_data_threshold_keep_their_values_in_the_data_file(tmp_path,
                                                                                      verb):
    """A model with external data is written with its big tensors, Constants' included, in the data
    file, in order: the unnamed 40x40 Constants each keep their own bytes there."""
    original = many_constants_model(11)
    weight = numpy_helper.from_array(np.full((40, 40), 3.0, np.float32), "w")
    original.graph.initializer.append(weight)
    original.graph.node.append(oh.make_node("Add", ["z", "w"], ["zw"]))
    original.graph.output.append(oh.make_tensor_value_info("zw", F, [40, 40]))
    source = tmp_path / "m.onnx"
    onnx.save(original, source, save_as_external_data=True, location="m.data", size_threshold=1024)
    out = getattr(sr, verb)(str(source), opset=13, validate=False, output=str(tmp_path / "o.onnx"))
    written = onnx.load(out, load_external_data=False)
    big = [a.t for n in written.graph.node for a in n.attribute if list(a.t.dims) == [40, 40]]
    assert len(big) == 2 and all(t.data_location == TensorProto.EXTERNAL for t in big)
    assert_same_in_onnxruntime(onnx.load(source), onnx.load(out))


EXPORT = Path(__file__).parents[1] / "data" / "torch" / "label_smoothing_ts11"


@pytest.mark.parametrize(("verb", "target"), [("lower", 13), ("lower", 17), ("upgrade", 13)])
def test_a_torchscript_export_keeps_its_unnamed_constants_through_a_move(verb, target):
    """TorchScript at opset 11 (tests/data/torch/make_constants_ts11.py): three 4x16 Constants,
    each tensor named "", moved up with validate=False; PyTorch's own outputs, and the original's
    in onnxruntime bit for bit."""
    original = onnx.load(f"{EXPORT}.onnx")
    assert sum(n.op_type == "Constant" and n.attribute[0].t.name == ""
               and list(n.attribute[0].t.dims) == [4, 16] for n in original.graph.node) == 3
    feeds, pytorchs = export_arrays(EXPORT.parent, EXPORT.name)
    moved = getattr(sr, verb)(original, opset=target, validate=False)
    y, z = ort_run(moved, feeds)
    for got, want in ((y, pytorchs["y"]), (z, pytorchs["z"])):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    for got, want in zip((y, z), ort_run(original, feeds)):
        assert got.tobytes() == want.tobytes()


def test_node_keys_are_equal_exactly_for_equal_values():
    """graph.tensor_key / attribute_key: small tensors by dtype, shape and bytes (the name plays no
    part), big ones and strings by identity; floats by their bits."""
    import onnx_ir as ir

    from scatter_rewrite.graph import attribute_key, tensor_key

    a = ir.tensor(np.zeros((4, 4), np.float32), name="")
    assert tensor_key(a) == tensor_key(ir.tensor(np.zeros((4, 4), np.float32), name="other"))
    assert tensor_key(a) != tensor_key(ir.tensor(np.full((4, 4), 0.5, np.float32), name=""))
    assert tensor_key(a) != tensor_key(ir.tensor(np.zeros((16,), np.float32)))
    assert tensor_key(a) != tensor_key(ir.tensor(np.zeros((4, 4), np.int32)))
    big = ir.tensor(np.zeros((40, 40), np.float32))
    assert tensor_key(big) == tensor_key(big) != tensor_key(ir.tensor(np.zeros((40, 40), np.float32)))
    assert attribute_key(ir.AttrFloat32("alpha", -0.0)) != attribute_key(ir.AttrFloat32("alpha", 0.0))
    assert attribute_key(ir.AttrInt64s("axes", [0, 1])) == attribute_key(ir.AttrInt64s("axes", (0, 1)))
