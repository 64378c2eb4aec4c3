"""Property-based fuzzing of every input format: hostile CSVs, graph files, configs and submissions.

Each property generates inputs that are wrong by construction (a field that is
not an integer where ids live, a non-finite or float32-overflowing number, a
column dropped, a file cut short, an array of another dtype or shape, a
config value of another type) and asserts the standard: exit status 2, one
``error:`` line, no traceback, no warning, nothing written. Byte-level
mutations, which may leave a file valid, assert the weaker "either a complete
success or exactly that refusal". Everything runs in-process
(``hostile_workspace.run_main``), so a few hundred examples take seconds.
"""

from __future__ import annotations

import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostile_workspace import EVENT_NAME, PARTS, TINY_TRAIN, Workspace, make_base, problems, run_main, snapshot

FUZZ = settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))

INTEGER_COLUMNS = {
    "hits": ["hit_id", "volume_id", "layer_id", "module_id"],
    "particles": ["particle_id", "q", "nhits"],
    "truth": ["hit_id", "particle_id"],
}
FLOAT_COLUMNS = {
    "hits": ["x", "y", "z"],
    "particles": ["vx", "vy", "vz", "px", "py", "pz"],
    "truth": ["tx", "ty", "tz", "tpx", "tpy", "tpz", "weight"],
}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return make_base(tmp_path_factory.mktemp("fuzz-base"))


@contextmanager
def workspace(base):
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        yield Workspace(base, Path(tmp))


def assert_refused(argv, ws, allow_success=False):
    before = snapshot(ws.tmp)
    outcome = run_main(argv)
    if allow_success and outcome.code == 0 and outcome.traceback is None:
        return outcome
    found = problems(outcome, before, snapshot(ws.tmp))
    assert not found, "; ".join(found) + f"\nargv: {[str(a)[:80] for a in argv]}\nstderr: {outcome.stderr[-800:]}"
    return outcome


# ----------------------------------------------------------------------------- hostile values

not_an_integer = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),  # 1.0, 1e+20, nan, inf: never digits only
    st.integers(min_value=2**63, max_value=2**80).map(str),
    st.integers(max_value=-(2**63) - 1, min_value=-(2**80)).map(str),
    st.text(alphabet="abcxyz.-+eE ", min_size=1, max_size=12).filter(lambda t: not t.strip().lstrip("+-").isdigit()),
    st.just(""),
    st.integers(min_value=0, max_value=10**6).map(lambda i: f"{i}.0"),
)
not_a_finite_float32 = st.one_of(
    st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", ""]),
    st.floats(min_value=3.5e38, max_value=1e308).map(repr),
    st.floats(min_value=3.5e38, max_value=1e308).map(lambda v: repr(-v)),
    st.text(alphabet="abc#%@!", min_size=1, max_size=10),
)


def _with_field(ws, part, column, row, value):
    return ws.event_cell(part, column, value, row=row)


@FUZZ
@given(data=st.data())
def test_fuzz_csv_integer_fields(base, data):
    part = data.draw(st.sampled_from(sorted(INTEGER_COLUMNS)))
    column = data.draw(st.sampled_from(INTEGER_COLUMNS[part]))
    value = data.draw(not_an_integer)
    with workspace(base) as ws:
        rows = len((base.events / f"{EVENT_NAME}-{part}.csv").read_text().splitlines()) - 1
        events = _with_field(ws, part, column, data.draw(st.integers(1, rows)), value)
        assert_refused(["build", "--input", events, "--out", ws.path("graphs"), "--quiet"], ws)


@FUZZ
@given(data=st.data())
def test_fuzz_csv_float_fields(base, data):
    part = data.draw(st.sampled_from(sorted(FLOAT_COLUMNS)))
    column = data.draw(st.sampled_from(FLOAT_COLUMNS[part]))
    value = data.draw(not_a_finite_float32)
    with workspace(base) as ws:
        rows = len((base.events / f"{EVENT_NAME}-{part}.csv").read_text().splitlines()) - 1
        events = _with_field(ws, part, column, data.draw(st.integers(1, rows)), value)
        assert_refused(["build", "--input", events, "--out", ws.path("graphs"), "--quiet"], ws)


@FUZZ
@given(data=st.data())
def test_fuzz_csv_structure(base, data):
    """A required column dropped, the file cut at any byte, a row duplicated, or the header replaced."""
    part = data.draw(st.sampled_from(["hits", "particles", "truth"]))
    kind = data.draw(st.sampled_from(["drop", "cut", "duplicate", "header"]))
    with workspace(base) as ws:
        source = (base.events / f"{EVENT_NAME}-{part}.csv").read_bytes()
        if kind == "drop":
            column = data.draw(st.sampled_from(INTEGER_COLUMNS[part][:1] + FLOAT_COLUMNS[part][:2]))

            def edit(rows, column=column):
                index = rows[0].index(column)
                return [r[:index] + r[index + 1:] for r in rows]

            events = ws.event(part, edit)
        elif kind == "cut":
            # Cut inside the header or a few rows in (a cut at a line end can leave a valid shorter table).
            at = data.draw(st.integers(0, min(len(source) - 1, 400)))
            events = ws.event(part, raw=source[:at])
            assert_refused(["build", "--input", events, "--out", ws.path("graphs"), "--quiet"], ws, allow_success=True)
            return
        elif kind == "duplicate":
            key = "particle_id" if part == "particles" else "hit_id"

            def edit(rows, key=key, row=data.draw(st.integers(2, 20))):
                rows[row][rows[0].index(key)] = rows[1][rows[0].index(key)]

            events = ws.event(part, edit)
        else:
            header = data.draw(st.lists(st.text(alphabet="abcdefghij_", min_size=1, max_size=8), min_size=1, max_size=9))

            def edit(rows, header=header):
                rows[0] = header

            events = ws.event(part, edit)
        assert_refused(["build", "--input", events, "--out", ws.path("graphs"), "--quiet"], ws)


@FUZZ
@given(data=st.data())
def test_fuzz_csv_bytes(base, data):
    """Arbitrary byte mutations (may stay valid): a complete success or a clean refusal, never anything else."""
    part = data.draw(st.sampled_from(list(PARTS)))
    with workspace(base) as ws:
        content = bytearray((base.events / f"{EVENT_NAME}-{part}.csv").read_bytes())
        for _ in range(data.draw(st.integers(1, 8))):
            position = data.draw(st.integers(0, len(content) - 1))
            content[position] = data.draw(st.integers(0, 255))
        events = ws.event(part, raw=bytes(content))
        assert_refused(["build", "--input", events, "--out", ws.path("graphs"), "--quiet", "--cell-features"], ws,
                       allow_success=True)  # fmt: skip


# ----------------------------------------------------------------------------- graph files

GRAPH_ENTRIES = ["format_version", "event_id", "x", "pos", "hit_id", "layer", "edge_index", "edge_attr", "y", "particle_id", "particle_pt"]
WRONG_DTYPES = [np.float16, np.float64, np.int8, np.int32, np.uint64, np.bool_, np.complex64, "U3", "S2"]


@FUZZ
@given(data=st.data())
def test_fuzz_graph_files(base, data):
    """One entry replaced by an array of another dtype or shape, or a float entry given a non-finite value."""
    entry = data.draw(st.sampled_from(GRAPH_ENTRIES))
    kind = data.draw(st.sampled_from(["dtype", "shape", "nonfinite", "missing"]))
    command = data.draw(st.sampled_from(["partition", "evaluate", "train", "verify"]))
    with workspace(base) as ws:
        arrays = ws.graph_arrays()
        original = arrays[entry]
        if kind == "dtype":
            dtype = data.draw(st.sampled_from([d for d in WRONG_DTYPES if np.dtype(d) != original.dtype]))
            arrays[entry] = np.zeros(original.shape, dtype=dtype)
        elif kind == "shape":
            rank = data.draw(st.integers(0, 3))
            shape = tuple(data.draw(st.lists(st.integers(0, 5), min_size=rank, max_size=rank)))
            if shape == original.shape:
                shape = shape + (1,)
            arrays[entry] = np.zeros(shape, dtype=original.dtype)
        elif kind == "nonfinite" and original.dtype.kind == "f" and original.size:
            # .flat, not reshape: pos is stored Fortran-ordered, where reshape copies.
            arrays[entry].flat[data.draw(st.integers(0, original.size - 1))] = data.draw(st.sampled_from([np.nan, np.inf, -np.inf]))
        elif entry in ("y", "particle_id", "particle_pt"):
            arrays[entry] = arrays[entry][:-1]  # optional entries: a wrong length instead of missing
        else:
            arrays.pop(entry)
        path = ws.graph(lambda a: (a.clear(), a.update(arrays)))
        argv = {
            "partition": ["partition", "--graph", path, "--parts", "2", "--out", ws.path("plans")],
            "evaluate": ["evaluate", "--checkpoint", base.model, "--data", path.parent, "--quiet", "--json", ws.path("e.json")],
            "train": ["train", "--data", path.parent, "--out", ws.path("run"), *TINY_TRAIN],
            "verify": ["verify", "--graph", path, "--parts", "1", "--hidden", "4", "--iterations", "1"],
        }[command]
        assert_refused(argv, ws)


# ----------------------------------------------------------------------------- configs

CONFIG_FIELDS = {
    "optim.lr": "float", "optim.clip": "float", "optim.weight_decay": "float", "parallel.timeout_s": "float",
    "run.threshold": "float", "run.epochs": "int", "model.hidden": "int", "optim.batch_events": "int", "run.seed": "int",
    "run.keep": "int", "model.layer_norm": "bool", "parallel.mode": "str", "data.method": "str",
}  # fmt: skip
bad_for = {
    "float": st.one_of(st.sampled_from([".nan", ".inf", "-.inf", "'inf'", "[1, 2]", "{a: 1}", "true", "'fast'", "1e999"])),
    "int": st.one_of(st.sampled_from(["1.5", "'ten'", "[3]", "true", ".inf", "-1", "1e30", str(2**64)])),
    "bool": st.sampled_from(["'maybe'", "2", "[true]", "3.5"]),
    "str": st.one_of(st.sampled_from(["[a]", "{x: 1}", "3", "'bogus'", "''"]), st.text(alphabet="xyz", min_size=1, max_size=5).map(repr)),
}


@FUZZ
@given(data=st.data())
def test_fuzz_config_values(base, data):
    dotted = data.draw(st.sampled_from(sorted(CONFIG_FIELDS)))
    value = data.draw(bad_for[CONFIG_FIELDS[dotted]])
    section, name = dotted.split(".")
    with workspace(base) as ws:
        config = ws.write("run.yaml", f"{section}:\n  {name}: {value}\n")
        argv = ["train", "--config", config, "--data", base.graphs, "--out", ws.path("run"), "--no-progress", "--no-curves",
                "--mode", "single", "--epochs", "1", "--hidden", "4", "--iterations", "1"]  # fmt: skip
        # The command line overrides the file for --epochs/--hidden/--mode: drop those so the file's value counts.
        if dotted in ("run.epochs", "model.hidden", "parallel.mode"):
            flag = {"run.epochs": "--epochs", "model.hidden": "--hidden", "parallel.mode": "--mode"}[dotted]
            index = argv.index(flag)
            del argv[index : index + 2]
        assert_refused(argv, ws)


@FUZZ
@given(content=st.one_of(st.text(max_size=200).map(lambda t: t.encode("utf-8")), st.binary(max_size=200)))
def test_fuzz_config_text(base, content):
    """Any bytes at all as the YAML config: refused in one line (the --out that is a file stops even a valid one)."""
    with workspace(base) as ws:
        config = ws.write("run.yaml", content)
        blocker = ws.write("blocker", "a file where --out wants a directory")
        assert_refused(["train", "--config", config, "--data", base.graphs, "--out", blocker, *TINY_TRAIN], ws)


# ----------------------------------------------------------------------------- submissions


@FUZZ
@given(data=st.data())
def test_fuzz_submission_fields(base, data):
    column = data.draw(st.sampled_from(["hit_id", "track_id"]))
    value = data.draw(not_an_integer)
    with workspace(base) as ws:
        lines = [line.split(",") for line in base.submission.read_text().splitlines()]
        row = data.draw(st.integers(1, len(lines) - 1))
        lines[row][lines[0].index(column)] = value
        submission = ws.write("sub.csv", "".join(",".join(r) + "\n" for r in lines))
        assert_refused(["score", "--event", base.prefix, "--submission", submission], ws)


@FUZZ
@given(content=st.binary(max_size=300))
def test_fuzz_submission_bytes(base, content):
    with workspace(base) as ws:
        submission = ws.write("sub.csv", content)
        assert_refused(["score", "--event", base.prefix, "--submission", submission], ws)
