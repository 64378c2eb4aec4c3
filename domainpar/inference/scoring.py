"""Judging one event's edge scores (edge metrics, tracks, TrackML score, tracking figures) and summing events.

Aggregation over events: edge efficiency and purity from summed counts, ROC
AUC exact over all edges of all events together, tracking efficiency, fake
and duplicate rates from summed counts, and the TrackML score as the mean of
the per-event scores (as the challenge ranked submissions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from domainpar.data.event_graph import EventGraph
from domainpar.inference.config import EvaluateConfig
from domainpar.inference.events import EventInput
from domainpar.inference.pipeline import event_tracks, sigmoid
from domainpar.tracks.build import METHODS as TRACK_METHODS
from domainpar.tracks.build import complete_tracks, submission
from domainpar.tracks.candidates import TrackCandidates, TrackConfig, build_candidates
from domainpar.tracks.efficiency import (
    TrackingMetrics,
    binned_efficiencies,
    edge_metrics,
    efficiency_at_purity,
    roc_auc,
    tracking_metrics,
)
from domainpar.tracks.score import score_arrays


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
    candidates: TrackCandidates | None = None
    """The chosen method's track candidates (hits in order, helix fits)."""
    event: EventInput | None = None
    """What was scored (its source, the file's format, the edges a filter kept), for writing the scores back."""


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def score_event_graph(
    event: EventInput, logits: np.ndarray, config: EvaluateConfig, threshold: float, tracks: TrackConfig | None = None
) -> EventEvaluation:
    """Edge metrics, tracks, TrackML score and tracking metrics of one event.

    ``tracks`` is the pipeline's track builder (default: ``config.track_method`` at ``threshold``).
    """
    graph = event.graph
    scores = sigmoid(logits)
    edges = edge_metrics(scores, graph.y, threshold)
    track_scores: dict[str, float | None] = {}
    tracks_by_method: dict[str, np.ndarray] = {}
    # Every method builds through build_candidates; the chosen one's own wall time is what a reconstruction pays.
    track_config = tracks if tracks is not None else TrackConfig(method=config.track_method, threshold=threshold)
    event_hit_id = None if event.truth is None else event.truth["hit_id"].to_numpy()
    # The candidates and every hit's track id exactly as reconstruct writes them (one pipeline).
    candidates, full_tracks = event_tracks(track_config, graph, scores, event_hit_id)
    track_id, mask, seconds_tracks = candidates.track_id, candidates.edge_mask, candidates.seconds
    tracks_by_method[config.track_method] = track_id
    for method in TRACK_METHODS:
        if method != config.track_method:
            other = TrackConfig(method=method, threshold=threshold)
            tracks_by_method[method] = build_candidates(graph.pos, graph.layer, graph.edge_index, scores, other).track_id
    if event.truth is not None:
        hit_id = event.truth["hit_id"].to_numpy()
        particle_id = event.truth["particle_id"].to_numpy()
        weight = event.truth["weight"].to_numpy(dtype=np.float64)
        layer = event.layer
        for method, tracks in tracks_by_method.items():
            full = complete_tracks(hit_id, graph.hit_id, tracks)
            track_scores[method] = score_arrays(full, particle_id, weight).score
    else:
        hit_id, particle_id, layer = graph.hit_id, graph.particle_id, graph.layer
        track_scores = {method: None for method in TRACK_METHODS}
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
        **_pt1_edges(graph, scores > threshold, config.pt_min),
        "efficiency": edges.efficiency,
        "purity": edges.purity,
        "auc": edges.auc,
        "trackml_score": track_scores[config.track_method],
        "seconds_tracks": seconds_tracks,
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
        candidates=candidates,
        event=event,
    )


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


def summarise(evaluations: list[EventEvaluation], labels: list[np.ndarray], pt_min: float = 1.0, min_layers: int = 3) -> dict:
    """Overall figures of several events (aggregation rules in the module docstring; binned efficiencies pooled)."""
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
        "efficiency_pt1": _ratio(_total_or_none(records, "num_true_positive_edges_pt1"), _total_or_none(records, "num_true_edges_pt1")),
        **_at_purity(scores, all_labels),
        "tracking_efficiency": _ratio(total("num_matched"), total("num_reconstructable")),
        "perfect_efficiency": _ratio(total("num_perfect"), total("num_reconstructable")),
        "fake_rate": _ratio(total("num_fakes"), total("num_candidates")),
        "duplicate_rate": _ratio(total("num_duplicates"), total("num_candidates")),
        **{f"trackml_score_{method}": value for method, value in mean_score.items()},
        "seconds_tracks_max": max((r["seconds_tracks"] for r in records), default=None),
        **binned_efficiencies([e.tracking for e in evaluations], pt_min=pt_min, min_layers=min_layers),
    }
    return summary

