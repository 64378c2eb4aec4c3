"""Refinement of followed tracks by their helix fits (``refine``, on): it runs twice in ``ckf`` and ``ambiguity``.

1. After following (and ambiguity resolution), :func:`refine` merges fragments of one particle
   (:func:`~domainpar.kernels.track_refine.merge_fragments`: pairs joined by graph edges, then pairs with alike
   helices at the beam line) and attaches free hits to the tracks of their graph neighbours
   (:func:`~domainpar.kernels.track_refine.attach_free`); tracks left below ``min_hits`` are dissolved.
2. After selection, :func:`attach_at_holes` tries, at every hole of every track kept
   (:func:`~domainpar.tracks.selection.track_holes`), the free hit of that layer nearest the helix: the graph may
   hold no edge between a particle's hit and the rest of its track (the innermost pixel layer, the outer strip
   layers), so attaching by edges never tries it, and the track's helix still passes through it.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree

from domainpar.arrays import unique
from domainpar.kernels.track_ckf import MAX_HITS
from domainpar.kernels.track_fit import HitColumns
from domainpar.kernels.track_holes import hole_hits
from domainpar.kernels.track_refine import attach_free, merge_fragments, track_perigees
from domainpar.tracks.inputs import coarse_resolution
from domainpar.tracks.selection import hole_arguments

#: Nearest tracks looked at per track in the search for pieces of one particle (:func:`_perigee_pairs`).
NEIGHBOURS = 8
#: Scales of the perigee parameters in the search for pieces of one particle: curvature (1/mm), direction (rad),
#: impact parameter (mm), asinh(dz/ds) (the pseudorapidity), z at the closest approach (mm).
PERIGEE_SCALES = (3e-4, 0.03, 10.0, 0.03, 20.0)
#: Pairs further apart than this in the scaled parameters are not tried.
PERIGEE_REACH = 4.0


def _edge_pairs(labels: np.ndarray, edge_index: np.ndarray, scores: np.ndarray, min_score: float) -> np.ndarray:
    """(2, P) track pairs joined by graph edges scored above ``min_score``: most edges first, then the higher summed score."""
    keep = scores > min_score
    a, b = labels[edge_index[0, keep]], labels[edge_index[1, keep]]
    cross = (a >= 0) & (b >= 0) & (a != b)
    if not cross.any():
        return np.zeros((2, 0), dtype=np.int64)
    lo, hi = np.minimum(a[cross], b[cross]), np.maximum(a[cross], b[cross])
    num_tracks = int(labels.max()) + 1
    keys, inverse, count = np.unique(lo * num_tracks + hi, return_inverse=True, return_counts=True)
    total = np.bincount(inverse.ravel(), scores[keep][cross], minlength=keys.size)
    keys = keys[np.lexsort((keys, -total, -count))]
    return np.stack([keys // num_tracks, keys % num_tracks])


def _perigee_pairs(columns: HitColumns, labels: np.ndarray, config) -> np.ndarray:
    """(2, P) track pairs with alike helices at the beam line (:func:`~domainpar.kernels.track_fit.perigee`):
    the NEIGHBOURS nearest tracks of each in the scaled parameters, within PERIGEE_REACH, nearest first. Pieces
    of one particle share its helix however far apart they lie, graph edge or not."""
    if not (labels >= 0).any():
        return np.zeros((2, 0), dtype=np.int64)
    params = track_perigees(*columns, labels, config.field, config.ms)
    valid = np.flatnonzero(np.isfinite(params).all(axis=1))
    if valid.size < 2:
        return np.zeros((2, 0), dtype=np.int64)
    kappa, phi, d0, cot, z0 = params[valid].T
    k_s, phi_s, d_s, eta_s, z_s = PERIGEE_SCALES
    features = np.stack([kappa / k_s, np.cos(phi) / phi_s, np.sin(phi) / phi_s, d0 / d_s, np.arcsinh(cot) / eta_s, z0 / z_s], 1)
    k = min(NEIGHBOURS + 1, valid.size)
    gaps, found = cKDTree(features).query(features, k=k, distance_upper_bound=PERIGEE_REACH)
    src = np.repeat(np.arange(valid.size), k)
    hit = found.ravel()
    ok = (hit < valid.size) & (hit != src)
    a, b, d = valid[src[ok]], valid[hit[ok]], gaps.ravel()[ok]
    num_tracks = params.shape[0]
    keys = np.minimum(a, b) * num_tracks + np.maximum(a, b)
    order = np.lexsort((keys, d))
    keys, first_seen = np.unique(keys[order], return_index=True)
    keys = keys[np.argsort(first_seen, kind="stable")]
    return np.stack([keys // num_tracks, keys % num_tracks])


def refine(
    columns: HitColumns, layer: np.ndarray, edge_index: np.ndarray, scores: np.ndarray, nbrs: tuple, labels: np.ndarray, config
) -> np.ndarray:
    """Fragments merged and free hits attached by their helix fits (1. of the module docstring): merges of tracks
    joined by edges above ``extend_threshold`` first, then of tracks with alike helices (pieces of one particle, the
    graph or its filter lost every edge across a gap); free hits, the best-scored first.

    Args:
        columns: the hits' positions and resolutions (:func:`~domainpar.kernels.track_fit.hit_columns`).
        layer: (N,) layer code of every hit.
        edge_index, scores: (2, E), (E,) the graph's edges and their scores.
        nbrs: every hit's neighbours over edges above ``extend_threshold`` (:func:`~domainpar.tracks.inputs.neighbours`).
        labels: (N,) track of every hit, -1 for none.
        config: the :class:`~domainpar.tracks.config.TrackConfig`.

    Returns:
        (N,) new labels, tracks below ``config.min_hits`` hits dissolved (-1).
    """
    n = labels.size
    layer = np.ascontiguousarray(layer, dtype=np.int64)
    pairs = np.concatenate(
        [_edge_pairs(labels, edge_index, scores, config.extend_threshold), _perigee_pairs(columns, labels, config)], axis=1
    )
    if pairs.shape[1]:
        labels = merge_fragments(
            *columns, layer, np.ascontiguousarray(labels, dtype=np.int64), np.ascontiguousarray(pairs[0]),
            np.ascontiguousarray(pairs[1]), config.max_chi2_ndf, config.double_distance, config.max_per_layer, config.window,
            config.gate, config.field, config.ms, MAX_HITS,
        )  # fmt: skip
    free = np.flatnonzero(labels < 0)
    ptr, node, score = nbrs
    best = np.full(n, -np.inf)
    if score.size:
        np.maximum.at(best, np.repeat(np.arange(n), np.diff(ptr)), score)
    free = free[np.lexsort((free, -best[free]))]
    labels = attach_free(
        *columns, layer, np.ascontiguousarray(labels, dtype=np.int64), ptr, node, score, free, config.hit_chi2,
        config.max_chi2_ndf, config.double_distance, config.max_per_layer, config.window, config.gate, config.field, config.ms, MAX_HITS,
    )  # fmt: skip
    sizes = np.bincount(labels[labels >= 0], minlength=1)
    small = (labels >= 0) & (sizes[np.maximum(labels, 0)] < config.min_hits)
    labels[small] = -1
    return labels


def hole_gates(config) -> np.ndarray:
    """(L,) how far (mm) from a track's helix a free hit of each layer may lie to fill a hole there:
    ``config.gate`` plus ``config.gate_sigmas`` of the layer's resolution along its coarse coordinate
    (:func:`~domainpar.tracks.inputs.coarse_resolution`): a strip hit is recorded at its strip's centre, millimetres
    from where the particle crossed."""
    return config.gate + config.gate_sigmas * coarse_resolution(config.sigma_hit)


def attach_at_holes(columns: HitColumns, layer: np.ndarray, labels: np.ndarray, config) -> np.ndarray:
    """Labels with free hits attached where tracks have holes (2. of the module docstring: the free hit of the layer
    nearest the helix within :func:`hole_gates`), judged as :func:`~domainpar.kernels.track_refine.attach_free`.

    Args:
        columns: the hits' positions and resolutions (:func:`~domainpar.kernels.track_fit.hit_columns`).
        layer: (N,) int64 layer of every hit.
        labels: (N,) track of every hit, -1 for none.
        config: the :class:`~domainpar.tracks.config.TrackConfig`.
    """
    free = labels < 0
    if not free.any() or free.all():
        return labels
    arguments = hole_arguments(columns, layer, labels, config)
    offsets, hits = arguments[1], arguments[2]
    hit, track = hole_hits(*arguments, free, hole_gates(config))
    if hit.size == 0:
        return labels
    # Each free hit's "neighbours": one hit of every track it may join (attach_free reads their tracks).
    order = np.argsort(hit, kind="stable")
    ptr = np.zeros(labels.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(hit, minlength=labels.size), out=ptr[1:])
    node = hits[offsets[track[order]]]
    return attach_free(
        *columns, layer, labels, ptr, node, np.zeros(node.size), unique(hit), config.hit_chi2, config.max_chi2_ndf,
        config.double_distance, config.max_per_layer, config.window, config.gate, config.field, config.ms, MAX_HITS,
    )  # fmt: skip
