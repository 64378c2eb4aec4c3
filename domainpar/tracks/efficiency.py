"""Edge-level and track-level performance figures (definitions: docs/evaluation.md).

Edge level, at a threshold t (an edge predicted true when its score is strictly above t): efficiency (recall),
purity (precision) and the exact ROC AUC (the Mann–Whitney statistic with average ranks for tied scores, no
sampling or binning).

Track level (hits of particle 0 are noise): a *reconstructable* particle is not noise, hits at least ``min_layers``
(3) distinct layers and has pT strictly above ``pt_min`` (1 GeV); tracking efficiency counts those with a
double-majority track (``perfect_efficiency``: a track of exactly its hits); fake and duplicate rates count the
candidate tracks (at least ``min_track_hits`` (3) hits), whatever the pT. :func:`binned_efficiencies` bins the
efficiencies vs pT (particles on >= ``min_layers`` layers) and vs eta (reconstructable particles).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from domainpar.arrays import member, unique
from domainpar.errors import DomainparError
from domainpar.tracks.score import check_aligned, score_arrays

#: pT bin edges (GeV) of the binned efficiencies: log-spaced, the curling particles below 0.3 GeV in three bins.
PT_BINS = np.array([0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 100.0])
#: eta bin edges of the binned efficiencies.
ETA_BINS = np.linspace(-4.0, 4.0, 17)


# ----------------------------------------------------------------------------- edges


@dataclass(frozen=True)
class EdgeMetrics:
    """Edge classification figures at one threshold."""

    threshold: float
    """Edges with score strictly above it count as predicted true."""
    efficiency: float
    """Recall: true positives / true edges (nan without true edges)."""
    purity: float
    """Precision: true positives / predicted edges (nan without predicted edges)."""
    auc: float
    """Exact ROC AUC (nan unless both classes are present)."""
    num_edges: int
    """Edges scored."""
    num_true: int
    """True edges (label 1)."""
    num_predicted: int
    """Edges predicted true."""
    num_true_positive: int
    """True edges predicted true."""


def _check_scores_labels(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels)
    check_aligned(scores=scores, labels=labels)
    if np.isnan(scores).any():
        raise DomainparError("scores must not contain NaN")
    return scores, labels > 0.5


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Exact area under the ROC curve.

    Args:
        scores: (E,) scores, higher = more likely true.
        labels: (E,) 0/1 (or bool) truth.

    Returns:
        AUC in [0, 1]; nan when only one class is present.
    """
    scores, positive = _check_scores_labels(scores, labels)
    num_pos = int(np.count_nonzero(positive))
    num_neg = positive.size - num_pos
    if num_pos == 0 or num_neg == 0:
        return math.nan
    ranks = average_ranks(scores)
    return float((ranks[positive].sum() - num_pos * (num_pos + 1) / 2.0) / (num_pos * num_neg))


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of ``values`` (E,), ties sharing their average rank: ``scipy.stats.rankdata(values)``'s
    values, without importing scipy.stats (2 CPU-s of every evaluating process's start-up here).

    Returns:
        (E,) float64.
    """
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
    ends = np.append(starts[1:], ordered.size)  # (no values: one empty tie, 0..0, that repeats nothing)
    ranks = np.empty(values.shape, dtype=np.float64)
    # Positions start..end-1 of a tie hold ranks start+1..end: their average is (start + 1 + end) / 2, exact in float64.
    ranks[order] = np.repeat((starts + 1 + ends) / 2.0, ends - starts)
    return ranks


def roc_curve(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ROC curve with one point per distinct score.

    Returns:
        ``(fpr, tpr, thresholds)``, each (K+1,): the point for "score >=
        thresholds[k]" predicted true, starting at (0, 0) with threshold +inf.
        Trapezoidal integration of (fpr, tpr) equals :func:`roc_auc`.
    """
    scores, positive = _check_scores_labels(scores, labels)
    if scores.size == 0:
        return np.zeros(1), np.zeros(1), np.full(1, np.inf)
    order = np.argsort(-scores, kind="stable")
    sorted_scores = scores[order]
    sorted_pos = positive[order]
    distinct_end = np.flatnonzero(np.diff(sorted_scores) != 0)
    ends = np.append(distinct_end, sorted_scores.size - 1)
    tps = np.cumsum(sorted_pos)[ends]
    fps = (ends + 1) - tps
    num_pos = max(int(np.count_nonzero(positive)), 1)
    num_neg = max(int(positive.size - np.count_nonzero(positive)), 1)
    fpr = np.concatenate([[0.0], fps / num_neg])
    tpr = np.concatenate([[0.0], tps / num_pos])
    thresholds = np.concatenate([[np.inf], sorted_scores[ends]])
    return fpr, tpr, thresholds


def edge_metrics(scores: np.ndarray, labels: np.ndarray, threshold: float = 0.5) -> EdgeMetrics:
    """Efficiency, purity and ROC AUC of edge scores against labels.

    Args:
        scores: (E,) scores on the scale of ``threshold`` (e.g. sigmoid probabilities).
        labels: (E,) 0/1 truth.
        threshold: predicted true when score > threshold.
    """
    scores, positive = _check_scores_labels(scores, labels)
    predicted = scores > threshold
    num_true = int(np.count_nonzero(positive))
    num_predicted = int(np.count_nonzero(predicted))
    num_tp = int(np.count_nonzero(predicted & positive))
    return EdgeMetrics(
        threshold=float(threshold), efficiency=num_tp / num_true if num_true else math.nan,
        purity=num_tp / num_predicted if num_predicted else math.nan, auc=roc_auc(scores, positive),
        num_edges=int(scores.size), num_true=num_true, num_predicted=num_predicted, num_true_positive=num_tp,
    )  # fmt: skip


def efficiency_at_purity(scores: np.ndarray, labels: np.ndarray, floor: float = 0.90) -> tuple[float, float, float]:
    """The highest edge efficiency of any cut whose purity is at least ``floor`` (targets are often stated so:
    "0.95 at purity >= 0.90"), with that purity and the cut.

    A cut keeps the edges of score >= it; it can only fall between distinct scores (ties go together).

    Args:
        scores: (E,) edge scores.
        labels: (E,) 0/1 truth.
        floor: the purity the cut must reach, in (0, 1].

    Returns:
        ``(efficiency, purity, cut)``; all nan when no cut reaches ``floor`` (or there is no true edge).
    """
    if not 0.0 < floor <= 1.0:
        raise DomainparError(f"floor must be in (0, 1] (got {floor})")
    scores, positive = _check_scores_labels(scores, labels)
    order = np.argsort(-scores, kind="stable")
    ranked = scores[order]
    true = np.cumsum(positive[order])
    ends = np.flatnonzero(np.r_[ranked[1:] != ranked[:-1], True]) if ranked.size else np.zeros(0, dtype=np.int64)
    allowed = ends[true[ends] >= floor * (ends + 1)] if ends.size else ends
    num_true = int(true[-1]) if true.size else 0
    if not num_true or not allowed.size:
        return math.nan, math.nan, math.nan
    best = allowed[np.argmax(true[allowed])]
    return float(true[best] / num_true), float(true[best] / (best + 1)), float(ranked[best])


# ----------------------------------------------------------------------------- tracks


@dataclass(frozen=True)
class ParticleTable:
    """Kinematics of the particles of one event, sorted by particle id."""

    particle_id: np.ndarray
    """(P,) int64 particle ids, ascending, without 0 (noise)."""
    pt: np.ndarray
    """(P,) float64 transverse momentum in GeV."""
    eta: np.ndarray
    """(P,) float64 pseudorapidity."""

    @staticmethod
    def from_momenta(particle_id: np.ndarray, px: np.ndarray, py: np.ndarray, pz: np.ndarray) -> "ParticleTable":
        """From a TrackML particles file's ``particle_id, px, py, pz``."""
        particle_id = np.asarray(particle_id, dtype=np.int64)
        px, py, pz = (np.asarray(a, dtype=np.float64) for a in (px, py, pz))
        pt = np.hypot(px, py)
        with np.errstate(divide="ignore", invalid="ignore"):
            eta = np.arcsinh(np.where(pt > 0, pz / pt, np.sign(pz) * np.inf))
        keep = particle_id != 0
        order = np.argsort(particle_id[keep], kind="stable")
        return ParticleTable(particle_id[keep][order], pt[keep][order], eta[keep][order])

    @staticmethod
    def from_hits(particle_id: np.ndarray, particle_pt: np.ndarray, pos: np.ndarray) -> "ParticleTable":
        """From per-hit truth only (a graph without its particles file).

        pT is the per-hit ``particle_pt``. eta is asinh(dz/dr) with dz/dr the least-squares slope of the particle's
        hits in the r–z plane (a helix is a straight line in (arc length, z), and arc length ≈ r for pT above a few
        hundred MeV inside the tracker); a particle whose hits share one radius falls back to z/r of its first hit.
        """
        particle_id = np.asarray(particle_id, dtype=np.int64)
        pos = np.asarray(pos, dtype=np.float64)
        keep = np.flatnonzero(particle_id != 0)
        ids, first, index = np.unique(particle_id[keep], return_index=True, return_inverse=True)
        r = np.hypot(pos[keep, 0], pos[keep, 1])
        z = pos[keep, 2]
        count = np.bincount(index, minlength=ids.size).astype(np.float64)
        mean_r = np.bincount(index, r, ids.size) / count
        mean_z = np.bincount(index, z, ids.size) / count
        dr = r - mean_r[index]
        var_r = np.bincount(index, dr * dr, ids.size)
        cov_rz = np.bincount(index, dr * (z - mean_z[index]), ids.size)
        first_hit = keep[first]
        fallback = pos[first_hit, 2] / np.maximum(np.hypot(pos[first_hit, 0], pos[first_hit, 1]), 1e-9)
        spread = var_r > 1e-6 * np.maximum(count, 1.0)
        slope = np.where(spread, cov_rz / np.where(spread, var_r, 1.0), fallback)
        pt = np.asarray(particle_pt, dtype=np.float64)[first_hit]
        return ParticleTable(ids.astype(np.int64), pt, np.arcsinh(slope))

    def lookup(self, ids: np.ndarray, source: str = "particles") -> tuple[np.ndarray, np.ndarray]:
        """(pt, eta) of every id in ``ids`` (each must be in the table)."""
        ids = np.asarray(ids, dtype=np.int64)
        pos = np.clip(np.searchsorted(self.particle_id, ids), 0, max(self.particle_id.size - 1, 0))
        found = (self.particle_id[pos] == ids) if self.particle_id.size else np.zeros(ids.size, dtype=bool)
        if not found.all():
            missing = ids[~found]
            raise DomainparError(
                f"{source}: every particle with hits must be listed (got {missing.size} unlisted, e.g. particle_id {int(missing[0])})"
            )
        return self.pt[pos], self.eta[pos]


@dataclass(frozen=True)
class TrackingMetrics:
    """Track-level figures of one event (definitions: docs/evaluation.md)."""

    tracking_efficiency: float
    """Double-majority efficiency for reconstructable particles (nan if there are none)."""
    perfect_efficiency: float
    """Perfect-match efficiency for reconstructable particles."""
    fake_rate: float
    """Candidate tracks without a double-majority particle / candidate tracks."""
    duplicate_rate: float
    """Extra purity-matched tracks of already matched particles / candidate tracks."""
    num_reconstructable: int
    """Reconstructable particles (not noise, >= min_layers layers, pT > pt_min)."""
    num_matched: int
    """Reconstructable particles with a double-majority track."""
    num_perfect: int
    """Reconstructable particles with a perfectly matching track."""
    num_tracks: int
    """All tracks, singletons included."""
    num_candidates: int
    """Tracks of at least min_track_hits hits."""
    num_fakes: int
    """Candidate tracks without a double-majority particle."""
    num_duplicates: int
    """Duplicate candidate tracks."""
    particle_id: np.ndarray
    """(P,) every non-noise particle with hits, ascending."""
    particle_pt: np.ndarray
    """(P,) pT of those particles in GeV."""
    particle_eta: np.ndarray
    """(P,) pseudorapidity of those particles."""
    particle_nlayers: np.ndarray
    """(P,) distinct layers hit by each particle."""
    particle_matched: np.ndarray
    """(P,) bool: the particle has a double-majority track."""
    particle_perfect: np.ndarray
    """(P,) bool: the particle has a perfectly matching track."""

    def reconstructable(self, pt_min: float, min_layers: int) -> np.ndarray:
        """(P,) bool mask of particles with pT > pt_min and at least min_layers layers."""
        return (self.particle_pt > pt_min) & (self.particle_nlayers >= min_layers)

    def summary(self) -> dict:
        """The scalar fields, nan → None (JSON-ready)."""
        out = {}
        for key in (
            "tracking_efficiency", "perfect_efficiency", "fake_rate", "duplicate_rate",
            "num_reconstructable", "num_matched", "num_perfect", "num_tracks", "num_candidates",
            "num_fakes", "num_duplicates",
        ):  # fmt: skip
            value = getattr(self, key)
            out[key] = None if isinstance(value, float) and math.isnan(value) else value
        return out


def _ratio(num: int, den: int) -> float:
    return num / den if den else math.nan


def tracking_metrics(
    track_id: np.ndarray,
    particle_id: np.ndarray,
    layer: np.ndarray,
    particles: ParticleTable,
    pt_min: float = 1.0,
    min_layers: int = 3,
    min_track_hits: int = 3,
) -> TrackingMetrics:
    """Tracking efficiency, fake and duplicate rates of one event's tracks.

    Args:
        track_id: (N,) track id of every hit.
        particle_id: (N,) truth particle of every hit (0 = noise).
        layer: (N,) detector layer of every hit (any integer code, one per layer).
        particles: pT and eta of every non-noise particle in ``particle_id``.
        pt_min: reconstructable particles have pT strictly above it (GeV).
        min_layers: reconstructable particles hit at least this many distinct layers.
        min_track_hits: tracks with fewer hits are not candidates.
    """
    track_id = np.asarray(track_id, dtype=np.int64)
    particle_id = np.asarray(particle_id, dtype=np.int64)
    layer = np.asarray(layer, dtype=np.int64)
    check_aligned(track_id=track_id, particle_id=particle_id, layer=layer)
    # Weights do not matter for matching; unit weights give the same majority analysis.
    table = score_arrays(track_id, particle_id, np.ones(track_id.size))
    real = table.major_particle_id != 0
    double_majority = table.good & real
    perfect = real & (table.major_nhits == table.nhits) & (table.major_nhits == table.major_particle_nhits)

    hit_particles = unique(particle_id[particle_id != 0])
    pt, eta = particles.lookup(hit_particles)
    pairs = np.unique(np.stack([particle_id, layer]), axis=1)
    pairs = pairs[:, pairs[0] != 0]
    layer_particles, nlayers = np.unique(pairs[0], return_counts=True)
    particle_nlayers = nlayers[np.searchsorted(layer_particles, hit_particles)] if hit_particles.size else nlayers
    matched = member(hit_particles, table.major_particle_id[double_majority])
    perfectly = member(hit_particles, table.major_particle_id[perfect])
    reconstructable = (pt > pt_min) & (particle_nlayers >= min_layers)

    candidate = table.nhits >= min_track_hits
    num_candidates = int(np.count_nonzero(candidate))
    num_fakes = int(np.count_nonzero(candidate & ~double_majority))
    purity_matched = candidate & real & (2 * table.major_nhits > table.nhits)
    _, per_particle = np.unique(table.major_particle_id[purity_matched], return_counts=True)
    num_duplicates = int(np.sum(per_particle - 1))

    num_reco = int(np.count_nonzero(reconstructable))
    num_matched = int(np.count_nonzero(reconstructable & matched))
    num_perfect = int(np.count_nonzero(reconstructable & perfectly))
    return TrackingMetrics(
        tracking_efficiency=_ratio(num_matched, num_reco), perfect_efficiency=_ratio(num_perfect, num_reco),
        fake_rate=_ratio(num_fakes, num_candidates), duplicate_rate=_ratio(num_duplicates, num_candidates),
        num_reconstructable=num_reco, num_matched=num_matched, num_perfect=num_perfect, num_tracks=int(table.track_id.size),
        num_candidates=num_candidates, num_fakes=num_fakes, num_duplicates=num_duplicates, particle_id=hit_particles,
        particle_pt=pt, particle_eta=eta, particle_nlayers=particle_nlayers.astype(np.int64), particle_matched=matched,
        particle_perfect=perfectly,
    )  # fmt: skip


def binned_fraction(values: np.ndarray, passed: np.ndarray, bins: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fraction passing per bin, with binomial standard errors.

    Args:
        values: (K,) the binned quantity (pT, eta, ...).
        passed: (K,) bool.
        bins: (B+1,) bin edges.

    Returns:
        ``(fraction, error, count)``, each (B,); fraction and error are nan in empty bins.
    """
    values = np.asarray(values, dtype=np.float64)
    passed = np.asarray(passed, dtype=bool)
    total, _ = np.histogram(values, bins=bins)
    hits, _ = np.histogram(values[passed], bins=bins)
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.where(total > 0, hits / np.maximum(total, 1), np.nan)
        error = np.where(total > 0, np.sqrt(fraction * (1 - fraction) / np.maximum(total, 1)), np.nan)
    return fraction, error, total


def binned_efficiencies(metrics: list[TrackingMetrics], pt_min: float = 1.0, min_layers: int = 3) -> dict:
    """Tracking and perfect-match efficiency vs pT and vs eta, pooled over events (definitions: docs/evaluation.md).

    Returns:
        ``{"efficiency_vs_pt": {...}, "efficiency_vs_eta": {...}}``, each with ``bins`` (B+1 edges), ``count`` (B
        particles), ``tracking_efficiency``, ``tracking_efficiency_error``, ``perfect_efficiency`` and
        ``perfect_efficiency_error`` (B each, None in an empty bin), and ``selection`` in words.
    """
    pt = np.concatenate([m.particle_pt for m in metrics]) if metrics else np.zeros(0)
    eta = np.concatenate([m.particle_eta for m in metrics]) if metrics else np.zeros(0)
    nlayers = np.concatenate([m.particle_nlayers for m in metrics]) if metrics else np.zeros(0, dtype=np.int64)
    matched = np.concatenate([m.particle_matched for m in metrics]) if metrics else np.zeros(0, dtype=bool)
    perfect = np.concatenate([m.particle_perfect for m in metrics]) if metrics else np.zeros(0, dtype=bool)
    on_layers = nlayers >= min_layers
    out = {}
    for name, values, select, bins, selection in (
        ("efficiency_vs_pt", pt, on_layers, PT_BINS, f"particles on >= {min_layers} layers"),
        ("efficiency_vs_eta", eta, on_layers & (pt > pt_min), ETA_BINS, f"particles with pT > {pt_min:g} GeV on >= {min_layers} layers"),
    ):  # fmt: skip
        table = {"bins": [float(b) for b in bins], "selection": selection}
        for label, passed in (("tracking_efficiency", matched), ("perfect_efficiency", perfect)):
            fraction, error, count = binned_fraction(values[select], passed[select], bins)
            table[label] = [None if math.isnan(v) else float(v) for v in fraction]
            table[f"{label}_error"] = [None if math.isnan(v) else float(v) for v in error]
            table["count"] = [int(c) for c in count]
        out[name] = table
    return out
