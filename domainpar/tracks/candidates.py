"""Track candidates of one event: the one way tracks are built from edge scores.

:func:`build_candidates` turns hit positions, layers, graph edges and their
scores into :class:`TrackCandidates` with the method and settings of a
:class:`TrackConfig`. ``domainpar evaluate`` and ``domainpar reconstruct``
build tracks only through it. Every hit lies on exactly one candidate (a hit
no candidate keeps is a singleton candidate of its own); each candidate's hits
are ordered along the track from its innermost hit, and each candidate with 3
hits or more carries its helix fit (:mod:`domainpar.kernels.track_fit`).

The methods are listed in :data:`domainpar.tracks.build.METHODS` and
described in ``docs/tracks.md``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from domainpar.data.detector import layer_table
from domainpar.errors import DomainparError
from domainpar.kernels.track_fit import fit_candidates
from domainpar.kernels.track_order import order_keys
from domainpar.tracks.build import components_of, walk_edges
from domainpar.tracks.follow import attach_at_holes, follow, holed, variances_columns
from domainpar.tracks.methods import DEFAULT_METHOD, METHODS


@dataclass(frozen=True)
class TrackConfig:
    """How tracks are built from edge scores (the recipe's ``tracks:`` section, evaluate's/reconstruct's options)."""

    method: str = DEFAULT_METHOD
    """One of :data:`~domainpar.tracks.build.METHODS` (``docs/tracks.md`` compares them)."""
    threshold: float = 0.5
    """Edge score cut (probability): edges scored strictly above it may join hits."""
    field: float = 2.0
    """Solenoid field along z (T), for the helix fits' pT."""
    sigma_hit: float = 0.01
    """Added in quadrature to every hit's resolution (pitch / sqrt(12) of its layer's modules) in the helix fits (mm)."""
    ms: float = 0.02
    """Multiple-scattering term of the helix fits (mm GeV): every hit's variance grows by (ms / pT)^2."""
    seed_threshold: float = 0.05
    """Following: seed triplets are two edges both scored above it (best first, so the GNN's surest tracks start)."""
    seed_bucket: float = 0.5
    """Following: seeds are taken in bands of their weaker edge's score this wide, nearest the beam line first within a band (0: by score alone)."""
    extend_threshold: float = 0.02
    """Following: edges scored above it may extend a track (the fit judges them)."""
    seeds_per_hit: int = 3
    """Following: the best-scored inner and outer edges of a hit that make seed triplets with it."""
    reach: int = 3
    """Following: candidates come from the neighbours of this many hits at the growing end."""
    window: int = 6
    """Following: the fits that judge a candidate hit and a finished track span this many consecutive hits."""
    hit_chi2: float = 16.0
    """Following: largest chi2 increment of one added hit."""
    seed_chi2: float = 16.0
    """Following: largest chi2 of a seed triplet's fit."""
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
    """Ambiguity resolution: most hits a kept candidate shares with better ones."""
    hole_ratio: float = 1.0
    """Following: a track with at least this many holes per hit (layers of the event its helix crosses without a
    hit on them) is dropped, its hits singletons: a piece of a longer track, or no particle's (0: no cut)."""
    hole_reach: float = 5.0
    """Following: a hole beyond a track's last hit is evident (its particle may have gone on) when a hit of the event lies within this (mm) of the helix there."""
    ended_hole_ratio: float = 0.34
    """Following: a track over ``hole_ratio`` is kept when it has fewer evident holes per hit than this and fits well: its particle ended (0: never)."""
    ended_chi2_ndf: float = 1.0
    """Following: largest helix-fit chi2/ndf of a track kept as ended (``ended_hole_ratio``)."""
    refine: bool = True
    """Following: merge fragments and attach free hits by their helix fits after building."""
    short_layers: int = 3
    """Following: a candidate on at most this many layers is short, and kept only when it passes the three cuts
    below (0: no cut). Three hits fix a circle, so its fit can hardly tell a particle from a chance triplet."""
    short_min_score: float = 0.05
    """Following: lowest mean edge score of a short candidate's layer crossings (a missing edge counts 0): the GNN must back it."""
    short_min_pt: float = 0.2
    """Following: lowest fitted pT (GeV) of a short candidate: chance triplets of the dense low-pT hits curl."""
    short_max_chi2_ndf: float = 3.0
    """Following: largest helix-fit chi2/ndf of a short candidate (tighter than ``max_chi2_ndf``: it has few hits)."""

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
        for name, low in (("seeds_per_hit", 1), ("reach", 1), ("window", 3), ("max_per_layer", 1), ("first_pass_hits", 3), ("min_hits", 3), ("max_shared", 0), ("short_layers", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise DomainparError(f"tracks.{name}: expected an integer >= {low}, got {value!r}")


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


@dataclass(frozen=True)
class TrackCandidates:
    """Track candidates of one event: every hit on exactly one candidate, each candidate's hits in order."""

    track_id: np.ndarray
    """(N,) int64 candidate of every hit, 0..T-1, numbered by each candidate's lowest hit index (singletons included)."""
    offsets: np.ndarray
    """(T+1,) int64 CSR offsets into ``hits``."""
    hits: np.ndarray
    """(N,) int64 node indices, candidate by candidate, each ordered along the track from its innermost hit."""
    edge_score: np.ndarray
    """(N,) float32 score of the graph edge joining the candidate's previous hit to this one (NaN at a first hit or where no edge joins them)."""
    fit_chi2_ndf: np.ndarray
    """(T,) float64 helix-fit chi2 per degree of freedom (NaN below 3 hits)."""
    fit_pt: np.ndarray
    """(T,) float64 GeV, pT of the fitted helix in the solenoid field (NaN below 3 hits)."""
    edge_mask: np.ndarray
    """(E,) bool graph edges joining hits of one candidate (what the builder accepted)."""
    seconds: float
    """Wall time of the build (s)."""

    @property
    def num_candidates(self) -> int:
        """T, singletons included."""
        return int(self.offsets.size - 1)

    def sizes(self) -> np.ndarray:
        """(T,) hits per candidate."""
        return np.diff(self.offsets)


def check_inputs(pos, layer, edge_index, scores) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validated ``(pos (N,3) float64, layer (N,) int64, edge_index (2,E) int64, scores (E,) float64)``."""
    pos = np.asarray(pos, dtype=np.float64)
    layer = np.asarray(layer)
    edge_index = np.asarray(edge_index)
    scores = np.asarray(scores, dtype=np.float64)
    if pos.ndim != 2 or pos.shape[1] != 3:
        raise DomainparError(f"pos: expected shape (N, 3), got {pos.shape}")
    n = pos.shape[0]
    if layer.shape != (n,):
        raise DomainparError(f"layer: expected shape ({n},), got {layer.shape}")
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise DomainparError(f"edge_index: expected shape (2, E), got {edge_index.shape}")
    if scores.shape != (edge_index.shape[1],):
        raise DomainparError(f"scores: expected shape ({edge_index.shape[1]},), got {scores.shape}")
    if edge_index.size and (edge_index.min() < 0 or edge_index.max() >= n):
        raise DomainparError(
            f"edge_index: expected node ids in [0, {n}), got values in [{int(edge_index.min())}, {int(edge_index.max())}]"
        )
    if np.isnan(scores).any():
        raise DomainparError("scores: expected no NaN, got NaN")
    if not np.isfinite(pos).all():
        raise DomainparError("pos: expected finite positions, got NaN or inf")
    return pos, layer.astype(np.int64, copy=False), edge_index.astype(np.int64, copy=False), scores


#: Scattering weight of a hit by detector: the strip detector's modules and supports scatter more than the pixel
#: detector's (measured on simulated truth: docs/tracks.md).
STRIP_SCATTERING = 13.5
#: Volumes of the pixel detector (scattering weight 1).
PIXEL_VOLUMES = (7, 8, 9)


def hit_variances(layer: np.ndarray, sigma_hit: float) -> np.ndarray:
    """(N, 4) every hit's resolution squared across the track in x-y, along z and along r (mm^2), and its
    scattering weight (:mod:`domainpar.kernels.track_fit`).

    From its layer's module pitches (:func:`~domainpar.data.detector.layer_table`, pitch / sqrt(12)): u is
    r·phi; v is z on a barrel layer and r on an endcap disc. ``sigma_hit`` is added in quadrature to all three.
    The scattering weight is 1 in the pixel detector and :data:`STRIP_SCATTERING` in the strips.
    """
    table = layer_table()
    if layer.size and layer.max() >= len(table):
        raise DomainparError(f"layer: expected layer codes below {len(table)} (the detector's layers), got {int(layer.max())}")
    by_index = table.set_index("layer_index").sort_index()
    u = by_index["pitch_u"].to_numpy(np.float64)[layer] ** 2 / 12.0
    v = by_index["pitch_v"].to_numpy(np.float64)[layer] ** 2 / 12.0
    barrel = by_index["barrel"].to_numpy(bool)[layer]
    pixel = np.isin(by_index["volume_id"].to_numpy(), PIXEL_VOLUMES)[layer]
    floor = sigma_hit * sigma_hit
    weight = np.where(pixel, 1.0, STRIP_SCATTERING)
    return np.stack([u + floor, np.where(barrel, v, 0.0) + floor, np.where(barrel, 0.0, v) + floor, weight], axis=1)


def renumber(labels: np.ndarray) -> np.ndarray:
    """Labels renumbered 0..T-1 in order of each label's lowest index (the contract's numbering)."""
    if labels.size == 0:
        return np.zeros(0, dtype=np.int64)
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse.ravel()]


def edge_lookup(num_nodes: int, edge_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A sorted key table of the graph's (unordered) hit pairs: ``(keys, edge ids)`` for :func:`find_edges`."""
    a = np.minimum(edge_index[0], edge_index[1])
    b = np.maximum(edge_index[0], edge_index[1])
    keys = a * np.int64(max(num_nodes, 1)) + b
    order = np.argsort(keys, kind="stable")
    return keys[order], order


def find_edges(table: tuple[np.ndarray, np.ndarray], num_nodes: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Edge id joining hits a[i] and b[i] in either direction, -1 where the graph has none."""
    keys, ids = table
    lo = np.minimum(a, b)
    hi = np.maximum(a, b)
    query = lo * np.int64(max(num_nodes, 1)) + hi
    where = np.clip(np.searchsorted(keys, query), 0, max(keys.size - 1, 0))
    found = (keys[where] == query) if keys.size else np.zeros(query.size, dtype=bool)
    return np.where(found, ids[where] if keys.size else -1, -1)


def assemble(
    pos: np.ndarray,
    edge_index: np.ndarray,
    scores: np.ndarray,
    variances: np.ndarray,
    labels: np.ndarray,
    config: TrackConfig,
    started: float,
    fragment: np.ndarray | None = None,
    rank: np.ndarray | None = None,
) -> TrackCandidates:
    """:class:`TrackCandidates` from a candidate label per hit.

    Args:
        pos: (N, 3) hit positions (mm).
        edge_index: (2, E) graph edges.
        scores: (E,) edge scores.
        variances: (N, 4) hit resolutions squared and scattering weights (:func:`hit_variances`).
        labels: (N,) any integer label per hit; equal labels = one candidate.
        config: fit settings.
        started: ``time.perf_counter()`` when the build began (for ``seconds``).
        fragment, rank: (N,) what the builder knew of the hits' order (:func:`~domainpar.kernels.track_order.order_keys`);
            None: nothing.

    Returns:
        The candidates; ``edge_mask`` holds the graph edges whose two hits share a candidate.
    """
    n = pos.shape[0]
    track_id = renumber(np.asarray(labels))
    num_tracks = int(track_id.max()) + 1 if n else 0
    if fragment is None:
        fragment, rank = np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64)
    columns = [np.ascontiguousarray(pos[:, i]) for i in range(3)]
    key = order_keys(*columns, track_id, np.ascontiguousarray(fragment, dtype=np.int64), np.ascontiguousarray(rank, dtype=np.int64))
    hits = np.lexsort((key, track_id)).astype(np.int64)
    offsets = np.zeros(num_tracks + 1, dtype=np.int64)
    np.cumsum(np.bincount(track_id, minlength=num_tracks), out=offsets[1:])
    edge_score = np.full(n, np.nan, dtype=np.float32)
    if n > 1:
        follows = np.ones(n, dtype=bool)  # hits[k] has a previous hit on its candidate
        follows[offsets[:-1]] = False
        k = np.flatnonzero(follows)
        edges = find_edges(edge_lookup(n, edge_index), n, hits[k - 1], hits[k])
        joined = edges >= 0
        edge_score[k[joined]] = scores[edges[joined]]
    edge_mask = track_id[edge_index[0]] == track_id[edge_index[1]] if edge_index.size else np.zeros(0, dtype=bool)
    chi2_ndf, pt = fit_candidates(pos, variances, offsets, hits, config.field, config.ms)
    return TrackCandidates(
        track_id=track_id,
        offsets=offsets,
        hits=hits,
        edge_score=edge_score,
        fit_chi2_ndf=chi2_ndf,
        fit_pt=pt,
        edge_mask=edge_mask,
        seconds=time.perf_counter() - started,
    )


def short_and_weak(candidates: TrackCandidates, layer: np.ndarray, config: TrackConfig) -> np.ndarray:
    """(T,) bool: candidates of 3 hits or more on at most ``config.short_layers`` layers that fail a short-track cut.

    A short candidate's fit has almost no degrees of freedom (three hits fix a circle), so the fit alone cannot
    tell a particle from three hits of different particles that happen to line up; in a dense event such chance
    triplets are the most frequent fakes (on the real event 21000 four in five fakes lie on at most 3 layers,
    docs/tracks.md). A short candidate is kept only when the GNN backs it (mean score of the edges between its
    consecutive hits on different layers, a missing edge counting 0, at least ``short_min_score``), its helix is not a tight curl
    (fitted pT at least ``short_min_pt``) and it fits well (chi2/ndf at most ``short_max_chi2_ndf``). Longer
    candidates are left alone: their fits judge them.

    Args:
        candidates: the built candidates (ordered hits, edge scores along them, fits).
        layer: (N,) layer code of every hit.
        config: the cut's settings.
    """
    sizes = candidates.sizes()
    if config.short_layers <= 0 or sizes.size == 0:
        return np.zeros(sizes.size, dtype=bool)
    track = candidates.track_id[candidates.hits]
    # Distinct layers per candidate: distinct (candidate, layer) keys, one integer each (np.unique over the
    # columns of a 2-row array sorts them as records, a tenth of the builder's time on a full event).
    layer = np.asarray(layer, dtype=np.int64)
    num_layers = int(layer.max()) + 1
    keys = np.unique(candidates.track_id.astype(np.int64) * num_layers + layer)
    layers = np.bincount(keys // num_layers, minlength=sizes.size)
    # Mean score of the steps between consecutive hits on different layers (no edge: 0). A step within one layer
    # (the double hit of overlapping modules) has no edge by construction (the graph joins layers): counted as 0,
    # it would sink a true candidate with doubles below the cut (on event 21000 one in ten it dropped was a
    # particle of pT > 1 GeV). A candidate's first hit has no step before it.
    hit_layer = np.asarray(layer, dtype=np.int64)[candidates.hits]
    crossing = np.ones(hit_layer.size, dtype=bool)
    crossing[1:] = hit_layer[1:] != hit_layer[:-1]
    crossing[candidates.offsets[:-1]] = False
    step = np.where(crossing, np.nan_to_num(candidates.edge_score.astype(np.float64), nan=0.0), 0.0)
    steps = np.bincount(track, crossing.astype(np.float64), minlength=sizes.size)
    mean_score = np.bincount(track, step, minlength=sizes.size) / np.maximum(steps, 1)
    with np.errstate(invalid="ignore"):
        weak = (
            (mean_score < config.short_min_score)
            | ~(candidates.fit_pt >= config.short_min_pt)
            | ~(candidates.fit_chi2_ndf <= config.short_max_chi2_ndf)
        )
    return (sizes >= 3) & (layers <= config.short_layers) & weak


def build_candidates(pos, layer, edge_index, scores, config: TrackConfig | None = None) -> TrackCandidates:
    """Track candidates of one event from its edge scores.

    Args:
        pos: (N, 3) float hit positions (mm).
        layer: (N,) int layer code of every hit (:attr:`EventGraph.layer`; equal codes = one detector layer).
        edge_index: (2, E) int hit indices, row 0 the inner hit, row 1 the outer.
        scores: (E,) edge scores (probabilities, on the scale of ``config.threshold``).
        config: method and settings (default :class:`TrackConfig`).

    Returns:
        :class:`TrackCandidates`; ``seconds`` covers everything from the scores to the fitted candidates.
    """
    config = TrackConfig() if config is None else config
    started = time.perf_counter()
    pos, layer, edge_index, scores = check_inputs(pos, layer, edge_index, scores)
    n = pos.shape[0]
    variances = hit_variances(layer, config.sigma_hit)
    if config.method == "components":
        mask = scores > config.threshold
    elif config.method == "walk":
        mask = walk_edges(n, edge_index, scores, config.threshold)
    elif config.method in ("ckf", "ambiguity"):
        labels, fragment, rank = follow(pos, variances, layer, edge_index, scores, config, shared=config.method == "ambiguity")
        free = np.flatnonzero(labels < 0)
        labels[free] = n + free  # hits on no track: singletons
        candidates = assemble(pos, edge_index, scores, variances, labels, config, started, fragment, rank)
        weak = holed(pos, variances, layer, candidates.track_id, candidates.fit_chi2_ndf, config) | short_and_weak(candidates, layer, config)
        # Dissolve them, attach free hits at the holes of the tracks kept, and lay the candidates out again.
        kept = ~weak & (candidates.sizes() >= 2)
        on = kept[candidates.track_id]
        labels = np.where(on, np.cumsum(kept)[candidates.track_id] - 1, -1)
        fragment[~on] = -1
        if config.refine:
            labels = attach_at_holes(variances_columns(pos, variances), layer, labels, config)
        free = np.flatnonzero(labels < 0)
        labels[free] = n + free
        return assemble(pos, edge_index, scores, variances, labels, config, started, fragment, rank)
    else:  # pragma: no cover - TrackConfig admits only METHODS
        raise DomainparError(f"tracks.method: expected one of {', '.join(METHODS)}, got {config.method!r}")
    labels = components_of(n, edge_index, mask)
    return assemble(pos, edge_index, scores, variances, labels, config, started)
