"""The track-candidate contract (build_candidates → TrackCandidates) and how candidates are laid out (assemble)."""

from __future__ import annotations

import numpy as np
import pytest

from domainpar.tracks.candidates import build_candidates
from domainpar.tracks.layout import assemble
from domainpar.tracks.config import TrackConfig
from domainpar.tracks.inputs import hit_variances
from domainpar.tracks.methods import METHODS

from handmade import helix_points

#: Barrel radii of the hand-made detector (mm).
RADII = (32.0, 72.0, 116.0, 172.0, 260.0, 360.0)


def _two_tracks():
    """Two particles on the six barrel layers (hits interleaved in index order), a noise hit, and their graph."""
    a = helix_points(1.0, 0.3, 1, 0.5, RADII)
    b = helix_points(2.0, 1.9, -1, -0.3, RADII)
    noise = np.array([[50.0, -60.0, 100.0]])
    # Node order: b's hits reversed, then a's, then the noise hit (the order of hits in an event is arbitrary).
    pos = np.concatenate([b[::-1], a, noise])
    layer = np.array([5, 4, 3, 2, 1, 0, 0, 1, 2, 3, 4, 5, 2])
    a_ids, b_ids = np.arange(6, 12), np.arange(5, -1, -1)
    src = np.concatenate([a_ids[:-1], b_ids[:-1], [7]])
    dst = np.concatenate([a_ids[1:], b_ids[1:], [12]])
    scores = np.concatenate([np.full(5, 0.9), np.full(5, 0.8), [0.3]])
    return pos, layer, np.stack([src, dst]), scores, a_ids, b_ids


@pytest.mark.parametrize("method", METHODS)
def test_candidates_honour_the_contract(method):
    pos, layer, edge_index, scores, a_ids, b_ids = _two_tracks()
    cands = build_candidates(pos, layer, edge_index, scores, TrackConfig(method=method, threshold=0.5))
    n = pos.shape[0]
    assert cands.track_id.dtype == np.int64 and cands.track_id.shape == (n,)
    # Numbered by each candidate's lowest hit index: b (hits 0..5) is 0, a is 1, the noise hit 2.
    assert cands.track_id.tolist() == [0] * 6 + [1] * 6 + [2]
    assert cands.offsets.tolist() == [0, 6, 12, 13]
    assert sorted(cands.hits.tolist()) == list(range(n))
    for t in range(cands.num_candidates):
        assert (cands.track_id[cands.hits[cands.offsets[t] : cands.offsets[t + 1]]] == t).all()
    # Ordered from the innermost hit outwards.
    assert cands.hits[:6].tolist() == b_ids.tolist() and cands.hits[6:12].tolist() == a_ids.tolist()
    expected = np.array([np.nan] + [0.8] * 5 + [np.nan] + [0.9] * 5 + [np.nan], dtype=np.float32)
    np.testing.assert_array_equal(cands.edge_score, expected)
    assert cands.edge_score.dtype == np.float32
    assert cands.fit_pt[:2] == pytest.approx([2.0, 1.0], rel=1e-5)
    assert (cands.fit_chi2_ndf[:2] < 1e-6).all() and np.isnan(cands.fit_chi2_ndf[2]) and np.isnan(cands.fit_pt[2])
    assert cands.edge_mask.tolist() == [True] * 10 + [False]
    assert cands.seconds > 0


def test_empty_event():
    cands = build_candidates(np.zeros((0, 3)), np.zeros(0, np.int64), np.zeros((2, 0), np.int64), np.zeros(0))
    assert cands.track_id.size == 0 and cands.offsets.tolist() == [0] and cands.fit_pt.size == 0


def test_assemble_lays_hits_out_in_the_order_the_builder_followed():
    # Four hits of one candidate at r = 10, 20, 40, 30 mm, followed in index order (as on a curler's way back,
    # not outwards): that order is kept. Knowing no order, the hits are laid out outwards from the origin.
    pos = np.array([[10.0, 0.0, 0.0], [20.0, 1.0, 0.0], [40.0, 3.0, 0.0], [30.0, 2.0, 0.0]])
    layer = np.array([0, 1, 3, 2])
    no_edges, no_scores = np.zeros((2, 0), np.int64), np.zeros(0)
    args = (pos, no_edges, no_scores, hit_variances(layer, 0.01), np.zeros(4, np.int64), TrackConfig(), 0.0)
    followed = assemble(*args, np.zeros(4, np.int64), np.arange(4))
    assert followed.hits.tolist() == [0, 1, 2, 3] and followed.offsets.tolist() == [0, 4]
    assert assemble(*args).hits.tolist() == [0, 1, 3, 2]
    assert np.isnan(followed.edge_score).all() and followed.edge_mask.size == 0
