"""Selection, the stage of ``ckf`` and ``ambiguity`` after refinement: which candidates stay tracks.

Two cuts judge the laid-out candidates (:func:`select`); the hits of a candidate either drops become singletons,
free for attaching at the holes of the tracks kept (:mod:`domainpar.tracks.refinement`):

* the hole cut (:func:`holed`): a track whose helix crosses as many layers of the event without a hit on them
  (holes, :func:`track_holes`) as with one is a piece of a longer track, or no particle's, unless its particle
  ended;
* the short-track cut (:func:`short_and_weak`): a candidate on few layers must be backed by the GNN, not curl
  tightly and fit well.

The helices and their crossings are :mod:`domainpar.kernels.track_holes`'; :func:`hole_arguments` gives them the
detector's layers and the event's hits.
"""

from __future__ import annotations

import numpy as np

from domainpar.arrays import unique
from domainpar.kernels.track_fit import HitColumns
from domainpar.kernels.track_holes import count_holes
from domainpar.kernels.track_refine import track_perigees
from domainpar.tracks.inputs import layers_by_code
from domainpar.tracks.layout import TrackCandidates


#: A layer crossed within this of its edge (mm) is not counted as a hole (modules do not reach the edge exactly).
HOLE_MARGIN = 5.0


def layer_surfaces() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(barrel, position, low, high)`` (L,) of every detector layer (:mod:`domainpar.kernels.track_holes`)."""
    table = layers_by_code()
    barrel = table["barrel"].to_numpy(bool)
    position = np.where(barrel, table["r"], table["z"]).astype(np.float64)
    low = np.where(barrel, table["z_min"], table["r_min"]).astype(np.float64)
    high = np.where(barrel, table["z_max"], table["r_max"]).astype(np.float64)
    return barrel, position, low, high


def layer_hits(pos: np.ndarray, layer: np.ndarray, num_layers: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(layer_ptr, sorted_phi, sorted_hits)``: every hit by layer, then azimuth (:func:`~domainpar.kernels.track_holes.nearest_free`)."""
    phi = np.arctan2(pos[:, 1], pos[:, 0])
    order = np.lexsort((phi, layer)).astype(np.int64)
    layer_ptr = np.zeros(num_layers + 1, dtype=np.int64)
    np.cumsum(np.bincount(layer, minlength=num_layers), out=layer_ptr[1:])
    return layer_ptr, np.ascontiguousarray(phi[order], dtype=np.float64), order


def hole_arguments(columns: HitColumns, layer: np.ndarray, labels: np.ndarray, config) -> tuple:
    """The arguments the hole kernels (:mod:`~domainpar.kernels.track_holes`) share, from ``perigees`` to
    ``sorted_hits``: every track's helix and hits (CSR), the detector's layers (only those the event has hits on:
    a pixel-only event has no strip layers to miss), the hits and their layer/azimuth index."""
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    layer = np.ascontiguousarray(layer, dtype=np.int64)
    perigees = track_perigees(*columns, labels, config.field, config.ms)
    on = np.flatnonzero(labels >= 0)
    hits = on[np.argsort(labels[on], kind="stable")]
    offsets = np.zeros(perigees.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(labels[on], minlength=perigees.shape[0]), out=offsets[1:])
    barrel, position, low, high = layer_surfaces()
    present = np.zeros(barrel.size, dtype=bool)
    present[unique(layer)] = True
    layer_ptr, sorted_phi, sorted_hits = layer_hits(np.stack(columns[:3], axis=1), layer, barrel.size)
    return (perigees, offsets, hits, layer, barrel, position, low, high, present, HOLE_MARGIN, *columns[:3], layer_ptr,
            sorted_phi, sorted_hits)  # fmt: skip


def track_holes(columns: HitColumns, layer: np.ndarray, labels: np.ndarray, config) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(T,) layers crossed, holes and evident holes of every track (labels 0..T-1, -1: on none; -1 where a track
    has no helix: below 3 hits), counting only the layers the event has hits on (a pixel-only event has no strip
    layers to miss). Evident: :mod:`~domainpar.kernels.track_holes`, within ``config.hole_reach``."""
    return count_holes(*hole_arguments(columns, layer, labels, config), config.hole_reach)


def holed(columns: HitColumns, layer: np.ndarray, track_id: np.ndarray, fit_chi2_ndf: np.ndarray, config) -> np.ndarray:
    """(T,) bool: tracks of at least ``config.hole_ratio`` holes per hit, unless they ended (below).

    A track whose helix crosses as many layers of the event without a hit on them as with one is a piece of a
    longer track, or no particle's. Or its particle ended: a hadron interacts in the material, a particle decays,
    and a stiff particle of 5 hits then crosses the rest of the detector as holes (docs/tracks.md). Such a track is
    kept when its holes are few but for crossings beyond its last hit with no hit of the event near them (fewer
    than ``config.ended_hole_ratio`` evident holes per hit) and its helix fits well (chi2/ndf at most
    ``config.ended_chi2_ndf``).

    Args:
        columns: the hits' positions and resolutions (:func:`~domainpar.kernels.track_fit.hit_columns`).
        layer: (N,) layer code of every hit.
        track_id: (N,) candidate of every hit (0..T-1).
        fit_chi2_ndf: (T,) helix-fit chi2/ndf of every candidate (nan: none).
        config: the cut's settings (:class:`~domainpar.tracks.config.TrackConfig`).
    """
    num_tracks = int(track_id.max()) + 1 if track_id.size else 0
    if config.hole_ratio <= 0 or num_tracks == 0:
        return np.zeros(num_tracks, dtype=bool)
    _, holes, evident = track_holes(columns, layer, track_id, config)
    hits = np.bincount(track_id, minlength=num_tracks)
    with np.errstate(invalid="ignore"):
        ended = (evident < config.ended_hole_ratio * hits) & (fit_chi2_ndf <= config.ended_chi2_ndf)
    return (holes >= 0) & (holes >= config.hole_ratio * hits) & ~ended


def short_and_weak(candidates: TrackCandidates, layer: np.ndarray, config) -> np.ndarray:
    """(T,) bool: candidates of 3 hits or more on at most ``config.short_layers`` layers that fail a short-track cut.

    A short candidate's fit has almost no degrees of freedom (three hits fix a circle), so the fit alone cannot
    tell a particle from three hits of different particles that happen to line up; in a dense event such chance
    triplets are the most frequent fakes (docs/tracks.md). A short candidate is kept only when the GNN backs it
    (mean score of the edges between its consecutive hits on different layers, a missing edge counting 0, at least
    ``short_min_score``), its helix is not a tight curl (fitted pT at least ``short_min_pt``) and it fits well
    (chi2/ndf at most ``short_max_chi2_ndf``). Longer candidates are left alone: their fits judge them.

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
    # columns of a 2-row array sorts them as records, far slower).
    layer = np.asarray(layer, dtype=np.int64)
    num_layers = int(layer.max()) + 1
    keys = unique(candidates.track_id.astype(np.int64) * num_layers + layer)
    layers = np.bincount(keys // num_layers, minlength=sizes.size)
    # Mean score of the steps between consecutive hits on different layers (no edge: 0). A step within one layer
    # (the double hit of overlapping modules) has no edge by construction (the graph joins layers): counted as 0,
    # it would sink a true candidate with doubles below the cut. A candidate's first hit has no step before it.
    hit_layer = layer[candidates.hits]
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


def select(candidates: TrackCandidates, columns: HitColumns, layer: np.ndarray, config) -> np.ndarray:
    """(N,) int64 the track of every hit among the ``candidates`` kept (2 hits or more, through both cuts), numbered
    0..K-1 in the candidates' order; -1 for the hits of the others. ``columns``, ``layer``, ``config``: as :func:`holed`."""
    weak = holed(columns, layer, candidates.track_id, candidates.fit_chi2_ndf, config) | short_and_weak(candidates, layer, config)
    kept = ~weak & (candidates.sizes() >= 2)
    return np.where(kept[candidates.track_id], np.cumsum(kept)[candidates.track_id] - 1, -1)
