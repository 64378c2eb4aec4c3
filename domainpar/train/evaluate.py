"""Evaluate a trained edge classifier on whole events: edges, tracks, TrackML score.

For every event: the model scores every edge of the event graph — in one
process, or split into ``num_parts`` parts run by as many local processes
with the same halo exchange as training, so an event too large for one
device can be scored — then tracks are built from the edge scores
(:mod:`domainpar.tracks.build`) and judged against the truth
(:mod:`domainpar.tracks.score`, :mod:`domainpar.tracks.efficiency`).

Partitioned inference is exact: every global edge is *owned* by one part,
which computes it with complete halo inputs, so its logit equals the
single-process one up to float summation order; the scores, tracks and
figures do not depend on ``num_parts`` (``tests/test_evaluate.py``).

Inputs: raw TrackML event directories (graphs are built with the default
:class:`~domainpar.data.graph.GraphConfig`, the truth gives the TrackML
weights and the particles file the particle pT/eta), or graph files with
labels (``domainpar build`` output). Graph files carry no hit weights: the
TrackML score of a graph input needs its raw event (``events_dir``), else it
is reported as None, and particle eta is then estimated from the hits.

Aggregation over events: edge efficiency and purity from summed counts, ROC
AUC exact over all edges of all events together, tracking efficiency, fake
and duplicate rates from summed counts, and the TrackML score as the mean of
the per-event scores (as the challenge ranked submissions).
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from domainpar.data.event_graph import EventGraph, graph_files, load_graph, save_graph
from domainpar.errors import DomainparError
from domainpar.tracks.build import METHODS as TRACK_METHODS
from domainpar.tracks.build import build_tracks, complete_tracks, selected_edges, submission
from domainpar.tracks.efficiency import ParticleTable, TrackingMetrics, edge_metrics, roc_auc, tracking_metrics
from domainpar.tracks.score import score_arrays

#: Partitioners usable for partitioned inference.
PARTITION_METHODS = ("metis", "geometric")


@dataclass(frozen=True)
class EvaluateConfig:
    """What ``domainpar evaluate`` does."""

    checkpoint: Path
    """A checkpoint (``checkpoints/step-*.pt``) or final ``model.pt`` of ``domainpar train``."""
    data: Path
    """A directory of raw TrackML events with truth, a graph file, or a directory of graph files with labels."""
    num_parts: int = 1
    """Parts per event; > 1 runs that many local processes with halo exchange."""
    method: str = "metis"
    """Partitioner for num_parts > 1: metis or geometric."""
    threshold: float | None = None
    """Edge score cut (sigmoid probability); None: the checkpoint's training threshold, else 0.5."""
    track_method: str = "walk"
    """Track building: components or walk (see :mod:`domainpar.tracks.build`)."""
    events_dir: Path | None = None
    """Raw events holding the truth of graph inputs (for the TrackML score); None for raw inputs."""
    pt_min: float = 1.0
    """Reconstructable particles have pT above this (GeV)."""
    min_layers: int = 3
    """Reconstructable particles hit at least this many distinct layers."""
    min_track_hits: int = 3
    """Tracks with fewer hits are not candidates for the fake and duplicate rates."""
    seed: int = 0
    """METIS seed."""
    timeout_s: float = 1800.0
    """Wall-clock limit of the partitioned inference job (and its process-group timeout)."""
    progress: bool = True
    """Show progress bars."""

    def __post_init__(self) -> None:
        if not isinstance(self.num_parts, int) or self.num_parts < 1:
            raise DomainparError(f"--parts must be a positive integer (got {self.num_parts!r})")
        if self.method not in PARTITION_METHODS:
            raise DomainparError(f"--method must be one of {', '.join(PARTITION_METHODS)} (got {self.method!r})")
        if self.threshold is not None and not (0.0 < self.threshold < 1.0):
            raise DomainparError(f"--threshold must be in (0, 1) (got {self.threshold})")
        if self.track_method not in TRACK_METHODS:
            raise DomainparError(f"--tracks must be one of {', '.join(TRACK_METHODS)} (got {self.track_method!r})")
        if not (self.timeout_s > 0):
            raise DomainparError(f"--timeout must be positive seconds (got {self.timeout_s})")
        if not (self.pt_min >= 0):
            raise DomainparError(f"pt_min must be non-negative (got {self.pt_min})")


# ----------------------------------------------------------------------------- model


@dataclass(frozen=True)
class LoadedModel:
    """A model restored from a checkpoint."""

    model: torch.nn.Module
    """The InteractionNetwork in eval mode, on CPU."""
    dtype: torch.dtype
    """Parameter dtype (float32, or float64 for fp64 runs); inputs are cast to it."""
    threshold: float | None
    """The training run's threshold, when the checkpoint records one."""
    step: int | None
    """Optimiser steps of the checkpoint."""


def load_model(path: str | os.PathLike) -> LoadedModel:
    """Restore the model of a ``domainpar train`` checkpoint or ``model.pt`` (``weights_only=True``).

    Raises:
        DomainparError: missing/corrupted file, not a domainpar checkpoint, or weights that do not fit.
    """
    from domainpar.model.interaction_network import InteractionNetwork, ModelConfig
    from domainpar.train.checkpoint import CHECKPOINT_FORMAT_VERSION, read_checkpoint_file

    path = Path(path)
    state = read_checkpoint_file(path)
    if not isinstance(state, dict) or "model" not in state or "model_config" not in state:
        found = sorted(state)[:8] if isinstance(state, dict) else type(state).__name__
        raise DomainparError(f"{path}: expected a domainpar checkpoint with 'model' and 'model_config' entries (got {found})")
    version = state.get("format_version")
    if version != CHECKPOINT_FORMAT_VERSION:
        raise DomainparError(f"{path}: checkpoint format version must be {CHECKPOINT_FORMAT_VERSION} (got {version})")
    model_config = ModelConfig.from_dict(dict(state["model_config"]))
    # Inference never needs activation checkpointing; overlap is exact either way.
    model_config = ModelConfig.from_dict({**model_config.to_dict(), "checkpointing": False})
    model = InteractionNetwork(model_config)
    weights = state["model"]
    floating = [v.dtype for v in weights.values() if torch.is_tensor(v) and v.is_floating_point()]
    dtype = floating[0] if floating else torch.float32
    model = model.to(dtype=dtype)
    try:
        model.load_state_dict(weights)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0]
        raise DomainparError(f"{path}: checkpoint weights do not fit its model_config ({first})") from None
    model.eval()
    threshold = None
    config = state.get("config")
    if isinstance(config, dict) and isinstance(config.get("run"), dict) and "threshold" in config["run"]:
        threshold = float(config["run"]["threshold"])
    step = int(state["step"]) if "step" in state else None
    return LoadedModel(model=model, dtype=dtype, threshold=threshold, step=step)


def infer_single(loaded: LoadedModel, graph: EventGraph) -> np.ndarray:
    """(E,) float64 logits of every edge of ``graph`` in one process (identity exchange)."""
    from domainpar.model.exchange import IdentityExchange
    from domainpar.partition.local_graph import local_graph
    from domainpar.partition.plan import build_plan

    plan = build_plan(graph.edge_index, np.zeros(graph.num_nodes, dtype=np.int64), 1, y=graph.y)
    local = local_graph(graph, plan.parts[0]).to("cpu", loaded.dtype)
    with torch.no_grad():
        logits = loaded.model(local, IdentityExchange())
    result = np.empty(graph.num_edges, dtype=np.float64)
    result[local.edge_ids.numpy()] = logits.double().numpy()
    return result


def _partitioned_worker(
    rank: int, world_size: int, checkpoint: str, graph_paths: list[str], owner_paths: list[str]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """One rank of partitioned inference: (owned global edge ids, their logits) per event."""
    from domainpar.comm.halo import HaloExchange
    from domainpar.partition.local_graph import local_graph
    from domainpar.partition.plan import build_plan

    loaded = load_model(checkpoint)
    results = []
    for graph_path, owner_path in zip(graph_paths, owner_paths):
        graph = load_graph(graph_path)
        with np.load(owner_path, allow_pickle=False) as npz:
            owner = npz["owner"]
        plan = build_plan(graph.edge_index, owner, world_size, y=graph.y, graph_hash=graph.content_hash())
        part = plan.parts[rank]
        local = local_graph(graph, part).to("cpu", loaded.dtype)
        exchange = HaloExchange(part, None, torch.device("cpu"))
        with torch.no_grad():
            logits = loaded.model(local, exchange)
        owned = local.edge_owned
        results.append((local.edge_ids[owned].numpy().copy(), logits[owned].double().numpy().copy()))
    return results


def infer_partitioned(
    checkpoint: Path,
    graphs: list[EventGraph],
    num_parts: int,
    method: str,
    seed: int = 0,
    timeout_s: float = 1800.0,
) -> tuple[list[np.ndarray], list[dict]]:
    """Logits of every event, each event split into ``num_parts`` parts on as many spawned processes.

    The parent partitions every event once (so all ranks use the same owners)
    and writes graphs and owners to a private temporary directory; rank p
    computes part p with halo exchange and returns the logits of the edges it
    owns, which are scattered back to global edge ids here.

    Returns:
        ``(logits, partition_records)``: (E,) float64 logits per event, and per
        event the partition's cut and halo sizes.
    """
    from domainpar.partition import partition_graph
    from domainpar.train.launch import SpawnError, spawn

    records = []
    with tempfile.TemporaryDirectory(prefix="domainpar-evaluate-") as tmp:
        graph_paths, owner_paths = [], []
        for index, graph in enumerate(graphs):
            try:
                plan = partition_graph(graph, num_parts, method=method, seed=seed)
            except DomainparError as exc:
                raise DomainparError(f"--parts {num_parts}: event {graph.event_id}: {exc}") from None
            graph_path = Path(tmp) / f"graph{index}.npz"
            owner_path = Path(tmp) / f"owner{index}.npz"
            save_graph(graph, graph_path)
            np.savez(owner_path, owner=plan.owner)
            graph_paths.append(str(graph_path))
            owner_paths.append(str(owner_path))
            records.append(
                {
                    "num_cut_edges": plan.num_cut_edges,
                    "num_halo_nodes": int(sum(p.num_halo for p in plan.parts)),
                    "max_local_edges": int(max(p.num_local_edges for p in plan.parts)),
                }
            )
        threads = max(1, (os.cpu_count() or 1) // num_parts)
        try:
            per_rank = spawn(
                _partitioned_worker,
                num_parts,
                (str(checkpoint), graph_paths, owner_paths),
                timeout_s=timeout_s,
                backend="gloo",
                num_threads=threads,
            )
        except SpawnError as exc:
            raise DomainparError(
                f"partitioned inference failed on rank(s) {exc.ranks}: "
                + (exc.traceback_text.strip().splitlines()[-1] if exc.traceback_text else str(exc).splitlines()[0])
            ) from exc
    all_logits = []
    for index, graph in enumerate(graphs):
        logits = np.full(graph.num_edges, np.nan)
        seen = np.zeros(graph.num_edges, dtype=np.int64)
        for rank_results in per_rank:
            edge_ids, values = rank_results[index]
            logits[edge_ids] = values
            seen[edge_ids] += 1
        if not (seen == 1).all():
            raise RuntimeError(
                f"event {graph.event_id}: partitioned inference must own every edge once "
                f"(got {int((seen == 0).sum())} unowned, {int((seen > 1).sum())} owned twice)"
            )
        all_logits.append(logits)
    return all_logits, records


# ----------------------------------------------------------------------------- events


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


def _raw_truth(prefix: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    from domainpar.data.trackml import load_event

    hits, particles, truth = load_event(prefix, parts=("hits", "particles", "truth"))
    return hits, particles, truth


def _attach_truth(event: EventInput, hits: pd.DataFrame, particles: pd.DataFrame, truth: pd.DataFrame) -> None:
    from domainpar.data.detector import layer_index_of

    order = np.argsort(truth["hit_id"].to_numpy())
    truth = truth.iloc[order].reset_index(drop=True)
    hits = hits.set_index("hit_id").loc[truth["hit_id"].to_numpy()]
    event.truth = truth[["hit_id", "particle_id", "weight"]]
    event.layer = layer_index_of(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy())
    event.particles = ParticleTable.from_momenta(particles["particle_id"], particles["px"], particles["py"], particles["pz"])


def load_events(config: EvaluateConfig, node_features: int) -> list[EventInput]:
    """The events at ``config.data``: graphs built from raw events, or graph files (+ optional raw truth)."""
    from tqdm import tqdm

    data = Path(config.data)
    raw = data.is_dir() and any(data.glob("event*-hits.csv*"))
    events: list[EventInput] = []
    if raw:
        from domainpar.data.graph import CELL_FEATURES, GraphConfig, build_graph
        from domainpar.data.trackml import event_id_of, event_prefixes, has_truth, load_event

        cell_features = node_features == 3 + len(CELL_FEATURES)
        for prefix in tqdm(event_prefixes(data), desc="building graphs", unit="event", disable=not config.progress):
            if not has_truth(prefix):
                raise DomainparError(f"{prefix}: evaluation needs the truth file (found none: a test-set event?)")
            parts = ("hits", "particles", "truth") + (("cells",) if cell_features else ())
            frames = load_event(prefix, parts=parts)
            hits, particles, truth = frames[:3]
            graph, _ = build_graph(
                hits, truth, particles, frames[3] if cell_features else None,
                config=GraphConfig(cell_features=cell_features), event_id=event_id_of(prefix),
            )  # fmt: skip
            event = EventInput(graph=graph, source=str(prefix))
            _attach_truth(event, hits, particles, truth)
            events.append(event)
        return events
    if not (data.is_file() or (data.is_dir() and any(data.glob("*.npz")))):
        raise DomainparError(
            f"{data}: expected raw TrackML events (event*-hits.csv[.gz]) or graph files (*.npz), found neither"
        )
    if config.events_dir is not None and not Path(config.events_dir).is_dir():
        raise DomainparError(f"--events {config.events_dir}: expected a directory of raw TrackML events (found none)")
    first_source: dict[int, Path] = {}
    for path in graph_files(data):
        graph = load_graph(path)
        if graph.event_id in first_source:
            # Per-event records, submissions and plots are keyed by event id; a repeat would count the event twice.
            raise DomainparError(
                f"{data}: expected one graph file per event (found event {graph.event_id} in both "
                f"{first_source[graph.event_id].name} and {path.name})"
            )
        first_source[graph.event_id] = path
        if graph.x.shape[1] != node_features:
            raise DomainparError(
                f"{path}: graph has {graph.x.shape[1]} node features but the checkpoint's model expects {node_features} "
                "(build the graphs with the same --cell-features setting as the training graphs)"
            )
        if graph.y is None or graph.particle_id is None or graph.particle_pt is None:
            raise DomainparError(f"{path}: evaluation needs a graph with truth (labels y, particle_id, particle_pt); got none")
        event = EventInput(graph=graph, source=str(path))
        if config.events_dir is not None:
            prefix = Path(config.events_dir) / f"event{graph.event_id:09d}"
            hits, particles, truth = _raw_truth(prefix)
            _attach_truth(event, hits, particles, truth)
        else:
            event.particles = ParticleTable.from_hits(graph.particle_id, graph.particle_pt, graph.pos)
        events.append(event)
    return events


# ----------------------------------------------------------------------------- scoring


@dataclass
class EventEvaluation:
    """Everything computed for one event."""

    event_id: int
    """TrackML event number."""
    graph: EventGraph
    """The event graph scored."""
    record: dict
    """JSON record of the event (see :func:`evaluate`)."""
    logits: np.ndarray
    """(E,) edge logits."""
    scores: np.ndarray
    """(E,) sigmoid probabilities."""
    track_id: np.ndarray
    """(N,) track of every graph node."""
    edge_mask: np.ndarray
    """(E,) edges that joined hits into tracks."""
    tracking: TrackingMetrics
    """Track-level figures and per-particle match flags."""
    submission: pd.DataFrame
    """TrackML submission of the event (every hit of the event when its raw truth is known)."""


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _sigmoid(logits: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * logits))  # overflow-free logistic


def score_event_graph(event: EventInput, logits: np.ndarray, config: EvaluateConfig, threshold: float) -> EventEvaluation:
    """Edge metrics, tracks, TrackML score and tracking metrics of one event."""
    graph = event.graph
    scores = _sigmoid(logits)
    edges = edge_metrics(scores, graph.y, threshold)
    track_scores: dict[str, float | None] = {}
    tracks_by_method: dict[str, np.ndarray] = {}
    for method in TRACK_METHODS:
        tracks_by_method[method] = build_tracks(graph.num_nodes, graph.edge_index, scores, threshold, method=method)
    track_id = tracks_by_method[config.track_method]
    mask = selected_edges(graph.num_nodes, graph.edge_index, scores, threshold, config.track_method)
    if event.truth is not None:
        hit_id = event.truth["hit_id"].to_numpy()
        particle_id = event.truth["particle_id"].to_numpy()
        weight = event.truth["weight"].to_numpy(dtype=np.float64)
        layer = event.layer
        for method, tracks in tracks_by_method.items():
            full = complete_tracks(hit_id, graph.hit_id, tracks)
            track_scores[method] = score_arrays(full, particle_id, weight).score
        full_tracks = complete_tracks(hit_id, graph.hit_id, track_id)
    else:
        hit_id, particle_id, layer = graph.hit_id, graph.particle_id, graph.layer
        track_scores = {method: None for method in TRACK_METHODS}
        full_tracks = track_id
    tracking = tracking_metrics(
        full_tracks, particle_id, layer, event.particles,
        pt_min=config.pt_min, min_layers=config.min_layers, min_track_hits=config.min_track_hits,
    )  # fmt: skip
    record = {
        "event_id": graph.event_id,
        "source": event.source,
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "num_true_edges": edges.num_true,
        "num_predicted_edges": edges.num_predicted,
        "num_true_positive_edges": edges.num_true_positive,
        "efficiency": edges.efficiency,
        "purity": edges.purity,
        "auc": edges.auc,
        "trackml_score": track_scores[config.track_method],
        **{f"trackml_score_{method}": value for method, value in track_scores.items()},
        **tracking.summary(),
    }
    return EventEvaluation(
        event_id=graph.event_id,
        graph=graph,
        record={k: _clean(v) for k, v in record.items()},
        logits=logits,
        scores=scores,
        track_id=track_id,
        edge_mask=mask,
        tracking=tracking,
        submission=submission(graph.event_id, hit_id, full_tracks),
    )


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def summarise(evaluations: list[EventEvaluation], labels: list[np.ndarray]) -> dict:
    """Overall figures of several events (aggregation rules in the module docstring)."""
    records = [e.record for e in evaluations]
    total = lambda key: sum(r[key] for r in records)  # noqa: E731
    scores = np.concatenate([e.scores for e in evaluations]) if evaluations else np.zeros(0)
    all_labels = np.concatenate(labels) if labels else np.zeros(0)
    per_event = {method: [r[f"trackml_score_{method}"] for r in records] for method in TRACK_METHODS}
    mean_score = {
        method: (float(np.mean(values)) if values and all(v is not None for v in values) else None)
        for method, values in per_event.items()
    }
    summary = {
        "num_events": len(records),
        "efficiency": _ratio(total("num_true_positive_edges"), total("num_true_edges")),
        "purity": _ratio(total("num_true_positive_edges"), total("num_predicted_edges")),
        "auc": _clean(roc_auc(scores, all_labels)) if scores.size else None,
        "tracking_efficiency": _ratio(total("num_matched"), total("num_reconstructable")),
        "perfect_efficiency": _ratio(total("num_perfect"), total("num_reconstructable")),
        "fake_rate": _ratio(total("num_fakes"), total("num_candidates")),
        "duplicate_rate": _ratio(total("num_duplicates"), total("num_candidates")),
        **{f"trackml_score_{method}": value for method, value in mean_score.items()},
    }
    return summary


@dataclass
class EvaluationReport:
    """The result of :func:`evaluate`."""

    summary: dict
    """JSON-ready overall figures and settings, with per-event records under ``events``."""
    evaluations: list[EventEvaluation] = field(default_factory=list)
    """Per-event arrays (logits, scores, tracks), for tests and plots."""


def evaluate(config: EvaluateConfig) -> EvaluationReport:
    """Run inference on every event of ``config.data`` and judge edges and tracks.

    Returns:
        The report; ``summary`` has the keys ``efficiency``, ``purity``,
        ``auc``, ``trackml_score``, ``tracking_efficiency``, ``fake_rate``,
        ``duplicate_rate`` (overall), the settings, and ``events`` (one record
        per event with the same figures and counts).
    """
    from tqdm import tqdm

    loaded = load_model(config.checkpoint)
    threshold = config.threshold if config.threshold is not None else (loaded.threshold or 0.5)
    events = load_events(config, loaded.model.config.node_features)
    if not events:
        raise DomainparError(f"{config.data}: found no events to evaluate")
    graphs = [e.graph for e in events]
    start = time.perf_counter()
    partition_records: list[dict] = [{} for _ in graphs]
    if config.num_parts == 1:
        logits = [infer_single(loaded, g) for g in tqdm(graphs, desc="inference", unit="event", disable=not config.progress)]
    else:
        logits, partition_records = infer_partitioned(
            Path(config.checkpoint), graphs, config.num_parts, config.method, config.seed, config.timeout_s
        )
    seconds_inference = time.perf_counter() - start
    evaluations = []
    for event, event_logits, part_record in tqdm(
        list(zip(events, logits, partition_records)), desc="scoring", unit="event", disable=not config.progress
    ):
        evaluation = score_event_graph(event, event_logits, config, threshold)
        evaluation.record.update(part_record)
        evaluations.append(evaluation)
    summary = summarise(evaluations, [g.y for g in graphs])
    summary = {
        "checkpoint": str(config.checkpoint),
        "checkpoint_step": loaded.step,
        "data": str(config.data),
        "num_parts": config.num_parts,
        "method": config.method if config.num_parts > 1 else None,
        "threshold": threshold,
        "track_method": config.track_method,
        **summary,
        "trackml_score": summary[f"trackml_score_{config.track_method}"],
        "seconds_inference": seconds_inference,
        "events": [e.record for e in evaluations],
    }
    return EvaluationReport(summary=summary, evaluations=evaluations)


def write_outputs(
    report: EvaluationReport,
    plots_dir: Path | None = None,
    submissions_dir: Path | None = None,
    pt_min: float = 1.0,
    min_layers: int = 3,
) -> list[Path]:
    """Write submissions (``event<id>-submission.csv``) and plots (PNG) of an evaluation.

    Args:
        report: from :func:`evaluate`.
        plots_dir: directory for ``roc.png``, ``efficiency_purity_vs_pt.png``,
            ``efficiency_purity_vs_eta.png`` and ``event_display_<id>.png``
            (for the first three events).
        submissions_dir: directory for the submission CSVs.
    """
    from domainpar.atomic import atomic_path

    written = []
    if submissions_dir is not None:
        for evaluation in report.evaluations:
            path = Path(submissions_dir) / f"event{evaluation.event_id:09d}-submission.csv"
            with atomic_path(path) as tmp:
                evaluation.submission.to_csv(tmp, index=False)
            written.append(path)
    if plots_dir is not None:
        from domainpar.tracks.plots import EdgeSample, ParticleSample, plot_event_display, plot_performance, plot_roc

        events = [e.graph for e in report.evaluations]
        threshold = report.summary["threshold"]
        scores = np.concatenate([e.scores for e in report.evaluations])
        labels = np.concatenate([g.y for g in events])
        written.append(plot_roc(scores, labels, Path(plots_dir) / "roc.png", threshold, report.summary["auc"]))
        edges = EdgeSample.concatenate(
            [
                EdgeSample.from_graph(g.pos, g.particle_pt, g.edge_index, g.y, e.scores > threshold)
                for g, e in zip(events, report.evaluations)
            ]
        )
        particles = ParticleSample.from_metrics([e.tracking for e in report.evaluations])
        written += plot_performance(particles, edges, plots_dir, pt_min=pt_min, min_layers=min_layers)
        for graph, evaluation in list(zip(events, report.evaluations))[:3]:
            written.append(
                plot_event_display(
                    graph.pos, evaluation.track_id, graph.edge_index, evaluation.edge_mask,
                    Path(plots_dir) / f"event_display_{graph.event_id}.png",
                    title=f"event {graph.event_id}: {report.summary['track_method']} tracks, score > {threshold:g}",
                )  # fmt: skip
            )
    return written
