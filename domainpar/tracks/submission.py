"""What a submission needs of the tracks: a TrackML submission table, and a track id for every hit of the event.

The builders (:func:`~domainpar.tracks.candidates.build_candidates`) give a track id to every hit of the graph;
:func:`complete_tracks` extends them to every hit of the event (the graph may have left some out), and
:func:`submission` writes them in the challenge's layout.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from domainpar.arrays import difference
from domainpar.errors import DomainparError
from domainpar.tracks.score import check_aligned


def submission(event_id: int, hit_id: np.ndarray, track_id: np.ndarray) -> pd.DataFrame:
    """A TrackML submission table.

    Args:
        event_id: the event number, repeated on every row.
        hit_id: (N,) TrackML hit ids.
        track_id: (N,) track id of every hit (non-negative, as the challenge assumed).

    Returns:
        DataFrame with int64 columns ``event_id, hit_id, track_id``, sorted by hit_id.
    """
    hit_id = np.asarray(hit_id, dtype=np.int64)
    track_id = np.asarray(track_id, dtype=np.int64)
    check_aligned(hit_id=hit_id, track_id=track_id)
    if track_id.size and track_id.min() < 0:
        raise DomainparError(f"track_id must be non-negative (got {int(track_id.min())})")
    order = np.argsort(hit_id, kind="stable")
    return pd.DataFrame(
        {
            "event_id": np.full(hit_id.size, int(event_id), dtype=np.int64),
            "hit_id": hit_id[order],
            "track_id": track_id[order],
        }
    )


def complete_tracks(event_hit_id: np.ndarray, graph_hit_id: np.ndarray, graph_track_id: np.ndarray) -> np.ndarray:
    """Track ids for every hit of an event when the graph held only some of them: hits the graph left out (for
    example by a pT filter) each become a singleton track numbered after the graph's tracks.

    Args:
        event_hit_id: (M,) every hit id of the event.
        graph_hit_id: (N,) hit ids of the graph's nodes (a subset).
        graph_track_id: (N,) track id of every graph node.

    Returns:
        (M,) int64 track id of every event hit, aligned with ``event_hit_id``.
    """
    event_hit_id = np.asarray(event_hit_id, dtype=np.int64)
    graph_hit_id = np.asarray(graph_hit_id, dtype=np.int64)
    order = np.argsort(graph_hit_id)
    sorted_hits = graph_hit_id[order]
    pos = np.clip(np.searchsorted(sorted_hits, event_hit_id), 0, max(sorted_hits.size - 1, 0))
    in_graph = (sorted_hits[pos] == event_hit_id) if sorted_hits.size else np.zeros(event_hit_id.size, dtype=bool)
    unknown = difference(graph_hit_id, event_hit_id)
    if unknown.size:
        raise DomainparError(
            f"graph hit_ids must belong to the event (got {unknown.size} hits not in the event, e.g. {int(unknown[0])})"
        )
    next_id = int(np.max(graph_track_id)) + 1 if graph_hit_id.size else 0
    result = np.empty(event_hit_id.size, dtype=np.int64)
    result[in_graph] = np.asarray(graph_track_id, dtype=np.int64)[order][pos[in_graph]]
    result[~in_graph] = next_id + np.arange(int(np.count_nonzero(~in_graph)))
    return result
