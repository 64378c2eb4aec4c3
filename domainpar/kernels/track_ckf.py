"""Score-ordered track following with a helix fit (a combinatorial-Kalman-filter-like builder), numba.

Knows nothing of events or files: hit positions and resolutions, a neighbour list with edge scores, and seeds in;
candidate tracks out. A *track* is a list of hits in order along the particle's path; it grows from a seed triplet
of hits, first at its outer end, then at its inner end, one step at a time. Every judgement is the chi2 increment
``d`` of a helix fit (:func:`~domainpar.kernels.track_fit.helix_fit`) to the ``window`` hits around the new hit,
which must stay within ``hit_chi2``, that fit's chi2/ndf staying within ``max_chi2_ndf`` (the cut of a kept track).

1. *Candidates* of a step are the graph neighbours (either edge direction: a curling particle comes back inwards) of
   the track's last ``reach`` hits at the growing end, not on the track yet (and free, in the claiming mode).
2. *Double hits* first: a candidate on a layer the track holds, within ``double_distance`` of every track hit there
   and with fewer than ``max_per_layer`` of them (a particle through overlapping modules), goes beside its nearest
   twin, on the side of the track it lies towards. A curler's hit behind the end on a layer the track holds far away
   (the track turned back: its radius fell by more than ``TURN_MM`` between two hits) may have been stepped over: it
   goes between two of the last ``reach`` hits, between them along the track, where it fits best, if it fits there.
3. *One step ahead*: among the candidates ahead of the end hit (along the fitted helix's tangent there) and within
   ``gate`` mm of the helix (across the circle, and across the (s, z) line at the arc length to the candidate), the
   cheapest by ``d - score_weight * ln(score)`` joins the track, score the best edge score joining it to the end. A
   candidate on a layer the track already holds far away is a curler's way back: the fit and the tangent decide.
4. *Stepping stones*: when no candidate ahead passes, the neighbours of the candidates and of the hits other tracks
   hold (within twice the gate, ahead) are tried the same way, skipping one hit: a true continuation whose edge the
   graph or the GNN lost, or a particle that crosses another's hit.

The seeds are run in passes: the first keeps only long tracks (``passes``), so a short wrong track (a noise hit
scored high beside a true one) cannot claim hits a long one needs; the last keeps every track of ``min_hits``.

A track ends when a step adds nothing. A hit accepted on its own window can spoil a neighbouring one; such hits are
trimmed (the worst window loses the hit whose removal helps it most) until every window's chi2/ndf
(:func:`~domainpar.kernels.track_fit.window_chi2_ndf`) is at most ``max_chi2_ndf``. The track is kept when
``min_hits`` hits remain. A seed is skipped when its three hits lie on the track kept last for each of them, or when
each of them seeded a track in this pass already.

Two modes:

* *claiming*: seeds are taken in the given order (best first); a seed whose hits are all free builds a track, and a
  kept track claims its hits, which no later track may take;
* *shared*: every seed with a hit on no earlier candidate builds its track regardless of other tracks' hits;
  ambiguity resolution (:mod:`domainpar.tracks.ambiguity`) then keeps a consistent subset.

:func:`_grow` takes a track one step at a time through the pieces above: :func:`_gather` (1), :func:`_add_doubles`
(2), :func:`_step_ahead` (3, 4); :func:`_trim` judges it whole.
"""

from __future__ import annotations

import math
from collections import namedtuple

import numba
import numpy as np

from domainpar.kernels.track_fit import HitColumns, fit_chi2, helix_fit, insert_at, insertion_delta, remove_at, window_chi2_ndf, worst_window

#: Longest track the builder grows (hits); a full-length track has ~ 10-20.
MAX_HITS = 96
#: A track whose radius falls by more than this (mm) between two consecutive hits has turned back (a curler).
TURN_MM = 20.0

#: The builder's settings: :func:`follow_tracks`' arguments of the same names.
Settings = namedtuple(
    "Settings", "reach window hit_chi2 max_chi2_ndf score_weight double_distance max_per_layer gate gate_sigmas field ms claiming"
)
#: Every hit's graph neighbours, CSR over both edge directions (``ptr`` (N+1,), ``node`` (K,)), with the edge's score.
Neighbours = namedtuple("Neighbours", "ptr node score")
#: Working arrays of the build: ``stamp`` (N,) marks a step's candidates with the step's number ``step[0]``;
#: ``cand``/``cand_score`` hold the candidates with their best edge score, ``stones`` the stepping stones.
Scratch = namedtuple("Scratch", "stamp step cand cand_score stones")


@numba.njit(cache=True, nogil=True)
def _add_candidate(c, score, scratch, num_cand):
    """Add hit c (best score per hit) to the step's candidates; the new count."""
    if scratch.stamp[c] == scratch.step[0]:
        for m in range(num_cand):
            if scratch.cand[m] == c and score > scratch.cand_score[m]:
                scratch.cand_score[m] = score
        return num_cand
    scratch.stamp[c] = scratch.step[0]
    if num_cand < scratch.cand.shape[0]:
        scratch.cand[num_cand] = c
        scratch.cand_score[num_cand] = score
        num_cand += 1
    return num_cand


@numba.njit(cache=True, nogil=True)
def _gather(nbrs, owner, member, build_id, buf, end, direction, settings, scratch):
    """A new step's candidates (1. of the module docstring), best score per hit, and the hits other tracks hold
    among the neighbours (stepping stones); ``(num_cand, num_stones)``."""
    num_cand = 0
    num_stones = 0
    scratch.step[0] += 1
    for k in range(settings.reach):
        idx = end - 1 - k if direction > 0 else k
        if idx < 0 or idx >= end:
            break
        h = buf[idx]
        for j in range(nbrs.ptr[h], nbrs.ptr[h + 1]):
            c = nbrs.node[j]
            if member[c] == build_id:
                continue
            if settings.claiming and owner[c] >= 0:
                if num_stones < scratch.stones.shape[0]:
                    scratch.stones[num_stones] = c
                    num_stones += 1
                continue
            num_cand = _add_candidate(c, nbrs.score[j], scratch, num_cand)
    return num_cand, num_stones


@numba.njit(cache=True, nogil=True)
def _turned(columns, buf, end, direction):
    """Whether the track's radius falls somewhere along it towards the growing end: a curler, whose far-apart
    hits may share a layer."""
    x, y = columns.x, columns.y
    for k in range(1, end):
        r_prev = math.sqrt(x[buf[k - 1]] ** 2 + y[buf[k - 1]] ** 2)
        r_next = math.sqrt(x[buf[k]] ** 2 + y[buf[k]] ** 2)
        if (direction > 0 and r_next < r_prev - TURN_MM) or (direction < 0 and r_prev < r_next - TURN_MM):
            return True
    return False


@numba.njit(cache=True, nogil=True)
def _end_state(columns, layer, buf, end, direction, settings):
    """The helix at the growing end, fitted to the last ``window`` hits.

    Returns ``(tip, tx, ty, tz, xc, yc, radius)``: the end hit, the direction of travel there ((tx, ty) a unit
    vector, tz = dz/ds) and the fitted circle (radius inf: a straight line through the tip along (tx, ty))."""
    x, y, z, var_t, var_z, var_r, var_m = columns
    w = settings.window
    lo, hi, tip = (max(0, end - w), end, buf[end - 1]) if direction > 0 else (0, min(end, w), buf[0])
    # The chord from the nearest hit on another layer (a double hit's twin gives no direction) to the tip.
    back = buf[end - 2] if direction > 0 else buf[1]
    for k in range(1, end):
        h = buf[end - 1 - k] if direction > 0 else buf[k]
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
        return tip, chord_x, chord_y, chord_slope, np.nan, np.nan, np.inf
    _, _, _, _, xc, yc, _, slope = helix_fit(x, y, z, var_t, var_z, var_r, var_m, buf[lo:], hi - lo, settings.field, settings.ms)
    # |dz/ds| from the fit, signed like the chord (s runs along the buffer; the chord points along travel).
    tz = abs(slope) if cz >= 0.0 else -abs(slope)
    if not np.isfinite(xc):
        return tip, chord_x, chord_y, tz, np.nan, np.nan, np.inf
    # Perpendicular to the radius at the tip, oriented like the chord.
    tx = -(y[tip] - yc)
    ty = x[tip] - xc
    if tx * cx + ty * cy < 0.0:
        tx = -tx
        ty = -ty
    radius = math.sqrt(tx * tx + ty * ty)
    if radius == 0.0:
        return tip, chord_x, chord_y, tz, np.nan, np.nan, np.inf
    return tip, tx / radius, ty / radius, tz, xc, yc, radius


@numba.njit(cache=True, nogil=True)
def _ahead(columns, c, state):
    """How far hit c lies ahead of the end (along the direction of travel there; negative: behind)."""
    x, y, z = columns.x, columns.y, columns.z
    tip, tx, ty, tz, _, _, _ = state
    return (x[c] - x[tip]) * tx + (y[c] - y[tip]) * ty + (z[c] - z[tip]) * tz


@numba.njit(cache=True, nogil=True)
def _in_gate(columns, c, state, gate, gate_sigmas):
    """Whether hit c lies within ``gate`` mm of the helix at the tip, across the circle in x-y and across the
    (s, z) line, s the arc from the tip to c (the x-y distance for a straight line).

    Each distance is allowed ``gate_sigmas`` of c's own resolution on top: a strip measures one coordinate
    (z on a barrel layer, r on a disc) to its strip length / sqrt(12), up to 3 mm, and a hit off by that is
    no further from its particle than a pixel hit within the gate. An error in r moves a disc hit across a
    circle that does not run radially and along s (hence z, by the slope)."""
    x, y, z, var_t, var_z, var_r, _ = columns
    tip, tx, ty, tz, xc, yc, radius = state
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
def _twin(columns, layer, buf, end, c, double_distance):
    """The track's hits on hit c's layer: ``(index of the nearest or -1, how many, whether any lies beyond
    double_distance)``."""
    x, y, z = columns.x, columns.y, columns.z
    twin = -1
    best_d2 = np.inf
    same = 0
    far = False
    for idx in range(end):
        h = buf[idx]
        if layer[h] == layer[c]:
            same += 1
            d2 = (x[c] - x[h]) ** 2 + (y[c] - y[h]) ** 2 + (z[c] - z[h]) ** 2
            far = far or d2 > double_distance * double_distance
            if d2 < best_d2:
                best_d2 = d2
                twin = idx
    return twin, same, far


@numba.njit(cache=True, nogil=True)
def _put_back(columns, buf, end, direction, c, settings):
    """Where a curler's stepped-over hit c goes back (2. of the module docstring), between two hits it lies between
    along the track (the fit alone would take it out of order); -1 where it fits nowhere."""
    x, y, z = columns.x, columns.y, columns.z
    best_at = -1
    best_delta = settings.hit_chi2
    for k in range(1, settings.reach + 1):
        at = end - k if direction > 0 else k
        if at <= 0 or at >= end:
            break
        p = buf[at - 1]
        q = buf[at]
        qx = x[q] - x[p]
        qy = y[q] - y[p]
        qz = z[q] - z[p]
        along = ((x[c] - x[p]) * qx + (y[c] - y[p]) * qy + (z[c] - z[p]) * qz) / max(qx * qx + qy * qy + qz * qz, 1e-12)
        if along <= 0.0 or along >= 1.0:
            continue
        delta = insertion_delta(columns, buf, end, at, c, settings.window, settings.field, settings.ms, settings.max_chi2_ndf)
        if delta <= best_delta:
            best_delta = delta
            best_at = at
    return best_at


@numba.njit(cache=True, nogil=True)
def _add_doubles(columns, layer, member, build_id, buf, end, direction, state, settings, scratch, num_cand):
    """Double hits, and a curler's stepped-over hits (2. of the module docstring); ``(end, added)``."""
    x, y, z = columns.x, columns.y, columns.z
    added = False
    turned = _turned(columns, buf, end, direction)
    for m in range(num_cand):
        c = scratch.cand[m]
        twin, same, far = _twin(columns, layer, buf, end, c, settings.double_distance)
        if twin >= 0 and far and turned:
            if _ahead(columns, c, state) > 0.0:
                continue
            at = _put_back(columns, buf, end, direction, c, settings)
        elif twin < 0 or far or same >= settings.max_per_layer:
            continue
        else:
            # Beside its twin, on the side of the track it lies towards.
            h = buf[twin]
            ref = buf[twin + 1] if twin + 1 < end else buf[twin - 1]
            sign = 1.0 if twin + 1 < end else -1.0
            proj = (x[c] - x[h]) * (x[ref] - x[h]) + (y[c] - y[h]) * (y[ref] - y[h]) + (z[c] - z[h]) * (z[ref] - z[h])
            at = twin + 1 if proj * sign > 0.0 else twin
            window, field, ms = settings.window, settings.field, settings.ms
            if not insertion_delta(columns, buf, end, at, c, window, field, ms, settings.max_chi2_ndf) <= settings.hit_chi2:
                at = -1  # (a nan increment fits nowhere)
        if at >= 0:
            end = insert_at(buf, end, at, c)
            member[c] = build_id
            added = True
    return end, added


@numba.njit(cache=True, nogil=True)
def _cheapest(columns, member, build_id, buf, end, at, old, state, settings, scratch, num_cand):
    """The candidate one step ahead (3. of the module docstring): its index in ``scratch.cand``, or -1. ``at``: its
    place (the growing end); ``old``: the chi2 of the end's window without it."""
    best = -1
    best_cost = np.inf
    for m in range(num_cand):
        c = scratch.cand[m]
        if member[c] == build_id:
            continue
        if _ahead(columns, c, state) <= 0.0:
            continue
        if not _in_gate(columns, c, state, settings.gate, settings.gate_sigmas):
            continue
        # A layer the track holds only beyond double-hit distance on a curler's way back: the fit decides.
        delta = insertion_delta(columns, buf, end, at, c, settings.window, settings.field, settings.ms, settings.max_chi2_ndf, old)
        if delta > settings.hit_chi2:
            continue
        cost = delta - settings.score_weight * math.log(max(scratch.cand_score[m], 1e-6))
        if cost < best_cost:
            best_cost = cost
            best = m
    return best


@numba.njit(cache=True, nogil=True)
def _stepping_stones(columns, nbrs, owner, member, build_id, state, settings, scratch, num_cand, num_stones):
    """The candidates through stepping stones (4. of the module docstring); their count."""
    for m in range(num_cand):
        if num_stones < scratch.stones.shape[0]:
            scratch.stones[num_stones] = scratch.cand[m]
            num_stones += 1
    scratch.step[0] += 1
    num_cand = 0
    for q in range(num_stones):
        v = scratch.stones[q]
        if _ahead(columns, v, state) <= 0.0:
            continue
        if not _in_gate(columns, v, state, 2.0 * settings.gate, settings.gate_sigmas):
            continue
        for j in range(nbrs.ptr[v], nbrs.ptr[v + 1]):
            c = nbrs.node[j]
            if member[c] == build_id or (settings.claiming and owner[c] >= 0):
                continue
            num_cand = _add_candidate(c, nbrs.score[j], scratch, num_cand)
    return num_cand


@numba.njit(cache=True, nogil=True)
def _step_ahead(columns, nbrs, owner, member, build_id, buf, end, direction, state, settings, scratch, num_cand, num_stones, doubled):
    """Steps 3 and 4 of the module docstring (4 only when no double hit was added: the end is looked at again
    first); ``(end, added)``."""
    at = end if direction > 0 else 0
    lo = max(0, at - (settings.window - 1)) if direction > 0 else 0
    old = fit_chi2(columns, buf[lo:], min(settings.window - 1, end - lo), settings.field, settings.ms)
    best = _cheapest(columns, member, build_id, buf, end, at, old, state, settings, scratch, num_cand)
    if best < 0 and not doubled:
        num_cand = _stepping_stones(columns, nbrs, owner, member, build_id, state, settings, scratch, num_cand, num_stones)
        best = _cheapest(columns, member, build_id, buf, end, at, old, state, settings, scratch, num_cand)
    if best < 0:
        return end, False
    member[scratch.cand[best]] = build_id
    return insert_at(buf, end, at, scratch.cand[best]), True


@numba.njit(cache=True, nogil=True)
def _grow(columns, layer, nbrs, owner, member, build_id, buf, end, direction, settings, scratch):
    """Grow the track buf[:end] (ordered along the track) at its end (direction +1) or its start (-1), step by
    step until a step adds nothing; the new end."""
    while end < MAX_HITS - 2 and end < buf.shape[0] - 2:
        num_cand, num_stones = _gather(nbrs, owner, member, build_id, buf, end, direction, settings, scratch)
        state = _end_state(columns, layer, buf, end, direction, settings)
        end, doubled = _add_doubles(columns, layer, member, build_id, buf, end, direction, state, settings, scratch, num_cand)
        if doubled:
            state = _end_state(columns, layer, buf, end, direction, settings)
        end, stepped = _step_ahead(
            columns, nbrs, owner, member, build_id, buf, end, direction, state, settings, scratch, num_cand, num_stones, doubled
        )
        if not (doubled or stepped):
            break
    return end


@numba.njit(cache=True, nogil=True)
def _trim(columns, buf, end, window, max_chi2_ndf, min_hits, field, ms):
    """Drop hits from a grown track until its every window fits (module docstring); the new end."""
    while end >= min_hits:
        size = min(window, end)
        worst, first = worst_window(columns, buf, end, window, field, ms)
        if worst <= max_chi2_ndf:
            break
        best_k = first
        best_chi2 = np.inf
        for k in range(first, first + size):
            # The window without buf[k]: take it out, fit, put it back.
            removed = buf[k]
            remove_at(buf, end, k)
            chi2 = fit_chi2(columns, buf[first:], size - 1, field, ms)
            insert_at(buf, end - 1, k, removed)
            if chi2 < best_chi2:
                best_chi2 = chi2
                best_k = k
        end = remove_at(buf, end, best_k)
    return end


@numba.njit(cache=True, nogil=True)
def follow_tracks(
    x: np.ndarray, y: np.ndarray, z: np.ndarray, var_t: np.ndarray, var_z: np.ndarray, var_r: np.ndarray, var_m: np.ndarray,
    layer: np.ndarray, nbr_ptr: np.ndarray, nbr_node: np.ndarray, nbr_score: np.ndarray, seeds: np.ndarray, claiming: bool,
    passes: np.ndarray, reach: int, window: int, hit_chi2: float, seed_chi2: float, max_chi2_ndf: float, score_weight: float,
    double_distance: float, max_per_layer: int, gate: float, gate_sigmas: float, min_hits: int, field: float, ms: float,
) -> tuple:  # fmt: skip
    """Grow tracks from seed triplets (see the module docstring).

    Args:
        x, y, z: (N,) hit positions (mm).
        var_t, var_z, var_r: (N,) hit resolutions squared across the track, along z, along r (mm^2).
        var_m: (N,) every hit's scattering weight (:mod:`~domainpar.kernels.track_fit`).
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
    columns = HitColumns(x, y, z, var_t, var_z, var_r, var_m)
    nbrs = Neighbours(nbr_ptr, nbr_node, nbr_score)
    settings = Settings(reach, window, hit_chi2, max_chi2_ndf, score_weight, double_distance, max_per_layer, gate, gate_sigmas,
                        field, ms, claiming)  # fmt: skip
    scratch = Scratch(np.zeros(n, dtype=np.int64), np.zeros(1, dtype=np.int64), np.empty(256, dtype=np.int64),
                      np.empty(256, dtype=np.float64), np.empty(512, dtype=np.int64))  # fmt: skip
    owner = np.full(n, -1, dtype=np.int64)
    used = np.zeros(n, dtype=np.int64)
    member = np.full(n, -1, dtype=np.int64)
    buf = np.empty(MAX_HITS + 4, dtype=np.int64)
    out_hits = np.empty(max(n, 16), dtype=np.int64)
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    out_chi2 = np.empty(n + 1, dtype=np.float64)
    num_out = 0
    last_track = np.full(n, -1, dtype=np.int64)
    num_seeds = seeds.shape[1]
    for p in range(passes.shape[0]):
        keep_hits = max(passes[p], min_hits)
        used[:] = 0
        for s in range(num_seeds):
            a, b, c = seeds[0, s], seeds[1, s], seeds[2, s]
            if claiming and (owner[a] >= 0 or owner[b] >= 0 or owner[c] >= 0):
                continue
            if last_track[a] >= 0 and last_track[a] == last_track[b] and last_track[b] == last_track[c]:
                continue  # it would grow the track it lies on again
            if used[a] > 0 and used[b] > 0 and used[c] > 0:
                continue  # each of its hits seeded a track in this pass already
            for k, h in enumerate((a, b, c)):
                used[h] += 1
                buf[k] = h
            if fit_chi2(columns, buf, 3, field, ms) > seed_chi2:
                continue
            build_id = p * num_seeds + s
            member[buf[:3]] = build_id
            end = _grow(columns, layer, nbrs, owner, member, build_id, buf, 3, 1, settings, scratch)
            end = _grow(columns, layer, nbrs, owner, member, build_id, buf, end, -1, settings, scratch)
            count = _trim(columns, buf, end, window, max_chi2_ndf, min_hits, field, ms)
            if count < keep_hits:
                continue
            quality = window_chi2_ndf(x, y, z, var_t, var_z, var_r, var_m, buf, count, window, field, ms)
            if quality > max_chi2_ndf:
                continue
            num_hits = out_ptr[num_out]
            if num_hits + count > out_hits.shape[0]:
                grown = np.empty(2 * (num_hits + count), dtype=np.int64)
                grown[:num_hits] = out_hits[:num_hits]
                out_hits = grown
            out_hits[num_hits : num_hits + count] = buf[:count]
            for k in range(count):
                last_track[buf[k]] = num_out
                if claiming:
                    owner[buf[k]] = num_out
            out_chi2[num_out] = quality
            out_ptr[num_out + 1] = out_ptr[num_out] + count
            num_out += 1
    return out_ptr[: num_out + 1].copy(), out_hits[: out_ptr[num_out]].copy(), out_chi2[:num_out].copy()
