"""The true segments of an event: what an edge label and the graph efficiency mean.

Definition (used for the labels ``y`` and for the construction efficiency alike):

1. The hits of every non-noise particle are ordered along its track by their
   distance from the particle's production vertex (3-D, ``|hit - vertex|``);
   without a particles table the origin stands in for the vertex.
2. Consecutive hits on the same layer (overlapping modules: one particle can
   leave two hits on one layer) form one *layer group*.
3. A true segment joins every hit of one layer group to every hit of the next
   group of the same particle. So a particle with hits on layers A, B, B', C
   (two on B) gives segments A–B, A–B', B–C, B'–C and never B–B'; a hit
   missing on a layer makes the segment jump over it.

Segments are unordered hit pairs here; the graph orients edges inner → outer
by layer, and a segment is *kept* when the graph has an edge between its two
hits in either direction.
"""

from __future__ import annotations

import numpy as np


def true_segments(
    particle_id: np.ndarray,
    layer: np.ndarray,
    pos: np.ndarray,
    vertex: np.ndarray | None = None,
) -> np.ndarray:
    """Every true segment of an event as a pair of node indices.

    Args:
        particle_id: (N,) int64 particle of every hit, 0 for noise.
        layer: (N,) int64 global layer index of every hit.
        pos: (N, 3) hit positions (mm).
        vertex: (N, 3) production vertex of every hit's particle (mm), or None
            to measure distances from the origin.

    Returns:
        (2, S) int64 node indices; row 0 is the hit earlier along the track.
    """
    n = particle_id.shape[0]
    origin = np.zeros((n, 3)) if vertex is None else np.asarray(vertex, dtype=np.float64)
    distance = np.linalg.norm(np.asarray(pos, dtype=np.float64) - origin, axis=1)
    real = np.flatnonzero(particle_id != 0)
    order = real[np.lexsort((distance[real], particle_id[real]))]
    pid = particle_id[order]
    lay = layer[order]
    # A new layer group starts where the particle or the layer changes.
    new_group = np.ones(order.size, dtype=bool)
    new_group[1:] = (pid[1:] != pid[:-1]) | (lay[1:] != lay[:-1])
    group_start = np.flatnonzero(new_group)
    group_size = np.diff(np.append(group_start, order.size))
    group_pid = pid[group_start]
    # Group g links to group g+1 when both belong to the same particle.
    linked = np.flatnonzero(group_pid[:-1] == group_pid[1:])
    if linked.size == 0:
        return np.zeros((2, 0), dtype=np.int64)
    size_a = group_size[linked]
    size_b = group_size[linked + 1]
    pairs_per_link = size_a * size_b
    total = int(pairs_per_link.sum())
    link_of_pair = np.repeat(np.arange(linked.size), pairs_per_link)
    within = np.arange(total) - np.repeat(np.cumsum(pairs_per_link) - pairs_per_link, pairs_per_link)
    b_size = size_b[link_of_pair]
    a_offset = within // b_size
    b_offset = within % b_size
    a = group_start[linked][link_of_pair] + a_offset
    b = group_start[linked + 1][link_of_pair] + b_offset
    return np.stack([order[a], order[b]]).astype(np.int64)


def pair_keys(first: np.ndarray, second: np.ndarray, num_nodes: int) -> np.ndarray:
    """Order-independent int64 key of every node pair (for set membership tests)."""
    low = np.minimum(first, second).astype(np.int64)
    high = np.maximum(first, second).astype(np.int64)
    return low * np.int64(num_nodes) + high
