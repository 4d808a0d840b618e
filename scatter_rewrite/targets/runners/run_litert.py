"""Converts an ONNX model with onnx2tf (ONNX -> TensorFlow -> .tflite, float32) and runs the .tflite in
LiteRT's interpreter (ai_edge_litert), the path most ONNX models take to LiteRT.

onnx2tf is called as its README shows, with what a user of a fixed-size model passes: the inputs'
shapes made static (overwrite_input_shape) and kept as they are (keep_shape_absolutely_input_names:
without it onnx2tf transposes rank-3+ inputs to channels-last), signatures written so inputs and outputs
are found by name. Everything else is onnx2tf's default: onnxsim included, which onnx2tf runs as
the ``onnxsim`` command (scatter_rewrite/targets/runtimes.py puts the venv's commands first on PATH, as its
activate script does).

``--onnx2tf-default-layout``: without keep_shape_absolutely_input_names, as a plain ``onnx2tf -i
model.onnx`` converts (rank-3+ inputs made channels-last, onnx2tf tracking the layout through the
graph). The inputs are then fed as its user feeds them, channels-last where the .tflite takes them
so, and an output it gives channels-last is moved back to the ONNX layout (dimensions that differ
tell which; a shape that matches neither is left as it came).

``--no-onnxsim``: onnx2tf's ``not_use_onnxsim=True`` (``onnx2tf -nuo``), as a user converts who
skips the simplifier: the model reaches the converter as written, computed shapes unfolded.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

try:  # run as a script (its folder first on sys.path), where this project may not be installed
    from _runner_io import Refused, main
except ModuleNotFoundError:  # imported as a module of the package
    from scatter_rewrite.targets.runners._runner_io import Refused, main

__all__ = ["DEFAULT_LAYOUT", "convert", "run", "version"]


def version() -> str:
    import importlib.metadata

    return (f"LiteRT {importlib.metadata.version('ai-edge-litert')} through onnx2tf "
            f"{importlib.metadata.version('onnx2tf')}")


def _tf_name(name: str) -> str:
    """How a tensor name reads in a TensorFlow signature (onnx2tf replaces what TF does not allow)."""
    return re.sub(r"[^0-9A-Za-z_]", "_", name).lower()


def _error_lines(log: str) -> str:
    """onnx2tf's own error lines (ANSI colours removed), or the log's last line."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in log.splitlines()]
    errors = [line for line in lines if line.startswith("ERROR:") or "Error" in line.split(":")[0]]
    return " / ".join(errors[:3]) if errors else (lines[-1] if lines else "no output")


DEFAULT_LAYOUT = "--onnx2tf-default-layout"
NO_ONNXSIM = "--no-onnxsim"


def convert(model_path: str, inputs: dict[str, np.ndarray], folder: Path,
            keep_layout: bool = True, onnxsim: bool = True) -> Path:
    import onnx2tf

    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            onnx2tf.convert(
                input_onnx_file_path=model_path, output_folder_path=str(folder),
                output_signaturedefs=True,
                overwrite_input_shape=[f"{n}:{','.join(map(str, a.shape))}"
                                       for n, a in inputs.items() if a.ndim],
                keep_shape_absolutely_input_names=list(inputs) if keep_layout else None,
                not_use_onnxsim=not onnxsim,
                non_verbose=True)
    except BaseException as e:  # noqa: BLE001 - onnx2tf ends with sys.exit(1) or any exception
        if isinstance(e, KeyboardInterrupt):
            raise
        reason = _error_lines(log.getvalue())
        said = str(e).strip().splitlines()
        if not isinstance(e, SystemExit):
            reason = f"{reason} ({type(e).__name__}: {said[-1] if said else ''})"
        raise Refused(f"onnx2tf {onnx2tf.__version__}: {reason}") from e
    found = sorted(folder.glob("*_float32.tflite"))
    if not found:
        raise Refused(f"onnx2tf {onnx2tf.__version__} wrote no .tflite: {_error_lines(log.getvalue())}")
    if "WARNING" in log.getvalue():  # onnx2tf's warnings, shown where a test then fails
        sys.stderr.write(log.getvalue()[-2000:])
    return found[0]


def _channels_last(shape) -> tuple[int, ...]:
    """onnx2tf's layout of a rank-3+ ONNX shape: the second dimension moved last (NCW -> NWC,
    NCHW -> NHWC)."""
    shape = tuple(int(d) for d in shape)
    return shape[:1] + shape[2:] + shape[1:2] if len(shape) >= 3 else shape


def _from_channels_last(array: np.ndarray, onnx_shape: tuple[int, ...] | None) -> np.ndarray:
    """An output back in the ONNX layout when onnx2tf gave it channels-last."""
    if onnx_shape is None or array.shape == onnx_shape or array.shape != _channels_last(onnx_shape):
        return array
    return np.moveaxis(array, -1, 1)


def _static_shape(value) -> tuple[int, ...] | None:
    dims = value.type.tensor_type.shape.dim
    if not value.type.tensor_type.HasField("shape") or any(not d.HasField("dim_value") for d in dims):
        return None
    return tuple(d.dim_value for d in dims)


def run(model_path: str, inputs: dict[str, np.ndarray], *options: str) -> dict[str, np.ndarray]:
    import onnx
    from ai_edge_litert.interpreter import Interpreter

    with tempfile.TemporaryDirectory() as folder:
        tflite = convert(model_path, inputs, Path(folder), keep_layout=DEFAULT_LAYOUT not in options,
                         onnxsim=NO_ONNXSIM not in options)
        interpreter = Interpreter(model_path=str(tflite))
        try:
            runner = interpreter.get_signature_runner()
            runner.get_input_details()
        except (RuntimeError, ValueError) as e:  # the .tflite fails to prepare: a broken conversion
            raise Refused(f"LiteRT: {str(e).strip().splitlines()[-1]}") from e
        details = runner.get_input_details()
        by_tf = {_tf_name(n): n for n in inputs}
        feeds = {}
        for tf_name, detail in details.items():
            array = inputs[by_tf[_tf_name(tf_name)]]
            if (array.ndim >= 3 and tuple(detail["shape"]) != array.shape
                    and tuple(detail["shape"]) == _channels_last(array.shape)):
                array = np.moveaxis(array, 1, -1)  # only onnx2tf's default layout asks for it
            cast = array.astype(detail["dtype"])
            if not np.array_equal(cast.astype(array.dtype), array, equal_nan=array.dtype.kind == "f"):
                raise Refused(f"LiteRT input {tf_name} is {detail['dtype']}: {array.dtype} values do not fit")
            feeds[tf_name] = cast
        try:
            ran = runner(**feeds)
        except (RuntimeError, ValueError) as e:  # a kernel's prepare step rejects the shapes
            raise Refused(f"LiteRT: {' '.join(str(e).split())}") from e
        result = {_tf_name(name): np.asarray(value) for name, value in ran.items()}
    # TensorFlow's signature sorts outputs by name: back in the ONNX model's order
    outputs = onnx.load(model_path, load_external_data=False).graph.output
    missing = [o.name for o in outputs if _tf_name(o.name) not in result]
    if missing:
        raise Refused(f"the .tflite has no output for {missing} (it has {sorted(result)})")
    return {o.name: _from_channels_last(result[_tf_name(o.name)], _static_shape(o))
            for o in outputs}


if __name__ == "__main__":
    raise SystemExit(main(run, version, frozenset({DEFAULT_LAYOUT, NO_ONNXSIM})))
