"""Helix fits of hit sets in a solenoid field along z (numba).

Knows nothing of events or graphs: positions in, fit figures out. A charged particle in a uniform field along z
moves on a helix: a circle in x–y and a straight line in (s, z), s the arc length along the circle.
:func:`helix_fit` fits both to the hits of one candidate, in the order given (innermost first):

* circle: Karimäki's closed-form fit (NIM A305 (1991) 187) in coordinates centred on the hits' mean, parametrised by
  the signed curvature, so a straight line (curvature 0) is an ordinary case, never a division by 0; residual of a
  hit = its signed distance to the circle (exact, not the fit's linearised one);
* line in (s, z): s is the turning angle around the fitted centre from the first hit, unwrapped hit to hit in the
  given order (signed, so a hit given a little out of order steps back instead of breaking the line), times the
  radius, oriented so that the last hit lies ahead (the transverse distance from the first hit along the line when
  the circle is a line); z = z0 + t s by least squares, residual measured perpendicular to the line,
  ``(z - z0 - t s) / sqrt(1 + t^2)``, so a forward track is not penalised for its steep slope.

Errors: every hit has its own resolution — ``var_t`` across the track in x–y (r·phi), ``var_z`` along z and
``var_r`` along r (mm², from the module's pitch: a barrel strip is precise in r·phi and coarse in z, an endcap strip
coarse in r) — and a multiple-scattering term ``var_m (ms s / pT)^2`` with pT the fitted one in GeV, s the fitted
hits' mean spacing in units of 50 mm (scattering displaces hits in proportion to the distance between them) and
``var_m`` the hit's share of material (1 in the pixel detector; the strip detector's modules and supports scatter
more). The circle fit is unweighted (the transverse resolutions of pixels and strips are alike, and scattering, the
same for every hit, dominates them below a few GeV). A hit's variance across the circle is its r·phi and r variances
projected on the circle's normal there (an endcap strip's coarse r matters where a curling track crosses the disc at
an angle), plus scattering; along the circle likewise projected on the tangent (var_s). The (s, z) line is fitted
with weights 1 / var, the variance of a hit's perpendicular residual being
``(var_z + t^2 var_s) / (1 + t^2) + (ms / pT)^2``, t the slope (so a long barrel strip's z barely pulls the line). chi2 = sum over both views of squared
residual / variance; ndf = (n - 3) + (n - 2). pT = 0.3 B R (GeV, T, m).

Window fits judge a track piece by piece, on a :data:`HitColumns` table: :func:`window_chi2_ndf` (the worst fit of
``window`` consecutive hits) and :func:`insertion_delta` (what one hit put into an ordered track adds to the fit of
the window around it). The track builder (:mod:`~domainpar.kernels.track_ckf`) and the refinement
(:mod:`~domainpar.kernels.track_refine`) judge every hit with them.
"""

from __future__ import annotations

import math
from collections import namedtuple

import numba
import numpy as np

#: pT in GeV of a circle of radius 1 mm in a 1 T field (0.299792458 GeV / (T m) × 1e-3 m/mm).
PT_PER_TESLA_MM = 0.299792458e-3
#: Hit spacing (mm) at which the multiple-scattering term is ``ms / pT``; it grows in proportion to wider spacings.
SPACING_MM = 50.0
#: Every hit's position (mm) and resolutions (:func:`helix_fit`'s per-hit arrays), each (N,) float64, as one
#: argument of the window fits (a namedtuple numba passes by value).
HitColumns = namedtuple("HitColumns", "x y z var_t var_z var_r var_m")


@numba.njit(cache=True, nogil=True)
def karimaki(x: np.ndarray, y: np.ndarray, hits: np.ndarray, count: int) -> tuple:
    """Karimäki's circle fit of ``hits[:count]`` in the frame centred on their mean (order-independent).

    Returns:
        ``(xm, ym, rho, dca, sin_phi, cos_phi)``: the frame's origin (the hits' mean), the signed curvature
        (1/mm, 0 for a line), and the signed distance of closest approach to that origin and the direction
        there of the circle ``0.5 rho (u^2 + v^2) - (1 + rho dca)(u sin_phi - v cos_phi) + 0.5 rho dca^2 + dca = 0``.
    """
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
    return xm, ym, rho, dca, sphi, cphi


@numba.njit(cache=True, nogil=True)
def circle_residual(xm: float, ym: float, rho: float, dca: float, sphi: float, cphi: float, px: float, py: float) -> float:
    """Signed distance of the point (px, py) from the circle :func:`karimaki` returned (exact; a line when rho is 0)."""
    u = px - xm
    v = py - ym
    f = 0.5 * rho * (u * u + v * v) - (1.0 + rho * dca) * (u * sphi - v * cphi) + 0.5 * rho * dca * dca + dca
    # From the circle's implicit form (f / (1 + ...) -> f for a line).
    g = 1.0 + 2.0 * rho * f
    if g < 0.0:
        g = 0.0
    return 2.0 * f / (1.0 + math.sqrt(g))


@numba.njit(cache=True, nogil=True)
def circle_distance(xm: float, ym: float, rho: float, dca: float, sphi: float, cphi: float, px: float, py: float) -> float:
    """Distance of the point (px, py) from the circle :func:`karimaki` returned (exact; a line when rho is 0)."""
    return abs(circle_residual(xm, ym, rho, dca, sphi, cphi, px, py))


@numba.njit(cache=True, nogil=True)
def helix_fit(
    x: np.ndarray, y: np.ndarray, z: np.ndarray, var_t: np.ndarray, var_z: np.ndarray, var_r: np.ndarray, var_m: np.ndarray,
    hits: np.ndarray, count: int, field: float, ms: float,
) -> tuple:  # fmt: skip
    """Fit a helix to ``hits[:count]`` (node ids into the per-hit arrays), in that order.

    Returns:
        ``(chi2, ndf, pt, curvature, xc, yc, z0, slope)``: chi2 over both views (with the errors of the module
        docstring), ndf = 2 count - 5, pT in GeV (inf for a straight line), the signed curvature 1/R (1/mm), the
        circle centre (mm; nan for a line), and the (s, z) line's intercept at the first hit and slope dz/ds. chi2 and
        pT are nan below 3 hits.
    """
    nan = np.nan
    if count < 3:
        return nan, 0.0, nan, nan, nan, nan, nan, nan
    xm, ym, rho, dca, sphi, cphi = karimaki(x, y, hits, count)
    scratch = np.empty((5, count))  # one allocation: residuals, arc lengths, variances across and along, weights
    eps_xy = scratch[0]
    for k in range(count):
        eps_xy[k] = circle_residual(xm, ym, rho, dca, sphi, cphi, x[hits[k]], y[hits[k]])
    if abs(rho) > 1e-12:
        radius = 1.0 / abs(rho)
        xc = xm + (dca + 1.0 / rho) * sphi
        yc = ym - (dca + 1.0 / rho) * cphi
        pt = PT_PER_TESLA_MM * field * radius
        # Scattering displaces hits in proportion to the distance between them: the term is per 50 mm of spacing.
        first = hits[0]
        last = hits[count - 1]
        span = math.sqrt((x[last] - x[first]) ** 2 + (y[last] - y[first]) ** 2 + (z[last] - z[first]) ** 2)
        spacing = max(span / (count - 1), SPACING_MM) / SPACING_MM
        scatter = (ms * spacing / pt) * (ms * spacing / pt)
    else:
        radius = np.inf
        xc = nan
        yc = nan
        pt = np.inf
        scatter = 0.0
    # Arc length of every hit from the first, unwrapped in the given order; the hit's errors across the circle
    # (var_n) and along it (var_s) from its r·phi and r resolutions, projected on the circle's normal and tangent.
    s_prev = 0.0
    angle_prev = 0.0
    x0 = x[hits[0]]
    y0 = y[hits[0]]
    s_values = scratch[1]
    var_n = scratch[2]
    var_s = scratch[3]
    for k in range(count):
        h = hits[k]
        if radius < np.inf:
            angle = math.atan2(y[h] - yc, x[h] - xc)
            nx = math.cos(angle)
            ny = math.sin(angle)
            if k == 0:
                s = 0.0
            else:
                turn = angle - angle_prev
                while turn > math.pi:
                    turn -= 2.0 * math.pi
                while turn < -math.pi:
                    turn += 2.0 * math.pi
                s = s_prev + turn * radius  # signed: a hit given slightly out of order steps back
            angle_prev = angle
        else:
            s = (x[h] - x0) * cphi + (y[h] - y0) * sphi  # along the line
            nx = sphi
            ny = -cphi
        s_prev = s
        s_values[k] = s
        rh = math.hypot(x[h], y[h])
        rx = x[h] / rh if rh > 0.0 else 1.0
        ry = y[h] / rh if rh > 0.0 else 0.0
        radial_n = rx * nx + ry * ny  # r-hat . normal; phi-hat . normal = radial_t (the tangent is the normal turned)
        radial_t = rx * ny - ry * nx
        var_n[k] = var_t[h] * radial_t * radial_t + var_r[h] * radial_n * radial_n + scatter * var_m[h]
        var_s[k] = var_t[h] * radial_n * radial_n + var_r[h] * radial_t * radial_t
    # The sense of rotation is the particle's: s grows from the first hit towards the last.
    if s_values[count - 1] < 0.0:
        for k in range(count):
            s_values[k] = -s_values[k]
    # (s, z) line: an unweighted pass gives the slope the weights need, a weighted pass the line.
    slope = 0.0
    z0 = 0.0
    weight = scratch[4]
    for weighted in range(2):
        for k in range(count):
            h = hits[k]
            weight[k] = 1.0 / ((var_z[h] + slope * slope * var_s[k]) / (1.0 + slope * slope) + scatter * var_m[h]) if weighted else 1.0
        sw = 0.0
        s_sum = 0.0
        z_sum = 0.0
        for k in range(count):
            sw += weight[k]
            s_sum += weight[k] * s_values[k]
            z_sum += weight[k] * z[hits[k]]
        s_mean = s_sum / sw
        z_mean = z_sum / sw
        ss = 0.0
        sz = 0.0
        for k in range(count):
            ds = s_values[k] - s_mean
            ss += weight[k] * ds * ds
            sz += weight[k] * ds * (z[hits[k]] - z_mean)
        slope = sz / ss if ss > 0.0 else 0.0
        z0 = z_mean - slope * s_mean
    chi2 = 0.0
    norm = 1.0 + slope * slope
    for k in range(count):
        h = hits[k]
        e = z[h] - z0 - slope * s_values[k]
        chi2 += e * e / norm / ((var_z[h] + slope * slope * var_s[k]) / norm + scatter * var_m[h])
        chi2 += eps_xy[k] * eps_xy[k] / var_n[k]
    return chi2, 2.0 * count - 5.0, pt, rho, xc, yc, z0, slope


@numba.njit(cache=True, nogil=True)
def _fit_all(x, y, z, var_t, var_z, var_r, var_m, offsets, hits, field, ms) -> tuple:
    num = offsets.shape[0] - 1
    chi2_ndf = np.full(num, np.nan)
    pt = np.full(num, np.nan)
    for t in range(num):
        count = offsets[t + 1] - offsets[t]
        if count < 3:
            continue
        chi2, ndf, p, _, _, _, _, _ = helix_fit(x, y, z, var_t, var_z, var_r, var_m, hits[offsets[t] :], count, field, ms)
        chi2_ndf[t] = chi2 / ndf
        pt[t] = p
    return chi2_ndf, pt


def fit_candidates(
    pos: np.ndarray, variances: np.ndarray, offsets: np.ndarray, hits: np.ndarray, field: float, ms: float
) -> tuple[np.ndarray, np.ndarray]:
    """Helix chi2/ndf and pT of every candidate of a CSR hit list.

    Args:
        pos: (N, 3) float hit positions (mm).
        variances: (N, 4) float every hit's resolution squared across the track in x-y, along z and along r (mm^2),
            and its scattering weight.
        offsets: (T+1,) int64 CSR offsets into ``hits``.
        hits: (H,) int64 node ids, candidate by candidate, each ordered along its track.
        field: solenoid field (T).
        ms: multiple-scattering term (mm GeV): every hit's variance grows by var_m (ms s / pT)^2 (module docstring).

    Returns:
        ``(chi2_ndf, pt)``, each (T,) float64; nan for candidates below 3 hits.
    """
    columns = hit_columns(np.asarray(pos), np.asarray(variances))
    return _fit_all(*columns, np.ascontiguousarray(offsets, dtype=np.int64), np.ascontiguousarray(hits, dtype=np.int64), float(field), float(ms))


def hit_columns(pos: np.ndarray, variances: np.ndarray) -> HitColumns:
    """The :data:`HitColumns` of (N, 3) hit positions (mm) and (N, 4) resolutions squared and scattering weights
    (:func:`~domainpar.tracks.inputs.hit_variances`): each column contiguous float64."""
    return HitColumns(*(np.ascontiguousarray(a[:, i], dtype=np.float64) for a in (pos, variances) for i in range(a.shape[1])))


@numba.njit(cache=True, nogil=True)
def fit_chi2(columns: HitColumns, hits: np.ndarray, count: int, field: float, ms: float) -> float:
    """chi2 of the helix fit to ``hits[:count]``; 0 below 3 hits (nothing to judge yet)."""
    if count < 3:
        return 0.0
    x, y, z, var_t, var_z, var_r, var_m = columns
    chi2, _, _, _, _, _, _, _ = helix_fit(x, y, z, var_t, var_z, var_r, var_m, hits, count, field, ms)
    return chi2


@numba.njit(cache=True, nogil=True)
def worst_window(columns: HitColumns, hits: np.ndarray, count: int, window: int, field: float, ms: float) -> tuple:
    """The worst of the helix fits to ``window`` consecutive hits of ``hits[:count]`` (one fit of all when shorter).

    Returns:
        ``(chi2_ndf, first)``: its chi2/ndf (-1 when no fit has one) and the index of its first hit.
    """
    x, y, z, var_t, var_z, var_r, var_m = columns
    size = min(window, count)
    worst = -1.0
    first = 0
    for lo in range(count - size + 1):
        chi2, ndf, _, _, _, _, _, _ = helix_fit(x, y, z, var_t, var_z, var_r, var_m, hits[lo:], size, field, ms)
        if chi2 / ndf > worst:
            worst = chi2 / ndf
            first = lo
    return worst, first


@numba.njit(cache=True, nogil=True)
def window_chi2_ndf(
    x: np.ndarray, y: np.ndarray, z: np.ndarray, var_t: np.ndarray, var_z: np.ndarray, var_r: np.ndarray, var_m: np.ndarray,
    hits: np.ndarray, count: int, window: int, field: float, ms: float,
) -> float:  # fmt: skip
    """The worst chi2/ndf of helix fits to ``window`` consecutive hits of ``hits[:count]`` (the whole set when shorter).

    Local fits follow a track through scattering and energy loss that one helix over a metre of detector does
    not; the worst window shows a wrong hit anywhere on the track. nan below 3 hits.
    """
    if count < 3:
        return np.nan
    if count <= window:
        chi2, ndf, _, _, _, _, _, _ = helix_fit(x, y, z, var_t, var_z, var_r, var_m, hits, count, field, ms)
        return chi2 / ndf
    worst, _ = worst_window(HitColumns(x, y, z, var_t, var_z, var_r, var_m), hits, count, window, field, ms)
    return max(worst, 0.0)


@numba.njit(cache=True, nogil=True)
def insert_at(buf: np.ndarray, end: int, i: int, c: int) -> int:
    """Put hit c at index i of the ordered hits ``buf[:end]`` (0 <= i <= end); the new end."""
    for k in range(end, i, -1):
        buf[k] = buf[k - 1]
    buf[i] = c
    return end + 1


@numba.njit(cache=True, nogil=True)
def remove_at(buf: np.ndarray, end: int, i: int) -> int:
    """Take the hit at index i out of the ordered hits ``buf[:end]``; the new end."""
    for k in range(i, end - 1):
        buf[k] = buf[k + 1]
    return end - 1


@numba.njit(cache=True, nogil=True)
def insertion_delta(
    columns: HitColumns, buf: np.ndarray, end: int, i: int, c: int, window: int, field: float, ms: float,
    max_chi2_ndf: float, old: float = np.nan,
) -> float:  # fmt: skip
    """chi2 increment of putting hit c at index i of the ordered track ``buf[:end]`` (0 <= i <= end), judged on the
    ``window`` consecutive hits around it (the last ones at an end); inf when the fit of those hits with c has a
    chi2/ndf above ``max_chi2_ndf`` (the cut every kept track passes). buf is left as it was (it must hold one
    hit more). ``old``: the chi2 of those hits without c when known (the same for every candidate at one end)."""
    lo = max(0, i - (window - 1) // 2)
    hi = min(end + 1, lo + window)
    lo = max(0, hi - window)
    if np.isnan(old):
        old = fit_chi2(columns, buf[lo:], hi - 1 - lo, field, ms)
    insert_at(buf, end, i, c)
    new = fit_chi2(columns, buf[lo:], hi - lo, field, ms)
    remove_at(buf, end + 1, i)
    if hi - lo >= 3 and new > max_chi2_ndf * (2 * (hi - lo) - 5):
        return np.inf
    return new - old


@numba.njit(cache=True, nogil=True)
def perigee(
    x: np.ndarray, y: np.ndarray, z: np.ndarray, var_t: np.ndarray, var_z: np.ndarray, var_r: np.ndarray, var_m: np.ndarray,
    hits: np.ndarray, count: int, field: float, ms: float,
) -> tuple:  # fmt: skip
    """The helix fitted to ``hits[:count]`` (in order along the track) at its point of closest approach to the beam
    line (the z axis): what every piece of one particle's track shares, however far apart the pieces are.

    Returns:
        ``(kappa, phi0, d0, cot, z0)``: the curvature (1/mm) signed by the sense of rotation along the travel
        from the first hit to the last (positive: counter-clockwise), the direction of travel there (rad), the
        signed distance of the beam line from the circle (mm; positive outside it), dz/ds, and z there (mm).
        nan below 3 hits.
    """
    nan = np.nan
    if count < 3:
        return nan, nan, nan, nan, nan
    _, _, _, rho, xc, yc, _, slope = helix_fit(x, y, z, var_t, var_z, var_r, var_m, hits, count, field, ms)
    first = hits[0]
    last = hits[count - 1]
    if np.isfinite(xc):
        radius = 1.0 / abs(rho)
        # Sense of rotation from the first hit to the last around the centre.
        cross = (x[first] - xc) * (y[last] - yc) - (y[first] - yc) * (x[last] - xc)
        sense = 1.0 if cross >= 0.0 else -1.0
        centre = math.sqrt(xc * xc + yc * yc)
        if centre > 0.0:
            px = xc * (1.0 - radius / centre)
            py = yc * (1.0 - radius / centre)
        else:
            px = xc + radius
            py = yc
        # Travel direction at the closest approach: the radius vector turned by 90 degrees in the sense of rotation.
        tx = -sense * (py - yc) / radius
        ty = sense * (px - xc) / radius
        a0 = math.atan2(py - yc, px - xc)
        a1 = math.atan2(y[first] - yc, x[first] - xc)
        turn = (a1 - a0) * sense
        while turn < 0.0:
            turn += 2.0 * math.pi
        while turn >= 2.0 * math.pi:
            turn -= 2.0 * math.pi
        if turn > 1.5 * math.pi:
            turn -= 2.0 * math.pi  # the first hit lies just before the closest approach (a secondary)
        s_first = turn * radius
        return sense / radius, math.atan2(ty, tx), centre - radius, slope, z[first] - slope * s_first
    dx = x[last] - x[first]
    dy = y[last] - y[first]
    norm = math.sqrt(dx * dx + dy * dy)
    if norm == 0.0:
        return 0.0, 0.0, 0.0, slope, z[first]
    tx = dx / norm
    ty = dy / norm
    s_first = x[first] * tx + y[first] * ty  # from the closest approach to the first hit, along the line
    return 0.0, math.atan2(ty, tx), x[first] * ty - y[first] * tx, slope, z[first] - slope * s_first
