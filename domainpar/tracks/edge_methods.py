"""The two track-building methods that read the edges alone: ``components`` and ``walk`` (docs/tracks.md).

Each gives every hit exactly one track id (a hit on no accepted edge is a singleton track of its own);
:func:`~domainpar.tracks.candidates.build_candidates` runs them and lays the tracks out as candidates.

``components``: tracks are the connected components of the (undirected) hit graph of the edges scored strictly
above the threshold.

``walk``: the edges above the threshold are candidates. A hit becomes a seed once all hits with a candidate edge
into it are on a track (seeds first-in first-out, the first ones by ascending hit index); from a seed the walk
follows the highest-scoring candidate edge to a hit on no track yet (ties: the lower edge id), until there is
none, so every hit lies on exactly one path. Then every path is joined to the larger path it shares the most
candidate edges with (ties: the larger, then the lower-numbered path) when it shares at least two, or at least
one for a single hit (a particle crossing overlapping modules leaves its second hit of a layer as a path of its
own). Tracks are the connected components of the walked plus merging edges.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from domainpar.kernels.walkthrough import walk_paths
from domainpar.tracks.inputs import check_edges
from domainpar.tracks.layout import renumber


def components_of(num_nodes: int, edge_index: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Connected-component label of every node of an undirected graph.

    Args:
        num_nodes: N.
        edge_index: (2, E) int node ids.
        mask: (E,) bool edges to use (all when None).

    Returns:
        (N,) int64 labels 0..C-1, numbered in order of each component's lowest node id.
    """
    edge_index = np.asarray(edge_index, dtype=np.int64)
    if mask is not None:
        edge_index = edge_index[:, np.asarray(mask, dtype=bool)]
    if num_nodes == 0:
        return np.zeros(0, dtype=np.int64)
    adjacency = coo_matrix(
        (np.ones(edge_index.shape[1], dtype=np.int8), (edge_index[0], edge_index[1])), shape=(num_nodes, num_nodes)
    )
    _, labels = connected_components(adjacency, directed=False)
    # scipy numbers components by discovery; make the numbering explicit (lowest node first).
    return renumber(labels)


def walk_edges(num_nodes: int, edge_index: np.ndarray, scores: np.ndarray, threshold: float) -> np.ndarray:
    """The edges the walk-through keeps (see the module docstring).

    Args:
        num_nodes: N.
        edge_index: (2, E) node ids, row 0 inner hit, row 1 outer hit.
        scores: (E,) edge scores (probabilities or logits — only the order and the threshold matter).
        threshold: edges with score strictly above it are candidates.

    Returns:
        (E,) bool mask of accepted edges.
    """
    edge_index, scores = check_edges(num_nodes, edge_index, scores)
    candidates = np.flatnonzero(scores > threshold)
    # Descending score, ties to the lower edge id: stable sort of the negated scores.
    permutation = np.argsort(-scores[candidates], kind="stable")
    order = candidates[permutation]
    rank = np.empty(order.size, dtype=np.int64)
    rank[permutation] = np.arange(order.size)  # rank of candidates[j] in the descending order
    accepted = np.zeros(edge_index.shape[1], dtype=bool)
    accepted[candidates] = walk_paths(edge_index[0, candidates], edge_index[1, candidates], rank, num_nodes)
    return _merge_fragments(num_nodes, edge_index, candidates, accepted)


def _merge_fragments(num_nodes: int, edge_index: np.ndarray, candidates: np.ndarray, accepted: np.ndarray) -> np.ndarray:
    """Join walk fragments to the larger path they are most tied to (see the module docstring).

    Returns ``accepted`` plus the candidate edges between every merged fragment and its parent.
    """
    fragment = components_of(num_nodes, edge_index, accepted)
    size = np.bincount(fragment)
    src_frag = fragment[edge_index[0, candidates]]
    dst_frag = fragment[edge_index[1, candidates]]
    cross = src_frag != dst_frag
    if not cross.any():
        return accepted
    a, b, edges = src_frag[cross], dst_frag[cross], candidates[cross]
    # The parent is the larger fragment (ties: the lower label), so merges form a forest.
    a_larger = (size[a] > size[b]) | ((size[a] == size[b]) & (a < b))
    child = np.where(a_larger, b, a)
    parent = np.where(a_larger, a, b)
    pairs, pair_of_edge, ties = np.unique(np.stack([child, parent]), axis=1, return_inverse=True, return_counts=True)
    pair_of_edge = pair_of_edge.ravel()
    # Best parent per child: most candidate edges, then the larger parent, then the lower label.
    best = np.lexsort((pairs[1], -size[pairs[1]], -ties, pairs[0]))
    first = np.ones(best.size, dtype=bool)
    first[1:] = pairs[0, best][1:] != pairs[0, best][:-1]
    chosen = best[first]
    chosen = chosen[(ties[chosen] >= 2) | (size[pairs[0, chosen]] == 1)]
    merged = np.zeros(pairs.shape[1], dtype=bool)
    merged[chosen] = True
    result = accepted.copy()
    result[edges[merged[pair_of_edge]]] = True
    return result
