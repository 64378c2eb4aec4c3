"""Score-ordered track following with a helix fit (a combinatorial-Kalman-filter-like builder), numba.

Knows nothing of events or files: hit positions and resolutions, a
neighbour list with edge scores, and seeds in; candidate tracks out. A
*track* is a list of hits in order along the particle's path; it grows from
a seed triplet of hits, first at its outer end, then at its inner end, one
step at a time. Every judgement is the chi2 increment ``d`` of a helix fit
(:func:`~domainpar.kernels.track_fit.helix_fit`) to the ``window`` hits
around the new hit, which must stay within ``hit_chi2``, that fit's chi2/ndf
staying within ``max_chi2_ndf`` (the cut of a kept track).

1. *Candidates* of a step are the graph neighbours (either edge direction:
   a curling particle comes back inwards) of the track's last ``reach`` hits
   at the growing end, not on the track yet (and free, in the claiming mode).
2. *Double hits* first: a candidate on a layer the track holds, within
   ``double_distance`` of every track hit there and with fewer than
   ``max_per_layer`` of them (a particle through overlapping modules), goes
   beside its nearest twin, on the side of the track it lies towards. A
   curler's hit behind the end on a layer the track holds far away (the
   track turned back: its radius fell by more than ``TURN_MM`` between two
   hits) may have been stepped over: it goes between two of the last
   ``reach`` hits, between them along the track, where it fits best, if it
   fits there.
3. *One step ahead*: among the candidates ahead of the end hit (along the
   fitted helix's tangent there) and within ``gate`` mm of the helix (across
   the circle, and across the (s, z) line at the arc length to the
   candidate), the cheapest by ``d - score_weight * ln(score)`` joins the
   track, score the best edge score joining it to the end. A candidate on a
   layer the track already holds far away is a curler's way back: the fit
   and the tangent decide.
4. *Stepping stones*: when no candidate ahead passes, the neighbours of the
   candidates and of the hits other tracks hold (within twice the gate, ahead)
   are tried the same way, skipping one hit: a true continuation whose edge
   the graph or the GNN lost, or a particle that crosses another's hit.

The seeds are run in passes: the first keeps only long tracks (``passes``),
so a short wrong track (a noise hit scored high beside a true one) cannot
claim hits a long one needs; the last keeps every track of ``min_hits``.

A track ends when a step adds nothing. A hit accepted on its own window can
spoil a neighbouring one; such hits are trimmed (the worst window loses the
hit whose removal helps it most) until every window's chi2/ndf
(:func:`~domainpar.kernels.track_fit.window_chi2_ndf`) is at most
``max_chi2_ndf``. The track is kept when ``min_hits`` hits remain. A seed is
skipped when its three hits lie on the track kept last for each of them, or
when each of them seeded a track in this pass already.

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
#: A track whose radius falls by more than this (mm) between two consecutive hits has turned back (a curler).
TURN_MM = 20.0


@numba.njit(cache=True, nogil=True)
def _chi2(x, y, z, var_t, var_z, var_r, var_m, buf, start, count, field, ms):
    if count < 3:
        return 0.0
    chi2, _, _, _, _, _, _, _ = helix_fit(x, y, z, var_t, var_z, var_r, var_m, buf[start:], count, field, ms)
    return chi2


@numba.njit(cache=True, nogil=True)
def _insert_delta(x, y, z, var_t, var_z, var_r, var_m, buf, start, end, i, c, window, field, ms, max_chi2_ndf, old=np.nan):
    """chi2 increment of putting hit c at index i of the track buf[start:end] (start <= i <= end), judged on the
    ``window`` consecutive hits around it (the last ones at an end); inf when the fit of those hits with c has a
    chi2/ndf above ``max_chi2_ndf`` (the cut every kept track passes). buf is left as it was. ``old``: the chi2
    of those hits without c when known (the same for every candidate at one end)."""
    lo = max(start, i - (window - 1) // 2)
    hi = min(end + 1, lo + window)
    lo = max(start, hi - window)
    if np.isnan(old):
        old = _chi2(x, y, z, var_t, var_z, var_r, var_m, buf, lo, hi - 1 - lo, field, ms)
    for k in range(end, i, -1):
        buf[k] = buf[k - 1]
    buf[i] = c
    new = _chi2(x, y, z, var_t, var_z, var_r, var_m, buf, lo, hi - lo, field, ms)
    for k in range(i, end):
        buf[k] = buf[k + 1]
    if hi - lo >= 3 and new > max_chi2_ndf * (2 * (hi - lo) - 5):
        return np.inf
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
def _end_state(x, y, z, var_t, var_z, var_r, var_m, layer, buf, start, end, direction, window, field, ms):
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
    _, _, _, _, xc, yc, _, slope = helix_fit(x, y, z, var_t, var_z, var_r, var_m, buf[lo:], hi - lo, field, ms)
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
def _in_gate(x, y, z, var_t, var_z, var_r, c, tip, tx, ty, tz, xc, yc, radius, gate, gate_sigmas):
    """Whether hit c lies within ``gate`` mm of the helix at the tip, across the circle in x-y and across the
    (s, z) line, s the arc from the tip to c (the x-y distance for a straight line).

    Each distance is allowed ``gate_sigmas`` of c's own resolution on top: a strip measures one coordinate
    (z on a barrel layer, r on a disc) to its strip length / sqrt(12), up to 3 mm, and a hit off by that is
    no further from its particle than a pixel hit within the gate. An error in r moves a disc hit across a
    circle that does not run radially and along s (hence z, by the slope)."""
    sigma_r = math.sqrt(var_r[c])
    if radius < np.inf:
        across = abs(math.sqrt((x[c] - xc) ** 2 + (y[c] - yc) ** 2) - radius)
    else:
        across = abs((x[c] - x[tip]) * ty - (y[c] - y[tip]) * tx)
    if across > gate + gate_sigmas * (math.sqrt(var_t[c]) + sigma_r):
        return False
    if radius < np.inf:
        # The arc from the tip to c around the centre (a curler turns far between two layers).
        ax = x[tip] - xc
        ay = y[tip] - yc
        bx = x[c] - xc
        by = y[c] - yc
        ds = radius * abs(math.atan2(ax * by - ay * bx, ax * bx + ay * by))
    else:
        ds = math.sqrt((x[c] - x[tip]) ** 2 + (y[c] - y[tip]) ** 2)
    slack = gate_sigmas * (math.sqrt(var_z[c]) + abs(tz) * sigma_r)
    return abs(z[c] - z[tip] - tz * ds) <= gate * math.sqrt(1.0 + tz * tz) + slack


@numba.njit(cache=True, nogil=True)
def _grow(
    x, y, z, var_t, var_z, var_r, var_m, layer, nbr_ptr, nbr_node, nbr_score, owner, member, build_id, buf, start, end,
    direction, reach, window, hit_chi2, max_chi2_ndf, score_weight, double_distance, max_per_layer, gate, gate_sigmas, field, ms,
    claiming, stamp, stamp_id, cand, cand_score, stones,
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
        # A curler: its radius falls somewhere along the track (a layer may then hold two far-apart hits of it).
        turned = False
        for k in range(start + 1, end):
            r_prev = math.sqrt(x[buf[k - 1]] ** 2 + y[buf[k - 1]] ** 2)
            r_next = math.sqrt(x[buf[k]] ** 2 + y[buf[k]] ** 2)
            if (direction > 0 and r_next < r_prev - TURN_MM) or (direction < 0 and r_prev < r_next - TURN_MM):
                turned = True
                break
        tip = buf[end - 1] if direction > 0 else buf[start]
        tx, ty, tz, xc, yc, radius = _end_state(x, y, z, var_t, var_z, var_r, var_m, layer, buf, start, end, direction, window, field, ms)
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
            if twin >= 0 and far and turned:
                # A curler's hit behind the end that the track stepped over: it goes between two consecutive
                # hits near this end where it fits best.
                if (x[c] - x[tip]) * tx + (y[c] - y[tip]) * ty + (z[c] - z[tip]) * tz > 0.0:
                    continue
                best_at = -1
                best_delta = hit_chi2
                for k in range(1, reach + 1):
                    at = end - k if direction > 0 else start + k
                    if at <= start or at >= end:
                        break
                    # Only between its two neighbours along the track (the fit alone would take it out of order).
                    p = buf[at - 1]
                    q = buf[at]
                    qx = x[q] - x[p]
                    qy = y[q] - y[p]
                    qz = z[q] - z[p]
                    along = ((x[c] - x[p]) * qx + (y[c] - y[p]) * qy + (z[c] - z[p]) * qz) / max(qx * qx + qy * qy + qz * qz, 1e-12)
                    if along <= 0.0 or along >= 1.0:
                        continue
                    delta = _insert_delta(x, y, z, var_t, var_z, var_r, var_m, buf, start, end, at, c, window, field, ms, max_chi2_ndf)
                    if delta <= best_delta:
                        best_delta = delta
                        best_at = at
                if best_at >= 0:
                    end = _insert(buf, end, best_at, c)
                    member[c] = build_id
                    added = True
                continue
            if twin < 0 or far or same >= max_per_layer:
                continue
            h = buf[twin]
            ref = buf[twin + 1] if twin + 1 < end else buf[twin - 1]
            sign = 1.0 if twin + 1 < end else -1.0
            proj = (x[c] - x[h]) * (x[ref] - x[h]) + (y[c] - y[h]) * (y[ref] - y[h]) + (z[c] - z[h]) * (z[ref] - z[h])
            at = twin + 1 if proj * sign > 0.0 else twin
            if _insert_delta(x, y, z, var_t, var_z, var_r, var_m, buf, start, end, at, c, window, field, ms, max_chi2_ndf) <= hit_chi2:
                end = _insert(buf, end, at, c)
                member[c] = build_id
                added = True
        # Then one hit ahead: the cheapest candidate; failing that, one reached through a stepping stone.
        if added:
            tip = buf[end - 1] if direction > 0 else buf[start]
            tx, ty, tz, xc, yc, radius = _end_state(x, y, z, var_t, var_z, var_r, var_m, layer, buf, start, end, direction, window, field, ms)
        at = end if direction > 0 else start
        lo = max(start, at - (window - 1)) if direction > 0 else start
        old = _chi2(x, y, z, var_t, var_z, var_r, var_m, buf, lo, min(window - 1, end - lo), field, ms)
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
                    if not _in_gate(x, y, z, var_t, var_z, var_r, v, tip, tx, ty, tz, xc, yc, radius, 2.0 * gate, gate_sigmas):
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
                if not _in_gate(x, y, z, var_t, var_z, var_r, c, tip, tx, ty, tz, xc, yc, radius, gate, gate_sigmas):
                    continue
                # A layer the track holds only beyond double-hit distance on a curler's way back: the fit decides.
                delta = _insert_delta(x, y, z, var_t, var_z, var_r, var_m, buf, start, end, at, c, window, field, ms, max_chi2_ndf, old)
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
def _trim(x, y, z, var_t, var_z, var_r, var_m, buf, start, end, window, max_chi2_ndf, min_hits, field, ms):
    """Drop hits from a grown track until its every window fits (chi2/ndf <= max_chi2_ndf); the new end.

    A hit accepted on its own window can spoil a neighbouring one (a double hit placed in the middle); each round
    removes, from the worst window, the hit whose removal lowers that window's chi2 most."""
    while end - start >= min_hits:
        count = end - start
        worst = -1.0
        worst_lo = start
        size = min(window, count)
        for lo in range(start, end - size + 1):
            chi2, ndf, _, _, _, _, _, _ = helix_fit(x, y, z, var_t, var_z, var_r, var_m, buf[lo:], size, field, ms)
            if chi2 / ndf > worst:
                worst = chi2 / ndf
                worst_lo = lo
        if worst <= max_chi2_ndf:
            break
        best_k = worst_lo
        best_chi2 = np.inf
        for k in range(worst_lo, worst_lo + size):
            # The window without buf[k]: shift it out, fit, shift back.
            removed = buf[k]
            for m in range(k, end - 1):
                buf[m] = buf[m + 1]
            if size - 1 >= 3:
                chi2 = _chi2(x, y, z, var_t, var_z, var_r, var_m, buf, worst_lo, size - 1, field, ms)
            else:
                chi2 = 0.0
            for m in range(end - 1, k, -1):
                buf[m] = buf[m - 1]
            buf[k] = removed
            if chi2 < best_chi2:
                best_chi2 = chi2
                best_k = k
        for m in range(best_k, end - 1):
            buf[m] = buf[m + 1]
        end -= 1
    return end


@numba.njit(cache=True, nogil=True)
def follow_tracks(
    x: np.ndarray,
    y: np.ndarray,
    z: np.ndarray,
    var_t: np.ndarray,
    var_z: np.ndarray,
    var_r: np.ndarray,
    var_m: np.ndarray,
    layer: np.ndarray,
    nbr_ptr: np.ndarray,
    nbr_node: np.ndarray,
    nbr_score: np.ndarray,
    seeds: np.ndarray,
    claiming: bool,
    passes: np.ndarray,
    reach: int,
    window: int,
    hit_chi2: float,
    seed_chi2: float,
    max_chi2_ndf: float,
    score_weight: float,
    double_distance: float,
    max_per_layer: int,
    gate: float,
    gate_sigmas: float,
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
        passes: (P,) int64 the seeds are run P times; pass p keeps only tracks of at least passes[p] hits
            (and ``min_hits``), so long tracks claim their hits before short ones can.
        reach: candidates come from the neighbours of this many hits at the growing end.
        window: the fits that judge a candidate and a finished track span this many consecutive hits.
        hit_chi2: largest chi2 increment of one added hit.
        seed_chi2: largest chi2 of a seed triplet's fit.
        max_chi2_ndf: largest chi2/ndf of a kept track.
        score_weight: weight of -ln(edge score) in a candidate's cost.
        double_distance: largest distance (mm) of two hits of one particle on one layer.
        max_per_layer: most hits of one track on one layer (overlapping modules).
        gate: a candidate further than this (mm) from the helix at the growing end is not fitted.
        gate_sigmas: the gate widens by this many of the candidate's own resolution (``_in_gate``).
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
    last_track = np.full(n, -1, dtype=np.int64)
    num_seeds = seeds.shape[1]
    for p in range(passes.shape[0]):
      keep_hits = max(passes[p], min_hits)
      used[:] = 0
      for s in range(num_seeds):
        a = seeds[0, s]
        b = seeds[1, s]
        c = seeds[2, s]
        if claiming and (owner[a] >= 0 or owner[b] >= 0 or owner[c] >= 0):
            continue
        if last_track[a] >= 0 and last_track[a] == last_track[b] and last_track[b] == last_track[c]:
            continue  # it would grow the track it lies on again
        if used[a] > 0 and used[b] > 0 and used[c] > 0:
            continue  # each of its hits seeded a track in this pass already
        used[a] += 1
        used[b] += 1
        used[c] += 1
        start = 0
        buf[start] = a
        buf[start + 1] = b
        buf[start + 2] = c
        end = start + 3
        if _chi2(x, y, z, var_t, var_z, var_r, var_m, buf, start, 3, field, ms) > seed_chi2:
            continue
        build_id = p * num_seeds + s
        member[a] = build_id
        member[b] = build_id
        member[c] = build_id
        end, stamp_id = _grow(
            x, y, z, var_t, var_z, var_r, var_m, layer, nbr_ptr, nbr_node, nbr_score, owner, member, build_id, buf, start, end,
            1, reach, window, hit_chi2, max_chi2_ndf, score_weight, double_distance, max_per_layer, gate, gate_sigmas, field, ms, claiming, stamp, stamp_id, cand, cand_score, stones,
        )  # fmt: skip
        end, stamp_id = _grow(
            x, y, z, var_t, var_z, var_r, var_m, layer, nbr_ptr, nbr_node, nbr_score, owner, member, build_id, buf, start, end,
            -1, reach, window, hit_chi2, max_chi2_ndf, score_weight, double_distance, max_per_layer, gate, gate_sigmas, field, ms, claiming, stamp, stamp_id, cand, cand_score, stones,
        )  # fmt: skip
        end = _trim(x, y, z, var_t, var_z, var_r, var_m, buf, start, end, window, max_chi2_ndf, min_hits, field, ms)
        count = end - start
        if count < keep_hits:
            continue
        quality = window_chi2_ndf(x, y, z, var_t, var_z, var_r, var_m, buf[start:], count, window, field, ms)
        if quality > max_chi2_ndf:
            continue
        if num_hits + count > out_hits.shape[0]:
            grown = np.empty(2 * (num_hits + count), dtype=np.int64)
            grown[:num_hits] = out_hits[:num_hits]
            out_hits = grown
        for k in range(count):
            h = buf[start + k]
            out_hits[num_hits + k] = h
            last_track[h] = num_out
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
