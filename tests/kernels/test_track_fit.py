"""The helix fit of track candidates and the window fits the builders judge hits with (:mod:`domainpar.kernels.track_fit`)."""

from __future__ import annotations

import numpy as np
import pytest

from domainpar.kernels.track_fit import (
    PT_PER_TESLA_MM,
    HitColumns,
    fit_candidates,
    helix_fit,
    hit_columns,
    insert_at,
    insertion_delta,
    remove_at,
    window_chi2_ndf,
)


#: Barrel radii of the hand-made detector (mm).
RADII = (32.0, 72.0, 116.0, 172.0, 260.0, 360.0, 500.0, 660.0)


def helix_points(pt: float, phi0: float, charge: int, cot: float, radii=RADII[:6], z0: float = 5.0, field: float = 2.0) -> np.ndarray:
    """Where a particle from (0, 0, z0) crosses the cylinders ``radii`` (mm): (K, 3), innermost first."""
    radius = pt / (PT_PER_TESLA_MM * field)
    xc, yc = -charge * radius * np.sin(phi0), charge * radius * np.cos(phi0)
    start = np.arctan2(-yc, -xc)
    points = []
    for r in radii:
        if r >= 2 * radius:
            break
        turned = 2 * np.arcsin(r / (2 * radius))
        angle = start - charge * turned
        points.append((xc + radius * np.cos(angle), yc + radius * np.sin(angle), z0 + radius * turned * cot))
    return np.array(points)


def _fit(points: np.ndarray, sigma: float, order=None):
    """helix_fit of the points in order, the same resolution in every direction, no scattering term."""
    order = np.arange(len(points)) if order is None else np.asarray(order)
    var = np.full(len(points), sigma**2)
    return helix_fit(points[:, 0], points[:, 1], points[:, 2], var, var, var, np.ones(len(points)), order, len(order), 2.0, 0.0)


@pytest.mark.parametrize("pt", [0.2, 1.0, 10.0, 1e4])
@pytest.mark.parametrize("charge", [1, -1])
def test_helix_fit_recovers_pt_and_slope_exactly(pt, charge):
    points = helix_points(pt, 0.7, charge, 2.13)
    chi2, ndf, fit_pt, curvature, _, _, _, slope = _fit(points, 0.05)
    assert ndf == 2 * len(points) - 5
    assert chi2 < 1e-9
    assert fit_pt == pytest.approx(pt, rel=1e-5)
    assert np.sign(curvature) == -charge  # the sign of the curvature is the charge's (opposite, in this frame)
    assert slope == pytest.approx(2.13, rel=1e-6)


def test_helix_fit_chi2_per_ndf_is_one_for_the_stated_resolution():
    rng = np.random.default_rng(0)
    values = []
    for _ in range(2000):
        points = helix_points(rng.uniform(0.5, 5), rng.uniform(-3, 3), rng.choice([-1, 1]), np.sinh(rng.uniform(-2, 2)))
        points = points + rng.normal(0, 0.05, points.shape)
        chi2, ndf, *_ = _fit(points, 0.05)
        values.append(chi2 / ndf)
    # Isotropic 0.05 mm errors: chi2/ndf averages 1 (both views measure distances perpendicular to the helix).
    assert np.mean(values) == pytest.approx(1.0, abs=0.1)
    # A wrong hit is seen: one hit moved by 2 mm.
    points = helix_points(1.0, 0.3, 1, 0.5)
    points[3, :2] += 2.0
    chi2, ndf, *_ = _fit(points, 0.05)
    assert chi2 / ndf > 100


def test_fit_candidates_nan_below_three_hits():
    points = helix_points(1.0, 0.3, 1, 0.5)
    chi2, pt = fit_candidates(points, np.concatenate([np.full((6, 3), 0.05**2), np.ones((6, 1))], axis=1), np.array([0, 2, 6]), np.arange(6), 2.0, 0.0)
    assert np.isnan(chi2[0]) and np.isnan(pt[0])
    assert chi2[1] < 1e-9 and pt[1] == pytest.approx(1.0, rel=1e-5)


def _noisy_track(seed: int, sigma: float = 0.05) -> tuple[HitColumns, np.ndarray]:
    """Eight hits of a helix through the barrel, moved by ``sigma`` mm, one of them by 1 mm; (columns, hits in order)."""
    rng = np.random.default_rng(seed)
    points = helix_points(rng.uniform(1, 5), rng.uniform(-3, 3), rng.choice([-1, 1]), rng.uniform(-1, 1), radii=RADII)
    points = points + rng.normal(0, sigma, points.shape)
    points[rng.integers(len(points)), :2] += 1.0
    var = np.full(len(points), sigma**2)
    return HitColumns(*points.T.copy(), var, var, var, np.ones(len(points))), np.arange(len(points))


def _chi2(columns: HitColumns, hits: np.ndarray) -> tuple[float, float]:
    chi2, ndf, *_ = helix_fit(*columns, np.asarray(hits, np.int64), len(hits), 2.0, 0.02)
    return chi2, ndf


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("window", [3, 5, 8, 12])
def test_window_chi2_ndf_is_the_worst_window(seed, window):
    columns, hits = _noisy_track(seed)
    fits = [_chi2(columns, hits[k : k + window]) for k in range(max(len(hits) - window, 0) + 1)]
    brute = max(chi2 / ndf for chi2, ndf in fits)
    assert window_chi2_ndf(*columns, hits, len(hits), window, 2.0, 0.02) == pytest.approx(brute, rel=1e-12)
    assert np.isnan(window_chi2_ndf(*columns, hits, 2, window, 2.0, 0.02))


def test_insert_and_remove_keep_the_order():
    buf = np.array([4, 5, 6, -1, -1])
    assert insert_at(buf, 3, 1, 9) == 4 and buf[:4].tolist() == [4, 9, 5, 6]
    assert remove_at(buf, 4, 0) == 3 and buf[:3].tolist() == [9, 5, 6]


@pytest.mark.parametrize("at", range(8))
def test_insertion_delta_is_the_window_fit_with_the_hit_less_the_one_without(at):
    columns, hits = _noisy_track(7)
    window = 5
    track = np.delete(hits, at)
    buf = np.concatenate([track, [-1]])
    delta = insertion_delta(columns, buf, 7, at, at, window, 2.0, 0.02, 1e9)
    assert buf[:7].tolist() == track.tolist()  # left as it was
    # The window of `window` consecutive hits around the new one (the last ones at an end).
    lo = min(max(at - (window - 1) // 2, 0), 8 - window)
    with_hit, _ = _chi2(columns, hits[lo : lo + window])
    without, _ = _chi2(columns, np.delete(hits[lo : lo + window], at - lo))
    assert delta == pytest.approx(with_hit - without, rel=1e-12, abs=1e-12)
    # Beyond the cut of a kept track's chi2/ndf: never.
    chi2, ndf = _chi2(columns, hits[lo : lo + window])
    assert insertion_delta(columns, buf, 7, at, at, window, 2.0, 0.02, 0.99 * chi2 / ndf) == np.inf


def test_hit_columns_are_the_kernels_contiguous_columns():
    pos = np.arange(12.0).reshape(4, 3)
    variances = np.arange(16.0).reshape(4, 4).astype(np.float32)
    columns = hit_columns(pos, variances)
    assert len(columns) == 7 and all(c.flags.c_contiguous and c.dtype == np.float64 for c in columns)
    assert np.array_equal(np.stack(columns[:3], 1), pos) and np.array_equal(np.stack(columns[3:], 1), variances)
