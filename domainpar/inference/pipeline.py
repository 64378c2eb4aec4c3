"""A trained tracker restored for inference: :class:`Pipeline`, and the records that decide how it runs.

A pipeline is a checkpoint (plus the edge filter its training graphs were pruned with) or an exported
TorchScript/ONNX model with its sidecar; :func:`load_pipeline` restores it once from a
:class:`~domainpar.inference.spec.PipelineSpec`. The rule is one: **the checkpoint's records decide**. What the
checkpoint (or the sidecar) records about its training (how raw events were built into graphs, which edge filter
pruned them, the working point, the track builder) is how every command treats every event; an option only
overrides the threshold or the builder when given, and a filter file must be the recorded one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from domainpar import __version__
from domainpar.data.graph import CELL_FEATURES, GraphConfig
from domainpar.errors import DomainparError, shorten
from domainpar.inference.graphs import GraphStage, filter_hash_of
from domainpar.inference.spec import PipelineSpec
from domainpar.parsing import parse_json
from domainpar.tracks.config import TrackConfig, recorded_tracks
from domainpar.tracks.methods import DEFAULT_METHOD, METHODS


@dataclass(frozen=True)
class Pipeline:
    """A trained tracker restored for inference: model, what its training graphs were, threshold and track builder."""

    spec: PipelineSpec
    """What was asked (model, filter, options, partitioning)."""
    loaded: Any
    """The restored checkpoint (:class:`~domainpar.inference.model_io.LoadedModel`), None for an exported model."""
    exported: Any
    """The exported pipeline (:class:`~domainpar.export.runtime.ExportedModel`), None for a checkpoint."""
    graphs: GraphStage
    """How events become the model's graphs (the recorded build and filter, the model's inputs)."""
    threshold: float
    """Edge score cut (probability) of the working point and the track builder."""
    tracks: TrackConfig
    """How tracks are built from the edge scores (method, threshold, fit settings)."""
    step: int | None
    """Optimiser steps of the checkpoint the model comes from."""

    def record(self) -> dict:
        """What makes this pipeline's outputs what they are (the model's digest, the build, the filter, the tracks),
        JSON-ready; :func:`pipeline_digest` of it names the pipeline in every output."""
        common = {"threshold": self.threshold, "tracks": asdict(self.tracks)}
        if self.exported is not None:
            source = self.exported.sidecar.get("source", {})
            return {"model": str(self.spec.model), "model_sha256": self.exported.sidecar["model"]["sha256"],
                    "model_format": self.exported.format, "checkpoint": source.get("checkpoint"),
                    "checkpoint_sha256": source.get("sha256"), "checkpoint_step": self.step,
                    "edge_filter_hash": self.graphs.filter_hash, **common}  # fmt: skip
        build = None if self.graphs.graph_config is None else self.graphs.graph_config.to_dict()
        return {"checkpoint": str(self.spec.checkpoint), "checkpoint_sha256": self.loaded.sha256, "checkpoint_step": self.step,
                "model_name": self.loaded.model_config.name, "graph_build": build,
                "edge_filter_hash": self.graphs.filter_hash, **common}  # fmt: skip

    def producer(self, command: str, **extra: Any) -> dict:
        """The record of what produced an output: the command, the version, the pipeline (and ``extra``)."""
        return {"producer": command, "domainpar": __version__, **self.record(), **extra}


def pipeline_digest(record: dict) -> str:
    """A short digest of a pipeline record's settings (paths left out: a moved model is the same model)."""
    settings = {k: v for k, v in record.items() if k not in ("checkpoint", "model")}
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def load_pipeline(spec: PipelineSpec) -> Pipeline:
    """Restore the pipeline of ``spec``: its model, and what its records say about graphs, filter, threshold, tracks.

    Raises:
        DomainparError: a missing or damaged file, or one of another pipeline (named).
    """
    if spec.model is not None:
        return _load_exported(spec)
    from domainpar.inference.model_io import load_model

    loaded = load_model(spec.checkpoint)
    whose = "the checkpoint's model"
    graph_config, recorded_filter = _recorded_build(spec.checkpoint, loaded.model_config.node_features, loaded.graph)
    edge_filter = None if spec.edge_filter is None else _checked_filter(spec.edge_filter, recorded_filter)
    graphs = GraphStage(graph_config, None, recorded_filter, edge_filter, None, loaded.model_config.node_features,
                        loaded.graph, whose)  # fmt: skip
    threshold = spec.threshold if spec.threshold is not None else (loaded.threshold or 0.5)
    method = spec.track_method or loaded.track_method or DEFAULT_METHOD
    tracks = recorded_tracks(method, threshold, loaded.track_settings, f"{spec.checkpoint}: config.run.track_settings")
    return Pipeline(spec, loaded, None, graphs, threshold, tracks, loaded.step)


def _load_exported(spec: PipelineSpec) -> Pipeline:
    from domainpar.export.runtime import load_exported
    from domainpar.export.sidecar import feature_names, sidecar_path

    exported = load_exported(spec.model)
    sidecar = exported.sidecar
    # The sidecar names the model's input columns: graph files of other features are refused by name too.
    graph_meta = {
        "node_features": feature_names(sidecar["node_features"]),
        "edge_features": feature_names(sidecar["edge_features"]) if exported.num_edge_features else None,
        "build_config": None,
    }
    try:
        graph_config, no_build = exported.graph_config(), None
    except DomainparError as exc:
        graph_config, no_build = None, str(exc)
    graphs = GraphStage(graph_config, no_build, exported.filter_hash, None, Path(spec.model), exported.num_node_features,
                        graph_meta, f"model {Path(spec.model).name}")  # fmt: skip
    threshold = spec.threshold if spec.threshold is not None else exported.threshold
    # The sidecar's record of the training run's builder (older sidecars have none: the default).
    recorded = sidecar.get("tracks") or {}
    method = spec.track_method or (recorded.get("method") if recorded.get("method") in METHODS else None) or DEFAULT_METHOD
    tracks = recorded_tracks(method, threshold, recorded.get("settings"), f"{sidecar_path(spec.model)}: tracks.settings")
    return Pipeline(spec, None, exported, graphs, threshold, tracks, sidecar.get("source", {}).get("step"))


def _recorded_build(source: Path, node_features: int, graph_meta: dict | None) -> tuple[GraphConfig, str | None]:
    """The GraphConfig that rebuilds a checkpoint's training graphs from raw events, and the hash of the edge filter
    that pruned them (None: not pruned).

    The checkpoint records how its training graphs were built; without that record (older checkpoints) the
    default cuts are used, with the legacy cell features when the model's input width asks for them.

    Raises:
        DomainparError: a record that is not a build configuration.
    """
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
    return graph_config, filter_hash_of(build)


def _checked_filter(path: Path, recorded: str | None):
    """The edge filter at ``path``, loaded, when it is the one the model's training graphs were pruned with.

    Raises:
        DomainparError: the model was trained on unpruned graphs, or the filter is another one.
    """
    from domainpar.filter.edge_filter import load_filter

    loaded = load_filter(path)
    if recorded is None:
        raise DomainparError(
            f"--filter {path}: expected the edge filter the model was trained with; the model was trained on graphs that "
            "were not pruned (its checkpoint records no edge filter)"
        )
    if loaded.content_hash != recorded:
        raise DomainparError(
            f"--filter {path}: expected the edge filter the model was trained with (hash {recorded}), got hash {loaded.content_hash}"
        )
    return loaded


__all__ = ["Pipeline", "load_pipeline", "pipeline_digest"]
