"""domainpar.npzfile: reproducible archives, and members deflated only where deflating pays."""

from __future__ import annotations

import zipfile

import numpy as np

from domainpar import npzfile
from domainpar.npzfile import archive_digest, read_npz, write_npz


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    rows = npzfile.SAMPLE_BYTES // 8 + 1000  # above the sample: the choice is made on a sample of the bytes
    return {
        "edge_index": np.sort(rng.integers(0, 5000, size=(2, rows))).astype(np.int64),  # sorted ids: shrink to a few %
        "edge_attr": rng.standard_normal((rows, 3)).astype(np.float32),  # noise: deflating saves ~10 %
        "small": rng.standard_normal(10).astype(np.float32),  # below the sample: always deflated (cheap)
        "name": np.array("edge features", dtype=np.str_),
    }


def test_incompressible_members_are_stored_and_the_rest_deflated(tmp_path):
    arrays = _arrays()
    path = write_npz(tmp_path / "g.npz", arrays, compress=True, level=1)
    methods = {info.filename: info.compress_type for info in zipfile.ZipFile(path).infolist()}
    assert methods == {"edge_index.npy": zipfile.ZIP_DEFLATED, "edge_attr.npy": zipfile.ZIP_STORED,
                       "small.npy": zipfile.ZIP_DEFLATED, "name.npy": zipfile.ZIP_DEFLATED}
    for read in (read_npz(path), dict(np.load(path, allow_pickle=False))):
        assert sorted(read) == sorted(arrays)
        for name, value in arrays.items():
            np.testing.assert_array_equal(read[name], value)
            assert read[name].dtype == value.dtype


def test_the_same_arrays_give_the_same_bytes_and_the_same_digest_as_stored(tmp_path):
    arrays = _arrays()
    first = write_npz(tmp_path / "a.npz", arrays, compress=True, level=1).read_bytes()
    assert write_npz(tmp_path / "b.npz", arrays, compress=True, level=1).read_bytes() == first
    stored = write_npz(tmp_path / "c.npz", arrays)
    # A plan records its graph's content digest: how the members are compressed does not change it.
    assert archive_digest(tmp_path / "a.npz") == archive_digest(stored)
    assert len(first) < stored.stat().st_size


def test_a_non_contiguous_array_is_sampled_and_written_whole(tmp_path):
    big = np.arange(4 * npzfile.SAMPLE_BYTES // 8, dtype=np.int64).reshape(-1, 4)[:, ::2]  # a strided view
    path = write_npz(tmp_path / "v.npz", {"big": big}, compress=True)
    np.testing.assert_array_equal(read_npz(path)["big"], big)
    assert zipfile.ZipFile(path).getinfo("big.npy").compress_type == zipfile.ZIP_DEFLATED
