"""Kernels on file-mapped inputs (weights mapped from a model file): same results, and the mapped
pages they consumed leave this process's memory (the fold's peak-memory goal)."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from scatter_rewrite.evaluator import scatter_elements, scatter_nd
from scatter_rewrite.evaluator._common import copy_releasing, release_pages


def mapped(tmp_path, array: np.ndarray, name: str) -> np.ndarray:
    path = tmp_path / name
    path.write_bytes(b"\0" * 123 + array.tobytes())  # an odd offset, as inside a model file
    f = open(path, "rb")
    buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    f.close()
    return np.frombuffer(memoryview(buf), dtype=array.dtype, count=array.size, offset=123).reshape(array.shape)


def rss_file_kib() -> int:
    status = open("/proc/self/status").read()
    return int(status.split("RssFile:")[1].split()[0])


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_elements_on_mapped_inputs_matches_in_memory(tmp_path, axis, reduction):
    rng = np.random.default_rng(axis)
    data = rng.standard_normal((512, 1024)).astype(np.float32)
    shape = (512, 64) if axis == 1 else (64, 1024)
    indices = (np.argsort(rng.random((512, 1024)), axis=axis)[:shape[0], :shape[1]] if axis == 0
               else np.argsort(rng.random((512, 1024)), axis=1)[:, :64]).astype(np.int64)
    updates = rng.standard_normal(shape).astype(np.float32)
    expected = scatter_elements(data, indices, updates, axis=axis, reduction=reduction)
    m_data, m_indices, m_updates = (mapped(tmp_path, a, n) for a, n in ((data, "d"), (indices, "i"), (updates, "u")))
    got = scatter_elements(m_data, m_indices, m_updates, axis=axis, reduction=reduction)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(m_data, data)  # released pages read back unchanged


def test_scatter_nd_row_copy_on_mapped_data(tmp_path):
    rng = np.random.default_rng(1)
    data = rng.standard_normal((256, 4096)).astype(np.float32)
    indices = rng.permutation(256)[:32].reshape(32, 1)
    updates = rng.standard_normal((32, 4096)).astype(np.float32)
    got = scatter_nd(mapped(tmp_path, data, "d"), indices, updates)
    np.testing.assert_array_equal(got, scatter_nd(data, indices, updates))


def test_release_pages_drops_resident_mapped_pages(tmp_path):
    array = mapped(tmp_path, np.arange(4 << 20, dtype=np.int32), "big")  # 16 MiB
    assert int(array.sum(dtype=np.int64)) > 0  # touch every page
    before = rss_file_kib()
    release_pages(array)
    assert before - rss_file_kib() > 12 * 1024
    assert int(array[-1]) == (4 << 20) - 1


def test_copy_releasing_copies_and_leaves_plain_arrays_alone():
    plain = np.arange(10, dtype=np.float64).reshape(2, 5)[:, ::2]  # not contiguous
    out = copy_releasing(plain)
    out[0, 0] = 99
    assert plain[0, 0] == 0 and out.flags.c_contiguous
    release_pages(plain)  # no mmap behind it: nothing happens


def _private_maps(tmp_path, array: np.ndarray) -> dict[str, np.ndarray]:
    """``array`` in the writable private maps a caller may hand a kernel: a copy-on-write map of a
    file holding other values (np.load(mmap_mode="c")), and an anonymous private map."""
    path = tmp_path / "w.npy"
    np.save(path, np.zeros_like(array))
    on_file = np.load(path, mmap_mode="c")
    on_file[...] = array
    buf = mmap.mmap(-1, array.nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    anonymous = np.frombuffer(buf, dtype=array.dtype).reshape(array.shape)
    anonymous[...] = array
    return {"copy-on-write file": on_file, "anonymous": anonymous}


@pytest.mark.parametrize("which", ["copy-on-write file", "anonymous"])
@pytest.mark.parametrize("mapped_input", ["data", "indices", "updates"])
def test_writable_private_maps_are_not_changed(tmp_path, which, mapped_input):
    """Dropping the pages of a private map throws away what the caller wrote into it: only
    read-only maps are released (the fold's own, from model files)."""
    rng = np.random.default_rng(3)
    inputs = {"data": rng.standard_normal((1024, 2048)).astype(np.float32),  # 8 MiB: the blocked path
              "indices": np.argsort(rng.random((1024, 2048)), axis=1)[:, :64].astype(np.int64),
              "updates": rng.standard_normal((1024, 64)).astype(np.float32)}
    expected = scatter_elements(**inputs, axis=1)
    inputs[mapped_input] = _private_maps(tmp_path, inputs[mapped_input])[which]
    before = np.array(inputs[mapped_input])
    np.testing.assert_array_equal(scatter_elements(**inputs, axis=1), expected)
    np.testing.assert_array_equal(inputs[mapped_input], before)
    nd_data = _private_maps(tmp_path, inputs["data"] if mapped_input != "data" else before)[which]
    nd_before = np.array(nd_data)
    scatter_nd(nd_data, np.array([[3], [1000]]), np.ones((2, 2048), np.float32))  # the row-copy path
    np.testing.assert_array_equal(nd_data, nd_before)
