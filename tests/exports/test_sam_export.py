"""segment_anything's own ONNX export (``SamOnnxModel``) around a tiny random SAM, TorchScript at
opsets 11 and 17 (tests/data/torch_sam/make_sam_tiny.py): moved down to opsets 13 and 11.
``orig_im_size`` becomes a Resize's size, so the original runs only on a positive size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from tests.helpers.cli import invoke

DATA = Path(__file__).resolve().parents[1] / "data" / "torch_sam"
CASES = [("sam_tiny_ts17", 13), ("sam_tiny_ts17", 11)]  # (the opset-11 export is already at 11)


def _sam_feeds(name: str) -> dict[str, np.ndarray]:
    saved = np.load(DATA / f"{name}.npz")
    return {k[3:]: saved[k] for k in saved.files if k.startswith("in_")}


@pytest.mark.parametrize(("name", "opset"), CASES)
def test_sam_moved_down_with_its_real_inputs_passes_and_equals_pytorch(tmp_path, name, opset):
    inputs, out = tmp_path / "feeds.npz", tmp_path / "moved.onnx"
    np.savez(inputs, **_sam_feeds(name))
    result = invoke("lower", str(DATA / f"{name}.onnx"), "--opset", str(opset), "--inputs",
                    str(inputs), "-o", str(out))
    assert result.exit_code == 0 and "PASSED" in result.output, result.output
    saved = np.load(DATA / f"{name}.npz")
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    got = session.run(None, _sam_feeds(name))
    for output, value in zip(session.get_outputs(), got):
        np.testing.assert_allclose(value, saved[f"out_{output.name}"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("name", "opset"), CASES)
def test_sam_moved_down_without_inputs_passes(tmp_path, name, opset):
    out = tmp_path / "moved.onnx"
    result = invoke("lower", str(DATA / f"{name}.onnx"), "--opset", str(opset), "-o", str(out))
    assert result.exit_code == 0 and "PASSED" in result.output, result.output
