"""Track candidates of one event: the one way tracks are built from edge scores.

:func:`build_candidates` turns hit positions, layers, graph edges and their scores into :class:`TrackCandidates`
with the method and settings of a :class:`~domainpar.tracks.config.TrackConfig`. ``domainpar evaluate`` and
``domainpar reconstruct`` build tracks only through it. Every hit lies on exactly one candidate (a hit no candidate
keeps is a singleton candidate of its own); each candidate's hits are ordered along the track from its innermost hit
(:func:`~domainpar.tracks.layout.assemble`), and each candidate with 3 hits or more carries its helix fit
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
6. refinement again: free hits attached at the holes of the tracks kept;
7. the free-hit pass (:mod:`~domainpar.tracks.free_pass`, ``free_pass`` only): chains of triplets among the pixel
   hits still free, for particles made away from the beam line.

All of them read the hits' resolutions and every hit's scored neighbours (:mod:`~domainpar.tracks.inputs`).
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from domainpar.kernels.compile_clock import compile_clock
from domainpar.kernels.track_fit import hit_columns
from domainpar.tracks.ambiguity import resolve_ambiguities
from domainpar.tracks.config import TrackConfig
from domainpar.tracks.edge_methods import components_of, walk_edges
from domainpar.tracks.following import claimed, follow, kept_tracks
from domainpar.tracks.free_pass import free_pass
from domainpar.tracks.inputs import check_inputs, hit_variances, neighbours
from domainpar.tracks.layout import TrackCandidates, assemble
from domainpar.tracks.refinement import attach_at_holes, refine
from domainpar.tracks.seeding import seed_triplets
from domainpar.tracks.selection import select


def _singletons(labels: np.ndarray) -> np.ndarray:
    """Labels with every hit on no track (-1) a candidate of its own."""
    return np.where(labels < 0, labels.size + np.arange(labels.size), labels)


def _followed(pos, layer, edge_index, scores, variances, cluster_length, config: TrackConfig, started: float) -> TrackCandidates:
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
    if config.free_pass:
        labels = free_pass(columns, layer, edge_index, labels, cluster_length, config)
    return assemble(pos, edge_index, scores, variances, _singletons(labels), config, started, fragment, rank)


def build_candidates(pos, layer, edge_index, scores, config: TrackConfig | None = None, cluster_length=None) -> TrackCandidates:
    """Track candidates of one event from its edge scores.

    Args:
        pos: (N, 3) float hit positions (mm).
        layer: (N,) int layer code of every hit (:attr:`EventGraph.layer`; equal codes = one detector layer).
        edge_index: (2, E) int hit indices, row 0 the inner hit, row 1 the outer.
        scores: (E,) edge scores (probabilities, on the scale of ``config.threshold``).
        config: method and settings (default :class:`~domainpar.tracks.config.TrackConfig`).
        cluster_length: (N,) every hit's cluster length along v (channels;
            :func:`~domainpar.tracks.free_pass.cluster_lengths`), read by the free-hit pass alone (``free_pass``).

    Returns:
        :class:`TrackCandidates`; ``seconds`` covers everything from the scores to the fitted candidates but numba
        compiling kernels (``seconds_compiling``: a first run on a machine), so it is the warm figure.
    """
    config = TrackConfig() if config is None else config
    started = time.perf_counter()
    with compile_clock() as compiling:
        candidates = _built(pos, layer, edge_index, scores, cluster_length, config, started)
    warm = max(0.0, candidates.seconds - compiling.seconds)  # another thread's compiling could overlap the block
    return replace(candidates, seconds=warm, seconds_compiling=compiling.seconds)


def _built(pos, layer, edge_index, scores, cluster_length, config: TrackConfig, started: float) -> TrackCandidates:
    pos, layer, edge_index, scores = check_inputs(pos, layer, edge_index, scores)
    variances = hit_variances(layer, config.sigma_hit)
    if config.method in ("ckf", "ambiguity"):
        return _followed(pos, layer, edge_index, scores, variances, cluster_length, config, started)
    if config.method == "walk":
        mask = walk_edges(pos.shape[0], edge_index, scores, config.threshold)
    else:
        mask = scores > config.threshold
    labels = components_of(pos.shape[0], edge_index, mask)
    return assemble(pos, edge_index, scores, variances, labels, config, started)
