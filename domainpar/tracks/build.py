"""Track candidates from edge scores.

Two algorithms, both giving every hit exactly one track id (a hit on no
accepted edge is a singleton track of its own):

``components``
    Keep the edges whose score is strictly above the threshold; tracks are the
    connected components of the (undirected) hit graph they form. Fast and
    robust, but two tracks touched by one wrong edge merge into one.

``walk`` (walk-through with branch resolution)
    1. Candidates: the edges with score strictly above the threshold.
    2. Walk: a hit becomes a seed once all hits with a candidate edge into it
       are on a track (so walks start at the innermost free hit; seeds in
       first-in first-out order, the first ones by ascending hit index). From
       a seed, follow the highest-scoring candidate edge to a hit that is not
       on a track yet (ties: the lower edge id), until there is none. Each
       walk is a path; every hit lies on exactly one path. Where the selected
       edges branch, the walk takes the best-scoring free branch; the other
       branch starts a path of its own later.
    3. Merge fragments: a particle crossing overlapping modules leaves two
       hits on one layer, so its true edges form diamonds (A→B, A→B', B→C,
       B'→C) and the walk leaves B' (and sometimes more) as a short separate
       path. Every path is joined to the larger path it shares the most
       candidate edges with (ties: the larger, then the lower-numbered path)
       when it shares at least two — or at least one for a single hit. A
       branch that touches a track through a single edge stays separate.
    Tracks are the connected components of the walked plus merging edges.
    With imperfect scores the walk keeps apart the tracks that a single wrong
    edge would merge and scores clearly higher than ``components``. With
    perfect scores (every true edge above, every false edge below the
    threshold) it can lose a hit pair where a particle's double hits on two
    consecutive layers are joined by only one of their four segments: that
    pair is a fragment tied to the track by one edge and stays apart
    (TrackML score within 0.001 of ``components`` on the small real event;
    ``tests/tracks/test_tracks.py``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from domainpar.errors import DomainparError
from domainpar.kernels.walkthrough import walk_paths
from domainpar.tracks.methods import METHODS

#: Methods :func:`build_tracks` runs from the edges alone (the others need the hits' positions and layers:
#: :func:`domainpar.tracks.candidates.build_candidates` runs every method of :data:`METHODS`).
EDGE_METHODS = ("components", "walk")
__all__ = ["METHODS", "EDGE_METHODS", "build_tracks", "complete_tracks", "components_of", "selected_edges", "submission", "walk_edges"]


def _check_inputs(num_nodes: int, edge_index: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    edge_index = np.asarray(edge_index)
    scores = np.asarray(scores)
    if num_nodes < 0:
        raise DomainparError(f"num_nodes must be non-negative (got {num_nodes})")
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise DomainparError(f"edge_index must have shape (2, E) (got {edge_index.shape})")
    if scores.shape != (edge_index.shape[1],):
        raise DomainparError(f"scores must have shape ({edge_index.shape[1]},) (got {scores.shape})")
    if edge_index.size and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
        raise DomainparError(
            f"edge_index must be within [0, {num_nodes}) (got values in [{int(edge_index.min())}, {int(edge_index.max())}])"
        )
    if np.isnan(scores).any():
        raise DomainparError("scores must not contain NaN")
    return edge_index.astype(np.int64, copy=False), scores


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
    edge_index, scores = _check_inputs(num_nodes, edge_index, scores)
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


def build_tracks(
    num_nodes: int,
    edge_index: np.ndarray,
    scores: np.ndarray,
    threshold: float = 0.5,
    method: str = "components",
) -> np.ndarray:
    """A track id for every hit from edge scores.

    Args:
        num_nodes: N hits.
        edge_index: (2, E) int hit indices, row 0 inner, row 1 outer.
        scores: (E,) float edge scores on the same scale as ``threshold``.
        threshold: edges with score strictly above it may join hits.
        method: one of :data:`EDGE_METHODS` (see the module docstring).

    Returns:
        (N,) int64 track ids 0..T-1 (singletons included), numbered by each track's lowest hit index.
    """
    mask = selected_edges(num_nodes, edge_index, scores, threshold, method)
    return components_of(num_nodes, edge_index, mask)


def selected_edges(
    num_nodes: int, edge_index: np.ndarray, scores: np.ndarray, threshold: float = 0.5, method: str = "components"
) -> np.ndarray:
    """(E,) bool mask of the edges that join hits into tracks under ``method`` (arguments as :func:`build_tracks`)."""
    edge_index, scores = _check_inputs(num_nodes, edge_index, scores)
    if method == "components":
        return scores > threshold
    if method == "walk":
        return walk_edges(num_nodes, edge_index, scores, threshold)
    raise DomainparError(f"track-building method must be one of {list(EDGE_METHODS)} (got {method!r})")


def submission(event_id: int, hit_id: np.ndarray, track_id: np.ndarray) -> pd.DataFrame:
    """A TrackML submission table.

    Args:
        event_id: the event number, repeated on every row.
        hit_id: (N,) TrackML hit ids.
        track_id: (N,) track id of every hit (non-negative, as the challenge assumed).

    Returns:
        DataFrame with int64 columns ``event_id, hit_id, track_id``, sorted by hit_id.
    """
    hit_id = np.asarray(hit_id, dtype=np.int64)
    track_id = np.asarray(track_id, dtype=np.int64)
    if hit_id.ndim != 1 or track_id.shape != hit_id.shape:
        raise DomainparError(
            f"hit_id and track_id must be one-dimensional of equal length (got shapes {hit_id.shape}, {track_id.shape})"
        )
    if track_id.size and track_id.min() < 0:
        raise DomainparError(f"track_id must be non-negative (got {int(track_id.min())})")
    order = np.argsort(hit_id, kind="stable")
    return pd.DataFrame(
        {
            "event_id": np.full(hit_id.size, int(event_id), dtype=np.int64),
            "hit_id": hit_id[order],
            "track_id": track_id[order],
        }
    )


def complete_tracks(event_hit_id: np.ndarray, graph_hit_id: np.ndarray, graph_track_id: np.ndarray) -> np.ndarray:
    """Track ids for every hit of an event when the graph held only some of them.

    Hits the graph left out (for example by a pT filter) each become a
    singleton track numbered after the graph's tracks.

    Args:
        event_hit_id: (M,) every hit id of the event.
        graph_hit_id: (N,) hit ids of the graph's nodes (a subset).
        graph_track_id: (N,) track id of every graph node.

    Returns:
        (M,) int64 track id of every event hit, aligned with ``event_hit_id``.
    """
    event_hit_id = np.asarray(event_hit_id, dtype=np.int64)
    graph_hit_id = np.asarray(graph_hit_id, dtype=np.int64)
    order = np.argsort(graph_hit_id)
    sorted_hits = graph_hit_id[order]
    pos = np.clip(np.searchsorted(sorted_hits, event_hit_id), 0, max(sorted_hits.size - 1, 0))
    in_graph = (sorted_hits[pos] == event_hit_id) if sorted_hits.size else np.zeros(event_hit_id.size, dtype=bool)
    unknown = np.setdiff1d(graph_hit_id, event_hit_id)
    if unknown.size:
        raise DomainparError(
            f"graph hit_ids must belong to the event (got {unknown.size} hits not in the event, e.g. {int(unknown[0])})"
        )
    next_id = int(np.max(graph_track_id)) + 1 if graph_hit_id.size else 0
    result = np.empty(event_hit_id.size, dtype=np.int64)
    result[in_graph] = np.asarray(graph_track_id, dtype=np.int64)[order][pos[in_graph]]
    result[~in_graph] = next_id + np.arange(int(np.count_nonzero(~in_graph)))
    return result
