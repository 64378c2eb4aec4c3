"""Track candidates of one event: the one way tracks are built from edge scores.

:func:`build_candidates` turns hit positions, layers, graph edges and their scores into :class:`TrackCandidates`
with the method and settings of a :class:`~domainpar.tracks.config.TrackConfig`. ``domainpar evaluate`` and
``domainpar reconstruct`` build tracks only through it. Every hit lies on exactly one candidate (a hit no candidate
keeps is a singleton candidate of its own); each candidate's hits are ordered along the track from its innermost hit
(:func:`assemble`), and each candidate with 3 hits or more carries its helix fit
(:mod:`domainpar.kernels.track_fit`).

The methods (:data:`domainpar.tracks.methods.METHODS`, compared in ``docs/tracks.md``): ``components`` and ``walk``
read the edges alone (:mod:`domainpar.tracks.edge_methods`); ``ckf`` and ``ambiguity`` run the stages of a track
finder, each a module of its own, in this order:

1. seeding (:mod:`~domainpar.tracks.seeding`): triplets of well-scored edges;
2. following (:mod:`~domainpar.tracks.following`): tracks grown from the seeds hit by hit, judged by helix fits; in
   ``ckf`` a kept track claims its hits;
3. ambiguity resolution (:mod:`~domainpar.tracks.ambiguity`, ``ambiguity`` only): which of the tracks sharing hits
   keeps each;
4. refinement (:mod:`~domainpar.tracks.refinement`): fragments merged, free hits attached;
5. selection (:mod:`~domainpar.tracks.selection`): the hole cut and the short-track cut on the laid-out candidates;
6. refinement again: free hits attached at the holes of the tracks kept.

All of them read the hits' resolutions and every hit's scored neighbours (:mod:`~domainpar.tracks.inputs`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from domainpar.kernels.track_fit import fit_candidates, hit_columns
from domainpar.kernels.track_order import order_keys
from domainpar.tracks.ambiguity import resolve_ambiguities
from domainpar.tracks.config import TrackConfig
from domainpar.tracks.edge_methods import components_of, walk_edges
from domainpar.tracks.following import claimed, follow, kept_tracks
from domainpar.tracks.inputs import check_inputs, hit_variances, neighbours
from domainpar.tracks.refinement import attach_at_holes, refine
from domainpar.tracks.seeding import seed_triplets
from domainpar.tracks.selection import select


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
    """Wall time of the build (s)."""

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


def _singletons(labels: np.ndarray) -> np.ndarray:
    """Labels with every hit on no track (-1) a candidate of its own."""
    return np.where(labels < 0, labels.size + np.arange(labels.size), labels)


def _followed(pos, layer, edge_index, scores, variances, config: TrackConfig, started: float) -> TrackCandidates:
    """``ckf`` and ``ambiguity``: the stages of the module docstring, in order."""
    n = pos.shape[0]
    columns = hit_columns(pos, variances)
    nbrs = neighbours(n, edge_index, scores, config.extend_threshold)
    seeds = seed_triplets(pos, edge_index, scores, config.seed_threshold, config.seeds_per_hit, config.seed_bucket)
    tracks = follow(columns, layer, nbrs, seeds, config, claiming=config.method == "ckf")
    owner = claimed(tracks, n) if config.method == "ckf" else resolve_ambiguities(tracks, n, config)
    labels, fragment, rank = kept_tracks(tracks, owner)
    if config.refine:
        labels = refine(columns, layer, edge_index, scores, nbrs, labels, config)
    fragment[labels < 0] = -1
    candidates = assemble(pos, edge_index, scores, variances, _singletons(labels), config, started, fragment, rank)
    labels = select(candidates, columns, layer, config)
    fragment[labels < 0] = -1
    if config.refine:
        labels = attach_at_holes(columns, layer, labels, config)
    return assemble(pos, edge_index, scores, variances, _singletons(labels), config, started, fragment, rank)


def build_candidates(pos, layer, edge_index, scores, config: TrackConfig | None = None) -> TrackCandidates:
    """Track candidates of one event from its edge scores.

    Args:
        pos: (N, 3) float hit positions (mm).
        layer: (N,) int layer code of every hit (:attr:`EventGraph.layer`; equal codes = one detector layer).
        edge_index: (2, E) int hit indices, row 0 the inner hit, row 1 the outer.
        scores: (E,) edge scores (probabilities, on the scale of ``config.threshold``).
        config: method and settings (default :class:`~domainpar.tracks.config.TrackConfig`).

    Returns:
        :class:`TrackCandidates`; ``seconds`` covers everything from the scores to the fitted candidates.
    """
    config = TrackConfig() if config is None else config
    started = time.perf_counter()
    pos, layer, edge_index, scores = check_inputs(pos, layer, edge_index, scores)
    variances = hit_variances(layer, config.sigma_hit)
    if config.method in ("ckf", "ambiguity"):
        return _followed(pos, layer, edge_index, scores, variances, config, started)
    if config.method == "walk":
        mask = walk_edges(pos.shape[0], edge_index, scores, config.threshold)
    else:
        mask = scores > config.threshold
    labels = components_of(pos.shape[0], edge_index, mask)
    return assemble(pos, edge_index, scores, variances, labels, config, started)
