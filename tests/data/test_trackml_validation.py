"""Input validation at the TrackML boundary: exact integers, finite after the float32 conversion,
hits on their detector layer, no degenerate events; every refusal one line naming file, column and row."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from domainpar.data.trackml import LAYER_MARGIN_MM, event_id_of, event_prefixes, load_event
from domainpar.errors import DomainparError

from fixtures import TRACKML_DIR

PARTS = ("hits", "cells", "particles", "truth")


@pytest.fixture(scope="module")
def plain_event(tmp_path_factory) -> Path:
    """The real labelled event as plain CSV text (fields exactly as the challenge wrote them)."""
    directory = tmp_path_factory.mktemp("plain")
    for part in PARTS:
        frame = pd.read_csv(TRACKML_DIR / f"event000000001-{part}.csv.gz", dtype=str, keep_default_na=False)
        frame.to_csv(directory / f"event000000001-{part}.csv", index=False)
    return directory / "event000000001"


def _edited(plain_event: Path, tmp_path: Path, part: str, edit) -> Path:
    """A copy of the event whose ``part`` has ``edit`` applied to its rows of text fields."""
    for p in PARTS:
        shutil.copy(f"{plain_event}-{p}.csv", tmp_path / f"event000000001-{p}.csv")
    path = tmp_path / f"event000000001-{part}.csv"
    rows = [line.split(",") for line in path.read_text().splitlines()]
    edit(rows)
    path.write_text("".join(",".join(r) + "\n" for r in rows))
    return tmp_path / "event000000001"


def _set(column: str, value: str, row: int = 1):
    def edit(rows):
        rows[row][rows[0].index(column)] = value

    return edit


def _load(prefix, *parts):
    return load_event(prefix, parts=parts or PARTS)


# ----------------------------------------------------------------------------- exact integers


def test_ids_above_2p53_are_read_exactly(plain_event, tmp_path):
    big = 2**62 + 1  # float64 would read 2**62
    prefix = _edited(plain_event, tmp_path, "truth", _set("particle_id", str(big), row=3))
    (truth,) = _load(prefix, "truth")
    assert int(truth["particle_id"].iloc[2]) == big
    # The real file's ids above 2^53 too (621497641930326016 is 2^59.1).
    raw = pd.read_csv(f"{plain_event}-truth.csv", dtype=str)["particle_id"].map(int).to_numpy(dtype=np.int64)
    (real,) = _load(plain_event, "truth")
    np.testing.assert_array_equal(real["particle_id"].to_numpy(), raw)
    assert (raw > 2**53).any()


def test_float_formatted_ids_above_2p53_are_refused(plain_event, tmp_path):
    def as_float(rows):
        column = rows[0].index("particle_id")
        for row in rows[1:]:
            row[column] = f"{int(row[column]):.16e}" if int(row[column]) else row[column]

    prefix = _edited(plain_event, tmp_path, "truth", as_float)
    with pytest.raises(DomainparError) as info:
        _load(prefix)
    message = str(info.value)
    assert message.startswith(f"{prefix}-truth.csv: column 'particle_id' must be integers written as digits (found ")
    assert "e+" in message and "in row 1)" in message and "\n" not in message


@pytest.mark.parametrize(
    "part, column, value, expected",
    [
        ("hits", "hit_id", "6.0", r"column 'hit_id' must be integers written as digits \(found 6\.0 in row 1\)"),
        ("hits", "hit_id", "2147483648", r"column 'hit_id' must be integers in \[-2147483648, 2147483647\] \(int32\) \(found 2147483648 in row 1\)"),
        ("truth", "particle_id", "9223372036854775808", r"column 'particle_id' must be integers in .* \(int64\) \(found 9223372036854775808 in row 1\)"),
        ("truth", "particle_id", "99999999999999999999999", r"\(int64\) \(found 99999999999999999999999 in row 1\)"),
        ("truth", "particle_id", "", r"column 'particle_id' must be integers written as digits \(found an empty field in row 1\)"),
        ("truth", "particle_id", "0x1F", r"must be integers written as digits \(found '0x1F' in row 1\)"),
        ("particles", "q", "True", r"column 'q' must be integers written as digits \(found 'True' in row 1\)"),
        ("hits", "volume_id", "7" * 100_000, r"must be integers in .* \(found '7{60}'\.\.\. \(100,000 characters\) in row 1\)"),
    ],
)
def test_integer_columns_are_exact(plain_event, tmp_path, part, column, value, expected):
    prefix = _edited(plain_event, tmp_path, part, _set(column, value))
    with pytest.raises(DomainparError, match=expected) as info:
        _load(prefix)
    assert len(str(info.value)) < 400


# ----------------------------------------------------------------------------- finite after the float32 conversion


@pytest.mark.parametrize(
    "part, column, value, expected",
    [
        ("hits", "x", "1e40", r"column 'x' must be finite float32 numbers, \|value\| <= 3\.403e\+38 \(found 1e\+40 in row 1, which overflows to inf\)"),
        ("hits", "z", "-3.5e38", r"column 'z' must be finite float32 numbers, .* \(found -3\.5e\+38 in row 1, which overflows to -inf\)"),
        ("particles", "px", "1e39", r"column 'px' must be finite float32"),
        ("truth", "weight", "nan", r"column 'weight' must be finite numbers \(found nan in row 1\)"),
        ("truth", "tpx", "-Infinity", r"column 'tpx' must be finite numbers \(found -Infinity in row 1\)"),
        ("cells", "value", "", r"column 'value' must be finite numbers \(found an empty field in row 1\)"),
        ("hits", "y", "q" * 1_000_000, r"column 'y' must be numeric \(found 'q{60}'\.\.\. \(1,000,000 characters\) in row 1\)"),
    ],
)
def test_float_columns_are_finite_in_float32(plain_event, tmp_path, part, column, value, expected):
    prefix = _edited(plain_event, tmp_path, part, _set(column, value))
    with pytest.raises(DomainparError, match=expected) as info:
        _load(prefix)
    assert len(str(info.value)) < 400


def test_largest_float32_value_is_accepted_where_it_makes_sense(plain_event, tmp_path):
    prefix = _edited(plain_event, tmp_path, "truth", _set("tpx", "3.0e38"))
    (truth,) = _load(prefix, "truth")
    assert np.isfinite(truth["tpx"].to_numpy()).all()


# ----------------------------------------------------------------------------- hits on the detector


@pytest.mark.parametrize("column, value", [("x", "1e30"), ("y", "100000"), ("z", "5000"), ("x", "0.0")])
def test_hits_off_their_layer_are_refused(plain_event, tmp_path, column, value):
    def edit(rows):
        rows[1][rows[0].index(column)] = value
        if column == "x":
            rows[1][rows[0].index("y")] = "0.0"

    prefix = _edited(plain_event, tmp_path, "hits", edit)
    with pytest.raises(DomainparError, match=rf"hits.csv: columns 'x', 'y', 'z' must lie on the hit's detector layer \(volume 7, layer 2: .* {LAYER_MARGIN_MM:g} mm margin included\) \(found r = .* in row 1; coordinates in mm\?\)"):
        _load(prefix, "hits")


def test_hits_in_cm_instead_of_mm_are_refused(plain_event, tmp_path):
    def to_cm(rows):
        for column in ("x", "y", "z"):
            index = rows[0].index(column)
            for row in rows[1:]:
                row[index] = repr(float(row[index]) / 10)

    with pytest.raises(DomainparError, match=r"must lie on the hit's detector layer"):
        _load(_edited(plain_event, tmp_path, "hits", to_cm), "hits")


def test_all_hits_at_one_point_are_refused(plain_event, tmp_path):
    def edit(rows):
        header = rows[0]
        for row in rows[1:]:
            row[header.index("x")], row[header.index("y")], row[header.index("z")] = "32.0", "0.0", "-10.0"

    with pytest.raises(DomainparError, match=r"found all 5527 hits at one point \(32, 0, -10\)"):
        _load(_edited(plain_event, tmp_path, "hits", edit), "hits")


def test_real_and_simulated_hits_pass_the_layer_check():
    from domainpar.data.detector import layer_index_of
    from domainpar.data.trackml import _validate_positions
    from domainpar.sim.config import SimulationConfig
    from domainpar.sim.event import simulate_event

    for seed in range(3):
        hits = simulate_event(SimulationConfig(num_particles=500), event_id=1, seed=seed)["hits"]
        _validate_positions(hits, layer_index_of(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy()), Path("sim"))
    load_event(TRACKML_DIR / "event000000001", parts=("hits",))


# ----------------------------------------------------------------------------- other tables


def test_duplicate_particles_and_negative_weights_are_refused(plain_event, tmp_path):
    def duplicate(rows):
        rows[2][0] = rows[1][0]

    with pytest.raises(DomainparError, match=r"particles.csv: column 'particle_id' must be unique \(found \d+ again in row 2\)"):
        _load(_edited(plain_event, tmp_path, "particles", duplicate))
    with pytest.raises(DomainparError, match=r"truth.csv: column 'weight' must be non-negative \(found -0.5 in row 3\)"):
        _load(_edited(plain_event, tmp_path, "truth", _set("weight", "-0.5", row=3)))


@pytest.mark.parametrize("content", [b"\xff\xfe\x00h\x00i", bytes(range(256)) * 8])
def test_binary_files_are_one_line(plain_event, tmp_path, content):
    for p in PARTS:
        shutil.copy(f"{plain_event}-{p}.csv", tmp_path / f"event000000001-{p}.csv")
    (tmp_path / "event000000001-hits.csv").write_bytes(content)
    with pytest.raises(DomainparError, match=r"hits.csv: (expected a UTF-8 CSV table|expected a CSV table)") as info:
        _load(tmp_path / "event000000001")
    assert "\n" not in str(info.value) and len(str(info.value)) < 400


# ----------------------------------------------------------------------------- layouts: read right, or refused


def _rewritten(plain_event: Path, tmp_path: Path, part: str, rewrite) -> Path:
    """A copy of the event whose ``part`` file is ``rewrite(bytes) -> (name suffix, bytes)``."""
    for p in PARTS:
        if p != part:
            shutil.copy(f"{plain_event}-{p}.csv", tmp_path / f"event000000001-{p}.csv")
    suffix, content = rewrite(Path(f"{plain_event}-{part}.csv").read_bytes())
    (tmp_path / f"event000000001-{part}{suffix}").write_bytes(content)
    return tmp_path / "event000000001"


def _fields(content: bytes, change) -> bytes:
    rows = [line.split(",") for line in content.decode().splitlines()]
    return "".join(",".join(change(i, row)) + "\n" for i, row in enumerate(rows)).encode()


#: Layouts other writers produce (Excel, R, Windows, gzip -c a b >): the same values, not a refusal.
VALID_LAYOUTS = {
    "utf8-bom": lambda b: (".csv", b"\xef\xbb\xbf" + b),
    "crlf": lambda b: (".csv", b.replace(b"\n", b"\r\n")),
    "every-field-quoted": lambda b: (".csv", _fields(b, lambda i, row: [f'"{f}"' for f in row])),
    "columns-reversed": lambda b: (".csv", _fields(b, lambda i, row: row[::-1])),
    "extra-column": lambda b: (".csv", _fields(b, lambda i, row: row + (["note"] if i == 0 else ["abc"]))),
    "trailing-comma-on-every-line": lambda b: (".csv", _fields(b, lambda i, row: row + [""])),
    "trailing-blank-lines": lambda b: (".csv", b + b"\n\n\n"),
    "padded-and-signed-numbers": lambda b: (".csv", _fields(b, lambda i, row: row if i == 0 else [f" +{f} " if f[:1].isdigit() else f for f in row])),
    "multi-member-gzip": lambda b: (".csv.gz", gzip.compress(b[: len(b) // 2]) + gzip.compress(b[len(b) // 2 :])),
}


@pytest.mark.parametrize("part", ["hits", "truth"])
@pytest.mark.parametrize("layout", sorted(VALID_LAYOUTS))
def test_unusual_but_valid_layouts_read_the_same_values(plain_event, tmp_path, part, layout):
    expected = _load(plain_event)
    found = _load(_rewritten(plain_event, tmp_path, part, VALID_LAYOUTS[layout]))
    for name, want, got in zip(PARTS, expected, found):
        columns = list(want.columns)
        pd.testing.assert_frame_equal(got[columns], want, obj=f"{name} ({layout})")


#: Tables pandas parses with fields under the wrong names, and what the refusal must say.
MISREAD_LAYOUTS = {
    "column-named-twice": (lambda i, row: row + (["x"] if i == 0 else ["999"]), r"column 'x' must appear once in the header \(found it as fields 2 and 8\)"),
    "trailing-comma-on-data-rows": (lambda i, row: row + ([] if i == 0 else [""]), r"expected every row to have the header's 7 fields \(found 8 in the data rows"),
    "x-column-of-booleans": (lambda i, row: row if i == 0 else row[:1] + ["True"] + row[2:], r"column 'x' must be numeric \(found 'True' in row 1\)"),
}


@pytest.mark.parametrize("from_memory", [False, True], ids=["from-file", "from-memory"])
@pytest.mark.parametrize("layout", sorted(MISREAD_LAYOUTS))
def test_tables_pandas_would_misread_are_refused(plain_event, tmp_path, layout, from_memory):
    change, message = MISREAD_LAYOUTS[layout]
    prefix = _rewritten(plain_event, tmp_path, "hits", lambda b: (".csv", _fields(b, change)))
    path = Path(f"{prefix}-hits.csv")
    # reconstruct parses the bytes it hashed (``contents``): the same refusal as from the file.
    contents = {"hits": (path, path.read_bytes())} if from_memory else None
    with pytest.raises(DomainparError, match=r"hits.csv: " + message):
        load_event(prefix, parts=("hits",), contents=contents)


def test_a_particle_of_the_truth_missing_from_the_particles_file_is_named(plain_event, tmp_path):
    prefix = _edited(plain_event, tmp_path, "particles", lambda rows: rows.pop(1))
    with pytest.raises(DomainparError, match=r"particles.csv: column 'particle_id' must list every particle of the truth file \(found 1 missing"):
        _load(prefix, "particles", "truth")


# ----------------------------------------------------------------------------- event names and special files


def test_event_numbers_are_ascii_digits_one_spelling_each_within_int64(plain_event, tmp_path):
    hits = Path(f"{plain_event}-hits.csv").read_bytes()
    arabic = tmp_path / "arabic"
    arabic.mkdir()
    (arabic / "event\u0661-hits.csv").write_bytes(hits)  # ARABIC-INDIC DIGIT ONE: not event 1, and not skipped unsaid
    with pytest.raises(DomainparError, match=r"found 'event\u0661-hits.csv', whose event number is not digits"):
        event_prefixes(arabic)
    two = tmp_path / "two"
    two.mkdir()
    (two / "event1-hits.csv").write_bytes(hits)
    (two / "event000000001-hits.csv").write_bytes(hits)
    with pytest.raises(DomainparError, match=r"two: expected one prefix per event number, found event000000001 and event1 \(both event 1\)"):
        event_prefixes(two)
    with pytest.raises(DomainparError, match=r"event number must be at most 9223372036854775807 \(int64\)"):
        event_id_of(tmp_path / ("event" + "9" * 30))
    assert event_id_of(tmp_path / "event9223372036854775807") == 2**63 - 1


def test_a_part_that_is_no_regular_file_is_named_as_what_it_is(tmp_path):
    os.mkfifo(tmp_path / "event000000001-hits.csv")  # reading it would block for ever
    with pytest.raises(DomainparError, match=r"event000000001-hits.csv: expected the event's hits file, found a named pipe \(FIFO\)"):
        load_event(tmp_path / "event000000001", parts=("hits",))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda rows: rows[:1], r"expected the cells of the event's hits \(found an empty table\)"),
        (_set("value", "-0.25", row=3), r"column 'value' must be a deposited charge, >= 0 \(found -0.25 in row 3\)"),
        (_set("ch1", "-1", row=2), r"column 'ch1' must be a channel number, >= 0 \(found -1 in row 2\)"),
        (lambda rows: rows[:1] + [[*row[:3], "0"] for row in rows[1:]], r"column 'value' must hold the cells' deposited charges \(found 0 in every row\)"),
        # Written twice (two copies, or each row twice): cell counts and charges, the cluster features, doubled.
        (lambda rows: rows + rows[1:], r"expected each channel \(ch0, ch1\) of a hit once, .* \(found 185\d\d of 37128 rows repeating one, first in row \d+: "),
        (lambda rows: rows[:1] + [row for row in rows[1:] for _ in (0, 1)], r"expected each channel .* first in row 2: "),
        # Channel numbers too wide to pack into one key: the columns are sorted instead.
        (lambda rows: rows + [[*row[:1], "2147483647", *row[2:]] for row in rows[1:2]] + rows[1:],
         r"expected each channel \(ch0, ch1\) of a hit once"),
    ],
    ids=["header-only", "negative-charge", "negative-channel", "zero-charges", "rows-twice", "each-row-twice", "wide-channels-twice"],
)
def test_cells_that_would_make_cluster_features_of_nothing_are_refused(plain_event, tmp_path, edit, message):
    def apply(rows):
        edited = edit(rows)
        if edited is not None:
            rows[:] = edited

    with pytest.raises(DomainparError, match=r"cells.csv: " + message):
        _load(_edited(plain_event, tmp_path, "cells", apply), "hits", "cells")


def test_the_few_repeated_cells_of_real_files_are_read(plain_event, tmp_path):
    # TrackML's own cells files list a few channels of a hit twice (event 21000: 37 of 431,521 rows), with the
    # same or another charge: read as they are.
    def repeat_some(rows):
        rows.extend([*row[:3], "0.125"] for row in rows[1:4])

    cells = _load(_edited(plain_event, tmp_path, "cells", repeat_some), "hits", "cells")[1]
    original = _load(plain_event, "cells")[0]
    assert len(cells) == len(original) + 3


# ----------------------------------------------------------------------------- bounded reads


@pytest.mark.parametrize("compressed", [True, False], ids=["gzip-bomb", "plain"])
def test_an_event_file_past_the_text_limit_is_refused_before_it_is_parsed(plain_event, tmp_path, monkeypatch, compressed):
    import domainpar.data.trackml as trackml

    text = Path(f"{plain_event}-hits.csv").read_bytes()
    for p in PARTS:
        shutil.copy(f"{plain_event}-{p}.csv", tmp_path / f"event000000001-{p}.csv")
    if compressed:
        # Kilobytes that inflate past the limit: stopped at the limit, not inflated whole.
        (tmp_path / "event000000001-hits.csv").unlink()
        (tmp_path / "event000000001-hits.csv.gz").write_bytes(gzip.compress(text + b"0" * 4 * len(text)))
    monkeypatch.setattr(trackml, "MAX_EVENT_FILE_BYTES", 2 * len(text))
    monkeypatch.setattr(trackml, "_READ_CHUNK", 4096)
    read = []
    monkeypatch.setattr(trackml.pd, "read_csv", lambda *a, **k: read.append(a) or pytest.fail("parsed past the limit"))
    name = "event000000001-hits.csv.gz" if compressed else "event000000001-hits.csv"
    if not compressed:
        (tmp_path / name).write_bytes(text + b"0" * 4 * len(text))
    found = "found more after decompressing" if compressed else f"found {5 * len(text):,} bytes"
    with pytest.raises(DomainparError, match=rf"{name}: expected at most 0 GiB of CSV text in an event file \({found}"):
        load_event(tmp_path / "event000000001", parts=("hits",))
    assert not read


def test_an_event_file_at_the_text_limit_is_read(plain_event, tmp_path, monkeypatch):
    import domainpar.data.trackml as trackml

    text = Path(f"{plain_event}-hits.csv").read_bytes()
    (tmp_path / "event000000001-hits.csv.gz").write_bytes(gzip.compress(text))
    monkeypatch.setattr(trackml, "MAX_EVENT_FILE_BYTES", len(text))
    monkeypatch.setattr(trackml, "_READ_CHUNK", 1000)
    (hits,) = load_event(tmp_path / "event000000001", parts=("hits",))
    (expected,) = load_event(plain_event, parts=("hits",))
    pd.testing.assert_frame_equal(hits, expected)


# ----------------------------------------------------------------------------- event files that are not read


@pytest.mark.parametrize(
    "name, found",
    [
        ("event000000001-truth.CSV", "which is not read: rename it in lower case"),
        ("event000000001-truth.csv.GZ", "which is not read: rename it in lower case"),
        ("EVENT000000002-hits.csv", "which is not read: rename it in lower case"),
        ("event000000002-hits.csv.bz2", "compressed as .bz2, which is not read: decompress it or gzip it"),
        ("event000000002-hits.csv.xz", "compressed as .xz, which is not read: decompress it or gzip it"),
    ],
)
def test_an_event_file_that_would_not_be_read_is_named(plain_event, tmp_path, name, found):
    # Skipped when listing, such a file lost an event (or its truth: the event was read as hits-only) silently.
    for p in PARTS:
        shutil.copy(f"{plain_event}-{p}.csv", tmp_path / f"event000000001-{p}.csv")
    (tmp_path / name).write_bytes(b"hit_id\n1\n")
    with pytest.raises(DomainparError, match=rf"{name}: expected event files named event<digits>-<part>\.csv or \.csv\.gz \(found '{name}', {found}\)"):
        event_prefixes(tmp_path)


def test_a_directory_of_only_unread_event_files_is_named_by_evaluate_and_reconstruct_too(plain_event, tmp_path):
    # `build` named the upper-case files; evaluate and reconstruct (which list --data another way) said "found
    # neither raw events nor graph files".
    from domainpar.inference.sources import list_sources

    for p in ("hits", "cells"):
        shutil.copy(f"{plain_event}-{p}.csv", tmp_path / f"event000000001-{p}.CSV")
    with pytest.raises(DomainparError, match=r"event000000001-\w+\.CSV: expected event files named .* rename it in lower case"):
        list_sources(tmp_path)
    for path in tmp_path.iterdir():
        path.unlink()
    with pytest.raises(DomainparError, match=r"expected raw TrackML events .* or graph files .*, found neither"):
        list_sources(tmp_path)


def test_files_beside_the_events_that_are_no_event_files_are_ignored(plain_event, tmp_path):
    for p in PARTS:
        shutil.copy(f"{plain_event}-{p}.csv", tmp_path / f"event000000001-{p}.csv")
    for name in ("event000000001-hits.csv.gz.md5", "README.md", "event000000001-hits.csv.md5", "detectors.csv"):
        (tmp_path / name).write_text("x")
    assert event_prefixes(tmp_path) == [tmp_path / "event000000001"]


@pytest.mark.parametrize("compressed", [False, True], ids=["csv", "csv.gz"])
def test_an_event_file_this_user_cannot_read_is_the_users_mistake(plain_event, tmp_path, monkeypatch, compressed):
    # Exit 2 naming the file, in `build` and in `reconstruct` alike (a PermissionError was a machine fault, exit 1,
    # in reconstruct's per-event failures). Root reads any file whatever its mode, so the denial is made here.
    import builtins

    from domainpar.inference import sources

    for part in PARTS:
        shutil.copy(f"{plain_event}-{part}.csv", tmp_path / f"event000000001-{part}.csv")
    hits = tmp_path / "event000000001-hits.csv"
    if compressed:
        hits.with_suffix(".csv.gz").write_bytes(gzip.compress(hits.read_bytes()))
        hits.unlink()
        hits = hits.with_suffix(".csv.gz")
    real_open, real_gzip_open = builtins.open, gzip.open

    def denied(opener):
        def open_(file, *args, **kwargs):
            if str(file) == str(hits):
                raise PermissionError(13, "Permission denied", str(file))
            return opener(file, *args, **kwargs)

        return open_

    monkeypatch.setattr(builtins, "open", denied(real_open))
    monkeypatch.setattr(gzip, "open", denied(real_gzip_open))
    expected = rf"^{hits}: expected an event file this user can read \(permission denied\)$"
    with pytest.raises(DomainparError, match=expected):
        load_event(tmp_path / "event000000001", parts=("hits", "cells"))
    with pytest.raises(DomainparError, match=expected):
        sources.read_raw_event(tmp_path / "event000000001", needs_cells=True)


def test_hits_in_another_row_order_are_the_same_event(plain_event, tmp_path):
    # A hits file sorted by module, merged or shuffled is the same event: it must give the same graph (the nodes are
    # the hits in row order; the ckf builder breaks ties by node, and gave other tracks for a shuffled file).
    from domainpar.data.graph import GraphConfig, build_event_graph

    order = np.random.default_rng(0).permutation(len(_load(plain_event, "hits")[0]))
    prefix = _rewritten(plain_event, tmp_path, "hits",
                        lambda b: (".csv", b"".join([b.splitlines(True)[0]] + [b.splitlines(True)[1:][i] for i in order])))  # fmt: skip
    shuffled = pd.read_csv(f"{prefix}-hits.csv")
    assert not (np.diff(shuffled["hit_id"].to_numpy()) > 0).all()
    for want, got in zip(_load(plain_event), _load(prefix)):
        pd.testing.assert_frame_equal(got, want)
    config = GraphConfig(node_features=("r", "phi", "z", "cell_count", "cell_charge"))
    (want, _), (got, _) = build_event_graph(plain_event, config), build_event_graph(prefix, config)
    for name in ("hit_id", "x", "pos", "edge_index", "edge_attr", "y", "particle_id"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
