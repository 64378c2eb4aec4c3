"""How tracks are built: :class:`TrackConfig`, every setting of every stage, checked when it is made.

The recipe's ``tracks:`` section and the options of ``domainpar evaluate`` and ``domainpar reconstruct`` become one;
:func:`~domainpar.tracks.candidates.build_candidates` reads it. Each field's docstring names the stage it belongs to
(the stages: :mod:`domainpar.tracks.candidates`); the edge-only methods read ``threshold`` alone.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from domainpar.errors import DomainparError
from domainpar.tracks.methods import DEFAULT_METHOD, METHODS


@dataclass(frozen=True)
class TrackConfig:
    """How tracks are built from edge scores (the recipe's ``tracks:`` section, evaluate's/reconstruct's options)."""

    method: str = DEFAULT_METHOD
    """One of :data:`~domainpar.tracks.methods.METHODS` (``docs/tracks.md`` compares them)."""
    threshold: float = 0.5
    """Edge score cut (probability): edges scored strictly above it may join hits."""
    field: float = 2.0
    """Solenoid field along z (T), for the helix fits' pT."""
    sigma_hit: float = 0.01
    """Added in quadrature to every hit's resolution (pitch / sqrt(12) of its layer's modules) in the helix fits (mm)."""
    ms: float = 0.02
    """Multiple-scattering term of the helix fits (mm GeV): every hit's variance grows by (ms / pT)^2."""
    seed_threshold: float = 0.02
    """Seeding: seed triplets are two edges both scored above it (best first, so the GNN's surest tracks start)."""
    seed_bucket: float = 0.5
    """Seeding: seeds are taken in bands of their weaker edge's score this wide, nearest the beam line first within a band (0: by score alone)."""
    extend_threshold: float = 0.02
    """Following: edges scored above it may extend a track (the fit judges them)."""
    seeds_per_hit: int = 4
    """Seeding: the best-scored inner and outer edges of a hit that make seed triplets with it."""
    reach: int = 3
    """Following: candidates come from the neighbours of this many hits at the growing end."""
    window: int = 6
    """Following: the fits that judge a candidate hit and a finished track span this many consecutive hits."""
    hit_chi2: float = 16.0
    """Following: largest chi2 increment of one added hit."""
    seed_chi2: float = 16.0
    """Seeding: largest chi2 of a seed triplet's fit."""
    max_chi2_ndf: float = 5.0
    """Following: largest chi2/ndf of a kept track."""
    score_weight: float = 2.0
    """Following: weight of -ln(edge score) beside the chi2 increment in a candidate's cost."""
    double_distance: float = 20.0
    """Following: largest distance (mm) of two hits of one particle on one layer (overlapping modules)."""
    gate: float = 6.0
    """Following: a candidate hit further than this (mm) from the helix at the track's end is not fitted."""
    gate_sigmas: float = 5.0
    """Following: the gate widens by this many of the candidate hit's own resolution (a strip's length / sqrt(12) along it)."""
    max_per_layer: int = 3
    """Following: most hits of one track on one layer (a real pixel disc has three overlapping module rows)."""
    min_hits: int = 3
    """Following: fewest hits of a kept track."""
    first_pass_hits: int = 5
    """Following: a first pass over the seeds keeps only tracks of this many hits, before short ones may claim hits."""
    max_shared: int = 1
    """Ambiguity resolution (``ambiguity``): most hits a kept candidate shares with better ones."""
    hole_ratio: float = 1.0
    """Selection: a track with at least this many holes per hit (layers of the event its helix crosses without a
    hit on them) is dropped, its hits singletons: a piece of a longer track, or no particle's (0: no cut)."""
    hole_reach: float = 5.0
    """Selection: a hole beyond a track's last hit is evident (its particle may have gone on) when a hit of the event lies within this (mm) of the helix there."""
    ended_hole_ratio: float = 0.34
    """Selection: a track over ``hole_ratio`` is kept when it has fewer evident holes per hit than this and fits well: its particle ended (0: never)."""
    ended_chi2_ndf: float = 1.0
    """Selection: largest helix-fit chi2/ndf of a track kept as ended (``ended_hole_ratio``)."""
    refine: bool = True
    """Refinement: merge fragments and attach free hits by their helix fits after building."""
    short_layers: int = 3
    """Selection: a candidate on at most this many layers is short, and kept only when it passes the three cuts
    below (0: no cut). Three hits fix a circle, so its fit can hardly tell a particle from a chance triplet."""
    short_min_score: float = 0.1
    """Selection: lowest mean edge score of a short candidate's layer crossings (a missing edge counts 0): the GNN must back it."""
    short_min_pt: float = 0.15
    """Selection: lowest fitted pT (GeV) of a short candidate: chance triplets of the dense low-pT hits curl."""
    short_max_chi2_ndf: float = 3.0
    """Selection: largest helix-fit chi2/ndf of a short candidate (tighter than ``max_chi2_ndf``: it has few hits)."""
    free_pass: bool = False
    """Free-hit pass (:mod:`~domainpar.tracks.free_pass`): after the other stages, chains of triplets among the free
    pixel hits, for particles made away from the beam line whose segments the graph lost; needs the hits' cluster lengths."""
    free_dphi: float = 0.4
    """Free-hit pass: largest difference in phi (rad) between the two hits of a doublet."""
    free_z0_max: float = 600.0
    """Free-hit pass: largest |z| (mm) where a doublet's (r, z) line meets the beam line (layers more than 5 mm apart in r)."""
    free_pt_min: float = 0.12
    """Free-hit pass: lowest pT (GeV) of a triplet's circle and of a chain's fitted helix."""
    free_dtheta: float = 0.007
    """Free-hit pass: largest difference of polar angles (rad) between a triplet's two doublets and between linked triplets."""
    free_dkappa: float = 1e-4
    """Free-hit pass: linked triplets' curvatures (1/mm) differ by at most this plus ``free_dkappa_relative`` of their mean."""
    free_dkappa_relative: float = 0.25
    """Free-hit pass: the relative part of the curvature tolerance of linked triplets."""
    free_cluster_cut: float = 1.5
    """Free-hit pass: a hit's cluster length along v (channels) lies within this times (1 + ``free_cluster_relative``
    times the prediction) of the length the triplet's crossing angle predicts."""
    free_cluster_relative: float = 0.25
    """Free-hit pass: the part of the cluster-length tolerance that grows with the predicted length."""
    free_max_chi2_ndf: float = 8.0
    """Free-hit pass: largest helix-fit chi2/ndf of a chain (its hits attached after it: ``max_chi2_ndf``)."""
    free_twins: bool = True
    """Free-hit pass: after the chains, keep a single triplet (a particle on three layers) when a second free hit on
    one of its layers (overlapping sensors) fits it within ``free_twin_max_chi2_ndf`` and ``free_twin_pt_min``."""
    free_twin_pt_min: float = 0.3
    """Free-hit pass: lowest pT (GeV) of a triplet and its second hit's helix fit (random triplets of free hits curl)."""
    free_twin_max_chi2_ndf: float = 0.3
    """Free-hit pass: largest chi2/ndf of a triplet and its second hit's helix fit (one degree of freedom in x-y)."""
    free_min_hits: int = 4
    """Free-hit pass: fewest hits of a chain (four hits make two triplets that must agree)."""

    @property
    def reads_threshold(self) -> bool:
        """Whether ``threshold`` is this builder's cut: the edge-only methods; ``ckf`` and ``ambiguity`` seed and
        extend on ``seed_threshold`` and ``extend_threshold`` instead."""
        return self.method not in ("ckf", "ambiguity")

    @property
    def follow_threshold(self) -> float:
        """The score an edge must be strictly above for this builder to join hits along it: ``extend_threshold`` for
        ``ckf`` and ``ambiguity`` (``threshold`` is not their cut), ``threshold`` for the edge-only methods."""
        return self.threshold if self.reads_threshold else self.extend_threshold

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise DomainparError(f"tracks.method: expected one of {', '.join(METHODS)}, got {self.method!r}")
        _check_number("threshold", self.threshold, 0.0, 1.0, low_open=False, high_open=True)
        _check_number("field", self.field, 0.0, None)
        _check_number("sigma_hit", self.sigma_hit, 0.0, None)
        _check_number("ms", self.ms, 0.0, None, low_open=False)
        _check_number("extend_threshold", self.extend_threshold, 0.0, 1.0, low_open=False, high_open=True)
        _check_number("seed_threshold", self.seed_threshold, 0.0, 1.0, low_open=False, high_open=True)
        _check_number("seed_bucket", self.seed_bucket, 0.0, 1.0, low_open=False)
        for name in ("hit_chi2", "seed_chi2", "max_chi2_ndf", "double_distance", "gate"):
            _check_number(name, getattr(self, name), 0.0, None)
        _check_number("score_weight", self.score_weight, 0.0, None, low_open=False)
        _check_number("gate_sigmas", self.gate_sigmas, 0.0, None, low_open=False)
        if not isinstance(self.refine, bool):
            raise DomainparError(f"tracks.refine: expected true or false, got {self.refine!r}")
        _check_number("hole_ratio", self.hole_ratio, 0.0, None, low_open=False)
        _check_number("hole_reach", self.hole_reach, 0.0, None)
        _check_number("ended_hole_ratio", self.ended_hole_ratio, 0.0, None, low_open=False)
        _check_number("ended_chi2_ndf", self.ended_chi2_ndf, 0.0, None)
        _check_number("short_min_score", self.short_min_score, 0.0, 1.0, low_open=False)
        _check_number("short_min_pt", self.short_min_pt, 0.0, None, low_open=False)
        _check_number("short_max_chi2_ndf", self.short_max_chi2_ndf, 0.0, None)
        for name in ("free_pass", "free_twins"):
            if not isinstance(getattr(self, name), bool):
                raise DomainparError(f"tracks.{name}: expected true or false, got {getattr(self, name)!r}")
        _check_number("free_dphi", self.free_dphi, 0.0, float(np.pi))
        for name in ("free_z0_max", "free_pt_min", "free_dtheta", "free_dkappa", "free_cluster_cut", "free_max_chi2_ndf",
                     "free_twin_pt_min", "free_twin_max_chi2_ndf"):
            _check_number(name, getattr(self, name), 0.0, None)
        for name in ("free_dkappa_relative", "free_cluster_relative"):
            _check_number(name, getattr(self, name), 0.0, None, low_open=False)
        for name, low in (("free_min_hits", 4), ("seeds_per_hit", 1), ("reach", 1), ("window", 3), ("max_per_layer", 1), ("first_pass_hits", 3), ("min_hits", 3), ("max_shared", 0), ("short_layers", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise DomainparError(f"tracks.{name}: expected an integer >= {low}, got {value!r}")


def recorded_tracks(method: str, threshold: float, settings: dict | None, source: str | None = None) -> TrackConfig:
    """The builder a trained model records: ``method``, ``threshold`` and ``settings`` (its other fields, e.g.
    ``{"window": 8}``); a setting that is no other field or is out of its range is a DomainparError."""
    allowed = sorted(f.name for f in fields(TrackConfig) if f.name not in ("method", "threshold"))
    try:
        if settings is not None and not isinstance(settings, dict):
            raise DomainparError(f"expected a mapping of track builder settings (got {settings!r})")
        unknown = sorted(str(k) for k in (settings or {}) if k not in allowed)
        if unknown:
            raise DomainparError(f"unknown track builder settings {unknown} (expected some of {allowed})")
        return TrackConfig(method=method, threshold=threshold, **(settings or {}))
    except DomainparError as exc:
        raise DomainparError(f"{source}: {exc}" if source else str(exc)) from None


def _check_number(name: str, value, low: float | None, high: float | None, low_open: bool = True, high_open: bool = False) -> None:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and np.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        lo = "" if low is None else ("(" if low_open else "[") + f"{low:g}"
        hi = "" if high is None else f"{high:g}" + (")" if high_open else "]")
        where = f"in {lo}, {hi}" if low is not None and high is not None else (f"> {low:g}" if low_open else f">= {low:g}")
        raise DomainparError(f"tracks.{name}: expected a number {where}, got {value!r}")
