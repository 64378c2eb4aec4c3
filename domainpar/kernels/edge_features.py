"""The geometric edge-feature columns of a hit graph, all in one pass over the edges (numba).

Knows nothing of feature names or graph files: :mod:`domainpar.data.features` maps its names to the codes
below and owns what each column means. Every column is the float64 arithmetic that
:data:`domainpar.data.features.EDGE_FEATURE_SPECS` describes, operation for operation as numpy evaluates the
same formula on whole columns (the same operands in the same order, no fused multiply-add, numpy's floored
modulo and ``hypot``, its ``where``/``nan_to_num``/``clip`` rules), rounded to float32 once as it is written:
the bytes numpy's column-by-column version gives. What numpy computes with its own vectorised transcendental
functions (``arcsinh``, ``log1p``) stays with numpy: glibc's functions, which numba calls, differ from those in
the last bit.
"""

from __future__ import annotations

import math

import numba
import numpy as np

#: Column codes of :func:`edge_feature_rows`, by the feature name each computes.
CODES = {"dr": 0, "dphi": 1, "dz": 2, "dR": 3, "deta": 4, "phi_slope": 5, "z0": 6, "curvature": 7}
#: Code of a column copied from the triplet table (divided by its scale): ``TRIPLET_CODE + column``.
TRIPLET_CODE = 16


@numba.njit(cache=True, nogil=True, inline="always")
def _finite_clip(value: float, bound: float) -> float:
    """``np.clip(np.nan_to_num(value, nan=0.0), -bound, bound)`` of one float64 (bound finite and positive)."""
    if value != value:
        return 0.0
    if value < -bound:
        return -bound
    if value > bound:
        return bound
    return value  # -0.0 stays -0.0, as in numpy


@numba.njit(cache=True, nogil=True, inline="always")
def _signed_infinity(value: float) -> float:
    """``np.sign(value) * np.inf``: +-inf, NaN for a zero (0 x inf) or a NaN."""
    if value > 0.0:
        return math.inf
    if value < 0.0:
        return -math.inf
    return math.nan


@numba.njit(cache=True, nogil=True)
def edge_feature_rows(
    src: np.ndarray,
    dst: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    z: np.ndarray,
    r: np.ndarray,
    phi: np.ndarray,
    eta: np.ndarray,
    triplets: np.ndarray,
    codes: np.ndarray,
    scales: np.ndarray,
    first: int,
    last: int,
    result: np.ndarray,
) -> None:
    """Write rows ``first:last`` of the (E, K) float32 ``result``: column k of edge e is feature ``codes[k]``.

    Args:
        src, dst: (E,) int64 inner and outer node of every edge.
        x, y, z, r, phi, eta: (N,) float64 hit coordinates (mm, rad) and pseudorapidity.
        triplets: (E, 8) float64 triplet columns (distances already as log(1 + m)), or (0, 8) when no code
            reads them.
        codes: (K,) int64 column codes (:data:`CODES`, or :data:`TRIPLET_CODE` + a triplet column).
        scales: (K,) float64 scale of each triplet code (unused for the others).
        first, last: the rows written.
        result: (E, K) float32 output.
    """
    two_pi = 2.0 * math.pi
    for e in range(first, last):
        a = src[e]
        b = dst[e]
        dr = r[b] - r[a]
        dz = z[b] - z[a]
        dphi = (phi[b] - phi[a] + math.pi) % two_pi - math.pi
        deta = eta[b] - eta[a]
        for k in range(codes.shape[0]):
            code = codes[k]
            if code >= TRIPLET_CODE:
                value = triplets[e, code - TRIPLET_CODE] / scales[k]
            elif code == 0:
                value = dr / 1000.0
            elif code == 1:
                value = dphi / math.pi
            elif code == 2:
                value = dz / 1000.0
            elif code == 3:
                value = math.hypot(deta, dphi)
            elif code == 4:
                value = 10.0 * deta
            elif code == 5:
                slope = 1000.0 * dphi / dr if abs(dr) > 1e-6 else _signed_infinity(dphi)
                value = _finite_clip(slope, 10.0)
            elif code == 6:
                numerator = z[a] * dr - r[a] * dz
                z0 = numerator / dr if abs(dr) > 1e-6 else _signed_infinity(numerator)
                value = _finite_clip(z0 / 200.0, 5.0)
            else:
                cross = x[a] * y[b] - y[a] * x[b]
                chord = math.hypot(x[b] - x[a], y[b] - y[a])
                denominator = r[a] * r[b] * chord
                if denominator < 1e-9:  # np.maximum(d, 1e-9): a NaN stays NaN
                    denominator = 1e-9
                value = 600.0 * cross / denominator
            result[e, k] = value  # float64 -> float32, rounded to nearest as numpy's astype rounds
