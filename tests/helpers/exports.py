"""The real exports committed in tests/data (each folder's make*.py wrote them): ``<name>.onnx``
beside ``<name>.npz``, which holds the inputs the export was run on (``in_<input>``) and PyTorch's
outputs on them (``out_<output>``).

- ``export_arrays(folder, name)``: (inputs, PyTorch's outputs by output name);
- ``load_export(folder, name)``: (model, inputs, PyTorch's outputs by output name).

``name`` may hold a subfolder of ``folder`` (``load_export(tests.helpers.DATA, "torch/index_add_dynamo18")``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx


def export_arrays(folder: Path, name: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    with np.load(Path(folder) / f"{name}.npz") as arrays:
        return ({k[3:]: arrays[k] for k in arrays.files if k.startswith("in_")},
                {k[4:]: arrays[k] for k in arrays.files if k.startswith("out_")})


def load_export(folder: Path, name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray], dict[str, np.ndarray]]:
    return (onnx.load(Path(folder) / f"{name}.onnx"), *export_arrays(folder, name))
