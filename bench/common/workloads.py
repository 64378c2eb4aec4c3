"""The graphs the benchmarks run on, built once per run and cached as graph files.

* ``real_full``: the real full-occupancy TrackML event 21000 (125k hits, no
  truth) from the TrackML data directory (:func:`trackml_dir`) — sections
  that need it skip with one line when it is absent.
* ``real_small``: the real labelled, particle-subsampled event 1 shipped in
  tests/data/trackml (exactness checks).
* ``simulated(num_particles)``: a labelled simulated event on the real
  detector (speed, reference, the true edges a sectors plan loses).

Graphs are written to ``cache_dir`` (``python -m bench --cache DIR``; a
temporary directory by default) under a name that records how they were
made, so the sections of one run share them.

The TrackML data directory is, in order: ``python -m bench --data DIR``, the
environment variable ``DOMAINPAR_TRACKML_DIR``, or ``../shared/data/trackml``
relative to the repository root (the layout of the development machine).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from domainpar.data.event_graph import EventGraph, save_graph
from domainpar.data.graph_files import load_graph

from bench.common.report import REPO_ROOT

#: Environment variable naming the TrackML data directory.
DATA_ENV = "DOMAINPAR_TRACKML_DIR"
#: The data directory when neither --data nor the environment variable is given.
DEFAULT_TRACKML_DIR = REPO_ROOT.parent / "shared" / "data" / "trackml"
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


def trackml_dir() -> Path:
    """The TrackML data directory: ``$DOMAINPAR_TRACKML_DIR`` or ``<repo>/../shared/data/trackml``."""
    value = os.environ.get(DATA_ENV)
    return Path(value) if value else DEFAULT_TRACKML_DIR


def event_prefix(event: str) -> Path | None:
    """Prefix of ``event`` (``"event000021000"``) in the data directory, or None when its hits file is absent."""
    directory = trackml_dir()
    if any((directory / f"{event}-hits{ext}").is_file() for ext in (".csv", ".csv.gz")):
        return directory / event
    return None


def full_event_prefix() -> Path | None:
    """Prefix of the real full event, or None when its hits file is not there."""
    return event_prefix(FULL_EVENT)


def missing_full_event() -> str:
    """The one line a section prints when it needs the real full event and it is absent."""
    return (f"the real full event {FULL_EVENT} was not found in {trackml_dir()} "
            f"(pass --data DIR or set {DATA_ENV})")


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
    from domainpar.sim.config import SimulationConfig
    from domainpar.sim.event import simulate_event

    event = simulate_event(SimulationConfig(num_particles=num_particles), event_id, seed)
    graph, _ = build_graph(event["hits"], event["truth"], event["particles"], event_id=event_id)
    return graph


def real_full(cache_dir: Path) -> Workload | None:
    """The real full event's graph, or None when the event is absent."""
    prefix = full_event_prefix()
    if prefix is None:
        return None
    return _cached("real event 21000", cache_dir / f"{FULL_EVENT}.npz", lambda: real_event_graph(prefix, False))


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


def random_event_graph(num_nodes: int, num_edges: int, seed: int = 0) -> EventGraph:
    """A random graph of the size and feature widths of a hit graph (no physics, fixed degree statistics).

    Edges are distinct ordered pairs of distinct nodes drawn uniformly; node
    features (3) and edge features (4) are standard normal, labels Bernoulli(0.1).
    This is the graph of the issue-14 comparison with the field's code
    (N = 20,000, E = 200,000), where only the sizes matter.
    """
    import numpy as np

    from domainpar.arrays import unique

    rng = np.random.default_rng(seed)
    pairs = np.empty(0, np.int64)
    while pairs.size < num_edges:  # draw with a margin, drop self-loops and repeats
        draw = rng.integers(0, num_nodes, size=(2, int(num_edges * 1.1) + 16), dtype=np.int64)
        keys = draw[0] * num_nodes + draw[1]
        keys = keys[draw[0] != draw[1]]
        pairs = unique(np.concatenate([pairs, keys]))
    keys = rng.permutation(pairs)[:num_edges]
    edge_index = np.stack([keys // num_nodes, keys % num_nodes]).astype(np.int64)
    return EventGraph(
        event_id=0,
        x=rng.standard_normal((num_nodes, 3), dtype=np.float32),
        pos=rng.standard_normal((num_nodes, 3), dtype=np.float32) * np.float32(1000.0),
        hit_id=np.arange(1, num_nodes + 1, dtype=np.int64),
        layer=np.zeros(num_nodes, np.int64),
        edge_index=edge_index,
        edge_attr=rng.standard_normal((num_edges, 4), dtype=np.float32),
        y=(rng.random(num_edges) < 0.1).astype(np.float32),
    )


def random_graph(cache_dir: Path, num_nodes: int, num_edges: int, seed: int = 0) -> Workload:
    """A random graph of ``num_nodes`` nodes and ``num_edges`` edges (see :func:`random_event_graph`)."""
    return _cached(
        f"random graph N={num_nodes:,} E={num_edges:,}",
        cache_dir / f"random-{num_nodes}n-{num_edges}e-seed{seed}.npz",
        lambda: random_event_graph(num_nodes, num_edges, seed),
    )
