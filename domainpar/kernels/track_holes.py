"""Holes of track candidates: detector layers their helix crosses without a hit on the track (numba).

Knows nothing of events: a helix at the beam line (:func:`~domainpar.kernels.track_fit.perigee`), the layers
of a detector as cylinders and discs, and the layers a track holds in; the number of layers crossed and of
holes out. A whole track misses few layers (a dead module, a gap between modules); a fragment of a longer
track misses every layer its particle crossed on the rest of its way.

The helix is followed from its closest approach to the beam line outwards for at most half a turn (a curler's
way back is not counted) until it leaves the detector. A cylinder (radius r, z extent) is crossed where the
helix reaches r inside the extent less ``margin`` mm; a disc (z, radius extent) where it reaches z inside the
extent less ``margin``. Each layer counts once.
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def crossed_layers(
    kappa: float, phi0: float, d0: float, cot: float, z0: float,
    barrel: np.ndarray, position: np.ndarray, low: np.ndarray, high: np.ndarray, present: np.ndarray, margin: float,
    out: np.ndarray,
) -> int:  # fmt: skip
    """Write the layers the helix crosses into ``out``; their number.

    Args:
        kappa, phi0, d0, cot, z0: the helix at the beam line (:func:`~domainpar.kernels.track_fit.perigee`).
        barrel: (L,) bool the layer is a cylinder (else a disc).
        position: (L,) its radius (cylinder) or z (disc), mm.
        low, high: (L,) its z extent (cylinder) or radius extent (disc), mm.
        present: (L,) bool layers to consider (those the event has hits on).
        margin: a crossing within this of the layer's edge does not count (mm).
        out: (>= L,) int64 scratch for the result.
    """
    num = 0
    rmax_det = 0.0
    zmax_det = 0.0
    for layer in range(barrel.shape[0]):
        if barrel[layer]:
            rmax_det = max(rmax_det, position[layer])
            zmax_det = max(zmax_det, abs(high[layer]), abs(low[layer]))
        else:
            rmax_det = max(rmax_det, high[layer])
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
        num += 1
    return num


@numba.njit(cache=True, nogil=True)
def count_holes(
    perigees: np.ndarray, offsets: np.ndarray, hits: np.ndarray, hit_layer: np.ndarray,
    barrel: np.ndarray, position: np.ndarray, low: np.ndarray, high: np.ndarray, present: np.ndarray, margin: float,
) -> tuple:  # fmt: skip
    """Layers crossed and holes of every candidate (CSR ``offsets``/``hits``), given its perigee (T, 5) (nan: none).

    Returns:
        ``(crossed, holes)``, each (T,) int64; -1 for candidates without a perigee.
    """
    num = offsets.shape[0] - 1
    crossed = np.full(num, -1, dtype=np.int64)
    holes = np.full(num, -1, dtype=np.int64)
    scratch = np.empty(barrel.shape[0], dtype=np.int64)
    held = np.zeros(barrel.shape[0], dtype=np.bool_)
    for t in range(num):
        p = perigees[t]
        if not (np.isfinite(p[0]) and np.isfinite(p[1]) and np.isfinite(p[2]) and np.isfinite(p[3]) and np.isfinite(p[4])):
            continue
        n = crossed_layers(p[0], p[1], p[2], p[3], p[4], barrel, position, low, high, present, margin, scratch)
        for k in range(offsets[t], offsets[t + 1]):
            held[hit_layer[hits[k]]] = True
        missing = 0
        for k in range(n):
            if not held[scratch[k]]:
                missing += 1
        for k in range(offsets[t], offsets[t + 1]):
            held[hit_layer[hits[k]]] = False
        crossed[t] = n
        holes[t] = missing
    return crossed, holes
