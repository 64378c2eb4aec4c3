"""Binned candidate-segment search between hits of two detector layers (numba).

The hits of every layer are sorted into phi bins and, inside a bin, by one
secondary coordinate (z on a barrel cylinder, r on an endcap disc). For every
inner hit the search visits only the phi bins its phi window touches and,
inside each, binary-searches the secondary window the cuts allow, then applies
the exact cuts to the few hits left. The work is proportional to the number of
candidates near the cuts, never to all pairs.

This module knows nothing about events or graphs: plain arrays in, plain
arrays out.
"""

from __future__ import annotations

import math
import os
import tempfile

import numpy as np


def _ensure_writable_numba_cache() -> None:
    """Point numba's on-disk cache somewhere writable when the package directory is not."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    here = os.path.dirname(os.path.abspath(__file__))
    cache_dir = os.path.join(here, "__pycache__")
    try:
        os.makedirs(cache_dir, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=cache_dir, delete=True)
        probe.close()
    except OSError:
        os.environ["NUMBA_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), "domainpar-numba-cache")


_ensure_writable_numba_cache()

from numba import njit  # noqa: E402  (the cache directory must be settled before numba loads)

TWO_PI = 2.0 * math.pi


@njit(cache=True)
def _wrap_angle(angle: float) -> float:
    while angle > math.pi:
        angle -= TWO_PI
    while angle < -math.pi:
        angle += TWO_PI
    return angle


@njit(cache=True)
def _lower_bound(values: np.ndarray, start: int, stop: int, target: float) -> int:
    while start < stop:
        mid = (start + stop) // 2
        if values[mid] < target:
            start = mid + 1
        else:
            stop = mid
    return start


@njit(cache=True)
def _grow(buffer: np.ndarray, needed: int) -> np.ndarray:
    if needed <= buffer.shape[0]:
        return buffer
    size = max(needed, 2 * buffer.shape[0])
    bigger = np.empty(size, dtype=buffer.dtype)
    bigger[: buffer.shape[0]] = buffer
    return bigger


@njit(cache=True)
def _secondary_window_barrel(r_a, z_a, r_lo, r_hi, z0_max):
    """z range on an outer cylinder (radii r_lo..r_hi) of lines from |z0| <= z0_max through (r_a, z_a)."""
    lo = math.inf
    hi = -math.inf
    for z0 in (-z0_max, z0_max):
        for r_b in (r_lo, r_hi):
            z_b = z0 + (z_a - z0) * r_b / r_a
            lo = min(lo, z_b)
            hi = max(hi, z_b)
    return lo, hi


@njit(cache=True)
def _secondary_window_disc(r_a, z_a, eta_a, z_lo, z_hi, z0_max, deta_max, use_eta):
    """r range on an outer disc (z_lo..z_hi) allowed by the z0 cut and, for disc pairs, the eta window."""
    lo = 0.0
    hi = math.inf
    if abs(z_a) > z0_max:
        # Lines from the luminous region through (r_a, z_a) reach the disc at r_b = r_a (z_b - z0) / (z_a - z0).
        z0_lo = math.inf
        z0_hi = -math.inf
        for z0 in (-z0_max, z0_max):
            for z_b in (z_lo, z_hi):
                r_b = r_a * (z_b - z0) / (z_a - z0)
                z0_lo = min(z0_lo, r_b)
                z0_hi = max(z0_hi, r_b)
        lo = max(lo, z0_lo)
        hi = min(hi, z0_hi)
    if use_eta and (eta_a - deta_max) * (eta_a + deta_max) > 0.0:
        # Both ends of the eta band on the disc's side of eta = 0: r_b = z_b / sinh(eta) is positive.
        e_lo = math.inf
        e_hi = -math.inf
        for eta in (eta_a - deta_max, eta_a + deta_max):
            for z_b in (z_lo, z_hi):
                r_b = z_b / math.sinh(eta)
                e_lo = min(e_lo, r_b)
                e_hi = max(e_hi, r_b)
        if e_lo > 0.0:
            lo = max(lo, e_lo)
            hi = min(hi, e_hi)
    return lo, hi


@njit(cache=True)
def find_segments(
    r: np.ndarray,
    phi: np.ndarray,
    z: np.ndarray,
    eta: np.ndarray,
    secondary: np.ndarray,
    layer_start: np.ndarray,
    bin_start: np.ndarray,
    num_phi_bins: int,
    layer_is_barrel: np.ndarray,
    layer_r_lo: np.ndarray,
    layer_r_hi: np.ndarray,
    layer_z_lo: np.ndarray,
    layer_z_hi: np.ndarray,
    pairs: np.ndarray,
    phi_slope_max: float,
    dphi_margin: float,
    z0_max: float,
    deta_max: float,
) -> tuple[np.ndarray, np.ndarray]:
    """All hit pairs (inner, outer) on the given layer pairs that pass the cuts.

    Hits must be sorted by layer, then phi bin, then ``secondary`` (z on
    barrels, r on discs). Indices below are positions in that sorted order.

    Args:
        r, phi, z, eta: (N,) float64 cylindrical coordinates and pseudorapidity.
        secondary: (N,) float64 z for barrel hits, r for endcap hits.
        layer_start: (L + 1,) first sorted position of every layer.
        bin_start: (L, B + 1) first sorted position of every phi bin of every layer.
        num_phi_bins: B, bins of width 2 pi / B starting at -pi.
        layer_is_barrel: (L,) bool.
        layer_r_lo, layer_r_hi, layer_z_lo, layer_z_hi: (L,) extent of the hits on each layer.
        pairs: (P, 2) int64 (inner, outer) layer pairs.
        phi_slope_max: keep |dphi| <= phi_slope_max * |dr| + dphi_margin.
        dphi_margin: see above (rad).
        z0_max: keep lines whose r = 0 intercept has |z0| <= z0_max (mm).
        deta_max: on disc → disc pairs also keep only |deta| <= deta_max.

    Returns:
        (src, dst): (E,) int64 sorted positions of the inner and outer hit.
    """
    capacity = 1 << 16
    src = np.empty(capacity, dtype=np.int64)
    dst = np.empty(capacity, dtype=np.int64)
    count = 0
    bin_width = TWO_PI / num_phi_bins
    for p in range(pairs.shape[0]):
        inner = pairs[p, 0]
        outer = pairs[p, 1]
        if layer_start[inner] == layer_start[inner + 1] or layer_start[outer] == layer_start[outer + 1]:
            continue
        outer_barrel = layer_is_barrel[outer]
        both_discs = (not layer_is_barrel[inner]) and (not outer_barrel)
        r_lo_o = layer_r_lo[outer]
        r_hi_o = layer_r_hi[outer]
        for a in range(layer_start[inner], layer_start[inner + 1]):
            r_a = r[a]
            z_a = z[a]
            phi_a = phi[a]
            dr_reach = max(abs(r_hi_o - r_a), abs(r_lo_o - r_a))
            half_width = phi_slope_max * dr_reach + dphi_margin
            if outer_barrel:
                lo, hi = _secondary_window_barrel(r_a, z_a, r_lo_o, r_hi_o, z0_max)
            else:
                lo, hi = _secondary_window_disc(
                    r_a, z_a, eta[a], layer_z_lo[outer], layer_z_hi[outer], z0_max, deta_max, both_discs
                )
            if lo > hi:
                continue
            if half_width >= math.pi:
                first_bin = 0
                num_bins = num_phi_bins
            else:
                first_bin = int(math.floor((phi_a - half_width + math.pi) / bin_width))
                last_bin = int(math.floor((phi_a + half_width + math.pi) / bin_width))
                num_bins = min(last_bin - first_bin + 1, num_phi_bins)
            for k in range(num_bins):
                b = (first_bin + k + num_phi_bins) % num_phi_bins
                start = bin_start[outer, b]
                stop = bin_start[outer, b + 1]
                if start == stop:
                    continue
                j = _lower_bound(secondary, start, stop, lo)
                while j < stop and secondary[j] <= hi:
                    dr = r[j] - r_a
                    dz = z[j] - z_a
                    dphi = _wrap_angle(phi[j] - phi_a)
                    keep = abs(dphi) <= phi_slope_max * abs(dr) + dphi_margin
                    if keep:
                        # |z_a - r_a dz/dr| <= z0_max, written without dividing by a tiny dr.
                        keep = dr > 0.0 and abs(z_a * dr - r_a * dz) <= z0_max * dr
                    if keep and both_discs:
                        keep = abs(eta[j] - eta[a]) <= deta_max
                    if keep:
                        if count == src.shape[0]:
                            src = _grow(src, count + 1)
                            dst = _grow(dst, count + 1)
                        src[count] = a
                        dst[count] = j
                        count += 1
                    j += 1
    return src[:count].copy(), dst[:count].copy()


@njit(cache=True)
def _has_edge(out_start: np.ndarray, out_dst: np.ndarray, src: int, dst: int) -> bool:
    start = out_start[src]
    stop = out_start[src + 1]
    k = _lower_bound_int(out_dst, start, stop, dst)
    return k < stop and out_dst[k] == dst


@njit(cache=True)
def _lower_bound_int(values: np.ndarray, start: int, stop: int, target: int) -> int:
    while start < stop:
        mid = (start + stop) // 2
        if values[mid] < target:
            start = mid + 1
        else:
            stop = mid
    return start


@njit(cache=True)
def bridged(
    out_start: np.ndarray, out_dst: np.ndarray, skip_src: np.ndarray, skip_dst: np.ndarray
) -> np.ndarray:
    """Which skip candidates a -> c are bridged by a hit b with edges a -> b and b -> c.

    Args:
        out_start: (N + 1,) CSR offsets of the out-edges of every node.
        out_dst: (E,) destinations of the out-edges, sorted within every node.
        skip_src, skip_dst: (K,) the skip candidates.

    Returns:
        (K,) bool, True where some two-edge path a -> b -> c exists.
    """
    result = np.zeros(skip_src.shape[0], dtype=np.bool_)
    for k in range(skip_src.shape[0]):
        a = skip_src[k]
        c = skip_dst[k]
        for e in range(out_start[a], out_start[a + 1]):
            if _has_edge(out_start, out_dst, out_dst[e], c):
                result[k] = True
                break
    return result
