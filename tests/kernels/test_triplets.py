"""The best-continuation kernel against a loop over every triplet written from the definition."""

from __future__ import annotations

import math

import numpy as np
import pytest

from domainpar.kernels.triplets import COLUMNS, NO_TRIPLET, best_triplets


def _wrap(angle: float) -> float:
    return (angle + math.pi) % (2 * math.pi) - math.pi


def _reference(src, dst, alpha, beta, ell, kappa, scale, loose) -> np.ndarray:
    """Every pair of edges sharing a middle node, in edge order, the first smallest m kept on each side."""
    result = np.zeros((src.size, 8))
    result[:, 2] = result[:, 6] = NO_TRIPLET
    for e in range(src.size):
        for f in range(src.size):
            if src[f] != dst[e]:
                continue
            dalpha = _wrap(alpha[f] - alpha[e])
            rho = _wrap(beta[f] - beta[e]) - kappa[e] * (ell[e] + ell[f]) / 2
            m = (dalpha**2 + rho**2) / scale**2
            if m < loose:
                result[e, 3] += 1
                result[f, 7] += 1
            if m < result[e, 2]:
                result[e, :3] = dalpha, rho, m
            if m < result[f, 6]:
                result[f, 4:7] = dalpha, rho, m
    return result


@pytest.mark.parametrize("num_nodes", [40, 4])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kernel_matches_the_definition(seed, num_nodes):
    # 40 nodes: ~7 edges a node, the kernel's scalar loops; 4 nodes: ~75, its vectorised ones.
    rng = np.random.default_rng(seed)
    num_edges = 300
    src = rng.integers(0, num_nodes, num_edges)
    dst = rng.integers(0, num_nodes, num_edges)
    # Angles over the whole circle, so the wrap around ±pi is exercised; a tie of m on purpose.
    alpha = rng.uniform(0, math.pi, num_edges)
    beta = rng.uniform(-math.pi, math.pi, num_edges)
    ell = rng.uniform(10, 200, num_edges)
    kappa = rng.normal(0, 1e-3, num_edges)
    alpha[1], beta[1], ell[1], kappa[1] = alpha[0], beta[0], ell[0], kappa[0]
    got = best_triplets(src, dst, alpha, beta, ell, kappa, num_nodes, scale=0.3, loose=9.0)
    expected = _reference(src, dst, alpha, beta, ell, kappa, 0.3, 9.0)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert got.shape == (num_edges, len(COLUMNS))
    # Not vacuous: some edges have triplets on each side, some are counted, some have none.
    assert (got[:, 2] < NO_TRIPLET).any() and (got[:, 6] < NO_TRIPLET).any() and (got[:, 3] > 0).any()


def test_an_edge_without_neighbours_reports_no_triplet():
    src, dst = np.array([0, 2]), np.array([1, 3])
    got = best_triplets(src, dst, np.zeros(2), np.zeros(2), np.ones(2), np.zeros(2), 4, scale=0.01, loose=9.0)
    np.testing.assert_array_equal(got[:, [2, 6]], NO_TRIPLET)
    np.testing.assert_array_equal(got[:, [0, 1, 3, 4, 5, 7]], 0.0)


def test_a_straight_track_has_zero_residuals():
    # Hits on a straight line from the beam line: polar and transverse directions never change.
    src, dst = np.array([0, 1]), np.array([1, 2])
    alpha, beta = np.full(2, 0.7), np.full(2, 0.3)
    got = best_triplets(src, dst, alpha, beta, np.array([30.0, 40.0]), np.zeros(2), 3, scale=0.01, loose=9.0)
    assert got[0, 2] == 0.0 and got[1, 6] == 0.0
    assert got[0, 3] == 1 and got[1, 7] == 1


def test_ties_keep_the_first_continuation_in_edge_order():
    # Edge 0 = (0 -> 1) continues into edges 1 and 2 with residuals (2^-7, 2^-6) and (2^-6, 2^-7): equal m.
    src, dst = np.array([0, 1, 1]), np.array([1, 2, 3])
    alpha = np.array([0.5, 0.5 + 2.0**-7, 0.5 + 2.0**-6])
    beta = np.array([0.0, 2.0**-6, 2.0**-7])
    got = best_triplets(src, dst, alpha, beta, np.ones(3), np.zeros(3), 4, scale=0.01, loose=1e9)
    np.testing.assert_array_equal(got[0, :2], [2.0**-7, 2.0**-6])
    assert got[0, 3] == 2


def test_ties_keep_the_first_continuation_among_many():
    # Edge 0 = (0 -> 1) continues into 40 edges (the kernel's vectorised minimum); the smallest m is reached by
    # edges 30 and 35 with mirrored residuals, and edge 30's are kept.
    num_out = 40
    src = np.concatenate([[0], np.ones(num_out, dtype=np.int64)])
    dst = np.arange(1, num_out + 2)
    alpha = np.concatenate([[0.5], 0.5 + np.linspace(0.01, 0.02, num_out)])
    beta = np.concatenate([[0.0], np.linspace(0.01, 0.02, num_out)])
    alpha[31], beta[31] = 0.5 + 2.0**-8, 2.0**-9
    alpha[36], beta[36] = 0.5 + 2.0**-9, 2.0**-8
    got = best_triplets(src, dst, alpha, beta, np.ones(num_out + 1), np.zeros(num_out + 1), num_out + 2,
                        scale=0.01, loose=1e9)  # fmt: skip
    np.testing.assert_array_equal(got[0, :2], [2.0**-8, 2.0**-9])
    assert got[0, 2] == (2.0**-16 + 2.0**-18) / 0.01**2
    assert got[0, 3] == num_out
