"""Holes of track candidates: detector layers their helix crosses without a hit on the track (numba).

Knows nothing of events: a helix at the beam line (:func:`~domainpar.kernels.track_fit.perigee`), the layers
of a detector as cylinders and discs, and the layers a track holds in; the number of layers crossed and of
holes out. A whole track misses few layers (a dead module, a gap between modules); a fragment of a longer
track misses every layer its particle crossed on the rest of its way.

The helix is followed from its closest approach to the beam line outwards for at most half a turn (a curler's
way back is not counted) until it leaves the detector. A cylinder (radius r, z extent) is crossed where the
helix reaches r inside the extent less ``margin`` mm; a disc (z, radius extent) where it reaches z inside the
extent less ``margin``. Each layer counts once.

A hole is *evident* when the particle was surely there: before the track's first hit or between its hits
along the helix, or beyond its last hit where the event has a hit within ``reach`` mm of the helix on that
layer (the particle may have gone on, its hits on another track or free). A crossing beyond the last hit with
no hit near it is where a particle that ended (an interaction, a decay) would leave nothing: a hole, not evident.
:func:`hole_hits` gives, at every hole, the free hit nearest the helix (a hit the track may take).
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def crossed_layers(
    kappa: float, phi0: float, d0: float, cot: float, z0: float,
    barrel: np.ndarray, position: np.ndarray, low: np.ndarray, high: np.ndarray, present: np.ndarray, margin: float,
    out: np.ndarray, out_s: np.ndarray,
) -> int:  # fmt: skip
    """Write the layers the helix crosses into ``out`` and the path lengths there into ``out_s``; their number.

    Args:
        kappa, phi0, d0, cot, z0: the helix at the beam line (:func:`~domainpar.kernels.track_fit.perigee`).
        barrel: (L,) bool the layer is a cylinder (else a disc).
        position: (L,) its radius (cylinder) or z (disc), mm.
        low, high: (L,) its z extent (cylinder) or radius extent (disc), mm.
        present: (L,) bool layers to consider (those the event has hits on).
        margin: a crossing within this of the layer's edge does not count (mm).
        out: (>= L,) int64 scratch for the result.
        out_s: (>= L,) float64 scratch: the transverse path length from the closest approach to each crossing (mm).
    """
    num = 0
    zmax_det = 0.0
    for layer in range(barrel.shape[0]):
        if barrel[layer]:
            zmax_det = max(zmax_det, abs(high[layer]), abs(low[layer]))
        else:
            zmax_det = max(zmax_det, abs(position[layer]))
    straight = abs(kappa) < 1e-9
    radius = np.inf if straight else 1.0 / abs(kappa)
    sense = 1.0 if kappa >= 0.0 else -1.0
    # Unit vector from the beam line towards the centre (left of travel for counter-clockwise rotation).
    nx = -sense * math.sin(phi0)
    ny = sense * math.cos(phi0)
    tx = math.cos(phi0)
    ty = math.sin(phi0)
    s_turn = math.pi * radius  # half a turn: the farthest point of the circle
    for layer in range(barrel.shape[0]):
        if not present[layer]:
            continue
        s_hit = -1.0
        if barrel[layer]:
            r_layer = position[layer]
            if straight:
                if r_layer * r_layer < d0 * d0:
                    continue
                s_hit = math.sqrt(r_layer * r_layer - d0 * d0)
            else:
                # |p(s)|^2 = D^2 + R^2 - 2 R D cos(a), a the angle turned from the closest approach, D = |centre|.
                big_d = d0 + radius
                denominator = 2.0 * radius * abs(big_d)
                if denominator == 0.0:
                    continue
                c = (big_d * big_d + radius * radius - r_layer * r_layer) / denominator
                if c > 1.0 or c < -1.0:
                    continue
                angle = math.acos(c) if big_d >= 0.0 else math.pi - math.acos(c)
                s_hit = angle * radius
                if s_hit > s_turn:
                    continue
            z = z0 + cot * s_hit
            if z < low[layer] + margin or z > high[layer] - margin:
                continue
        else:
            if cot == 0.0:
                continue
            s_hit = (position[layer] - z0) / cot
            if s_hit <= 0.0 or (not straight and s_hit > s_turn):
                continue
            if straight:
                px = d0 * nx + tx * s_hit
                py = d0 * ny + ty * s_hit
            else:
                angle = s_hit / radius
                # p(s) = centre - R (cos(a) n - sin(a) t): from the closest approach d0 n, turning towards n.
                px = (d0 + radius) * nx - radius * (math.cos(angle) * nx - math.sin(angle) * tx)
                py = (d0 + radius) * ny - radius * (math.cos(angle) * ny - math.sin(angle) * ty)
            r = math.sqrt(px * px + py * py)
            if r < low[layer] + margin or r > high[layer] - margin:
                continue
            if abs(z0 + cot * s_hit) > zmax_det + 1.0:
                continue
        out[num] = layer
        out_s[num] = s_hit
        num += 1
    return num


@numba.njit(cache=True, nogil=True)
def path_length(kappa: float, phi0: float, d0: float, x: float, y: float) -> float:
    """Transverse path length (mm) along the helix from its closest approach to the beam line to the point nearest
    (x, y) (negative: before the closest approach)."""
    tx = math.cos(phi0)
    ty = math.sin(phi0)
    if abs(kappa) < 1e-9:
        return x * tx + y * ty
    sense = 1.0 if kappa >= 0.0 else -1.0
    nx = -sense * ty
    ny = sense * tx
    radius = 1.0 / abs(kappa)
    # Relative to the centre the helix is at -R (cos(a) n - sin(a) t) after turning by a.
    bx = x - (d0 + radius) * nx
    by = y - (d0 + radius) * ny
    return radius * math.atan2(bx * tx + by * ty, -(bx * nx + by * ny))


@numba.njit(cache=True, nogil=True)
def helix_point(kappa: float, phi0: float, d0: float, cot: float, z0: float, s: float) -> tuple:
    """(x, y, z) of the helix at transverse path length ``s`` from its closest approach."""
    tx = math.cos(phi0)
    ty = math.sin(phi0)
    if abs(kappa) < 1e-9:
        sense = 1.0 if kappa >= 0.0 else -1.0
        return d0 * -sense * ty + tx * s, d0 * sense * tx + ty * s, z0 + cot * s
    sense = 1.0 if kappa >= 0.0 else -1.0
    nx = -sense * ty
    ny = sense * tx
    radius = 1.0 / abs(kappa)
    angle = s / radius
    x = (d0 + radius) * nx - radius * (math.cos(angle) * nx - math.sin(angle) * tx)
    y = (d0 + radius) * ny - radius * (math.cos(angle) * ny - math.sin(angle) * ty)
    return x, y, z0 + cot * s


#: A crossing within this path length (mm) of the track's first or last hit is not before or beyond it.
PATH_TOLERANCE = 1.0


@numba.njit(cache=True, nogil=True)
def count_holes(
    perigees: np.ndarray, offsets: np.ndarray, hits: np.ndarray, hit_layer: np.ndarray,
    barrel: np.ndarray, position: np.ndarray, low: np.ndarray, high: np.ndarray, present: np.ndarray, margin: float,
    x: np.ndarray, y: np.ndarray, z: np.ndarray, layer_ptr: np.ndarray, sorted_phi: np.ndarray, sorted_hits: np.ndarray,
    reach: float,
) -> tuple:  # fmt: skip
    """Layers crossed, holes and evident holes (module docstring) of every candidate (CSR ``offsets``/``hits``),
    given its perigee (T, 5) (nan: none).

    Args:
        x, y, z: (N,) hit positions (mm).
        layer_ptr: (L+1,) int64 offsets of each layer's hits in ``sorted_hits``.
        sorted_phi, sorted_hits: (N,) every hit's azimuth and id, by layer and then azimuth.
        reach: a crossing beyond the last hit is an evident hole when a hit lies within this (mm).

    Returns:
        ``(crossed, holes, evident)``, each (T,) int64; -1 for candidates without a perigee.
    """
    num = offsets.shape[0] - 1
    crossed = np.full(num, -1, dtype=np.int64)
    holes = np.full(num, -1, dtype=np.int64)
    evident = np.full(num, -1, dtype=np.int64)
    scratch = np.empty(barrel.shape[0], dtype=np.int64)
    scratch_s = np.empty(barrel.shape[0], dtype=np.float64)
    held = np.zeros(barrel.shape[0], dtype=np.bool_)
    every = np.ones(x.shape[0], dtype=np.bool_)  # any hit of the event may show the particle went on
    for t in range(num):
        p = perigees[t]
        if not (np.isfinite(p[0]) and np.isfinite(p[1]) and np.isfinite(p[2]) and np.isfinite(p[3]) and np.isfinite(p[4])):
            continue
        n = crossed_layers(p[0], p[1], p[2], p[3], p[4], barrel, position, low, high, present, margin, scratch, scratch_s)
        last = -math.inf
        for k in range(offsets[t], offsets[t + 1]):
            held[hit_layer[hits[k]]] = True
            last = max(last, path_length(p[0], p[1], p[2], x[hits[k]], y[hits[k]]))
        missing = 0
        sure = 0
        for k in range(n):
            if held[scratch[k]]:
                continue
            missing += 1
            if scratch_s[k] <= last + PATH_TOLERANCE:
                sure += 1
                continue
            px, py, pz = helix_point(p[0], p[1], p[2], p[3], p[4], scratch_s[k])
            if nearest_free(scratch[k], px, py, pz, reach, layer_ptr, sorted_phi, sorted_hits, x, y, z, every) >= 0:
                sure += 1
        for k in range(offsets[t], offsets[t + 1]):
            held[hit_layer[hits[k]]] = False
        crossed[t] = n
        holes[t] = missing
        evident[t] = sure
    return crossed, holes, evident


@numba.njit(cache=True, nogil=True)
def _nearest_free_in(lo: int, hi: int, phi_low: float, phi_high: float, px: float, py: float, pz: float, best: float,
                     sorted_phi: np.ndarray, sorted_hits: np.ndarray, x: np.ndarray, y: np.ndarray, z: np.ndarray,
                     free: np.ndarray) -> tuple:  # fmt: skip
    """The free hit of ``sorted_hits[lo:hi]`` with phi in [phi_low, phi_high] nearest p if nearer than ``best``
    (squared): ``(hit or -1, its squared distance)``."""
    found = -1
    k = lo + np.searchsorted(sorted_phi[lo:hi], phi_low)
    while k < hi and sorted_phi[k] <= phi_high:
        h = sorted_hits[k]
        if free[h]:
            d2 = (x[h] - px) ** 2 + (y[h] - py) ** 2 + (z[h] - pz) ** 2
            if d2 < best:
                best = d2
                found = h
        k += 1
    return found, best


@numba.njit(cache=True, nogil=True)
def nearest_free(layer: int, px: float, py: float, pz: float, reach: float, layer_ptr: np.ndarray, sorted_phi: np.ndarray,
                 sorted_hits: np.ndarray, x: np.ndarray, y: np.ndarray, z: np.ndarray, free: np.ndarray) -> int:  # fmt: skip
    """The free hit (``free`` (N,) bool) of ``layer`` nearest the point p within ``reach`` (mm); -1: none.

    ``layer_ptr`` (L+1,) holds the offsets of each layer's hits in ``sorted_hits``, sorted by azimuth
    (``sorted_phi``): only the azimuth window that can hold a point within reach of p is searched.
    """
    lo = layer_ptr[layer]
    hi = layer_ptr[layer + 1]
    if lo == hi:
        return -1
    r = math.sqrt(px * px + py * py)
    phi = math.atan2(py, px)
    dphi = math.asin(reach / r) if r > reach else math.pi  # every point within reach of p lies within this azimuth
    best = reach * reach
    if dphi >= math.pi:
        return _nearest_free_in(lo, hi, -math.inf, math.inf, px, py, pz, best, sorted_phi, sorted_hits, x, y, z, free)[0]
    low = phi - dphi
    high = phi + dphi
    # An azimuth window across +-pi is two: its part beyond the cut, wrapped round, and the rest.
    wrapped_low, wrapped_high = math.inf, -math.inf
    if low < -math.pi:
        wrapped_low, wrapped_high, low = low + 2.0 * math.pi, math.inf, -math.pi
    elif high > math.pi:
        wrapped_low, wrapped_high, high = -math.inf, high - 2.0 * math.pi, math.pi
    found, best = _nearest_free_in(lo, hi, low, high, px, py, pz, best, sorted_phi, sorted_hits, x, y, z, free)
    if wrapped_low <= wrapped_high:
        other, best = _nearest_free_in(lo, hi, wrapped_low, wrapped_high, px, py, pz, best, sorted_phi, sorted_hits, x, y, z, free)
        if other >= 0:
            found = other
    return found


@numba.njit(cache=True, nogil=True)
def hole_hits(
    perigees: np.ndarray, offsets: np.ndarray, hits: np.ndarray, hit_layer: np.ndarray,
    barrel: np.ndarray, position: np.ndarray, low: np.ndarray, high: np.ndarray, present: np.ndarray, margin: float,
    x: np.ndarray, y: np.ndarray, z: np.ndarray, layer_ptr: np.ndarray, sorted_phi: np.ndarray, sorted_hits: np.ndarray,
    free: np.ndarray, reach: np.ndarray,
) -> tuple:  # fmt: skip
    """Free hits where tracks have holes: at every hole of every candidate (arguments as :func:`count_holes`), the
    free hit (``free`` (N,) bool) of that layer nearest the helix within ``reach`` (L,) mm, the layer's own (a
    strip hit lies anywhere along its strip: its coarse coordinate is off by up to half the strip's length).

    Returns:
        ``(hit, track)``, (P,) int64 each: the pairs found, candidate by candidate.
    """
    num = offsets.shape[0] - 1
    out_hit = np.empty(max(num, 16), dtype=np.int64)
    out_track = np.empty(max(num, 16), dtype=np.int64)
    count = 0
    scratch = np.empty(barrel.shape[0], dtype=np.int64)
    scratch_s = np.empty(barrel.shape[0], dtype=np.float64)
    held = np.zeros(barrel.shape[0], dtype=np.bool_)
    for t in range(num):
        p = perigees[t]
        if not (np.isfinite(p[0]) and np.isfinite(p[1]) and np.isfinite(p[2]) and np.isfinite(p[3]) and np.isfinite(p[4])):
            continue
        n = crossed_layers(p[0], p[1], p[2], p[3], p[4], barrel, position, low, high, present, margin, scratch, scratch_s)
        for k in range(offsets[t], offsets[t + 1]):
            held[hit_layer[hits[k]]] = True
        for k in range(n):
            if held[scratch[k]]:
                continue
            px, py, pz = helix_point(p[0], p[1], p[2], p[3], p[4], scratch_s[k])
            h = nearest_free(scratch[k], px, py, pz, reach[scratch[k]], layer_ptr, sorted_phi, sorted_hits, x, y, z, free)
            if h < 0:
                continue
            if count == out_hit.shape[0]:
                out_hit = np.concatenate((out_hit, np.empty(count, dtype=np.int64)))
                out_track = np.concatenate((out_track, np.empty(count, dtype=np.int64)))
            out_hit[count] = h
            out_track[count] = t
            count += 1
        for k in range(offsets[t], offsets[t + 1]):
            held[hit_layer[hits[k]]] = False
    return out_hit[:count], out_track[:count]
