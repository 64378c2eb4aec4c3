"""Seeding, the first stage of the following methods (``ckf``, ``ambiguity``): the triplets tracks start from.

Seeds are triplets of hits a → b → c joined by two graph edges both scored above ``seed_threshold``. They are taken
in bands of their weaker edge's score (``seed_bucket`` wide, the best band first); within a band, the seed whose
circle passes nearest the beam line first (a triplet that jumps between two crossing particles curls away from it),
then by the weaker and the stronger score, then the lower hit ids. At most ``seeds_per_hit`` inner and as many outer
edges (the best-scored) of every middle hit b make seeds. Following (:mod:`domainpar.tracks.following`) grows a
track from each, in this order.
"""

from __future__ import annotations

import numba
import numpy as np

from domainpar.tracks.inputs import best_first


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
    """(3, S) seed triplets, best first (see the module docstring).

    Args:
        pos: (N, 3) hit positions (mm).
        edge_index: (2, E) graph edges, row 0 the inner hit.
        scores: (E,) edge scores.
        threshold, per_hit, bucket: ``seed_threshold``, ``seeds_per_hit`` and ``seed_bucket`` of
            :class:`~domainpar.tracks.config.TrackConfig`.
    """
    num_nodes = pos.shape[0]
    keep = np.flatnonzero(scores > threshold)
    src, dst, score = edge_index[0, keep], edge_index[1, keep], scores[keep].astype(np.float64)
    out_ptr, out_node, out_score = best_first(num_nodes, src, dst, score)
    in_ptr, in_node, in_score = best_first(num_nodes, dst, src, score)
    seeds, weak, strong = _triplets(in_ptr, in_node, in_score, out_ptr, out_node, out_score, per_hit)
    impact = _impact(pos, seeds)
    level = np.floor(weak / bucket) if bucket > 0 else weak
    order = np.lexsort((seeds[2], seeds[1], seeds[0], -strong, -weak, impact, -level))
    return np.ascontiguousarray(seeds[:, order])
