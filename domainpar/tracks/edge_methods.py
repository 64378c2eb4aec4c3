"""The two track-building methods that read the edges alone: ``components`` and ``walk``.

Each gives every hit exactly one track id (a hit on no accepted edge is a singleton track of its own);
:func:`~domainpar.tracks.candidates.build_candidates` runs them (``TrackConfig(method="components")``, ``"walk"``)
and lays the tracks out as candidates. The other methods follow tracks by their helix fits
(:mod:`domainpar.tracks.candidates` lists their stages).

``components``
    Keep the edges whose score is strictly above the threshold; tracks are the connected components of the
    (undirected) hit graph they form. Fast and robust, but two tracks touched by one wrong edge merge into one.

``walk`` (walk-through with branch resolution)
    1. Candidates: the edges with score strictly above the threshold.
    2. Walk: a hit becomes a seed once all hits with a candidate edge into it are on a track (so walks start at the
       innermost free hit; seeds in first-in first-out order, the first ones by ascending hit index). From a seed,
       follow the highest-scoring candidate edge to a hit that is not on a track yet (ties: the lower edge id),
       until there is none. Each walk is a path; every hit lies on exactly one path. Where the selected edges
       branch, the walk takes the best-scoring free branch; the other branch starts a path of its own later.
    3. Merge fragments: a particle crossing overlapping modules leaves two hits on one layer, so its true edges form
       diamonds (A→B, A→B', B→C, B'→C) and the walk leaves B' (and sometimes more) as a short separate path. Every
       path is joined to the larger path it shares the most candidate edges with (ties: the larger, then the
       lower-numbered path) when it shares at least two — or at least one for a single hit. A branch that touches a
       track through a single edge stays separate.

    Tracks are the connected components of the walked plus merging edges. With imperfect scores the walk keeps
    apart the tracks that a single wrong edge would merge and scores clearly higher than ``components``. With
    perfect scores (every true edge above, every false edge below the threshold) it can lose a hit pair where a
    particle's double hits on two consecutive layers are joined by only one of their four segments: that pair is a
    fragment tied to the track by one edge and stays apart (TrackML score within 0.001 of ``components`` on the
    small real event; ``tests/tracks/test_edge_methods.py``).
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from domainpar.kernels.walkthrough import walk_paths
from domainpar.tracks.inputs import check_edges


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
    _, first = np.unique(labels, return_index=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[labels]


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
