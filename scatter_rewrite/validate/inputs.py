"""Validation inputs: seeded values that respect every scatter's contract (:mod:`.contracts`), of
sizes that fit the model's ops (:mod:`.dims`) and that the original runs on (:mod:`.trial`), or the
user's, checked (:mod:`.user_inputs`); :func:`plan_validation` makes the plan before any pass runs.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx_ir as ir

from scatter_rewrite.errors import ValidationError
from scatter_rewrite.said import param, said
from scatter_rewrite.graph import computes_a_scatter, function_calls, is_default_domain, iter_nodes
from scatter_rewrite.type_inference import (
    annotate_functions_with, restore_types, weightless_copy,
)
from scatter_rewrite.validate.arguments import (
    argument_inputs, extreme_values, integer_data_inputs,
)
from scatter_rewrite.validate.contracts import (
    IndexContract, index_contracts, fits_contract, row_contract,
)
from scatter_rewrite.validate.dims import DEFAULT_SIZE, fit_dims
from scatter_rewrite.validate.engines import may_trap
from scatter_rewrite.validate.index_paths import divisor_inputs, numpy_dtype, size_inputs
from scatter_rewrite.validate.index_sources import inferred_shapes
from scatter_rewrite.validate.trial import OriginalSession, runs_in_reference
from scatter_rewrite.validate.user_inputs import checked_user_inputs, load_inputs, user_tolerance

__all__ = ["IndexContract", "load_inputs", "plan_validation", "user_tolerance", "ValidationPlan"]


@dataclasses.dataclass


class ValidationPlan:
    """What validation needs to know about the *original* model, computed before any pass runs."""

    inputs: dict[str, np.ndarray]
    # The original's float add/mul scatters (named): sums and products a rewrite may reorder.
    float_sums: list[str]
    notes: list[str]
    outputs: list[str] = dataclasses.field(
        default_factory=list
    )  # graph output names (passes keep them)
    # The user's (rtol, atol) for every float output (--rtol/--atol), instead of our judgement.
    tolerance: tuple[float, float] | None = None
    # Ops the passes re-expressed so that float results may round otherwise (allow_float_rounding).
    float_rounding: list[str] = dataclasses.field(default_factory=list)
    # The default-domain opset (before, after) where the passes moved it (allow_float_rounding):
    # onnxruntime fuses ops differently per opset, so float outputs may round otherwise.
    opset_move: tuple[int, int] | None = None
    # The float types those sums are computed in, where known: a float16 sum cast to a float32
    # output rounds as float16 does, not as the output type shows.
    float_sum_types: list[np.dtype] = dataclasses.field(default_factory=list)

    @property
    def float_tolerance(self) -> bool:
        """Whether float outputs may differ by rounding (see :mod:`.comparison`): the one place that
        says so, from what the original computes and what the passes report."""
        return bool(self.float_sums or self.float_rounding)


def _negated(slots: np.ndarray, shifts, dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """About 30% of ``slots`` drawn as the negative value ``slot - shift`` that reaches them (those
    below their shift, and where ``dtype`` holds it: none for an unsigned input)."""
    shifts = np.asarray(shifts, np.int64)
    lowest = np.iinfo(dtype).min if np.issubdtype(dtype, np.integer) else -np.inf
    negate = (rng.random(np.shape(slots)) < 0.3) & (slots < shifts) & (slots - shifts >= lowest)
    return np.where(negate, slots - shifts, slots)


def _index_values(
    shape: tuple[int, ...], dtype: np.dtype, c: IndexContract, rng: np.random.Generator
) -> np.ndarray:
    if (c.rows and shape and c.kind in ("rows", "elements")
            and not (c.kind == "elements" and c.unique and c.axis == 0)):
        # Row by row: the rows without a contract hold anything (the whole input's, if it has one).
        whole = dataclasses.replace(c, rows={})
        values = (_random_values(shape, dtype, rng) if c.kind == "rows"
                  else _index_values(shape, dtype, whole, rng))
        for row in sorted(c.rows):
            values[row] = _index_values(shape[1:], dtype, row_contract(c, row), rng)
        return values
    if c.rows and c.kind == "rows":  # (a scalar input has no rows)
        return _random_values(shape, dtype, rng)
    if c.kind == "start":
        return rng.integers(0, max(c.bounds[0], 1), size=shape).astype(dtype)
    if c.kind == "nd":
        count = int(np.prod(shape, dtype=np.int64)) // max(len(c.bounds), 1)
        total = int(np.prod(c.bounds, dtype=np.int64))
        if count and not total:
            raise _no_index_in_range(c)
        flat = (rng.choice(total, size=count, replace=False) if c.unique and fits_contract(shape, c)
                else rng.integers(0, max(total, 1), size=count))
        coords = (
            np.stack(np.unravel_index(flat, c.bounds), axis=-1)
            if c.bounds
            else np.zeros((count, 0), np.int64)
        )
        return _negated(coords, c.negative_shifts, dtype, rng).reshape(shape).astype(dtype)
    lo, hi = c.slots
    if lo >= hi:  # no slot suits every scatter (the notes say the targets may repeat): any in range
        lo, hi = 0, c.bounds[0]
    if hi <= 0 and int(np.prod(shape, dtype=np.int64)):
        raise _no_index_in_range(c)
    if not shape:
        values = np.asarray(rng.integers(lo, hi))
    elif c.unique and fits_contract(shape, c):
        moved = (-1,) + shape[: c.axis] + shape[c.axis + 1 :]
        columns = int(np.prod(moved[1:], dtype=np.int64))
        if columns * (hi - lo) <= 2**20:
            keys = (
                rng.random((columns, hi - lo)).argsort(axis=1)[:, : shape[c.axis]].T
            )  # a permutation per column
        else:
            # A big axis: draw without replacement per column, O(indices) memory instead of
            # O(columns x slots).
            keys = np.stack(
                [rng.choice(hi - lo, size=shape[c.axis], replace=False) for _ in range(columns)],
                axis=1,
            )
        values = lo + np.moveaxis(
            keys.reshape((shape[c.axis],) + shape[: c.axis] + shape[c.axis + 1 :]), 0, c.axis
        )
    else:
        values = rng.integers(lo, hi, size=shape)
    return _negated(values, c.negative_shifts, dtype, rng).astype(dtype)


def _no_index_in_range(c: IndexContract) -> ValidationError:
    """An index input with values, into an axis of size 0: no value is in range, so the original
    model runs on no input (the spec makes an index out of range an error)."""
    return ValidationError(said(
        f"the original model runs on no input: indices that are not empty address data dims of "
        f"sizes {list(c.bounds)}, where no index is in range (an axis of size 0); use ",
        param("validate", False), " to rewrite it unproven"))


def _random_values(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    if dtype == np.dtype(object):
        return np.array(
            [f"s{v}" for v in rng.integers(0, 100, size=int(np.prod(shape)))], dtype=object
        ).reshape(shape)
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if np.issubdtype(dtype, np.unsignedinteger):
        return rng.integers(0, 20, size=shape).astype(dtype)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-20, 20, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(
        dtype
    )  # float16/32/64 and ml_dtypes (bfloat16, float8)


def _planning_copy(model: ir.Model) -> ir.Model:
    """What index contracts are traced on: a weightless copy of ``model`` with its local functions
    inlined when one is called more than once, and its Ifs with a constant condition replaced by the
    branch they take; ``model`` itself when neither applies. Graph input names are kept.

    A function called twice may scatter into data of other sizes, with indices from other inputs:
    inlined, each call is traced with its own. (Called once, it stays a function, bound to its call,
    so that notes name its nodes as the model does.) Without the If wrappers, contracts see through
    TorchScript's rank-0 If around scatter_reduce."""
    repeated = any(len(calls) > 1 for calls in function_calls(model).values())
    has_if = any(node.op_type == "If" and is_default_domain(node) for node, _ in iter_nodes(model))
    if not repeated and not has_if:
        return model
    from onnx_ir.passes.common import InlinePass

    from scatter_rewrite.passes.inline_if import inline_constant_ifs

    copy = weightless_copy(model)
    changed = False
    if repeated:
        try:
            InlinePass()(copy)
            changed = True
        # (cyclic functions, say) traced as they are: each bound to its first call
        except Exception:
            copy = weightless_copy(model)
    changed = inline_constant_ifs(copy) or changed
    return copy if changed else model


def plan_validation(model: ir.Model, seed: int = 0, inputs: dict[str, np.ndarray] | None = None,
                    dim_sizes: dict[str, int] | None = None, rtol: float | None = None,
                    atol: float | None = None) -> ValidationPlan:
    """Inputs for the original ``model`` (or the user's, checked), and how to compare outputs.
    Symbolic dimensions get ``dim_sizes[name]`` where given (the sizes a pass fixed them to),
    else sizes that fit the model's ops (:mod:`.dims`), grown while the original fails to run in
    onnxruntime on them (ValidationError saying what was tried if it never runs).
    ``rtol``/``atol`` (either, the other then 0): the user's bound for every float output,
    ``|rewritten - original| <= atol + rtol * |original|``."""
    tolerance = user_tolerance(rtol, atol)
    outputs = [v.name for v in model.graph.outputs]
    initializer_names = set(model.graph.initializers)
    graph_inputs = [v for v in model.graph.inputs if v.name not in initializer_names]
    planned = _planning_copy(model)
    if inputs is not None:
        given, user_notes = checked_user_inputs(graph_inputs, inputs, dim_sizes)
        _, float_sums, sum_types, _ = _traced(planned, {k: v.shape for k, v in given.items()})
        return ValidationPlan(given, float_sums, user_notes, outputs, tolerance,
                              float_sum_types=sum_types)
    dims, refit = fit_dims(model, graph_inputs, dim_sizes)
    attempt = _Attempt.of(planned, graph_inputs, dims, dims.sizes, seed)
    # (else nothing to grow: validation's own run says whether the original runs; but integer
    # division that would kill onnxruntime on the first inputs is tried with others first)
    if dims.free or may_trap(model) or attempt.fitted:
        attempt = _running_attempt(model, planned, graph_inputs, dims, refit, attempt, seed)
    contracts, float_sums, sum_types, notes = attempt.traced
    if any(attempt.sizes[k] != DEFAULT_SIZE for k in dims.free):
        notes.append(f"input sizes for the model's ops: {dims.describe(attempt.sizes)}")
    notes += dims.notes
    if contracts:
        notes.append(f"in-range scatter indices generated for {', '.join(sorted(contracts))}")
    return ValidationPlan(attempt.inputs, float_sums, notes, outputs, tolerance,
                          float_sum_types=sum_types)


@dataclasses.dataclass


class _Attempt:
    """Inputs generated for one choice of sizes, and the contracts traced for them; with ``ones``,
    the integer and bool inputs no contract covers are all 1 (a mask over every position, a count
    of one) instead of random."""

    sizes: dict[str, int]
    traced: tuple  # index_contracts's (contracts, float sums, their types, notes)
    inputs: dict[str, np.ndarray]
    ones: list[str]  # the inputs set to 1
    # Whether some values were fitted to an op's argument or drawn over an integer type's range:
    # then the original is tried on them before validation uses them.
    fitted: bool = False
    variant: str = ""  # how these values differ from the first draw (another seed, small integers)

    @classmethod
    def of(cls, planned, graph_inputs, dims, sizes, seed, ones: bool = False,
           extremes: bool = True, variant: str = "") -> _Attempt:
        input_shapes = dims.shapes(sizes)
        traced = _traced(planned, input_shapes)
        fitted = _Fitted.of(planned, input_shapes, extremes)
        inputs = _generated(graph_inputs, input_shapes, traced[0], seed, divisor_inputs(planned),
                            size_inputs(planned), fitted)
        set_to_one = [v.name for v in graph_inputs if ones and v.name not in traced[0]
                      and numpy_dtype(v.dtype).kind in "biu"]
        for name in set_to_one:
            inputs[name] = np.ones_like(inputs[name])
        return cls(sizes, traced, inputs, set_to_one,
                   bool(fitted.arguments or fitted.integer_data), variant)

    def said(self, dims) -> str:
        ones = f"{', '.join(self.ones)} all 1" if self.ones else self.variant
        sizes = dims.describe(self.sizes)  # ("": no free dims, nothing to say of sizes)
        if not sizes:
            return ones or "the generated values"
        return f"{sizes} with {ones}" if ones else sizes


def _running_attempt(model, planned, graph_inputs, dims, refit, first: _Attempt,
                     seed: int) -> _Attempt:
    """The first attempt, from ``first`` on, on which the original runs in onnxruntime: at each
    size, random values, then the integer inputs no contract covers set to 1 (random integers make
    no valid attention mask); the free dims grown after both fail (:func:`_grown`). When none runs:
    ``first``, if onnx.reference runs the original on it (validation then runs there);
    ValidationError saying what was tried if it does not."""
    session = OriginalSession(model)
    tried: list[tuple[str, str]] = []
    counted: list[str] = []  # the sizes tried, and with ones: what bounds the growths
    value_sensitive = first.fitted or any(numpy_dtype(v.dtype).kind in "biu" for v in graph_inputs)
    sizes = first.sizes
    while sizes is not None:
        # At the first sizes, values drawn again with other seeds, and with small integers (where
        # an input's values may decide whether the original runs: random floats rarely do).
        redrawn = [] if tried or not value_sensitive else (
            [dict(seed=seed + k, variant=f"values of seed {seed + k}")
             for k in range(1, _SEED_TRIES)]
            + ([dict(seed=seed, extremes=False, variant="small integers")] if first.fitted
               else []))
        for variant in [dict(seed=seed)] + redrawn + [dict(seed=seed, ones=True)]:
            ones = variant.get("ones", False)
            attempt = (first if not tried and variant == dict(seed=seed)
                       else _Attempt.of(planned, graph_inputs, dims, sizes, **variant))
            if ones and not attempt.ones:
                break
            failure = session.failure(attempt.inputs)
            if failure is None:
                if tried:
                    attempt.traced[3].append(
                        f"the original runs with {attempt.said(dims)}, not with {_said(tried)}")
                return attempt
            tried.append((attempt.said(dims), failure))
            if variant in redrawn:  # (the other draws do not count against the growths)
                continue
            counted.append(attempt.said(dims))
        sizes = _grown(dims, refit, sizes, counted)
    reason = runs_in_reference(model, first.inputs)
    if reason is not None:
        raise ValidationError(said(
            "cannot find inputs the original model runs with: onnxruntime fails with "
            f"{_said(tried)}; onnx.reference with {first.said(dims)} ({reason}){_unmet(dims)}; "
            "pass inputs it runs on with ", param("inputs"), " (the proof then uses them), or "
            "use ", param("validate", False), " to skip the proof"))
    first.traced[3].append(
        f"onnxruntime fails on the original with every size tried: {_said(tried)}")
    return first


_SEED_TRIES = 3  # seeds the values are drawn with at the first sizes, while the original fails
_GROWTHS = 6  # times the free dims are doubled after the fitted sizes fail in onnxruntime
_LARGEST_INPUT = 1 << 24  # elements: no input is grown past this


def _unmet(dims) -> str:
    """What the ops need that no size met (:mod:`.dims`'s notes), for an error."""
    return f"; {'; '.join(dims.unmet)}" if dims.unmet else ""


def _said(tried: list[tuple[str, str]]) -> str:
    """The sizes tried, each run of them that failed alike said once with its reason."""
    runs: list[tuple[list[str], str]] = []
    for sizes, reason in tried:
        if runs and runs[-1][1] == reason:
            runs[-1][0].append(sizes)
        else:
            runs.append(([sizes], reason))
    return "; ".join(f"{' then '.join(sizes)} ({reason})" for sizes, reason in runs)


def _grown(dims, refit, sizes: dict[str, int], tried: list[str]) -> dict[str, int] | None:
    """The next sizes to try after ``sizes`` failed: the free dims doubled (then refitted to the
    ops' needs), skipping sizes already tried; None past :data:`_GROWTHS` tries or the input
    bound."""
    if len(tried) > _GROWTHS:
        return None
    start = sizes
    for _ in range(_GROWTHS):
        start = {k: n * 2 if k in dims.free else n for k, n in start.items()}
        grown = refit(start)
        if any(math.prod(s) > _LARGEST_INPUT for s in dims.shapes(grown).values()):
            return None
        if not any(t == dims.describe(grown) or t.startswith(f"{dims.describe(grown)} with ")
                   for t in tried):
            return grown
    return None


def _traced(planned: ir.Model, input_shapes: dict[str, tuple]):
    """:func:`index_contracts` of the planning copy, its functions typed from their call sites for
    the while."""
    # ONNX shape inference does not enter functions: a function scatter's data shape (a Reshape
    # of constants there) comes from inferring the body with its call sites' input types.
    borrowed = annotate_functions_with(planned, computes_a_scatter)
    try:
        return index_contracts(planned, input_shapes)
    finally:
        restore_types(borrowed)


@dataclasses.dataclass
class _Fitted:
    """The inputs generated to fit an op's argument (:func:`.arguments.argument_inputs`), and the
    integer scatter data drawn over its type's range (:func:`.arguments.integer_data_inputs`:
    name -> (reduction, update count, whether it is the updates))."""

    arguments: dict
    integer_data: dict

    @classmethod
    def of(cls, planned: ir.Model, input_shapes: dict[str, tuple], extremes: bool) -> _Fitted:
        shapes = inferred_shapes(planned, input_shapes)

        def shape_of(value):
            return shapes.get(value.name)

        return cls(argument_inputs(planned, shape_of),
                   integer_data_inputs(planned, shape_of) if extremes else {})


def _generated(graph_inputs: list[ir.Value], input_shapes: dict[str, tuple],
               contracts: dict[str, IndexContract], seed: int,
               divisors: set[str] = frozenset(),
               sizes: dict[str, bool] | None = None,
               fitted: _Fitted | None = None) -> dict[str, np.ndarray]:
    """Seeded values: in range for the ``contracts``' inputs, positive for the integer
    ``divisors`` (:func:`.index_paths.divisor_inputs`) and for the inputs that reach a size
    (:func:`.index_paths.size_inputs`: ones where only 1 fits), what the op takes for those that
    reach an axis, shape, class or divisor argument, over the type's range for integer scatter
    data (``fitted``), random otherwise."""
    sizes = sizes or {}
    fitted = fitted or _Fitted({}, {})
    rng = np.random.default_rng(seed)
    generated = {}
    for v in graph_inputs:
        shape, dtype = input_shapes[v.name], numpy_dtype(v.dtype)
        argument = fitted.arguments.get(v.name)
        fitting = None if argument is None else argument.values(shape, dtype, rng)
        if v.name in contracts:
            generated[v.name] = _index_values(shape, dtype, contracts[v.name], rng)
        elif fitting is not None:
            generated[v.name] = fitting
        elif v.name in fitted.integer_data and dtype.kind in "iu":
            reduction, count, is_updates = fitted.integer_data[v.name]
            generated[v.name] = extreme_values(shape, dtype, reduction, count, is_updates, rng)
        elif v.name in divisors:
            generated[v.name] = rng.integers(1, 20, size=shape).astype(dtype)
        elif v.name in sizes and dtype.kind in "iuf":
            generated[v.name] = (np.ones(shape) if sizes[v.name]
                                 else rng.integers(1, 5, size=shape)).astype(dtype)
        else:
            generated[v.name] = _random_values(shape, dtype, rng)
    return generated
