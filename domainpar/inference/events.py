"""The events of an evaluation: graphs built from raw TrackML events, or graph files (+ optional raw truth)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from domainpar.data.detector import layer_index_of
from domainpar.data.event_graph import EventGraph, require_edges
from domainpar.data.graph import CELL_FEATURES, GraphConfig, build_graph
from domainpar.data.graph_files import graph_files, has_graph_files, load_graph, refuse_mixed_inputs
from domainpar.data.pyg_files import is_pyg_file
from domainpar.data.trackml import event_id_of, event_prefixes, has_truth, load_event
from domainpar.data.true_segments import pair_keys
from domainpar.errors import DomainparError, shorten
from domainpar.filter.edge_filter import load_filter
from domainpar.inference.config import EvaluateConfig
from domainpar.parsing import parse_json
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


def _raw_graph_config(config: EvaluateConfig, node_features: int, graph_meta: dict | None):
    """The GraphConfig (and edge filter) that rebuild the training graphs from raw events.

    The checkpoint records how its training graphs were built; without that
    record (older checkpoints) the default cuts are used, with the legacy cell
    features when the model's input width asks for them.
    """
    source = config.checkpoint if config.checkpoint is not None else config.model  # what recorded the build
    build = None if not graph_meta else graph_meta.get("build_config")
    if build is None:
        return GraphConfig(cell_features=node_features == 3 + len(CELL_FEATURES)), None
    try:
        settings = parse_json(build, f"{source}: graph build configuration", "a JSON object")
    except DomainparError:
        raise
    except ValueError:
        settings = None
    if not isinstance(settings, dict):
        raise DomainparError(f"{source}: the recorded graph build configuration must be a JSON object (got {shorten(build)})")
    recorded_filter = settings.pop("edge_filter", None)
    if recorded_filter is not None and not isinstance(recorded_filter, dict):
        raise DomainparError(f"{source}: the recorded edge filter must be a JSON object (got {shorten(recorded_filter)})")
    graph_config = GraphConfig.from_dict(settings, source=f"{source}: graph build configuration")
    if recorded_filter is None:
        if config.edge_filter is not None:
            raise DomainparError(
                f"--filter {config.edge_filter}: the model was trained on unfiltered graphs (its checkpoint records no edge filter)"
            )
        return graph_config, None
    if config.edge_filter is None:
        raise DomainparError(
            f"{source}: the model was trained on graphs pruned by an edge filter (hash {recorded_filter.get('hash')}); "
            "pass its filter file with --filter (filter.pt of the recipe run) or evaluate graph files built with it"
        )

    edge_filter = load_filter(config.edge_filter)
    if edge_filter.content_hash != recorded_filter.get("hash"):
        raise DomainparError(
            f"--filter {config.edge_filter}: expected the edge filter the model was trained with (hash {recorded_filter.get('hash')}), "
            f"got hash {edge_filter.content_hash}"
        )
    return graph_config, edge_filter


def _filter_hash(build_config: str | None) -> str | None:
    """The content hash of the edge filter a graph's (or a model's training graphs') build record names (None: not
    pruned, or no record)."""
    if not build_config:
        return None
    try:
        record = parse_json(build_config, "build_config", "a JSON object")
    except ValueError:
        return None
    pruned = record.get("edge_filter") if isinstance(record, dict) else None
    return str(pruned.get("hash")) if isinstance(pruned, dict) else None


def _pruned_like_training(path: Path, graph: EventGraph, wanted: str | None, prune, what: str) -> EventGraph:
    """A graph file as the model's training graphs were: pruned by their edge filter (``wanted`` hash) when they were.

    A file already pruned by that filter is used as is; an unpruned one is pruned with ``prune`` (the filter of
    ``--filter``, or the exported pipeline's); anything else is one line.
    """
    found = _filter_hash(graph.build_config)
    if found == wanted:
        return graph
    if wanted is None:
        raise DomainparError(
            f"{path}: the graph was pruned by edge filter {found}, but {what} was trained on graphs that were not "
            "pruned; evaluate graphs built like the training graphs"
        )
    if found is not None:
        raise DomainparError(
            f"{path}: graph was pruned by edge filter {found}, but {what} was trained on graphs pruned by {wanted}"
        )
    if prune is None:
        raise DomainparError(
            f"{path}: {what} was trained on graphs pruned by edge filter {wanted} and this graph is not pruned; "
            "pass that filter with --filter, or evaluate the pruned graphs"
        )
    return prune(graph)


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


def check_model_inputs(graph: EventGraph, source: str, node_features: int, graph_meta: dict | None, whose: str) -> None:
    """A graph's features must be the model's inputs: as many node columns, and the same names where both are known.

    Raises:
        DomainparError: naming ``source``, what the model expects and what the graph has.
    """
    if graph.x.shape[1] != node_features:
        raise DomainparError(
            f"{source}: graph has {graph.x.shape[1]} node features but {whose} expects {node_features} "
            "(build the graphs with the same features as the training graphs)"
        )
    for kind in ("node_features", "edge_features"):
        expected = None if not graph_meta else graph_meta.get(kind)
        found = getattr(graph, kind)
        if expected is not None and found is not None and len(found) != len(expected):
            raise DomainparError(
                f"{source}: graph has {len(found)} {kind.replace('_', ' ')} but {whose} expects {len(expected)} "
                f"({', '.join(expected)})"
            )
        if expected is not None and found is not None and list(found) != list(expected):
            raise DomainparError(
                f"{source}: graph {kind.replace('_', ' ')} must be {list(expected)} like the model's training graphs "
                f"(got {list(found)}; build the graphs with the same features)"
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
        if exported is not None:
            graph_config, prune = exported.graph_config(), exported.prune
        else:
            graph_config, edge_filter = _raw_graph_config(config, node_features, graph_meta)
            prune = None if edge_filter is None else edge_filter.apply
        for prefix in progress(event_prefixes(data), desc="building graphs", unit="event", enabled=config.progress):
            if not has_truth(prefix):
                raise DomainparError(f"{prefix}: evaluation needs the truth file (found none: a test-set event?)")
            parts = ("hits", "particles", "truth") + (("cells",) if graph_config.needs_cells else ())
            frames = load_event(prefix, parts=parts)
            hits, particles, truth = frames[:3]
            graph, _ = build_graph(
                hits, truth, particles, frames[3] if graph_config.needs_cells else None,
                config=graph_config, event_id=event_id_of(prefix),
            )  # fmt: skip
            if prune is not None:
                graph = prune(graph)
            check_model_inputs(graph, str(prefix), node_features, graph_meta, whose)
            require_edges(graph.num_edges, prefix, "score")
            event = EventInput(graph=graph, source=str(prefix))
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
