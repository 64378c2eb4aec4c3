"""The hostile-input corpus: every command on bad input answers one ``error:`` line, exit 2, writes nothing.

Each case below is one user mistake or one damaged file, given to a real
command in-process (through :func:`domainpar.cli.main.main`). A case passes
only when the command exits 2, prints exactly one stderr line starting with
``error: `` (at most a few hundred characters, so a huge field is never echoed
whole), raises no traceback and no warning, and leaves every file of the case's
directory and of the shared base inputs exactly as it was (nothing created,
nothing half-written, no stale ``config.yaml``). See ``hostile_workspace.py``.
One exception, by design: a dataset command (``build`` / ``partition`` over a
directory) keeps the complete outputs of the events that succeeded (a bad event
is named, the others finish); such a case lists them in ``ws.notes["kept"]``
and they must be there and readable.

Run ``pytest tests/cli/test_hostile_corpus.py -q`` ; the cases touch only the
command line and plain file formats, so the same file measures any version.
"""

from __future__ import annotations

import bz2
import gzip
import os
from pathlib import Path

import numpy as np
import pytest

from hostile_workspace import PARTS, TINY_TRAIN, Base, Workspace, denied, make_base, problems, run_main, snapshot, wrong_reason

CASES: dict[str, callable] = {}
#: Case name → what its error line must contain (see :func:`case`).
EXPECT: dict[str, str] = {}


def case(name: str, expect: str):
    """Register ``function(ws) -> argv`` as a corpus case whose one error line must contain ``expect``.

    ``expect`` is what the line must say — the file or option blamed and the reason — so a case cannot pass by
    being refused for another reason than the one it is about. In it, ``WS`` stands for the case's directory and
    ``BASE`` for the base inputs' directory.
    """

    def register(function):
        assert name not in CASES, name
        assert expect, name
        CASES[name] = function
        EXPECT[name] = expect
        return function

    return register


# =============================================================================== command line (click)


@case("cli-unknown-command", "No such command 'frobnicate'")
def _(ws):
    return ["frobnicate"]


@case("cli-unknown-option", "No such option '--frobnicate'")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", "1", "--frobnicate"]


@case("cli-missing-required-option", "Missing option '--out'")
def _(ws):
    return ["simulate", "--events", "1"]


@case("cli-option-without-value", "Option '--parts' requires an argument")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--out", ws.path("p"), "--parts"]


@case("cli-int-option-given-text", "Invalid value for '--parts': 'two' is not a valid integer")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--out", ws.path("p"), "--parts", "two"]


@case("cli-int-option-given-float", "Invalid value for '--events': '1.5' is not a valid integer range")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", "1.5"]


@case("cli-choice-option-bad", "Invalid value for '--method': 'random' is not one of")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--out", ws.path("p"), "--parts", "2", "--method", "random"]


@case("cli-extra-argument", "Got unexpected extra argument (extra)")
def _(ws):
    return ["score", "--event", ws.base.prefix, "--submission", ws.base.submission, "extra"]


@case("cli-float-option-given-text", "Invalid value for '--lr': 'fast' is not a valid float")
def _(ws):
    return ["train", "--data", ws.base.graphs, "--out", ws.path("r"), "--lr", "fast", *TINY_TRAIN]


@case("train-track-settings-unknown-name", "--track-settings must hold track builder settings: unknown track builder settings ['windw']")
def _(ws):
    return ["train", "--data", ws.base.graphs, "--out", ws.path("r"), "--track-settings", "windw=8", *TINY_TRAIN]


@case("train-track-settings-text-for-integer", "--track-settings must hold track builder settings: tracks.window: expected an integer >= 3, got 'abc'")
def _(ws):
    return ["train", "--data", ws.base.graphs, "--out", ws.path("r"), "--track-settings", "window=abc", *TINY_TRAIN]


@case("train-track-settings-free-pass-not-a-bool", "--track-settings must hold track builder settings: tracks.free_pass: expected true or false, got 2")
def _(ws):
    return ["train", "--data", ws.base.graphs, "--out", ws.path("r"), "--track-settings", "free_pass=2", *TINY_TRAIN]


@case("cli-bool-flag-given-value", "Option '--quiet' does not take a value")
def _(ws):
    return ["build", "--input", ws.base.events, "--out", ws.path("g"), "--quiet=yes"]


# =============================================================================== simulate


@case("simulate-events-zero", "Invalid value for '--events': 0 is not in the range 1<=x<=999999999")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", "0"]


@case("simulate-events-negative", "Invalid value for '--events': -3 is not in the range 1<=x<=999999999")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", "-3"]


@case("simulate-particles-zero", "Invalid value for '--particles': 0 is not in the range 1<=x<=1000000")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", "1", "--particles", "0"]


@case("simulate-particles-absurd", "Invalid value for '--particles': 10000000000000 is not in the range")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", "1", "--particles", str(10**13)]


@case("simulate-events-absurd", "Invalid value for '--events': 1000000000000 is not in the range")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", str(10**12), "--particles", "10"]


@case("simulate-seed-negative", "Invalid value for '--seed': -1 is not in the range")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", "1", "--seed", "-1"]


@case("simulate-seed-beyond-64-bits", "Invalid value for '--seed': 1208925819614629174706176 is not in the range")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", "1", "--particles", "10", "--seed", str(2**80)]


@case("simulate-first-event-id-beyond-9-digits", "Invalid value for '--first-event-id': 1000000000000 is not in the range")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", "1", "--particles", "10", "--first-event-id", str(10**12)]


@case("simulate-out-is-file", "Invalid value for '--out': Directory 'WS/file' is a file")
def _(ws):
    return ["simulate", "--out", ws.write("file", "x"), "--events", "1", "--particles", "10"]


@case("simulate-out-under-file", "sub: WS/file must be a directory")
def _(ws):
    return ["simulate", "--out", ws.write("file", "x") / "sub", "--events", "1", "--particles", "10"]


@case("simulate-out-under-unreadable-dir", "b: expected a location we can use, cannot access WS/locked/a/b")
def _(ws):
    locked = ws.path("locked")
    locked.mkdir()
    ws.notes["denied"] = locked
    return ["simulate", "--out", locked / "a" / "b", "--events", "1", "--particles", "10"]


@case("simulate-out-unwritable-dir", "locked: expected a writable location, cannot create files in WS/locked")
def _(ws):
    locked = ws.path("locked")
    locked.mkdir()
    ws.notes["denied"] = locked
    return ["simulate", "--out", locked, "--events", "1", "--particles", "10"]


# =============================================================================== build: TrackML CSVs


def _build(ws, events):
    return ["build", "--input", events, "--out", ws.path("graphs"), "--quiet"]


@case("build-hits-x-nan", "event000000001-hits.csv: column 'x' must be finite numbers")
def _(ws):
    return _build(ws, ws.event_cell("hits", "x", "nan"))


@case("build-hits-x-inf", "event000000001-hits.csv: column 'x' must be finite numbers")
def _(ws):
    return _build(ws, ws.event_cell("hits", "x", "inf"))


@case("build-hits-x-overflows-float32", "event000000001-hits.csv: column 'x' must be finite float32 numbers, |value| <= 3.403e+38")
def _(ws):
    return _build(ws, ws.event_cell("hits", "x", "1e40", row=3))


@case("build-hits-z-minus-overflows-float32", "event000000001-hits.csv: column 'z' must be finite float32 numbers, |value| <= 3.403e+38")
def _(ws):
    return _build(ws, ws.event_cell("hits", "z", "-3.5e38", row=5))


@case("build-hits-x-outside-detector", "event000000001-hits.csv: columns 'x', 'y', 'z' must lie on the hit's detector layer")
def _(ws):
    return _build(ws, ws.event_cell("hits", "x", "1e30", row=2))


@case("build-hits-y-100m", "event000000001-hits.csv: columns 'x', 'y', 'z' must lie on the hit's detector layer")
def _(ws):
    return _build(ws, ws.event_cell("hits", "y", "100000", row=7))


@case("build-hits-all-at-one-point", "event000000001-hits.csv: columns 'x', 'y', 'z' must be hit positions on the detector")
def _(ws):
    def edit(rows):
        header = rows[0]
        for row in rows[1:]:
            for column, value in zip(("x", "y", "z"), ("100.0", "0.0", "0.0")):
                row[header.index(column)] = value

    return _build(ws, ws.event("hits", edit))


@case("build-hits-x-text", "event000000001-hits.csv: column 'x' must be numeric")
def _(ws):
    return _build(ws, ws.event_cell("hits", "x", "abc", row=4))


@case("build-hits-x-empty-field", "event000000001-hits.csv: column 'x' must be finite numbers")
def _(ws):
    return _build(ws, ws.event_cell("hits", "x", "", row=4))


@case("build-hits-x-huge-field", "event000000001-hits.csv: column 'x' must be finite numbers")
def _(ws):
    return _build(ws, ws.event_cell("hits", "x", "7" * 2_000_000, row=2))


@case("build-hits-x-huge-text-field", "event000000001-hits.csv: column 'x' must be numeric")
def _(ws):
    return _build(ws, ws.event_cell("hits", "x", "q" * 2_000_000, row=2))


@case("build-hits-hit-id-float-text", "event000000001-hits.csv: column 'hit_id' must be integers written as digits")
def _(ws):
    return _build(ws, ws.event_cell("hits", "hit_id", "6.5"))


@case("build-hits-hit-id-float-formatted-integer", "event000000001-hits.csv: column 'hit_id' must be integers written as digits")
def _(ws):
    return _build(ws, ws.event_column("hits", "hit_id", lambda i, old: f"{float(old):.1f}"))


@case("build-hits-hit-id-beyond-int32", "event000000001-hits.csv: column 'hit_id' must be integers in [-2147483648, 2147483647]")
def _(ws):
    return _build(ws, ws.event_cell("hits", "hit_id", str(2**40), row=3))


@case("build-hits-hit-id-negative", "event000000001-truth.csv: column 'hit_id' must match the hits file's hit_ids")
def _(ws):
    return _build(ws, ws.event_cell("hits", "hit_id", "-5", row=3))


@case("build-hits-hit-id-duplicate", "event000000001-hits.csv: column 'hit_id' must be unique")
def _(ws):
    def edit(rows):
        rows[2][0] = rows[1][0]

    return _build(ws, ws.event("hits", edit, parts=("hits",)))


@case("build-hits-volume-unknown", "event000000001-hits.csv: columns 'volume_id', 'layer_id' must name a TrackML detector layer")
def _(ws):
    return _build(ws, ws.event_cell("hits", "volume_id", "99"))


@case("build-hits-layer-float", "event000000001-hits.csv: column 'layer_id' must be integers written as digits")
def _(ws):
    return _build(ws, ws.event_cell("hits", "layer_id", "2.5"))


@case("build-hits-volume-beyond-int32", "event000000001-hits.csv: column 'volume_id' must be integers in [-2147483648, 2147483647]")
def _(ws):
    return _build(ws, ws.event_cell("hits", "volume_id", str(2**33)))


@case("build-hits-missing-column", "event000000001-hits.csv: column 'z' missing")
def _(ws):
    def edit(rows):
        index = rows[0].index("z")
        return [row[:index] + row[index + 1:] for row in rows]

    return _build(ws, ws.event("hits", edit))


@case("build-hits-empty-file", "event000000001-hits.csv: expected a CSV table with columns")
def _(ws):
    return _build(ws, ws.event("hits", raw=b""))


@case("build-hits-header-only", "event000000001-hits.csv: expected at least one hit")
def _(ws):
    return _build(ws, ws.event("hits", raw=b"hit_id,x,y,z,volume_id,layer_id,module_id\n"))


@case("build-hits-binary-garbage", "event000000001-hits.csv: expected a CSV table, could not parse it")
def _(ws):
    return _build(ws, ws.event("hits", raw=bytes(range(256)) * 20))


@case("build-hits-not-utf8", "event000000001-hits.csv: expected a UTF-8 CSV table, found a byte that is not text")
def _(ws):
    content = (ws.base.events / "event000000001-hits.csv").read_bytes()
    return _build(ws, ws.event("hits", raw=content.replace(b"-76", b"\xff\xfe", 1)))


@case("build-hits-ragged-row", "event000000001-hits.csv: expected a CSV table, could not parse it")
def _(ws):
    def edit(rows):
        rows[3] = rows[3] + ["1", "2", "3"]

    return _build(ws, ws.event("hits", edit))


@case("build-hits-gz-corrupted", "event000000001-hits.csv.gz: expected a CSV table, could not parse it")
def _(ws):
    events = ws.event(parts=("cells", "particles", "truth"))
    data = bytearray(gzip.compress((ws.base.events / "event000000001-hits.csv").read_bytes()))
    data[40:60] = b"\0" * 20
    (events / "event000000001-hits.csv.gz").write_bytes(bytes(data))
    return _build(ws, events)


@case("build-hits-gz-truncated", "event000000001-hits.csv.gz: expected a CSV table, could not parse it")
def _(ws):
    events = ws.event(parts=("cells", "particles", "truth"))
    data = gzip.compress((ws.base.events / "event000000001-hits.csv").read_bytes())
    (events / "event000000001-hits.csv.gz").write_bytes(data[: len(data) // 2])
    return _build(ws, events)


@case("build-hits-both-csv-and-gz", "event000000001-hits: expected exactly one of event000000001-hits.csv and event000000001-hits.csv.gz")
def _(ws):
    events = ws.event()
    (events / "event000000001-hits.csv.gz").write_bytes(gzip.compress((events / "event000000001-hits.csv").read_bytes()))
    return _build(ws, events)


@case("build-hits-file-missing", "event000000001-hits.csv.gz: hits file not found")
def _(ws):
    return _build(ws, ws.event(parts=("cells", "particles", "truth")))


@case("build-hits-is-directory", "event000000001-hits.csv: expected the event's hits file, found a directory")
def _(ws):
    events = ws.event(parts=("cells", "particles", "truth"))
    (events / "event000000001-hits.csv").mkdir()
    return _build(ws, events)


@case("build-hits-is-a-symlink-loop", "event000000001-hits.csv: expected the event's hits file, found a symbolic link that cannot be followed")
def _(ws):
    events = ws.event(parts=("cells", "particles", "truth"))
    (events / "event000000001-hits.csv").symlink_to("event000000001-hits.csv.gz")
    (events / "event000000001-hits.csv.gz").symlink_to("event000000001-hits.csv")
    return _build(ws, events)


@case("build-hits-is-a-dangling-symlink", "event000000001-hits.csv: expected the event's hits file, found a symbolic link to nothing")
def _(ws):
    events = ws.event(parts=("cells", "particles", "truth"))
    (events / "event000000001-hits.csv").symlink_to(ws.path("gone.csv"))
    return _build(ws, events)


# Tables pandas parses with fields under the wrong names: refused, never read as another column's values.


@case("build-hits-column-named-twice", "event000000001-hits.csv: column 'x' must appear once in the header (found it as fields 2 and 8)")
def _(ws):
    return _build(ws, ws.event("hits", lambda rows: [row + (["x"] if i == 0 else ["999"]) for i, row in enumerate(rows)]))


@case("build-truth-particle-id-named-twice", "event000000001-truth.csv: column 'particle_id' must appear once in the header")
def _(ws):
    return _build(ws, ws.event("truth", lambda rows: [row + (["particle_id"] if i == 0 else ["0"]) for i, row in enumerate(rows)]))


@case("build-hits-trailing-comma-on-data-rows", "event000000001-hits.csv: expected every row to have the header's 7 fields (found 8")
def _(ws):
    # pandas would take hit_id as the index and read hit_id from x, x from y, ...
    return _build(ws, ws.event("hits", lambda rows: [row + ([] if i == 0 else [""]) for i, row in enumerate(rows)]))


@case("build-truth-weight-column-of-booleans", "event000000001-truth.csv: column 'weight' must be numeric (found 'True' in row 1)")
def _(ws):
    # pandas reads a column of True/False as booleans, which passed as weights 1.0 and 0.0.
    return _build(ws, ws.event_column("truth", "weight", lambda row, old: "True" if row % 2 else "False"))


@case("build-particles-px-column-of-booleans", "event000000001-particles.csv: column 'px' must be numeric (found 'true' in row 1)")
def _(ws):
    return _build(ws, ws.event_column("particles", "px", lambda row, old: "true"))


@case("build-two-spellings-of-one-event-number", "WS/ev: expected one prefix per event number, found event000000001 and event1 (both event 1)")
def _(ws):
    # Read as one event, the other was dropped without a word.
    events = ws.event()
    for part in PARTS:
        (events / f"event1-{part}.csv").write_bytes((events / f"event000000001-{part}.csv").read_bytes())
    return _build(ws, events)


@case("build-event-file-in-upper-case", "WS/ev/event000000001-truth.CSV: expected event files named event<digits>-<part>.csv or .csv.gz (found 'event000000001-truth.CSV', which is not read: rename it in lower case)")
def _(ws):
    # Skipped when listing, the event was read as hits-only: no truth, so build wrote unlabelled graphs.
    events = ws.event()
    (events / "event000000001-truth.csv").rename(events / "event000000001-truth.CSV")
    return _build(ws, events)


@case("build-event-file-compressed-as-bz2", "WS/ev/event000000002-hits.csv.bz2: expected event files named event<digits>-<part>.csv or .csv.gz (found 'event000000002-hits.csv.bz2', compressed as .bz2, which is not read: decompress it or gzip it)")
def _(ws):
    # Skipped when listing: the second event was lost without a word.
    events = ws.event()
    (events / "event000000002-hits.csv.bz2").write_bytes(bz2.compress((events / "event000000001-hits.csv").read_bytes()))
    return _build(ws, events)


@case("build-event-number-beyond-int64", "event99999999999999999999: event number must be at most 9223372036854775807 (int64)")
def _(ws):
    events = ws.event()
    for part in PARTS:
        (events / f"event000000001-{part}.csv").rename(events / f"event99999999999999999999-{part}.csv")
    return _build(ws, events)


@case("build-truth-particle-id-float-above-2p53", "event000000001-truth.csv: column 'particle_id' must be integers written as digits")
def _(ws):
    return _build(ws, ws.event_column("truth", "particle_id", lambda i, old: f"{int(old):.16e}" if int(old) else old))


@case("build-truth-particle-id-one-float-text", "event000000001-truth.csv: column 'particle_id' must be integers written as digits")
def _(ws):
    return _build(ws, ws.event_cell("truth", "particle_id", "4.5e17", row=4))


@case("build-truth-particle-id-beyond-int64", "event000000001-truth.csv: column 'particle_id' must be integers in [-9223372036854775808, 9223372036854775807]")
def _(ws):
    return _build(ws, ws.event_cell("truth", "particle_id", "99999999999999999999", row=4))


@case("build-truth-particle-id-text", "event000000001-truth.csv: column 'particle_id' must be integers written as digits")
def _(ws):
    return _build(ws, ws.event_cell("truth", "particle_id", "muon", row=4))


@case("build-truth-particle-id-negative-float", "event000000001-truth.csv: column 'particle_id' must be integers written as digits")
def _(ws):
    return _build(ws, ws.event_cell("truth", "particle_id", "-1.5", row=4))


@case("build-truth-hit-id-unknown", "event000000001-truth.csv: column 'hit_id' must match the hits file's hit_ids")
def _(ws):
    return _build(ws, ws.event_cell("truth", "hit_id", "999999", row=2))


@case("build-truth-row-missing", "event000000001-truth.csv: column 'hit_id' must match the hits file's hit_ids")
def _(ws):
    return _build(ws, ws.event("truth", lambda rows: rows[:-1]))


@case("build-truth-weight-nan", "event000000001-truth.csv: column 'weight' must be finite numbers")
def _(ws):
    return _build(ws, ws.event_cell("truth", "weight", "nan", row=2))


@case("build-truth-weight-negative", "event000000001-truth.csv: column 'weight' must be non-negative")
def _(ws):
    return _build(ws, ws.event_cell("truth", "weight", "-0.5", row=2))


@case("build-truth-tpx-overflows-float32", "event000000001-truth.csv: column 'tpx' must be finite float32 numbers, |value| <= 3.403e+38")
def _(ws):
    return _build(ws, ws.event_cell("truth", "tpx", "5e38", row=2))


@case("build-truth-missing-column", "event000000001-truth.csv: column 'particle_id' missing")
def _(ws):
    def edit(rows):
        index = rows[0].index("particle_id")
        return [row[:index] + row[index + 1:] for row in rows]

    return _build(ws, ws.event("truth", edit))


@case("build-particles-px-inf", "event000000001-particles.csv: column 'px' must be finite numbers")
def _(ws):
    return _build(ws, ws.event_cell("particles", "px", "-inf", row=2))


@case("build-particles-px-overflows-float32", "event000000001-particles.csv: column 'px' must be finite float32 numbers, |value| <= 3.403e+38")
def _(ws):
    return _build(ws, ws.event_cell("particles", "px", "1e39", row=2))


@case("build-particles-id-float-text", "event000000001-particles.csv: column 'particle_id' must be integers written as digits")
def _(ws):
    return _build(ws, ws.event_column("particles", "particle_id", lambda i, old: f"{int(old):.6e}"))


@case("build-particles-duplicate-id", "event000000001-particles.csv: column 'particle_id' must be unique")
def _(ws):
    def edit(rows):
        rows[2][0] = rows[1][0]

    return _build(ws, ws.event("particles", edit))


@case("build-particles-vz-nan", "event000000001-particles.csv: column 'vz' must be finite numbers")
def _(ws):
    return _build(ws, ws.event_cell("particles", "vz", "NaN", row=3))


@case("build-particles-q-float", "event000000001-particles.csv: column 'q' must be integers written as digits")
def _(ws):
    return _build(ws, ws.event_cell("particles", "q", "0.5", row=3))


@case("build-cells-header-only-with-cell-features", "event000000001-cells.csv: expected the cells of the event's hits (found an empty table)")
def _(ws):
    # Every hit's cluster features were zeros, without a word.
    return _build(ws, ws.event("cells", lambda rows: rows[:1])) + ["--cell-features"]


@case("build-cells-value-negative-with-cell-features", "event000000001-cells.csv: column 'value' must be a deposited charge, >= 0 (found -0.5 in row 2)")
def _(ws):
    return _build(ws, ws.event_cell("cells", "value", "-0.5", row=2)) + ["--cell-features"]


@case("build-cells-rows-written-twice-with-cell-features", "event000000001-cells.csv: expected each channel (ch0, ch1) of a hit once")
def _(ws):
    return _build(ws, ws.event("cells", lambda rows: rows.extend(rows[1:]))) + ["--cell-features"]


@case("build-cells-value-nan-with-cell-features", "event000000001-cells.csv: column 'value' must be finite numbers")
def _(ws):
    return _build(ws, ws.event_cell("cells", "value", "nan", row=2)) + ["--cell-features"]


@case("build-cells-hit-id-unknown-with-cell-features", "event000000001-cells.csv: column 'hit_id' must match the hits file's hit_ids")
def _(ws):
    return _build(ws, ws.event_cell("cells", "hit_id", "123456789", row=2)) + ["--cell-features"]


@case("build-cells-of-the-last-hit-cut-off-with-cell-features", "event000000001-cells.csv: column 'hit_id' must give every hit of the hits file its cells (found 1 hits without a cell, first hit_id")
def _(ws):
    # A cells file cut at a line boundary: the last hit's cluster features were zeros, without a word.
    def cut(rows):
        last = rows[-1][rows[0].index("hit_id")]
        return [row for row in rows if row[rows[0].index("hit_id")] != last]

    return _build(ws, ws.event("cells", cut)) + ["--cell-features"]


@case("build-cells-missing-with-cell-features", "event000000001-cells.csv.gz: cells file not found")
def _(ws):
    return _build(ws, ws.event(parts=("hits", "particles", "truth"))) + ["--cell-features"]


@case("build-cells-value-overflows-float32", "event000000001-cells.csv: column 'value' must be finite float32 numbers, |value| <= 3.403e+38")
def _(ws):
    return _build(ws, ws.event_cell("cells", "value", "1e300", row=2)) + ["--cell-features"]


@case("build-input-missing", "nowhere: expected a directory of TrackML events or an event prefix")
def _(ws):
    return _build(ws, ws.path("nowhere"))


@case("build-input-empty-dir", "empty: expected TrackML event files event<digits>-<part>.csv[.gz]")
def _(ws):
    ws.path("empty").mkdir()
    return _build(ws, ws.path("empty"))


@case("build-phi-slope-nan", "--phi-slope-max must be a positive finite number")
def _(ws):
    return _build(ws, ws.base.events) + ["--phi-slope-max", "nan"]


@case("build-z0-max-inf", "--z0-max must be a positive finite number")
def _(ws):
    return _build(ws, ws.base.events) + ["--z0-max", "inf"]


@case("build-deta-negative", "--deta-max must be a positive finite number")
def _(ws):
    return _build(ws, ws.base.events) + ["--deta-max", "-0.1"]


@case("build-min-pt-nan", "--min-pt must be a non-negative number")
def _(ws):
    return _build(ws, ws.base.events) + ["--min-pt", "nan"]


@case("build-min-pt-inf", "--min-pt must be a non-negative number")
def _(ws):
    return _build(ws, ws.base.events) + ["--min-pt", "inf"]


@case("build-crossing-margin-negative", "--crossing-margin must be a non-negative number")
def _(ws):
    return _build(ws, ws.base.events) + ["--crossing-margin", "-1"]


@case("build-skip-dphi-margin-nan", "--skip-dphi-margin must be a non-negative number (got nan)")
def _(ws):
    return _build(ws, ws.base.events) + ["--skip-dphi-margin", "nan"]


@case("build-bridge-dphi-margin-negative", "--bridge-dphi-margin must be a non-negative number (got -0.01)")
def _(ws):
    return _build(ws, ws.base.events) + ["--bridge-dphi-margin", "-0.01"]


@case("build-volumes-unknown", "--volumes: expected distinct volume ids of the detector")
def _(ws):
    return _build(ws, ws.base.events) + ["--volumes", "7,99"]


@case("build-volumes-not-numbers", "--volumes: expected comma-separated volume ids (got 'pixel')")
def _(ws):
    return _build(ws, ws.base.events) + ["--volumes", "pixel"]


@case("build-min-pt-without-truth", "event000000001: --min-pt 1 keeps hits by truth pT, so it needs the event's truth file")
def _(ws):
    return _build(ws, ws.event(parts=("hits",))) + ["--min-pt", "1"]


@case("build-out-is-file", "Invalid value for '--out': Directory 'WS/file' is a file")
def _(ws):
    return ["build", "--input", ws.base.events, "--out", ws.write("file", "x"), "--quiet"]


@case("build-out-under-unreadable-dir", "g: expected a location we can use, cannot access WS/locked/g")
def _(ws):
    locked = ws.path("locked")
    locked.mkdir()
    ws.notes["denied"] = locked
    return ["build", "--input", ws.base.events, "--out", locked / "g", "--quiet"]


@case("build-json-is-directory", "Invalid value for '--json': File 'WS/d' is a directory")
def _(ws):
    ws.path("d").mkdir()
    return _build(ws, ws.base.events) + ["--json", ws.path("d")]


@case("build-second-event-bad", "1 of 2 events failed: event000000002 (event000000002: WS/ev/event000000002-hits.csv: column 'x' must be finite numbers")
def _(ws):
    events = ws.event()
    for path in list(events.iterdir()):
        (events / path.name.replace("000000001", "000000002")).write_bytes(path.read_bytes())
    bad = events / "event000000002-hits.csv"
    rows = [line.split(",") for line in bad.read_text().splitlines()]
    rows[3][1] = "inf"
    bad.write_text("".join(",".join(r) + "\n" for r in rows))
    # Event 1 is fine: its graph is built and kept, event 2 is named in the one error line.
    ws.notes["kept"] = {"graphs": "graphs/event000000001.npz"}
    return _build(ws, events)


# =============================================================================== graph files (every command that loads graphs)


def _graph_mutations():
    return {
        "format-version-text": lambda a: a.__setitem__("format_version", np.array("1")),
        "format-version-array": lambda a: a.__setitem__("format_version", np.array([1, 1])),
        "format-version-float": lambda a: a.__setitem__("format_version", np.float64(1.5)),
        "format-version-missing": lambda a: a.pop("format_version"),
        "format-version-future": lambda a: a.__setitem__("format_version", np.int64(99)),
        "event-id-text": lambda a: a.__setitem__("event_id", np.array("seven")),
        "event-id-array": lambda a: a.__setitem__("event_id", np.arange(3)),
        "x-0d": lambda a: a.__setitem__("x", np.float32(1.0)),
        "x-1d": lambda a: a.__setitem__("x", a["x"][:, 0].copy()),
        "x-nan": lambda a: a["x"].__setitem__((3, 1), np.nan),
        "x-inf": lambda a: a["x"].__setitem__((0, 0), np.inf),
        "x-float64": lambda a: a.__setitem__("x", a["x"].astype(np.float64)),
        "x-text": lambda a: a.__setitem__("x", a["x"].astype(str)),
        "x-zero-columns": lambda a: a.__setitem__("x", np.zeros((a["x"].shape[0], 0), np.float32)),
        "pos-wrong-shape": lambda a: a.__setitem__("pos", a["pos"][:, :2].copy()),
        "pos-inf": lambda a: a["pos"].__setitem__((1, 2), -np.inf),
        "edge-attr-nan": lambda a: a["edge_attr"].__setitem__((2, 3), np.nan),
        "edge-attr-wrong-rows": lambda a: a.__setitem__("edge_attr", a["edge_attr"][:-1].copy()),
        "edge-index-out-of-range": lambda a: a["edge_index"].__setitem__((1, 0), 10**9),
        "edge-index-negative": lambda a: a["edge_index"].__setitem__((0, 0), -1),
        "edge-index-float": lambda a: a.__setitem__("edge_index", a["edge_index"].astype(np.float64)),
        "edge-index-3-rows": lambda a: a.__setitem__("edge_index", np.concatenate([a["edge_index"], a["edge_index"][:1]])),
        "y-wrong-length": lambda a: a.__setitem__("y", a["y"][:-2].copy()),
        "y-nan": lambda a: a["y"].__setitem__(0, np.nan),
        "y-not-binary": lambda a: a["y"].__setitem__(0, 7.0),
        "hit-id-float": lambda a: a.__setitem__("hit_id", a["hit_id"].astype(np.float64)),
        "hit-id-2d": lambda a: a.__setitem__("hit_id", a["hit_id"][:, None].copy()),
        "layer-missing": lambda a: a.pop("layer"),
        "particle-pt-nan": lambda a: a["particle_pt"].__setitem__(0, np.nan),
        "x-object-array": lambda a: a.__setitem__("x", np.array([None, 1], dtype=object)),
        "complex-features": lambda a: a.__setitem__("x", a["x"].astype(np.complex64)),
    }


# Graph-file damage is given to every command that reads graphs; the commands differ in the loader path
# they use (header peek, full load, plan check), so each mutation is a distinct case for each of them.
GRAPH_COMMANDS = {
    "partition": lambda ws, g: ["partition", "--graph", g, "--parts", "2", "--out", ws.path("plans")],
    "train": lambda ws, g: ["train", "--data", g.parent, "--out", ws.path("run"), *TINY_TRAIN],
    "evaluate": lambda ws, g: ["evaluate", "--checkpoint", ws.base.model, "--data", g.parent, "--quiet"],
    "verify": lambda ws, g: ["verify", "--graph", g, "--parts", "2", "--hidden", "4", "--iterations", "1"],
}
GRAPH_MUTATIONS_BY_COMMAND = {
    "partition": list(_graph_mutations()),
    "train": ["format-version-text", "format-version-array", "x-0d", "x-nan", "x-inf", "edge-index-out-of-range",
              "edge-index-float", "y-wrong-length", "y-nan", "event-id-text", "x-text", "x-object-array", "edge-attr-nan",
              "pos-inf", "x-zero-columns", "y-not-binary"],
    "evaluate": ["format-version-text", "format-version-array", "x-0d", "x-nan", "edge-index-negative", "y-nan",
                 "event-id-array", "hit-id-float", "x-object-array", "particle-pt-nan"],
    "verify": ["format-version-text", "x-0d", "x-inf", "edge-attr-nan", "edge-index-3-rows", "x-object-array"],
}  # fmt: skip

#: The error each graph mutation must get, whichever command reads the graph.
GRAPH_MUTATION_ERRORS = {
    "format-version-missing": "event000000001.npz: expected a domainpar graph file, found no format_version entry",
    "format-version-text": "event000000001.npz: entry format_version must be an int64 scalar",
    "format-version-array": "event000000001.npz: entry format_version must be an int64 scalar",
    "format-version-float": "event000000001.npz: entry format_version must be an int64 scalar",
    "format-version-future": "event000000001.npz: graph format version must be one of [1, 2]",
    "event-id-text": "event000000001.npz: entry event_id must be an int64 scalar",
    "event-id-array": "event000000001.npz: entry event_id must be an int64 scalar",
    "x-0d": "event000000001.npz: x must be 2-dimensional",
    "x-1d": "event000000001.npz: x must be 2-dimensional",
    "x-nan": "event000000001.npz: x must be finite numbers",
    "x-inf": "event000000001.npz: x must be finite numbers",
    "x-float64": "event000000001.npz: x must be of dtype float32",
    "x-text": "event000000001.npz: x must be of dtype float32",
    "x-zero-columns": "event000000001.npz: x must be of at least one feature column",
    "pos-wrong-shape": "event000000001.npz: pos must be of shape",
    "pos-inf": "event000000001.npz: pos must be finite numbers",
    "edge-attr-nan": "event000000001.npz: edge_attr must be finite numbers",
    "edge-attr-wrong-rows": "event000000001.npz: edge_attr must be of shape",
    "edge-index-out-of-range": "event000000001.npz: edge_index must be within [0, 640)",
    "edge-index-negative": "event000000001.npz: edge_index must be within [0, 640)",
    "edge-index-float": "event000000001.npz: edge_index must be of dtype int64",
    "edge-index-3-rows": "event000000001.npz: edge_index must be of shape",
    "y-wrong-length": "event000000001.npz: y must be of shape (453,)",
    "y-nan": "event000000001.npz: y must be finite numbers",
    "y-not-binary": "event000000001.npz: y must be edge labels 0 or 1",
    "hit-id-float": "event000000001.npz: hit_id must be of dtype int64",
    "hit-id-2d": "event000000001.npz: hit_id must be 1-dimensional",
    "layer-missing": "event000000001.npz: graph file is missing entries ['layer']",
    "particle-pt-nan": "event000000001.npz: particle_pt must be finite numbers",
    "x-object-array": "event000000001.npz: entry x must be a numeric array",
    "complex-features": "event000000001.npz: x must be of dtype float32",
    "missing": "none.npz: graph file not found",
}

for _command, _names in GRAPH_MUTATIONS_BY_COMMAND.items():
    for _name in _names:

        def _make(ws, command=_command, name=_name):
            return GRAPH_COMMANDS[command](ws, ws.graph(_graph_mutations()[name]))

        case(f"{_command}-graph-{_name}", GRAPH_MUTATION_ERRORS[_name])(_make)


@case("partition-graph-truncated-zip", "event000000001.npz: expected a domainpar graph file")
def _(ws):
    return GRAPH_COMMANDS["partition"](ws, ws.graph(raw=ws.base.graph.read_bytes()[:500]))


@case("partition-graph-empty-file", "event000000001.npz: expected a domainpar graph file")
def _(ws):
    return GRAPH_COMMANDS["partition"](ws, ws.graph(raw=b""))


@case("partition-graph-text-file", "event000000001.npz: expected a domainpar graph file")
def _(ws):
    return GRAPH_COMMANDS["partition"](ws, ws.graph(raw=b"hello\n"))


@case("partition-graph-pickle", "event000000001.npz: expected a domainpar graph file")
def _(ws):
    import pickle

    return GRAPH_COMMANDS["partition"](ws, ws.graph(raw=pickle.dumps({"x": 1})))


@case("train-graph-truncated-zip", "event000000001.npz: expected a domainpar graph file")
def _(ws):
    return GRAPH_COMMANDS["train"](ws, ws.graph(raw=ws.base.graph.read_bytes()[:-200]))


@case("evaluate-graph-truncated-zip", "event000000001.npz: expected a domainpar graph file")
def _(ws):
    return GRAPH_COMMANDS["evaluate"](ws, ws.graph(raw=ws.base.graph.read_bytes()[:-200]))


@case("verify-graph-truncated-zip", "event000000001.npz: expected a domainpar graph file")
def _(ws):
    return GRAPH_COMMANDS["verify"](ws, ws.graph(raw=ws.base.graph.read_bytes()[:-200]))


@case("partition-graph-dir-empty", "nog: expected graph files")
def _(ws):
    ws.path("nog").mkdir()
    return ["partition", "--graph", ws.path("nog"), "--parts", "2", "--out", ws.path("plans")]


@case("partition-parts-zero", "--parts must be at least 1")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--parts", "0", "--out", ws.path("plans")]


@case("partition-parts-negative", "--parts must be at least 1")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--parts", "-2", "--out", ws.path("plans")]


@case("partition-parts-absurd", "event000000001.npz: --parts must be at most the number of nodes (640)")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--parts", str(10**15), "--out", ws.path("plans")]


@case("partition-hidden-zero", "--hidden must be at least 1")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--parts", "2", "--out", ws.path("plans"), "--hidden", "0"]


@case("partition-seed-negative", "Invalid value for '--seed': -4 is not in the range")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--parts", "2", "--out", ws.path("plans"), "--seed", "-4"]


@case("partition-seed-beyond-64-bits", "Invalid value for '--seed': 1180591620717411303424 is not in the range")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--parts", "2", "--out", ws.path("plans"), "--seed", str(2**70)]


@case("partition-plot-wrong-suffix", "p.jpg: must end in .png (got .jpg)")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--parts", "2", "--out", ws.path("plans"), "--plot", ws.path("p.jpg")]


@case("partition-out-under-unreadable-dir", "plans: expected a location we can use, cannot access WS/locked/plans")
def _(ws):
    locked = ws.path("locked")
    locked.mkdir()
    ws.notes["denied"] = locked
    return ["partition", "--graph", ws.base.graph, "--parts", "2", "--out", locked / "plans"]


@case("partition-dir-second-graph-nan", "1 of 2 graphs failed: event000000002.npz (event000000002.npz: WS/gs/event000000002.npz: x must be finite numbers")
def _(ws):
    good = ws.graph(name="gs")
    arrays = ws.graph_arrays()
    arrays["event_id"] = np.int64(2)
    arrays["x"][5, 2] = np.nan
    with open(good.parent / "event000000002.npz", "wb") as fh:
        np.savez(fh, **arrays)
    # The good event's plan (and the report of it) is kept; the bad one is named in the one error line.
    ws.notes["kept"] = {"plans": "plans/event000000001/part_00001.npz", "r.json": "r.json"}
    return ["partition", "--graph", good.parent, "--parts", "2", "--out", ws.path("plans"), "--json", ws.path("r.json")]


@case("evaluate-dir-second-graph-nan", "event000000002.npz: edge_attr must be finite numbers")
def _(ws):
    good = ws.graph(name="gs")
    arrays = ws.graph_arrays()
    arrays["event_id"] = np.int64(2)
    arrays["edge_attr"][0, 0] = np.inf
    with open(good.parent / "event000000002.npz", "wb") as fh:
        np.savez(fh, **arrays)
    return ["evaluate", "--checkpoint", ws.base.model, "--data", good.parent, "--quiet", "--submissions", ws.path("subs"),
            "--json", ws.path("e.json")]  # fmt: skip


def _plans_copy(ws):
    import shutil

    target = ws.path("plans")
    shutil.copytree(ws.base.plans, target)
    return target


def _train_with_plans(ws, plans):
    return ["train", "--data", ws.base.graphs, "--plans", plans, "--mode", "domain", "--ranks", "2", "--hidden", "4",
            "--iterations", "1", "--epochs", "1", "--no-progress", "--no-curves", "--threads", "1", "--out", ws.path("run")]  # fmt: skip


@case("train-plans-part-file-flipped", "part_00001.npz: part file checksum must match its manifest")
def _(ws):
    plans = _plans_copy(ws)
    part = sorted(plans.rglob("part_00001.npz"))[0]
    data = bytearray(part.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 16):
        data[i] ^= 0xFF
    part.write_bytes(bytes(data))
    return _train_with_plans(ws, plans)


@case("train-plans-manifest-garbage", "manifest.json: expected a JSON plan manifest, could not parse it")
def _(ws):
    plans = _plans_copy(ws)
    sorted(plans.rglob("manifest.json"))[0].write_text('{"format_version": 1, "num_parts": "two"')
    return _train_with_plans(ws, plans)


# =============================================================================== verify options


@case("verify-parts-zero", "--parts must be at least 1")
def _(ws):
    return ["verify", "--graph", ws.base.graph, "--parts", "0"]


@case("verify-timeout-inf", "Invalid value for '--timeout': 'inf' is not a finite number")
def _(ws):
    return ["verify", "--graph", ws.base.graph, "--parts", "2", "--timeout", "inf"]


@case("verify-timeout-nan", "Invalid value for '--timeout': 'nan' is not a finite number")
def _(ws):
    return ["verify", "--graph", ws.base.graph, "--parts", "2", "--timeout", "nan"]


@case("verify-iterations-negative", "--iterations must be at least 1")
def _(ws):
    return ["verify", "--graph", ws.base.graph, "--parts", "2", "--iterations", "-1"]


@case("verify-hidden-absurd", "--hidden must be at most 65536")
def _(ws):
    return ["verify", "--graph", ws.base.graph, "--parts", "1", "--hidden", str(10**9)]


@case("verify-unlabelled-graph", "event000000002.npz: verify needs a graph with truth labels for the loss")
def _(ws):
    return ["verify", "--graph", sorted(ws.base.unlabelled.glob("*.npz"))[0], "--parts", "2"]


@case("verify-graph-missing", "none.npz: graph file not found")
def _(ws):
    return ["verify", "--graph", ws.path("none.npz"), "--parts", "2"]


@case("verify-json-is-directory", "d: expected a file path")
def _(ws):
    ws.path("d").mkdir()
    return ["verify", "--graph", ws.base.graph, "--parts", "2", "--json", ws.path("d")]


@case("verify-parts-above-nodes", "--parts 100000 starts that many local processes")
def _(ws):
    return ["verify", "--graph", ws.base.graph, "--parts", "100000", "--hidden", "4", "--iterations", "1"]


# =============================================================================== train: options and configs


def _train(ws, *extra):
    return ["train", "--data", ws.base.graphs, "--out", ws.path("run"), *TINY_TRAIN, *extra]


for _flag, _value, _expect in [
    ("--lr", "inf", "Invalid value for '--lr': 'inf' is not a finite number"),
    ("--lr", "nan", "Invalid value for '--lr': 'nan' is not a finite number"),
    ("--lr", "0", "Invalid value for '--lr': 0.0 is not in the range (0, 10]"),
    ("--lr", "-0.1", "Invalid value for '--lr': -0.1 is not in the range (0, 10]"),
    ("--timeout", "inf", "Invalid value for '--timeout': 'inf' is not a finite number"),
    ("--timeout", "nan", "Invalid value for '--timeout': 'nan' is not a finite number"),
    ("--timeout", "0", "Invalid value for '--timeout': 0.0 is not in the range (0, 2592000]"),
    ("--epochs", "0", "Invalid value for '--epochs': 0 is not in the range >= 1"),
    ("--epochs", "-1", "Invalid value for '--epochs': -1 is not in the range >= 1"),
    ("--hidden", "0", "command line: --hidden must be a positive integer"),
    ("--hidden", str(10**9), "--hidden must be at most 65536"),
    ("--iterations", "-1", "command line: --iterations must be a non-negative integer"),
    ("--batch-events", "0", "Invalid value for '--batch-events': 0 is not in the range >= 1"),
    ("--threads", "0", "Invalid value for '--threads': 0 is not in the range >= 1"),
    ("--threads", "-2", "Invalid value for '--threads': -2 is not in the range >= 1"),
    ("--keep", "0", "Invalid value for '--keep': 0 is not in the range >= 1"),
    ("--threshold", "1.5", "Invalid value for '--threshold': 1.5 is not in the range (0, 1)"),
    ("--threshold", "nan", "Invalid value for '--threshold': 'nan' is not a finite number"),
    ("--clip", "-1", "Invalid value for '--clip': -1.0 is not in the range [0, 3.403e+38]"),
    ("--clip", "inf", "Invalid value for '--clip': 'inf' is not a finite number"),
    ("--weight-decay", "nan", "Invalid value for '--weight-decay': 'nan' is not a finite number"),
    ("--pos-weight", "inf", "Invalid value for '--pos-weight': 'inf' is not a finite number"),
    ("--warmup", "-1", "Invalid value for '--warmup': -1 is not in the range >= 0"),
    ("--max-steps", "0", "Invalid value for '--max-steps': 0 is not in the range >= 1"),
    ("--mode", "bogus", "--mode must be one of domain, sectors, single"),
    ("--precision", "fp8", "--precision must be one of fp32, bf16, fp64"),
    ("--device", "tpu", "--device must be one of auto, cpu, cuda"),
    ("--method", "random", "--method must be one of metis, geometric"),
    ("--schedule", "linear", "--schedule must be one of cosine, step, constant"),
    ("--lr-scaling", "cubic", "--lr-scaling must be one of none, linear, sqrt"),
    ("--ranks", "0", "Invalid value for '--ranks': 0 is not in the range >= 1"),
    ("--domain-size", "0", "Invalid value for '--domain-size': 0 is not in the range >= 1"),
    ("--cache-events", "-1", "No such option '--cache-events'"),
    ("--checkpoint-every", "-5", "Invalid value for '--checkpoint-every': -5 is not in the range >= 0"),
    ("--seed", "-1", "Invalid value for '--seed': -1 is not in the range [0, 2^63)"),
    ("--seed", str(2**70), "Invalid value for '--seed': 1180591620717411303424 is not in the range [0, 2^63)"),
    ("--activation", "softmax", "command line: --activation must be one of elu, gelu, leaky_relu, relu, silu, tanh"),
    ("--weight-decay", "-1", "Invalid value for '--weight-decay': -1.0 is not in the range [0, 3.403e+38]"),
    ("--threads", "100000", "--threads must be at most"),
    ("--mlp-layers", "0", "command line: --mlp-layers must be a positive integer"),
    ("--batch-events", str(10**12), "--batch-events 1000000000000 must be at most the number of training events"),
    # Domains (issue 28): where the computation stays finite and meaningful, refused while the line is parsed.
    ("--eps", "-1", "Invalid value for '--eps': -1.0 is not in the range (0, 1]: AdamW divides by sqrt(v) + eps"),
    ("--eps", "1e300", "Invalid value for '--eps': 1e+300 is not in the range (0, 1]: AdamW divides by sqrt(v) + eps"),
    ("--lr", "1e300", "Invalid value for '--lr': 1e+300 is not in the range (0, 10]: AdamW moves every weight by about lr per step"),
    ("--pos-weight", "1e300", "Invalid value for '--pos-weight': 1e+300 is not in the range (0, 1000000]: a loss weight; larger ones overflow the float32 loss"),
    ("--weight-decay", "1e300", "Invalid value for '--weight-decay': 1e+300 is not in the range [0, 3.403e+38]"),
    ("--cache-gb", "1e300", "Invalid value for '--cache-gb': 1e+300 is not in the range [0, 1000000]: GB of host memory per rank"),
    ("--timeout", "1e300", "Invalid value for '--timeout': 1e+300 is not in the range (0, 2592000]: seconds, at most 30 days"),
    ("--target-weight", "1e300", "Invalid value for '--target-weight': 1e+300 is not in the range [0, 1000000]: a loss weight; larger ones overflow the float32 loss"),
    ("--prefetch", str(10**12), "Invalid value for '--prefetch': 1000000000000 is not in the range [0, 1024]: events staged ahead of the step that needs them"),
]:

    def _make(ws, flag=_flag, value=_value):
        return _train(ws, flag, value)

    case(f"train-option{_flag}={_value}", _expect)(_make)


def _config(ws, text: str | bytes):
    return ["train", "--config", ws.write("run.yaml", text), "--data", ws.base.graphs, "--out", ws.path("run"), *TINY_TRAIN]


@case("train-config-not-utf8", "run.yaml: expected a UTF-8 YAML config file")
def _(ws):
    return _config(ws, b"optim:\n  lr: 0.001\n# caf\xe9 \xff\xfe\n")


@case("train-config-binary", "run.yaml: expected a UTF-8 YAML config file")
def _(ws):
    return _config(ws, bytes(range(256)))


@case("train-config-not-yaml", "run.yaml: expected a YAML config file, could not parse it")
def _(ws):
    return _config(ws, "optim: [lr: 1\n  - :\n")


@case("train-config-a-list", "run.yaml: expected a YAML mapping of sections")
def _(ws):
    return _config(ws, "- 1\n- 2\n")


@case("train-config-section-scalar", "run.yaml: section 'optim' must be a mapping of fields")
def _(ws):
    return _config(ws, "optim: 3\n")


@case("train-config-unknown-section", "run.yaml: unknown config key 'optimizer.lr'")
def _(ws):
    return _config(ws, "optimizer:\n  lr: 0.1\n")


@case("train-config-unknown-key", "run.yaml: unknown config key 'optim.learning_rate'")
def _(ws):
    return _config(ws, "optim:\n  learning_rate: 0.1\n")


@case("train-config-lr-yaml-inf", "run.yaml: optim.lr must be a finite number")
def _(ws):
    return _config(ws, "optim:\n  lr: .inf\n")


@case("train-config-lr-text-inf", "run.yaml: optim.lr must be a finite number")
def _(ws):
    return _config(ws, "optim:\n  lr: 'inf'\n")


@case("train-config-lr-list", "run.yaml: optim.lr must be a number")
def _(ws):
    return _config(ws, "optim:\n  lr: [1, 2]\n")


@case("train-config-hidden-float", "run.yaml: model.hidden must be an integer")
def _(ws):
    return _config(ws, "model:\n  hidden: 4.5\n")


@case("train-config-hidden-bool", "run.yaml: model.hidden must be an integer")
def _(ws):
    return _config(ws, "model:\n  hidden: true\n")


@case("train-config-epochs-huge-int", "run.yaml: run.epochs must be an integer of at most 64 bits")
def _(ws):
    return _config(ws, f"run:\n  epochs: {10**30}\n")


@case("train-config-timeout-nan", "run.yaml: parallel.timeout_s must be a finite number")
def _(ws):
    return _config(ws, "parallel:\n  timeout_s: .nan\n")


@case("train-config-out-a-mapping", "run.yaml: data.method must be a string")
def _(ws):
    return _config(ws, "data:\n  method: {a: 1}\n")


@case("train-config-seed-float-huge", "run.yaml: run.seed must be an integer of at most 64 bits")
def _(ws):
    return _config(ws, "run:\n  seed: 1.0e+30\n")


@case("train-config-huge-value-echo", "run.yaml: model.activation must be one of elu, gelu, leaky_relu, relu, silu, tanh")
def _(ws):
    return _config(ws, "model:\n  activation: '" + "x" * 3_000_000 + "'\n")


@case("train-config-missing-file", "none.yaml: config file not found")
def _(ws):
    return ["train", "--config", ws.path("none.yaml"), "--data", ws.base.graphs, "--out", ws.path("run"), *TINY_TRAIN]


@case("train-config-is-directory", "conf: expected a YAML config file")
def _(ws):
    ws.path("conf").mkdir()
    return ["train", "--config", ws.path("conf"), "--data", ws.base.graphs, "--out", ws.path("run"), *TINY_TRAIN]


@case("train-config-yaml-anchor-bomb", "run.yaml: section 'a0' must be a mapping of fields")
def _(ws):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return _config(ws, "\n".join(lines) + "\n")


@case("train-config-section-written-twice", "run.yaml: expected a YAML config file that names each key of a mapping once (found 'optim' on line 1 and again on line 3: the first would be lost)")
def _(ws):
    # PyYAML keeps the last of two equal keys: the first section's lr was dropped without a word.
    return _config(ws, "optim:\n  lr: 0.001\noptim:\n  weight_decay: 0.0\n")


@case("train-config-key-written-twice", "run.yaml: expected a YAML config file that names each key of a mapping once (found 'lr' on line 2 and again on line 3: the first would be lost)")
def _(ws):
    return _config(ws, "optim:\n  lr: 0.001\n  lr: 0.5\n")


@case("train-data-missing", "nowhere: no such file or directory")
def _(ws):
    return ["train", "--data", ws.path("nowhere"), "--out", ws.path("run"), *TINY_TRAIN]


@case("train-data-empty-dir", "empty: expected graph files")
def _(ws):
    ws.path("empty").mkdir()
    return ["train", "--data", ws.path("empty"), "--out", ws.path("run"), *TINY_TRAIN]


@case("train-data-unlabelled", "event000000002.npz: training and validation need graphs with truth labels")
def _(ws):
    return ["train", "--data", ws.base.unlabelled, "--out", ws.path("run"), *TINY_TRAIN]


@case("train-val-missing", "nowhere: no such file or directory")
def _(ws):
    return _train(ws, "--val", ws.path("nowhere"))


@case("train-plans-not-a-plan-dir", "plans: no plan directory event000000001 for BASE/graphs/event000000001.npz")
def _(ws):
    ws.path("plans").mkdir()
    return ["train", "--data", ws.base.graphs, "--out", ws.path("run"), "--plans", ws.path("plans"), "--mode", "domain",
            "--ranks", "2", "--hidden", "4", "--iterations", "1", "--epochs", "1", "--no-progress"]  # fmt: skip


@case("train-raw-events-hit-x-overflow", "event000000001-hits.csv: column 'x' must be finite float32 numbers, |value| <= 3.403e+38")
def _(ws):
    return ["train", "--data", ws.event_cell("hits", "x", "1e40", row=3), "--out", ws.path("run"), *TINY_TRAIN]


@case("train-raw-events-particle-id-float", "event000000001-truth.csv: column 'particle_id' must be integers written as digits")
def _(ws):
    return ["train", "--data", ws.event_cell("truth", "particle_id", "4.5e17", row=3), "--out", ws.path("run"), *TINY_TRAIN]


@case("train-out-is-file", "file: expected a directory")
def _(ws):
    return ["train", "--data", ws.base.graphs, "--out", ws.write("file", "x"), *TINY_TRAIN]


@case("train-out-under-unreadable-dir", "checkpoints: permission denied")
def _(ws):
    locked = ws.path("locked")
    locked.mkdir()
    ws.notes["denied"] = locked
    return ["train", "--data", ws.base.graphs, "--out", locked / "run", *TINY_TRAIN]


@case("train-out-unwritable", "checkpoints: permission denied")
def _(ws):
    locked = ws.path("locked")
    locked.mkdir()
    ws.notes["denied"] = locked
    return ["train", "--data", ws.base.graphs, "--out", locked, *TINY_TRAIN]


@case("train-out-holds-checkpoints-without-resume", "--out WS/run already holds checkpoints")
def _(ws):
    return ["train", "--data", ws.base.graphs, "--out", ws.run_copy(), *TINY_TRAIN]


# =============================================================================== train: checkpoints to resume from


def _resume_from(ws, checkpoint):
    # The base run's --epochs: a resume must keep the length of its learning-rate schedule (its own case below).
    return ["train", "--data", ws.base.graphs, "--out", ws.path("run2"), *TINY_TRAIN, "--epochs", "2", "--resume-from", checkpoint]


@case("train-resume-from-flipped-bytes", "flipped.pt: checkpoint content does not match its checksum")
def _(ws):
    return _resume_from(ws, ws.flipped(ws.base.checkpoints[-1]))


@case("train-resume-from-flipped-bytes-anywhere", "flipped.pt: expected a domainpar checkpoint, could not load it")
def _(ws):
    return _resume_from(ws, ws.flipped(ws.base.checkpoints[-1], count=16, region="any", seed=3))


@case("train-resume-from-truncated", "trunc.pt: expected a domainpar checkpoint, could not load it")
def _(ws):
    data = ws.base.checkpoints[-1].read_bytes()
    return _resume_from(ws, ws.write("trunc.pt", data[: len(data) // 2]))


@case("train-resume-from-step-text", "ckpt.pt: checkpoint entry 'step' must be a non-negative integer")
def _(ws):
    return _resume_from(ws, ws.checkpoint(lambda s: s.__setitem__("step", "two"), source=ws.base.checkpoints[-1]))


@case("train-resume-from-step-negative", "ckpt.pt: checkpoint entry 'step' must be a non-negative integer")
def _(ws):
    return _resume_from(ws, ws.checkpoint(lambda s: s.__setitem__("step", -4), source=ws.base.checkpoints[-1]))


@case("train-resume-from-epoch-float", "ckpt.pt: checkpoint entry 'epoch' must be a non-negative integer")
def _(ws):
    return _resume_from(ws, ws.checkpoint(lambda s: s.__setitem__("epoch", 1.5), source=ws.base.checkpoints[-1]))


@case("train-resume-from-missing-optimizer", "ckpt.pt: checkpoint is missing entries ['optimizer']")
def _(ws):
    return _resume_from(ws, ws.checkpoint(lambda s: s.pop("optimizer"), source=ws.base.checkpoints[-1]))


@case("train-resume-from-optimizer-garbage", "ckpt.pt: checkpoint entry 'optimizer' must be an optimizer state_dict")
def _(ws):
    return _resume_from(ws, ws.checkpoint(lambda s: s.__setitem__("optimizer", {"state": 3, "param_groups": "x"}),
                                          source=ws.base.checkpoints[-1]))  # fmt: skip


@case("train-resume-from-config-garbage", "ckpt.pt: checkpoint entry config: section 'optim' must be a mapping of fields")
def _(ws):
    return _resume_from(ws, ws.checkpoint(lambda s: s.__setitem__("config", {"optim": "fast"}), source=ws.base.checkpoints[-1]))


@case("train-resume-from-rng-garbage", "ckpt.pt: checkpoint entry 'rng' must be the RNG states of torch, numpy and python")
def _(ws):
    return _resume_from(ws, ws.checkpoint(lambda s: s.__setitem__("rng", {"torch": "seed"}), source=ws.base.checkpoints[-1]))


@case("train-resume-from-model-weights-nan-typed", "ckpt.pt: checkpoint entry 'model.node_encoder.linears.0.weight' must be a floating-point tensor")
def _(ws):
    def edit(state):
        name = next(iter(state["model"]))
        state["model"][name] = state["model"][name].to(dtype=__import__("torch").int32)

    return _resume_from(ws, ws.checkpoint(edit, source=ws.base.checkpoints[-1]))


@case("train-resume-from-epoch-state-empty", "ckpt.pt: checkpoint entry 'epoch_state' must be a dict of finite running sums")
def _(ws):
    return _resume_from(ws, ws.checkpoint(lambda s: s.__setitem__("epoch_state", {}), source=ws.base.checkpoints[-1]))


@case("train-resume-from-optimizer-moment-wrong-shape", "ckpt.pt: checkpoint entry 'optimizer' holds a exp_avg of shape (3, 3, 3)")
def _(ws):
    import torch

    def edit(state):
        moments = next(iter(state["optimizer"]["state"].values()))
        moments["exp_avg"] = torch.zeros(3, 3, 3)

    return _resume_from(ws, ws.checkpoint(edit, source=ws.base.checkpoints[-1]))


@case("train-resume-from-rng-torch-state-short", "ckpt.pt: checkpoint entry 'rng' is not a valid RNG state")
def _(ws):
    import torch

    def edit(state):
        state["rng"]["torch"] = torch.zeros(10, dtype=torch.uint8)

    return _resume_from(ws, ws.checkpoint(edit, source=ws.base.checkpoints[-1]))


@case("train-resume-from-model-pt", "model.pt: checkpoint is missing entries ['epoch', 'step_in_epoch', 'optimizer']")
def _(ws):
    return _resume_from(ws, ws.base.model)


@case("train-resume-from-a-list", "list.pt: expected a domainpar checkpoint dict")
def _(ws):
    import torch

    path = ws.path("list.pt")
    torch.save([1, 2, 3], path)
    return _resume_from(ws, path)


@case("train-resume-from-other-model-size", "step-00000002.pt: a resume continues the run that wrote this checkpoint, but --hidden is 8 here and 4 in the checkpoint")
def _(ws):
    return ["train", "--data", ws.base.graphs, "--out", ws.path("run2"), *TINY_TRAIN, "--hidden", "8", "--epochs", "3",
            "--resume-from", ws.base.checkpoints[-1]]  # fmt: skip


@case("train-resume-from-missing", "nope.pt: checkpoint file not found")
def _(ws):
    return _resume_from(ws, ws.path("nope.pt"))


@case("train-resume-from-directory", "d.pt: checkpoint file not found")
def _(ws):
    ws.path("d.pt").mkdir()
    return _resume_from(ws, ws.path("d.pt"))


@case("train-resume-newest-flipped", "step-00000002.pt: checkpoint content does not match its checksum")
def _(ws):
    run = ws.run_copy()
    newest = sorted((run / "checkpoints").glob("step-*.pt"))[-1]
    flipped = ws.flipped(newest, name="tmpflip.pt")
    newest.write_bytes(flipped.read_bytes())
    flipped.unlink()
    return ["train", "--data", ws.base.graphs, "--out", run, *TINY_TRAIN, "--epochs", "3", "--resume"]


@case("train-resume-newest-step-text", "step-00000002.pt: checkpoint entry 'step' must be a non-negative integer")
def _(ws):
    run = ws.run_copy()
    newest = sorted((run / "checkpoints").glob("step-*.pt"))[-1]
    ws.checkpoint(lambda s: s.__setitem__("step", "7"), source=newest, name="rewritten.pt")
    newest.write_bytes(ws.path("rewritten.pt").read_bytes())
    ws.path("rewritten.pt").unlink()
    return ["train", "--data", ws.base.graphs, "--out", run, *TINY_TRAIN, "--epochs", "3", "--resume"]


# =============================================================================== evaluate


def _evaluate(ws, checkpoint, *extra):
    return ["evaluate", "--checkpoint", checkpoint, "--data", ws.base.graphs, "--quiet", *extra]


@case("evaluate-checkpoint-flipped-bytes", "flipped.pt: checkpoint content does not match its checksum")
def _(ws):
    return _evaluate(ws, ws.flipped(ws.base.model))


@case("evaluate-step-checkpoint-flipped-bytes", "flipped.pt: checkpoint content does not match its checksum")
def _(ws):
    return _evaluate(ws, ws.flipped(ws.base.checkpoints[-1], seed=5))


@case("evaluate-checkpoint-is-a-fifo", "pipe/model.pt: expected a checkpoint file, found a named pipe (FIFO)")
def _(ws):
    # It said "checkpoint file not found" of a path that is there. Beside the workspace: its snapshot would block.
    fifo = ws.tmp.parent / "pipe" / "model.pt"
    fifo.parent.mkdir(exist_ok=True)
    os.mkfifo(fifo)
    return _evaluate(ws, fifo)


@case("evaluate-checkpoint-is-a-symlink-loop", "WS/model.pt: expected a checkpoint file, found a symbolic link that cannot be followed")
def _(ws):
    ws.path("model.pt").symlink_to(ws.path("other.pt"))
    ws.path("other.pt").symlink_to(ws.path("model.pt"))
    return _evaluate(ws, ws.path("model.pt"))


@case("evaluate-filter-is-a-dangling-symlink", "WS/filter.pt: expected an edge filter file, found a symbolic link to nothing")
def _(ws):
    ws.path("filter.pt").symlink_to(ws.path("gone.pt"))
    return _evaluate(ws, ws.base.model, "--filter", ws.path("filter.pt"))


@case("evaluate-checkpoint-truncated", "t.pt: expected a domainpar checkpoint, could not load it")
def _(ws):
    data = ws.base.model.read_bytes()
    return _evaluate(ws, ws.write("t.pt", data[: len(data) - 100]))


@case("evaluate-checkpoint-junk", "j.pt: expected a domainpar checkpoint, could not load it")
def _(ws):
    return _evaluate(ws, ws.write("j.pt", b"junk\n"))


@case("evaluate-checkpoint-step-text", "ckpt.pt: checkpoint entry 'step' must be a non-negative integer")
def _(ws):
    return _evaluate(ws, ws.checkpoint(lambda s: s.__setitem__("step", "ten")))


@case("evaluate-checkpoint-model-config-hidden-text", "ckpt.pt: checkpoint entry 'model_config.hidden' must be an integer")
def _(ws):
    return _evaluate(ws, ws.checkpoint(lambda s: s["model_config"].__setitem__("hidden", "4")))


@case("evaluate-checkpoint-model-config-unknown-key", "ckpt.pt: checkpoint entry 'model_config' is not a valid model config")
def _(ws):
    return _evaluate(ws, ws.checkpoint(lambda s: s["model_config"].__setitem__("depth", 3)))


@case("evaluate-checkpoint-model-config-a-list", "ckpt.pt: checkpoint entry 'model_config' must be a dict of model hyper-parameters")
def _(ws):
    return _evaluate(ws, ws.checkpoint(lambda s: s.__setitem__("model_config", [4, 1])))


@case("evaluate-checkpoint-model-a-list", "ckpt.pt: checkpoint entry 'model' must be a dict of parameter names to tensors")
def _(ws):
    return _evaluate(ws, ws.checkpoint(lambda s: s.__setitem__("model", [1, 2])))


@case("evaluate-checkpoint-weights-text-key", "ckpt.pt: checkpoint entry 'model' must be a dict of parameter names to tensors")
def _(ws):
    return _evaluate(ws, ws.checkpoint(lambda s: s["model"].__setitem__(next(iter(s["model"])), "weights")))


@case("evaluate-checkpoint-threshold-text", "ckpt.pt: checkpoint entry config: run.threshold must be a number")
def _(ws):
    return _evaluate(ws, ws.checkpoint(lambda s: s["config"]["run"].__setitem__("threshold", "high")))


@case("evaluate-checkpoint-format-version-text", "ckpt.pt: checkpoint entry 'format_version' must be an integer")
def _(ws):
    return _evaluate(ws, ws.checkpoint(lambda s: s.__setitem__("format_version", "1")))


@case("evaluate-checkpoint-raw-pickle", "p.pt: expected a domainpar checkpoint, could not load it")
def _(ws):
    import pickle

    return _evaluate(ws, ws.write("p.pt", pickle.dumps({"model": {"w": [1.0]}}, protocol=5)))


@case("evaluate-checkpoint-is-directory", "c.pt: expected a checkpoint file")
def _(ws):
    ws.path("c.pt").mkdir()
    return _evaluate(ws, ws.path("c.pt"))


@case("evaluate-parts-zero", "Invalid value for '--parts': 0 is not in the range")
def _(ws):
    return _evaluate(ws, ws.base.model, "--parts", "0")


@case("evaluate-parts-negative", "Invalid value for '--parts': -1 is not in the range")
def _(ws):
    return _evaluate(ws, ws.base.model, "--parts", "-1")


@case("evaluate-ranks-differ-from-parts", "--ranks must equal --parts: one process per part")
def _(ws):
    return _evaluate(ws, ws.base.model, "--parts", "2", "--ranks", "3")


@case("evaluate-threshold-nan", "Invalid value for '--threshold': 'nan' is not a finite number")
def _(ws):
    return _evaluate(ws, ws.base.model, "--threshold", "nan")


@case("evaluate-threshold-one", "Invalid value for '--threshold': 1.0 is not in the range 0<x<1")
def _(ws):
    return _evaluate(ws, ws.base.model, "--threshold", "1")


@case("evaluate-timeout-inf", "Invalid value for '--timeout': 'inf' is not a finite number")
def _(ws):
    return _evaluate(ws, ws.base.model, "--timeout", "inf")


@case("evaluate-timeout-nan", "Invalid value for '--timeout': 'nan' is not a finite number")
def _(ws):
    return _evaluate(ws, ws.base.model, "--timeout", "nan")


@case("evaluate-seed-negative", "Invalid value for '--seed': -1 is not in the range")
def _(ws):
    return _evaluate(ws, ws.base.model, "--seed", "-1")


@case("evaluate-data-missing", "nowhere: expected raw TrackML events")
def _(ws):
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.path("nowhere"), "--quiet"]


@case("evaluate-data-unlabelled-graph", "event000000002.npz: evaluation needs a graph with truth")
def _(ws):
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.base.unlabelled, "--quiet"]


@case("evaluate-raw-events-x-overflow", "event000000001-hits.csv: column 'x' must be finite float32 numbers, |value| <= 3.403e+38")
def _(ws):
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.event_cell("hits", "x", "1e40", row=3), "--quiet"]


@case("evaluate-raw-events-particle-id-float", "event000000001-truth.csv: column 'particle_id' must be integers written as digits")
def _(ws):
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.event_cell("truth", "particle_id", "4.5e17", row=3),
            "--quiet"]  # fmt: skip


@case("evaluate-raw-events-particle-missing-from-particles",
      "event000000001-particles.csv: column 'particle_id' must list every particle of the truth file (found 1 missing")
def _(ws):
    # The particle's pT and eta come from the particles file; the refusal used to name no file.
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.event("particles", lambda rows: rows[:1] + rows[2:]),
            "--quiet"]  # fmt: skip


@case("evaluate-data-is-an-event-csv-file", "--data WS/ev/event000000001-hits.csv: expected a directory of raw TrackML events or a graph file, got one of an event's CSV files")
def _(ws):
    # It was read as a graph file: "not a zip file".
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.event() / "event000000001-hits.csv", "--quiet"]


@case("reconstruct-data-is-an-event-csv-file", "--data WS/ev/event000000001-hits.csv: expected a directory of raw TrackML events or a graph file, got one of an event's CSV files")
def _(ws):
    # It was read as a graph file and failed as an event (exit 1), after writing the run's files.
    return ["reconstruct", "--checkpoint", ws.base.model, "--data", ws.event() / "event000000001-hits.csv", "--out", ws.path("r"), "--quiet"]


@case("reconstruct-event-number-not-digits", "WS/ev/eventabc-cells.csv: expected event files named event<digits>-<part>.csv or .csv.gz (found 'eventabc-cells.csv', whose event number is not digits)")
def _(ws):
    # Listed as raw events (event*-hits.csv), then none had a number: a traceback (IndexError).
    events = ws.event()
    for path in list(events.glob("event000000001-*")):
        path.rename(events / path.name.replace("event000000001", "eventabc"))
    return ["reconstruct", "--checkpoint", ws.base.model, "--data", events, "--out", ws.path("r"), "--quiet"]


@case("build-event-number-not-digits", "WS/ev/event-7-hits.csv: expected event files named event<digits>-<part>.csv or .csv.gz (found 'event-7-hits.csv', whose event number is not digits)")
def _(ws):
    # Skipped when listing: an event went missing without a word.
    events = ws.event()
    (events / "event-7-hits.csv").write_bytes((events / "event000000001-hits.csv").read_bytes())
    return _build(ws, events)


@case("evaluate-filter-is-a-gnn-checkpoint", "run/model.pt: expected a domainpar edge filter (the physics recipe's filter.pt, which prunes graphs before the GNN), found a GNN checkpoint")
def _(ws):
    # The two .pt files of a physics run swapped: it said "could not read it (KeyError)".
    return _evaluate(ws, ws.base.model, "--filter", ws.base.model)


@case("evaluate-filter-empty-file", "filter.pt: expected a domainpar edge filter (found an empty file)")
def _(ws):
    return _evaluate(ws, ws.base.model, "--filter", ws.write("filter.pt", b""))


@case("evaluate-filter-is-directory", "WS/filter.pt: expected a domainpar edge filter file (found a directory)")
def _(ws):
    ws.path("filter.pt").mkdir()
    return _evaluate(ws, ws.base.model, "--filter", ws.path("filter.pt"))


@case("evaluate-events-dir-bad-truth", "event000000001-truth.csv: column 'weight' must be finite numbers")
def _(ws):
    return _evaluate(ws, ws.base.model, "--events", ws.event_cell("truth", "weight", "inf", row=3))


@case("evaluate-json-is-directory", "d: expected a file path")
def _(ws):
    ws.path("d").mkdir()
    return _evaluate(ws, ws.base.model, "--json", ws.path("d"))


@case("evaluate-submissions-under-file", "subs: WS/f must be a directory")
def _(ws):
    return _evaluate(ws, ws.base.model, "--submissions", ws.write("f", "x") / "subs")


@case("evaluate-plots-under-unreadable-dir", "plots: expected a location we can use, cannot access WS/locked/plots")
def _(ws):
    locked = ws.path("locked")
    locked.mkdir()
    ws.notes["denied"] = locked
    return _evaluate(ws, ws.base.model, "--plots", locked / "plots")


# =============================================================================== score


def _score(ws, submission, event=None):
    return ["score", "--event", ws.base.prefix if event is None else event, "--submission", submission]


def _submission(ws, edit=None, raw: bytes | None = None):
    if raw is not None:
        return ws.write("sub.csv", raw)
    rows = [line.split(",") for line in ws.base.submission.read_text().splitlines()]
    edited = edit(rows) if edit else None
    rows = rows if edited is None else edited
    return ws.write("sub.csv", "".join(",".join(r) + "\n" for r in rows))


def _set(row, column, value):
    def edit(rows):
        rows[row][rows[0].index(column)] = value

    return edit


@case("score-track-id-beyond-int64", "sub.csv: column track_id must be integers in [-9223372036854775808, 9223372036854775807]")
def _(ws):
    return _score(ws, _submission(ws, lambda rows: [rows[0]] + [[r[0], "9" * 20 + r[1].lstrip("-")] for r in rows[1:]]))


@case("score-track-id-one-beyond-int64", "sub.csv: column track_id must be integers in [-9223372036854775808, 9223372036854775807]")
def _(ws):
    return _score(ws, _submission(ws, _set(3, "track_id", "18446744073709551617")))


@case("score-track-id-float-above-2p53", "sub.csv: column track_id must be integers written as digits")
def _(ws):
    return _score(ws, _submission(ws, lambda rows: [rows[0]] + [[r[0], f"{int(r[1]):.6e}"] for r in rows[1:]]))


@case("score-track-id-float-formatted-integer", "sub.csv: column track_id must be integers written as digits")
def _(ws):
    return _score(ws, _submission(ws, _set(2, "track_id", "12.0")))


@case("score-track-id-fraction", "sub.csv: column track_id must be integers written as digits")
def _(ws):
    return _score(ws, _submission(ws, _set(2, "track_id", "1.5")))


@case("score-track-id-nan", "sub.csv: column track_id must be integers written as digits")
def _(ws):
    return _score(ws, _submission(ws, _set(2, "track_id", "nan")))


@case("score-track-id-empty", "sub.csv: column track_id must be integers written as digits")
def _(ws):
    return _score(ws, _submission(ws, _set(2, "track_id", "")))


@case("score-track-id-text", "sub.csv: column track_id must be integers written as digits")
def _(ws):
    return _score(ws, _submission(ws, _set(2, "track_id", "track7")))


@case("score-track-id-huge-field", "sub.csv: column track_id must be integers written as digits")
def _(ws):
    return _score(ws, _submission(ws, _set(2, "track_id", "x" * 3_000_000)))


@case("score-hit-id-float", "sub.csv: column hit_id must be integers written as digits")
def _(ws):
    return _score(ws, _submission(ws, _set(2, "hit_id", "6.5")))


@case("score-hit-id-duplicate", "sub.csv: every hit_id must appear once")
def _(ws):
    def edit(rows):
        rows[2][0] = rows[1][0]

    return _score(ws, _submission(ws, edit))


@case("score-hit-id-unknown", "sub.csv: hit_ids must belong to the event")
def _(ws):
    return _score(ws, _submission(ws, _set(2, "hit_id", "987654321")))


@case("score-hit-missing", "sub.csv: submission must assign every hit of the event a track")
def _(ws):
    return _score(ws, _submission(ws, lambda rows: rows[:-3]))


@case("score-missing-column", "sub.csv: submission must have columns ['hit_id', 'track_id']")
def _(ws):
    return _score(ws, _submission(ws, lambda rows: [[r[0]] for r in rows]))


@case("score-empty-file", "sub.csv: expected a CSV table with columns hit_id, track_id")
def _(ws):
    return _score(ws, _submission(ws, raw=b""))


@case("score-track-id-named-twice", "sub.csv: column 'track_id' must appear once in the header (found it as fields 2 and 3)")
def _(ws):
    return _score(ws, _submission(ws, lambda rows: [row + (["track_id"] if i == 0 else ["0"]) for i, row in enumerate(rows)]))


@case("score-trailing-comma-on-data-rows", "sub.csv: expected every row to have the header's 2 fields (found 3")
def _(ws):
    # pandas would read hit_id from track_id and track_id from the empty field.
    return _score(ws, _submission(ws, lambda rows: [row + ([] if i == 0 else [""]) for i, row in enumerate(rows)]))


@case("score-header-only", "sub.csv: submission must assign every hit of the event a track")
def _(ws):
    return _score(ws, _submission(ws, raw=b"hit_id,track_id\n"))


@case("score-binary-garbage", "sub.csv: expected a CSV table with columns hit_id, track_id, could not parse it")
def _(ws):
    return _score(ws, _submission(ws, raw=bytes(range(256)) * 10))


@case("score-not-utf8", "sub.csv: expected a UTF-8 CSV table with columns hit_id, track_id, found a byte that is not text")
def _(ws):
    return _score(ws, _submission(ws, raw=ws.base.submission.read_bytes().replace(b"track_id", b"track\xff_id")))


@case("score-event-id-wrong", "sub.csv: column event_id must be 1 for BASE/events/event000000001")
def _(ws):
    return _score(ws, _submission(ws, lambda rows: [["event_id"] + rows[0]] + [["9"] + r for r in rows[1:]]))


@case("score-event-id-text", "sub.csv: column event_id must be integers written as digits (found 'one' in row 1)")
def _(ws):
    return _score(ws, _submission(ws, lambda rows: [["event_id"] + rows[0]] + [["one"] + r for r in rows[1:]]))


@case("score-event-id-float", "sub.csv: column event_id must be integers written as digits (found 1.0 in row 1)")
def _(ws):
    # Compared as float64, 1.0 passed for event 1.
    return _score(ws, _submission(ws, lambda rows: [["event_id"] + rows[0]] + [["1.0"] + r for r in rows[1:]]))


@case("score-event-id-beyond-float-precision",
      "sub.csv: column event_id must be 9007199254740993 for WS/event9007199254740993 (got '9007199254740992' in row 1)")
def _(ws):
    # 2^53 + 1 and 2^53 are one float64: compared as floats, another event's submission was scored as this one's.
    ws.write("event9007199254740993-truth.csv", (ws.base.events / "event000000001-truth.csv").read_bytes())
    sub = _submission(ws, lambda rows: [["event_id"] + rows[0]] + [["9007199254740992"] + r for r in rows[1:]])
    return _score(ws, sub, event=ws.path("event9007199254740993"))


@case("score-submission-missing", "none.csv: submission file not found")
def _(ws):
    return _score(ws, ws.path("none.csv"))


@case("score-submission-directory", "s.csv: expected a submission CSV file")
def _(ws):
    ws.path("s.csv").mkdir()
    return _score(ws, ws.path("s.csv"))


@case("score-event-missing", "event000000001-truth.csv.gz: truth file not found")
def _(ws):
    return _score(ws, ws.base.submission, event=ws.path("event000000001"))


@case("score-truth-particle-id-float-above-2p53", "event000000001-truth.csv: column 'particle_id' must be integers written as digits")
def _(ws):
    events = ws.event_column("truth", "particle_id", lambda i, old: f"{int(old):.16e}" if int(old) else old)
    return _score(ws, ws.base.submission, event=events / "event000000001")


@case("score-truth-weight-nan", "event000000001-truth.csv: column 'weight' must be finite numbers")
def _(ws):
    return _score(ws, ws.base.submission, event=ws.event_cell("truth", "weight", "nan", row=2) / "event000000001")


@case("score-truth-all-weights-zero", "event000000001: truth weights must have a positive sum")
def _(ws):
    return _score(ws, ws.base.submission, event=ws.event_column("truth", "weight", lambda i, old: "0") / "event000000001")


@case("score-truth-hit-id-duplicate", "event000000001: truth hit_ids must be unique")
def _(ws):
    def edit(rows):
        rows[2][0] = rows[1][0]

    return _score(ws, ws.base.submission, event=ws.event("truth", edit) / "event000000001")


@case("score-event-without-truth", "event000000001-truth.csv.gz: truth file not found")
def _(ws):
    return _score(ws, ws.base.submission, event=ws.event(parts=("hits", "cells", "particles")) / "event000000001")


# =============================================================================== export


def _export(ws, checkpoint, *extra, fmt="torchscript", out=None):
    return ["export", "--checkpoint", checkpoint, "--format", fmt, "--out", out or ws.path("model.pt"), *extra]


@case("export-checkpoint-flipped-bytes", "flipped.pt: checkpoint content does not match its checksum")
def _(ws):
    return _export(ws, ws.flipped(ws.base.model))


@case("export-step-checkpoint-flipped-bytes", "flipped.pt: checkpoint content does not match its checksum")
def _(ws):
    return _export(ws, ws.flipped(ws.base.checkpoints[-1], seed=11), fmt="onnx", out=ws.path("m.onnx"))


@case("export-checkpoint-truncated", "t.pt: expected a domainpar checkpoint, could not load it")
def _(ws):
    data = ws.base.model.read_bytes()
    return _export(ws, ws.write("t.pt", data[: len(data) // 2]))


@case("export-checkpoint-junk", "j.pt: expected a domainpar checkpoint, could not load it")
def _(ws):
    return _export(ws, ws.write("j.pt", b"\x00" * 64))


@case("export-checkpoint-missing", "none.pt: checkpoint file not found")
def _(ws):
    return _export(ws, ws.path("none.pt"))


@case("export-checkpoint-step-text", "ckpt.pt: checkpoint entry 'step' must be a non-negative integer")
def _(ws):
    return _export(ws, ws.checkpoint(lambda s: s.__setitem__("step", "ten")))


@case("export-checkpoint-model-config-unknown-key", "ckpt.pt: checkpoint entry 'model_config' is not a valid model config")
def _(ws):
    return _export(ws, ws.checkpoint(lambda s: s["model_config"].__setitem__("depth", 3)))


@case("export-checkpoint-weights-int", "ckpt.pt: checkpoint entry 'model.node_encoder.linears.0.weight' must be a floating-point tensor")
def _(ws):
    return _export(ws, ws.checkpoint(lambda s: s["model"].__setitem__(next(iter(s["model"])), s["model"][next(iter(s["model"]))].int())))


@case("export-checkpoint-without-checksum", "ckpt.pt: checkpoint entry 'sha256' must be a SHA-256 hex digest")
def _(ws):
    return _export(ws, ws.checkpoint(lambda s: s.pop("sha256", None), reseal=False))


@case("export-format-bogus", "Invalid value for '--format': 'tensorflow' is not one of")
def _(ws):
    return _export(ws, ws.base.model, fmt="tensorflow")


@case("export-out-is-directory", "d.pt: expected a file path")
def _(ws):
    ws.path("d.pt").mkdir()
    return _export(ws, ws.base.model, out=ws.path("d.pt"))


@case("export-out-under-file", "model.pt: WS/f must be a directory")
def _(ws):
    return _export(ws, ws.base.model, out=ws.write("f", "x") / "model.pt")


@case("export-out-under-unreadable-dir", "m.pt: expected a location we can use, cannot access WS/locked/m.pt")
def _(ws):
    locked = ws.path("locked")
    locked.mkdir()
    ws.notes["denied"] = locked
    return _export(ws, ws.base.model, out=locked / "m.pt")


@case("export-threshold-nan", "--threshold must be in (0, 1) (got nan)")
def _(ws):
    return _export(ws, ws.base.model, "--threshold", "nan")


@case("export-threshold-above-one", "--threshold must be in (0, 1) (got 1.5)")
def _(ws):
    return _export(ws, ws.base.model, "--threshold", "1.5")


@case("export-check-graph-nan", "event000000001.npz: x must be finite numbers")
def _(ws):
    return _export(ws, ws.base.model, "--check-graph", ws.graph(lambda a: a["x"].__setitem__((1, 1), np.nan)))


@case("export-check-graph-format-version-text", "event000000001.npz: entry format_version must be an int64 scalar")
def _(ws):
    return _export(ws, ws.base.model, "--check-graph", ws.graph(lambda a: a.__setitem__("format_version", np.array("1"))))


@case("export-check-graph-missing", "none.npz: no such graph file or directory")
def _(ws):
    return _export(ws, ws.base.model, "--check-graph", ws.path("none.npz"))


@case("export-graphs-missing", "nowhere: no such graph file or directory")
def _(ws):
    return _export(ws, ws.base.model, "--graphs", ws.path("nowhere"))


# =============================================================================== PyG graph files (Exa.TrkX/acorn layout)


@case("train-pyg-file-arbitrary-pickle", "event000000001.pyg: refused to load as a PyG graph: not a readable torch file")
def _(ws):
    import pickle

    ws.write("pyg/event000000001.pyg", pickle.dumps({"x": 1}))
    return ["train", "--data", ws.path("pyg"), "--out", ws.path("run"), *TINY_TRAIN]


@case("evaluate-pyg-file-truncated", "event000000001.pyg: refused to load as a PyG graph: not a readable torch file")
def _(ws):
    import torch

    torch.save({"x": torch.zeros(3, 3), "edge_index": torch.zeros(2, 2, dtype=torch.long)}, ws.path("whole.pt"))
    ws.write("pyg/event000000001.pyg", ws.path("whole.pt").read_bytes()[:100])
    ws.path("whole.pt").unlink()
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.path("pyg"), "--quiet"]


@case("verify-pyg-file-tensors-of-wrong-kind", "event000000001.pyg: field x must be finite")
def _(ws):
    import torch

    path = ws.path("pyg") / "event000000001.pyg"
    path.parent.mkdir()
    torch.save({"x": torch.full((4, 3), float("nan")), "edge_index": torch.tensor([[0.5], [1.0]]), "y": torch.ones(1)}, path)
    return ["verify", "--graph", path, "--parts", "2", "--hidden", "4", "--iterations", "1"]


# =============================================================================== demo


for _flag, _value, _expect in [
    ("--events", "0", "--events must be at least 2"),
    ("--val-events", "-1", "--val-events must be at least 1"),
    ("--ranks", "0", "--ranks must be at least 1"),
    ("--epochs", "0", "--epochs must be at least 1"),
    ("--particles", "5", "--particles must be at least 10"),
    ("--hidden", "0", "--hidden must be at least 1"),
    ("--iterations", "-1", "--iterations must be at least 1"),
    ("--seed", "-1", "--seed must be at least 0"),
    ("--particles", str(10**12), "--particles must be at most 1000000"),
    ("--ranks", "100000", "--ranks must be at most"),
    ("--hidden", str(10**9), "--hidden must be at most 65536"),
]:

    def _make(ws, flag=_flag, value=_value):
        return ["demo", "--out", ws.path("demo"), flag, value]

    case(f"demo-option{_flag}={_value}", _expect)(_make)


@case("demo-recipe-base-loops", "WS/b.yaml: base a.yaml leads back to a recipe that names it")
def _(ws):
    ws.write("b.yaml", "base: a.yaml\n")
    return ["demo", "--out", ws.path("demo"), "--recipe", ws.write("a.yaml", "base: b.yaml\n")]


@case("demo-recipe-section-written-twice", "WS/r.yaml: expected a YAML recipe that names each key of a mapping once (found 'model' on line 2 and again on line 4: the first would be lost)")
def _(ws):
    return ["demo", "--out", ws.path("demo"), "--recipe", ws.write("r.yaml", "name: r\nmodel:\n  hidden: 8\nmodel:\n  num_iterations: 2\n")]


@case("demo-recipe-base-is-a-directory", "base recipe of WS/r.yaml")
def _(ws):
    ws.path("dir").mkdir()
    return ["demo", "--out", ws.path("demo"), "--recipe", ws.write("r.yaml", "base: dir\n")]


@case("demo-recipe-volumes-unknown", "GraphConfig.volumes: expected a non-empty list of integer volume ids")
def _(ws):
    return ["demo", "--out", ws.path("demo"), "--recipe", ws.write("r.yaml", "graph:\n  volumes: [pixel]\n")]


@case("demo-out-is-file", "file: expected a directory")
def _(ws):
    return ["demo", "--out", ws.write("file", "x")]


@case("demo-out-under-unreadable-dir", "demo: expected a location we can use, cannot access WS/locked/demo")
def _(ws):
    locked = ws.path("locked")
    locked.mkdir()
    ws.notes["denied"] = locked
    return ["demo", "--out", locked / "demo"]


@case("demo-real-dir-bad-event", "event000000001-hits.csv: column 'x' must be finite float32 numbers")
def _(ws):
    return ["demo", "--out", ws.path("demo"), "--real", ws.event_cell("hits", "x", "1e40", row=3), "--events", "2",
            "--particles", "10", "--epochs", "1"]  # fmt: skip


# =============================================================================== identity of inputs


def _graph_copy(ws, name: str, *, node_features=None, x=None):
    """The base graph in ``<tmp>/<name>/`` with other node feature names and/or other node features (a rebuild)."""

    def edit(arrays):
        if x is not None:
            arrays["x"] = x(arrays["x"]).astype(np.float32)
        if node_features is not None:
            import json

            from domainpar.data.features import NODE_FEATURE_SPECS, feature_list

            arrays["node_features"] = np.array(node_features, dtype=np.str_)
            # As a rebuild writes it: the description names the same columns.
            description = json.loads(str(arrays["description_json"]))
            description["node_features"] = feature_list(node_features, NODE_FEATURE_SPECS)
            arrays["description_json"] = np.array(json.dumps(description, sort_keys=True))

    return ws.graph(edit, name=name)


#: The base run's settings: a resume must keep them.
RESUME = (*TINY_TRAIN, "--epochs", "2", "--keep", "2", "--threads", "1", "--resume")


def _resume(ws, *extra, data=None):
    return ["train", "--data", data or ws.base.graphs, "--out", ws.run_copy(), *RESUME, *extra]


@case("train-plans-part-labels-rewritten", "part_00000.npz: part file checksum must match its manifest")
def _(ws):
    from domainpar.npzfile import read_npz, write_npz

    plans = _plans_copy(ws)
    part = sorted(plans.rglob("part_00000.npz"))[0]
    arrays = read_npz(part)
    arrays["y"] = (1.0 - arrays["y"]).astype(np.float32)  # every label flipped; a valid archive with valid fields
    write_npz(part, arrays)
    return _train_with_plans(ws, plans)


@case("train-plans-made-from-other-features", "the plan was made from a graph with node features ['r', 'phi', 'z'], but WS/g4/event000000001.npz has ['r', 'phi', 'z', 'eta']")
def _(ws):
    graph = _graph_copy(ws, "g4", node_features=["r", "phi", "z", "eta"], x=lambda x: np.concatenate([x, x[:, :1]], axis=1))
    return [*_train_with_plans(ws, ws.base.plans)[:1], "--data", graph.parent, *_train_with_plans(ws, ws.base.plans)[3:]]


@case("train-plans-made-from-an-earlier-build", "--plans BASE/plans/event000000001/part_00000.npz (and 1 other part file(s)): expected a part file made from event000000001.npz as given to this run")
def _(ws):
    graph = _graph_copy(ws, "rebuilt", x=lambda x: x + 0.25)  # same names, same structure, other feature values
    return [*_train_with_plans(ws, ws.base.plans)[:1], "--data", graph.parent, *_train_with_plans(ws, ws.base.plans)[3:]]


@case("train-val-other-feature-names", "--val graph WS/val/event000000001.npz: node features must be ['r', 'phi', 'z'] like the training graph")
def _(ws):
    val = _graph_copy(ws, "val", node_features=["r", "z", "phi"])
    return ["train", "--data", ws.base.graphs, "--val", val.parent, "--out", ws.path("run"), *TINY_TRAIN]


@case("train-val-other-feature-width", "--val graph WS/val/event000000001.npz: x must have 3 columns like the training graph BASE/graphs/event000000001.npz (got 4")
def _(ws):
    val = _graph_copy(ws, "val", node_features=["r", "phi", "z", "eta"], x=lambda x: np.concatenate([x, x[:, :1]], axis=1))
    return ["train", "--data", ws.base.graphs, "--val", val.parent, "--out", ws.path("run"), *TINY_TRAIN]


@case("train-resume-activation-differs", "but --activation is 'relu' here and 'silu' in the checkpoint")
def _(ws):
    return _resume(ws, "--activation", "relu")


@case("train-resume-iterations-differs", "but --iterations is 2 here and 1 in the checkpoint")
def _(ws):
    return _resume(ws, "--iterations", "2")


@case("train-resume-loss-weight-differs", "but --pos-weight is 3.0 here and 1.0 in the checkpoint")
def _(ws):
    return _resume(ws, "--pos-weight", "3")


@case("train-resume-layer-norm-differs", "but --layer-norm is False here and True in the checkpoint")
def _(ws):
    return _resume(ws, "--no-layer-norm")


@case("train-resume-seed-differs", "but --seed is 5 here and 0 in the checkpoint")
def _(ws):
    return _resume(ws, "--seed", "5")


@case("train-resume-sectors-instead-of-domain", "but --mode is 'sectors' here and 'single' in the checkpoint")
def _(ws):
    return _resume(ws, "--mode", "sectors", "--ranks", "2")


@case("train-resume-longer-cosine-schedule", "its cosine learning-rate schedule spans 2 steps (--epochs 2) and this run's would span 3 (--epochs 3)")
def _(ws):
    return _resume(ws, "--epochs", "3")


@case("train-resume-max-steps-shortens-schedule", "spans 2 steps (--epochs 2) and this run's would span 1 (--epochs 2, --max-steps 1)")
def _(ws):
    return _resume(ws, "--max-steps", "1")


@case("train-resume-other-training-events", "--data holds 1 training events")
def _(ws):
    return _resume(ws, data=_graph_copy(ws, "rebuilt", x=lambda x: x + 0.25).parent)


@case("train-resume-other-feature-names", "the training graphs' node features are ['r', 'z', 'phi'] here and ['r', 'phi', 'z'] in the checkpoint")
def _(ws):
    return _resume(ws, data=_graph_copy(ws, "renamed", node_features=["r", "z", "phi"]).parent)


def _mixed_formats(ws) -> Path:
    """The base graph (.npz) and a PyG file of another event in one directory."""
    import shutil

    import torch

    mixed = ws.path("mixed")
    mixed.mkdir()
    shutil.copy(ws.base.graph, mixed / ws.base.graph.name)
    torch.save({"x": torch.zeros(4, 3), "edge_index": torch.tensor([[0, 1], [1, 2]]), "y": torch.ones(2)}, mixed / "event000000002.pyg")
    return mixed


def _graphs_and_events(ws) -> Path:
    import shutil

    both = ws.event(name="both")
    shutil.copy(ws.base.graph, both / ws.base.graph.name)
    return both


MIXED = "expected graph files of one format (found 1 *.npz and 1 PyG files, e.g. event000000001.npz and event000000002.pyg)"
BOTH = "expected graph files or raw TrackML events, found both (e.g. event000000001.npz and event000000001-hits.csv)"


@case("train-data-mixed-npz-and-pyg", f"WS/mixed: {MIXED}")
def _(ws):
    return ["train", "--data", _mixed_formats(ws), "--out", ws.path("run"), *TINY_TRAIN]


@case("partition-graph-dir-mixed-npz-and-pyg", f"WS/mixed: {MIXED}")
def _(ws):
    return ["partition", "--graph", _mixed_formats(ws), "--parts", "2", "--out", ws.path("plans")]


@case("evaluate-data-mixed-npz-and-pyg", f"WS/mixed: {MIXED}")
def _(ws):
    return ["evaluate", "--checkpoint", ws.base.model, "--data", _mixed_formats(ws), "--quiet"]


@case("train-data-graphs-and-raw-events", f"--data WS/both: {BOTH}")
def _(ws):
    return ["train", "--data", _graphs_and_events(ws), "--out", ws.path("run"), *TINY_TRAIN]


@case("evaluate-data-graphs-and-raw-events", f"--data WS/both: {BOTH}")
def _(ws):
    return ["evaluate", "--checkpoint", ws.base.model, "--data", _graphs_and_events(ws), "--quiet"]


@case("evaluate-step-checkpoint-other-feature-names", "WS/renamed/event000000001.npz: graph node features must be ['r', 'phi', 'z'] like the model's training graphs")
def _(ws):
    graph = _graph_copy(ws, "renamed", node_features=["r", "z", "phi"])
    return ["evaluate", "--checkpoint", ws.base.checkpoints[-1], "--data", graph.parent, "--quiet"]


@case("evaluate-exported-model-other-feature-names", "WS/renamed/event000000001.npz: graph node features must be ['r', 'phi', 'z'] like the model's training graphs")
def _(ws):
    graph = _graph_copy(ws, "renamed", node_features=["r", "z", "phi"])
    return ["evaluate", "--model", ws.base.exported, "--data", graph.parent, "--quiet"]


def _exported_copy(ws) -> Path:
    import shutil

    target = ws.path("exported")
    shutil.copytree(ws.base.exported.parent, target)
    return target / ws.base.exported.name


@case("evaluate-exported-model-file-swapped", "WS/exported/model.pt: the model file does not match its sidecar model.pt.json")
def _(ws):
    model = _exported_copy(ws)
    model.write_bytes(model.read_bytes() + b"\0")  # another file under the sidecar's name
    return ["evaluate", "--model", model, "--data", ws.base.graphs, "--quiet"]


@case("export-graphs-other-features", "--graphs WS/renamed: node features must be ['r', 'phi', 'z'] like BASE/run/model.pt's training graphs (got ['r', 'z', 'phi'])")
def _(ws):
    graph = _graph_copy(ws, "renamed", node_features=["r", "z", "phi"])
    return ["export", "--checkpoint", ws.base.model, "--format", "torchscript", "--out", ws.path("m.pt"), "--graphs", graph.parent]


@case("train-graph-description-disagrees-with-its-names", "WS/g/event000000001.npz: entry description_json describes node features ['r', 'phi', 'z'] but the file's node_features are ['r', 'z', 'phi']")
def _(ws):
    graph = ws.graph(lambda a: a.__setitem__("node_features", np.array(["r", "z", "phi"])))
    return ["train", "--data", graph.parent, "--out", ws.path("run"), *TINY_TRAIN]


@case("evaluate-events-dir-of-another-event", "--events WS/ev/event000000001: expected the event BASE/graphs/event000000001.npz was built from (hit")
def _(ws):
    # The same event number and hit ids, other positions: the truth of another event would score the graph.
    events = ws.event_column("hits", "x", lambda row, old: str(float(old) + 5.0))
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.base.graphs, "--events", events, "--quiet"]


def _edge_filter(ws) -> Path:
    """An (untrained) edge filter for the base graphs' features, saved as a recipe run saves its filter.pt."""
    import torch

    from domainpar.filter.edge_filter import EdgeFilter, FilterConfig, FilterNet

    torch.manual_seed(0)
    config = FilterConfig(hidden=4, layers=1)
    edge_filter = EdgeFilter(FilterNet(2 * 3 + 4, config.hidden, config.layers), -1.0, ("r", "phi", "z"),
                             ("dr", "dphi", "dz", "dR"), config, {})  # fmt: skip
    return edge_filter.save(ws.path("filter.pt"))


@case("evaluate-filter-with-unpruned-graph-files", "--filter WS/filter.pt: expected the edge filter the model was trained with; the model was trained on graphs that were not pruned")
def _(ws):
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.base.graphs, "--filter", _edge_filter(ws), "--quiet"]


@case("evaluate-pruned-graphs-with-a-model-of-unpruned-ones", "WS/g/event000000001.npz: the graph was pruned by edge filter 0123abcd, but the checkpoint's model was trained on graphs that were not pruned")
def _(ws):
    import json

    def edit(arrays):
        build = json.loads(str(arrays["build_config"]))
        build["edge_filter"] = {"hash": "0123abcd", "threshold": 0.1, "efficiency": 0.99}
        arrays["build_config"] = np.array(json.dumps(build, sort_keys=True))

    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.graph(edit).parent, "--quiet"]


@case("export-check-graph-other-features", "--check-graph WS/renamed/event000000001.npz: node features must be ['r', 'phi', 'z']")
def _(ws):
    graph = _graph_copy(ws, "renamed", node_features=["r", "z", "phi"])
    return ["export", "--checkpoint", ws.base.model, "--format", "torchscript", "--out", ws.path("m.pt"), "--check-graph", graph]


# =============================================================================== nesting and size of parsed files

DEEP = "found containers nested deeper than 32 levels"


@case("train-config-deeply-nested-flow", f"WS/run.yaml: expected a YAML config file, {DEEP}")
def _(ws):
    return _config(ws, "optim: " + "[" * 20000 + "]" * 20000 + "\n")


@case("train-config-deeply-nested-block", f"WS/run.yaml: expected a YAML config file, {DEEP}")
def _(ws):
    return _config(ws, "".join("  " * depth + "a:\n" for depth in range(200)) + "  " * 200 + "b: 1\n")


@case("train-config-larger-than-any-config", "WS/run.yaml: expected a YAML config file of at most 67,108,864 bytes (got 67,108,865)")
def _(ws):
    path = ws.path("run.yaml")
    with open(path, "wb") as fh:
        fh.truncate(64 * 2**20 + 1)  # sparse: no disk used
    return ["train", "--config", path, "--data", ws.base.graphs, "--out", ws.path("run"), *TINY_TRAIN]


@case("train-plans-manifest-deeply-nested", f"manifest.json: expected a JSON plan manifest, {DEEP}")
def _(ws):
    plans = _plans_copy(ws)
    sorted(plans.rglob("manifest.json"))[0].write_text("[" * 100000 + "]" * 100000)
    return _train_with_plans(ws, plans)


@case("evaluate-exported-model-sidecar-deeply-nested", f"WS/exported/model.pt.json: expected the JSON sidecar of an exported model, {DEEP}")
def _(ws):
    model = _exported_copy(ws)
    Path(str(model) + ".json").write_text('{"format": ' + "[" * 100000 + "]" * 100000 + "}")
    return ["evaluate", "--model", model, "--data", ws.base.graphs, "--quiet"]


@case("train-graph-description-deeply-nested", f"entry description_json: expected a JSON object, {DEEP}")
def _(ws):
    graph = ws.graph(lambda a: a.__setitem__("description_json", np.array("[" * 50000 + "]" * 50000)))
    return ["train", "--data", graph.parent, "--out", ws.path("run"), *TINY_TRAIN]


@case("partition-graph-build-config-deeply-nested", f"build_config: expected a JSON object, {DEEP}")
def _(ws):
    graph = ws.graph(lambda a: a.__setitem__("build_config", np.array('{"a": ' + "[" * 50000 + "]" * 50000 + "}")))
    return ["partition", "--graph", graph, "--parts", "2", "--out", ws.path("plans")]


@case("train-resume-from-deeply-nested-checkpoint", f"WS/ckpt.pt: expected a domainpar checkpoint, {DEEP}")
def _(ws):
    def edit(state):
        nested: list = []
        for _ in range(100):
            nested = [nested]
        state["epoch_state"]["nested"] = nested

    return _resume_from(ws, ws.checkpoint(edit, source=ws.base.checkpoints[-1]))


# =============================================================================== output paths through symbolic links

DANGLING = "WS/link is a symbolic link to WS/nowhere, which does not exist"


def _dangling(ws, name: str = "link") -> Path:
    link = ws.path(name)
    link.symlink_to(ws.path("nowhere"))
    return link


@case("simulate-out-dangling-symlink", f"--out WS/link: {DANGLING}")
def _(ws):
    return ["simulate", "--out", _dangling(ws), "--events", "1", "--particles", "10"]


@case("simulate-out-under-dangling-symlink", f"--out WS/link/sub: {DANGLING} (on the way to WS/link/sub)")
def _(ws):
    return ["simulate", "--out", _dangling(ws) / "sub", "--events", "1", "--particles", "10"]


@case("build-out-dangling-symlink", f"--out WS/link: {DANGLING}")
def _(ws):
    return ["build", "--input", ws.base.events, "--out", _dangling(ws), "--quiet"]


@case("partition-out-dangling-symlink", f"--out WS/link: {DANGLING}")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--parts", "2", "--out", _dangling(ws)]


@case("train-out-dangling-symlink", f"--out WS/link: {DANGLING}")
def _(ws):
    return ["train", "--data", ws.base.graphs, "--out", _dangling(ws), *TINY_TRAIN]


@case("evaluate-json-dangling-symlink", f"--json WS/link: {DANGLING}")
def _(ws):
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.base.graphs, "--json", _dangling(ws), "--quiet"]


@case("export-out-dangling-symlink", "--out WS/link.pt: WS/link.pt is a symbolic link to WS/nowhere, which does not exist")
def _(ws):
    return ["export", "--checkpoint", ws.base.model, "--format", "torchscript", "--out", _dangling(ws, "link.pt")]


@case("verify-json-dangling-symlink", f"--json WS/link: {DANGLING}")
def _(ws):
    return ["verify", "--graph", ws.base.graph, "--parts", "2", "--hidden", "4", "--iterations", "1", "--json", _dangling(ws)]


@case("demo-out-dangling-symlink", f"--out WS/link: {DANGLING}")
def _(ws):
    return ["demo", "--out", _dangling(ws)]


# =============================================================================== issue 28: outputs never replace inputs

APART = "expected a directory apart from the inputs"


@case("evaluate-write-scores-dir-holds-the-data-file", f"--write-scores WS/g: {APART}, got the directory holding --data WS/g/event000000001.npz")
def _(ws):
    graph = ws.graph()
    return ["evaluate", "--checkpoint", ws.base.model, "--data", graph, "--write-scores", graph.parent, "--quiet"]


@case("evaluate-write-scores-through-a-link-to-the-data-dir", f"--write-scores WS/link: {APART}, got the directory holding --data WS/g/event000000001.npz")
def _(ws):
    graph = ws.graph()
    ws.path("link").symlink_to(graph.parent)
    return ["evaluate", "--checkpoint", ws.base.model, "--data", graph, "--write-scores", ws.path("link"), "--quiet"]


@case("evaluate-write-scores-relative-spelling-of-the-data-dir", f"--write-scores sub/../g: {APART}, got the --data directory g itself")
def _(ws):
    ws.graph()
    ws.path("sub").mkdir()
    return ["evaluate", "--checkpoint", ws.base.model, "--data", "g", "--write-scores", "sub/../g", "--quiet"]


@case("evaluate-json-is-the-checkpoint", "--json WS/ckpt.pt: expected an output apart from the inputs, got --checkpoint WS/ckpt.pt itself")
def _(ws):
    checkpoint = ws.checkpoint()
    return ["evaluate", "--checkpoint", checkpoint, "--data", ws.base.graphs, "--json", checkpoint, "--quiet"]


@case("evaluate-submissions-into-the-raw-events-dir", f"--submissions WS/ev: {APART}, got the --data directory WS/ev itself")
def _(ws):
    events = ws.event()
    return ["evaluate", "--checkpoint", ws.base.model, "--data", events, "--submissions", events, "--quiet"]


@case("evaluate-plots-into-the-events-dir", f"--plots WS/ev: {APART}, got the --events directory WS/ev itself")
def _(ws):
    events = ws.event()
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.base.graphs, "--events", events, "--plots", events, "--quiet"]


@case("export-out-is-the-checkpoint", "--out WS/ckpt.pt: expected an output apart from the inputs, got --checkpoint WS/ckpt.pt itself")
def _(ws):
    checkpoint = ws.checkpoint()
    return ["export", "--checkpoint", checkpoint, "--format", "torchscript", "--out", checkpoint]


@case("build-json-is-an-input-csv", "--json WS/ev/event000000001-hits.csv: expected an output apart from the inputs, got --input WS/ev/event000000001-hits.csv itself")
def _(ws):
    events = ws.event()
    return ["build", "--input", events, "--out", ws.path("g"), "--json", events / "event000000001-hits.csv", "--quiet"]


@case("build-out-holds-the-event-prefix-files", f"--out WS/ev: {APART}, got the directory holding --input WS/ev/event000000001")
def _(ws):
    events = ws.event()
    return ["build", "--input", events / "event000000001", "--out", events, "--quiet"]


@case("partition-json-is-the-graph-relative", "--json g/event000000001.npz: expected an output apart from the inputs, got --graph WS/g/event000000001.npz itself")
def _(ws):
    graph = ws.graph()
    return ["partition", "--graph", graph, "--parts", "2", "--out", ws.path("p"), "--json", "g/./event000000001.npz"]


@case("partition-out-is-the-graph-dir", f"--out WS/g: {APART}, got the --graph directory WS/g itself")
def _(ws):
    graph = ws.graph()
    return ["partition", "--graph", graph.parent, "--parts", "2", "--out", graph.parent]


@case("train-out-is-the-data-dir", f"--out WS/g: {APART}, got the --data directory WS/g itself")
def _(ws):
    graph = ws.graph()
    return ["train", "--data", graph.parent, "--out", graph.parent, *TINY_TRAIN]


@case("train-out-is-the-val-dir", f"--out WS/v: {APART}, got the --val directory WS/v itself")
def _(ws):
    graph = ws.graph(name="v")
    return ["train", "--data", ws.base.graphs, "--val", graph.parent, "--out", graph.parent, *TINY_TRAIN]


@case("demo-out-is-the-real-events-dir", f"--out WS/ev: {APART}, got the --real directory WS/ev itself")
def _(ws):
    events = ws.event()
    return ["demo", "--out", events, "--real", events]


@case("verify-json-is-the-graph", "--json WS/g/event000000001.npz: expected an output apart from the inputs, got --graph WS/g/event000000001.npz itself")
def _(ws):
    graph = ws.graph()
    return ["verify", "--graph", graph, "--parts", "2", "--hidden", "4", "--iterations", "1", "--json", graph]


# =============================================================================== issue 28: what a run reports is what it computed

SIDECAR_EDITED = "WS/exported/model.pt.json: expected the sidecar its model file model.pt records"


def _edited_sidecar(ws, edit) -> Path:
    import json

    model = _exported_copy(ws)
    side = Path(str(model) + ".json")
    content = json.loads(side.read_text())
    edit(content)
    side.write_text(json.dumps(content, indent=2) + "\n")
    return model


@case("evaluate-exported-model-sidecar-feature-scale-edited", SIDECAR_EDITED)
def _(ws):
    return ["evaluate", "--model", _edited_sidecar(ws, lambda s: s["node_features"][0].__setitem__("scale", 100.0)),
            "--data", ws.base.graphs, "--quiet"]  # fmt: skip


@case("evaluate-exported-model-sidecar-threshold-edited", SIDECAR_EDITED)
def _(ws):
    def edit(s):
        s["threshold"] = 0.3
        for stage in s["stages"]:
            stage.update({"threshold": 0.3} if stage["stage"] == "edge_classifier" else {})

    return ["evaluate", "--model", _edited_sidecar(ws, edit), "--data", ws.base.graphs, "--quiet"]


@case("evaluate-exported-model-sidecar-stage-removed", SIDECAR_EDITED)
def _(ws):
    def edit(s):
        s["stages"] = [stage for stage in s["stages"] if stage["stage"] != "graph"]

    return ["evaluate", "--model", _edited_sidecar(ws, edit), "--data", ws.base.events, "--quiet"]


@case("evaluate-exported-model-sidecar-graph-cut-edited", SIDECAR_EDITED)
def _(ws):
    def edit(s):
        for stage in s["stages"]:
            if stage["stage"] == "graph":
                stage["cuts"]["phi_slope_max"] = 0.01

    return ["evaluate", "--model", _edited_sidecar(ws, edit), "--data", ws.base.events, "--quiet"]


def _no_edges(arrays):
    arrays["edge_index"] = arrays["edge_index"][:, :0]
    arrays["edge_attr"] = arrays["edge_attr"][:0]
    arrays["y"] = arrays["y"][:0]


NO_EDGES = "WS/g/event000000001.npz: expected a graph with edges to {}, got one with 0 edges"


@case("train-event-without-edges", NO_EDGES.format("train on"))
def _(ws):
    return ["train", "--data", ws.graph(_no_edges).parent, "--out", ws.path("run"), *TINY_TRAIN]


@case("train-val-event-without-edges", NO_EDGES.format("validate on"))
def _(ws):
    return ["train", "--data", ws.base.graphs, "--val", ws.graph(_no_edges).parent, "--out", ws.path("run"), *TINY_TRAIN]


@case("evaluate-event-without-edges", NO_EDGES.format("score"))
def _(ws):
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.graph(_no_edges), "--quiet"]


@case("partition-event-without-edges", NO_EDGES.format("partition"))
def _(ws):
    return ["partition", "--graph", ws.graph(_no_edges), "--parts", "2", "--out", ws.path("p")]


@case("train-resume-from-step-losses-of-fewer-steps", "ckpt.pt: checkpoint entry 'step_losses' must hold one loss per step done, 2, as the checkpoint's position says (got 1)")
def _(ws):
    return _resume_from(ws, ws.checkpoint(lambda s: s.__setitem__("step_losses", s["step_losses"][:1]), source=ws.base.checkpoints[-1]))


@case("train-resume-from-epoch-sums-of-other-steps", "ckpt.pt: checkpoint entry 'epoch_state.steps' must hold the steps done in the epoch in progress (step_in_epoch), 0")
def _(ws):
    return _resume_from(ws, ws.checkpoint(lambda s: s["epoch_state"].__setitem__("steps", 3), source=ws.base.checkpoints[-1]))


@case("train-resume-old-checkpoint-with-a-torn-metrics-line", "WS/run/metrics.jsonl: expected the records of the run up to its checkpoint")
def _(ws):
    run = ws.run_copy()
    newest = sorted((run / "checkpoints").glob("step-*.pt"))[-1]
    ws.checkpoint(lambda s: s.pop("logs", None), source=newest, name=str(newest.relative_to(ws.tmp)))
    metrics = run / "metrics.jsonl"
    first, *rest = metrics.read_text().splitlines(keepends=True)
    metrics.write_text(first[: len(first) // 2] + "\n" + "".join(rest))
    return ["train", "--data", ws.base.graphs, "--out", run, *TINY_TRAIN, "--epochs", "2", "--keep", "2", "--resume"]


# =============================================================================== issue 28: every option's domain, every path named

_CONFIG_DOMAIN = "WS/run.yaml: optim.lr must be a number in (0, 10] (got 1e+300): AdamW moves every weight by about lr per step"


@case("train-config-lr-beyond-its-domain", _CONFIG_DOMAIN)
def _(ws):
    return _config(ws, "optim:\n  lr: 1.0e+300\n")


@case("train-config-eps-negative", "WS/run.yaml: optim.eps must be a number in (0, 1] (got -1.0): AdamW divides by sqrt(v) + eps")
def _(ws):
    return _config(ws, "optim:\n  eps: -1\n")


@case("train-config-weight-decay-times-lr-reaches-1", "WS/run.yaml: optim.weight_decay times the learning rate must be below 1 (got 2.0 x lr 1.0)")
def _(ws):
    return _config(ws, "optim:\n  lr: 1\n  weight_decay: 2\n")


@case("train-config-loss-weight-beyond-float32", "WS/run.yaml: loss.fake_weight must be a number in [0, 1000000] (got 1e+300): a loss weight")
def _(ws):
    return _config(ws, "loss:\n  weighting: targets\n  fake_weight: 1.0e+300\n")


@case("train-lr-times-replicas-beyond-its-domain", "--lr 9 x 2 (--lr-scaling linear, 2 replicas) = 18 must be at most 10")
def _(ws):
    return ["train", "--data", ws.base.graphs, "--out", ws.path("run"), "--mode", "domain", "--ranks", "2", "--domain-size", "1",
            "--lr", "9", "--lr-scaling", "linear", "--hidden", "4", "--iterations", "1", "--no-progress", "--no-curves"]  # fmt: skip


@case("evaluate-timeout-beyond-30-days", "Invalid value for '--timeout': 1e+300 is not in the range (0, 2592000]: seconds, at most 30 days")
def _(ws):
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.base.graphs, "--parts", "2", "--timeout", "1e300", "--quiet"]


@case("verify-timeout-beyond-30-days", "Invalid value for '--timeout': 1e+300 is not in the range (0, 2592000]: seconds, at most 30 days")
def _(ws):
    return ["verify", "--graph", ws.base.graph, "--parts", "2", "--hidden", "4", "--iterations", "1", "--timeout", "1e300"]


@case("partition-hidden-beyond-any-model", "--hidden must be at most 65536 (the widest model train accepts)")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--parts", "2", "--out", ws.path("p"), "--hidden", str(10**30)]


def _noise_truth(rows):
    header = rows[0]
    for row in rows[1:]:
        row[header.index("particle_id")] = "0"
        row[header.index("weight")] = "0"


NOISE = "WS/ev/event000000001-truth.csv: expected hits of positive weight to score the event's tracks by, got a total weight of 0"


@case("evaluate-event-of-noise-hits-only", NOISE)
def _(ws):
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.event("truth", _noise_truth), "--quiet"]


@case("evaluate-graph-with-the-truth-of-noise-hits-only", NOISE)
def _(ws):
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.base.graphs, "--events", ws.event("truth", _noise_truth), "--quiet"]


@case("simulate-out-name-longer-than-the-file-system-allows", "--out " + "s" * 256 + ": expected a file name of at most 255 bytes (the file system's limit), got 256 bytes")
def _(ws):
    return ["simulate", "--out", "s" * 256, "--events", "1", "--particles", "10"]


@case("evaluate-json-name-longer-than-the-file-system-allows", "--json " + "j" * 251 + ".json: expected a file name of at most 255 bytes (the file system's limit), got 256 bytes")
def _(ws):
    return _evaluate(ws, ws.base.model, "--json", "j" * 251 + ".json")


@case("export-out-whose-sidecar-name-is-too-long", "--out " + "e" * 250 + ".pt: expected a name that leaves room for its sidecar")
def _(ws):
    return ["export", "--checkpoint", ws.base.model, "--format", "torchscript", "--out", "e" * 250 + ".pt"]


@case("partition-plot-whose-per-event-names-are-too-long", "--plot " + "q" * 251 + ".png: expected a name that leaves room for the picture of each event")
def _(ws):
    return ["partition", "--graph", ws.base.graphs, "--parts", "2", "--out", ws.path("p"), "--plot", "q" * 251 + ".png"]


@case("train-plans-of-other-events-with-the-same-ids", "--plans WS/plans/event000000001/part_00000.npz (and 1 other part file(s)): expected a part file made from event000000001.npz as given to this run")
def _(ws):
    # Another event numbered 1 (its hits moved): its plan must not be taken for the plan of the event trained on.
    other = ws.graph(lambda a: a.__setitem__("x", a["x"] + np.float32(0.01)), name="other")
    outcome = run_main(["partition", "--graph", other, "--parts", "2", "--out", ws.path("plans", "event000000001")])
    assert outcome.code == 0, outcome.stderr
    return _train_with_plans(ws, ws.path("plans"))


# =============================================================================== the corpus


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Base:
    return make_base(tmp_path_factory.mktemp("hostile-base"))


#: Cases that spawn ranks (seconds each, more on a loaded machine).
SLOW_CASES = {"train-plans-part-file-flipped", "train-plans-manifest-garbage", "train-plans-part-labels-rewritten",
              "train-plans-manifest-deeply-nested", "train-resume-sectors-instead-of-domain"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_CASES else n for n in CASES])
def test_hostile_input_is_refused_cleanly(name, base, tmp_path, monkeypatch):
    ws = Workspace(base, tmp_path / "case")
    ws.tmp.mkdir()
    # Defaults such as `train --out runs/train` land inside the case directory, where they are seen.
    monkeypatch.chdir(ws.tmp)
    argv = CASES[name](ws)
    before, base_before = snapshot(ws.tmp), snapshot(base.root)
    locked = ws.notes.get("denied")
    with denied(locked) if locked is not None else _nothing():
        outcome = run_main(argv)
    after = snapshot(ws.tmp)
    kept = ws.notes.get("kept", {})
    for root, witness in kept.items():
        if witness not in after:
            found_kept = sorted(k for k in after if k not in before)[:5]
            raise AssertionError(f"{name}: the good events' outputs must be kept ({witness} missing; created {found_kept})")
        _readable(ws.tmp / witness)
    # Temporaries inside a kept directory are still leftovers.
    after = {k: v for k, v in after.items()
             if ".tmp" in k or not any(k == root or k.startswith(root + "/") for root in kept)}
    found = problems(outcome, before, after)
    found += wrong_reason(outcome, EXPECT[name], {str(ws.tmp): "WS", str(base.root): "BASE"})
    base_after = snapshot(base.root)
    if base_after != base_before:
        found.append("changed the base inputs")
    assert not found, f"{name}: " + "; ".join(found) + f"\nstderr: {outcome.stderr[-1500:]}"


def _readable(path: Path) -> None:
    """A kept output loads with the reader of its format."""
    import json

    from domainpar.data.graph_files import load_graph
    from domainpar.partition.io import load_part

    if path.suffix == ".json":
        json.loads(path.read_text())
    elif path.name.startswith("part_"):
        load_part(path)
    else:
        load_graph(path)


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_corpus_is_large_and_covers_every_command():
    commands = {name.split("-")[0] for name in CASES}
    assert len(CASES) >= 150, len(CASES)
    assert {"cli", "simulate", "build", "partition", "verify", "train", "evaluate", "export", "score", "demo"} <= commands


#: A few cases again through the real entry point, where the interpreter itself prints warnings and tracebacks.
SUBPROCESS_CASES = ["cli-option-without-value", "build-hits-x-overflows-float32", "evaluate-checkpoint-flipped-bytes",
                    "score-track-id-beyond-int64", "train-option--lr=inf"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_hostile_inputs_through_the_real_entry_point(base, tmp_path):
    import subprocess
    import sys

    for name in SUBPROCESS_CASES:
        ws = Workspace(base, tmp_path / name)
        ws.tmp.mkdir()
        argv = [str(a) for a in CASES[name](ws)]
        before = snapshot(ws.tmp)
        result = subprocess.run([sys.executable, "-m", "domainpar", *argv], capture_output=True, text=True, timeout=240, cwd=ws.tmp)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2, (name, result.stderr[-2000:])
        assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, (name, result.stderr[-2000:])
        assert snapshot(ws.tmp) == before, name


# =============================================================================== issue 28: beyond refusals


def _whole(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_outputs_of_several_files_appear_together_or_leave_the_old_ones_byte_identical(base, tmp_path, monkeypatch):
    import errno
    import os

    monkeypatch.chdir(tmp_path)
    argv = ["evaluate", "--checkpoint", base.model, "--data", base.graphs, "--json", tmp_path / "e.json",
            "--submissions", tmp_path / "subs", "--write-scores", tmp_path / "scores", "--quiet"]  # fmt: skip
    assert run_main(argv).code == 0
    before = _whole(tmp_path)
    blocked = tmp_path / "scores" / "event000000001.npz"  # an immutable file (chattr +i) among the outputs
    real_rename = os.rename

    def rename(src, dst, *args, **kwargs):
        if os.fspath(src) == str(blocked):
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), os.fspath(src), os.fspath(dst))
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", rename)
    outcome = run_main([*argv[:2], base.run / "checkpoints" / sorted(p.name for p in (base.run / "checkpoints").iterdir())[0], *argv[3:]])
    assert outcome.code == 2 and outcome.stderr == f"error: {blocked}: operation not permitted\n", outcome.stderr
    assert _whole(tmp_path) == before  # every output as it was: none replaced, no temporary left


@pytest.mark.parametrize("options", [
    lambda t: ["evaluate", "--data", "BASE_GRAPHS", "--checkpoint", "BASE_MODEL", "--quiet", "--json", "n" * 250 + ".json",
               "--submissions", "s" * 255, "--write-scores", "w" * 255, "--plots", "p" * 255],
    lambda t: ["partition", "--graph", "BASE_GRAPHS", "--parts", "2", "--out", "p" * 255, "--json", "j" * 250 + ".json",
               "--plot", "q" * 241 + ".png"],
    lambda t: ["build", "--input", "BASE_EVENTS", "--out", "b" * 255, "--json", "j" * 250 + ".json", "--quiet"],
    lambda t: ["export", "--checkpoint", "BASE_MODEL", "--format", "torchscript", "--out", "e" * 247 + ".pt"],
], ids=["evaluate", "partition", "build", "export"])  # fmt: skip
def test_output_names_of_255_bytes_are_written(base, tmp_path, monkeypatch, options):
    from hostile_workspace import snapshot

    monkeypatch.chdir(tmp_path)
    argv = [{"BASE_GRAPHS": base.graphs, "BASE_MODEL": base.model, "BASE_EVENTS": base.events}.get(a, a) for a in options(tmp_path)]
    outcome = run_main(argv)
    assert outcome.code == 0 and "Traceback" not in outcome.stderr, outcome.stderr[-2000:]
    names = [p.name for p in tmp_path.iterdir()]
    assert all(len(name.encode()) <= 255 for name in names) and not any(".tmp-" in k for k in snapshot(tmp_path)), names
    written = [a for a in argv if isinstance(a, str) and len(a) >= 245]
    assert all((tmp_path / name).exists() for name in written if not name.endswith(".png")), (written, names)
    assert any(len(name.encode()) == 255 for name in names), names  # the longest legal name was written


def _tear(path: Path, line: int) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[line] = lines[line][: len(lines[line]) // 2]
    path.write_text("".join(lines[: line + 1]) if line == len(lines) - 1 else "".join(lines))


@pytest.mark.parametrize("damage", ["torn-last-metrics-line", "metrics-record-missing", "garbled-first-step-line", "steps-log-deleted"])
def test_a_resume_rebuilds_damaged_logs_from_its_checkpoint(base, tmp_path, damage):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(base.run, run)
    metrics, steps = run / "metrics.jsonl", run / "steps.jsonl"
    original = {"metrics": metrics.read_bytes(), "steps": steps.read_bytes()}
    if damage == "torn-last-metrics-line":
        _tear(metrics, 1)
    elif damage == "metrics-record-missing":
        metrics.write_text(metrics.read_text().splitlines(keepends=True)[0])
    elif damage == "garbled-first-step-line":
        _tear(steps, 0)
    else:
        steps.unlink()
    # The run is finished: the resume trains nothing and reports the figures of the final model (epoch 2).
    outcome = run_main(["train", "--data", base.graphs, "--out", run, *TINY_TRAIN, "--epochs", "2", "--keep", "2", "--resume"])
    assert outcome.code == 0, outcome.stderr
    assert {"metrics": metrics.read_bytes(), "steps": steps.read_bytes()} == original  # rebuilt, byte for byte
    assert "  epoch              2\n" in outcome.stdout, outcome.stdout
    notes = [line for line in outcome.stderr.splitlines() if line.strip()]
    assert len(notes) == 1 and "rebuilt its" in notes[0] and "from the checkpoint" in notes[0], outcome.stderr


def test_a_reindented_sidecar_is_the_same_sidecar(base, tmp_path):
    import json
    import shutil

    target = tmp_path / "exported"
    shutil.copytree(base.exported.parent, target)
    side = target / (base.exported.name + ".json")
    side.write_text(json.dumps(json.loads(side.read_text()), indent=4, sort_keys=True))
    outcome = run_main(["evaluate", "--model", target / base.exported.name, "--data", base.graphs, "--quiet"])
    assert outcome.code == 0, outcome.stderr


def test_the_edge_filter_refuses_a_training_event_without_edges(base, tmp_path):
    from domainpar.errors import DomainparError
    from domainpar.filter.edge_filter import FilterConfig, train_filter

    ws = Workspace(base, tmp_path)
    good, empty = ws.graph(name="a"), ws.graph(_no_edges, name="b")
    with pytest.raises(DomainparError, match=r"/b/event000000001\.npz: expected a graph with edges to train the edge filter on, got one with 0 edges"):
        train_filter([good, empty, good], FilterConfig(steps=1, hidden=4, layers=1))
