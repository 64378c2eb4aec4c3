"""A trained tracker as it runs on events: the one pipeline ``domainpar evaluate`` and ``domainpar reconstruct`` share.

A pipeline is a checkpoint (plus the edge filter its training graphs were
pruned with) or an exported TorchScript/ONNX model with its sidecar, and
what the checkpoint or sidecar records about its training: how raw events
were built into graphs (cuts, features), which edge filter pruned them, the
working point (threshold). :func:`load_pipeline` restores it once; then every
event goes through the same stages, whichever command runs them:

1. :func:`build_event_graph`: raw hits (and cells when the features need
   them) → the graph built with the recorded cuts and features → pruned by
   the recorded edge filter → checked against the model's inputs;
2. :func:`event_logits`: the GNN's edge logits in one process (partitioned
   inference is :mod:`domainpar.inference.infer` and
   :mod:`domainpar.inference.domain`);
3. :func:`event_tracks`: edge scores → track candidates
   (:func:`domainpar.tracks.candidates.build_candidates` with the pipeline's
   :class:`~domainpar.tracks.candidates.TrackConfig`) → a track id for every
   hit of the event (hits the graph left out are singletons).

Truth never enters a stage: evaluate builds the same graph with labels for
its figures, reconstruct without; both then give every hit the same track id
(``tests/inference/test_reconstruct.py`` holds reconstruct → score equal to
evaluate's TrackML score).
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from domainpar import __version__
from domainpar.data.event_graph import EventGraph
from domainpar.data.graph import CELL_FEATURES, GraphConfig, build_graph
from domainpar.errors import DomainparError, shorten
from domainpar.parsing import parse_json
from domainpar.tracks.build import complete_tracks
from domainpar.tracks.candidates import TrackCandidates, TrackConfig, build_candidates
from domainpar.tracks.methods import DEFAULT_METHOD

#: A function pruning a graph as the model's training graphs were pruned (an edge filter's ``apply``).
Prune = Callable[[EventGraph], EventGraph]


@dataclass(frozen=True)
class Pipeline:
    """A trained tracker restored for inference: model, what its training graphs were, threshold and track builder."""

    checkpoint: Path | None
    """The training checkpoint (``model.pt`` or ``checkpoints/step-*.pt``); None for an exported model."""
    model_path: Path | None
    """The exported model file (.onnx or TorchScript .pt, with its sidecar); None for a checkpoint."""
    loaded: Any
    """The restored checkpoint (:class:`~domainpar.inference.model_io.LoadedModel`), None for an exported model."""
    exported: Any
    """The exported pipeline (:class:`~domainpar.export.runtime.ExportedModel`), None for a checkpoint."""
    edge_filter: Path | None
    """The edge filter file given with a checkpoint (``filter.pt``), None when none was given."""
    threshold: float
    """Edge score cut (probability) of the track builder."""
    tracks: TrackConfig
    """How tracks are built from the edge scores (method, threshold, fit settings)."""
    node_features: int
    """The model's input width."""
    graph_meta: dict | None
    """The training graphs' feature names and build configuration (JSON), when recorded."""
    step: int | None
    """Optimiser steps of the checkpoint the model comes from."""

    @property
    def source(self) -> Path:
        """The file the model came from (checkpoint or exported model)."""
        return self.checkpoint if self.checkpoint is not None else self.model_path

    @property
    def whose(self) -> str:
        """The model in messages."""
        return f"model {Path(self.model_path).name}" if self.model_path is not None else "the checkpoint's model"

    def raw_stage(self) -> "RawStage":
        """How raw events become the model's graphs (picklable: a preparing process gets the loaded filter with it).

        Restored once per pipeline: the edge filter file is read once.
        """
        return self._raw_stage

    @functools.cached_property
    def _raw_stage(self) -> "RawStage":
        if self.exported is not None:
            return RawStage(self.exported.graph_config(), None, self.model_path, self.exported.filter_hash,
                            self.node_features, self.graph_meta, self.whose)  # fmt: skip
        graph_config, edge_filter = _recorded_build(self.checkpoint, self.edge_filter, self.node_features, self.graph_meta)
        return RawStage(graph_config, edge_filter, None, None if edge_filter is None else edge_filter.content_hash,
                        self.node_features, self.graph_meta, self.whose)  # fmt: skip

    def record(self) -> dict:
        """What makes this pipeline's outputs what they are (the model's digest, the build, the filter, the tracks),
        JSON-ready; :func:`pipeline_digest` of it names the pipeline in every output."""
        common = {"threshold": self.threshold, "tracks": asdict(self.tracks)}
        if self.exported is not None:
            source = self.exported.sidecar.get("source", {})
            return {"model": str(self.model_path), "model_sha256": self.exported.sidecar["model"]["sha256"],
                    "model_format": self.exported.format, "checkpoint": source.get("checkpoint"),
                    "checkpoint_sha256": source.get("sha256"), "checkpoint_step": self.step,
                    "edge_filter_hash": self.exported.filter_hash, **common}  # fmt: skip
        stage = self.raw_stage()
        return {"checkpoint": str(self.checkpoint), "checkpoint_sha256": self.loaded.sha256, "checkpoint_step": self.step,
                "model_name": self.loaded.model_config.name, "graph_build": stage.graph_config.to_dict(),
                "edge_filter_hash": stage.filter_hash, **common}  # fmt: skip


def pipeline_digest(record: dict) -> str:
    """A short digest of a pipeline record's settings (paths left out: a moved model is the same model)."""
    settings = {k: v for k, v in record.items() if k not in ("checkpoint", "model")}
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def load_pipeline(
    checkpoint: Path | None = None,
    model: Path | None = None,
    edge_filter: Path | None = None,
    threshold: float | None = None,
    track_method: str = DEFAULT_METHOD,
) -> Pipeline:
    """Restore a pipeline from a checkpoint (and its edge filter) or an exported model.

    Args:
        checkpoint: a ``domainpar train`` checkpoint or ``model.pt``.
        model: instead, an exported model file with its sidecar.
        edge_filter: with a checkpoint, the edge filter its training graphs were pruned with.
        threshold: the edge score cut; None: the checkpoint's training threshold (else 0.5), or the sidecar's.
        track_method: the track builder (:data:`domainpar.tracks.methods.METHODS`).

    Raises:
        DomainparError: a missing or damaged file, or one of another pipeline (named).
    """
    from domainpar.export.runtime import load_exported
    from domainpar.export.sidecar import feature_names
    from domainpar.inference.model_io import load_model

    if (checkpoint is None) == (model is None):
        raise DomainparError("give exactly one of --checkpoint (a training checkpoint) and --model (an exported .onnx/.pt model)")
    if model is not None:
        exported = load_exported(model)
        chosen = threshold if threshold is not None else exported.threshold
        # The sidecar names the model's input columns: graph files of other features are refused by name too.
        graph_meta = {
            "node_features": feature_names(exported.sidecar["node_features"]),
            "edge_features": feature_names(exported.sidecar["edge_features"]) if exported.num_edge_features else None,
            "build_config": None,
        }
        return Pipeline(None, Path(model), None, exported, None, chosen, TrackConfig(method=track_method, threshold=chosen),
                        exported.num_node_features, graph_meta, exported.sidecar.get("source", {}).get("step"))  # fmt: skip
    loaded = load_model(checkpoint)
    chosen = threshold if threshold is not None else (loaded.threshold or 0.5)
    return Pipeline(Path(checkpoint), None, loaded, None, None if edge_filter is None else Path(edge_filter), chosen,
                    TrackConfig(method=track_method, threshold=chosen), loaded.model_config.node_features, loaded.graph,
                    loaded.step)  # fmt: skip


@dataclass(frozen=True)
class RawStage:
    """How raw events become the model's graphs: the recorded build and the edge filter (picklable)."""

    graph_config: GraphConfig
    """The cuts and features of the training graphs."""
    edge_filter: Any
    """The loaded edge filter to prune with (:class:`~domainpar.filter.edge_filter.EdgeFilter`), None when the
    training graphs were not pruned by one (or the exported model's own filter file prunes)."""
    exported_model: Path | None
    """An exported model whose sidecar's edge filter file prunes (None: a checkpoint's pipeline)."""
    filter_hash: str | None
    """The content hash of the edge filter the training graphs were pruned with (None: not pruned)."""
    node_features: int
    """The model's input width."""
    graph_meta: dict | None
    """The training graphs' feature names, to check the built graphs against."""
    whose: str
    """The model in messages."""

    def prune(self) -> Prune | None:
        """The pruning function (loads the filter; None when the training graphs were not pruned)."""
        if self.exported_model is not None:
            from domainpar.export.runtime import load_exported

            exported = load_exported(self.exported_model)
            return exported.prune if exported.filter_stage is not None else None
        return None if self.edge_filter is None else self.edge_filter.apply


def _recorded_build(source: Path, edge_filter: Path | None, node_features: int, graph_meta: dict | None) -> tuple[GraphConfig, Any]:
    """The GraphConfig that rebuilds a checkpoint's training graphs from raw events, and its edge filter (loaded).

    The checkpoint records how its training graphs were built; without that record (older checkpoints) the
    default cuts are used, with the legacy cell features when the model's input width asks for them.

    Raises:
        DomainparError: a record that is not a build configuration, a filter missing or not the recorded one.
    """
    from domainpar.filter.edge_filter import load_filter

    build = None if not graph_meta else graph_meta.get("build_config")
    if build is None:
        if edge_filter is not None:
            raise DomainparError(
                f"--filter {edge_filter}: the model was trained on unfiltered graphs (its checkpoint records no edge filter)"
            )
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
        if edge_filter is not None:
            raise DomainparError(
                f"--filter {edge_filter}: the model was trained on unfiltered graphs (its checkpoint records no edge filter)"
            )
        return graph_config, None
    if edge_filter is None:
        raise DomainparError(
            f"{source}: the model was trained on graphs pruned by an edge filter (hash {recorded_filter.get('hash')}); "
            "pass its filter file with --filter (filter.pt of the recipe run) or evaluate graph files built with it"
        )
    loaded = load_filter(edge_filter)
    if loaded.content_hash != recorded_filter.get("hash"):
        raise DomainparError(
            f"--filter {edge_filter}: expected the edge filter the model was trained with (hash {recorded_filter.get('hash')}), "
            f"got hash {loaded.content_hash}"
        )
    return graph_config, loaded


def filter_hash_of(build_config: str | None) -> str | None:
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




def pruned_like_training(path: Path, graph: EventGraph, wanted: str | None, prune, what: str) -> EventGraph:
    """A graph file as the model's training graphs were: pruned by their edge filter (``wanted`` hash) when they were.

    A file already pruned by that filter is used as is; an unpruned one is pruned with ``prune`` (the filter of
    ``--filter``, or the exported pipeline's); anything else is one line.
    """
    found = filter_hash_of(graph.build_config)
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




@dataclass(frozen=True)
class BuiltGraph:
    """One event's graph as the model reads it, with what building it took."""

    graph: EventGraph
    """The graph, pruned by the pipeline's edge filter."""
    num_edges_built: int
    """Edges before the filter."""
    seconds_build: float
    """Graph construction (segments, features)."""
    seconds_filter: float
    """The edge filter."""


def build_event_graph(
    stage: RawStage,
    prune: Prune | None,
    hits: pd.DataFrame,
    cells: pd.DataFrame | None,
    event_id: int,
    source: str,
    truth: pd.DataFrame | None = None,
    particles: pd.DataFrame | None = None,
) -> BuiltGraph:
    """Raw hits (and cells) → the model's graph: built with the recorded cuts and features, pruned, checked.

    Args:
        stage: the pipeline's :class:`RawStage`.
        prune: its pruning function (``stage.prune()``, loaded once per process).
        hits, cells: the event's hits and cells (cells None when the features need none).
        event_id: stored in the graph.
        source: the event in messages.
        truth, particles: with truth (evaluate), the graph carries labels; the edges and features do not change.

    Raises:
        DomainparError: a cut that needs truth (``min_pt``) without truth, or features that are not the model's.
    """
    config = stage.graph_config
    if truth is None and config.min_pt > 0:
        raise DomainparError(
            f"{source}: the model's training graphs kept only hits of particles above {config.min_pt:g} GeV by their "
            "truth (graph min_pt), a cut no event without truth can be given; run a model trained on all hits"
        )
    started = time.perf_counter()
    graph, _ = build_graph(hits, truth, particles, cells if config.needs_cells else None, config=config, event_id=event_id)
    built = time.perf_counter()
    num_edges_built = graph.num_edges
    if prune is not None:
        graph = prune(graph)
    filtered = time.perf_counter()
    check_model_inputs(graph, source, stage.node_features, stage.graph_meta, stage.whose)
    return BuiltGraph(graph, num_edges_built, built - started, filtered - built)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Edge scores (probabilities) of logits, without overflow."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(logits, dtype=np.float64)))


def event_logits(pipeline: Pipeline, graph: EventGraph, source: str | None = None) -> np.ndarray:
    """(E,) float64 edge logits of one graph in this process (the checkpoint's model, or the exported file)."""
    from domainpar.inference.infer import infer_exported, infer_single

    if pipeline.exported is not None:
        pipeline.exported.check_widths(source or f"event {graph.event_id}", graph.x.shape[1], graph.edge_attr.shape[1])
        return infer_exported(pipeline.exported, graph)
    return infer_single(pipeline.loaded, graph)


def event_tracks(config: TrackConfig, graph: EventGraph, scores: np.ndarray, event_hit_id: np.ndarray | None = None) -> tuple[TrackCandidates, np.ndarray]:
    """Track candidates of a graph and the track id of every hit of its event.

    Args:
        config: the pipeline's track builder.
        graph: the scored graph.
        scores: (E,) edge scores (probabilities).
        event_hit_id: (M,) every hit id of the event (None: the graph's nodes are the event's hits).

    Returns:
        ``(candidates, track_id)``: track_id (M,) aligned with ``event_hit_id`` (hits the graph left out are
        singletons numbered after the graph's candidates).
    """
    candidates = build_candidates(graph.pos, graph.layer, graph.edge_index, scores, config)
    if event_hit_id is None:
        return candidates, candidates.track_id
    return candidates, complete_tracks(event_hit_id, graph.hit_id, candidates.track_id)


def producer(pipeline: Pipeline, command: str) -> dict:
    """The record of what produced an output: the command, the version, and the pipeline."""
    return {"producer": command, "domainpar": __version__, **pipeline.record()}


__all__ = [
    "BuiltGraph",
    "Pipeline",
    "RawStage",
    "build_event_graph",
    "event_logits",
    "event_tracks",
    "load_pipeline",
    "pipeline_digest",
    "producer",
    "sigmoid",
]
