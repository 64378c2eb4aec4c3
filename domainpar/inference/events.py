"""One event made ready for the model: :func:`prepare_event`, the first stage of every command's chain.

A raw event is read (each file once), built with the recorded build and pruned by the recorded filter; a graph file
is taken as the model's training graphs were (:class:`~domainpar.inference.graphs.GraphStage`). With truth
(evaluate) the same graph carries labels and the event's truth (hit weights, particles, layers) comes with it; the
edges, features and tracks are those of a run without truth. The result is picklable: a preparing process hands it
to the process that scores it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from domainpar.arrays import member
from domainpar.data.detector import layer_index_of
from domainpar.data.event_graph import EventGraph, require_edges
from domainpar.data.graph_files import load_graph
from domainpar.data.pyg_files import is_pyg_file
from domainpar.data.true_segments import pair_keys
from domainpar.errors import DomainparError
from domainpar.inference.arithmetic import chain_threads
from domainpar.inference.graphs import GraphStage, Prune
from domainpar.inference.sources import EventSource, graph_digest, read_raw_event
from domainpar.kernels.chunks import build_threads, using_threads
from domainpar.tracks.efficiency import ParticleTable
from domainpar.tracks.losses import EventSegments, event_segments


@dataclass(frozen=True)
class EventTruth:
    """What an event's figures are judged against, aligned with its ``event_hit_id``."""

    particle_id: np.ndarray
    """(M,) int64 truth particle of every hit (0: noise)."""
    layer: np.ndarray
    """(M,) layer code of every hit."""
    particles: ParticleTable
    """pT and eta of the event's particles."""
    weight: np.ndarray | None
    """(M,) float64 TrackML hit weights; None when unknown (a graph file without its raw event): no TrackML score."""


@dataclass
class PreparedEvent:
    """An event read, built and pruned, ready to be scored."""

    source: EventSource
    event_id: int
    graph: EventGraph
    """The model's graph: pruned by the recorded filter, checked; labelled when truth was asked for."""
    event_hit_id: np.ndarray
    """(M,) int64 every hit id of the event, ascending (the submission's rows)."""
    inputs: list[dict]
    """Each input file: name, size, modification time and digest of what was read."""
    num_edges_built: int
    """Edges before the filter."""
    seconds: dict = field(default_factory=dict)
    """read, build, filter (and segments, with :attr:`segments`: finding them, rebuilding a pruned file's graph)."""
    truth: EventTruth | None = None
    """The truth the figures are judged against (None: a run without truth)."""
    source_format: str = "raw"
    """``raw`` (TrackML CSVs, the graph built here), ``npz`` or ``pyg`` (a graph file)."""
    kept: np.ndarray | None = None
    """(E_file,) bool: the edges of the source graph file that are in ``graph`` (None: all of them)."""
    segments: EventSegments | None = None
    """The true segments among the graph's nodes, each flagged when the construction built it before the filter
    (``evaluate --losses``, :mod:`domainpar.tracks.losses`); None otherwise."""


def _truth_of(raw_hits: pd.DataFrame, particles: pd.DataFrame, truth: pd.DataFrame, path: str) -> tuple[np.ndarray, EventTruth]:
    """The event's hit ids (ascending) and its truth aligned with them."""
    weight = truth["weight"].to_numpy(dtype=np.float64)
    if not weight.sum() > 0:
        # The TrackML score weighs every hit: with no weight at all it is 0 / 0, for every tracker.
        raise DomainparError(
            f"{path}: expected hits of positive weight to score the event's tracks by, got a total weight of "
            f"{weight.sum():g} over {weight.size} hits (an event of noise hits only?); leave the event out"
        )
    truth = truth.iloc[np.argsort(truth["hit_id"].to_numpy(), kind="stable")]
    hit_id = truth["hit_id"].to_numpy(np.int64)
    hits = raw_hits.set_index("hit_id").loc[hit_id]
    table = ParticleTable.from_momenta(particles["particle_id"], particles["px"], particles["py"], particles["pz"])
    return hit_id, EventTruth(truth["particle_id"].to_numpy(np.int64), layer_index_of(hits["volume_id"].to_numpy(),
                              hits["layer_id"].to_numpy()), table, truth["weight"].to_numpy(np.float64))  # fmt: skip


def _truth_file(prefix: Path) -> str:
    return next((str(p) for p in (Path(f"{prefix}-truth.csv"), Path(f"{prefix}-truth.csv.gz")) if p.is_file()), f"{prefix}-truth.csv")


def check_same_event(graph: EventGraph, hits: pd.DataFrame, graph_source: str, event_source: str) -> None:
    """A graph scored against a raw event (``--events``) must have been built from it: every node's hit id is one
    of the event's, at the hit's position (TrackML numbers hits 1..N in every event, so ids alone match any
    event of as many hits).

    Raises:
        DomainparError: naming both, and the first hit that differs.
    """
    positions = hits.set_index("hit_id")[["x", "y", "z"]]
    known = member(graph.hit_id, positions.index.to_numpy())
    if not known.all():
        first = int(graph.hit_id[~known][0])
        raise DomainparError(
            f"--events {event_source}: expected the event {graph_source} was built from (its hit {first} is not in this event)"
        )
    raw = positions.loc[graph.hit_id].to_numpy(dtype=np.float32)
    far = np.flatnonzero(np.abs(raw - graph.pos).max(axis=1) > 1e-3 * np.maximum(1.0, np.abs(raw).max(axis=1)))
    if far.size:
        i = int(far[0])
        raise DomainparError(
            f"--events {event_source}: expected the event {graph_source} was built from (hit {int(graph.hit_id[i])} is at "
            f"{tuple(round(float(v), 2) for v in raw[i])} mm here and at {tuple(round(float(v), 2) for v in graph.pos[i])} mm in the graph)"
        )


def prepare_event(
    source: EventSource,
    stage: GraphStage,
    prune: Prune | None,
    truth: bool = False,
    events_dir: Path | None = None,
    segments: bool = False,
) -> PreparedEvent:
    """Read, build and prune one event (in a preparing process, or in the process that scores it).

    Args:
        source: the event.
        stage: the pipeline's graph stage.
        prune: ``stage.prune()``, loaded once per process.
        truth: judge against truth: a raw event's truth and particles are read, a graph file must carry labels,
            and its raw event in ``events_dir`` (when given) gives the hit weights.
        events_dir: raw events holding the truth of graph files.
        segments: with ``truth``, find the graph's true segments and which the construction built before the filter
            (:attr:`PreparedEvent.segments`). A graph file the recorded filter pruned already is rebuilt from its raw
            event in ``events_dir`` for it (seconds to tens of seconds an event).

    Raises:
        DomainparError: a missing or malformed input, or one the model was not trained on, named.
    """
    # The filter on the chain's fixed threads, in whichever process prepares (arithmetic.py). The build's bytes do
    # not depend on its thread count (domainpar.kernels.chunks), so it keeps the threads the process was given.
    with using_threads(build_threads()), chain_threads():
        return _prepare(source, stage, prune, truth, events_dir, segments)


def _prepare(source: EventSource, stage: GraphStage, prune: Prune | None, truth: bool, events_dir: Path | None,
             segments: bool) -> PreparedEvent:  # fmt: skip
    if source.kind == "raw":
        raw = read_raw_event(source, stage.needs_cells, truth)
        built = stage.from_raw(prune, raw.hits, raw.cells, raw.event_id, str(source.path), truth=raw.truth,
                               particles=raw.particles)  # fmt: skip
        event_hit_id, event_truth = np.sort(raw.hits["hit_id"].to_numpy(np.int64)), None
        if truth:
            event_hit_id, event_truth = _truth_of(raw.hits, raw.particles, raw.truth, _truth_file(source.path))
        require_edges(built.graph.num_edges, source.path, "score")
        event = PreparedEvent(source, raw.event_id, built.graph, event_hit_id, raw.inputs, built.num_edges_built,
                              {"read": raw.seconds, "build": built.seconds_build, "filter": built.seconds_filter},
                              event_truth)  # fmt: skip
        if truth and segments:
            started = time.perf_counter()
            event.segments = _segments(event.graph, built.edges_built)
            event.seconds["segments"] = time.perf_counter() - started
        return event
    started = time.perf_counter()
    info = os.stat(source.path)
    read = load_graph(source.path)
    loaded = time.perf_counter()
    graph = stage.from_file(prune, read, str(source.path))
    filtered = time.perf_counter()
    inputs = [{"file": source.path.name, "bytes": int(info.st_size), "mtime_ns": int(info.st_mtime_ns),
               "sha256": graph_digest(read)}]  # fmt: skip
    kept = None
    if graph.num_edges != read.num_edges:
        # Pruning keeps the order of the edges it keeps: mark them among the file's edges.
        kept = member(pair_keys(read.edge_index[0], read.edge_index[1], read.num_nodes),
                       pair_keys(graph.edge_index[0], graph.edge_index[1], graph.num_nodes))  # fmt: skip
    event = PreparedEvent(source, int(read.event_id), graph, np.sort(graph.hit_id.astype(np.int64)), inputs, read.num_edges,
                          {"read": loaded - started, "build": 0.0, "filter": filtered - loaded},
                          source_format="pyg" if is_pyg_file(source.path) else "npz", kept=kept)  # fmt: skip
    if truth:
        raw = _attach_graph_truth(event, events_dir)
        if segments:
            started = time.perf_counter()
            event.segments = _segments(graph, _file_edges_built(read, graph, stage, raw, source, events_dir))
            event.seconds["segments"] = time.perf_counter() - started
    return event


def _segments(graph: EventGraph, edges_built: np.ndarray) -> EventSegments:
    return event_segments(graph.particle_id, graph.layer, graph.pos, graph.particle_vertex, edges_built)


def _file_edges_built(read: EventGraph, graph: EventGraph, stage: GraphStage, raw, source: EventSource,
                      events_dir: Path | None) -> np.ndarray:  # fmt: skip
    """(2, E_built) the edges of a graph file's event before the filter, on the graph's nodes: the file's own when the
    filter was not applied to it (pruned here, or no filter), else those of its raw event rebuilt with the recorded
    build.

    Raises:
        DomainparError: a pruned file without its raw event, or one the recorded build did not make from it.
    """
    if graph is not read or stage.filter_hash is None:
        return read.edge_index
    if raw is None:
        raise DomainparError(
            f"{source.path}: the graph was pruned by the edge filter already; give its raw event (--events) to rebuild "
            "the graph before the filter, which tells the graph's losses from the filter's"
        )
    hit_id, edges = stage.unpruned_edges(raw.hits, raw.truth, raw.particles, graph.event_id, str(source.path))
    # The rebuilt nodes in the graph's numbering (-1: not a node of the graph).
    order = np.argsort(graph.hit_id, kind="stable")
    at = np.minimum(np.searchsorted(graph.hit_id[order], hit_id), max(order.size - 1, 0))
    node = np.where(graph.hit_id[order][at] == hit_id, order[at], -1)
    edges = node[edges]
    edges = edges[:, (edges >= 0).all(axis=0)]
    built = pair_keys(edges[0], edges[1], graph.num_nodes)
    if not member(pair_keys(graph.edge_index[0], graph.edge_index[1], graph.num_nodes), built).all():
        raise DomainparError(
            f"--events {events_dir}: expected the graph {source.path.name} to be built from this event by the model's "
            "recorded build (some of its edges are not among the rebuilt graph's)"
        )
    return edges


def _attach_graph_truth(event: PreparedEvent, events_dir: Path | None):
    """Set the event's truth; returns its raw event when one was read (None: the truth of the graph file alone)."""
    graph, path = event.graph, event.source.path
    if graph.y is None or graph.particle_id is None or graph.particle_pt is None:
        raise DomainparError(f"{path}: evaluation needs a graph with truth (labels y, particle_id, particle_pt); got none")
    require_edges(graph.num_edges, path, "score")
    if events_dir is None:
        order = np.argsort(graph.hit_id, kind="stable")
        particles = ParticleTable.from_hits(graph.particle_id, graph.particle_pt, graph.pos)
        event.truth = EventTruth(np.asarray(graph.particle_id, np.int64)[order], np.asarray(graph.layer)[order], particles, None)
        return None
    prefix = Path(events_dir) / f"event{graph.event_id:09d}"
    raw = read_raw_event(prefix, needs_cells=False, truth=True)
    check_same_event(graph, raw.hits, str(path), str(prefix))
    event.event_hit_id, event.truth = _truth_of(raw.hits, raw.particles, raw.truth, _truth_file(prefix))
    return raw


__all__ = ["EventTruth", "PreparedEvent", "check_same_event", "prepare_event"]
