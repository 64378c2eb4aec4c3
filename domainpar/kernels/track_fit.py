"""Helix fits of hit sets in a solenoid field along z (numba).

Knows nothing of events or graphs: positions in, fit figures out. A charged
particle in a uniform field along z moves on a helix: a circle in x–y and a
straight line in (s, z), s the arc length along the circle. :func:`helix_fit`
fits both to the hits of one candidate, in the order given (innermost first):

* circle: Karimäki's closed-form fit (NIM A305 (1991) 187) in coordinates
  centred on the hits' mean, parametrised by the signed curvature, so a
  straight line (curvature 0) is an ordinary case, never a division by 0;
  residual of a hit = its signed distance to the circle (exact, not the
  fit's linearised one);
* line in (s, z): s is the turning angle around the fitted centre, unwrapped
  hit to hit in the given order, times the radius (the transverse distance
  from the first hit when the circle is a line); z = z0 + t s by least
  squares, residual measured perpendicular to the line, ``(z - z0 - t s) /
  sqrt(1 + t^2)``, so a forward track is not penalised for its steep slope.

Errors: one ``sigma`` per candidate for both views (mm), the hit resolution and
multiple scattering together: ``sigma^2 = sigma_hit^2 + (ms / pT)^2`` with pT
the fitted one in GeV. The same sigma for every hit makes the least-squares
fit unweighted; chi2 = sum of squared residuals / sigma^2 over both views,
ndf = (n - 3) + (n - 2). pT = 0.3 B R (GeV, T, m).
"""

from __future__ import annotations

import math

import numba
import numpy as np

#: pT in GeV of a circle of radius 1 mm in a 1 T field (0.299792458 GeV / (T m) × 1e-3 m/mm).
PT_PER_TESLA_MM = 0.299792458e-3
#: Number of values :func:`helix_fit` returns per candidate (see its docstring).
NUM_FIT_VALUES = 8


@numba.njit(cache=True, nogil=True)
def helix_fit(
    x: np.ndarray, y: np.ndarray, z: np.ndarray, hits: np.ndarray, count: int, field: float, sigma_hit: float, ms: float
) -> tuple:
    """Fit a helix to ``hits[:count]`` (node ids into x, y, z), in that order.

    Returns:
        ``(chi2, ndf, pt, curvature, xc, yc, z0, slope)``: chi2 over both views
        (with the pT-dependent sigma of the module docstring), ndf = 2 count - 5,
        pT in GeV (inf for a straight line), the signed curvature 1/R (1/mm),
        the circle centre (mm; nan for a line), and the (s, z) line's intercept
        at the first hit and slope dz/ds. chi2 and pT are nan below 3 hits.
    """
    nan = np.nan
    if count < 3:
        return nan, 0.0, nan, nan, nan, nan, nan, nan
    xm = 0.0
    ym = 0.0
    for k in range(count):
        xm += x[hits[k]]
        ym += y[hits[k]]
    xm /= count
    ym /= count
    sx2 = 0.0
    sxy = 0.0
    sy2 = 0.0
    sxr = 0.0
    syr = 0.0
    srr = 0.0
    sr = 0.0
    for k in range(count):
        u = x[hits[k]] - xm
        v = y[hits[k]] - ym
        r2 = u * u + v * v
        sx2 += u * u
        sxy += u * v
        sy2 += v * v
        sxr += u * r2
        syr += v * r2
        srr += r2 * r2
        sr += r2
    inv = 1.0 / count
    cxx = sx2 * inv
    cxy = sxy * inv
    cyy = sy2 * inv
    r2m = sr * inv
    cxr = sxr * inv
    cyr = syr * inv
    crr = srr * inv - r2m * r2m
    q1 = crr * cxy - cxr * cyr
    q2 = crr * (cxx - cyy) - cxr * cxr + cyr * cyr
    phi = 0.5 * math.atan2(2.0 * q1, q2)
    sphi = math.sin(phi)
    cphi = math.cos(phi)
    kappa = (sphi * cxr - cphi * cyr) / crr if crr > 0.0 else 0.0
    delta = -kappa * r2m  # Karimaki's delta, with the hits' mean as the origin of the frame
    disc = 1.0 - 4.0 * delta * kappa
    if disc < 0.0:
        disc = 0.0
    root = math.sqrt(disc)
    rho = 2.0 * kappa / root if root > 0.0 else 0.0
    dca = 2.0 * delta / (1.0 + root)
    # Circle: 0.5 rho (u^2+v^2) - (1 + rho d)(u sin(phi) - v cos(phi)) + 0.5 rho d^2 + d = 0 (centred frame).
    chi2_xy = 0.0
    for k in range(count):
        u = x[hits[k]] - xm
        v = y[hits[k]] - ym
        f = 0.5 * rho * (u * u + v * v) - (1.0 + rho * dca) * (u * sphi - v * cphi) + 0.5 * rho * dca * dca + dca
        # Exact signed distance to the circle from its implicit form (f/(1 + ...) -> f for a line).
        g = 1.0 + 2.0 * rho * f
        if g < 0.0:
            g = 0.0
        eps = 2.0 * f / (1.0 + math.sqrt(g))
        chi2_xy += eps * eps
    if abs(rho) > 1e-12:
        radius = 1.0 / abs(rho)
        xc = xm + (dca + 1.0 / rho) * sphi
        yc = ym - (dca + 1.0 / rho) * cphi
        pt = PT_PER_TESLA_MM * field * radius
    else:
        radius = np.inf
        xc = nan
        yc = nan
        pt = np.inf
    # Arc length of every hit from the first, unwrapped in the given order.
    s_sum = 0.0
    z_sum = 0.0
    ss = 0.0
    sz = 0.0
    s_prev = 0.0
    angle_prev = 0.0
    x0 = x[hits[0]]
    y0 = y[hits[0]]
    s_values = np.empty(count)
    for k in range(count):
        h = hits[k]
        if radius < np.inf:
            angle = math.atan2(y[h] - yc, x[h] - xc)
            if k == 0:
                s = 0.0
            else:
                turn = angle - angle_prev
                while turn > math.pi:
                    turn -= 2.0 * math.pi
                while turn < -math.pi:
                    turn += 2.0 * math.pi
                s = s_prev + abs(turn) * radius
            angle_prev = angle
        else:
            s = math.hypot(x[h] - x0, y[h] - y0)
        s_prev = s
        s_values[k] = s
        s_sum += s
        z_sum += z[h]
    s_mean = s_sum * inv
    z_mean = z_sum * inv
    for k in range(count):
        ds = s_values[k] - s_mean
        ss += ds * ds
        sz += ds * (z[hits[k]] - z_mean)
    slope = sz / ss if ss > 0.0 else 0.0
    z0 = z_mean - slope * s_mean
    chi2_z = 0.0
    for k in range(count):
        e = z[hits[k]] - z0 - slope * s_values[k]
        chi2_z += e * e
    chi2_z /= 1.0 + slope * slope
    sigma2 = sigma_hit * sigma_hit
    if pt > 0.0 and pt < np.inf:
        sigma2 += (ms / pt) * (ms / pt)
    chi2 = (chi2_xy + chi2_z) / sigma2
    return chi2, 2.0 * count - 5.0, pt, rho, xc, yc, z0, slope


@numba.njit(cache=True, nogil=True)
def _fit_all(
    x: np.ndarray, y: np.ndarray, z: np.ndarray, offsets: np.ndarray, hits: np.ndarray, field: float, sigma_hit: float, ms: float
) -> tuple:
    num = offsets.shape[0] - 1
    chi2_ndf = np.full(num, np.nan)
    pt = np.full(num, np.nan)
    for t in range(num):
        count = offsets[t + 1] - offsets[t]
        if count < 3:
            continue
        chi2, ndf, p, _, _, _, _, _ = helix_fit(x, y, z, hits[offsets[t] :], count, field, sigma_hit, ms)
        chi2_ndf[t] = chi2 / ndf
        pt[t] = p
    return chi2_ndf, pt


def fit_candidates(
    pos: np.ndarray, offsets: np.ndarray, hits: np.ndarray, field: float, sigma_hit: float, ms: float
) -> tuple[np.ndarray, np.ndarray]:
    """Helix chi2/ndf and pT of every candidate of a CSR hit list.

    Args:
        pos: (N, 3) float hit positions (mm).
        offsets: (T+1,) int64 CSR offsets into ``hits``.
        hits: (H,) int64 node ids, candidate by candidate, each ordered along its track.
        field: solenoid field (T).
        sigma_hit: hit resolution (mm).
        ms: multiple-scattering term (mm GeV): sigma = hypot(sigma_hit, ms / pT).

    Returns:
        ``(chi2_ndf, pt)``, each (T,) float64; nan for candidates below 3 hits.
    """
    pos = np.asarray(pos, dtype=np.float64)
    return _fit_all(
        np.ascontiguousarray(pos[:, 0]), np.ascontiguousarray(pos[:, 1]), np.ascontiguousarray(pos[:, 2]),
        np.ascontiguousarray(offsets, dtype=np.int64), np.ascontiguousarray(hits, dtype=np.int64),
        float(field), float(sigma_hit), float(ms),
    )  # fmt: skip
