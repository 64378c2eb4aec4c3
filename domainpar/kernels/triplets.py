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
at its middle node, and updates both of its edges.
"""

from __future__ import annotations

import math

import numba
import numpy as np

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
) -> np.ndarray:
    num_edges = alpha.shape[0]
    num_nodes = out_start.shape[0] - 1
    result = np.zeros((num_edges, 8), dtype=np.float64)
    result[:, 2] = NO_TRIPLET
    result[:, 6] = NO_TRIPLET
    inv = 1.0 / (scale * scale)
    # Every triplet once, at its middle node b: e = (a -> b) in ascending edge id, f = (b -> c) likewise, so the
    # first triplet of smallest m is kept on both sides.
    for b in range(num_nodes):
        for i in range(in_start[b], in_start[b + 1]):
            e = in_edges[i]
            alpha_e = alpha[e]
            beta_e = beta[e]
            ell_e = ell[e]
            kappa_e = kappa[e]
            for k in range(out_start[b], out_start[b + 1]):
                f = out_edges[k]
                dalpha = _wrap(alpha[f] - alpha_e)
                rho = _wrap(beta[f] - beta_e) - kappa_e * 0.5 * (ell_e + ell[f])
                m = (dalpha * dalpha + rho * rho) * inv
                if m < loose:
                    result[e, 3] += 1.0
                    result[f, 7] += 1.0
                if m < result[e, 2]:
                    result[e, 0] = dalpha
                    result[e, 1] = rho
                    result[e, 2] = m
                if m < result[f, 6]:
                    result[f, 4] = dalpha
                    result[f, 5] = rho
                    result[f, 6] = m
    return result


def _csr(keys: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """(N + 1,) row offsets and (E,) edge ids grouped by ``keys`` (stable: ascending edge id within a row)."""
    order = np.argsort(keys, kind="stable").astype(np.int64)
    start = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=num_nodes), out=start[1:])
    return start, order


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
    out_start, out_edges = _csr(np.asarray(src, dtype=np.int64), num_nodes)
    in_start, in_edges = _csr(np.asarray(dst, dtype=np.int64), num_nodes)
    floats = [np.ascontiguousarray(v, dtype=np.float64) for v in (alpha, beta, ell, kappa)]
    return _best_triplets(*floats, out_start, out_edges, in_start, in_edges, float(scale), float(loose))
