"""The TrackML data layer: reading, writing, and every validation error path."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from domainpar.data.detector import layer_table, load_detector
from domainpar.data.trackml import (
    COLUMNS,
    event_id_of,
    event_prefixes,
    has_truth,
    load_dataset,
    load_event,
    write_event,
)
from domainpar.errors import DomainparError

from fixtures import TRACKML_DIR as DATA
REAL = DATA / "event000000001"


@pytest.fixture(scope="module")
def real_event() -> tuple[pd.DataFrame, ...]:
    return load_event(REAL)


def _write_plain(directory: Path, event_id: int, frames: dict[str, pd.DataFrame]) -> Path:
    """Write frames as-is (no dtype casting) as plain CSV, to plant malformed files."""
    prefix = directory / f"event{event_id:09d}"
    for part, frame in frames.items():
        frame.to_csv(f"{prefix}-{part}.csv", index=False)
    return prefix


def _frames(real_event) -> dict[str, pd.DataFrame]:
    hits, cells, particles, truth = real_event
    return {"hits": hits.copy(), "cells": cells.copy(), "particles": particles.copy(), "truth": truth.copy()}


def test_load_real_event_dtypes_and_order(real_event):
    hits, cells, particles, truth = real_event
    assert len(hits) == 5527 and len(particles) == 548 and len(truth) == 5527
    for part, frame in zip(("hits", "cells", "particles", "truth"), real_event):
        for column, dtype in COLUMNS[part].items():
            assert frame[column].dtype == np.dtype(dtype), (part, column)
    assert particles["particle_type"].dtype == np.int32
    # Large particle ids survive exactly (they do not fit a float64 mantissa loosely).
    raw = pd.read_csv(f"{REAL}-particles.csv.gz", dtype={"particle_id": "int64"})
    np.testing.assert_array_equal(particles["particle_id"].to_numpy(), raw["particle_id"].to_numpy())
    assert (truth["particle_id"] == 0).sum() == 829


def test_parts_order_and_single_part_tuple():
    truth, hits = load_event(REAL, parts=("truth", "hits"))
    assert "weight" in truth.columns and "volume_id" in hits.columns
    result = load_event(REAL, parts=("hits",))
    assert isinstance(result, tuple) and len(result) == 1


def test_round_trip_gz_and_plain(tmp_path, real_event):
    frames = _frames(real_event)
    for compress in (True, False):
        out = tmp_path / ("gz" if compress else "plain")
        prefix = write_event(out, 1, frames, compress=compress)
        suffix = ".csv.gz" if compress else ".csv"
        assert sorted(p.name for p in out.iterdir()) == sorted(f"event000000001-{part}{suffix}" for part in frames)
        again = load_event(prefix)
        for original, reread in zip(real_event, again):
            pd.testing.assert_frame_equal(original, reread)


def test_write_replaces_other_extension(tmp_path, real_event):
    frames = _frames(real_event)
    write_event(tmp_path, 3, frames, compress=False)
    write_event(tmp_path, 3, frames, compress=True)
    assert not list(tmp_path.glob("*.csv"))
    load_event(tmp_path / "event000000003")


def test_no_temporary_files_left(tmp_path, real_event):
    write_event(tmp_path, 5, _frames(real_event))
    assert all(not p.name.startswith(".") for p in tmp_path.iterdir())


def test_load_dataset_order_and_nevents(tmp_path, real_event):
    frames = _frames(real_event)
    for event_id in (12, 3, 7):
        write_event(tmp_path, event_id, frames)
    ids = [item[0] for item in load_dataset(tmp_path, parts=("hits",))]
    assert ids == [3, 7, 12]
    limited = list(load_dataset(tmp_path, nevents=2, parts=("hits", "truth")))
    assert [item[0] for item in limited] == [3, 7] and len(limited[0]) == 3
    assert [p.name for p in event_prefixes(tmp_path)] == ["event000000003", "event000000007", "event000000012"]
    assert event_id_of(tmp_path / "event000000012") == 12


def test_has_truth(tmp_path, real_event):
    frames = _frames(real_event)
    del frames["truth"]
    prefix = write_event(tmp_path, 4, frames)
    assert not has_truth(prefix) and has_truth(REAL)


def test_error_missing_file(tmp_path, real_event):
    frames = _frames(real_event)
    del frames["cells"]
    prefix = write_event(tmp_path, 1, frames)
    with pytest.raises(DomainparError, match=r"event000000001-cells\.csv\.gz: cells file not found"):
        load_event(prefix)


def test_error_both_extensions(tmp_path):
    prefix = tmp_path / "event000000001"
    shutil.copy(f"{REAL}-hits.csv.gz", f"{prefix}-hits.csv.gz")
    with gzip.open(f"{REAL}-hits.csv.gz") as src:
        Path(f"{prefix}-hits.csv").write_bytes(src.read())
    with pytest.raises(DomainparError, match=r"expected exactly one of event000000001-hits\.csv and .*\(found both\)"):
        load_event(prefix, parts=("hits",))


def test_error_missing_column(tmp_path, real_event):
    frames = _frames(real_event)
    frames["hits"] = frames["hits"].drop(columns="z")
    prefix = _write_plain(tmp_path, 1, frames)
    with pytest.raises(DomainparError, match=r"hits\.csv: column 'z' missing \(expected columns"):
        load_event(prefix)


def test_error_non_numeric(tmp_path, real_event):
    frames = _frames(real_event)
    frames["hits"]["x"] = frames["hits"]["x"].astype(object)
    frames["hits"].loc[2, "x"] = "abc"
    prefix = _write_plain(tmp_path, 1, frames)
    with pytest.raises(DomainparError, match=r"hits\.csv: column 'x' must be numeric \(found 'abc' in row 3\)"):
        load_event(prefix)


@pytest.mark.parametrize("bad, found", [(np.nan, "an empty field"), (np.inf, "inf")])
def test_error_nan_or_inf(tmp_path, real_event, bad, found):
    frames = _frames(real_event)
    frames["truth"]["tpx"] = frames["truth"]["tpx"].astype(np.float64)
    frames["truth"].loc[4, "tpx"] = bad  # pandas writes NaN as an empty field
    prefix = _write_plain(tmp_path, 1, frames)
    with pytest.raises(DomainparError, match=rf"truth\.csv: column 'tpx' must be finite numbers \(found {found} in row 5\)"):
        load_event(prefix)


def test_error_non_integer_id(tmp_path, real_event):
    frames = _frames(real_event)
    frames["hits"]["module_id"] = frames["hits"]["module_id"].astype(np.float64)
    frames["hits"].loc[0, "module_id"] = 1.5
    prefix = _write_plain(tmp_path, 1, frames)
    with pytest.raises(DomainparError, match=r"column 'module_id' must be integers written as digits \(found 1\.5 in row 1\)"):
        load_event(prefix)


def test_error_duplicate_hit_id(tmp_path, real_event):
    frames = _frames(real_event)
    frames["hits"].loc[10, "hit_id"] = frames["hits"].loc[3, "hit_id"]
    prefix = _write_plain(tmp_path, 1, frames)
    with pytest.raises(DomainparError, match=r"hits\.csv: column 'hit_id' must be unique \(found \d+ again in row 11\)"):
        load_event(prefix, parts=("hits",))


def test_error_truth_hit_ids_unknown(tmp_path, real_event):
    frames = _frames(real_event)
    frames["truth"].loc[7, "hit_id"] = 999_999
    prefix = _write_plain(tmp_path, 1, frames)
    with pytest.raises(DomainparError, match=r"truth\.csv: column 'hit_id' must match the hits file's hit_ids \(found 1 unknown, first 999999 in row 8\)"):
        load_event(prefix, parts=("hits", "truth"))


def test_error_truth_missing_hits(tmp_path, real_event):
    frames = _frames(real_event)
    frames["truth"] = frames["truth"].iloc[:-3]
    prefix = _write_plain(tmp_path, 1, frames)
    with pytest.raises(DomainparError, match=r"truth\.csv: column 'hit_id' must match .*found 3 hits without a truth row"):
        load_event(prefix, parts=("hits", "truth"))


def test_error_cells_unknown_hit(tmp_path, real_event):
    frames = _frames(real_event)
    frames["cells"].loc[0, "hit_id"] = 123_456
    prefix = _write_plain(tmp_path, 1, frames)
    with pytest.raises(DomainparError, match=r"cells\.csv: column 'hit_id' must match the hits file's hit_ids"):
        load_event(prefix, parts=("hits", "cells"))


def test_error_empty_event(tmp_path, real_event):
    frames = _frames(real_event)
    frames["hits"] = frames["hits"].iloc[:0]
    prefix = _write_plain(tmp_path, 1, {"hits": frames["hits"]})
    with pytest.raises(DomainparError, match=r"hits\.csv: expected at least one hit \(found an empty table\)"):
        load_event(prefix, parts=("hits",))
    Path(f"{prefix}-hits.csv").write_text("")
    with pytest.raises(DomainparError, match=r"hits\.csv: expected a CSV table with columns .*\(found an empty file\)"):
        load_event(prefix, parts=("hits",))


def test_error_unknown_layer(tmp_path, real_event):
    frames = _frames(real_event)
    frames["hits"].loc[5, "layer_id"] = 3
    prefix = _write_plain(tmp_path, 1, frames)
    with pytest.raises(DomainparError, match=r"'volume_id', 'layer_id' must name a TrackML detector layer \(found \(\d+, 3\) in row 6\)"):
        load_event(prefix, parts=("hits",))


def test_error_unknown_part_and_bad_directory(tmp_path):
    with pytest.raises(DomainparError, match=r"parts must be a non-empty selection"):
        load_event(REAL, parts=("tracks",))
    with pytest.raises(DomainparError, match=r"expected a directory of TrackML events"):
        event_prefixes(tmp_path / "absent")
    with pytest.raises(DomainparError, match=r"found none"):
        list(load_dataset(tmp_path))
    with pytest.raises(DomainparError, match=r"must be named event<digits>"):
        event_id_of(tmp_path / "run1")


def test_particles_without_particle_type(tmp_path, real_event):
    frames = _frames(real_event)
    frames["particles"] = frames["particles"].drop(columns="particle_type")
    prefix = write_event(tmp_path, 1, frames)
    (particles,) = load_event(prefix, parts=("particles",))
    assert "particle_type" not in particles.columns and particles["nhits"].dtype == np.int32


def test_detector_with_and_without_index_column(tmp_path):
    packaged = load_detector()
    assert len(packaged) == 18_728
    without_index = tmp_path / "detectors.csv"
    packaged.to_csv(without_index, index=False)
    with_index = tmp_path / "detectors_indexed.csv.gz"
    packaged.to_csv(with_index, index=True)
    pd.testing.assert_frame_equal(load_detector(without_index), packaged)
    pd.testing.assert_frame_equal(load_detector(with_index), packaged)
    broken = tmp_path / "broken.csv"
    packaged.drop(columns="pitch_u").to_csv(broken, index=False)
    with pytest.raises(DomainparError, match=r"broken\.csv: detector description must have columns \['pitch_u'\]"):
        load_detector(broken)


def test_layer_table_geometry():
    table = layer_table()
    assert len(table) == 48
    keys = list(zip(table["volume_id"], table["layer_id"]))
    assert keys == sorted(keys) and table["layer_index"].tolist() == list(range(48))
    discs = table[~table["barrel"]]
    # Endcap discs are thin in z (module thickness plus the disc-face stagger), not module-length thick.
    assert ((discs["z_max"] - discs["z_min"]) < 15.0).all()
    barrels = table[table["barrel"]]
    assert ((barrels["r_max"] - barrels["r_min"]) < 5.0).all()
    np.testing.assert_allclose(barrels["r"].to_numpy(), [32, 72, 116, 172, 260, 360, 500, 660, 820, 1020], atol=0.5)
