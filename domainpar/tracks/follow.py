"""Score-ordered track following with a helix fit, and ambiguity resolution by shared hits.

The Python side of :mod:`domainpar.kernels.track_ckf`: the neighbour lists
and the seeds it reads, and the labels it gives back.

Seeds are triplets of hits a → b → c joined by two graph edges both scored
above ``seed_threshold``. They are taken in bands of their weaker edge's
score (``seed_bucket`` wide, the best band first); within a band, the seed
whose circle passes nearest the beam line first (a triplet that jumps
between two crossing particles curls away from it), then by the weaker and
the stronger score, then the lower hit ids. At most ``seeds_per_hit`` inner
and as many outer edges (the best-scored) of every middle hit b make seeds.
"""

from __future__ import annotations

import numba
import numpy as np
from scipy.spatial import cKDTree

from domainpar.kernels.track_ckf import MAX_HITS, follow_tracks, resolve_shared
from domainpar.data.detector import layer_table
from domainpar.kernels.track_holes import count_holes, hole_hits
from domainpar.kernels.track_refine import attach_free, merge_fragments, track_perigees

#: Nearest neighbours looked at per track end (merging) and per free hit (attaching).
NEIGHBOURS = 8
#: A layer crossed within this of its edge (mm) is not counted as a hole (modules do not reach the edge exactly).
HOLE_MARGIN = 5.0


@numba.njit(cache=True, nogil=True)
def _csr_best_first(num_nodes, src, dst, score):
    ptr = np.zeros(num_nodes + 1, dtype=np.int64)
    for k in range(src.shape[0]):
        ptr[src[k] + 1] += 1
    for v in range(num_nodes):
        ptr[v + 1] += ptr[v]
    fill = ptr[:-1].copy()
    node = np.empty(src.shape[0], dtype=np.int64)
    value = np.empty(src.shape[0], dtype=np.float64)
    for k in range(src.shape[0]):
        at = fill[src[k]]
        node[at] = dst[k]
        value[at] = score[k]
        fill[src[k]] += 1
    # Each row best first (insertion sort: rows are short; ties keep the edge order).
    for v in range(num_nodes):
        for i in range(ptr[v] + 1, ptr[v + 1]):
            s = value[i]
            d = node[i]
            j = i - 1
            while j >= ptr[v] and value[j] < s:
                value[j + 1] = value[j]
                node[j + 1] = node[j]
                j -= 1
            value[j + 1] = s
            node[j + 1] = d
    return ptr, node, value


def neighbours(num_nodes: int, edge_index: np.ndarray, scores: np.ndarray, min_score: float):
    """CSR of every hit's graph neighbours over edges scored above ``min_score`` (both directions), best first.

    Returns:
        ``(ptr (N+1,), node (K,), score (K,))``.
    """
    keep = np.flatnonzero(scores > min_score)
    src = np.concatenate([edge_index[0, keep], edge_index[1, keep]])
    dst = np.concatenate([edge_index[1, keep], edge_index[0, keep]])
    score = np.concatenate([scores[keep], scores[keep]]).astype(np.float64)
    return _csr_best_first(num_nodes, src, dst, score)


@numba.njit(cache=True, nogil=True)
def _triplets(in_ptr, in_node, in_score, out_ptr, out_node, out_score, per_hit):
    n = in_ptr.shape[0] - 1
    total = 0
    for b in range(n):
        total += min(in_ptr[b + 1] - in_ptr[b], per_hit) * min(out_ptr[b + 1] - out_ptr[b], per_hit)
    seeds = np.empty((3, total), dtype=np.int64)
    weak = np.empty(total, dtype=np.float64)
    strong = np.empty(total, dtype=np.float64)
    k = 0
    for b in range(n):
        for i in range(in_ptr[b], min(in_ptr[b + 1], in_ptr[b] + per_hit)):
            for o in range(out_ptr[b], min(out_ptr[b + 1], out_ptr[b] + per_hit)):
                seeds[0, k] = in_node[i]
                seeds[1, k] = b
                seeds[2, k] = out_node[o]
                weak[k] = min(in_score[i], out_score[o])
                strong[k] = max(in_score[i], out_score[o])
                k += 1
    return seeds, weak, strong


def _impact(pos: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """(S,) distance (mm) of the beam line (the z axis) from the circle through each seed's three hits in x-y."""
    a, b, c = (pos[seeds[k], :2] for k in range(3))
    # Circumcentre of the triangle a, b, c (a straight line: infinitely far, impact = distance to the line).
    ax, ay, bx, by, cx, cy = a[:, 0], a[:, 1], b[:, 0], b[:, 1], c[:, 0], c[:, 1]
    d = 2.0 * (ax * (by - cy) + bx * (cy - ay) + cx * (ay - by))
    a2, b2, c2 = ax * ax + ay * ay, bx * bx + by * by, cx * cx + cy * cy
    with np.errstate(divide="ignore", invalid="ignore"):
        ux = (a2 * (by - cy) + b2 * (cy - ay) + c2 * (ay - by)) / d
        uy = (a2 * (cx - bx) + b2 * (ax - cx) + c2 * (bx - ax)) / d
        radius = np.hypot(ax - ux, ay - uy)
        circle = np.abs(np.hypot(ux, uy) - radius)
        dx, dy = cx - ax, cy - ay
        line = np.abs(ax * dy - ay * dx) / np.maximum(np.hypot(dx, dy), 1e-12)
    return np.where(np.isfinite(circle) & (np.abs(d) > 1e-9), circle, line)


def seed_triplets(
    pos: np.ndarray, edge_index: np.ndarray, scores: np.ndarray, threshold: float, per_hit: int, bucket: float
) -> np.ndarray:
    """(3, S) seed triplets, best first (see the module docstring)."""
    num_nodes = pos.shape[0]
    keep = np.flatnonzero(scores > threshold)
    src, dst, score = edge_index[0, keep], edge_index[1, keep], scores[keep].astype(np.float64)
    out_ptr, out_node, out_score = _csr_best_first(num_nodes, src, dst, score)
    in_ptr, in_node, in_score = _csr_best_first(num_nodes, dst, src, score)
    seeds, weak, strong = _triplets(in_ptr, in_node, in_score, out_ptr, out_node, out_score, per_hit)
    impact = _impact(pos, seeds)
    level = np.floor(weak / bucket) if bucket > 0 else weak
    order = np.lexsort((seeds[2], seeds[1], seeds[0], -strong, -weak, impact, -level))
    return np.ascontiguousarray(seeds[:, order])


def follow(pos, variances, layer, edge_index, scores, config, shared: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Track labels per hit from score-ordered following (claiming, or shared + resolution); -1 = no track.

    Returns ``(labels, fragment, rank)``, each (N,) int64: the track of every hit (-1: none), the builder's track
    it was followed on (-1: attached later, or none) and its position along that one (for
    :func:`~domainpar.kernels.track_order.order_keys`).

    ``variances`` (N, 4): :func:`~domainpar.tracks.candidates.hit_variances`; ``config`` a
    :class:`~domainpar.tracks.candidates.TrackConfig`.
    """
    n = pos.shape[0]
    ptr, node, score = neighbours(n, edge_index, scores, config.extend_threshold)
    seeds = seed_triplets(pos, edge_index, scores, config.seed_threshold, config.seeds_per_hit, config.seed_bucket)
    columns = [np.ascontiguousarray(a[:, i], dtype=np.float64) for a in (pos, variances) for i in range(a.shape[1])]
    tracks_ptr, tracks_hits, chi2_ndf = follow_tracks(
        *columns, np.ascontiguousarray(layer, dtype=np.int64), ptr, node, score, seeds, not shared,
        np.array(sorted({config.first_pass_hits, config.min_hits}, reverse=True), dtype=np.int64), config.reach,
        config.window, config.hit_chi2, config.seed_chi2, config.max_chi2_ndf, config.score_weight, config.double_distance,
        config.max_per_layer, config.gate, config.gate_sigmas, config.min_hits, config.field, config.ms,
    )  # fmt: skip
    labels = np.full(n, -1, dtype=np.int64)
    sizes = np.diff(tracks_ptr)
    builder_track = np.repeat(np.arange(sizes.size), sizes)
    if not shared:
        labels[tracks_hits] = builder_track
    else:
        quality = np.lexsort((chi2_ndf, -sizes)).astype(np.int64)
        labels = resolve_shared(tracks_ptr, tracks_hits, quality, n, config.max_shared, config.min_hits)
    # Where each hit lies along the builder's track that kept it (its order along the track).
    fragment = np.full(n, -1, dtype=np.int64)
    rank = np.zeros(n, dtype=np.int64)
    kept = labels[tracks_hits] == builder_track
    fragment[tracks_hits[kept]] = builder_track[kept]
    rank[tracks_hits[kept]] = np.flatnonzero(kept)
    if shared:
        labels = np.unique(labels, return_inverse=True)[1].ravel() - (1 if (labels < 0).any() else 0)
    if config.refine:
        labels = refine(pos, variances, layer, edge_index, scores, labels, config)
    fragment[labels < 0] = -1
    return labels, fragment, rank


def layer_surfaces() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(barrel, position, low, high)`` (L,) of every detector layer (:mod:`domainpar.kernels.track_holes`)."""
    table = layer_table().set_index("layer_index").sort_index()
    barrel = table["barrel"].to_numpy(bool)
    position = np.where(barrel, table["r"], table["z"]).astype(np.float64)
    low = np.where(barrel, table["z_min"], table["r_min"]).astype(np.float64)
    high = np.where(barrel, table["z_max"], table["r_max"]).astype(np.float64)
    return barrel, position, low, high


def variances_columns(pos: np.ndarray, variances: np.ndarray) -> list[np.ndarray]:
    """x, y, z and the four variance columns, each (N,) contiguous float64: the kernels' hit arguments."""
    return [np.ascontiguousarray(a[:, i], dtype=np.float64) for a in (pos, variances) for i in range(a.shape[1])]


def layer_hits(pos: np.ndarray, layer: np.ndarray, num_layers: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(layer_ptr, sorted_phi, sorted_hits)``: every hit by layer, then azimuth (:func:`~domainpar.kernels.track_holes.nearest_free`)."""
    phi = np.arctan2(pos[:, 1], pos[:, 0])
    order = np.lexsort((phi, layer)).astype(np.int64)
    layer_ptr = np.zeros(num_layers + 1, dtype=np.int64)
    np.cumsum(np.bincount(layer, minlength=num_layers), out=layer_ptr[1:])
    return layer_ptr, np.ascontiguousarray(phi[order], dtype=np.float64), order


def _hole_arguments(columns, layer: np.ndarray, labels: np.ndarray, config) -> tuple:
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
    present[np.unique(layer)] = True
    layer_ptr, sorted_phi, sorted_hits = layer_hits(np.stack(columns[:3], axis=1), layer, barrel.size)
    return (perigees, offsets, hits, layer, barrel, position, low, high, present, HOLE_MARGIN, *columns[:3], layer_ptr,
            sorted_phi, sorted_hits)  # fmt: skip


def track_holes(pos, variances, layer, labels, config) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(T,) layers crossed, holes and evident holes of every track (labels 0..T-1, -1: on none; -1 where a track
    has no helix: below 3 hits), counting only the layers the event has hits on (a pixel-only event has no strip
    layers to miss). Evident: :mod:`~domainpar.kernels.track_holes`, within ``config.hole_reach``."""
    return count_holes(*_hole_arguments(variances_columns(pos, variances), layer, labels, config), config.hole_reach)


def hole_gates(config) -> np.ndarray:
    """(L,) how far (mm) from a track's helix a free hit of each layer may lie to fill a hole there:
    ``config.gate`` plus ``config.gate_sigmas`` of the layer's resolution along its coarse coordinate (pitch_v /
    sqrt(12) with ``config.sigma_hit``): 6.1 mm on a pixel layer, 7.7 on a short-strip one, 21.0-21.6 on a long-strip
    one at the defaults. A strip hit is recorded at its strip's centre, up to 5.4 mm from where the particle crossed."""
    table = layer_table().set_index("layer_index").sort_index()
    sigma = np.sqrt(table["pitch_v"].to_numpy(np.float64) ** 2 / 12.0 + config.sigma_hit**2)
    return config.gate + config.gate_sigmas * sigma


def attach_at_holes(columns, layer: np.ndarray, labels: np.ndarray, config) -> np.ndarray:
    """Labels with free hits attached where tracks have holes, judged as :func:`~domainpar.kernels.track_refine.attach_free`.

    The graph may hold no edge between a particle's hit and the rest of its track (the innermost pixel layer, the
    outer strip layers), so attaching by edges never tries it; the track's helix still passes through it. At
    every hole of every track the free hit of that layer nearest the helix within :func:`hole_gates` is tried.

    Args:
        columns: the hits' x, y, z and variances (:func:`variances_columns`).
        layer: (N,) int64 layer of every hit.
        labels: (N,) track of every hit, -1 for none.
    """
    free = labels < 0
    if not free.any() or free.all():
        return labels
    arguments = _hole_arguments(columns, layer, labels, config)
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
        *columns, layer, labels, ptr, node, np.zeros(node.size), np.unique(hit), config.hit_chi2, config.max_chi2_ndf,
        config.double_distance, config.max_per_layer, config.window, config.gate, config.field, config.ms, MAX_HITS,
    )  # fmt: skip


def holed(pos, variances, layer, track_id, fit_chi2_ndf, config) -> np.ndarray:
    """(T,) bool: tracks of at least ``config.hole_ratio`` holes per hit, unless they ended (below).

    A track whose helix crosses as many layers of the event without a hit on them as with one is a piece of a
    longer track, or no particle's. Or its particle ended: a hadron interacts in the material, a particle decays,
    and a stiff particle of 5 hits then crosses the rest of the detector as holes (on simulated full events one
    track in four this cut dropped was a particle's whole, docs/tracks.md). Such a track is kept when its holes
    are few but for crossings beyond its last hit with no hit of the event near them (fewer than
    ``config.ended_hole_ratio`` evident holes per hit) and its helix fits well (chi2/ndf at most
    ``config.ended_chi2_ndf``).

    Args:
        pos, variances, layer: (N, 3), (N, 4), (N,) the hits (:func:`~domainpar.tracks.candidates.hit_variances`).
        track_id: (N,) candidate of every hit (0..T-1).
        fit_chi2_ndf: (T,) helix-fit chi2/ndf of every candidate (nan: none).
        config: the cut's settings (:class:`~domainpar.tracks.candidates.TrackConfig`).
    """
    num_tracks = int(track_id.max()) + 1 if track_id.size else 0
    if config.hole_ratio <= 0 or num_tracks == 0:
        return np.zeros(num_tracks, dtype=bool)
    _, holes, evident = track_holes(pos, variances, layer, track_id, config)
    hits = np.bincount(track_id, minlength=num_tracks)
    with np.errstate(invalid="ignore"):
        ended = (evident < config.ended_hole_ratio * hits) & (fit_chi2_ndf <= config.ended_chi2_ndf)
    return (holes >= 0) & (holes >= config.hole_ratio * hits) & ~ended


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


#: Scales of the perigee parameters in the search for pieces of one particle: curvature (1/mm), direction (rad),
#: impact parameter (mm), asinh(dz/ds) (the pseudorapidity), z at the closest approach (mm).
PERIGEE_SCALES = (3e-4, 0.03, 10.0, 0.03, 20.0)
#: Pairs further apart than this in the scaled parameters are not tried.
PERIGEE_REACH = 4.0


def _perigee_pairs(columns, labels: np.ndarray, config) -> np.ndarray:
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


def refine(pos, variances, layer, edge_index, scores, labels, config) -> np.ndarray:
    """Fragments merged and free hits attached by their helix fits (:mod:`domainpar.kernels.track_refine`).

    Merges are tried between tracks joined by graph edges (scored above ``extend_threshold``), then between tracks
    whose helices at the beam line are near (pieces of one particle, the graph or its filter lost every edge across
    a gap); free hits are tried with the tracks of their graph neighbours.

    Args:
        labels: (N,) track of every hit, -1 for none.

    Returns:
        (N,) new labels, tracks below ``config.min_hits`` hits dissolved (-1).
    """
    n = pos.shape[0]
    columns = [np.ascontiguousarray(a[:, i], dtype=np.float64) for a in (pos, variances) for i in range(a.shape[1])]
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
    keep = np.flatnonzero(scores > config.extend_threshold)
    # Graph neighbours, both directions, each with its edge's score.
    src = np.concatenate([edge_index[0, keep], edge_index[1, keep]])
    dst = np.concatenate([edge_index[1, keep], edge_index[0, keep]])
    score = np.concatenate([scores[keep], scores[keep]]).astype(np.float64)
    ptr, node, score = _csr_best_first(n, src, dst, score)
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
