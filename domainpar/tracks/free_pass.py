"""The free-hit pass (``free_pass``, off unless asked): tracks of particles the graph lost, from the hits no track kept.

The graph's cuts assume a particle from the beam line. A particle made away from it, in a decay or an interaction in
the material (a *displaced* particle), loses its segments at the innermost layers, the GNN never sees a chain of
it, and its hits stay free: on the real pixel event 21000 such particles carried 0.030 of the TrackML score's 0.055
that the pixel recipe lost, most of them with four free hits or more (docs/tracks.md). The pass, after every
other stage of ``ckf`` and ``ambiguity``, looks at the free pixel hits alone and builds chains of triplets there
with no assumption on where the particle came from (:mod:`domainpar.kernels.free_chains`): doublets on the layer
pairs the graph holds, triplets on circles of pT above ``free_pt_min`` whose hits' cluster lengths agree with the
angle the triplet crosses their sensors at, triplets linked into chains of like helices, the longest chains first;
then single triplets that a second free hit on one of their layers backs (``free_twins``); then the free hits beside
the new tracks' hits join them where their helix fits take them.

It needs every hit's cluster length along the sensor's v axis (:func:`cluster_lengths`, the graph's ``cluster_v``
node feature). Only pixel hits take part: a strip cluster's length says nothing of the crossing angle.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree

from domainpar.data.features import NODE_FEATURE_SPECS
from domainpar.data.subset import PIXEL_VOLUMES
from domainpar.errors import DomainparError
from domainpar.kernels.free_chains import chains, doublets, links, triplets, twinned_triplets
from domainpar.kernels.track_ckf import MAX_HITS
from domainpar.kernels.track_refine import attach_free
from domainpar.kernels.track_fit import PT_PER_TESLA_MM, HitColumns
from domainpar.tracks.inputs import layers_by_code

#: The node feature that holds a hit's cluster length along v.
CLUSTER_FEATURE = "cluster_v"


def cluster_lengths(graph) -> np.ndarray | None:
    """(N,) float64 every hit's cluster length along v (channels), from the graph's ``cluster_v`` node feature;
    None when the graph has no such column (built without the cells)."""
    names = tuple(graph.node_features or ())
    if CLUSTER_FEATURE not in names:
        return None
    scale = NODE_FEATURE_SPECS[CLUSTER_FEATURE].scale
    return np.ascontiguousarray(graph.x[:, names.index(CLUSTER_FEATURE)], dtype=np.float64) * scale


def _csr(num_nodes: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((dst, src))
    ptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=num_nodes), out=ptr[1:])
    return ptr, np.ascontiguousarray(dst[order])


def _twins(columns: HitColumns, layer: np.ndarray, free: np.ndarray, distance: float) -> tuple[np.ndarray, np.ndarray]:
    """CSR over all N hits of every free hit's free neighbours on its own layer within ``distance`` (mm)."""
    n = layer.size
    pos = np.stack([columns.x[free], columns.y[free], columns.z[free]], axis=1)
    pairs = cKDTree(pos).query_pairs(distance, output_type="ndarray")
    a, b = free[pairs[:, 0]], free[pairs[:, 1]]
    same = layer[a] == layer[b]
    a, b = a[same], b[same]
    return _csr(n, np.concatenate([a, b]), np.concatenate([b, a]))


def free_pass(
    columns: HitColumns, layer: np.ndarray, edge_index: np.ndarray, labels: np.ndarray, cluster_length: np.ndarray | None, config
) -> np.ndarray:
    """Labels with the free-hit pass's tracks added (the module docstring).

    Args:
        columns: the hits' positions and resolutions (:func:`~domainpar.kernels.track_fit.hit_columns`).
        layer: (N,) int64 layer code of every hit.
        edge_index: (2, E) the graph's edges (their layer pairs are the pairs the pass may join).
        labels: (N,) int64 track of every hit, -1 for none.
        cluster_length: (N,) float64 every hit's cluster length along v (channels; 0 or NaN: unknown).
        config: the :class:`~domainpar.tracks.config.TrackConfig`.

    Returns:
        (N,) int64 labels; the new tracks numbered after the existing ones.
    """
    n = labels.size
    if cluster_length is None:
        raise DomainparError(
            "tracks.free_pass: expected every hit's cluster length (the graph's cluster_v node feature), got a graph "
            "without it: build the graphs from events with their cells, or set free_pass: false"
        )
    if cluster_length.shape != (n,):
        raise DomainparError(f"cluster_length: expected shape ({n},) (one per hit), got {tuple(cluster_length.shape)}")
    table = layers_by_code()
    num_layers = len(table)
    pixel = np.isin(table["volume_id"].to_numpy(), PIXEL_VOLUMES)
    free = np.flatnonzero((labels < 0) & pixel[layer])
    # The layer pairs the graph's edges join (a count per pair: sorting the edges' pairs costs more than the pass).
    joined = np.bincount(layer[edge_index[0]] * num_layers + layer[edge_index[1]], minlength=num_layers * num_layers)
    pairs = np.stack(np.divmod(np.flatnonzero(joined), num_layers), axis=1)
    pairs = np.ascontiguousarray(pairs[pixel[pairs[:, 0]] & pixel[pairs[:, 1]] & (pairs[:, 0] != pairs[:, 1])], dtype=np.int64)
    if free.size < config.free_min_hits or pairs.shape[0] == 0:
        return labels
    x, y, z = columns.x, columns.y, columns.z
    phi = np.arctan2(y, x)
    order = free[np.lexsort((phi[free], layer[free]))]
    layer_start = np.zeros(num_layers + 1, dtype=np.int64)
    np.cumsum(np.bincount(layer[order], minlength=num_layers), out=layer_start[1:])
    length = np.nan_to_num(np.ascontiguousarray(cluster_length, dtype=np.float64), nan=0.0)
    barrel = np.ascontiguousarray(table["barrel"].to_numpy(bool)[layer])
    thickness = np.ascontiguousarray(table["thickness"].to_numpy(np.float64)[layer])
    pitch = np.ascontiguousarray(table["pitch_v"].to_numpy(np.float64)[layer])
    cluster = (length, barrel, thickness, pitch, config.free_cluster_cut, config.free_cluster_relative)
    src, dst = doublets(
        order, layer_start, np.ascontiguousarray(phi[order]), pairs, x, y, z, np.hypot(x, y), config.free_dphi, config.free_z0_max, *cluster
    )
    if src.size == 0:
        return labels
    out_ptr, out_node = _csr(n, src, dst)
    in_ptr, in_node = _csr(n, dst, src)
    radius_min = config.free_pt_min / (PT_PER_TESLA_MM * config.field)
    hits, kappa, theta = triplets(in_ptr, in_node, out_ptr, out_node, x, y, z, radius_min, config.free_dtheta, *cluster)
    if kappa.size == 0:
        return labels
    key = hits[0] * n + hits[1]
    by_key = np.argsort(key, kind="stable")
    hits, kappa, theta, key = np.ascontiguousarray(hits[:, by_key]), kappa[by_key], theta[by_key], key[by_key]
    ptr, successor, cost = links(hits, kappa, theta, key, n, config.free_dkappa, config.free_dkappa_relative, config.free_dtheta)
    found = chains(hits, ptr, successor, cost, labels >= 0, config.free_min_hits, columns, config.field, config.ms, config.free_max_chi2_ndf, radius_min)
    # Free hits beside each other on one layer: the twins' second hits, and the hits attached to the new tracks.
    twins = _twins(columns, layer, free, config.double_distance)
    if config.free_twins:
        taken = labels >= 0
        taken[found >= 0] = True
        twinned_triplets(
            hits, taken, *twins, columns, config.field, config.ms, config.free_twin_max_chi2_ndf,
            config.free_twin_pt_min / (PT_PER_TESLA_MM * config.field),
            *cluster, found, int(found.max()) + 1,
        )  # fmt: skip
    new = found >= 0
    if not new.any():
        return labels
    labels = labels.copy()
    labels[new] = (labels.max() + 1 if (labels >= 0).any() else 0) + found[new]
    return _attached(columns, layer, labels, found, src, dst, twins, config)


def _attached(columns: HitColumns, layer, labels, found, src, dst, twins, config) -> np.ndarray:
    """Labels with free pixel hits attached to the pass's new tracks by their helix fits
    (:func:`~domainpar.kernels.track_refine.attach_free`): a track's doublet partners (a layer it skipped or went
    on to) and the free hits beside its hits on their layers (``twins``; a particle through two overlapping modules)."""
    n = labels.size
    chain_hit = found >= 0
    still_free = (labels < 0)
    # Doublet partners, either way round.
    a = np.concatenate([src, dst])
    b = np.concatenate([dst, src])
    keep = still_free[a] & chain_hit[b]
    pairs = [np.stack([a[keep], b[keep]])]
    # Free hits within double_distance of a new track's hit on its layer (``twins``: :func:`_twins`).
    twin_ptr, twin_node = twins
    beside = np.repeat(np.arange(n), np.diff(twin_ptr))
    keep = still_free[beside] & chain_hit[twin_node]
    pairs.append(np.stack([beside[keep], twin_node[keep]]))
    pairs = np.unique(np.concatenate(pairs, axis=1), axis=1)
    if pairs.shape[1] == 0:
        return labels
    ptr, node = _csr(n, pairs[0], pairs[1])
    return attach_free(
        *columns, layer, labels, ptr, node, np.zeros(node.size), np.unique(pairs[0]), config.hit_chi2, config.max_chi2_ndf,
        config.double_distance, config.max_per_layer, config.window, config.gate, config.field, config.ms, MAX_HITS,
    )  # fmt: skip
