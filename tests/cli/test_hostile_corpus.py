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

import gzip
import os
from pathlib import Path

import numpy as np
import pytest

from hostile_workspace import TINY_TRAIN, Base, Workspace, denied, make_base, problems, run_main, snapshot

CASES: dict[str, callable] = {}


def case(name: str):
    """Register ``function(ws) -> argv`` as a corpus case."""

    def register(function):
        assert name not in CASES, name
        CASES[name] = function
        return function

    return register


# =============================================================================== command line (click)


@case("cli-unknown-command")
def _(ws):
    return ["frobnicate"]


@case("cli-unknown-option")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", "1", "--frobnicate"]


@case("cli-missing-required-option")
def _(ws):
    return ["simulate", "--events", "1"]


@case("cli-option-without-value")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--out", ws.path("p"), "--parts"]


@case("cli-int-option-given-text")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--out", ws.path("p"), "--parts", "two"]


@case("cli-int-option-given-float")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", "1.5"]


@case("cli-choice-option-bad")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--out", ws.path("p"), "--parts", "2", "--method", "random"]


@case("cli-extra-argument")
def _(ws):
    return ["score", "--event", ws.base.prefix, "--submission", ws.base.submission, "extra"]


@case("cli-float-option-given-text")
def _(ws):
    return ["train", "--data", ws.base.graphs, "--out", ws.path("r"), "--lr", "fast", *TINY_TRAIN]


@case("cli-bool-flag-given-value")
def _(ws):
    return ["build", "--input", ws.base.events, "--out", ws.path("g"), "--quiet=yes"]


# =============================================================================== simulate


@case("simulate-events-zero")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", "0"]


@case("simulate-events-negative")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", "-3"]


@case("simulate-particles-zero")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", "1", "--particles", "0"]


@case("simulate-particles-absurd")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", "1", "--particles", str(10**13)]


@case("simulate-events-absurd")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", str(10**12), "--particles", "10"]


@case("simulate-seed-negative")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", "1", "--seed", "-1"]


@case("simulate-seed-beyond-64-bits")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", "1", "--particles", "10", "--seed", str(2**80)]


@case("simulate-first-event-id-beyond-9-digits")
def _(ws):
    return ["simulate", "--out", ws.path("o"), "--events", "1", "--particles", "10", "--first-event-id", str(10**12)]


@case("simulate-out-is-file")
def _(ws):
    return ["simulate", "--out", ws.write("file", "x"), "--events", "1", "--particles", "10"]


@case("simulate-out-under-file")
def _(ws):
    return ["simulate", "--out", ws.write("file", "x") / "sub", "--events", "1", "--particles", "10"]


@case("simulate-out-under-unreadable-dir")
def _(ws):
    locked = ws.path("locked")
    locked.mkdir()
    ws.notes["denied"] = locked
    return ["simulate", "--out", locked / "a" / "b", "--events", "1", "--particles", "10"]


@case("simulate-out-unwritable-dir")
def _(ws):
    locked = ws.path("locked")
    locked.mkdir()
    ws.notes["denied"] = locked
    return ["simulate", "--out", locked, "--events", "1", "--particles", "10"]


# =============================================================================== build: TrackML CSVs


def _build(ws, events):
    return ["build", "--input", events, "--out", ws.path("graphs"), "--quiet"]


@case("build-hits-x-nan")
def _(ws):
    return _build(ws, ws.event_cell("hits", "x", "nan"))


@case("build-hits-x-inf")
def _(ws):
    return _build(ws, ws.event_cell("hits", "x", "inf"))


@case("build-hits-x-overflows-float32")
def _(ws):
    return _build(ws, ws.event_cell("hits", "x", "1e40", row=3))


@case("build-hits-z-minus-overflows-float32")
def _(ws):
    return _build(ws, ws.event_cell("hits", "z", "-3.5e38", row=5))


@case("build-hits-x-outside-detector")
def _(ws):
    return _build(ws, ws.event_cell("hits", "x", "1e30", row=2))


@case("build-hits-y-100m")
def _(ws):
    return _build(ws, ws.event_cell("hits", "y", "100000", row=7))


@case("build-hits-all-at-one-point")
def _(ws):
    def edit(rows):
        header = rows[0]
        for row in rows[1:]:
            for column, value in zip(("x", "y", "z"), ("100.0", "0.0", "0.0")):
                row[header.index(column)] = value

    return _build(ws, ws.event("hits", edit))


@case("build-hits-x-text")
def _(ws):
    return _build(ws, ws.event_cell("hits", "x", "abc", row=4))


@case("build-hits-x-empty-field")
def _(ws):
    return _build(ws, ws.event_cell("hits", "x", "", row=4))


@case("build-hits-x-huge-field")
def _(ws):
    return _build(ws, ws.event_cell("hits", "x", "7" * 2_000_000, row=2))


@case("build-hits-x-huge-text-field")
def _(ws):
    return _build(ws, ws.event_cell("hits", "x", "q" * 2_000_000, row=2))


@case("build-hits-hit-id-float-text")
def _(ws):
    return _build(ws, ws.event_cell("hits", "hit_id", "6.5"))


@case("build-hits-hit-id-float-formatted-integer")
def _(ws):
    return _build(ws, ws.event_column("hits", "hit_id", lambda i, old: f"{float(old):.1f}"))


@case("build-hits-hit-id-beyond-int32")
def _(ws):
    return _build(ws, ws.event_cell("hits", "hit_id", str(2**40), row=3))


@case("build-hits-hit-id-negative")
def _(ws):
    return _build(ws, ws.event_cell("hits", "hit_id", "-5", row=3))


@case("build-hits-hit-id-duplicate")
def _(ws):
    def edit(rows):
        rows[2][0] = rows[1][0]

    return _build(ws, ws.event("hits", edit, parts=("hits",)))


@case("build-hits-volume-unknown")
def _(ws):
    return _build(ws, ws.event_cell("hits", "volume_id", "99"))


@case("build-hits-layer-float")
def _(ws):
    return _build(ws, ws.event_cell("hits", "layer_id", "2.5"))


@case("build-hits-volume-beyond-int32")
def _(ws):
    return _build(ws, ws.event_cell("hits", "volume_id", str(2**33)))


@case("build-hits-missing-column")
def _(ws):
    def edit(rows):
        index = rows[0].index("z")
        return [row[:index] + row[index + 1:] for row in rows]

    return _build(ws, ws.event("hits", edit))


@case("build-hits-empty-file")
def _(ws):
    return _build(ws, ws.event("hits", raw=b""))


@case("build-hits-header-only")
def _(ws):
    return _build(ws, ws.event("hits", raw=b"hit_id,x,y,z,volume_id,layer_id,module_id\n"))


@case("build-hits-binary-garbage")
def _(ws):
    return _build(ws, ws.event("hits", raw=bytes(range(256)) * 20))


@case("build-hits-not-utf8")
def _(ws):
    content = (ws.base.events / "event000000001-hits.csv").read_bytes()
    return _build(ws, ws.event("hits", raw=content.replace(b"-76", b"\xff\xfe", 1)))


@case("build-hits-ragged-row")
def _(ws):
    def edit(rows):
        rows[3] = rows[3] + ["1", "2", "3"]

    return _build(ws, ws.event("hits", edit))


@case("build-hits-gz-corrupted")
def _(ws):
    events = ws.event(parts=("cells", "particles", "truth"))
    data = bytearray(gzip.compress((ws.base.events / "event000000001-hits.csv").read_bytes()))
    data[40:60] = b"\0" * 20
    (events / "event000000001-hits.csv.gz").write_bytes(bytes(data))
    return _build(ws, events)


@case("build-hits-gz-truncated")
def _(ws):
    events = ws.event(parts=("cells", "particles", "truth"))
    data = gzip.compress((ws.base.events / "event000000001-hits.csv").read_bytes())
    (events / "event000000001-hits.csv.gz").write_bytes(data[: len(data) // 2])
    return _build(ws, events)


@case("build-hits-both-csv-and-gz")
def _(ws):
    events = ws.event()
    (events / "event000000001-hits.csv.gz").write_bytes(gzip.compress((events / "event000000001-hits.csv").read_bytes()))
    return _build(ws, events)


@case("build-hits-file-missing")
def _(ws):
    return _build(ws, ws.event(parts=("cells", "particles", "truth")))


@case("build-hits-is-directory")
def _(ws):
    events = ws.event(parts=("cells", "particles", "truth"))
    (events / "event000000001-hits.csv").mkdir()
    return _build(ws, events)


@case("build-truth-particle-id-float-above-2p53")
def _(ws):
    return _build(ws, ws.event_column("truth", "particle_id", lambda i, old: f"{int(old):.16e}" if int(old) else old))


@case("build-truth-particle-id-one-float-text")
def _(ws):
    return _build(ws, ws.event_cell("truth", "particle_id", "4.5e17", row=4))


@case("build-truth-particle-id-beyond-int64")
def _(ws):
    return _build(ws, ws.event_cell("truth", "particle_id", "99999999999999999999", row=4))


@case("build-truth-particle-id-text")
def _(ws):
    return _build(ws, ws.event_cell("truth", "particle_id", "muon", row=4))


@case("build-truth-particle-id-negative-float")
def _(ws):
    return _build(ws, ws.event_cell("truth", "particle_id", "-1.5", row=4))


@case("build-truth-hit-id-unknown")
def _(ws):
    return _build(ws, ws.event_cell("truth", "hit_id", "999999", row=2))


@case("build-truth-row-missing")
def _(ws):
    return _build(ws, ws.event("truth", lambda rows: rows[:-1]))


@case("build-truth-weight-nan")
def _(ws):
    return _build(ws, ws.event_cell("truth", "weight", "nan", row=2))


@case("build-truth-weight-negative")
def _(ws):
    return _build(ws, ws.event_cell("truth", "weight", "-0.5", row=2))


@case("build-truth-tpx-overflows-float32")
def _(ws):
    return _build(ws, ws.event_cell("truth", "tpx", "5e38", row=2))


@case("build-truth-missing-column")
def _(ws):
    def edit(rows):
        index = rows[0].index("particle_id")
        return [row[:index] + row[index + 1:] for row in rows]

    return _build(ws, ws.event("truth", edit))


@case("build-particles-px-inf")
def _(ws):
    return _build(ws, ws.event_cell("particles", "px", "-inf", row=2))


@case("build-particles-px-overflows-float32")
def _(ws):
    return _build(ws, ws.event_cell("particles", "px", "1e39", row=2))


@case("build-particles-id-float-text")
def _(ws):
    return _build(ws, ws.event_column("particles", "particle_id", lambda i, old: f"{int(old):.6e}"))


@case("build-particles-duplicate-id")
def _(ws):
    def edit(rows):
        rows[2][0] = rows[1][0]

    return _build(ws, ws.event("particles", edit))


@case("build-particles-vz-nan")
def _(ws):
    return _build(ws, ws.event_cell("particles", "vz", "NaN", row=3))


@case("build-particles-q-float")
def _(ws):
    return _build(ws, ws.event_cell("particles", "q", "0.5", row=3))


@case("build-cells-value-nan-with-cell-features")
def _(ws):
    return _build(ws, ws.event_cell("cells", "value", "nan", row=2)) + ["--cell-features"]


@case("build-cells-hit-id-unknown-with-cell-features")
def _(ws):
    return _build(ws, ws.event_cell("cells", "hit_id", "123456789", row=2)) + ["--cell-features"]


@case("build-cells-missing-with-cell-features")
def _(ws):
    return _build(ws, ws.event(parts=("hits", "particles", "truth"))) + ["--cell-features"]


@case("build-cells-value-overflows-float32")
def _(ws):
    return _build(ws, ws.event_cell("cells", "value", "1e300", row=2)) + ["--cell-features"]


@case("build-input-missing")
def _(ws):
    return _build(ws, ws.path("nowhere"))


@case("build-input-empty-dir")
def _(ws):
    ws.path("empty").mkdir()
    return _build(ws, ws.path("empty"))


@case("build-phi-slope-nan")
def _(ws):
    return _build(ws, ws.base.events) + ["--phi-slope-max", "nan"]


@case("build-z0-max-inf")
def _(ws):
    return _build(ws, ws.base.events) + ["--z0-max", "inf"]


@case("build-deta-negative")
def _(ws):
    return _build(ws, ws.base.events) + ["--deta-max", "-0.1"]


@case("build-min-pt-nan")
def _(ws):
    return _build(ws, ws.base.events) + ["--min-pt", "nan"]


@case("build-min-pt-inf")
def _(ws):
    return _build(ws, ws.base.events) + ["--min-pt", "inf"]


@case("build-crossing-margin-negative")
def _(ws):
    return _build(ws, ws.base.events) + ["--crossing-margin", "-1"]


@case("build-min-pt-without-truth")
def _(ws):
    return _build(ws, ws.event(parts=("hits",))) + ["--min-pt", "1"]


@case("build-out-is-file")
def _(ws):
    return ["build", "--input", ws.base.events, "--out", ws.write("file", "x"), "--quiet"]


@case("build-out-under-unreadable-dir")
def _(ws):
    locked = ws.path("locked")
    locked.mkdir()
    ws.notes["denied"] = locked
    return ["build", "--input", ws.base.events, "--out", locked / "g", "--quiet"]


@case("build-json-is-directory")
def _(ws):
    ws.path("d").mkdir()
    return _build(ws, ws.base.events) + ["--json", ws.path("d")]


@case("build-second-event-bad")
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

for _command, _names in GRAPH_MUTATIONS_BY_COMMAND.items():
    for _name in _names:

        def _make(ws, command=_command, name=_name):
            return GRAPH_COMMANDS[command](ws, ws.graph(_graph_mutations()[name]))

        case(f"{_command}-graph-{_name}")(_make)


@case("partition-graph-truncated-zip")
def _(ws):
    return GRAPH_COMMANDS["partition"](ws, ws.graph(raw=ws.base.graph.read_bytes()[:500]))


@case("partition-graph-empty-file")
def _(ws):
    return GRAPH_COMMANDS["partition"](ws, ws.graph(raw=b""))


@case("partition-graph-text-file")
def _(ws):
    return GRAPH_COMMANDS["partition"](ws, ws.graph(raw=b"hello\n"))


@case("partition-graph-pickle")
def _(ws):
    import pickle

    return GRAPH_COMMANDS["partition"](ws, ws.graph(raw=pickle.dumps({"x": 1})))


@case("train-graph-truncated-zip")
def _(ws):
    return GRAPH_COMMANDS["train"](ws, ws.graph(raw=ws.base.graph.read_bytes()[:-200]))


@case("evaluate-graph-truncated-zip")
def _(ws):
    return GRAPH_COMMANDS["evaluate"](ws, ws.graph(raw=ws.base.graph.read_bytes()[:-200]))


@case("verify-graph-truncated-zip")
def _(ws):
    return GRAPH_COMMANDS["verify"](ws, ws.graph(raw=ws.base.graph.read_bytes()[:-200]))


@case("partition-graph-dir-empty")
def _(ws):
    ws.path("nog").mkdir()
    return ["partition", "--graph", ws.path("nog"), "--parts", "2", "--out", ws.path("plans")]


@case("partition-parts-zero")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--parts", "0", "--out", ws.path("plans")]


@case("partition-parts-negative")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--parts", "-2", "--out", ws.path("plans")]


@case("partition-parts-absurd")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--parts", str(10**15), "--out", ws.path("plans")]


@case("partition-hidden-zero")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--parts", "2", "--out", ws.path("plans"), "--hidden", "0"]


@case("partition-seed-negative")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--parts", "2", "--out", ws.path("plans"), "--seed", "-4"]


@case("partition-seed-beyond-64-bits")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--parts", "2", "--out", ws.path("plans"), "--seed", str(2**70)]


@case("partition-plot-wrong-suffix")
def _(ws):
    return ["partition", "--graph", ws.base.graph, "--parts", "2", "--out", ws.path("plans"), "--plot", ws.path("p.jpg")]


@case("partition-out-under-unreadable-dir")
def _(ws):
    locked = ws.path("locked")
    locked.mkdir()
    ws.notes["denied"] = locked
    return ["partition", "--graph", ws.base.graph, "--parts", "2", "--out", locked / "plans"]


@case("partition-dir-second-graph-nan")
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


@case("evaluate-dir-second-graph-nan")
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


@case("train-plans-part-file-flipped")
def _(ws):
    plans = _plans_copy(ws)
    part = sorted(plans.rglob("part_00001.npz"))[0]
    data = bytearray(part.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 16):
        data[i] ^= 0xFF
    part.write_bytes(bytes(data))
    return _train_with_plans(ws, plans)


@case("train-plans-manifest-garbage")
def _(ws):
    plans = _plans_copy(ws)
    sorted(plans.rglob("manifest.json"))[0].write_text('{"format_version": 1, "num_parts": "two"')
    return _train_with_plans(ws, plans)


# =============================================================================== verify options


@case("verify-parts-zero")
def _(ws):
    return ["verify", "--graph", ws.base.graph, "--parts", "0"]


@case("verify-timeout-inf")
def _(ws):
    return ["verify", "--graph", ws.base.graph, "--parts", "2", "--timeout", "inf"]


@case("verify-timeout-nan")
def _(ws):
    return ["verify", "--graph", ws.base.graph, "--parts", "2", "--timeout", "nan"]


@case("verify-iterations-negative")
def _(ws):
    return ["verify", "--graph", ws.base.graph, "--parts", "2", "--iterations", "-1"]


@case("verify-hidden-absurd")
def _(ws):
    return ["verify", "--graph", ws.base.graph, "--parts", "1", "--hidden", str(10**9)]


@case("verify-unlabelled-graph")
def _(ws):
    return ["verify", "--graph", sorted(ws.base.unlabelled.glob("*.npz"))[0], "--parts", "2"]


@case("verify-graph-missing")
def _(ws):
    return ["verify", "--graph", ws.path("none.npz"), "--parts", "2"]


@case("verify-json-is-directory")
def _(ws):
    ws.path("d").mkdir()
    return ["verify", "--graph", ws.base.graph, "--parts", "2", "--json", ws.path("d")]


@case("verify-parts-above-nodes")
def _(ws):
    return ["verify", "--graph", ws.base.graph, "--parts", "100000", "--hidden", "4", "--iterations", "1"]


# =============================================================================== train: options and configs


def _train(ws, *extra):
    return ["train", "--data", ws.base.graphs, "--out", ws.path("run"), *TINY_TRAIN, *extra]


for _flag, _value in [
    ("--lr", "inf"), ("--lr", "nan"), ("--lr", "0"), ("--lr", "-0.1"), ("--timeout", "inf"), ("--timeout", "nan"),
    ("--timeout", "0"), ("--epochs", "0"), ("--epochs", "-1"), ("--hidden", "0"), ("--hidden", str(10**9)),
    ("--iterations", "-1"), ("--batch-events", "0"), ("--threads", "0"), ("--threads", "-2"), ("--keep", "0"),
    ("--threshold", "1.5"), ("--threshold", "nan"), ("--clip", "-1"), ("--clip", "inf"), ("--weight-decay", "nan"),
    ("--pos-weight", "inf"), ("--warmup", "-1"), ("--max-steps", "0"), ("--mode", "bogus"), ("--precision", "fp8"),
    ("--device", "tpu"), ("--method", "random"), ("--schedule", "linear"), ("--lr-scaling", "cubic"),
    ("--ranks", "0"), ("--domain-size", "0"), ("--cache-events", "-1"), ("--checkpoint-every", "-5"),
    ("--seed", "-1"), ("--seed", str(2**70)), ("--activation", "softmax"), ("--weight-decay", "-1"), ("--threads", "100000"),
    ("--mlp-layers", "0"), ("--batch-events", str(10**12)),
]:  # fmt: skip

    def _make(ws, flag=_flag, value=_value):
        return _train(ws, flag, value)

    case(f"train-option{_flag}={_value}")(_make)


def _config(ws, text: str | bytes):
    return ["train", "--config", ws.write("run.yaml", text), "--data", ws.base.graphs, "--out", ws.path("run"), *TINY_TRAIN]


@case("train-config-not-utf8")
def _(ws):
    return _config(ws, b"optim:\n  lr: 0.001\n# caf\xe9 \xff\xfe\n")


@case("train-config-binary")
def _(ws):
    return _config(ws, bytes(range(256)))


@case("train-config-not-yaml")
def _(ws):
    return _config(ws, "optim: [lr: 1\n  - :\n")


@case("train-config-a-list")
def _(ws):
    return _config(ws, "- 1\n- 2\n")


@case("train-config-section-scalar")
def _(ws):
    return _config(ws, "optim: 3\n")


@case("train-config-unknown-section")
def _(ws):
    return _config(ws, "optimizer:\n  lr: 0.1\n")


@case("train-config-unknown-key")
def _(ws):
    return _config(ws, "optim:\n  learning_rate: 0.1\n")


@case("train-config-lr-yaml-inf")
def _(ws):
    return _config(ws, "optim:\n  lr: .inf\n")


@case("train-config-lr-text-inf")
def _(ws):
    return _config(ws, "optim:\n  lr: 'inf'\n")


@case("train-config-lr-list")
def _(ws):
    return _config(ws, "optim:\n  lr: [1, 2]\n")


@case("train-config-hidden-float")
def _(ws):
    return _config(ws, "model:\n  hidden: 4.5\n")


@case("train-config-hidden-bool")
def _(ws):
    return _config(ws, "model:\n  hidden: true\n")


@case("train-config-epochs-huge-int")
def _(ws):
    return _config(ws, f"run:\n  epochs: {10**30}\n")


@case("train-config-timeout-nan")
def _(ws):
    return _config(ws, "parallel:\n  timeout_s: .nan\n")


@case("train-config-out-a-mapping")
def _(ws):
    return _config(ws, "data:\n  method: {a: 1}\n")


@case("train-config-seed-float-huge")
def _(ws):
    return _config(ws, "run:\n  seed: 1.0e+30\n")


@case("train-config-huge-value-echo")
def _(ws):
    return _config(ws, "model:\n  activation: '" + "x" * 3_000_000 + "'\n")


@case("train-config-missing-file")
def _(ws):
    return ["train", "--config", ws.path("none.yaml"), "--data", ws.base.graphs, "--out", ws.path("run"), *TINY_TRAIN]


@case("train-config-is-directory")
def _(ws):
    ws.path("conf").mkdir()
    return ["train", "--config", ws.path("conf"), "--data", ws.base.graphs, "--out", ws.path("run"), *TINY_TRAIN]


@case("train-config-yaml-anchor-bomb")
def _(ws):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return _config(ws, "\n".join(lines) + "\n")


@case("train-data-missing")
def _(ws):
    return ["train", "--data", ws.path("nowhere"), "--out", ws.path("run"), *TINY_TRAIN]


@case("train-data-empty-dir")
def _(ws):
    ws.path("empty").mkdir()
    return ["train", "--data", ws.path("empty"), "--out", ws.path("run"), *TINY_TRAIN]


@case("train-data-unlabelled")
def _(ws):
    return ["train", "--data", ws.base.unlabelled, "--out", ws.path("run"), *TINY_TRAIN]


@case("train-val-missing")
def _(ws):
    return _train(ws, "--val", ws.path("nowhere"))


@case("train-plans-not-a-plan-dir")
def _(ws):
    ws.path("plans").mkdir()
    return ["train", "--data", ws.base.graphs, "--out", ws.path("run"), "--plans", ws.path("plans"), "--mode", "domain",
            "--ranks", "2", "--hidden", "4", "--iterations", "1", "--epochs", "1", "--no-progress"]  # fmt: skip


@case("train-raw-events-hit-x-overflow")
def _(ws):
    return ["train", "--data", ws.event_cell("hits", "x", "1e40", row=3), "--out", ws.path("run"), *TINY_TRAIN]


@case("train-raw-events-particle-id-float")
def _(ws):
    return ["train", "--data", ws.event_cell("truth", "particle_id", "4.5e17", row=3), "--out", ws.path("run"), *TINY_TRAIN]


@case("train-out-is-file")
def _(ws):
    return ["train", "--data", ws.base.graphs, "--out", ws.write("file", "x"), *TINY_TRAIN]


@case("train-out-under-unreadable-dir")
def _(ws):
    locked = ws.path("locked")
    locked.mkdir()
    ws.notes["denied"] = locked
    return ["train", "--data", ws.base.graphs, "--out", locked / "run", *TINY_TRAIN]


@case("train-out-unwritable")
def _(ws):
    locked = ws.path("locked")
    locked.mkdir()
    ws.notes["denied"] = locked
    return ["train", "--data", ws.base.graphs, "--out", locked, *TINY_TRAIN]


@case("train-out-holds-checkpoints-without-resume")
def _(ws):
    return ["train", "--data", ws.base.graphs, "--out", ws.run_copy(), *TINY_TRAIN]


# =============================================================================== train: checkpoints to resume from


def _resume_from(ws, checkpoint):
    return ["train", "--data", ws.base.graphs, "--out", ws.path("run2"), *TINY_TRAIN, "--epochs", "3", "--resume-from", checkpoint]


@case("train-resume-from-flipped-bytes")
def _(ws):
    return _resume_from(ws, ws.flipped(ws.base.checkpoints[-1]))


@case("train-resume-from-flipped-bytes-anywhere")
def _(ws):
    return _resume_from(ws, ws.flipped(ws.base.checkpoints[-1], count=16, region="any", seed=3))


@case("train-resume-from-truncated")
def _(ws):
    data = ws.base.checkpoints[-1].read_bytes()
    return _resume_from(ws, ws.write("trunc.pt", data[: len(data) // 2]))


@case("train-resume-from-step-text")
def _(ws):
    return _resume_from(ws, ws.checkpoint(lambda s: s.__setitem__("step", "two"), source=ws.base.checkpoints[-1]))


@case("train-resume-from-step-negative")
def _(ws):
    return _resume_from(ws, ws.checkpoint(lambda s: s.__setitem__("step", -4), source=ws.base.checkpoints[-1]))


@case("train-resume-from-epoch-float")
def _(ws):
    return _resume_from(ws, ws.checkpoint(lambda s: s.__setitem__("epoch", 1.5), source=ws.base.checkpoints[-1]))


@case("train-resume-from-missing-optimizer")
def _(ws):
    return _resume_from(ws, ws.checkpoint(lambda s: s.pop("optimizer"), source=ws.base.checkpoints[-1]))


@case("train-resume-from-optimizer-garbage")
def _(ws):
    return _resume_from(ws, ws.checkpoint(lambda s: s.__setitem__("optimizer", {"state": 3, "param_groups": "x"}),
                                          source=ws.base.checkpoints[-1]))  # fmt: skip


@case("train-resume-from-config-garbage")
def _(ws):
    return _resume_from(ws, ws.checkpoint(lambda s: s.__setitem__("config", {"optim": "fast"}), source=ws.base.checkpoints[-1]))


@case("train-resume-from-rng-garbage")
def _(ws):
    return _resume_from(ws, ws.checkpoint(lambda s: s.__setitem__("rng", {"torch": "seed"}), source=ws.base.checkpoints[-1]))


@case("train-resume-from-model-weights-nan-typed")
def _(ws):
    def edit(state):
        name = next(iter(state["model"]))
        state["model"][name] = state["model"][name].to(dtype=__import__("torch").int32)

    return _resume_from(ws, ws.checkpoint(edit, source=ws.base.checkpoints[-1]))


@case("train-resume-from-epoch-state-empty")
def _(ws):
    return _resume_from(ws, ws.checkpoint(lambda s: s.__setitem__("epoch_state", {}), source=ws.base.checkpoints[-1]))


@case("train-resume-from-optimizer-moment-wrong-shape")
def _(ws):
    import torch

    def edit(state):
        moments = next(iter(state["optimizer"]["state"].values()))
        moments["exp_avg"] = torch.zeros(3, 3, 3)

    return _resume_from(ws, ws.checkpoint(edit, source=ws.base.checkpoints[-1]))


@case("train-resume-from-rng-torch-state-short")
def _(ws):
    import torch

    def edit(state):
        state["rng"]["torch"] = torch.zeros(10, dtype=torch.uint8)

    return _resume_from(ws, ws.checkpoint(edit, source=ws.base.checkpoints[-1]))


@case("train-resume-from-model-pt")
def _(ws):
    return _resume_from(ws, ws.base.model)


@case("train-resume-from-a-list")
def _(ws):
    import torch

    path = ws.path("list.pt")
    torch.save([1, 2, 3], path)
    return _resume_from(ws, path)


@case("train-resume-from-other-model-size")
def _(ws):
    return ["train", "--data", ws.base.graphs, "--out", ws.path("run2"), *TINY_TRAIN, "--hidden", "8", "--epochs", "3",
            "--resume-from", ws.base.checkpoints[-1]]  # fmt: skip


@case("train-resume-from-missing")
def _(ws):
    return _resume_from(ws, ws.path("nope.pt"))


@case("train-resume-from-directory")
def _(ws):
    ws.path("d.pt").mkdir()
    return _resume_from(ws, ws.path("d.pt"))


@case("train-resume-newest-flipped")
def _(ws):
    run = ws.run_copy()
    newest = sorted((run / "checkpoints").glob("step-*.pt"))[-1]
    flipped = ws.flipped(newest, name="tmpflip.pt")
    newest.write_bytes(flipped.read_bytes())
    flipped.unlink()
    return ["train", "--data", ws.base.graphs, "--out", run, *TINY_TRAIN, "--epochs", "3", "--resume"]


@case("train-resume-newest-step-text")
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


@case("evaluate-checkpoint-flipped-bytes")
def _(ws):
    return _evaluate(ws, ws.flipped(ws.base.model))


@case("evaluate-step-checkpoint-flipped-bytes")
def _(ws):
    return _evaluate(ws, ws.flipped(ws.base.checkpoints[-1], seed=5))


@case("evaluate-checkpoint-truncated")
def _(ws):
    data = ws.base.model.read_bytes()
    return _evaluate(ws, ws.write("t.pt", data[: len(data) - 100]))


@case("evaluate-checkpoint-junk")
def _(ws):
    return _evaluate(ws, ws.write("j.pt", b"junk\n"))


@case("evaluate-checkpoint-step-text")
def _(ws):
    return _evaluate(ws, ws.checkpoint(lambda s: s.__setitem__("step", "ten")))


@case("evaluate-checkpoint-model-config-hidden-text")
def _(ws):
    return _evaluate(ws, ws.checkpoint(lambda s: s["model_config"].__setitem__("hidden", "4")))


@case("evaluate-checkpoint-model-config-unknown-key")
def _(ws):
    return _evaluate(ws, ws.checkpoint(lambda s: s["model_config"].__setitem__("depth", 3)))


@case("evaluate-checkpoint-model-config-a-list")
def _(ws):
    return _evaluate(ws, ws.checkpoint(lambda s: s.__setitem__("model_config", [4, 1])))


@case("evaluate-checkpoint-model-a-list")
def _(ws):
    return _evaluate(ws, ws.checkpoint(lambda s: s.__setitem__("model", [1, 2])))


@case("evaluate-checkpoint-weights-text-key")
def _(ws):
    return _evaluate(ws, ws.checkpoint(lambda s: s["model"].__setitem__(next(iter(s["model"])), "weights")))


@case("evaluate-checkpoint-threshold-text")
def _(ws):
    return _evaluate(ws, ws.checkpoint(lambda s: s["config"]["run"].__setitem__("threshold", "high")))


@case("evaluate-checkpoint-format-version-text")
def _(ws):
    return _evaluate(ws, ws.checkpoint(lambda s: s.__setitem__("format_version", "1")))


@case("evaluate-checkpoint-raw-pickle")
def _(ws):
    import pickle

    return _evaluate(ws, ws.write("p.pt", pickle.dumps({"model": {"w": [1.0]}}, protocol=5)))


@case("evaluate-checkpoint-is-directory")
def _(ws):
    ws.path("c.pt").mkdir()
    return _evaluate(ws, ws.path("c.pt"))


@case("evaluate-parts-zero")
def _(ws):
    return _evaluate(ws, ws.base.model, "--parts", "0")


@case("evaluate-parts-negative")
def _(ws):
    return _evaluate(ws, ws.base.model, "--parts", "-1")


@case("evaluate-ranks-differ-from-parts")
def _(ws):
    return _evaluate(ws, ws.base.model, "--parts", "2", "--ranks", "3")


@case("evaluate-threshold-nan")
def _(ws):
    return _evaluate(ws, ws.base.model, "--threshold", "nan")


@case("evaluate-threshold-one")
def _(ws):
    return _evaluate(ws, ws.base.model, "--threshold", "1")


@case("evaluate-timeout-inf")
def _(ws):
    return _evaluate(ws, ws.base.model, "--timeout", "inf")


@case("evaluate-timeout-nan")
def _(ws):
    return _evaluate(ws, ws.base.model, "--timeout", "nan")


@case("evaluate-seed-negative")
def _(ws):
    return _evaluate(ws, ws.base.model, "--seed", "-1")


@case("evaluate-data-missing")
def _(ws):
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.path("nowhere"), "--quiet"]


@case("evaluate-data-unlabelled-graph")
def _(ws):
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.base.unlabelled, "--quiet"]


@case("evaluate-raw-events-x-overflow")
def _(ws):
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.event_cell("hits", "x", "1e40", row=3), "--quiet"]


@case("evaluate-raw-events-particle-id-float")
def _(ws):
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.event_cell("truth", "particle_id", "4.5e17", row=3),
            "--quiet"]  # fmt: skip


@case("evaluate-events-dir-bad-truth")
def _(ws):
    return _evaluate(ws, ws.base.model, "--events", ws.event_cell("truth", "weight", "inf", row=3))


@case("evaluate-json-is-directory")
def _(ws):
    ws.path("d").mkdir()
    return _evaluate(ws, ws.base.model, "--json", ws.path("d"))


@case("evaluate-submissions-under-file")
def _(ws):
    return _evaluate(ws, ws.base.model, "--submissions", ws.write("f", "x") / "subs")


@case("evaluate-plots-under-unreadable-dir")
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


@case("score-track-id-beyond-int64")
def _(ws):
    return _score(ws, _submission(ws, lambda rows: [rows[0]] + [[r[0], "9" * 20 + r[1].lstrip("-")] for r in rows[1:]]))


@case("score-track-id-one-beyond-int64")
def _(ws):
    return _score(ws, _submission(ws, _set(3, "track_id", "18446744073709551617")))


@case("score-track-id-float-above-2p53")
def _(ws):
    return _score(ws, _submission(ws, lambda rows: [rows[0]] + [[r[0], f"{int(r[1]):.6e}"] for r in rows[1:]]))


@case("score-track-id-float-formatted-integer")
def _(ws):
    return _score(ws, _submission(ws, _set(2, "track_id", "12.0")))


@case("score-track-id-fraction")
def _(ws):
    return _score(ws, _submission(ws, _set(2, "track_id", "1.5")))


@case("score-track-id-nan")
def _(ws):
    return _score(ws, _submission(ws, _set(2, "track_id", "nan")))


@case("score-track-id-empty")
def _(ws):
    return _score(ws, _submission(ws, _set(2, "track_id", "")))


@case("score-track-id-text")
def _(ws):
    return _score(ws, _submission(ws, _set(2, "track_id", "track7")))


@case("score-track-id-huge-field")
def _(ws):
    return _score(ws, _submission(ws, _set(2, "track_id", "x" * 3_000_000)))


@case("score-hit-id-float")
def _(ws):
    return _score(ws, _submission(ws, _set(2, "hit_id", "6.5")))


@case("score-hit-id-duplicate")
def _(ws):
    def edit(rows):
        rows[2][0] = rows[1][0]

    return _score(ws, _submission(ws, edit))


@case("score-hit-id-unknown")
def _(ws):
    return _score(ws, _submission(ws, _set(2, "hit_id", "987654321")))


@case("score-hit-missing")
def _(ws):
    return _score(ws, _submission(ws, lambda rows: rows[:-3]))


@case("score-missing-column")
def _(ws):
    return _score(ws, _submission(ws, lambda rows: [[r[0]] for r in rows]))


@case("score-empty-file")
def _(ws):
    return _score(ws, _submission(ws, raw=b""))


@case("score-header-only")
def _(ws):
    return _score(ws, _submission(ws, raw=b"hit_id,track_id\n"))


@case("score-binary-garbage")
def _(ws):
    return _score(ws, _submission(ws, raw=bytes(range(256)) * 10))


@case("score-not-utf8")
def _(ws):
    return _score(ws, _submission(ws, raw=ws.base.submission.read_bytes().replace(b"track_id", b"track\xff_id")))


@case("score-event-id-wrong")
def _(ws):
    return _score(ws, _submission(ws, lambda rows: [["event_id"] + rows[0]] + [["9"] + r for r in rows[1:]]))


@case("score-event-id-text")
def _(ws):
    return _score(ws, _submission(ws, lambda rows: [["event_id"] + rows[0]] + [["one"] + r for r in rows[1:]]))


@case("score-submission-missing")
def _(ws):
    return _score(ws, ws.path("none.csv"))


@case("score-submission-directory")
def _(ws):
    ws.path("s.csv").mkdir()
    return _score(ws, ws.path("s.csv"))


@case("score-event-missing")
def _(ws):
    return _score(ws, ws.base.submission, event=ws.path("event000000001"))


@case("score-truth-particle-id-float-above-2p53")
def _(ws):
    events = ws.event_column("truth", "particle_id", lambda i, old: f"{int(old):.16e}" if int(old) else old)
    return _score(ws, ws.base.submission, event=events / "event000000001")


@case("score-truth-weight-nan")
def _(ws):
    return _score(ws, ws.base.submission, event=ws.event_cell("truth", "weight", "nan", row=2) / "event000000001")


@case("score-truth-all-weights-zero")
def _(ws):
    return _score(ws, ws.base.submission, event=ws.event_column("truth", "weight", lambda i, old: "0") / "event000000001")


@case("score-truth-hit-id-duplicate")
def _(ws):
    def edit(rows):
        rows[2][0] = rows[1][0]

    return _score(ws, ws.base.submission, event=ws.event("truth", edit) / "event000000001")


@case("score-event-without-truth")
def _(ws):
    return _score(ws, ws.base.submission, event=ws.event(parts=("hits", "cells", "particles")) / "event000000001")


# =============================================================================== export


def _export(ws, checkpoint, *extra, fmt="torchscript", out=None):
    return ["export", "--checkpoint", checkpoint, "--format", fmt, "--out", out or ws.path("model.pt"), *extra]


@case("export-checkpoint-flipped-bytes")
def _(ws):
    return _export(ws, ws.flipped(ws.base.model))


@case("export-step-checkpoint-flipped-bytes")
def _(ws):
    return _export(ws, ws.flipped(ws.base.checkpoints[-1], seed=11), fmt="onnx", out=ws.path("m.onnx"))


@case("export-checkpoint-truncated")
def _(ws):
    data = ws.base.model.read_bytes()
    return _export(ws, ws.write("t.pt", data[: len(data) // 2]))


@case("export-checkpoint-junk")
def _(ws):
    return _export(ws, ws.write("j.pt", b"\x00" * 64))


@case("export-checkpoint-missing")
def _(ws):
    return _export(ws, ws.path("none.pt"))


@case("export-checkpoint-step-text")
def _(ws):
    return _export(ws, ws.checkpoint(lambda s: s.__setitem__("step", "ten")))


@case("export-checkpoint-model-config-unknown-key")
def _(ws):
    return _export(ws, ws.checkpoint(lambda s: s["model_config"].__setitem__("depth", 3)))


@case("export-checkpoint-weights-int")
def _(ws):
    return _export(ws, ws.checkpoint(lambda s: s["model"].__setitem__(next(iter(s["model"])), s["model"][next(iter(s["model"]))].int())))


@case("export-checkpoint-without-checksum")
def _(ws):
    return _export(ws, ws.checkpoint(lambda s: s.pop("sha256", None), reseal=False))


@case("export-format-bogus")
def _(ws):
    return _export(ws, ws.base.model, fmt="tensorflow")


@case("export-out-is-directory")
def _(ws):
    ws.path("d.pt").mkdir()
    return _export(ws, ws.base.model, out=ws.path("d.pt"))


@case("export-out-under-file")
def _(ws):
    return _export(ws, ws.base.model, out=ws.write("f", "x") / "model.pt")


@case("export-out-under-unreadable-dir")
def _(ws):
    locked = ws.path("locked")
    locked.mkdir()
    ws.notes["denied"] = locked
    return _export(ws, ws.base.model, out=locked / "m.pt")


@case("export-threshold-nan")
def _(ws):
    return _export(ws, ws.base.model, "--threshold", "nan")


@case("export-threshold-above-one")
def _(ws):
    return _export(ws, ws.base.model, "--threshold", "1.5")


@case("export-check-graph-nan")
def _(ws):
    return _export(ws, ws.base.model, "--check-graph", ws.graph(lambda a: a["x"].__setitem__((1, 1), np.nan)))


@case("export-check-graph-format-version-text")
def _(ws):
    return _export(ws, ws.base.model, "--check-graph", ws.graph(lambda a: a.__setitem__("format_version", np.array("1"))))


@case("export-check-graph-missing")
def _(ws):
    return _export(ws, ws.base.model, "--check-graph", ws.path("none.npz"))


@case("export-graphs-missing")
def _(ws):
    return _export(ws, ws.base.model, "--graphs", ws.path("nowhere"))


# =============================================================================== PyG graph files (Exa.TrkX/acorn layout)


@case("train-pyg-file-arbitrary-pickle")
def _(ws):
    import pickle

    ws.write("pyg/event000000001.pyg", pickle.dumps({"x": 1}))
    return ["train", "--data", ws.path("pyg"), "--out", ws.path("run"), *TINY_TRAIN]


@case("evaluate-pyg-file-truncated")
def _(ws):
    import torch

    torch.save({"x": torch.zeros(3, 3), "edge_index": torch.zeros(2, 2, dtype=torch.long)}, ws.path("whole.pt"))
    ws.write("pyg/event000000001.pyg", ws.path("whole.pt").read_bytes()[:100])
    ws.path("whole.pt").unlink()
    return ["evaluate", "--checkpoint", ws.base.model, "--data", ws.path("pyg"), "--quiet"]


@case("verify-pyg-file-tensors-of-wrong-kind")
def _(ws):
    import torch

    path = ws.path("pyg") / "event000000001.pyg"
    path.parent.mkdir()
    torch.save({"x": torch.full((4, 3), float("nan")), "edge_index": torch.tensor([[0.5], [1.0]]), "y": torch.ones(1)}, path)
    return ["verify", "--graph", path, "--parts", "2", "--hidden", "4", "--iterations", "1"]


# =============================================================================== demo


for _flag, _value in [
    ("--events", "0"), ("--val-events", "-1"), ("--ranks", "0"), ("--epochs", "0"), ("--particles", "5"),
    ("--hidden", "0"), ("--iterations", "-1"), ("--seed", "-1"), ("--particles", str(10**12)), ("--ranks", "100000"),
    ("--hidden", str(10**9)),
]:  # fmt: skip

    def _make(ws, flag=_flag, value=_value):
        return ["demo", "--out", ws.path("demo"), flag, value]

    case(f"demo-option{_flag}={_value}")(_make)


@case("demo-out-is-file")
def _(ws):
    return ["demo", "--out", ws.write("file", "x")]


@case("demo-out-under-unreadable-dir")
def _(ws):
    locked = ws.path("locked")
    locked.mkdir()
    ws.notes["denied"] = locked
    return ["demo", "--out", locked / "demo"]


@case("demo-real-dir-bad-event")
def _(ws):
    return ["demo", "--out", ws.path("demo"), "--real", ws.event_cell("hits", "x", "1e40", row=3), "--events", "1",
            "--particles", "10", "--epochs", "1"]  # fmt: skip


# =============================================================================== the corpus


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Base:
    return make_base(tmp_path_factory.mktemp("hostile-base"))


#: Cases that spawn ranks (seconds each, more on a loaded machine).
SLOW_CASES = {"train-plans-part-file-flipped", "train-plans-manifest-garbage"}


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
