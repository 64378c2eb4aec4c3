"""The edge-only methods (``components``, ``walk``) on hand-made graphs and on the real event."""

from __future__ import annotations

import numpy as np
import pytest

from domainpar.errors import DomainparError
from domainpar.kernels.walkthrough import walk_paths
from domainpar.tracks.candidates import build_candidates
from domainpar.tracks.config import TrackConfig
from domainpar.tracks.edge_methods import components_of, walk_edges

from fixtures import EVENT1 as EVENT


def _track_ids(num_nodes: int, edge_index, scores, threshold: float = 0.5, method: str = "components") -> np.ndarray:
    """Track ids by :func:`build_candidates` on hits at arbitrary positions: the edge-only methods read the edges alone."""
    pos = np.random.default_rng(0).normal(0.0, 100.0, (num_nodes, 3))
    config = TrackConfig(method=method, threshold=threshold)
    return build_candidates(pos, np.zeros(num_nodes, np.int64), np.asarray(edge_index), np.asarray(scores, float), config).track_id


def test_components_on_a_small_known_graph():
    # 0-1-2 chain, 3-4, 5 isolated, 6-7-8 with an edge below threshold between 7 and 8.
    edge_index = np.array([[0, 1, 3, 6, 7], [1, 2, 4, 7, 8]])
    scores = np.array([0.9, 0.8, 0.7, 0.95, 0.3])
    tracks = _track_ids(9, edge_index, scores, threshold=0.5)
    assert tracks.tolist() == [0, 0, 0, 1, 1, 2, 3, 3, 4]
    # The threshold is strict: a score equal to it does not join.
    assert _track_ids(3, np.array([[0], [1]]), np.array([0.5]), threshold=0.5).tolist() == [0, 1, 2]
    # Direction does not matter for components; a node with two parents joins both.
    labels = components_of(4, np.array([[0, 2], [1, 1]]))
    assert labels.tolist() == [0, 0, 0, 1]


def test_components_match_a_brute_force_flood_fill():
    rng = np.random.default_rng(3)
    n = 200
    edge_index = rng.integers(0, n, size=(2, 150))
    labels = components_of(n, edge_index)
    adjacency = [set() for _ in range(n)]
    for s, d in edge_index.T:
        adjacency[s].add(d)
        adjacency[d].add(s)
    flood = -np.ones(n, dtype=int)
    count = 0
    for start in range(n):
        if flood[start] >= 0:
            continue
        stack = [start]
        flood[start] = count
        while stack:
            v = stack.pop()
            for w in adjacency[v]:
                if flood[w] < 0:
                    flood[w] = count
                    stack.append(w)
        count += 1
    assert np.array_equal(labels, flood)  # both number components by their lowest node


def test_walk_resolves_branches_by_the_highest_score():
    # 0 -> 1 -> 2 (0.9)            1 branches: the walk follows the better edge 1->2;
    #        \-> 3 -> 5 (0.7, 0.8)  3->5 becomes a path of its own, tied to the track by one edge only.
    edge_index = np.array([[0, 1, 1, 3], [1, 2, 3, 5]])
    scores = np.array([0.8, 0.9, 0.7, 0.8])
    kept = walk_edges(6, edge_index, scores, threshold=0.5)
    assert kept.tolist() == [True, True, False, True]
    tracks = _track_ids(6, edge_index, scores, threshold=0.5, method="walk")
    assert tracks.tolist() == [0, 0, 0, 1, 2, 1]
    # Components merge both branches into one track.
    assert _track_ids(6, edge_index, scores, threshold=0.5).tolist() == [0, 0, 0, 0, 1, 0]
    # With the scores swapped the walk follows 1->3->5 and 2 is left alone; a single hit
    # joins the track it touches through its best edge, so here all of 0..3, 5 end up together.
    swapped = np.array([0.8, 0.6, 0.9, 0.8])
    assert walk_edges(6, edge_index, swapped, 0.5).tolist() == [True, True, True, True]


def test_walk_claims_a_hit_for_the_first_walk_and_merges_diamonds():
    # Two seeds 0 and 4 both want hit 2; seed 0 is walked first (lower index) and takes it.
    edge_index = np.array([[0, 1, 4, 4, 6], [1, 2, 2, 6, 7]])
    scores = np.array([0.9, 0.9, 0.95, 0.6, 0.9])
    tracks = _track_ids(8, edge_index, scores, threshold=0.5, method="walk")
    assert tracks.tolist() == [0, 0, 0, 1, 2, 3, 2, 2]
    # A diamond A->B, A->B', B->C, B'->C (two hits on one layer): one track, not two.
    diamond = np.array([[0, 0, 1, 2, 3], [1, 2, 3, 3, 4]])
    tracks = _track_ids(5, diamond, np.array([0.9, 0.8, 0.9, 0.85, 0.9]), threshold=0.5, method="walk")
    assert np.unique(tracks).size == 1
    # Two-hit diamond sides: A->{B,B'}->{C,C'}->D leaves the path B'-C', tied by 4 edges: merged.
    double = np.array([[0, 0, 1, 1, 2, 2, 3, 4], [1, 2, 3, 4, 3, 4, 5, 5]])
    tracks = _track_ids(6, double, np.linspace(0.9, 0.6, 8), threshold=0.5, method="walk")
    assert np.unique(tracks).size == 1


def test_walk_paths_keep_at_most_one_edge_in_and_out_per_hit():
    rng = np.random.default_rng(5)
    n = 300
    src = rng.integers(0, n - 1, 2000)
    dst = np.minimum(src + rng.integers(1, 20, src.size), n - 1)
    rank = rng.permutation(src.size)
    kept = walk_paths(src, dst, rank, n)
    assert np.bincount(src[kept], minlength=n).max() <= 1
    assert np.bincount(dst[kept], minlength=n).max() <= 1
    # Every walk stopped only because all targets of its last hit were taken.
    nxt = np.full(n, -1)
    nxt[src[kept]] = dst[kept]
    on_path = np.zeros(n, bool)
    on_path[src[kept]] = True
    on_path[dst[kept]] = True
    for v in np.flatnonzero(nxt < 0):
        assert all(on_path[dst[e]] or dst[e] == v for e in np.flatnonzero(src == v))
    # Cycles (not produced by inner->outer graphs) still terminate with every node on one path.
    cyc = walk_paths(np.array([0, 1, 2]), np.array([1, 2, 0]), np.array([0, 1, 2]), 3)
    assert cyc.sum() == 2


def test_walk_equals_components_without_branches():
    # Three disjoint chains and singletons: nothing to resolve.
    edge_index = np.array([[0, 1, 2, 5, 6, 9], [1, 2, 3, 6, 7, 10]])
    scores = np.array([0.9, 0.6, 0.8, 0.7, 0.99, 0.51])
    a = _track_ids(12, edge_index, scores, 0.5, method="components")
    b = _track_ids(12, edge_index, scores, 0.5, method="walk")
    assert np.array_equal(a, b)
    assert a.tolist() == [0, 0, 0, 0, 1, 2, 2, 2, 3, 4, 4, 5]


def test_walk_edges_rejects_bad_input():
    # The checks every builder makes of the graph (domainpar.tracks.inputs.check_edges).
    with pytest.raises(DomainparError, match=r"edge_index: expected node ids in \[0, 3\), got values in \[0, 3\]"):
        walk_edges(3, np.array([[0], [3]]), np.array([0.9]), 0.5)
    with pytest.raises(DomainparError, match=r"scores: expected shape \(1,\), got \(2,\)"):
        walk_edges(3, np.array([[0], [1]]), np.array([0.9, 0.1]), 0.5)
    with pytest.raises(DomainparError, match="scores: expected no NaN, got NaN"):
        walk_edges(3, np.array([[0], [1]]), np.array([np.nan]), 0.5)
    with pytest.raises(DomainparError, match="num_nodes: expected a count >= 0, got -1"):
        walk_edges(-1, np.zeros((2, 0), np.int64), np.zeros(0), 0.5)


def test_walk_beats_components_on_the_real_event_with_imperfect_scores():
    from domainpar.data.graph import build_graph
    from domainpar.data.trackml import load_event
    from domainpar.tracks.score import score_arrays

    hits, particles, truth = load_event(EVENT, parts=("hits", "particles", "truth"))
    graph, _ = build_graph(hits, truth, particles, event_id=1)
    weight = truth.set_index("hit_id").loc[graph.hit_id, "weight"].to_numpy()
    rng = np.random.default_rng(0)
    perfect = graph.y + 0.01 * rng.random(graph.num_edges)
    noisy = np.clip(0.8 * graph.y + rng.normal(0.1, 0.2, graph.num_edges), 0, 1)
    scores = {}
    for name, edge_scores in (("perfect", perfect), ("noisy", noisy)):
        for method in ("components", "walk"):
            config = TrackConfig(method=method, threshold=0.5)
            tracks = build_candidates(graph.pos, graph.layer, graph.edge_index, edge_scores, config).track_id
            scores[name, method] = score_arrays(tracks, graph.particle_id, weight).score
    # Perfect scores: components are exactly the particles' true-segment graphs; the walk may leave
    # out a double-hit pair tied to its track by a single segment (see the edge_methods module docstring).
    assert scores["perfect", "walk"] <= scores["perfect", "components"] + 1e-12
    assert scores["perfect", "walk"] > scores["perfect", "components"] - 1e-3
    assert scores["noisy", "walk"] > scores["noisy", "components"] + 0.05


@pytest.mark.parametrize("method", ["components", "walk"])
def test_candidates_are_the_components_of_the_edges_the_method_selects(method):
    rng = np.random.default_rng(1)
    n = 300
    pos = rng.normal(0, 100, (n, 3))
    layer = rng.integers(0, 8, n)
    edge_index = rng.integers(0, n, (2, 600))
    scores = rng.random(600)
    cands = build_candidates(pos, layer, edge_index, scores, TrackConfig(method=method, threshold=0.6))
    selected = scores > 0.6 if method == "components" else walk_edges(n, edge_index, scores, 0.6)
    assert cands.track_id.tolist() == components_of(n, edge_index, selected).tolist()
    assert cands.edge_mask[selected].all() and not cands.edge_mask[~selected].all()
