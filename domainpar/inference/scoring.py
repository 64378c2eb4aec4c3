"""Judging one event's edge scores (edge metrics, tracks, TrackML score, tracking figures) and summing events.

Aggregation over events: edge efficiency and purity, tracking efficiency, fake and duplicate rates from summed
counts, ROC AUC exact over all edges of all events together, and the TrackML score as the mean of the per-event
scores (as the challenge ranked submissions).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from domainpar.data.event_graph import EventGraph
from domainpar.inference.events import PreparedEvent
from domainpar.inference.runner import EventResult
from domainpar.inference.spec import EvaluateConfig
from domainpar.tracks.candidates import build_candidates
from domainpar.tracks.free_pass import cluster_lengths
from domainpar.tracks.layout import TrackCandidates
from domainpar.tracks.config import TrackConfig
from domainpar.tracks.efficiency import (
    TrackingMetrics,
    binned_efficiencies,
    edge_metrics,
    efficiency_at_purity,
    roc_auc,
    tracking_metrics,
)
from domainpar.tracks.losses import ParticleLosses, losses_vs_pt, particle_losses
from domainpar.tracks.methods import METHODS as TRACK_METHODS
from domainpar.tracks.score import score_arrays
from domainpar.tracks.submission import complete_tracks, submission


@dataclass
class EventEvaluation:
    """One event through the chain, judged against its truth."""

    result: EventResult
    """The event's logits, scores and tracks, exactly as a reconstruction gets them."""
    record: dict
    """JSON record of the event (see :func:`~domainpar.inference.evaluation.evaluate`)."""
    tracking: TrackingMetrics
    """Track-level figures and per-particle match flags."""
    losses: ParticleLosses | None = None
    """Every particle's first lost stage (``evaluate --losses``: the event prepared with its segments); else None."""
    seconds_losses: float = 0.0
    """Wall time of finding them, preparing the event's segments included."""

    @property
    def event(self) -> PreparedEvent:
        """What was scored (its source, the file's format, the edges a filter kept)."""
        return self.result.event

    @property
    def event_id(self) -> int:
        return self.result.event.event_id

    @property
    def graph(self) -> EventGraph:
        """The event graph scored."""
        return self.result.event.graph

    @property
    def logits(self) -> np.ndarray:
        """(E,) edge logits."""
        return self.result.logits

    @property
    def scores(self) -> np.ndarray:
        """(E,) sigmoid probabilities."""
        return self.result.scores

    @property
    def candidates(self) -> TrackCandidates:
        """The track candidates (hits in order, helix fits)."""
        return self.result.candidates

    @property
    def track_id(self) -> np.ndarray:
        """(N,) track of every graph node."""
        return self.result.candidates.track_id

    @property
    def edge_mask(self) -> np.ndarray:
        """(E,) edges that joined hits into tracks."""
        return self.result.candidates.edge_mask

    @property
    def submission(self) -> pd.DataFrame:
        """The TrackML submission of the event (every hit of the event when its raw truth is known)."""
        event = self.result.event
        return submission(event.event_id, event.event_hit_id, self.result.track_id)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def judge(result: EventResult, config: EvaluateConfig, tracks: TrackConfig) -> EventEvaluation:
    """Edge metrics, tracks of every builder, TrackML score and tracking metrics of one event.

    Args:
        result: the event through the chain (its ``event.truth`` set).
        config: the evaluation's settings (reconstructable particles, track candidates).
        tracks: the pipeline's track builder (the one ``result`` was built with); the other builders are scored
            beside it at the same threshold.
    """
    event, graph, truth = result.event, result.event.graph, result.event.truth
    threshold = tracks.threshold
    edges = edge_metrics(result.scores, graph.y, threshold)
    tracks_by_method = {tracks.method: result.track_id}
    for method in TRACK_METHODS:
        if method != tracks.method:
            other = build_candidates(
                graph.pos, graph.layer, graph.edge_index, result.scores, replace(tracks, method=method), cluster_lengths(graph)
            )
            tracks_by_method[method] = complete_tracks(event.event_hit_id, graph.hit_id, other.track_id)
    track_scores = {
        method: None if truth.weight is None else score_arrays(full, truth.particle_id, truth.weight).score
        for method, full in tracks_by_method.items()
    }
    tracking = tracking_metrics(
        result.track_id, truth.particle_id, truth.layer, truth.particles,
        pt_min=config.pt_min, min_layers=config.min_layers, min_track_hits=config.min_track_hits,
    )  # fmt: skip
    record = {
        "event_id": graph.event_id,
        "source": str(event.source.path),
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "num_true_edges": edges.num_true,
        "num_predicted_edges": edges.num_predicted,
        "num_true_positive_edges": edges.num_true_positive,
        **_pt1_edges(graph, result.scores > threshold, config.pt_min),
        "efficiency": edges.efficiency,
        "purity": edges.purity,
        "auc": edges.auc,
        "trackml_score": track_scores[tracks.method],
        "seconds_tracks": result.candidates.seconds,
        "seconds_tracks_compiling": result.candidates.seconds_compiling,
        **{f"trackml_score_{method}": track_scores[method] for method in TRACK_METHODS},
        **tracking.summary(),
        **result.partition,
    }
    evaluation = EventEvaluation(result=result, record={k: _clean(v) for k, v in record.items()}, tracking=tracking)
    if event.segments is not None:
        started = time.perf_counter()
        evaluation.losses = particle_losses(event.segments, graph.particle_id, graph.edge_index, result.scores,
                                            truth.particle_id, tracking, tracks.follow_threshold, threshold)  # fmt: skip
        evaluation.seconds_losses = event.seconds.get("segments", 0.0) + time.perf_counter() - started
    return evaluation


def _pt1_edges(graph: EventGraph, predicted: np.ndarray, pt_min: float) -> dict:
    """True edges of particles above ``pt_min`` and how many of them are predicted (None without particle pT)."""
    if graph.y is None or graph.particle_pt is None:
        return {"num_true_edges_pt1": None, "num_true_positive_edges_pt1": None}
    target = (np.asarray(graph.y) > 0.5) & (np.asarray(graph.particle_pt)[graph.edge_index[0]] > pt_min)
    return {"num_true_edges_pt1": int(target.sum()), "num_true_positive_edges_pt1": int((target & predicted).sum())}


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def _total_or_none(records: list[dict], key: str) -> int | None:
    values = [r.get(key) for r in records]
    return None if not values or any(v is None for v in values) else sum(values)


def _at_purity(scores: np.ndarray, labels: np.ndarray, floor: float = 0.90) -> dict:
    """The best edge efficiency of any cut of purity >= ``floor``, its purity and cut (pooled over the events)."""
    if not scores.size:
        return {"efficiency_at_purity90": None, "purity_at_purity90": None, "cut_at_purity90": None}
    efficiency, purity, cut = efficiency_at_purity(scores, labels, floor)
    return {"efficiency_at_purity90": _clean(efficiency), "purity_at_purity90": _clean(purity), "cut_at_purity90": _clean(cut)}


def summarise(
    evaluations: list[EventEvaluation], pt_min: float = 1.0, min_layers: int = 3, tracks: TrackConfig | None = None
) -> dict:
    """Overall figures of several events (aggregation rules in the module docstring; binned efficiencies pooled).

    With the events' losses (``evaluate --losses``) and ``tracks`` (the builder that made the tracks), also
    ``losses_vs_pt`` (:func:`~domainpar.tracks.losses.losses_vs_pt`, pooled) and ``seconds_losses``.
    """
    records = [e.record for e in evaluations]
    total = lambda key: sum(r[key] for r in records)  # noqa: E731
    scores = np.concatenate([e.scores for e in evaluations]) if evaluations else np.zeros(0)
    all_labels = np.concatenate([e.graph.y for e in evaluations]) if evaluations else np.zeros(0)
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
        "efficiency_pt1": _ratio(_total_or_none(records, "num_true_positive_edges_pt1"), _total_or_none(records, "num_true_edges_pt1")),
        **_at_purity(scores, all_labels),
        "tracking_efficiency": _ratio(total("num_matched"), total("num_reconstructable")),
        "perfect_efficiency": _ratio(total("num_perfect"), total("num_reconstructable")),
        "fake_rate": _ratio(total("num_fakes"), total("num_candidates")),
        "duplicate_rate": _ratio(total("num_duplicates"), total("num_candidates")),
        **{f"trackml_score_{method}": value for method, value in mean_score.items()},
        "seconds_tracks_max": max((r["seconds_tracks"] for r in records), default=None),
        "seconds_tracks_compiling": sum(r["seconds_tracks_compiling"] for r in records),
        **binned_efficiencies([e.tracking for e in evaluations], pt_min=pt_min, min_layers=min_layers),
    }
    if evaluations and tracks is not None and all(e.losses is not None for e in evaluations):
        summary["losses_vs_pt"] = losses_vs_pt([e.losses for e in evaluations], tracks.follow_threshold, tracks.threshold,
                                               pt_min=pt_min, min_layers=min_layers)  # fmt: skip
        summary["seconds_losses"] = sum(e.seconds_losses for e in evaluations)
    return summary

