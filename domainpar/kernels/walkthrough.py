"""Walk-through of a directed graph along its best edges (numba).

Knows nothing of events or tracks. Given, for every node, its outgoing edges
sorted best first (CSR), it cuts the graph into disjoint paths:

* a node becomes a *seed* once every node with an edge into it is on a path
  (Kahn's order, so walks start at the innermost free node); seeds are taken
  first-in first-out, the initial ones in ascending node id;
* from a seed the walk repeatedly follows the best outgoing edge whose target
  is not on a path yet, and stops when there is none;
* nodes still free when no seed is left (possible only on graphs with
  cycles) are seeded in ascending node id.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _walk_paths(indptr: np.ndarray, targets: np.ndarray, edge_ids: np.ndarray, in_degree: np.ndarray) -> np.ndarray:
    num_nodes = indptr.shape[0] - 1
    accepted = np.zeros(edge_ids.shape[0], dtype=np.bool_)
    used = np.zeros(num_nodes, dtype=np.bool_)
    waiting = in_degree.copy()  # in-edges from nodes not yet on a path
    queue = np.empty(num_nodes, dtype=np.int64)
    head = 0
    tail = 0
    for v in range(num_nodes):
        if waiting[v] == 0:
            queue[tail] = v
            tail += 1
    next_fallback = 0
    while True:
        if head < tail:
            seed = queue[head]
            head += 1
        else:
            while next_fallback < num_nodes and used[next_fallback]:
                next_fallback += 1
            if next_fallback == num_nodes:
                break
            seed = next_fallback
        if used[seed]:
            continue
        node = seed
        while True:
            used[node] = True
            # Release the successors of a node that just joined a path.
            for k in range(indptr[node], indptr[node + 1]):
                t = targets[k]
                waiting[t] -= 1
                if waiting[t] == 0 and not used[t]:
                    queue[tail] = t
                    tail += 1
            step = -1
            for k in range(indptr[node], indptr[node + 1]):
                if not used[targets[k]]:
                    step = k
                    break
            if step < 0:
                break
            accepted[edge_ids[step]] = True
            node = targets[step]
    return accepted


def walk_paths(src: np.ndarray, dst: np.ndarray, rank: np.ndarray, num_nodes: int) -> np.ndarray:
    """Cut a directed graph into paths that follow each node's best free outgoing edge.

    Args:
        src: (E,) int64 source of every edge.
        dst: (E,) int64 target of every edge.
        rank: (E,) preference of every edge, lower = better (e.g. position in a descending-score order).
        num_nodes: N.

    Returns:
        (E,) bool mask of the edges on the paths; every node has at most one
        accepted outgoing and one accepted incoming edge.
    """
    src = np.ascontiguousarray(src, dtype=np.int64)
    dst = np.ascontiguousarray(dst, dtype=np.int64)
    # Self-loops can never be walked (the target is the node itself, already on the path).
    keep = np.flatnonzero(src != dst)
    order = keep[np.lexsort((rank[keep], src[keep]))]
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(src[order], minlength=num_nodes), out=indptr[1:])
    in_degree = np.bincount(dst[order], minlength=num_nodes).astype(np.int64)
    accepted_sorted = _walk_paths(indptr, dst[order], np.arange(order.size, dtype=np.int64), in_degree)
    accepted = np.zeros(src.size, dtype=bool)
    accepted[order[accepted_sorted]] = True
    return accepted
