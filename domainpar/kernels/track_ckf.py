"""Score-ordered track following with a helix fit (a combinatorial-Kalman-filter-like builder), numba.

Knows nothing of events or files: hit positions, a neighbour list with edge
scores, and seeds in; candidate tracks out. A *track* grows from a seed
triplet of hits in both directions, one step at a time:

1. *Candidates* of a step are the graph neighbours (either edge direction:
   a curling particle comes back inwards) of the track's last ``reach`` hits
   at that end that lie ahead of the end hit (along the direction from the
   nearest track hit on another layer to it), not on the track yet, free (in
   the claiming mode) and not vetoed by the layer rule below.
2. Each candidate is judged by the helix fit of the track with it added:
   its chi2 increment ``d`` (:func:`~domainpar.kernels.track_fit.helix_fit`,
   the same errors as every fit) must stay below ``hit_chi2``; its cost is
   ``d - score_weight * ln(score)``, score the best edge score joining it to
   the track's end. The cheapest candidate joins the track.
3. *Double hits*: another candidate on the same layer as the one just added,
   within ``double_distance`` mm of it (overlapping modules), joins too when
   the fit with both stays within ``hit_chi2`` per added hit.
4. Layer rule: a candidate on a layer the track already holds is taken only
   as a double hit of that layer's hit (within ``double_distance``; it may
   lie a little behind the end), or once the track has turned back inwards
   (a curler's second half).

A track ends when no candidate passes at either end; it is kept when it has
``min_hits`` hits and its chi2/ndf is at most ``max_chi2_ndf``.

Two modes:

* *claiming*: seeds are taken in the given order (best first); a seed whose
  hits are all free builds a track, and a kept track claims its hits, which
  no later track may take;
* *shared*: every seed with a hit on no earlier candidate builds its track
  regardless of other tracks' hits; :func:`resolve_shared` then keeps a
  consistent subset (ambiguity resolution by shared hits).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from domainpar.kernels.track_fit import helix_fit, window_chi2_ndf

#: Longest track the builder grows (hits); a full-length track has ~ 10-20.
MAX_HITS = 96


@numba.njit(cache=True, nogil=True)
def _chi2(x, y, z, var_t, var_z, var_r, buf, start, count, field, ms):
    if count < 3:
        return 0.0
    chi2, _, _, _, _, _, _, _ = helix_fit(x, y, z, var_t, var_z, var_r, buf[start:], count, field, ms)
    return chi2


@numba.njit(cache=True, nogil=True)
def _insert_delta(x, y, z, var_t, var_z, var_r, buf, start, end, i, c, window, field, ms, old=np.nan):
    """chi2 increment of putting hit c at index i of the track buf[start:end] (start <= i <= end), judged on the
    ``window`` consecutive hits around it (the last ones at an end); buf is left as it was. ``old``: the chi2 of
    those hits without c when known (the same for every candidate at one end)."""
    lo = max(start, i - (window - 1) // 2)
    hi = min(end + 1, lo + window)
    lo = max(start, hi - window)
    if np.isnan(old):
        old = _chi2(x, y, z, var_t, var_z, var_r, buf, lo, hi - 1 - lo, field, ms)
    for k in range(end, i, -1):
        buf[k] = buf[k - 1]
    buf[i] = c
    new = _chi2(x, y, z, var_t, var_z, var_r, buf, lo, hi - lo, field, ms)
    for k in range(i, end):
        buf[k] = buf[k + 1]
    return new - old


@numba.njit(cache=True, nogil=True)
def _insert(buf, end, i, c):
    for k in range(end, i, -1):
        buf[k] = buf[k - 1]
    buf[i] = c
    return end + 1


@numba.njit(cache=True, nogil=True)
def _add_candidate(c, score, stamp, stamp_id, cand, cand_score, num_cand):
    """Add hit c (best score per hit) to the candidate list; the new count."""
    if stamp[c] == stamp_id:
        for m in range(num_cand):
            if cand[m] == c and score > cand_score[m]:
                cand_score[m] = score
        return num_cand
    stamp[c] = stamp_id
    if num_cand < cand.shape[0]:
        cand[num_cand] = c
        cand_score[num_cand] = score
        num_cand += 1
    return num_cand


@numba.njit(cache=True, nogil=True)
def _end_state(x, y, z, var_t, var_z, var_r, layer, buf, start, end, direction, window, field, ms):
    """The helix at the growing end, fitted to the last ``window`` hits.

    Returns ``(tx, ty, tz, xc, yc, radius)``: the direction of travel at the tip ((tx, ty) a unit vector, tz =
    dz/ds) and the fitted circle (radius inf: a straight line through the tip along (tx, ty))."""
    if direction > 0:
        lo = max(start, end - window)
        hi = end
        tip = buf[end - 1]
    else:
        lo = start
        hi = min(end, start + window)
        tip = buf[start]
    # The chord from the nearest hit on another layer (a double hit's twin gives no direction) to the tip.
    back = buf[end - 2] if direction > 0 else buf[start + 1]
    for k in range(1, end - start):
        h = buf[end - 1 - k] if direction > 0 else buf[start + k]
        if layer[h] != layer[tip]:
            back = h
            break
    cx = x[tip] - x[back]
    cy = y[tip] - y[back]
    cz = z[tip] - z[back]
    norm = math.sqrt(cx * cx + cy * cy)
    chord_slope = cz / norm if norm > 0.0 else 0.0
    chord_x = cx / norm if norm > 0.0 else 1.0
    chord_y = cy / norm if norm > 0.0 else 0.0
    if hi - lo < 3:
        return chord_x, chord_y, chord_slope, np.nan, np.nan, np.inf
    _, _, _, _, xc, yc, _, slope = helix_fit(x, y, z, var_t, var_z, var_r, buf[lo:], hi - lo, field, ms)
    # |dz/ds| from the fit, signed like the chord (s runs along the buffer; the chord points along travel).
    tz = abs(slope) if cz >= 0.0 else -abs(slope)
    if not np.isfinite(xc):
        return chord_x, chord_y, tz, np.nan, np.nan, np.inf
    # Perpendicular to the radius at the tip, oriented like the chord.
    tx = -(y[tip] - yc)
    ty = x[tip] - xc
    if tx * cx + ty * cy < 0.0:
        tx = -tx
        ty = -ty
    radius = math.sqrt(tx * tx + ty * ty)
    if radius == 0.0:
        return chord_x, chord_y, tz, np.nan, np.nan, np.inf
    return tx / radius, ty / radius, tz, xc, yc, radius


@numba.njit(cache=True, nogil=True)
def _in_gate(x, y, z, c, tip, tx, ty, tz, xc, yc, radius, gate, check_z):
    """Whether hit c lies within ``gate`` mm of the helix at the tip: across the circle in x-y, and (with check_z)
    across the (s, z) line, s the arc from the tip to c (the x-y distance for a straight line)."""
    if radius < np.inf:
        across = abs(math.sqrt((x[c] - xc) ** 2 + (y[c] - yc) ** 2) - radius)
    else:
        across = abs((x[c] - x[tip]) * ty - (y[c] - y[tip]) * tx)
    if across > gate:
        return False
    if not check_z:
        return True
    if radius < np.inf:
        # The arc from the tip to c around the centre (a curler turns far between two layers).
        ax = x[tip] - xc
        ay = y[tip] - yc
        bx = x[c] - xc
        by = y[c] - yc
        ds = radius * abs(math.atan2(ax * by - ay * bx, ax * bx + ay * by))
    else:
        ds = math.sqrt((x[c] - x[tip]) ** 2 + (y[c] - y[tip]) ** 2)
    return abs(z[c] - z[tip] - tz * ds) <= gate * math.sqrt(1.0 + tz * tz)


@numba.njit(cache=True, nogil=True)
def _grow(
    x, y, z, var_t, var_z, var_r, layer, nbr_ptr, nbr_node, nbr_score, owner, member, build_id, buf, start, end,
    direction, reach, window, hit_chi2, score_weight, double_distance, max_per_layer, gate, field, ms, claiming, stamp,
    stamp_id, cand, cand_score, stones,
):  # fmt: skip
    """Grow the track buf[start:end] (ordered along the track) at its end (direction +1) or its start (-1).

    Returns the new end and ``stamp_id``; the track stays at buf[start:end]."""
    while end - start < MAX_HITS - 2 and end < buf.shape[0] - 2:
        # Candidates: neighbours of the last `reach` hits at this end, best score per hit. Every neighbour ahead,
        # taken or not, is also a stepping stone for the second round.
        num_cand = 0
        num_stones = 0
        stamp_id += 1
        for k in range(reach):
            idx = end - 1 - k if direction > 0 else start + k
            if idx < start or idx >= end:
                break
            h = buf[idx]
            for j in range(nbr_ptr[h], nbr_ptr[h + 1]):
                c = nbr_node[j]
                if member[c] == build_id:
                    continue
                if claiming and owner[c] >= 0:
                    if num_stones < stones.shape[0]:
                        stones[num_stones] = c
                        num_stones += 1
                    continue
                num_cand = _add_candidate(c, nbr_score[j], stamp, stamp_id, cand, cand_score, num_cand)
        added = False
        # Double hits first: a candidate on a track layer close to the track's hit there (overlapping modules)
        # goes beside that hit, on the side of the track it lies towards.
        for m in range(num_cand):
            c = cand[m]
            twin = -1
            best_d2 = np.inf
            same = 0
            far = False
            for idx in range(start, end):
                h = buf[idx]
                if layer[h] == layer[c]:
                    same += 1
                    d2 = (x[c] - x[h]) ** 2 + (y[c] - y[h]) ** 2 + (z[c] - z[h]) ** 2
                    far = far or d2 > double_distance * double_distance
                    if d2 < best_d2:
                        best_d2 = d2
                        twin = idx
            if twin < 0 or far or same >= max_per_layer:
                continue
            h = buf[twin]
            ref = buf[twin + 1] if twin + 1 < end else buf[twin - 1]
            sign = 1.0 if twin + 1 < end else -1.0
            proj = (x[c] - x[h]) * (x[ref] - x[h]) + (y[c] - y[h]) * (y[ref] - y[h]) + (z[c] - z[h]) * (z[ref] - z[h])
            at = twin + 1 if proj * sign > 0.0 else twin
            if _insert_delta(x, y, z, var_t, var_z, var_r, buf, start, end, at, c, window, field, ms) <= hit_chi2:
                end = _insert(buf, end, at, c)
                member[c] = build_id
                added = True
        # Then one hit ahead: the cheapest candidate; failing that, one reached through a stepping stone.
        tip = buf[end - 1] if direction > 0 else buf[start]
        tx, ty, tz, xc, yc, radius = _end_state(x, y, z, var_t, var_z, var_r, layer, buf, start, end, direction, window, field, ms)
        at = end if direction > 0 else start
        lo = max(start, at - (window - 1)) if direction > 0 else start
        old = _chi2(x, y, z, var_t, var_z, var_r, buf, lo, min(window - 1, end - lo), field, ms)
        for round in range(2):
            if round == 1:
                for m in range(num_cand):
                    if num_stones < stones.shape[0]:
                        stones[num_stones] = cand[m]
                        num_stones += 1
                stamp_id += 1
                num_cand = 0
                for q in range(num_stones):
                    v = stones[q]
                    if (x[v] - x[tip]) * tx + (y[v] - y[tip]) * ty + (z[v] - z[tip]) * tz <= 0.0:
                        continue
                    if not _in_gate(x, y, z, v, tip, tx, ty, tz, xc, yc, radius, 2.0 * gate, True):
                        continue
                    for j in range(nbr_ptr[v], nbr_ptr[v + 1]):
                        c = nbr_node[j]
                        if member[c] == build_id or (claiming and owner[c] >= 0):
                            continue
                        num_cand = _add_candidate(c, nbr_score[j], stamp, stamp_id, cand, cand_score, num_cand)
            best = -1
            best_cost = np.inf
            for m in range(num_cand):
                c = cand[m]
                if member[c] == build_id:
                    continue
                if (x[c] - x[tip]) * tx + (y[c] - y[tip]) * ty + (z[c] - z[tip]) * tz <= 0.0:
                    continue
                if not _in_gate(x, y, z, c, tip, tx, ty, tz, xc, yc, radius, gate, True):
                    continue
                # A layer the track holds only beyond double-hit distance on a curler's way back: the fit decides.
                delta = _insert_delta(x, y, z, var_t, var_z, var_r, buf, start, end, at, c, window, field, ms, old)
                if delta > hit_chi2:
                    continue
                cost = delta - score_weight * math.log(max(cand_score[m], 1e-6))
                if cost < best_cost:
                    best_cost = cost
                    best = m
            if best >= 0:
                end = _insert(buf, end, at, cand[best])
                member[cand[best]] = build_id
                added = True
                break
            if added:
                break  # a double hit was added: look again from the new end before jumping a layer
        if not added:
            break
    return end, stamp_id


@numba.njit(cache=True, nogil=True)
def follow_tracks(
    x: np.ndarray,
    y: np.ndarray,
    z: np.ndarray,
    var_t: np.ndarray,
    var_z: np.ndarray,
    var_r: np.ndarray,
    layer: np.ndarray,
    nbr_ptr: np.ndarray,
    nbr_node: np.ndarray,
    nbr_score: np.ndarray,
    seeds: np.ndarray,
    claiming: bool,
    reach: int,
    window: int,
    hit_chi2: float,
    seed_chi2: float,
    max_chi2_ndf: float,
    score_weight: float,
    double_distance: float,
    max_per_layer: int,
    gate: float,
    min_hits: int,
    field: float,
    ms: float,
) -> tuple:
    """Grow tracks from seed triplets (see the module docstring).

    Args:
        x, y, z: (N,) hit positions (mm).
        var_t, var_z, var_r: (N,) hit resolutions squared across the track, along z, along r (mm^2).
        layer: (N,) layer code of every hit.
        nbr_ptr, nbr_node, nbr_score: (N+1,), (K,), (K,) CSR of every hit's graph neighbours (both edge
            directions) with the edge's score.
        seeds: (3, S) hit triplets, in the order they are tried.
        claiming: claiming mode (True) or shared mode (False).
        reach: candidates come from the neighbours of this many hits at the growing end.
        window: the fits that judge a candidate and a finished track span this many consecutive hits.
        hit_chi2: largest chi2 increment of one added hit.
        seed_chi2: largest chi2 of a seed triplet's fit.
        max_chi2_ndf: largest chi2/ndf of a kept track.
        score_weight: weight of -ln(edge score) in a candidate's cost.
        double_distance: largest distance (mm) of two hits of one particle on one layer.
        max_per_layer: most hits of one track on one layer (overlapping modules).
        gate: a candidate further than this (mm) from the helix at the growing end is not fitted.
        min_hits: smallest kept track.
        field, ms: the helix fit's field (T) and multiple-scattering term (mm GeV).

    Returns:
        ``(ptr, hits, chi2_ndf)``: the kept tracks as CSR (ptr (T+1,), hits (H,) ordered along each
        track) and each track's worst windowed chi2/ndf (T,, :func:`~domainpar.kernels.track_fit.window_chi2_ndf`).
    """
    n = x.shape[0]
    owner = np.full(n, -1, dtype=np.int64)
    used = np.zeros(n, dtype=np.int64)
    member = np.full(n, -1, dtype=np.int64)
    stamp = np.zeros(n, dtype=np.int64)
    stamp_id = 0
    cand = np.empty(256, dtype=np.int64)
    cand_score = np.empty(256, dtype=np.float64)
    stones = np.empty(512, dtype=np.int64)
    buf = np.empty(MAX_HITS + 4, dtype=np.int64)
    out_hits = np.empty(max(n, 16), dtype=np.int64)
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    out_chi2 = np.empty(n + 1, dtype=np.float64)
    num_out = 0
    num_hits = 0
    for s in range(seeds.shape[1]):
        a = seeds[0, s]
        b = seeds[1, s]
        c = seeds[2, s]
        if claiming and (owner[a] >= 0 or owner[b] >= 0 or owner[c] >= 0):
            continue
        if used[a] > 0 and used[b] > 0 and used[c] > 0:
            continue  # every hit of it is on a track already, or seeded one that failed
        used[a] += 1
        used[b] += 1
        used[c] += 1
        start = 0
        buf[start] = a
        buf[start + 1] = b
        buf[start + 2] = c
        end = start + 3
        if _chi2(x, y, z, var_t, var_z, var_r, buf, start, 3, field, ms) > seed_chi2:
            continue
        build_id = s
        member[a] = build_id
        member[b] = build_id
        member[c] = build_id
        end, stamp_id = _grow(
            x, y, z, var_t, var_z, var_r, layer, nbr_ptr, nbr_node, nbr_score, owner, member, build_id, buf, start, end,
            1, reach, window, hit_chi2, score_weight, double_distance, max_per_layer, gate, field, ms, claiming, stamp, stamp_id, cand, cand_score, stones,
        )  # fmt: skip
        end, stamp_id = _grow(
            x, y, z, var_t, var_z, var_r, layer, nbr_ptr, nbr_node, nbr_score, owner, member, build_id, buf, start, end,
            -1, reach, window, hit_chi2, score_weight, double_distance, max_per_layer, gate, field, ms, claiming, stamp, stamp_id, cand, cand_score, stones,
        )  # fmt: skip
        count = end - start
        if count < min_hits:
            continue
        quality = window_chi2_ndf(x, y, z, var_t, var_z, var_r, buf[start:], count, window, field, ms)
        if quality > max_chi2_ndf:
            continue
        if num_hits + count > out_hits.shape[0]:
            grown = np.empty(2 * (num_hits + count), dtype=np.int64)
            grown[:num_hits] = out_hits[:num_hits]
            out_hits = grown
        for k in range(count):
            h = buf[start + k]
            out_hits[num_hits + k] = h
            used[h] += 1
            if claiming:
                owner[h] = num_out
        num_hits += count
        out_chi2[num_out] = quality
        num_out += 1
        out_ptr[num_out] = num_hits
    return out_ptr[: num_out + 1].copy(), out_hits[:num_hits].copy(), out_chi2[:num_out].copy()


@numba.njit(cache=True, nogil=True)
def resolve_shared(
    ptr: np.ndarray, hits: np.ndarray, quality: np.ndarray, num_nodes: int, max_shared: int, min_hits: int
) -> np.ndarray:
    """Greedy ambiguity resolution: candidates in ``quality`` order (best first) claim their hits.

    A candidate is kept when at most ``max_shared`` of its hits are already
    claimed by better candidates and at least ``min_hits`` are still free; it
    then claims its free hits (its claimed ones stay with the better track).

    Args:
        ptr, hits: candidates as CSR.
        quality: (T,) int64 candidate order, best first (a permutation of 0..T-1).
        num_nodes: N.
        max_shared: most hits a kept candidate may share with better ones.
        min_hits: fewest free hits a kept candidate must bring.

    Returns:
        (N,) int64 owner candidate of every hit, -1 for hits no kept candidate holds.
    """
    owner = np.full(num_nodes, -1, dtype=np.int64)
    for q in range(quality.shape[0]):
        t = quality[q]
        shared = 0
        for k in range(ptr[t], ptr[t + 1]):
            if owner[hits[k]] >= 0:
                shared += 1
        free = ptr[t + 1] - ptr[t] - shared
        if shared > max_shared or free < min_hits:
            continue
        for k in range(ptr[t], ptr[t + 1]):
            if owner[hits[k]] < 0:
                owner[hits[k]] = t
    return owner
