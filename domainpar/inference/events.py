"""The events of an evaluation: graphs built from raw TrackML events, or graph files (+ optional raw truth)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from domainpar.data.detector import layer_index_of
from domainpar.data.event_graph import EventGraph, require_edges
from domainpar.data.graph_files import graph_files, has_graph_files, load_graph, refuse_mixed_inputs
from domainpar.data.pyg_files import is_pyg_file
from domainpar.data.trackml import event_id_of, event_prefixes, has_truth, load_event
from domainpar.data.true_segments import pair_keys
from domainpar.errors import DomainparError
from domainpar.filter.edge_filter import load_filter
from domainpar.inference.config import EvaluateConfig
from domainpar.inference.pipeline import RawStage, _recorded_build, build_event_graph, check_model_inputs
from domainpar.inference.pipeline import filter_hash_of as _filter_hash
from domainpar.inference.pipeline import pruned_like_training as _pruned_like_training
from domainpar.progress import progress
from domainpar.tracks.efficiency import ParticleTable


@dataclass
class EventInput:
    """One event ready for inference and scoring."""

    graph: EventGraph
    """The event graph, with labels and per-hit truth."""
    source: str
    """Where it came from (for messages and records)."""
    truth: pd.DataFrame | None = None
    """hit_id, particle_id, weight of every hit of the event (None: no weights known)."""
    layer: np.ndarray | None = None
    """(len(truth),) layer code of every truth hit (with truth)."""
    particles: ParticleTable | None = None
    """Particle pT and eta."""
    source_format: str = "raw"
    """What ``source`` is: ``npz`` or ``pyg`` (a graph file), ``raw`` (TrackML CSVs, the graph built here)."""
    kept: np.ndarray | None = None
    """(E_file,) bool: the edges of the source graph file that are in ``graph`` (None: all of them; edges the
    pipeline's edge filter removed are not scored)."""


def _raw_truth(prefix: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    hits, particles, truth = load_event(prefix, parts=("hits", "particles", "truth"))
    return hits, particles, truth


def _attach_truth(event: EventInput, hits: pd.DataFrame, particles: pd.DataFrame, truth: pd.DataFrame, prefix: Path) -> None:
    weight = truth["weight"].to_numpy(dtype=np.float64)
    if not weight.sum() > 0:
        # The TrackML score weighs every hit: with no weight at all it is 0 / 0, for every tracker.
        name = next((p for p in (Path(f"{prefix}-truth.csv"), Path(f"{prefix}-truth.csv.gz")) if p.is_file()), f"{prefix}-truth.csv")
        raise DomainparError(
            f"{name}: expected hits of positive weight to score the event's tracks by, got a total weight of "
            f"{weight.sum():g} over {weight.size} hits (an event of noise hits only?); leave the event out"
        )
    order = np.argsort(truth["hit_id"].to_numpy())
    truth = truth.iloc[order].reset_index(drop=True)
    hits = hits.set_index("hit_id").loc[truth["hit_id"].to_numpy()]
    event.truth = truth[["hit_id", "particle_id", "weight"]]
    event.layer = layer_index_of(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy())
    event.particles = ParticleTable.from_momenta(particles["particle_id"], particles["px"], particles["py"], particles["pz"])






def check_same_event(graph: EventGraph, hits: pd.DataFrame, graph_source: str, event_source: str) -> None:
    """A graph scored against a raw event (``--events``) must have been built from it: every node's hit id is one
    of the event's, at the hit's position (TrackML numbers hits 1..N in every event, so ids alone match any
    event of as many hits).

    Raises:
        DomainparError: naming both, and the first hit that differs.
    """
    positions = hits.set_index("hit_id")[["x", "y", "z"]]
    known = np.isin(graph.hit_id, positions.index.to_numpy())
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




def load_events(
    config: EvaluateConfig, node_features: int, graph_meta: dict | None = None, exported: Any = None
) -> list[EventInput]:
    """The events at ``config.data``: graphs built from raw events, or graph files (+ optional raw truth), as the
    model's training graphs were (same cuts, features and edge filter).

    Args:
        config: what to evaluate.
        node_features: the model's input width.
        graph_meta: the checkpoint's record of its training graphs (feature names, build configuration),
            used to rebuild the same graph from raw events and to check graph files' feature names.
        exported: an exported pipeline (:class:`~domainpar.export.runtime.ExportedModel`): raw events are built with
            its sidecar's graph stage and pruned by its edge filter's file, as a deployment runs them.
    """
    data = Path(config.data)
    refuse_mixed_inputs(data, "--data")
    raw = data.is_dir() and any(data.glob("event*-hits.csv*"))
    events: list[EventInput] = []
    whose = f"model {Path(config.model).name}" if config.model is not None else "the checkpoint's model"
    if raw:
        # Built exactly as reconstruct builds them (domainpar.inference.pipeline), with labels from the truth.
        if exported is not None:
            stage = RawStage(exported.graph_config(), None, Path(config.model), exported.filter_hash, node_features,
                             graph_meta, whose)  # fmt: skip
            prune = exported.prune
        else:
            graph_config, edge_filter = _recorded_build(config.checkpoint, config.edge_filter, node_features, graph_meta)
            stage = RawStage(graph_config, edge_filter, None, None if edge_filter is None else edge_filter.content_hash,
                             node_features, graph_meta, whose)  # fmt: skip
            prune = stage.prune()
        for prefix in progress(event_prefixes(data), desc="building graphs", unit="event", enabled=config.progress):
            if not has_truth(prefix):
                raise DomainparError(
                    f"{prefix}: evaluation needs the truth file (found none: a test-set event?); "
                    "`domainpar reconstruct` runs the pipeline on events without truth"
                )
            parts = ("hits", "particles", "truth") + (("cells",) if stage.graph_config.needs_cells else ())
            frames = load_event(prefix, parts=parts)
            hits, particles, truth = frames[:3]
            built = build_event_graph(stage, prune, hits, frames[3] if stage.graph_config.needs_cells else None,
                                      event_id_of(prefix), str(prefix), truth=truth, particles=particles)  # fmt: skip
            require_edges(built.graph.num_edges, prefix, "score")
            event = EventInput(graph=built.graph, source=str(prefix))
            _attach_truth(event, hits, particles, truth, Path(prefix))
            events.append(event)
        return events
    if not has_graph_files(data):
        raise DomainparError(
            f"{data}: expected raw TrackML events (event*-hits.csv[.gz]) or graph files (*.npz, or PyG *.pyg / *.pt), found neither"
        )
    if config.events_dir is not None and not Path(config.events_dir).is_dir():
        raise DomainparError(f"--events {config.events_dir}: expected a directory of raw TrackML events (found none)")
    if exported is not None:
        wanted, prune = exported.filter_hash, exported.prune
    else:
        wanted = None if not graph_meta else _filter_hash(graph_meta.get("build_config"))
        edge_filter = None if config.edge_filter is None else load_filter(config.edge_filter)
        if edge_filter is not None and edge_filter.content_hash != wanted:
            trained = "graphs that were not pruned" if wanted is None else f"graphs pruned by edge filter {wanted}"
            raise DomainparError(
                f"--filter {config.edge_filter}: expected the edge filter the model was trained with; the model was "
                f"trained on {trained}, and this filter's hash is {edge_filter.content_hash}"
            )
        prune = None if edge_filter is None else edge_filter.apply
    first_source: dict[int, Path] = {}
    for path in graph_files(data):
        read = load_graph(path)
        if read.event_id in first_source:
            # Per-event records, submissions and plots are keyed by event id; a repeat would count the event twice.
            raise DomainparError(
                f"{data}: expected one graph file per event (found event {read.event_id} in both "
                f"{first_source[read.event_id].name} and {path.name})"
            )
        first_source[read.event_id] = path
        check_model_inputs(read, str(path), node_features, graph_meta, whose)
        graph = _pruned_like_training(path, read, wanted, prune, whose)
        kept = None
        if graph.num_edges != read.num_edges:
            # Pruning keeps the order of the edges it keeps: mark them among the file's edges.
            kept = np.isin(pair_keys(read.edge_index[0], read.edge_index[1], read.num_nodes),
                           pair_keys(graph.edge_index[0], graph.edge_index[1], graph.num_nodes))  # fmt: skip
        if graph.y is None or graph.particle_id is None or graph.particle_pt is None:
            raise DomainparError(f"{path}: evaluation needs a graph with truth (labels y, particle_id, particle_pt); got none")
        require_edges(graph.num_edges, path, "score")
        event = EventInput(graph=graph, source=str(path), source_format="pyg" if is_pyg_file(path) else "npz", kept=kept)
        if config.events_dir is not None:
            prefix = Path(config.events_dir) / f"event{graph.event_id:09d}"
            hits, particles, truth = _raw_truth(prefix)
            check_same_event(graph, hits, str(path), str(prefix))
            _attach_truth(event, hits, particles, truth, prefix)
        else:
            event.particles = ParticleTable.from_hits(graph.particle_id, graph.particle_pt, graph.pos)
        events.append(event)
    return events
