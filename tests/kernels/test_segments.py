"""The segment kernels against numpy's expressions of the same cuts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from domainpar.kernels.segments import bridge_candidates


def _numpy_bridge_candidates(src, dst, jumping, r, phi, z, slope, z0, margin) -> np.ndarray:
    """The skip cuts over whole columns: what the graph build computed before the kernel."""
    a, c = src, dst
    dr = r[c] - r[a]
    dz = z[c] - z[a]
    dphi = np.abs(np.mod(phi[c] - phi[a] + np.pi, 2 * np.pi) - np.pi)
    passed = dphi <= slope * dr + margin
    passed &= np.abs(z[a] * dr - r[a] * dz) <= z0 * dr
    return passed & ~jumping


@pytest.mark.parametrize("seed", [0, 1])
def test_bridge_candidates_decide_as_numpy_does(seed):
    rng = np.random.default_rng(seed)
    num_nodes, num_edges = 500, 20_000
    r = rng.uniform(30, 1000, num_nodes)
    # Angles on both sides of +-pi, and pairs exactly pi apart (a remainder of exactly 0 or 2 pi).
    phi = rng.uniform(-math.pi, math.pi, num_nodes)
    phi[:20] = math.pi
    phi[20:40] = -math.pi
    phi[40:60] = 0.0
    z = rng.uniform(-1000, 1000, num_nodes)
    src = rng.integers(0, num_nodes, num_edges)
    dst = rng.integers(0, num_nodes, num_edges)
    jumping = rng.random(num_edges) < 0.3
    slope, z0, margin = 0.003, 200.0, 0.01
    # Edges whose hits share phi: a remainder of exactly pi, dphi exactly 0.
    same_phi = np.arange(100, 200)
    phi[dst[same_phi]] = phi[src[same_phi]]
    out = np.empty(num_edges, dtype=bool)
    bridge_candidates(src, dst, jumping, r, phi, z, slope, z0, margin, 0, num_edges, out)
    expected = _numpy_bridge_candidates(src, dst, jumping, r, phi, z, slope, z0, margin)
    np.testing.assert_array_equal(out, expected)
    assert 0 < expected.sum() < (~jumping).sum()  # not vacuous: both decisions among the adjacent-layer edges


def test_bridge_candidates_write_only_their_range():
    src, dst = np.array([0, 0, 0]), np.array([1, 1, 1])
    r, phi, z = np.array([30.0, 60.0]), np.array([0.1, 0.1]), np.array([0.0, 10.0])
    out = np.array([False, False, False])
    bridge_candidates(src, dst, np.zeros(3, dtype=bool), r, phi, z, 0.001, 200.0, 0.01, 1, 2, out)
    np.testing.assert_array_equal(out, [False, True, False])
