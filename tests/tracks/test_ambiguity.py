"""Ambiguity resolution (:mod:`domainpar.tracks.ambiguity`): which of the tracks that share hits keeps each."""

from __future__ import annotations

import numpy as np

from domainpar.tracks.ambiguity import resolve_ambiguities, resolve_shared
from domainpar.tracks.config import TrackConfig
from domainpar.tracks.following import FollowedTracks

#: Four tracks sharing hits: the second shares hit 3 with the first, the third hits 0 and 1, the fourth hit 2.
PTR = np.array([0, 4, 8, 11, 14])
HITS = np.array([0, 1, 2, 3, 3, 4, 5, 6, 0, 1, 7, 8, 9, 2])


def test_better_tracks_keep_their_hits_and_a_track_sharing_too_many_or_bringing_too_few_is_dropped():
    owner = resolve_shared(PTR, HITS, np.arange(4), 10, 1, 3)
    # The second track shares one hit (allowed) and brings three: kept, the shared hit stays with the first.
    # The third shares two; the fourth brings two free hits, below min_hits.
    assert owner.tolist() == [0, 0, 0, 0, 1, 1, 1, -1, -1, -1]
    assert resolve_shared(PTR, HITS, np.arange(4), 10, 1, 2).tolist() == [0, 0, 0, 0, 1, 1, 1, -1, 3, 3]
    assert resolve_shared(PTR, HITS, np.arange(4), 10, 0, 3).tolist() == [0, 0, 0, 0] + [-1] * 6
    # The order decides: the fourth first takes hit 2, and the first, sharing one, still brings three.
    assert resolve_shared(PTR, HITS, np.array([3, 0, 1, 2]), 10, 1, 2).tolist() == [0, 0, 3, 0, 1, 1, 1, -1, 3, 3]


def test_tracks_are_ranked_by_hits_then_fit():
    config = TrackConfig(method="ambiguity", max_shared=1, min_hits=3)
    # Three hits with the best fit against four, sharing two: the longer track keeps them.
    tracks = FollowedTracks(np.array([0, 3, 7]), np.array([0, 1, 2, 1, 2, 3, 4]), np.array([0.1, 2.0]))
    assert resolve_ambiguities(tracks, 5, config).tolist() == [-1, 1, 1, 1, 1]
    # Two of four hits sharing two: the better fit keeps them.
    tracks = FollowedTracks(np.array([0, 4, 8]), np.array([1, 2, 3, 4, 3, 4, 5, 6]), np.array([2.0, 1.0]))
    assert resolve_ambiguities(tracks, 7, config).tolist() == [-1, -1, -1, 1, 1, 1, 1]
