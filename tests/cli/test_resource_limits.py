"""Options that would allocate beyond the machine are refused before anything is made, or streamed (issue 41 item 7).

``simulate --events 999999999 --particles 300`` allocated ~24 GB within seconds (a future, a name and a list entry
per event before the first was simulated) and the out-of-memory killer ended it; ``--particles 1000000`` needs
~30 GiB per event; ``--workers`` took up to 4096 processes (build and partition: any number), each holding an event.
The interrupt of the streamed run is ``tests/cli/test_machine_faults.py``.
"""

from __future__ import annotations

import pytest
from fixtures import TRACKML_DIR
from hostile_workspace import run_main

from domainpar.cli.checks import max_local_ranks
from domainpar.sim import dataset as sim_dataset
from domainpar.sim.config import SimulationConfig

GIB = 2**30


@pytest.fixture
def memory(monkeypatch):
    """A machine of 8 GiB and 4 cores, no ulimit -v."""
    monkeypatch.setattr(sim_dataset, "memory_bytes", lambda: (8 * GIB, "this machine's"))
    monkeypatch.setattr(sim_dataset, "process_memory_limit", lambda: None)
    monkeypatch.setattr(sim_dataset, "available_cores", lambda: 4)


def _refused(tmp_path, *argv) -> str:
    outcome = run_main(["simulate", "--out", tmp_path / "sim", *argv, "--quiet"])
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    assert outcome.traceback is None and outcome.code == 2 and len(lines) == 1, (outcome.code, outcome.stderr)
    assert not (tmp_path / "sim").exists() and list(tmp_path.iterdir()) == []
    return lines[0]


def test_particles_an_event_of_which_this_machine_cannot_hold_are_refused(tmp_path, memory):
    line = _refused(tmp_path, "--events", "2", "--particles", "1000000")
    assert line == ("error: --particles 1000000: an event needs about 30.7 GiB of memory while it is simulated, more "
                    "than this machine's 8 GiB; simulate fewer particles per event")  # fmt: skip


def test_a_ulimit_is_a_limit_too(tmp_path, memory, monkeypatch):
    monkeypatch.setattr(sim_dataset, "process_memory_limit", lambda: GIB)
    line = _refused(tmp_path, "--events", "1", "--particles", "40000")
    assert line.startswith("error: --particles 40000: an event needs about 1.38 GiB") and "this process's ulimit -v 1 GiB" in line


def test_workers_whose_events_do_not_fit_together_are_refused_naming_how_many_fit(tmp_path, memory):
    line = _refused(tmp_path, "--events", "100", "--particles", "100000", "--workers", "4")
    assert line == ("error: --workers 4 with --particles 100000: 4 events at a time need about 12.8 GiB of memory, more "
                    "than this machine's 8 GiB; at most 2 fit")  # fmt: skip


def test_the_default_workers_are_as_many_as_fit(memory):
    large, small = SimulationConfig(num_particles=100_000), SimulationConfig(num_particles=300)
    per_event, seconds = large.event_peak_bytes(), sim_dataset.simulation_seconds(large)
    assert sim_dataset.simulation_workers(per_event, "--particles 100000", None, 10**9, seconds_each=seconds) == 2  # 4 cores, memory for 2
    small_each = sim_dataset.simulation_seconds(small)
    assert sim_dataset.simulation_workers(small.event_peak_bytes(), "", None, 10**9, seconds_each=small_each) == 4
    assert sim_dataset.simulation_workers(small.event_peak_bytes(), "", None, 3, seconds_each=small_each) == 1  # seconds of work
    assert sim_dataset.simulation_workers(per_event, "--particles 100000", 4, 2, seconds_each=seconds) == 4  # 2 events at a time fit
    assert sim_dataset.simulation_workers(per_event, "particles 100000", None, 10**9, default=1, seconds_each=seconds) == 1  # a recipe's


def test_demo_refuses_particles_an_event_of_which_this_machine_cannot_hold(tmp_path, memory):
    outcome = run_main(["demo", "--out", tmp_path / "demo", "--particles", "1000000"])
    assert outcome.code == 2 and outcome.stderr.strip() == (
        "error: --particles 1000000: an event needs about 30.7 GiB of memory while it is simulated, more than this "
        "machine's 8 GiB; simulate fewer particles per event"), outcome.stderr  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_train_refuses_workers_beyond_four_per_core_and_a_cache_beyond_memory(tmp_path):
    for flags, expected in ((["--workers", "100000"], f"error: --workers must be at most {max_local_ranks()} on this machine "
                                                      "(4 per CPU core: each holds an event) (got 100000)"),
                            (["--cache-gb", "1000000"], "error: --cache-gb 1e+06: more than ")):  # fmt: skip
        outcome = run_main(["train", "--data", TRACKML_DIR, "--out", tmp_path / "run", "--mode", "single", *flags])
        assert outcome.code == 2 and outcome.stderr.startswith(expected), outcome.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["simulate", "--events", "2"], ["build", "--input", "x"], ["partition", "--graph", "x", "--parts", "2"]])
def test_workers_beyond_four_per_core_are_refused_by_every_command(tmp_path, command):
    # Each worker is a process holding an event: --workers 100000 started that many (at most as many as events).
    outcome = run_main([*command, "--out", tmp_path / "out", "--workers", "100000"])
    assert outcome.code == 2 and f"Invalid value for '--workers': 100000 is not in the range 1<=x<={max_local_ranks()}" in outcome.stderr
    assert list(tmp_path.iterdir()) == []
