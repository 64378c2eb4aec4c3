"""Score-ordered track following with a helix fit, and ambiguity resolution by shared hits.

The Python side of :mod:`domainpar.kernels.track_ckf`: the neighbour lists
and the seeds it reads, and the labels it gives back.

Seeds are triplets of hits a → b → c joined by two graph edges both scored
above the threshold, ordered by their weaker edge's score (best first; ties:
the stronger edge, then the lower hit ids). At most ``seeds_per_hit`` inner
and as many outer edges (the best-scored) of every middle hit b make seeds.
"""

from __future__ import annotations

import numba
import numpy as np

from domainpar.kernels.track_ckf import MAX_HITS, follow_tracks, resolve_shared
from domainpar.kernels.track_refine import attach_free, merge_fragments


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


def seed_triplets(num_nodes: int, edge_index: np.ndarray, scores: np.ndarray, threshold: float, per_hit: int) -> np.ndarray:
    """(3, S) seed triplets, best first (see the module docstring)."""
    keep = np.flatnonzero(scores > threshold)
    src, dst, score = edge_index[0, keep], edge_index[1, keep], scores[keep].astype(np.float64)
    out_ptr, out_node, out_score = _csr_best_first(num_nodes, src, dst, score)
    in_ptr, in_node, in_score = _csr_best_first(num_nodes, dst, src, score)
    seeds, weak, strong = _triplets(in_ptr, in_node, in_score, out_ptr, out_node, out_score, per_hit)
    order = np.lexsort((seeds[2], seeds[1], seeds[0], -strong, -weak))
    return np.ascontiguousarray(seeds[:, order])


def follow(pos, variances, layer, edge_index, scores, config, shared: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Track labels per hit from score-ordered following (claiming, or shared + resolution); -1 = no track.

    Returns ``(labels, fragment, rank)``, each (N,) int64: the track of every hit (-1: none), the builder's track
    it was followed on (-1: attached later, or none) and its position along that one (for
    :func:`~domainpar.kernels.track_order.order_keys`).

    ``variances`` (N, 3): :func:`~domainpar.tracks.candidates.hit_variances`; ``config`` a
    :class:`~domainpar.tracks.candidates.TrackConfig`.
    """
    n = pos.shape[0]
    ptr, node, score = neighbours(n, edge_index, scores, config.extend_threshold)
    seeds = seed_triplets(n, edge_index, scores, config.threshold, config.seeds_per_hit)
    columns = [np.ascontiguousarray(a[:, i], dtype=np.float64) for a in (pos, variances) for i in range(3)]
    tracks_ptr, tracks_hits, chi2_ndf = follow_tracks(
        *columns, np.ascontiguousarray(layer, dtype=np.int64), ptr, node, score, seeds, not shared, config.reach,
        config.window, config.hit_chi2, config.seed_chi2, config.max_chi2_ndf, config.score_weight, config.double_distance,
        config.max_per_layer, config.gate, config.min_hits, config.field, config.ms,
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


def refine(pos, variances, layer, edge_index, scores, labels, config) -> np.ndarray:
    """Fragments merged and free hits attached by their helix fits (:mod:`domainpar.kernels.track_refine`).

    Args:
        labels: (N,) track of every hit, -1 for none.

    Returns:
        (N,) new labels, tracks below ``config.min_hits`` hits dissolved (-1).
    """
    n = pos.shape[0]
    columns = [np.ascontiguousarray(a[:, i], dtype=np.float64) for a in (pos, variances) for i in range(3)]
    layer = np.ascontiguousarray(layer, dtype=np.int64)
    keep = scores > config.extend_threshold
    a, b = labels[edge_index[0, keep]], labels[edge_index[1, keep]]
    cross = (a >= 0) & (b >= 0) & (a != b)
    if cross.any():
        lo, hi = np.minimum(a[cross], b[cross]), np.maximum(a[cross], b[cross])
        num_tracks = int(labels.max()) + 1
        keys, inverse, count = np.unique(lo * num_tracks + hi, return_inverse=True, return_counts=True)
        pairs = np.stack([keys // num_tracks, keys % num_tracks])
        total = np.bincount(inverse.ravel(), scores[keep][cross], minlength=keys.size)
        order = np.lexsort((keys, -total, -count))
        labels = merge_fragments(
            *columns, layer, np.ascontiguousarray(labels, dtype=np.int64), np.ascontiguousarray(pairs[0, order]),
            np.ascontiguousarray(pairs[1, order]), config.max_chi2_ndf, config.double_distance, config.max_per_layer, config.window,
            config.gate, config.field, config.ms, MAX_HITS,
        )  # fmt: skip
    ptr, node, score = neighbours(n, edge_index, scores, config.extend_threshold)
    free = np.flatnonzero(labels < 0)
    best = np.full(n, -np.inf)
    np.maximum.at(best, np.repeat(np.arange(n), np.diff(ptr)), score) if score.size else None
    free = free[np.lexsort((free, -best[free]))]
    labels = attach_free(
        *columns, layer, np.ascontiguousarray(labels, dtype=np.int64), ptr, node, score, free, config.hit_chi2,
        config.double_distance, config.max_per_layer, config.window, config.gate, config.field, config.ms, MAX_HITS,
    )  # fmt: skip
    sizes = np.bincount(labels[labels >= 0], minlength=1)
    small = (labels >= 0) & (sizes[np.maximum(labels, 0)] < config.min_hits)
    labels[small] = -1
    return labels
