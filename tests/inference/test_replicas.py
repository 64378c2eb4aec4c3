"""How many replicas ``domainpar reconstruct`` runs when --workers is not given, and their prefetch."""

from __future__ import annotations

from pathlib import Path

import pytest

import domainpar.data.dataset as dataset
import domainpar.workers as workers
from domainpar.inference import reconstruct
from domainpar.inference.sources import EventSource
from domainpar.inference.spec import ReconstructConfig

GIB = 1024**3


def _sources(count: int, kind: str = "raw") -> list[EventSource]:
    return [EventSource(f"event{i:09d}", Path(f"/data/event{i:09d}"), kind) for i in range(count)]


@pytest.fixture
def machine(monkeypatch):
    """A machine of ``cores`` cores and ``memory`` bytes whose events each take ``build`` estimated seconds."""
    state = {"cores": 2, "memory": 24 * GIB, "build": 3.8}  # the 2-core VM, real event 21000's estimate
    monkeypatch.setattr(reconstruct, "available_cores", lambda: state["cores"])
    monkeypatch.setattr(workers, "memory_bytes", lambda: (state["memory"], "this machine's"))
    monkeypatch.setattr(dataset, "build_seconds", lambda prefix: state["build"])
    return state


def _config(**values) -> ReconstructConfig:
    return ReconstructConfig(data=Path("/data"), out=Path("/out"), checkpoint=Path("/model.pt"), **values)


def test_full_events_get_one_replica_a_core_and_no_preparing_process(machine):
    resolved = reconstruct._resolved(_config(), _sources(4))
    assert (resolved.workers, resolved.prefetch) == (2, 0)
    machine["cores"], machine["memory"] = 16, 64 * GIB
    assert reconstruct._resolved(_config(), _sources(40)).workers == 16
    assert reconstruct._resolved(_config(num_parts=2), _sources(40)).workers == 8  # each replica has 2 processes


def test_small_events_keep_one_host_and_its_preparing_process(machine):
    # The test fixtures' and the examples' events: a replica's start-up (torch, numba, the pipeline) costs more
    # than it would share.
    machine["build"] = 0.05
    resolved = reconstruct._resolved(_config(), _sources(8))
    assert (resolved.workers, resolved.prefetch) == (1, 1)


def test_replicas_stay_within_the_memory_and_the_events(machine):
    machine["cores"], machine["memory"] = 16, 5 * GIB
    assert reconstruct._resolved(_config(), _sources(40)).workers == 2  # 2 GiB a replica
    machine["memory"] = 64 * GIB
    assert reconstruct._resolved(_config(), _sources(40)).workers == 16
    assert reconstruct._resolved(_config(), _sources(3)).workers == 3
    resolved = reconstruct._resolved(_config(), _sources(3))
    assert resolved.prefetch == 0  # one event a replica: nothing to prefetch


def test_what_the_user_asks_for_is_kept(machine):
    assert reconstruct._resolved(_config(workers=1), _sources(4)).workers == 1
    assert reconstruct._resolved(_config(workers=1), _sources(4)).prefetch == 1
    assert reconstruct._resolved(_config(workers=1, prefetch=3), _sources(8)).prefetch == 3
    assert reconstruct._resolved(_config(prefetch=2), _sources(8)).prefetch == 2  # with two replicas, as asked
    assert reconstruct._resolved(_config(), _sources(4, kind="graph")).workers == 1  # no estimate of graph files' work
