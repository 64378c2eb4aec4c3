"""Binned candidate-segment search between hits of two detector layers (numba).

The hits of every layer are sorted into phi bins and, inside a bin, by one
secondary coordinate (z on a barrel cylinder, r on an endcap disc). For every
inner hit the search visits only the phi bins its phi window touches and,
inside each, binary-searches the secondary window the cuts allow, then applies
the exact cuts to the few hits left. The work is proportional to the number of
candidates near the cuts, never to all pairs.

The search runs over work items, (layer pair, range of inner hits), in the
order of the pairs and the hits: the items of a thread's chunk give the
segments the serial loop finds for them, in its order, so chunks joined in
order are the serial result (:mod:`domainpar.kernels.chunks`). The kernels
release the GIL.

This module knows nothing about events or graphs: plain arrays in, plain
arrays out.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

TWO_PI = 2.0 * math.pi


@njit(cache=True)
def _wrap_angle(angle: float) -> float:
    while angle > math.pi:
        angle -= TWO_PI
    while angle < -math.pi:
        angle += TWO_PI
    return angle


@njit(cache=True)
def _lower_bound(values: np.ndarray, start: int, stop: int, target) -> int:
    while start < stop:
        mid = (start + stop) // 2
        if values[mid] < target:
            start = mid + 1
        else:
            stop = mid
    return start


@njit(cache=True)
def _grow(buffer: np.ndarray) -> np.ndarray:
    """A copy of the int64 ``buffer`` with twice the room."""
    bigger = np.empty(2 * buffer.shape[0], dtype=np.int64)
    for i in range(buffer.shape[0]):
        bigger[i] = buffer[i]
    return bigger


@njit(cache=True)
def helix_dphi(r_a: float, r_b: float, kappa_max: float, reach: float = 1.0) -> float:
    """Largest |dphi| (rad) between hits at radii r_a < r_b (mm) of one circle through the beam line whose curvature
    is at most ``kappa_max`` (1/mm): a hit at radius r of such a circle lies ``asin(r kappa / 2)`` from the azimuth
    it started with, the more the more curved, up to the circle whose largest radius is ``reach`` r_b
    (kappa = 2 / (reach r_b); 1: the circle that just reaches r_b, turning there).

    For small curvatures it is ``kappa_max (r_b - r_a) / 2``: the straight phi-slope cut of slope ``kappa_max / 2``.
    Beyond that it grows where a low-pT particle turns tangential (r_b near its circle's diameter), which the
    straight cut refuses.
    """
    k = kappa_max
    if reach * r_b * k > 2.0:
        k = 2.0 / (reach * r_b)
    return math.asin(min(1.0, 0.5 * r_b * k)) - math.asin(min(1.0, 0.5 * r_a * k))


@njit(cache=True)
def helix_arc(r: float, kappa: float) -> float:
    """Transverse arc length (mm) from the beam line to radius ``r`` along a circle through it of curvature
    ``kappa`` (1/mm, 0 <= r kappa <= 2): ``2 asin(r kappa / 2) / kappa``, its series where kappa r is tiny."""
    x = 0.5 * r * kappa
    if x < 1.0e-3:
        return r * (1.0 + x * x / 6.0)
    return 2.0 * math.asin(min(1.0, x)) / kappa


@njit(cache=True)
def _helix_keep(r_a, z_a, r_b, z_b, dphi, slope_cut, margin, z0_cut, reach):
    """The helix cuts of one hit pair (r_a < r_b): the azimuth step of a circle through the beam line of curvature
    at most ``2 slope_cut`` (plus ``margin``), and the beam-line intercept ``|z0| <= z0_cut`` of the helix through
    both hits, z linear in the transverse arc length (the straight (r, z) line bends away from a low-pT helix at the
    strips' radii)."""
    kappa_max = 2.0 * slope_cut
    if not r_b > r_a:
        return False
    # The window is at least its straight part k (r_b - r_a) / 2 (asin' >= 1): most pairs pass without the asins.
    k = kappa_max
    if reach * r_b * k > 2.0:
        k = 2.0 / (reach * r_b)
    if dphi > 0.5 * (min(2.0, r_b * k) - r_a * k) + margin and dphi > helix_dphi(r_a, r_b, kappa_max, reach) + margin:
        return False
    # The circle through the beam line and both hits: its chord subtends dphi at the beam line (inscribed angle),
    # so kappa = 2 sin(dphi) / chord; at most the phi window's own, k (hits within the margin).
    chord = math.sqrt(max(r_a * r_a + r_b * r_b - 2.0 * r_a * r_b * math.cos(dphi), 1.0e-300))
    kappa = min(2.0 * math.sin(min(dphi, 0.5 * math.pi)) / chord, k)
    s_a = helix_arc(r_a, kappa)
    s_b = helix_arc(r_b, kappa)
    return abs(z_a * s_b - z_b * s_a) <= z0_cut * (s_b - s_a)


@njit(cache=True)
def _helix_z0_possible(z_a, z_b, rho_lo, rho_hi, z0_cut):
    """Whether some ratio of arcs rho = s_b / s_a in [rho_lo, rho_hi] passes the helix's z0 cut
    ``|z_a rho - z_b| <= z0_cut (rho - 1)``: both sides are linear in rho, so their extremes sit at the ends. A
    necessary condition of :func:`_helix_keep`'s z0 cut without its transcendentals (loosened by 1e-6 mm)."""
    above = min(z_a * rho_lo - z_b - z0_cut * (rho_lo - 1.0), z_a * rho_hi - z_b - z0_cut * (rho_hi - 1.0))
    below = max(z_a * rho_lo - z_b + z0_cut * (rho_lo - 1.0), z_a * rho_hi - z_b + z0_cut * (rho_hi - 1.0))
    return above <= 1.0e-6 and below >= -1.0e-6


@njit(cache=True)
def _secondary_window_barrel(r_a, z_a, r_lo, r_hi, z0_max):
    """z range on an outer cylinder (radii r_lo..r_hi) of lines from |z0| <= z0_max through (r_a, z_a)."""
    # z_b = z0 + (z_a - z0) r_b / r_a is monotonic in z0 and r_b: the extremes sit at the corners.
    z1 = -z0_max + (z_a + z0_max) * r_lo / r_a
    z2 = -z0_max + (z_a + z0_max) * r_hi / r_a
    z3 = z0_max + (z_a - z0_max) * r_lo / r_a
    z4 = z0_max + (z_a - z0_max) * r_hi / r_a
    return min(min(z1, z2), min(z3, z4)), max(max(z1, z2), max(z3, z4))


@njit(cache=True)
def _secondary_window_disc(r_a, z_a, eta_a, z_lo, z_hi, z0_max, deta_max, use_eta):
    """r range on an outer disc (z_lo..z_hi) allowed by the z0 cut and, for disc pairs, the eta window."""
    lo = 0.0
    hi = 1.0e30
    if abs(z_a) > z0_max:
        # Lines from the luminous region through (r_a, z_a) reach the disc at
        # r_b = r_a (z_b - z0) / (z_a - z0), monotonic in z0 and z_b.
        r1 = r_a * (z_lo + z0_max) / (z_a + z0_max)
        r2 = r_a * (z_hi + z0_max) / (z_a + z0_max)
        r3 = r_a * (z_lo - z0_max) / (z_a - z0_max)
        r4 = r_a * (z_hi - z0_max) / (z_a - z0_max)
        lo = max(lo, min(min(r1, r2), min(r3, r4)))
        hi = min(hi, max(max(r1, r2), max(r3, r4)))
    eta_lo = eta_a - deta_max
    eta_hi = eta_a + deta_max
    if use_eta and eta_lo * eta_hi > 0.0:
        # Both ends of the eta band on the disc's side of eta = 0: r_b = z_b / sinh(eta) > 0.
        s_lo = math.sinh(eta_lo)
        s_hi = math.sinh(eta_hi)
        r1 = z_lo / s_lo
        r2 = z_hi / s_lo
        r3 = z_lo / s_hi
        r4 = z_hi / s_hi
        e_lo = min(min(r1, r2), min(r3, r4))
        if e_lo > 0.0:
            lo = max(lo, e_lo)
            hi = min(hi, max(max(r1, r2), max(r3, r4)))
    return lo, hi


@njit(cache=True)
def _layers_crossed(
    r_a, z_a, r_c, z_c, first, last, between_layers, surface_barrel, surface_r, surface_z,
    extent_r_min, extent_r_max, extent_z_min, extent_z_max, margin,
):
    """How many of the layers between_layers[first:last] the straight segment a -> c crosses.

    A surface counts as crossed only more than ``margin`` mm inside its extent,
    so a helix that clips the edge of a layer is not mistaken for one that
    passed through it.
    """
    crossed = 0
    dr = r_c - r_a
    dz = z_c - z_a
    for k in range(first, last):
        m = between_layers[k]
        if surface_barrel[m]:
            radius = surface_r[m]
            if r_a < radius < r_c:
                z_m = z_a + (radius - r_a) * dz / dr
                if extent_z_min[m] + margin < z_m < extent_z_max[m] - margin:
                    crossed += 1
        else:
            z_disc = surface_z[m]
            if (z_a < z_disc < z_c) or (z_c < z_disc < z_a):
                r_m = r_a + (z_disc - z_a) * dr / dz
                if extent_r_min[m] + margin < r_m < extent_r_max[m] - margin:
                    crossed += 1
    return crossed


@njit(cache=True)
def _disc_z0_floor(r_a, z_a, z_lo, z_hi, z0_max):
    """Smallest r (mm) on an outer disc (hits at z_lo..z_hi) of a line from |z0| <= z0_max through (r_a, z_a),
    for |z_a| <= z0_max (where :func:`_secondary_window_disc` has no r window from z0: lines from z0 near z_a
    reach the disc at any large r, but none at a small one).

    Going outward to a disc at z_b > z_a, r_b = r_a (z_b - z0) / (z_a - z0) is smallest for z0 = -z0_max and
    z_b = z_lo; on the other side (z_b < z_a) for z0 = +z0_max and z_b = z_hi. Loosened by a relative 1e-9 and
    1e-6 mm, far beyond any rounding of the cut, so no hit that passes is ever below it; -1e30 (no floor) when
    the disc straddles z_a.
    """
    if z_lo > z_a and z_a + z0_max > 0.0:
        return r_a * (z_lo + z0_max) / (z_a + z0_max) * (1.0 - 1.0e-9) - 1.0e-6
    if z_hi < z_a and z0_max - z_a > 0.0:
        return r_a * (z0_max - z_hi) / (z0_max - z_a) * (1.0 - 1.0e-9) - 1.0e-6
    return -1.0e30


@njit(cache=True)
def _bin_gap(phi_a, unwrapped_bin, bin_width):
    """The angular gap (rad) from phi_a to phi bin ``unwrapped_bin`` (counted from -pi, unwrapped), less 1e-9."""
    edge_lo = -math.pi + unwrapped_bin * bin_width
    edge_hi = edge_lo + bin_width
    gap = 0.0
    if phi_a < edge_lo:
        gap = edge_lo - phi_a
    elif phi_a > edge_hi:
        gap = phi_a - edge_hi
    return gap - 1.0e-9


@njit(cache=True)
def _disc_bin_start(phi_a, r_a, unwrapped_bin, bin_width, slope_cut, dphi_margin):
    """Smallest r (mm) a hit in phi bin ``unwrapped_bin`` (counted from -pi, unwrapped) of an outer disc needs to
    pass the phi-slope cut from (r_a, phi_a): its |dphi| is at least the bin's angular gap to phi_a, and
    ``|dphi| <= slope_cut dr + dphi_margin`` then needs ``dr >= (gap - dphi_margin) / slope_cut``.

    Only for windows under pi wide (the unwrapped bin is then the copy nearest phi_a). The bound is loosened by
    1e-9 rad and 1e-6 mm, a million times any rounding of a hit's bin or of dphi and dr, so no hit that passes
    is ever below it.
    """
    gap = _bin_gap(phi_a, unwrapped_bin, bin_width)
    if gap <= dphi_margin:
        return -1.0e30
    return r_a + (gap - dphi_margin) / slope_cut - 1.0e-6


@njit(cache=True)
def _disc_bin_start_helix(phi_a, r_a, unwrapped_bin, bin_width, kappa_max, reach, dphi_margin):
    """:func:`_disc_bin_start` for the helix's phi window: the smallest r_b whose window
    :func:`helix_dphi` ``+ dphi_margin`` reaches the bin's angular gap to phi_a (the window grows with r_b), by
    inverting it on either side of the radius 2 / (reach kappa_max) where its curvature cap changes; 1e30 where no
    radius reaches the gap. Loosened as :func:`_disc_bin_start` is."""
    gap = _bin_gap(phi_a, unwrapped_bin, bin_width)
    if gap <= dphi_margin:
        return -1.0e30
    need = gap - dphi_margin
    turn = math.asin(1.0 / reach)
    crossover = 2.0 / (reach * kappa_max)
    if r_a < crossover:
        start = math.asin(0.5 * r_a * kappa_max)
        if need <= turn - start:
            return 2.0 * math.sin(need + start) / kappa_max * (1.0 - 1.0e-9) - 1.0e-6
    if need >= turn:
        return 1.0e30
    return r_a / (reach * math.sin(turn - need)) * (1.0 - 1.0e-9) - 1.0e-6


def work_items(pairs: np.ndarray, layer_start: np.ndarray, max_hits: int) -> np.ndarray:
    """(K, 3) int64 work items (pair index, first inner hit, end of inner hits) of :func:`find_segments`.

    Args:
        pairs: (P, 2) int64 (inner, outer) layer pairs.
        layer_start: (L + 1,) first sorted position of every layer.
        max_hits: most inner hits of one item (the grain a thread's chunk is made of).

    Returns:
        Every pair whose layers both hold hits, its inner layer cut into ranges of at most ``max_hits`` hits, in
        the order of the pairs and the hits.
    """
    items = []
    for p in range(pairs.shape[0]):
        inner, outer = int(pairs[p, 0]), int(pairs[p, 1])
        first, last = int(layer_start[inner]), int(layer_start[inner + 1])
        if first == last or layer_start[outer] == layer_start[outer + 1]:
            continue
        for lo in range(first, last, max_hits):
            items.append((p, lo, min(lo + max_hits, last)))
    return np.array(items, dtype=np.int64).reshape(-1, 3)


@njit(cache=True, nogil=True)
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
    items: np.ndarray,
    pair_jumps: np.ndarray,
    between_start: np.ndarray,
    between_layers: np.ndarray,
    surface_r: np.ndarray,
    surface_z: np.ndarray,
    extent_r_min: np.ndarray,
    extent_r_max: np.ndarray,
    extent_z_min: np.ndarray,
    extent_z_max: np.ndarray,
    crossing_margin: float,
    phi_slope_max: float,
    dphi_margin: float,
    z0_max: float,
    deta_max: float,
    skip_phi_slope_max: float,
    skip_z0_max: float,
    skip_margin: float,
    allow_skip: bool,
    node: np.ndarray,
    capacity: int,
    helix: bool = False,
    helix_reach: float = 1.0,
) -> np.ndarray:
    """All hit pairs (inner, outer) of the given work items that pass the cuts, as one int64 key each.

    Hits must be sorted by layer, then phi bin, then ``secondary`` (z on
    barrels, r on discs). Indices below are positions in that sorted order.
    A pair whose straight segment crosses no other layer is an adjacent-layer
    segment and passes the main cuts; with ``allow_skip`` one that crosses
    exactly one layer (where the particle left no hit) passes the tighter skip
    cuts; a segment crossing more layers is never kept.

    Args:
        r, phi, z, eta: (N,) float64 cylindrical coordinates and pseudorapidity.
        secondary: (N,) float64 z for barrel hits, r for endcap hits.
        layer_start: (L + 1,) first sorted position of every layer.
        bin_start: (L, B + 1) first sorted position of every phi bin of every layer.
        num_phi_bins: B, bins of width 2 pi / B starting at -pi.
        layer_is_barrel: (L,) bool.
        layer_r_lo, layer_r_hi, layer_z_lo, layer_z_hi: (L,) extent of the hits on each layer.
        pairs: (P, 2) int64 (inner, outer) layer pairs.
        items: (K, 3) int64 work items (pair index, first inner hit, end of inner hits) from :func:`work_items`.
        pair_jumps: (P,) bool, pairs that are never consecutive along a trajectory (their
            segments nearly always jump a layer): searched with the skip cuts throughout.
        between_start, between_layers: CSR (P + 1,), (K,) of the layers a segment of each pair may cross.
        surface_r, surface_z: (L,) cylinder radius of barrel layers, disc z of endcap layers (mm).
        extent_r_min, extent_r_max, extent_z_min, extent_z_max: (L,) extent of every layer's surface.
        crossing_margin: a surface counts as crossed this far (mm) inside its extent.
        phi_slope_max: keep |dphi| <= phi_slope_max * |dr| + dphi_margin.
        dphi_margin: see above (rad).
        z0_max: keep lines whose r = 0 intercept has |z0| <= z0_max (mm), pointing outward (dr > 0).
        deta_max: on disc → disc pairs also keep only |deta| <= deta_max.
        skip_phi_slope_max, skip_z0_max, skip_margin: the phi slope, z0 and dphi margin cuts of segments that cross
            one layer.
        allow_skip: keep segments that cross one layer at all.
        helix: the cuts of a circle through the beam line instead of straight lines (:func:`_helix_keep`): the
            phi window of curvature ``2 phi_slope_max`` (``2 skip_phi_slope_max``), z0 along the helix; the
            search windows widened to hold every hit that may pass.
        node: (N,) int64 node index of every sorted position (what the keys hold).
        capacity: keys the output holds before it grows (a guess: any value gives the same keys).

    Returns:
        (E,) int64 ``(node[a] N + node[b]) 2 + crossed`` of every pair (a, b) kept, a the inner hit, crossed the
        number of layers its segment crosses (0 or 1), in the order of the items, then the inner hits. One key
        array rather than three: one store per segment, and the caller sorts keys anyway.
    """
    num_nodes = node.shape[0]
    keys = np.empty(max(capacity, 1024), dtype=np.int64)
    count = 0
    bin_width = TWO_PI / num_phi_bins
    for item in range(items.shape[0]):
        p = items[item, 0]
        inner = pairs[p, 0]
        outer = pairs[p, 1]
        if layer_start[inner] == layer_start[inner + 1] or layer_start[outer] == layer_start[outer + 1]:
            continue
        outer_barrel = layer_is_barrel[outer]
        both_discs = (not layer_is_barrel[inner]) and (not outer_barrel)
        r_lo_o = layer_r_lo[outer]
        r_hi_o = layer_r_hi[outer]
        first_between = between_start[p]
        last_between = between_start[p + 1]
        slope_cut = skip_phi_slope_max if pair_jumps[p] else phi_slope_max
        z0_cut = skip_z0_max if pair_jumps[p] else z0_max
        margin = skip_margin if pair_jumps[p] else dphi_margin
        for a in range(items[item, 1], items[item, 2]):
            r_a = r[a]
            z_a = z[a]
            phi_a = phi[a]
            if outer_barrel:
                r_reach = r_hi_o
                if helix:
                    # z_b = z0 + (z_a - z0) s_b / s_a along a helix: s_b / s_a is largest on the most curved
                    # circle the cut takes at the layer's far edge (asin is convex), so that ratio bounds the window.
                    kappa = min(2.0 * slope_cut, 2.0 / (helix_reach * r_hi_o))
                    r_reach = r_a * helix_arc(r_hi_o, kappa) / helix_arc(r_a, kappa) * (1.0 + 1.0e-9)
                lo, hi = _secondary_window_barrel(r_a, z_a, r_lo_o, r_reach, z0_cut)
                r_far = r_hi_o
            else:
                lo, hi = _secondary_window_disc(
                    r_a, z_a, eta[a], layer_z_lo[outer], layer_z_hi[outer], z0_cut, deta_max, both_discs
                )
                # Only outer hits at a larger radius pass (dr > 0): on a disc the r window starts at r_a.
                lo = max(lo, r_a)
                if abs(z_a) <= z0_cut:
                    lo = max(lo, _disc_z0_floor(r_a, z_a, layer_z_lo[outer], layer_z_hi[outer], z0_cut))
                if helix:
                    # Along a helix s_b = s_a t, t = (z_b - z0) / (z_a - z0), so with theta = asin(kappa r_a / 2)
                    # r_b = 2 sin(t theta) / kappa: for t >= 1 (a disc beyond z_a) at most the straight line's
                    # r_a t (a curved track reaches less far in r for its arc) and at least its value on the most
                    # curved circle the cut takes; the straight window's ends are r_a t at its extreme t.
                    kappa = min(2.0 * slope_cut, 2.0 / (helix_reach * r_a))
                    beyond = (z_a > z0_cut and layer_z_lo[outer] >= z_a) or (z_a < -z0_cut and layer_z_hi[outer] <= z_a)
                    if not beyond:
                        hi = hi * helix_arc(r_a, kappa) / r_a * (1.0 + 1.0e-9)  # r_b <= s_b <= s_a t
                    turn = lo / r_a * math.asin(min(1.0, 0.5 * kappa * r_a))
                    if lo > r_a and turn < 0.5 * math.pi:
                        lo = max(r_a, 2.0 * math.sin(turn) / kappa * (1.0 - 1.0e-9) - 1.0e-6)
                    else:
                        lo = r_a
                r_far = min(hi, r_hi_o)
            if lo > hi:
                continue
            # A hit that passes has 0 < dr <= r_far - r_a, so the phi window of the farthest reach holds them all
            # (on a disc r_far is the end of the r window, not of the disc: a window a fraction as wide).
            dr_reach = r_far - r_a
            if not dr_reach > 0.0:
                continue
            rho_hi = 0.0
            if helix:
                half_width = helix_dphi(r_a, r_far, 2.0 * slope_cut, helix_reach) + margin + 1.0e-9
                # The largest ratio of arcs s_b / s_a the cut takes for any hit out to r_far (see the barrel window).
                kappa = min(2.0 * slope_cut, 2.0 / (helix_reach * r_far))
                rho_hi = helix_arc(r_far, kappa) / helix_arc(r_a, kappa) * (1.0 + 1.0e-9)
            else:
                half_width = slope_cut * dr_reach + margin
            if half_width >= math.pi:
                first_bin = 0
                num_bins = num_phi_bins
            else:
                first_bin = int(math.floor((phi_a - half_width + math.pi) / bin_width))
                last_bin = int(math.floor((phi_a + half_width + math.pi) / bin_width))
                num_bins = min(last_bin - first_bin + 1, num_phi_bins)
            # On a disc the bins away from phi_a hold only far hits that can pass: see _disc_bin_start.
            narrow = (not outer_barrel) and 2.0 * (half_width + bin_width) < math.pi
            for k in range(num_bins):
                b = (first_bin + k + num_phi_bins) % num_phi_bins
                start = bin_start[outer, b]
                stop = bin_start[outer, b + 1]
                if start == stop:
                    continue
                lo_bin = lo
                if narrow and helix:
                    lo_bin = max(
                        lo,
                        _disc_bin_start_helix(
                            phi_a, r_a, first_bin + k, bin_width, 2.0 * slope_cut, helix_reach, margin
                        ),
                    )
                    if lo_bin > hi:
                        continue
                elif narrow:
                    lo_bin = max(lo, _disc_bin_start(phi_a, r_a, first_bin + k, bin_width, slope_cut, margin))
                    if lo_bin > hi:
                        continue
                j = _lower_bound(secondary, start, stop, lo_bin)
                while j < stop and secondary[j] <= hi:
                    dr = r[j] - r_a
                    dz = z[j] - z_a
                    dphi = abs(_wrap_angle(phi[j] - phi_a))
                    # |z0| = |z_a - r_a dz/dr|, written without dividing by a tiny dr.
                    z0_times_dr = abs(z_a * dr - r_a * dz)
                    if helix:
                        # Most candidates fail z0 wherever the helix bends: decided first at both ends of the arcs'
                        # ratio, from the straight line's r_b / r_a to rho_hi, without a transcendental.
                        keep = (
                            dr > 0.0
                            and _helix_z0_possible(z_a, z[j], r[j] / r_a, rho_hi, z0_cut)
                            and _helix_keep(r_a, z_a, r[j], z[j], dphi, slope_cut, margin, z0_cut, helix_reach)
                        )
                    else:
                        keep = dr > 0.0 and dphi <= slope_cut * dr + margin and z0_times_dr <= z0_cut * dr
                    if keep and both_discs:
                        keep = abs(eta[j] - eta[a]) <= deta_max
                    crossed = 0
                    if keep and last_between > first_between:
                        crossed = _layers_crossed(
                            r_a, z_a, r[j], z[j], first_between, last_between, between_layers, layer_is_barrel,
                            surface_r, surface_z, extent_r_min, extent_r_max, extent_z_min, extent_z_max,
                            crossing_margin,
                        )
                        if crossed == 1:
                            if helix:
                                keep = allow_skip and _helix_keep(
                                    r_a, z_a, r[j], z[j], dphi, skip_phi_slope_max, skip_margin, skip_z0_max, helix_reach
                                )
                            else:
                                keep = (
                                    allow_skip
                                    and dphi <= skip_phi_slope_max * dr + skip_margin
                                    and z0_times_dr <= skip_z0_max * dr
                                )
                        elif crossed > 1:
                            keep = False
                    if keep:
                        if count == keys.shape[0]:
                            keys = _grow(keys)
                        keys[count] = (node[a] * num_nodes + node[j]) * 2 + crossed
                        count += 1
                    j += 1
    return keys[:count].copy()


@njit(cache=True, nogil=True)
def bridge_candidates(
    src: np.ndarray,
    dst: np.ndarray,
    jumping: np.ndarray,
    r: np.ndarray,
    phi: np.ndarray,
    z: np.ndarray,
    skip_phi_slope_max: float,
    skip_z0_max: float,
    dphi_margin: float,
    first: int,
    last: int,
    out: np.ndarray,
) -> None:
    """Which of the edges [first, last) may be half of a bridge: adjacent-layer ones that pass the skip cuts.

    numpy's arithmetic, operation for operation (``abs(mod(phi_c - phi_a + pi, 2 pi) - pi)``: numba's float ``%``
    is Python's, the exact ``fmod`` with the divisor added to a negative remainder, as numpy's ``mod`` is), so the
    same decisions as the expressions over whole columns it replaces.

    Args:
        src, dst: (E,) int64 inner and outer node of every edge.
        jumping: (E,) bool, the edge's segment crosses a layer.
        r, phi, z: (N,) float64 hit coordinates.
        skip_phi_slope_max, skip_z0_max, dphi_margin: the skip cuts.
        first, last: the edges to decide.
        out: (E,) bool, written at [first, last).
    """
    for e in range(first, last):
        a = src[e]
        c = dst[e]
        dr = r[c] - r[a]
        dz = z[c] - z[a]
        dphi = abs((phi[c] - phi[a] + math.pi) % TWO_PI - math.pi)
        out[e] = (
            (not jumping[e])
            and dphi <= skip_phi_slope_max * dr + dphi_margin
            and abs(z[a] * dr - r[a] * dz) <= skip_z0_max * dr
        )


@njit(cache=True)
def _has_edge(out_start: np.ndarray, out_dst: np.ndarray, src: int, dst: int) -> bool:
    start = out_start[src]
    stop = out_start[src + 1]
    k = _lower_bound(out_dst, start, stop, dst)  # numba specialises it for int64 arrays
    return k < stop and out_dst[k] == dst


@njit(cache=True, nogil=True)
def bridged(
    out_start: np.ndarray,
    out_dst: np.ndarray,
    skip_src: np.ndarray,
    skip_dst: np.ndarray,
    r: np.ndarray,
    phi: np.ndarray,
    z: np.ndarray,
    is_barrel: np.ndarray,
    tolerance_xy: float,
    tolerance_rz: float,
) -> np.ndarray:
    """Which skip candidates a -> c are bridged by a hit b on the straight line between them.

    A bridge b needs edges a -> b and b -> c and must lie within
    ``tolerance_xy`` (transverse, mm) and ``tolerance_rz`` (along z on a
    barrel, along r on a disc, mm) of the straight segment a -> c.

    Args:
        out_start: (N + 1,) CSR offsets of the out-edges of every node.
        out_dst: (E,) destinations of the out-edges, sorted within every node.
        skip_src, skip_dst: (K,) the skip candidates.
        r, phi, z: (N,) hit coordinates.
        is_barrel: (N,) bool, the hit lies on a barrel layer.
        tolerance_xy, tolerance_rz: see above.

    Returns:
        (K,) bool, True where such a bridge exists.
    """
    result = np.zeros(skip_src.shape[0], dtype=np.bool_)
    for k in range(skip_src.shape[0]):
        a = skip_src[k]
        c = skip_dst[k]
        dphi_ac = _wrap_angle(phi[c] - phi[a])
        for e in range(out_start[a], out_start[a + 1]):
            b = out_dst[e]
            # a and c at one radius (a barrel bridge) or one z (a disc bridge), as loose skip cuts may pair them: the
            # line a -> c has no point at b's radius (z) between them, so b bridges nothing (and t is undefined).
            span = r[c] - r[a] if is_barrel[b] else z[c] - z[a]
            if span == 0.0:
                continue
            if is_barrel[b]:
                t = (r[b] - r[a]) / span
                residual_rz = abs(z[b] - (z[a] + t * (z[c] - z[a])))
            else:
                t = (z[b] - z[a]) / span
                residual_rz = abs(r[b] - (r[a] + t * (r[c] - r[a])))
            if residual_rz > tolerance_rz:
                continue
            residual_xy = abs(_wrap_angle(phi[b] - (phi[a] + t * dphi_ac))) * r[b]
            if residual_xy > tolerance_xy:
                continue
            if _has_edge(out_start, out_dst, b, c):
                result[k] = True
                break
    return result
