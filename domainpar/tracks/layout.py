"""How track candidates are laid out: :class:`TrackCandidates`, the contract between the track builder and
everything that reads tracks, and :func:`assemble`, which makes one from a candidate label per hit.

Every builder method (:mod:`domainpar.tracks.candidates`) ends here, and the selection
(:mod:`~domainpar.tracks.selection`) reads candidates laid out by it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from domainpar.kernels.track_fit import fit_candidates
from domainpar.kernels.track_order import order_keys
from domainpar.tracks.config import TrackConfig


@dataclass(frozen=True)
class TrackCandidates:
    """Track candidates of one event: every hit on exactly one candidate, each candidate's hits in order."""

    track_id: np.ndarray
    """(N,) int64 candidate of every hit, 0..T-1, numbered by each candidate's lowest hit index (singletons included)."""
    offsets: np.ndarray
    """(T+1,) int64 CSR offsets into ``hits``."""
    hits: np.ndarray
    """(N,) int64 node indices, candidate by candidate, each ordered along the track from its innermost hit."""
    edge_score: np.ndarray
    """(N,) float32 score of the graph edge joining the candidate's previous hit to this one (NaN at a first hit or where no edge joins them)."""
    fit_chi2_ndf: np.ndarray
    """(T,) float64 helix-fit chi2 per degree of freedom (NaN below 3 hits)."""
    fit_pt: np.ndarray
    """(T,) float64 GeV, pT of the fitted helix in the solenoid field (NaN below 3 hits)."""
    edge_mask: np.ndarray
    """(E,) bool graph edges joining hits of one candidate (what the builder accepted)."""
    seconds: float
    """Wall time of the build (s), numba's compiling left out (:func:`~domainpar.tracks.candidates.build_candidates`)."""
    seconds_compiling: float = 0.0
    """Wall time numba spent compiling kernels during the build (s): a first run on a machine; 0 when warm."""

    @property
    def num_candidates(self) -> int:
        """T, singletons included."""
        return int(self.offsets.size - 1)

    def sizes(self) -> np.ndarray:
        """(T,) hits per candidate."""
        return np.diff(self.offsets)


def renumber(labels: np.ndarray) -> np.ndarray:
    """Labels renumbered 0..T-1 in order of each label's lowest index (the contract's numbering)."""
    if labels.size == 0:
        return np.zeros(0, dtype=np.int64)
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse.ravel()]


def find_edges(num_nodes: int, edge_index: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Edge id joining hits a[i] and b[i] in either direction (the lowest id of equal pairs), -1 where the graph has none."""
    scale = np.int64(max(num_nodes, 1))
    keys = np.minimum(edge_index[0], edge_index[1]) * scale + np.maximum(edge_index[0], edge_index[1])
    ids = np.argsort(keys, kind="stable")
    keys = keys[ids]
    query = np.minimum(a, b) * scale + np.maximum(a, b)
    where = np.clip(np.searchsorted(keys, query), 0, max(keys.size - 1, 0))
    found = (keys[where] == query) if keys.size else np.zeros(query.size, dtype=bool)
    return np.where(found, ids[where] if keys.size else -1, -1)


def assemble(
    pos: np.ndarray, edge_index: np.ndarray, scores: np.ndarray, variances: np.ndarray, labels: np.ndarray, config: TrackConfig,
    started: float, fragment: np.ndarray | None = None, rank: np.ndarray | None = None,
) -> TrackCandidates:  # fmt: skip
    """:class:`TrackCandidates` from a candidate label per hit.

    Args:
        pos: (N, 3) hit positions (mm).
        edge_index: (2, E) graph edges.
        scores: (E,) edge scores.
        variances: (N, 4) hit resolutions squared and scattering weights (:func:`~domainpar.tracks.inputs.hit_variances`).
        labels: (N,) any integer label per hit; equal labels = one candidate.
        config: fit settings.
        started: ``time.perf_counter()`` when the build began (for ``seconds``).
        fragment, rank: (N,) what the builder knew of the hits' order (:func:`~domainpar.kernels.track_order.order_keys`);
            None: nothing.

    Returns:
        The candidates; ``edge_mask`` holds the graph edges whose two hits share a candidate.
    """
    n = pos.shape[0]
    track_id = renumber(np.asarray(labels))
    num_tracks = int(track_id.max()) + 1 if n else 0
    if fragment is None:
        fragment, rank = np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64)
    columns = [np.ascontiguousarray(pos[:, i]) for i in range(3)]
    key = order_keys(*columns, track_id, np.ascontiguousarray(fragment, dtype=np.int64), np.ascontiguousarray(rank, dtype=np.int64))
    hits = np.lexsort((key, track_id)).astype(np.int64)
    offsets = np.zeros(num_tracks + 1, dtype=np.int64)
    np.cumsum(np.bincount(track_id, minlength=num_tracks), out=offsets[1:])
    edge_score = np.full(n, np.nan, dtype=np.float32)
    if n > 1:
        follows = np.ones(n, dtype=bool)  # hits[k] has a previous hit on its candidate
        follows[offsets[:-1]] = False
        k = np.flatnonzero(follows)
        edges = find_edges(n, edge_index, hits[k - 1], hits[k])
        joined = edges >= 0
        edge_score[k[joined]] = scores[edges[joined]]
    edge_mask = track_id[edge_index[0]] == track_id[edge_index[1]] if edge_index.size else np.zeros(0, dtype=bool)
    chi2_ndf, pt = fit_candidates(pos, variances, offsets, hits, config.field, config.ms)
    return TrackCandidates(track_id=track_id, offsets=offsets, hits=hits, edge_score=edge_score, fit_chi2_ndf=chi2_ndf,
                           fit_pt=pt, edge_mask=edge_mask, seconds=time.perf_counter() - started)  # fmt: skip
