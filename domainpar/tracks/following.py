"""Following, the second stage of ``ckf`` and ``ambiguity``: tracks grown hit by hit from the seeds.

:func:`follow` hands the seeds (:mod:`domainpar.tracks.seeding`), every hit's scored neighbours and the hits'
resolutions (:mod:`domainpar.tracks.inputs`) to :func:`~domainpar.kernels.track_ckf.follow_tracks`, which grows and
judges the tracks by their helix fits. In ``ckf`` a kept track claims its hits (:func:`claimed`); in ``ambiguity``
tracks may share hits and ambiguity resolution (:mod:`domainpar.tracks.ambiguity`) decides which keeps each.
:func:`kept_tracks` then numbers the tracks that keep hits and records where each hit lies along its track, the
order the candidates are laid out in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from domainpar.kernels.track_ckf import follow_tracks
from domainpar.kernels.track_fit import HitColumns


@dataclass(frozen=True)
class FollowedTracks:
    """The tracks following kept, in the order it kept them."""

    ptr: np.ndarray
    """(T+1,) int64 CSR offsets into ``hits``."""
    hits: np.ndarray
    """(H,) int64 every track's hits in order along it (in the shared mode a hit may lie on several tracks)."""
    chi2_ndf: np.ndarray
    """(T,) float64 each track's worst windowed chi2/ndf (:func:`~domainpar.kernels.track_fit.window_chi2_ndf`)."""

    def track_of_hits(self) -> np.ndarray:
        """(H,) the track of every entry of ``hits``."""
        return np.repeat(np.arange(self.chi2_ndf.size), np.diff(self.ptr))


def follow(columns: HitColumns, layer: np.ndarray, nbrs: tuple, seeds: np.ndarray, config, claiming: bool) -> FollowedTracks:
    """Tracks followed from the seeds (:mod:`domainpar.kernels.track_ckf`).

    Args:
        columns: the hits' positions and resolutions (:func:`~domainpar.kernels.track_fit.hit_columns`).
        layer: (N,) layer code of every hit.
        nbrs: every hit's neighbours over edges above ``config.extend_threshold`` (:func:`~domainpar.tracks.inputs.neighbours`).
        seeds: (3, S) seed triplets in the order they are tried (:func:`~domainpar.tracks.seeding.seed_triplets`).
        config: the :class:`~domainpar.tracks.config.TrackConfig`.
        claiming: kept tracks claim their hits (``ckf``), or share them (``ambiguity``).
    """
    ptr, hits, chi2_ndf = follow_tracks(
        *columns, np.ascontiguousarray(layer, dtype=np.int64), *nbrs, seeds, claiming,
        np.array(sorted({config.first_pass_hits, config.min_hits}, reverse=True), dtype=np.int64), config.reach,
        config.window, config.hit_chi2, config.seed_chi2, config.max_chi2_ndf, config.score_weight, config.double_distance,
        config.max_per_layer, config.gate, config.gate_sigmas, config.min_hits, config.field, config.ms,
    )  # fmt: skip
    return FollowedTracks(ptr, hits, chi2_ndf)


def claimed(tracks: FollowedTracks, num_nodes: int) -> np.ndarray:
    """(N,) int64 the track that claimed every hit in ``ckf`` (each hit lies on one track at most), -1: none."""
    owner = np.full(num_nodes, -1, dtype=np.int64)
    owner[tracks.hits] = tracks.track_of_hits()
    return owner


def kept_tracks(tracks: FollowedTracks, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tracks that keep hits, and the order of their hits.

    Args:
        tracks: the followed tracks.
        owner: (N,) int64 the track that keeps every hit (:func:`claimed`, or ambiguity resolution's), -1: none.

    Returns:
        ``(labels, fragment, rank)``, each (N,) int64: every hit's track among those that keep hits, numbered
        0..K-1 in the order they were followed (-1: none); the followed track it lies on (-1: none) and its
        position along that one (for :func:`~domainpar.kernels.track_order.order_keys`).
    """
    track = tracks.track_of_hits()
    fragment = np.full(owner.size, -1, dtype=np.int64)
    rank = np.zeros(owner.size, dtype=np.int64)
    kept = owner[tracks.hits] == track
    fragment[tracks.hits[kept]] = track[kept]
    rank[tracks.hits[kept]] = np.flatnonzero(kept)
    labels = np.unique(owner, return_inverse=True)[1].ravel() - (1 if (owner < 0).any() else 0)
    return labels, fragment, rank
