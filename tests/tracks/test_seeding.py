"""Seeding (:mod:`domainpar.tracks.seeding`): which triplets tracks start from, and in what order."""

from __future__ import annotations

import numpy as np

from domainpar.tracks.seeding import seed_triplets


def test_seeds_are_the_best_edges_into_and_out_of_a_middle_hit_above_the_threshold():
    # Hits 0-3 lead into hit 4 (scores 0.9, 0.8, 0.7, 0.6), which leads to 5 (0.95) and 6 (0.3).
    pos = np.array([[10.0, 0, 0], [10, 1, 0], [10, 2, 0], [10, 3, 0], [30, 0, 0], [50, 0, 0], [50, 5, 0]])
    edge_index = np.array([[0, 1, 2, 3, 4, 4], [4, 4, 4, 4, 5, 6]])
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.95, 0.3])
    seeds = seed_triplets(pos, edge_index, scores, 0.5, 3, 0.5)
    assert sorted(map(tuple, seeds.T.tolist())) == [(0, 4, 5), (1, 4, 5), (2, 4, 5)]  # 3 best in, 0.3 out cut
    assert seed_triplets(pos, edge_index, scores, 0.2, 1, 0.5).T.tolist() == [[0, 4, 5]]  # the best edge each way
    # Above 0.2 the 0.3 edge seeds too; its seeds come after the band of the 0.95 edge's.
    seeds = seed_triplets(pos, edge_index, scores, 0.2, 3, 0.5)
    assert seeds[2].tolist() == [5, 5, 5, 6, 6, 6]


def _two_seeds(weak_a: float, weak_b: float):
    """Seed a on a circle through the beam line, seed b on a straight line 50 mm from it; their edge scores."""
    angles = np.array([0.3, 0.6, 0.9])
    a = np.stack([100.0 - 100.0 * np.cos(angles), 100.0 * np.sin(angles), np.zeros(3)], axis=1)
    b = np.array([[50.0, 10.0, 0.0], [50.0, 40.0, 0.0], [50.0, 80.0, 0.0]])
    edge_index = np.array([[0, 1, 3, 4], [1, 2, 4, 5]])
    return np.concatenate([a, b]), edge_index, np.array([weak_a, weak_a, weak_b, weak_b])


def test_seeds_go_in_bands_of_their_weaker_score_nearest_the_beam_line_first():
    pos, edge_index, scores = _two_seeds(0.6, 0.95)
    # One band (0.5 wide): the seed whose circle passes the beam line first, though its scores are lower.
    assert seed_triplets(pos, edge_index, scores, 0.05, 3, 0.5)[1].tolist() == [1, 4]
    # Narrower bands, or by score alone: the better-scored seed first.
    assert seed_triplets(pos, edge_index, scores, 0.05, 3, 0.1)[1].tolist() == [4, 1]
    assert seed_triplets(pos, edge_index, scores, 0.05, 3, 0.0)[1].tolist() == [4, 1]
