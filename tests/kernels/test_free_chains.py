"""The free-hit pass's kernels (:mod:`domainpar.kernels.free_chains`) on hits placed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from domainpar.kernels.free_chains import cluster_agrees, doublets

#: A pixel sensor's thickness and pitch along v (mm), as in the TrackML pixel detector.
THICKNESS, PITCH = 0.15, 0.05625


def _agrees(length: float, x: float, y: float, ux: float, uy: float, slope: float, barrel: bool) -> bool:
    one = lambda value, dtype=np.float64: np.array([value], dtype=dtype)  # noqa: E731
    return cluster_agrees(0, ux, uy, slope, one(x), one(y), one(length), one(barrel, bool), one(THICKNESS), one(PITCH), 1.5, 0.25)


def test_a_barrel_cluster_is_as_long_as_the_track_is_steep_and_tilted():
    # Radial crossing, dz/ds = 2: 0.15 * 2 / 0.05625 = 5.3 channels along z.
    assert _agrees(5.0, 50.0, 0.0, 1.0, 0.0, 2.0, True)
    assert not _agrees(1.0, 50.0, 0.0, 1.0, 0.0, 2.0, True)
    # Crossing at 60 degrees to the radius in x-y doubles the path along z: 10.7 channels.
    tilted = (math.cos(math.pi / 3), math.sin(math.pi / 3))
    assert _agrees(10.0, 50.0, 0.0, *tilted, 2.0, True)
    assert not _agrees(5.0, 50.0, 0.0, *tilted, 2.0, True)


def test_an_endcap_cluster_is_short_for_a_steep_track_and_unknown_lengths_agree():
    # Disc sensors face z: a track at dz/ds = 0.3 crosses 0.15 / 0.3 = 0.5 mm of r, 8.9 channels.
    assert _agrees(9.0, 50.0, 0.0, 1.0, 0.0, 0.3, False)
    assert not _agrees(1.0, 50.0, 0.0, 1.0, 0.0, 0.3, False)
    assert _agrees(1.0, 50.0, 0.0, 1.0, 0.0, 5.0, False)
    assert _agrees(0.0, 50.0, 0.0, 1.0, 0.0, 2.0, True) and _agrees(float("nan"), 50.0, 0.0, 1.0, 0.0, 2.0, True)


def _layout(x, y, z, layer, num_layers):
    phi = np.arctan2(y, x)
    order = np.lexsort((phi, layer)).astype(np.int64)
    start = np.zeros(num_layers + 1, dtype=np.int64)
    np.cumsum(np.bincount(layer, minlength=num_layers), out=start[1:])
    return order, start, np.ascontiguousarray(phi[order])


def _pairs(x, y, z, layer, dphi, z0_max, length=None):
    x, y, z = (np.asarray(v, dtype=np.float64) for v in (x, y, z))
    layer = np.asarray(layer, dtype=np.int64)
    n = x.size
    order, start, phi = _layout(x, y, z, layer, 2)
    length = np.zeros(n) if length is None else np.asarray(length, dtype=np.float64)
    src, dst = doublets(order, start, phi, np.array([[0, 1]], dtype=np.int64), x, y, z, np.hypot(x, y), dphi, z0_max, length,
                        np.ones(n, bool), np.full(n, THICKNESS), np.full(n, PITCH), 1.5, 0.25)  # fmt: skip
    return sorted(zip(src.tolist(), dst.tolist()))


def test_doublets_wrap_around_phi_and_keep_the_windows():
    # Hits 0, 1 on layer 0 (r = 30 mm) at phi = pi - 0.01 and 0; hits 2-4 on layer 1 (r = 70 mm) at phi = -pi + 0.01
    # (0.02 rad from hit 0 across the wrap), 0.04 and 0.3.
    r = np.array([30.0, 30.0, 70.0, 70.0, 70.0])
    phi = np.array([math.pi - 0.01, 0.0, -math.pi + 0.01, 0.04, 0.3])
    z = np.array([0.0, 0.0, 0.0, 0.0, 0.0])
    found = _pairs(r * np.cos(phi), r * np.sin(phi), z, [0, 0, 1, 1, 1], dphi=0.05, z0_max=100.0)
    assert found == [(0, 2), (1, 3)]
    assert _pairs(r * np.cos(phi), r * np.sin(phi), z, [0, 0, 1, 1, 1], dphi=0.35, z0_max=100.0) == [(0, 2), (1, 3), (1, 4)]


@pytest.mark.parametrize("z_outer, expected", [(20.0, True), (200.0, False)])
def test_doublets_keep_lines_that_meet_the_beam_line_within_z0_max(z_outer, expected):
    # From (30, 0, 0) to (70, 0, z_outer): the line meets r = 0 at z = -30 z_outer / 40 (-15 mm or -150 mm).
    found = _pairs([30.0, 70.0], [0.0, 0.0], [0.0, z_outer], [0, 1], dphi=0.1, z0_max=100.0)
    assert (found == [(0, 1)]) is expected


@pytest.mark.parametrize("outer_length, expected", [(3.0, True), (12.0, False)])
def test_doublets_need_clusters_as_long_as_their_slope_says(outer_length, expected):
    # Slope 40 / 40 = 1: 0.15 / 0.05625 = 2.7 channels on both (barrel) sensors.
    found = _pairs([30.0, 70.0], [0.0, 0.0], [0.0, 40.0], [0, 1], dphi=0.1, z0_max=1000.0, length=[3.0, outer_length])
    assert (found == [(0, 1)]) is expected
