"""The bytes of a reconstruction's CSV files: what pandas' ``to_csv`` writes, made without its per-element formatting."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from domainpar.inference.products import submission_bytes, tracks_bytes

#: Floats whose text is easy to get wrong: NaN (empty), signed zeros, infinities, subnormals, extremes.
AWKWARD = [np.nan, 0.0, -0.0, np.inf, -np.inf, 5e-324, 1e-300, 1e300, 1.0, -1.0, 0.1, 123456789.0, 1.2345675e-5]


def _tracks(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 12, size=rows)
    track = np.repeat(np.arange(rows), sizes)[:rows]
    fits = rng.normal(size=(2, rows)) * rng.choice([1e-6, 1.0, 1e6], size=(2, rows))
    fits[:, : len(AWKWARD)] = AWKWARD[:rows]
    score = rng.random(rows).astype(np.float32)
    score[:6] = [np.nan, -0.0, 0.0, 1.0, np.float32(1e-45), np.float32(3.4e38)][:rows]
    return pd.DataFrame({"track_id": track, "hit_order": rng.integers(0, 30, rows), "hit_id": rng.integers(1, 2**40, rows),
                         "edge_score": score, "num_hits": rng.integers(0, 20, rows), "fit_chi2_ndf": fits[0][track],
                         "fit_pt": fits[1][track]})  # fmt: skip


@pytest.mark.parametrize("rows", [0, 1, 17, 5000])
def test_tracks_csv_is_the_bytes_pandas_writes(rows):
    table = _tracks(rows, seed=rows)
    expected = table.to_csv(index=False, lineterminator="\n", float_format="%.7g", na_rep="").encode()
    assert tracks_bytes(table, "csv") == expected


def test_submission_csv_is_the_bytes_pandas_writes():
    rng = np.random.default_rng(1)
    table = pd.DataFrame({"event_id": np.full(3000, 21000), "hit_id": np.arange(1, 3001),
                          "track_id": rng.integers(0, 400, 3000)})  # fmt: skip
    assert submission_bytes(table) == table.to_csv(index=False, lineterminator="\n").encode()


def test_integers_of_every_sign_and_width_are_written_as_pandas_writes_them():
    """Negative values, zero, the int64 extremes, narrow and unsigned types; an unsigned column beyond int64's range
    is left to pandas."""
    edges = np.array([0, -1, 9, -9, 10, -10, 99, 100, np.iinfo(np.int64).max, np.iinfo(np.int64).min, 10**18, -(10**18)])
    table = pd.DataFrame({"a": edges, "b": edges.astype(np.int32, casting="unsafe"), "c": np.arange(edges.size, dtype=np.uint8),
                          "d": np.full(edges.size, np.iinfo(np.uint64).max - 1, dtype=np.uint64)})  # fmt: skip
    for columns in (["a", "b", "c"], ["a", "d"], ["d"]):
        assert submission_bytes(table[columns]) == table[columns].to_csv(index=False, lineterminator="\n").encode()


def test_other_columns_are_left_to_pandas():
    """A column of text, a nullable integer or a float in a submission: pandas writes it, as before."""
    for table, write, kwargs in (
        (pd.DataFrame({"a": ["x,y", "z"], "b": [1, 2]}), submission_bytes, {}),
        (pd.DataFrame({"a": pd.array([1, None], dtype="Int64")}), submission_bytes, {}),
        (pd.DataFrame({"a": [0.5, np.nan]}), submission_bytes, {}),
        (pd.DataFrame({"a b": [1.5, 2.0]}), lambda t: tracks_bytes(t, "csv"), {"float_format": "%.7g", "na_rep": ""}),
    ):
        assert write(table) == table.to_csv(index=False, lineterminator="\n", **kwargs).encode()


@pytest.mark.parametrize("failing", ["tracks", "events"])
def test_an_event_is_written_whole_or_not_at_all(tmp_path, monkeypatch, failing):
    # A full disk at the tracks file or the record left a complete submission behind, which looks finished to
    # whoever scores submissions/.
    import errno

    from domainpar.inference import products

    real = products._write

    def write(path, content):
        if path.parent.name == failing:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, content)

    for sub in ("submissions", "tracks", "events"):
        (tmp_path / sub).mkdir()
    outputs = products.EventOutputs("event000000001", b"event_id,hit_id,track_id\n1,1,1\n", b"track_id\n1\n", {"event_id": 1})
    monkeypatch.setattr(products, "_write", write)
    with pytest.raises(OSError, match="No space left"):
        products.write_event(tmp_path, outputs, "csv")
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    monkeypatch.setattr(products, "_write", real)
    record = products.write_event(tmp_path, outputs, "csv")
    assert set(record["outputs"]) == {"submission", "tracks"} and len(list(tmp_path.rglob("*.csv"))) == 2
