"""Chains of triplets among the hits no track kept, with no assumption on where the particle came from (numba).

The graph's cuts look for tracks from the beam line; a particle made in a decay or an interaction millimetres
away from it (a *displaced* particle) loses its segments there and its hits stay free. This module finds such
particles among the free hits alone, the way a cellular-automaton tracker does:

1. *doublets*: pairs of free hits on two layers the graph pairs, within ``dphi`` in phi and, when the layers lie
   apart in r, with the straight (r, z) line through them meeting the beam line within ``z0_max``, both hits'
   cluster lengths agreeing with that line;
2. *triplets*: two doublets a -> b -> c that keep going forward in x-y, on a circle of radius at least
   ``radius_min``, with polar angles within ``dtheta`` of each other, and whose three hits' cluster lengths agree
   with the crossing angle the triplet gives (:func:`cluster_agrees`);
3. *links*: a triplet a -> b -> c continued by b -> c -> d with a like signed curvature and polar angle;
4. *chains*: the longest path of linked triplets from every triplet, longest first, kept when its hits are all
   free, it holds ``min_hits`` hits, and its helix fit has chi2/ndf at most ``max_chi2_ndf`` and a radius of at
   least ``radius_min``. A kept chain claims its hits;
5. *twins*: a single triplet of free hits kept when a second free hit on one of its layers, beside its hit there (a
   particle through two overlapping sensors), fits the four hits' helix (:func:`twinned_triplets`).

With four or more layers behind them, random hits rarely line up on one helix whose crossing angles match their
clusters' lengths; the cluster test is what keeps chance chains of the free hits (noise among them) out.

Knows nothing of events or files: positions, layers and cluster lengths in, a track label per hit out.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from domainpar.kernels.segments import _lower_bound
from domainpar.kernels.track_fit import helix_fit

#: Room the growing output arrays start with.
_START = 1 << 12
#: Most hits of one chain.
_MAX_CHAIN = 96


@numba.njit(cache=True, nogil=True)
def _grown(buffer: np.ndarray) -> np.ndarray:
    bigger = np.empty(2 * buffer.shape[0], dtype=buffer.dtype)
    bigger[: buffer.shape[0]] = buffer
    return bigger


@numba.njit(cache=True, nogil=True)
def cluster_agrees(h, ux, uy, slope, x, y, length, barrel, thickness, pitch, cut, relative):
    """Whether hit h's cluster length along v (channels) agrees with a track through it in x-y direction (ux, uy)
    (a unit vector) with dz/ds ``slope``.

    A particle crossing a sensor of thickness t spreads its charge over t times the tangent of its angle to the
    sensor's normal: on a barrel module (normal radial, v along z) ``t |dz/ds| / cos(alpha)``, alpha the angle
    between the track and the radius in x-y; on an endcap module (normal along z, v radial)
    ``t cos(alpha) / |dz/ds|``. Agreement: |length - predicted / pitch_v| <= cut (1 + relative * predicted).
    A hit with no cluster length (0 or NaN: no cells read) agrees with any track.
    """
    if not (length[h] > 0.0):
        return True
    rr = math.hypot(x[h], y[h])
    cos_a = abs(ux * x[h] / rr + uy * y[h] / rr) if rr > 0.0 else 1.0
    if barrel[h]:
        predicted = thickness[h] * abs(slope) / max(cos_a, 0.05) / pitch[h]
    else:
        predicted = thickness[h] * cos_a / max(abs(slope), 0.02) / pitch[h]
    return abs(length[h] - predicted) <= cut * (1.0 + relative * predicted)


@numba.njit(cache=True, nogil=True)
def doublets(order, layer_start, sorted_phi, pairs, x, y, z, r, dphi, z0_max, length, barrel, thickness, pitch, cut, relative):
    """Free-hit pairs of the layer pairs within the windows of the module docstring (1.), both hits' cluster lengths
    agreeing with the straight line through them (:func:`cluster_agrees`).

    Args:
        order: (F,) int64 the free hits, sorted by layer and, within a layer, by phi.
        layer_start: (L+1,) int64 offsets of every layer code's hits in ``order``.
        sorted_phi: (F,) float64 phi of ``order``'s hits.
        pairs: (P, 2) int64 layer codes (inner, outer) the graph pairs.
        x, y, z, r: (N,) float64 hit positions and radii (mm).
        dphi: largest |phi_b - phi_a| (rad).
        z0_max: largest |z| (mm) where the (r, z) line through both hits meets the beam line.
        length, barrel, thickness, pitch, cut, relative: as :func:`triplets`.

    Returns:
        ``(src, dst)``: (D,) int64 each, the inner and outer hit, pair by pair, inner hit by inner hit.
    """
    src = np.empty(_START, dtype=np.int64)
    dst = np.empty(_START, dtype=np.int64)
    k = 0
    for p in range(pairs.shape[0]):
        la, lb = pairs[p, 0], pairs[p, 1]
        b0, b1 = layer_start[lb], layer_start[lb + 1]
        if b1 == b0:
            continue
        for i in range(layer_start[la], layer_start[la + 1]):
            a = order[i]
            phi_a = sorted_phi[i]
            # The window [phi_a - dphi, phi_a + dphi] as up to two unwrapped pieces of the sorted phi.
            for piece in range(3):
                lo = phi_a - dphi + (piece - 1) * 2.0 * math.pi
                hi = phi_a + dphi + (piece - 1) * 2.0 * math.pi
                if hi < -math.pi or lo > math.pi:
                    continue
                j = _lower_bound(sorted_phi, b0, b1, lo)
                while j < b1 and sorted_phi[j] <= hi:
                    b = order[j]
                    j += 1
                    dr = r[b] - r[a]
                    if abs(dr) > 5.0 and abs(z[a] - r[a] * (z[b] - z[a]) / dr) > z0_max:
                        continue
                    ux, uy = x[b] - x[a], y[b] - y[a]
                    chord = math.hypot(ux, uy)
                    if chord < 1e-6:
                        continue
                    ux /= chord
                    uy /= chord
                    slope = (z[b] - z[a]) / chord
                    if not cluster_agrees(a, ux, uy, slope, x, y, length, barrel, thickness, pitch, cut, relative):
                        continue
                    if not cluster_agrees(b, ux, uy, slope, x, y, length, barrel, thickness, pitch, cut, relative):
                        continue
                    if k == src.shape[0]:
                        src = _grown(src)
                        dst = _grown(dst)
                    src[k] = a
                    dst[k] = b
                    k += 1
    return src[:k].copy(), dst[:k].copy()


@numba.njit(cache=True, nogil=True)
def triplets(in_ptr, in_node, out_ptr, out_node, x, y, z, radius_min, dtheta, length, barrel, thickness, pitch, cut, relative):
    """Triplets a -> b -> c of two doublets (the module docstring's 2.).

    Args:
        in_ptr, in_node: (N+1,), (D,) CSR of every hit's inner doublet partners.
        out_ptr, out_node: (N+1,), (D,) CSR of every hit's outer doublet partners.
        x, y, z: (N,) float64 hit positions (mm).
        radius_min: smallest circle radius in x-y (mm).
        dtheta: largest difference of the two doublets' polar angles (rad).
        length, barrel, thickness, pitch: (N,) every hit's cluster length along v (channels), whether its layer is
            a barrel, its sensor's thickness and pitch along v (mm) (:func:`cluster_agrees`).
        cut, relative: :func:`cluster_agrees`'s tolerance.

    Returns:
        ``(hits, kappa, theta)``: (3, T) int64 a, b, c; (T,) float64 the signed curvature 1/R (1/mm) and the mean
        polar angle of both doublets.
    """
    hits = np.empty((3, _START), dtype=np.int64)
    kappa = np.empty(_START, dtype=np.float64)
    theta = np.empty(_START, dtype=np.float64)
    k = 0
    for b in range(in_ptr.shape[0] - 1):
        for i in range(in_ptr[b], in_ptr[b + 1]):
            a = in_node[i]
            for o in range(out_ptr[b], out_ptr[b + 1]):
                c = out_node[o]
                abx, aby, bcx, bcy = x[b] - x[a], y[b] - y[a], x[c] - x[b], y[c] - y[b]
                s1, s2 = math.hypot(abx, aby), math.hypot(bcx, bcy)
                if s1 < 1e-6 or s2 < 1e-6 or abx * bcx + aby * bcy <= 0.0:
                    continue  # not going forward in x-y
                s3 = math.hypot(x[c] - x[a], y[c] - y[a])
                curvature = 2.0 * (abx * bcy - aby * bcx) / (s1 * s2 * s3)
                if abs(curvature) * radius_min > 1.0:
                    continue
                t1 = math.atan2(z[b] - z[a], s1)
                t2 = math.atan2(z[c] - z[b], s2)
                if abs(t1 - t2) > dtheta:
                    continue
                slope = math.tan(0.5 * (t1 + t2))
                # The chords' directions stand for the circle's at the hits (their angles differ by s / 2R).
                if not cluster_agrees(a, abx / s1, aby / s1, slope, x, y, length, barrel, thickness, pitch, cut, relative):
                    continue
                if not cluster_agrees(b, (x[c] - x[a]) / s3, (y[c] - y[a]) / s3, slope, x, y, length, barrel, thickness, pitch, cut, relative):
                    continue
                if not cluster_agrees(c, bcx / s2, bcy / s2, slope, x, y, length, barrel, thickness, pitch, cut, relative):
                    continue
                if k == kappa.shape[0]:
                    grown = np.empty((3, 2 * k), dtype=np.int64)
                    grown[:, :k] = hits
                    hits = grown
                    kappa = _grown(kappa)
                    theta = _grown(theta)
                hits[0, k], hits[1, k], hits[2, k] = a, b, c
                kappa[k] = curvature
                theta[k] = 0.5 * (t1 + t2)
                k += 1
    return hits[:, :k].copy(), kappa[:k].copy(), theta[:k].copy()


@numba.njit(cache=True, nogil=True)
def links(hits, kappa, theta, first_key, num_nodes, dkappa, dkappa_relative, dtheta):
    """Triplet t = a -> b -> c linked to every s = b -> c -> d of a like helix (the module docstring's 3.).

    Args:
        hits, kappa, theta: :func:`triplets`' output, sorted by ``first_key``.
        first_key: (T,) int64 a * num_nodes + b of every triplet, ascending.
        num_nodes: N.
        dkappa, dkappa_relative: largest |kappa_t - kappa_s| is dkappa + dkappa_relative |mean kappa|.
        dtheta: largest |theta_t - theta_s| (rad).

    Returns:
        ``(ptr, successor, cost)``: CSR over the triplets of their successors ((T+1,), (K,) int64) and each link's
        cost (K,): the two differences in units of their tolerances, summed.
    """
    num = kappa.shape[0]
    ptr = np.zeros(num + 1, dtype=np.int64)
    successor = np.empty(_START, dtype=np.int64)
    cost = np.empty(_START, dtype=np.float64)
    k = 0
    for t in range(num):
        key = hits[1, t] * num_nodes + hits[2, t]
        s = np.searchsorted(first_key, key)
        while s < num and first_key[s] == key:
            gap_k = abs(kappa[t] - kappa[s])
            gap_t = abs(theta[t] - theta[s])
            tolerance = dkappa + dkappa_relative * 0.5 * abs(kappa[t] + kappa[s])
            if gap_k <= tolerance and gap_t <= dtheta:
                if k == successor.shape[0]:
                    successor = _grown(successor)
                    cost = _grown(cost)
                successor[k] = s
                cost[k] = gap_k / tolerance + gap_t / dtheta
                k += 1
            s += 1
        ptr[t + 1] = k
    return ptr, successor[:k].copy(), cost[:k].copy()


@numba.njit(cache=True, nogil=True)
def chains(hits, ptr, successor, cost, taken, min_hits, columns, field, ms, max_chi2_ndf, radius_min):
    """Chains of linked triplets, longest first, each claiming its hits (the module docstring's 4.).

    Args:
        hits, ptr, successor, cost: the triplets and their links (:func:`links`).
        taken: (N,) bool hits not free (updated: a kept chain's hits become taken).
        min_hits: fewest hits of a kept chain.
        columns: the hits' positions and resolutions (:data:`~domainpar.kernels.track_fit.HitColumns`).
        field, ms: the helix fit's field (T) and multiple-scattering term (mm GeV).
        max_chi2_ndf: largest chi2/ndf of a kept chain's helix fit.
        radius_min: smallest radius (mm) of a kept chain's fitted circle.

    Returns:
        (N,) int64 every hit's chain, 0..C-1 in the order they were kept, -1: none.
    """
    num = ptr.shape[0] - 1
    # Longest path from every triplet along its links (the links run outwards, so paths are short), with the
    # cheapest link among equally long ones.
    longest = np.ones(num, dtype=np.int64)
    best = np.full(num, -1, dtype=np.int64)
    for _ in range(_MAX_CHAIN):
        changed = False
        for t in range(num):
            length, choice, cheapest = longest[t], best[t], np.inf
            if choice >= 0:
                for j in range(ptr[t], ptr[t + 1]):
                    if successor[j] == choice:
                        cheapest = cost[j]
            for j in range(ptr[t], ptr[t + 1]):
                s = successor[j]
                if 1 + longest[s] > length or (1 + longest[s] == length and cost[j] < cheapest):
                    length, choice, cheapest = 1 + longest[s], s, cost[j]
            if length != longest[t] or choice != best[t]:
                longest[t], best[t] = length, choice
                changed = True
        if not changed:
            break
    x, y, z, var_t, var_z, var_r, var_m = columns
    label = np.full(taken.shape[0], -1, dtype=np.int64)
    buf = np.empty(_MAX_CHAIN + 2, dtype=np.int64)
    num_chains = 0
    for t in np.argsort(-longest, kind="mergesort"):
        if longest[t] + 2 < min_hits:
            break
        buf[0], buf[1] = hits[0, t], hits[1, t]
        count = 2
        u = t
        while u >= 0 and count < buf.shape[0]:
            buf[count] = hits[2, u]
            count += 1
            u = best[u]
        free = True
        for k in range(count):
            if taken[buf[k]]:
                free = False
                break
        if not free:
            continue
        chi2, ndf, _, rho, _, _, _, _ = helix_fit(x, y, z, var_t, var_z, var_r, var_m, buf, count, field, ms)
        if not (chi2 <= max_chi2_ndf * ndf) or abs(rho) * radius_min > 1.0:
            continue
        for k in range(count):
            taken[buf[k]] = True
            label[buf[k]] = num_chains
        num_chains += 1
    return label


@numba.njit(cache=True, nogil=True)
def twinned_triplets(hits, taken, twin_ptr, twin_node, columns, field, ms, max_chi2_ndf, radius_min, length, barrel, thickness, pitch, cut, relative, label, first_label):
    """Single triplets on three layers kept when a second hit on one of their layers backs them (a particle through
    two overlapping sensors), in the order given: the four hits' helix fit within ``max_chi2_ndf`` and ``radius_min``,
    the second hit's cluster agreeing with the triplet (:func:`cluster_agrees`); the best-fitting second hit.

    Args:
        hits: (3, T) int64 the triplets, in the order they are tried.
        taken: (N,) bool hits not free (updated).
        twin_ptr, twin_node: (N+1,), (K,) CSR of every free hit's neighbours on its own layer within the double distance.
        columns, field, ms, max_chi2_ndf, radius_min: as :func:`chains`.
        length, barrel, thickness, pitch, cut, relative: as :func:`triplets`.
        label: (N,) int64 every hit's chain (updated: the kept triplets numbered from ``first_label``).
        first_label: the label of the first triplet kept.

    Returns:
        The next free label.
    """
    x, y, z, var_t, var_z, var_r, var_m = columns
    buf = np.empty(4, dtype=np.int64)
    best_buf = np.empty(4, dtype=np.int64)
    next_label = first_label
    for t in range(hits.shape[1]):
        a, b, c = hits[0, t], hits[1, t], hits[2, t]
        if taken[a] or taken[b] or taken[c]:
            continue
        s_ac = math.hypot(x[c] - x[a], y[c] - y[a])
        if s_ac <= 0.0:
            continue
        slope = (z[c] - z[a]) / s_ac
        best = max_chi2_ndf
        found = False
        for k in range(3):
            h = hits[k, t]
            # The direction at h: its chords' (the first and last hits' for the middle one).
            p, q = (a, b) if k == 0 else ((a, c) if k == 1 else (b, c))
            dx, dy = x[q] - x[p], y[q] - y[p]
            norm = math.hypot(dx, dy)
            if norm <= 0.0:
                continue
            for j in range(twin_ptr[h], twin_ptr[h + 1]):
                w = twin_node[j]
                if taken[w] or w == a or w == b or w == c:
                    continue
                if not cluster_agrees(w, dx / norm, dy / norm, slope, x, y, length, barrel, thickness, pitch, cut, relative):
                    continue
                # The four hits in order of radius (the twin beside its partner).
                buf[0], buf[1], buf[2], buf[3] = a, b, c, w
                for i in range(3, 0, -1):
                    if math.hypot(x[buf[i]], y[buf[i]]) >= math.hypot(x[buf[i - 1]], y[buf[i - 1]]):
                        break
                    buf[i], buf[i - 1] = buf[i - 1], buf[i]
                chi2, ndf, _, rho, _, _, _, _ = helix_fit(x, y, z, var_t, var_z, var_r, var_m, buf, 4, field, ms)
                if chi2 / ndf <= best and abs(rho) * radius_min <= 1.0:
                    best = chi2 / ndf
                    best_buf[:] = buf
                    found = True
        if found:
            for k in range(4):
                taken[best_buf[k]] = True
                label[best_buf[k]] = next_label
            next_label += 1
    return next_label
