"""Ambiguity resolution, the third stage of ``ambiguity``: which of the tracks that share hits keeps each.

Following in the shared mode (:mod:`domainpar.tracks.following`) builds every seed's track regardless of other
tracks' hits. The tracks are ranked by their number of hits (most first), then their worst window chi2/ndf (lowest
first), and kept greedily (:func:`resolve_shared`): a track is kept when at most ``max_shared`` of its hits are
already held by better tracks and at least ``min_hits`` are still free; it takes its free hits. ``ckf`` has no such
stage: its tracks claim their hits as they are followed.
"""

from __future__ import annotations

import numba
import numpy as np

from domainpar.tracks.following import FollowedTracks


@numba.njit(cache=True, nogil=True)
def resolve_shared(
    ptr: np.ndarray, hits: np.ndarray, quality: np.ndarray, num_nodes: int, max_shared: int, min_hits: int
) -> np.ndarray:
    """Greedy ambiguity resolution (module docstring): tracks in ``quality`` order (best first) claim their hits.

    Args:
        ptr, hits: (T+1,), (H,) the tracks as CSR.
        quality: (T,) int64 track order, best first (a permutation of 0..T-1).
        num_nodes: N.
        max_shared, min_hits: the most hits a kept track shares with better ones, the fewest free hits it brings.

    Returns:
        (N,) int64 the track that keeps every hit, -1 for hits no kept track holds.
    """
    owner = np.full(num_nodes, -1, dtype=np.int64)
    for q in range(quality.shape[0]):
        t = quality[q]
        shared = 0
        for k in range(ptr[t], ptr[t + 1]):
            if owner[hits[k]] >= 0:
                shared += 1
        free = ptr[t + 1] - ptr[t] - shared
        if shared > max_shared or free < min_hits:
            continue
        for k in range(ptr[t], ptr[t + 1]):
            if owner[hits[k]] < 0:
                owner[hits[k]] = t
    return owner


def resolve_ambiguities(tracks: FollowedTracks, num_nodes: int, config) -> np.ndarray:
    """(N,) int64 the followed track that keeps every hit (-1: none), by ``config.max_shared`` and ``config.min_hits``
    of a :class:`~domainpar.tracks.config.TrackConfig` (see the module docstring)."""
    quality = np.lexsort((tracks.chi2_ndf, -np.diff(tracks.ptr))).astype(np.int64)
    return resolve_shared(tracks.ptr, tracks.hits, quality, num_nodes, config.max_shared, config.min_hits)
