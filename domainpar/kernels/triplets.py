"""Best-continuation search over the triplets of a directed hit graph (numba).

Knows nothing of events or features: plain arrays in, plain arrays out. Every
pair of edges e = (a -> b), f = (b -> c) that share a middle node is a
*triplet* (a, b, c). Given per edge its polar direction ``alpha``, transverse
direction ``beta``, transverse length ``ell`` and curvature ``kappa``, the
triplet's residuals are

    dalpha = wrap(alpha_f - alpha_e)
    rho    = wrap(beta_f - beta_e) - kappa_e * (ell_e + ell_f) / 2

(the change of polar angle, and the turn of the transverse direction that the
inner edge's curvature does not explain) and its distance is
``m = (dalpha / scale)^2 + (rho / scale)^2``. For every edge the kernel keeps,
on each side (its outer continuations f, where it is the inner edge; its inner
continuations, where it is the outer edge), the residuals of the triplet of
smallest m, that m, and how many triplets lie within ``loose``.

The work is the number of triplets, sum over nodes of in-degree × out-degree
(~130M for a full event's ~3M candidate edges): each triplet is computed once,
at its middle node, and updates both of its edges. A triplet's middle node alone writes the outer columns of
its e and the inner columns of its f, so ranges of middle nodes run on threads side by side
(:mod:`domainpar.kernels.chunks`) and every element gets the updates of the serial loop, in its order.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from domainpar.kernels import chunks
from domainpar.kernels.grouping import group_by_key

#: Columns of :func:`best_triplets`' output, in order.
COLUMNS = ("out_dalpha", "out_rho", "out_distance", "out_count", "in_dalpha", "in_rho", "in_distance", "in_count")
#: Distance reported for a side without any triplet (an edge at the end of the graph).
NO_TRIPLET = 1.0e6


@numba.njit(cache=True, nogil=True)
def _wrap(angle: float) -> float:
    """An angle difference of two angles in [-pi, pi] (so within [-2 pi, 2 pi]) wrapped into [-pi, pi]."""
    if angle > math.pi:
        return angle - 2.0 * math.pi
    if angle < -math.pi:
        return angle + 2.0 * math.pi
    return angle


@numba.njit(cache=True, nogil=True)
def _best_triplets(
    alpha: np.ndarray,
    beta: np.ndarray,
    ell: np.ndarray,
    kappa: np.ndarray,
    out_start: np.ndarray,
    out_edges: np.ndarray,
    in_start: np.ndarray,
    in_edges: np.ndarray,
    scale: float,
    loose: float,
    first_node: int,
    last_node: int,
    result: np.ndarray,
) -> None:
    """The triplets whose middle node is in [first_node, last_node), written into ``result`` (E, 8): the outer
    columns of the in-edges of those nodes and the inner columns of their out-edges, whether or not they have
    triplets.

    Per middle node b, its out-edges' values and their inner-side bests sit in short scratch arrays, and every
    in-edge e runs one branch-free pass over them (which the compiler vectorises), then picks its first smallest
    m: the comparisons, in the order, of the loop over (e, f) pairs written out, so the same results.

    An in-edge's row lies anywhere in the edge arrays (edges are sorted by their inner node). Its values are read,
    and its results written, in short loops of their own, one for all of b's in-edges, whose cache misses overlap;
    spread among the passes over b's out-edges they could not.

    The inputs are finite (the hits are checked when read), so every m is a non-negative number, never NaN.
    """
    inv = 1.0 / (scale * scale)
    width = 0
    in_width = 0
    for b in range(first_node, last_node):
        width = max(width, out_start[b + 1] - out_start[b])
        in_width = max(in_width, in_start[b + 1] - in_start[b])
    alpha_f = np.empty(width)
    beta_f = np.empty(width)
    ell_f = np.empty(width)
    m_k = np.empty(width)
    # m >= +0 always, and non-negative doubles order as their bit patterns: an integer minimum, which vectorises.
    m_bits = m_k.view(np.int64)
    best_f = np.empty(width)
    dalpha_f = np.empty(width)
    rho_f = np.empty(width)
    count_f = np.empty(width, dtype=np.int64)
    e_values = np.empty((in_width, 4))
    e_result = np.empty((in_width, 4))
    no_triplet_bits = np.array([NO_TRIPLET]).view(np.int64)[0]
    # Every triplet once, at its middle node b: e = (a -> b) in ascending edge id, f = (b -> c) likewise, so the
    # first triplet of smallest m is kept on both sides.
    for b in range(first_node, last_node):
        start = out_start[b]
        degree = out_start[b + 1] - start
        first_in = in_start[b]
        num_in = in_start[b + 1] - first_in
        if degree == 0 or num_in == 0:
            # No triplet here: the sides b owns (outer of its in-edges, inner of its out-edges) say so. Every row
            # is filled by the chunks of its two nodes, so ``result`` needs no zeroing pass before the threads.
            for i in range(first_in, first_in + num_in):
                e = in_edges[i]
                result[e, 0] = 0.0
                result[e, 1] = 0.0
                result[e, 2] = NO_TRIPLET
                result[e, 3] = 0.0
            for k in range(degree):
                f = out_edges[start + k]
                result[f, 4] = 0.0
                result[f, 5] = 0.0
                result[f, 6] = NO_TRIPLET
                result[f, 7] = 0.0
            continue
        for k in range(degree):
            f = out_edges[start + k]
            alpha_f[k] = alpha[f]
            beta_f[k] = beta[f]
            ell_f[k] = ell[f]
            best_f[k] = NO_TRIPLET
            dalpha_f[k] = 0.0
            rho_f[k] = 0.0
            count_f[k] = 0
        for j in range(num_in):
            e = in_edges[first_in + j]
            e_values[j, 0] = alpha[e]
            e_values[j, 1] = beta[e]
            e_values[j, 2] = ell[e]
            e_values[j, 3] = kappa[e]
        for j in range(num_in):
            alpha_e = e_values[j, 0]
            beta_e = e_values[j, 1]
            ell_e = e_values[j, 2]
            kappa_e = e_values[j, 3]
            count_e = 0
            for k in range(degree):
                dalpha = _wrap(alpha_f[k] - alpha_e)
                rho = _wrap(beta_f[k] - beta_e) - kappa_e * 0.5 * (ell_e + ell_f[k])
                m = (dalpha * dalpha + rho * rho) * inv
                m_k[k] = m
                near = m < loose
                count_e += near
                count_f[k] += near
                # Unconditional stores of selected values: the strict < keeps the first e of smallest m.
                better = m < best_f[k]
                best_f[k] = m if better else best_f[k]
                dalpha_f[k] = dalpha if better else dalpha_f[k]
                rho_f[k] = rho if better else rho_f[k]
            smallest = no_triplet_bits
            for k in range(degree):
                smallest = min(smallest, m_bits[k])
            if smallest < no_triplet_bits:
                # The first f of that m (what a strict < over the f in order keeps); its residuals again, by the
                # same operations (fewer stores in the loop above).
                chosen = 0
                while m_bits[chosen] != smallest:
                    chosen += 1
                e_result[j, 0] = _wrap(alpha_f[chosen] - alpha_e)
                e_result[j, 1] = _wrap(beta_f[chosen] - beta_e) - kappa_e * 0.5 * (ell_e + ell_f[chosen])
                e_result[j, 2] = m_k[chosen]
            else:
                e_result[j, 0] = 0.0
                e_result[j, 1] = 0.0
                e_result[j, 2] = NO_TRIPLET
            e_result[j, 3] = float(count_e)  # the sum of as many 1.0s, exactly
        for j in range(num_in):
            e = in_edges[first_in + j]
            result[e, 0] = e_result[j, 0]
            result[e, 1] = e_result[j, 1]
            result[e, 2] = e_result[j, 2]
            result[e, 3] = e_result[j, 3]
        for k in range(degree):
            f = out_edges[start + k]
            result[f, 4] = dalpha_f[k]
            result[f, 5] = rho_f[k]
            result[f, 6] = best_f[k]
            result[f, 7] = float(count_f[k])


def best_triplets(
    src: np.ndarray,
    dst: np.ndarray,
    alpha: np.ndarray,
    beta: np.ndarray,
    ell: np.ndarray,
    kappa: np.ndarray,
    num_nodes: int,
    scale: float,
    loose: float,
) -> np.ndarray:
    """For every edge, its best triplet on each side (see the module docstring).

    Args:
        src, dst: (E,) int64 inner and outer node of every edge.
        alpha, beta, ell, kappa: (E,) float64 per-edge polar direction (rad), transverse direction (rad),
            transverse length (mm) and curvature (1/mm).
        num_nodes: N.
        scale: the residual scale of the distance m (rad).
        loose: triplets with m below it are counted.

    Returns:
        (E, 8) float64, columns :data:`COLUMNS`: best outer triplet's dalpha, rho, m and the count within
        ``loose``, then the same for the inner side; a side without triplets has m = :data:`NO_TRIPLET`,
        residuals 0 and count 0.
    """
    out_start, out_edges = group_by_key(src, num_nodes)
    in_start, in_edges = group_by_key(dst, num_nodes)
    floats = [np.ascontiguousarray(v, dtype=np.float64) for v in (alpha, beta, ell, kappa)]
    result = np.empty((floats[0].shape[0], 8), dtype=np.float64)  # every element written by the kernel
    # Ranges of middle nodes of about equal work (in-degree x out-degree triplets each), a few per thread.
    work = np.concatenate([[0], np.cumsum(np.diff(in_start) * np.diff(out_start))])
    pieces = min(4 * chunks.build_threads(), max(1, int(work[-1]) // chunks.MIN_CHUNK))
    ranges = chunks.weighted_bounds(work, pieces) if pieces > 1 else [(0, num_nodes)]

    def fold(first: int, last: int) -> None:
        _best_triplets(*floats, out_start, out_edges, in_start, in_edges, float(scale), float(loose), first, last, result)

    chunks.run(fold, ranges)
    return result
