"""onnxruntime implementations of the custom-domain nodes ``lower --mode custom`` emits.

``register(session_options)`` is called for every onnxruntime session validation opens, so a
model holding our custom-domain nodes runs in onnxruntime exactly like a standard one.

The nodes (see docs/custom-ops.md and :mod:`scatter_rewrite.passes.lower`):

* ``ai.onnx.contrib::ScatterElements(data, indices, updates)``, attributes ``axis`` (int, default
  0), ``reduction`` (string: none, add, mul, max, min), and, in the TensorRT plugin form,
  ``plugin_version``/``plugin_namespace`` (ignored here);
* ``ai.onnx.contrib::ScatterND(data, indices, updates)``, attribute ``reduction``.

Semantics: exactly ONNX ScatterElements-18/ScatterND-18 as onnxruntime's CPU kernels compute them
(our NumPy evaluator, :mod:`scatter_rewrite.evaluator`). float16 and bfloat16 data they take
only widened to float32 (:data:`WIDENED_TO_FLOAT32`: ``lower --mode custom`` casts around the
node). They are onnxruntime-extensions Python ops (``onnxruntime_extensions.onnx_op``): that
package fixes the domain to ``ai.onnx.contrib``
and needs one registration per type signature (an op may have only one dynamically typed input,
onnxruntime 1.32 custom_ops.cc), hence one per data dtype x index dtype. Python ops are slow
(every output goes through a Python list): they are for validation, not for serving.

No exception may leave a Python op: onnxruntime-extensions hands it to onnxruntime's C++ side as
pybind11's ``error_already_set``, which nothing catches there, and the process aborts (SIGABRT: an
index out of range killed ``lower`` validating a model it had lowered before). So an op that fails
returns its ``data`` unchanged (the output's shape and dtype) and records the exception, and
:func:`run`, through which a session holding these ops is run, raises it once the run is over.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import os
import sys
import threading
import types

logger = logging.getLogger("scatter_rewrite")

DOMAIN = "ai.onnx.contrib"
# ONNX data types (TensorProto names) these ops take only as float32, which holds each of their
# values exactly: onnxruntime-extensions' Python ops refuse float16 (a float16 node aborts the
# process, see _register_python_ops), and onnxruntime's Python binding cannot pass them bfloat16
# ("Numpy_type 256 can't be converted to MLDataType", onnxruntime 1.32).
WIDENED_TO_FLOAT32 = ("FLOAT16", "BFLOAT16")
_registered: bool | None = None  # None: not tried yet; False: onnxruntime-extensions missing
_run_lock = threading.Lock()  # one run() at a time: its ops record into one list
_failures: list[BaseException] | None = None  # while run() runs a session: what our ops raised


def _kernels():
    from scatter_rewrite.evaluator import scatter_elements, scatter_nd

    def elements(data, indices, updates, axis=0, reduction="none"):
        return scatter_elements(
            data, indices, updates, axis=int(axis), reduction=reduction or "none"
        )

    def nd(data, indices, updates, reduction="none"):
        return scatter_nd(data, indices, updates, reduction=reduction or "none")

    return _never_raising(elements, "ScatterElements"), _never_raising(nd, "ScatterND")


def _never_raising(kernel, op_type: str):
    """``kernel`` as a Python op that cannot abort the process (see the module docstring)."""

    @functools.wraps(kernel)
    def op(data, *args, **kwargs):
        try:
            return kernel(data, *args, **kwargs)
        except BaseException as e:  # (KeyboardInterrupt too: raised by run() instead of aborting)
            if _failures is not None:
                _failures.append(e)
            else:  # a session run without run(): nothing will raise it, so say it
                logger.error(
                    "%s::%s failed, its output is its data unchanged (run the session with "
                    "scatter_rewrite.custom_ops.run to have this raised): %s",
                    DOMAIN,
                    op_type,
                    e,
                )
            return data

    return op


def run(session, feeds: dict, run_options=None) -> list:
    """``session.run(None, feeds, run_options)`` for a session holding our custom-domain ops;
    raises the first exception one of them raised (an index out of range, say) as it raised it."""
    global _failures
    with _run_lock:
        _failures = []
        try:
            outputs, error = session.run(None, feeds, run_options), None
        except Exception as e:  # after an op's failure, most likely a consequence of it
            outputs, error = None, e
        finally:
            failures, _failures = _failures, None
    if failures:
        raise failures[0]
    if error is not None:
        raise error
    return outputs


_PACKAGE = "onnxruntime_extensions"


def _extensions_ops() -> types.ModuleType | None:
    """onnxruntime-extensions' ``_ocos`` module (``Opdef``, ``PyCustomOpDef``, the library path),
    which loads its shared library and installs the Python-op hook, without running the package's
    ``__init__``: that imports ``onnxruntime_extensions.cvt``, hence transformers and torch when
    installed (3.5-6 s and about 900 MiB per ``lower --mode custom``). None when the package is not
    installed. A later ``import onnxruntime_extensions`` runs the whole package as usual, and
    finds this module loaded."""
    module = f"{_PACKAGE}._ocos"
    if _PACKAGE in sys.modules:  # (imported already: nothing to save)
        return importlib.import_module(module)
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    # The package as a bare module, only while its submodule loads.
    package = types.ModuleType(_PACKAGE)
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules[_PACKAGE] = package
    try:
        return importlib.import_module(module)
    finally:
        if sys.modules.get(_PACKAGE) is package:
            del sys.modules[_PACKAGE]


def _library_path(ops: types.ModuleType) -> str:
    """The custom-op library ``ops`` loaded (the extension module itself), checked to be a file."""
    path = ops.get_library_path()
    if not os.path.isfile(path):
        raise RuntimeError(f"onnxruntime-extensions' library {path} is not a file")
    return path


def _register_python_ops() -> bool:
    try:
        ops = _extensions_ops()
    except ImportError:
        ops = None
    if ops is None:
        logger.debug(
            "onnxruntime-extensions is not installed: custom-domain scatter nodes cannot run"
        )
        return False
    PyCustomOpDef, onnx_op = ops.PyCustomOpDef, ops.Opdef.declare
    elements, nd = _kernels()
    P = PyCustomOpDef
    # No float16: onnxruntime-extensions registers it, but running such a node aborts the process
    # (std::runtime_error "Type float16 not supported by python customops api", uncaught: SIGABRT).
    # lower --mode custom widens float16 and bfloat16 to float32 instead (WIDENED_TO_FLOAT32).
    data_types = [P.dt_float, P.dt_double, P.dt_int8, P.dt_uint8, P.dt_int16, P.dt_uint16,
                  P.dt_int32, P.dt_uint32, P.dt_int64, P.dt_uint64, P.dt_bool]
    # Only the attributes every form has: an attribute declared here must be on the node, and
    # undeclared ones (the TensorRT form's plugin_version/plugin_namespace) are ignored.
    elements_attrs = {"axis": P.dt_int64, "reduction": P.dt_string}
    for dt in data_types:
        for it in (P.dt_int64, P.dt_int32):
            onnx_op(
                op_type="ScatterElements", inputs=[dt, it, dt], outputs=[dt], attrs=elements_attrs
            )(elements)
        onnx_op(
            op_type="ScatterND",
            inputs=[dt, P.dt_int64, dt],
            outputs=[dt],
            attrs={"reduction": P.dt_string},
        )(nd)
    return True


def register(session_options) -> None:
    """Make our custom-domain ops known to an onnxruntime session."""
    global _registered
    if _registered is None:
        _registered = _register_python_ops()
    if _registered:
        session_options.register_custom_ops_library(_library_path(_extensions_ops()))


__all__ = ["DOMAIN", "WIDENED_TO_FLOAT32", "register", "run"]
