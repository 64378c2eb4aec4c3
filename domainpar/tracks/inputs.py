"""What the stages of track building read of an event: its inputs checked, the hits' resolutions, and every
hit's scored neighbours.

:func:`check_inputs` validates the arrays :func:`~domainpar.tracks.candidates.build_candidates` is given
(:func:`check_edges` the graph's part, which the edge-only methods check alone); :func:`hit_variances` is the
hit-resolution model of every helix fit (:func:`~domainpar.kernels.track_fit.hit_columns` lays it out for the numba
kernels). :func:`neighbours` lists every hit's graph neighbours (both edge directions: a track may grow inwards as
well as outwards) with their edge scores, best first (ties in the order of the edges), for following and refinement;
seeding reads each direction alone (:func:`best_first`).
"""

from __future__ import annotations

import numba
import numpy as np

from domainpar.data.detector import layer_table
from domainpar.data.subset import PIXEL_VOLUMES
from domainpar.errors import DomainparError

#: Scattering weight of a hit by detector: the strip detector's modules and supports scatter more than the pixel
#: detector's (measured on simulated truth: docs/tracks.md).
STRIP_SCATTERING = 13.5


def check_edges(num_nodes: int, edge_index, scores) -> tuple[np.ndarray, np.ndarray]:
    """Validated ``(edge_index (2, E) int64, scores (E,) float64)`` of a graph of ``num_nodes`` hits."""
    edge_index = np.asarray(edge_index)
    scores = np.asarray(scores, dtype=np.float64)
    if num_nodes < 0:
        raise DomainparError(f"num_nodes: expected a count >= 0, got {num_nodes}")
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise DomainparError(f"edge_index: expected shape (2, E), got {edge_index.shape}")
    if scores.shape != (edge_index.shape[1],):
        raise DomainparError(f"scores: expected shape ({edge_index.shape[1]},), got {scores.shape}")
    if edge_index.size and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
        raise DomainparError(
            f"edge_index: expected node ids in [0, {num_nodes}), got values in [{int(edge_index.min())}, {int(edge_index.max())}]"
        )
    if np.isnan(scores).any():
        raise DomainparError("scores: expected no NaN, got NaN")
    return edge_index.astype(np.int64, copy=False), scores


def check_inputs(pos, layer, edge_index, scores) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validated ``(pos (N,3) float64, layer (N,) int64, edge_index (2,E) int64, scores (E,) float64)``."""
    pos = np.asarray(pos, dtype=np.float64)
    layer = np.asarray(layer)
    if pos.ndim != 2 or pos.shape[1] != 3:
        raise DomainparError(f"pos: expected shape (N, 3), got {pos.shape}")
    n = pos.shape[0]
    if layer.shape != (n,):
        raise DomainparError(f"layer: expected shape ({n},), got {layer.shape}")
    edge_index, scores = check_edges(n, edge_index, scores)
    if not np.isfinite(pos).all():
        raise DomainparError("pos: expected finite positions, got NaN or inf")
    return pos, layer.astype(np.int64, copy=False), edge_index, scores


def layers_by_code():
    """The detector's layers (:func:`~domainpar.data.detector.layer_table`), row i the layer of code i."""
    return layer_table().set_index("layer_index").sort_index()


def hit_variances(layer: np.ndarray, sigma_hit: float) -> np.ndarray:
    """(N, 4) every hit's resolution squared across the track in x-y, along z and along r (mm^2), and its
    scattering weight (:mod:`domainpar.kernels.track_fit`).

    From its layer's module pitches (:func:`~domainpar.data.detector.layer_table`, pitch / sqrt(12)): u is
    r·phi; v is z on a barrel layer and r on an endcap disc. ``sigma_hit`` is added in quadrature to all three.
    The scattering weight is 1 in the pixel detector and :data:`STRIP_SCATTERING` in the strips.
    """
    by_index = layers_by_code()
    if layer.size and layer.max() >= len(by_index):
        raise DomainparError(f"layer: expected layer codes below {len(by_index)} (the detector's layers), got {int(layer.max())}")
    u = by_index["pitch_u"].to_numpy(np.float64)[layer] ** 2 / 12.0
    v = by_index["pitch_v"].to_numpy(np.float64)[layer] ** 2 / 12.0
    barrel = by_index["barrel"].to_numpy(bool)[layer]
    pixel = np.isin(by_index["volume_id"].to_numpy(), PIXEL_VOLUMES)[layer]
    floor = sigma_hit * sigma_hit
    weight = np.where(pixel, 1.0, STRIP_SCATTERING)
    return np.stack([u + floor, np.where(barrel, v, 0.0) + floor, np.where(barrel, 0.0, v) + floor, weight], axis=1)


def coarse_resolution(sigma_hit: float) -> np.ndarray:
    """(L,) every detector layer's resolution (mm) along its coarse coordinate (z on a barrel layer, r on a disc):
    the :func:`hit_variances` of its hits there, as a standard deviation."""
    return np.sqrt(layers_by_code()["pitch_v"].to_numpy(np.float64) ** 2 / 12.0 + sigma_hit**2)


@numba.njit(cache=True, nogil=True)
def best_first(num_nodes, src, dst, score):
    """``(ptr (N+1,), node (K,), score (K,))``: CSR of ``dst`` (K,) int64 by ``src`` (K,) int64, one entry per edge
    src -> dst, each row best ``score`` (K,) float64 first."""
    ptr = np.zeros(num_nodes + 1, dtype=np.int64)
    for k in range(src.shape[0]):
        ptr[src[k] + 1] += 1
    for v in range(num_nodes):
        ptr[v + 1] += ptr[v]
    fill = ptr[:-1].copy()
    node = np.empty(src.shape[0], dtype=np.int64)
    value = np.empty(src.shape[0], dtype=np.float64)
    for k in range(src.shape[0]):
        at = fill[src[k]]
        node[at] = dst[k]
        value[at] = score[k]
        fill[src[k]] += 1
    # Each row best first (insertion sort: rows are short; ties keep the edge order).
    for v in range(num_nodes):
        for i in range(ptr[v] + 1, ptr[v + 1]):
            s = value[i]
            d = node[i]
            j = i - 1
            while j >= ptr[v] and value[j] < s:
                value[j + 1] = value[j]
                node[j + 1] = node[j]
                j -= 1
            value[j + 1] = s
            node[j + 1] = d
    return ptr, node, value


def neighbours(num_nodes: int, edge_index: np.ndarray, scores: np.ndarray, min_score: float):
    """CSR of every hit's graph neighbours over edges scored above ``min_score`` (both directions), best first.

    Returns:
        ``(ptr (N+1,), node (K,), score (K,))``.
    """
    keep = np.flatnonzero(scores > min_score)
    src = np.concatenate([edge_index[0, keep], edge_index[1, keep]])
    dst = np.concatenate([edge_index[1, keep], edge_index[0, keep]])
    score = np.concatenate([scores[keep], scores[keep]]).astype(np.float64)
    return best_first(num_nodes, src, dst, score)
