"""``domainpar build`` and ``domainpar partition`` over a dataset: ``--workers`` gives the same bytes as one worker,
``--shard I/N`` slices are disjoint and cover the dataset, a bad event is named while the others finish."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from domainpar.cli.main import main
from domainpar.errors import DomainparError
from domainpar.npzfile import read_npz, write_npz
from domainpar.sim.config import SimulationConfig
from domainpar.sim.dataset import simulate_dataset
from domainpar.workers import parse_shard, shard_items

NUM_EVENTS = 5


def _files(directory: Path) -> dict[str, bytes]:
    """Every file below ``directory`` (relative path → bytes)."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _run(capsys, *argv) -> tuple[int, str, str]:
    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    directory = tmp_path_factory.mktemp("raw")
    simulate_dataset(directory, NUM_EVENTS, replace(SimulationConfig(), num_particles=250), seed=3, first_event_id=40, progress=False)
    return directory


@pytest.fixture(scope="module")
def built(raw, tmp_path_factory):
    out = tmp_path_factory.mktemp("built") / "graphs"
    main(["build", "--input", str(raw), "--out", str(out), "--workers", "1", "--quiet"])
    return out


def test_shards_are_disjoint_and_cover_the_items():
    items = list(range(23))
    for count in (1, 2, 3, 7, 23, 40):
        shards = [shard_items(items, (i, count)) for i in range(count)]
        flat = [x for shard in shards for x in shard]
        assert sorted(flat) == items and len(flat) == len(set(flat))
        assert max(map(len, shards)) - min(map(len, shards)) <= 1
    assert parse_shard("2/5") == (2, 5) and parse_shard(None) == (0, 1)
    for bad in ("5/5", "-1/3", "1/0", "1-3", "a/b", "1/2/3"):
        with pytest.raises(DomainparError, match=r"^--shard must be I/N"):
            parse_shard(bad)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_build_with_two_workers_writes_the_same_bytes_as_one(raw, built, tmp_path, capsys):
    code, _, err = _run(capsys, "build", "--input", raw, "--out", tmp_path / "w2", "--workers", "2")
    assert code == 0, err
    assert "\r" not in err  # stderr is no terminal here: no bar redrawn with carriage returns (domainpar.progress)
    ours, reference = _files(tmp_path / "w2"), _files(built)
    assert len(reference) == NUM_EVENTS and ours == reference


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_build_shards_are_disjoint_and_cover_the_dataset(raw, built, tmp_path, capsys):
    outputs = []
    for index in range(3):
        out = tmp_path / f"shard{index}"
        code, stdout, err = _run(capsys, "build", "--input", raw, "--out", out, "--shard", f"{index}/3", "--quiet")
        assert code == 0, err
        assert f"(shard {index}/3)" in stdout
        outputs.append(_files(out))
    names = [name for files in outputs for name in files]
    assert len(names) == len(set(names)) == NUM_EVENTS
    assert {name: data for files in outputs for name, data in files.items()} == _files(built)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_bad_event_is_named_and_the_others_are_built(raw, built, tmp_path, capsys):
    broken = tmp_path / "raw"
    shutil.copytree(raw, broken)
    hits = sorted(broken.glob("event000000042-hits.csv*"))[0]
    hits.write_bytes(b"hit_id,x,y\n1,2,3\n")
    code, _, err = _run(capsys, "build", "--input", broken, "--out", tmp_path / "out", "--workers", "2")
    assert code == 2
    last = err.replace("\r", "\n").strip().splitlines()[-1]
    assert last.startswith("error: 1 of 5 events failed: event000000042 (event000000042: ") and str(hits) in last
    assert "Traceback" not in err
    assert _files(tmp_path / "out") == {k: v for k, v in _files(built).items() if "000000042" not in k}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_partition_with_two_workers_writes_the_same_bytes_as_one(built, tmp_path, capsys):
    for workers in (1, 2):
        code, stdout, err = _run(capsys, "partition", "--graph", built, "--parts", "3", "--out", tmp_path / f"w{workers}",
                                 "--workers", workers)
        assert code == 0, err
    one, two = _files(tmp_path / "w1"), _files(tmp_path / "w2")
    assert sum(name.endswith("part_00002.npz") for name in one) == NUM_EVENTS
    assert one == two


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_partition_shards_cover_the_dataset_and_a_bad_graph_is_named(built, tmp_path, capsys):
    graphs = tmp_path / "graphs"
    shutil.copytree(built, graphs)
    # A graph whose headers are fine but whose content is not (found only when its worker loads it).
    bad = graphs / "event000000041.npz"
    arrays = read_npz(bad)
    arrays["x"][3, 1] = np.nan
    write_npz(bad, arrays, compress=True)
    plans = tmp_path / "plans"
    failed = []
    for index in range(2):
        code, _, err = _run(capsys, "partition", "--graph", graphs, "--parts", "2", "--out", plans, "--shard", f"{index}/2",
                            "--workers", 2)
        if code:
            failed.append(err.replace("\r", "\n").strip().splitlines()[-1])
    assert len(failed) == 1 and failed[0].startswith("error: 1 of ") and "failed: event000000041.npz (" in failed[0]
    assert "x must be finite numbers" in failed[0]
    assert sorted(p.name for p in plans.iterdir()) == [f"event{40 + i:09d}" for i in range(NUM_EVENTS) if i != 1]


def test_default_workers_are_one_process_for_small_events_and_the_cores_for_large_ones(raw, built, tmp_path, monkeypatch, capsys):
    """Without --workers, the examples' small events run in the command's own process (a pool's workers each import
    the libraries first, 1.5-8 s); events whose estimated work is worth it get the cores; --workers is as given."""
    import domainpar.cli.build as build_cli
    import domainpar.partition.dataset as partition_dataset
    import domainpar.sim.dataset as sim_dataset

    chosen: list[tuple[str, int]] = []
    monkeypatch.setattr(build_cli, "available_cores", lambda: 3)
    monkeypatch.setattr(build_cli, "build_graph_files", lambda *a, workers, **k: chosen.append(("build", workers)) or [])
    monkeypatch.setattr(partition_dataset, "run_items", lambda *a, workers, **k: chosen.append(("partition", workers)) or [])
    monkeypatch.setattr("domainpar.workers.available_cores", lambda: 3)
    monkeypatch.setattr(sim_dataset, "available_cores", lambda: 3)
    def simulated(*args, workers, **kwargs):
        chosen.append(("simulate", workers))
        raise SystemExit(0)  # nothing written: the choice is what is tested

    monkeypatch.setattr(sim_dataset, "simulate_events", simulated)

    _run(capsys, "build", "--input", raw, "--out", tmp_path / "g", "--quiet")
    _run(capsys, "build", "--input", raw, "--out", tmp_path / "g", "--workers", "2", "--quiet")
    _run(capsys, "partition", "--graph", built, "--parts", "2", "--out", tmp_path / "p", "--quiet")
    _run(capsys, "simulate", "--out", tmp_path / "s", "--events", "3", "--particles", "150", "--quiet")
    # Large: hits files and graph files of full events (sparse: only their sizes are read), 10,000-particle events.
    big = tmp_path / "big"
    big.mkdir()
    for event in (1, 2):
        with open(big / f"event00000000{event}-hits.csv", "wb") as fh:
            fh.truncate(5_000_000)
        with open(big / f"event00000000{event}.npz", "wb") as fh:
            fh.truncate(200_000_000)
    _run(capsys, "build", "--input", big, "--out", tmp_path / "g2", "--quiet")
    chosen.append(("partition", partition_dataset.partition_workers(sorted(big.glob("*.npz")), 3)))
    _run(capsys, "simulate", "--out", tmp_path / "s2", "--events", "4", "--quiet")
    assert chosen == [("build", 1), ("build", 2), ("partition", 1), ("simulate", 1),
                      ("build", 3), ("partition", 3), ("simulate", 3)]  # fmt: skip
