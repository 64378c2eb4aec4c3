"""The graphs the benchmarks run on, built once per run and cached as graph files.

* ``real_full``: the real full-occupancy TrackML event 21000 (125k hits, no
  truth) from /work/shared/data/trackml — skipped gracefully when absent.
* ``real_small``: the real labelled, particle-subsampled event 1 shipped in
  tests/data/trackml (exactness checks).
* ``simulated(num_particles)``: a labelled simulated event on the real
  detector (speed, reference, the true edges a sectors plan loses).

Graphs are written to ``cache_dir`` (``<out>/.cache`` by default) under a name
that records how they were made, so the sections of one run share them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from domainpar.data.event_graph import EventGraph, load_graph, save_graph

REPO_ROOT = Path(__file__).resolve().parent.parent
#: Where the real full event lives (override with DOMAINPAR_TRACKML_DIR).
SHARED_TRACKML = Path(os.environ.get("DOMAINPAR_TRACKML_DIR", "/work/shared/data/trackml"))
FULL_EVENT = "event000021000"
SMALL_EVENT_DIR = REPO_ROOT / "tests" / "data" / "trackml"
SMALL_EVENT = "event000000001"


@dataclass(frozen=True)
class Workload:
    """A graph file plus where it came from."""

    name: str
    """Short label used in the report ("real event 21000", "simulated 500 particles")."""
    path: Path
    """The cached graph file (.npz)."""
    num_nodes: int
    """Nodes of the graph."""
    num_edges: int
    """Edges of the graph."""
    labelled: bool
    """Whether the graph has truth labels."""
    seconds_build: float
    """Wall time to build it (0 when it came from the cache)."""

    def load(self) -> EventGraph:
        return load_graph(self.path)


def full_event_prefix() -> Path | None:
    """Prefix of the real full event, or None when its hits file is not there."""
    prefix = SHARED_TRACKML / FULL_EVENT
    if any((SHARED_TRACKML / f"{FULL_EVENT}-hits{ext}").is_file() for ext in (".csv", ".csv.gz")):
        return prefix
    return None


def _cached(name: str, path: Path, build) -> Workload:
    start = time.perf_counter()
    if path.is_file():
        graph = load_graph(path)
        seconds = 0.0
    else:
        graph = build()
        seconds = time.perf_counter() - start
        save_graph(graph, path)
    return Workload(name, path, graph.num_nodes, graph.num_edges, graph.has_labels, seconds)


def real_event_graph(prefix: Path, labelled: bool) -> EventGraph:
    """Build the default hit graph of a real TrackML event."""
    from domainpar.data.graph import build_graph
    from domainpar.data.trackml import event_id_of, load_event

    parts = ("hits", "truth", "particles") if labelled else ("hits", "particles")
    frames = load_event(prefix, parts)
    truth = frames[1] if labelled else None
    graph, _ = build_graph(frames[0], truth, frames[-1], event_id=event_id_of(prefix))
    return graph


def simulated_event_graph(num_particles: int, seed: int = 0, event_id: int = 1) -> EventGraph:
    """Simulate one event with ``num_particles`` particles and build its labelled graph."""
    from domainpar.data.graph import build_graph
    from domainpar.data.simulate import SimulationConfig, simulate_event

    event = simulate_event(SimulationConfig(num_particles=num_particles), event_id, seed)
    graph, _ = build_graph(event["hits"], event["truth"], event["particles"], event_id=event_id)
    return graph


def real_full(cache_dir: Path) -> Workload | None:
    """The real full event's graph, or None when the event is absent."""
    prefix = full_event_prefix()
    if prefix is None:
        return None
    return _cached(f"real event 21000", cache_dir / f"{FULL_EVENT}.npz", lambda: real_event_graph(prefix, False))


def real_small(cache_dir: Path) -> Workload:
    """The real labelled small event's graph (always available: it ships with the tests)."""
    return _cached(
        "real event 1 (subsampled)", cache_dir / f"{SMALL_EVENT}.npz", lambda: real_event_graph(SMALL_EVENT_DIR / SMALL_EVENT, True)
    )


def simulated(cache_dir: Path, num_particles: int, seed: int = 0) -> Workload:
    """A labelled simulated event's graph."""
    return _cached(
        f"simulated, {num_particles} particles",
        cache_dir / f"simulated-{num_particles}p-seed{seed}.npz",
        lambda: simulated_event_graph(num_particles, seed),
    )
