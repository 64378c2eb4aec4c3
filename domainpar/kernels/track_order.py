"""The hits of every track candidate in order along the track (numba).

Knows nothing of events: positions, a candidate label per hit, and what the builder knew of the order in; a position
along its candidate per hit out.

A builder that follows tracks hit by hit knows their order (a *fragment*: hits with a rank along it); refinements
merge fragments and attach single hits, and the edge-only builders know no order at all. So, per candidate:

1. its fragments, each in its own rank order, are laid end to end, the fragment whose first hit is nearest the
   origin (3-D) first;
2. every hit without a rank is inserted where it lengthens the path least (cheapest insertion: between two
   consecutive hits, or before the first or after the last), hits nearest the origin first. A candidate without any
   ranked hit starts from its hit nearest the origin.

For a particle that does not curl this is its order outwards; a curler keeps the order its builder followed.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _distance(x, y, z, a, b):
    return np.sqrt((x[a] - x[b]) ** 2 + (y[a] - y[b]) ** 2 + (z[a] - z[b]) ** 2)


@numba.njit(cache=True, nogil=True)
def order_keys(x: np.ndarray, y: np.ndarray, z: np.ndarray, labels: np.ndarray, fragment: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Position of every hit along its candidate (see the module docstring).

    Args:
        x, y, z: (N,) hit positions.
        labels: (N,) int64 candidate of every hit, 0..T-1.
        fragment: (N,) int64 builder fragment of every hit, -1 where none.
        rank: (N,) int64 position of the hit along its fragment (any increasing numbers; ignored where fragment < 0).

    Returns:
        (N,) int64 position of every hit along its candidate, 0 at its first hit.
    """
    n = x.shape[0]
    num = 0
    for i in range(n):
        if labels[i] + 1 > num:
            num = labels[i] + 1
    # Hits grouped by candidate (CSR), sorted within by (fragment, rank) with unranked last.
    count = np.zeros(num + 1, dtype=np.int64)
    for i in range(n):
        count[labels[i] + 1] += 1
    ptr = np.cumsum(count)
    fill = ptr[:-1].copy()
    members = np.empty(n, dtype=np.int64)
    for i in range(n):
        members[fill[labels[i]]] = i
        fill[labels[i]] += 1
    origin = np.sqrt(x * x + y * y + z * z)
    key = np.zeros(n, dtype=np.int64)
    path = np.empty(n, dtype=np.int64)
    for t in range(num):
        lo = ptr[t]
        hi = ptr[t + 1]
        size = hi - lo
        if size == 1:
            key[members[lo]] = 0
            continue
        hits = members[lo:hi].copy()
        # Fragments in order of their first (lowest-rank) hit's distance from the origin; ranked hits by rank.
        num_ranked = 0
        for k in range(size):
            if fragment[hits[k]] >= 0:
                num_ranked += 1
        length = 0
        if num_ranked > 0:
            # Start distance of each fragment: the distance of its lowest-rank hit.
            frag_start = np.empty(size)
            for k in range(size):
                h = hits[k]
                best_rank = rank[h]
                best_hit = h
                if fragment[h] < 0:
                    frag_start[k] = np.inf
                    continue
                for m in range(size):
                    g = hits[m]
                    if fragment[g] == fragment[h] and rank[g] < best_rank:
                        best_rank = rank[g]
                        best_hit = g
                frag_start[k] = origin[best_hit]
            order = np.empty(size, dtype=np.int64)
            # Stable selection by (fragment start, fragment id, rank).
            used = np.zeros(size, dtype=np.bool_)
            for q in range(num_ranked):
                best = -1
                for k in range(size):
                    h = hits[k]
                    if used[k] or fragment[h] < 0:
                        continue
                    if best < 0:
                        best = k
                        continue
                    b = hits[best]
                    if (frag_start[k], fragment[h], rank[h]) < (frag_start[best], fragment[b], rank[b]):
                        best = k
                used[best] = True
                order[q] = hits[best]
            for q in range(num_ranked):
                path[lo + q] = order[q]
            length = num_ranked
        # The unranked hits, nearest the origin first, each where it lengthens the path least.
        rest = np.empty(size - num_ranked, dtype=np.int64)
        r = 0
        for k in range(size):
            if fragment[hits[k]] < 0:
                rest[r] = hits[k]
                r += 1
        rest = rest[np.argsort(origin[rest], kind="mergesort")]
        for h in rest:
            if length == 0:
                path[lo] = h
                length = 1
                continue
            best_at = 0
            best_cost = _distance(x, y, z, h, path[lo])
            end_cost = _distance(x, y, z, h, path[lo + length - 1])
            if end_cost < best_cost:
                best_cost = end_cost
                best_at = length
            for k in range(length - 1):
                a = path[lo + k]
                b = path[lo + k + 1]
                cost = _distance(x, y, z, a, h) + _distance(x, y, z, h, b) - _distance(x, y, z, a, b)
                if cost < best_cost:
                    best_cost = cost
                    best_at = k + 1
            for k in range(length, best_at, -1):
                path[lo + k] = path[lo + k - 1]
            path[lo + best_at] = h
            length += 1
        # From the end nearer the origin.
        if origin[path[lo + size - 1]] < origin[path[lo]] and num_ranked == 0:
            for k in range(size // 2):
                tmp = path[lo + k]
                path[lo + k] = path[hi - 1 - k]
                path[hi - 1 - k] = tmp
        for k in range(size):
            key[path[lo + k]] = k
    return key
