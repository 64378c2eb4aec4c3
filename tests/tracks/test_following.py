"""Following (:mod:`domainpar.tracks.following`): tracks grown from the seeds, claiming their hits or sharing them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from domainpar.kernels.track_fit import hit_columns
from domainpar.tracks.candidates import build_candidates
from domainpar.tracks.config import TrackConfig
from domainpar.tracks.following import FollowedTracks, claimed, follow, kept_tracks
from domainpar.tracks.inputs import hit_variances, neighbours
from domainpar.tracks.seeding import seed_triplets

from handmade import OFF_ALONG_STRIP, PIXEL, STIFF, STRIPS, HandEvent, noise_and_shared_hit, off_along_its_strip, whole


def _follow(ev: HandEvent, claiming: bool, config: TrackConfig = TrackConfig()) -> FollowedTracks:
    pos, layer, edge_index, scores, _ = ev.arrays()
    nbrs = neighbours(len(pos), edge_index, scores, config.extend_threshold)
    seeds = seed_triplets(pos, edge_index, scores, config.seed_threshold, config.seeds_per_hit, config.seed_bucket)
    return follow(hit_columns(pos, hit_variances(layer, config.sigma_hit)), layer, nbrs, seeds, config, claiming)


def test_a_particle_is_followed_whole_in_order_from_its_innermost_hit():
    ev = HandEvent()
    h = ev.track(1, layers=PIXEL + STRIPS, **STIFF)
    ev.chain([h[c] for c in PIXEL + STRIPS], 0.9)
    tracks = _follow(ev, claiming=True)
    assert tracks.ptr.tolist() == [0, 8] and tracks.hits.tolist() == [h[c] for c in PIXEL + STRIPS]
    assert tracks.chi2_ndf[0] < 1e-3
    assert claimed(tracks, 8).tolist() == [0] * 8


def test_claimed_hits_lie_on_one_track_shared_ones_on_several():
    # Particle 2 crosses particle 1 on one layer, where both hold particle 1's hit.
    ev = noise_and_shared_hit()
    claiming, sharing = _follow(ev, claiming=True), _follow(ev, claiming=False)
    assert np.bincount(claiming.hits).max() == 1
    assert np.bincount(sharing.hits).max() > 1
    particle = np.array(ev.particle)
    owner = claimed(claiming, len(particle))
    for p in (1, 2):
        assert np.unique(owner[particle == p]).size == 1  # each particle on one track


def test_kept_tracks_number_the_tracks_that_keep_hits_and_record_their_order():
    # Three followed tracks; the second shares hit 2 with the first, which keeps it; the third keeps nothing.
    tracks = FollowedTracks(np.array([0, 3, 6, 9]), np.array([4, 1, 2, 2, 3, 0, 5, 6, 7]), np.zeros(3))
    owner = np.array([1, 0, 0, 1, 0, -1, -1, -1, -1])
    labels, fragment, rank = kept_tracks(tracks, owner)
    assert labels.tolist() == owner.tolist()
    assert fragment.tolist() == owner.tolist()
    assert rank[[4, 1, 2]].tolist() == [0, 1, 2] and rank[[3, 0]].tolist() == [4, 5]
    # Only the second and third keep hits: numbered 0 and 1 in the order they were followed.
    labels, fragment, _ = kept_tracks(tracks, np.array([1, -1, 1, 1, -1, 2, 2, 2, -1]))
    assert labels.tolist() == [0, -1, 0, 0, -1, 1, 1, 1, -1]
    assert fragment.tolist() == [1, -1, 1, 1, -1, 2, 2, 2, -1]


def test_a_long_strip_hit_off_along_its_strip_is_followed():
    # Following alone (no refinement after it): the edge leads to the hit; the gate, widened by the hit's
    # resolution along z (10.8 / sqrt(12) mm), lets the fit judge it.
    ev, h = off_along_its_strip(edge_to_it=True)
    pos, layer, edge_index, scores, particle = ev.arrays()
    config = TrackConfig(refine=False)
    assert OFF_ALONG_STRIP > config.gate * np.sqrt(1.0 + STIFF["cot"] ** 2)  # a pixel hit this far off is out
    assert whole(build_candidates(pos, layer, edge_index, scores, config).track_id, particle, 1)
    # With the gate of pixel resolution everywhere the track steps over it to layer 41, leaving it a singleton.
    track_id = build_candidates(pos, layer, edge_index, scores, replace(config, gate_sigmas=0.0)).track_id
    assert np.count_nonzero(track_id == track_id[h[40]]) == 1
    assert np.count_nonzero(track_id == track_id[h[7]]) == 9
