"""TrackML submissions and track ids for every hit of an event (:mod:`domainpar.tracks.submission`)."""

from __future__ import annotations

import numpy as np
import pytest

from domainpar.errors import DomainparError
from domainpar.tracks.submission import complete_tracks, submission


def test_submission_and_completion():
    frame = submission(7, np.array([30, 10, 20]), np.array([1, 0, 1]))
    assert list(frame.columns) == ["event_id", "hit_id", "track_id"]
    assert frame["hit_id"].tolist() == [10, 20, 30] and frame["track_id"].tolist() == [0, 1, 1]
    assert (frame["event_id"] == 7).all()
    with pytest.raises(DomainparError, match="track_id must be non-negative"):
        submission(7, np.array([1]), np.array([-1]))
    # Hits the graph left out become singletons after the graph's track ids.
    full = complete_tracks(np.array([1, 2, 3, 4, 5]), np.array([4, 2, 1]), np.array([0, 1, 0]))
    assert full.tolist() == [0, 1, 2, 0, 3]
    with pytest.raises(DomainparError, match="graph hit_ids must belong to the event"):
        complete_tracks(np.array([1, 2]), np.array([3]), np.array([0]))
