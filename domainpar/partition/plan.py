"""Partition plans: the contract between an event graph and the ranks that train it.

Given an owner part for every node, :func:`build_plan` derives what each part
holds (docs/design.md, "The exactness argument"):

* owned nodes V_p (local ids ``0 .. num_owned-1``, ascending global id);
* local edges E_p: every edge with at least one owned endpoint. A cut edge is
  held by both of its parts (replicated) and *owned* for the loss by the owner
  of its dst node only;
* halo nodes H_p: non-owned endpoints of E_p (local ids ``num_owned ..``),
  grouped by owning part (ascending), ascending global id within a group;
* send lists: for every neighbour q, the local ids of p's owned nodes that q
  stores as halo, in q's halo order, so a received buffer is copied in place.

Local edges are ordered interior first (both ends owned) then boundary (one end
halo), so a model can compute interior edges while halo rows are in flight.

``drop_cut_edges=True`` gives the naive "sectors" plan: each part is an
independent subgraph, cut edges are dropped and there is no halo.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from domainpar.errors import DomainparError


@dataclass(frozen=True, eq=False)
class PartPlan:
    """What one part (one rank of a domain group) holds. All arrays int64 unless noted."""

    part: int
    """This part's index, 0 .. num_parts-1."""
    num_parts: int
    """Number of parts in the plan."""
    owned_ids: np.ndarray
    """(num_owned,) global ids of the nodes this part owns, ascending; local id i ↔ owned_ids[i]."""
    halo_ids: np.ndarray
    """(num_halo,) global ids of halo nodes, grouped by owner part (ascending), ascending within a group; local id num_owned+i."""
    recv_parts: np.ndarray
    """(k,) neighbour parts this part receives halo rows from, ascending."""
    recv_offsets: np.ndarray
    """(k+1,) halo_ids[recv_offsets[i]:recv_offsets[i+1]] come from recv_parts[i]."""
    send_parts: np.ndarray
    """(m,) neighbour parts this part sends owned rows to, ascending."""
    send_offsets: np.ndarray
    """(m+1,) send_ids[send_offsets[i]:send_offsets[i+1]] go to send_parts[i]."""
    send_ids: np.ndarray
    """(sum of send sizes,) local ids of owned rows to send, in the order the receiver stores them as halo."""
    edge_index: np.ndarray
    """(2, num_local_edges) local node ids of every local edge (src inner, dst outer); interior edges first."""
    edge_ids: np.ndarray
    """(num_local_edges,) global edge id of every local edge."""
    edge_owned: np.ndarray
    """(num_local_edges,) bool: this part owns the edge for the loss (it owns the edge's dst node)."""
    num_interior_edges: int
    """Local edges [0, num_interior_edges) have both ends owned; the rest touch one halo node."""
    num_nodes_global: int
    """Nodes in the whole event graph."""
    num_edges_global: int
    """Edges the loss normalises by: all edges of the graph (kept edges only in a sectors plan)."""
    num_positive_edges_global: int
    """True edges among num_edges_global (0 for a graph without labels)."""

    @property
    def num_owned(self) -> int:
        return int(self.owned_ids.shape[0])

    @property
    def num_halo(self) -> int:
        return int(self.halo_ids.shape[0])

    @property
    def num_local_nodes(self) -> int:
        return self.num_owned + self.num_halo

    @property
    def num_local_edges(self) -> int:
        return int(self.edge_ids.shape[0])

    @property
    def num_boundary_edges(self) -> int:
        return self.num_local_edges - self.num_interior_edges

    @property
    def local_to_global(self) -> np.ndarray:
        """(num_local_nodes,) global id of every local node (owned then halo)."""
        return np.concatenate([self.owned_ids, self.halo_ids])

    def recv_slice(self, i: int) -> slice:
        """Halo rows (relative to num_owned) received from recv_parts[i]."""
        return slice(int(self.recv_offsets[i]), int(self.recv_offsets[i + 1]))

    def send_slice(self, i: int) -> slice:
        """Entries of send_ids that go to send_parts[i]."""
        return slice(int(self.send_offsets[i]), int(self.send_offsets[i + 1]))


@dataclass(frozen=True, eq=False)
class PartitionPlan:
    """A whole event's plan: one :class:`PartPlan` per part plus how it was made."""

    method: str
    """Partitioner that assigned the owners: "metis", "geometric", "sectors" or "given"."""
    num_parts: int
    """Number of parts."""
    graph_hash: str
    """EventGraph.content_hash() of the graph the plan was made from; loading checks it."""
    owner: np.ndarray
    """(num_nodes,) int64 owning part of every node."""
    parts: tuple[PartPlan, ...]
    """Per-part plans, parts[p].part == p."""
    drops_cut_edges: bool
    """True for a sectors plan: cut edges are dropped instead of replicated, no halo."""
    num_cut_edges: int
    """Edges whose endpoints have different owners."""
    num_true_cut_edges: int
    """True (label 1) edges among the cut edges; what a sectors plan loses."""
    seconds_partition: float = 0.0
    """Wall time of the partitioner (assigning owners)."""
    seconds_plan: float = 0.0
    """Wall time of building the plan from the owners."""

    @property
    def num_nodes(self) -> int:
        return int(self.owner.shape[0])


def _check_owner(owner: np.ndarray, num_nodes: int, num_parts: int) -> np.ndarray:
    owner = np.asarray(owner)
    if num_parts < 1:
        raise DomainparError(f"num_parts must be at least 1 (got {num_parts})")
    if owner.shape != (num_nodes,):
        raise DomainparError(f"owner must have shape ({num_nodes},) (got {owner.shape})")
    if not np.issubdtype(owner.dtype, np.integer):
        raise DomainparError(f"owner must be an integer array (got dtype {owner.dtype})")
    owner = owner.astype(np.int64, copy=False)
    if num_nodes and (owner.min() < 0 or owner.max() >= num_parts):
        raise DomainparError(
            f"owner must be within [0, {num_parts}) (got values in [{int(owner.min())}, {int(owner.max())}])"
        )
    counts = np.bincount(owner, minlength=num_parts)
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        raise DomainparError(
            f"every part must own at least one node (parts {empty.tolist()} of {num_parts} are empty); "
            f"use fewer parts for a graph of {num_nodes} nodes"
        )
    return owner


def build_plan(
    edge_index: np.ndarray,
    owner: np.ndarray,
    num_parts: int,
    *,
    y: np.ndarray | None = None,
    method: str = "given",
    graph_hash: str = "",
    drop_cut_edges: bool = False,
    seconds_partition: float = 0.0,
) -> PartitionPlan:
    """Build the per-part plans from an owner assignment (vectorised numpy, O(E + P·N)).

    About 0.4-0.6 s for 4-16 parts of the real full event (125k hits, 1.8M edges).

    Args:
        edge_index: (2, E) int global node ids, src → dst.
        owner: (N,) int owning part of every node, every part non-empty.
        num_parts: number of parts P.
        y: (E,) optional edge labels, to count positive and lost true edges.
        method: name of the partitioner, recorded in the plan.
        graph_hash: hash of the source graph, recorded in the plan.
        drop_cut_edges: sectors mode: drop cut edges instead of replicating them.
        seconds_partition: partitioner wall time, recorded in the plan.

    Returns:
        The :class:`PartitionPlan`.
    """
    import time

    t0 = time.perf_counter()
    edge_index = np.asarray(edge_index, dtype=np.int64)
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise DomainparError(f"edge_index must have shape (2, E) (got {edge_index.shape})")
    num_nodes = int(np.asarray(owner).shape[0])
    owner = _check_owner(owner, num_nodes, num_parts)
    if edge_index.size and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
        raise DomainparError(
            f"edge_index must hold node ids within [0, {num_nodes}) "
            f"(got values in [{int(edge_index.min())}, {int(edge_index.max())}])"
        )
    if y is not None and np.asarray(y).shape != (edge_index.shape[1],):
        raise DomainparError(f"y must have shape ({edge_index.shape[1]},) (got {np.asarray(y).shape})")
    src, dst = edge_index
    num_edges = src.shape[0]
    src_part = owner[src]
    dst_part = owner[dst]
    is_cut = src_part != dst_part
    labels = None if y is None else (np.asarray(y) > 0.5)
    num_cut = int(np.count_nonzero(is_cut))
    num_true_cut = 0 if labels is None else int(np.count_nonzero(labels & is_cut))

    # (part, edge) pairs: every kept edge belongs to its dst's owner; a replicated cut edge
    # also to its src's owner. Pairs are laid out in edge order and stably sorted by part
    # (a radix sort for int16 keys), so every part's edges come out in ascending id order.
    kept = ~is_cut if drop_cut_edges else np.ones(num_edges, dtype=bool)
    num_edges_global = int(np.count_nonzero(kept))
    num_pos_global = 0 if labels is None else int(np.count_nonzero(labels & kept))
    if drop_cut_edges:
        pair_edge = np.flatnonzero(kept)
        pair_part = dst_part[pair_edge]
    else:
        copies = 1 + is_cut.astype(np.int64)
        pair_edge = np.repeat(np.arange(num_edges, dtype=np.int64), copies)
        first = np.cumsum(copies) - copies  # position of each edge's first pair
        pair_part = np.empty(pair_edge.size, dtype=np.int64)
        pair_part[first] = dst_part
        pair_part[first[is_cut] + 1] = src_part[is_cut]
    key_dtype = np.int16 if num_parts <= np.iinfo(np.int16).max else np.int64
    order = np.argsort(pair_part.astype(key_dtype), kind="stable")
    pair_edge = pair_edge[order]
    edge_bounds = np.searchsorted(pair_part[order], np.arange(num_parts + 1))

    node_order = np.argsort(owner, kind="stable")  # ascending global id within each part
    node_bounds = np.searchsorted(owner[node_order], np.arange(num_parts + 1))

    global_to_local = np.full(num_nodes, -1, dtype=np.int64)
    is_endpoint = np.zeros(num_nodes, dtype=bool)
    staged = []
    for p in range(num_parts):
        owned = node_order[node_bounds[p] : node_bounds[p + 1]]
        local_edges = pair_edge[edge_bounds[p] : edge_bounds[p + 1]]
        e_src, e_dst = src[local_edges], dst[local_edges]
        # Halo = endpoints not owned here; a mark array gives them ascending without np.unique.
        is_endpoint[e_src] = True
        is_endpoint[e_dst] = True
        is_endpoint[owned] = False
        halo = np.flatnonzero(is_endpoint)
        is_endpoint[halo] = False
        halo = halo[np.argsort(owner[halo], kind="stable")]  # grouped by owner, ascending id kept per group
        halo_owner = owner[halo]
        recv_parts = np.unique(halo_owner)
        recv_offsets = np.searchsorted(halo_owner, np.append(recv_parts, num_parts)).astype(np.int64)
        if recv_parts.size == 0:
            recv_offsets = np.zeros(1, dtype=np.int64)

        global_to_local[owned] = np.arange(owned.size)
        global_to_local[halo] = owned.size + np.arange(halo.size)
        local_src = global_to_local[e_src]
        local_dst = global_to_local[e_dst]
        global_to_local[owned] = -1
        global_to_local[halo] = -1

        interior = (local_src < owned.size) & (local_dst < owned.size)
        edge_order = np.argsort(~interior, kind="stable")  # interior first, edge id order kept
        staged.append(
            dict(
                owned=owned,
                halo=halo,
                recv_parts=recv_parts.astype(np.int64),
                recv_offsets=recv_offsets,
                edge_index=np.stack([local_src[edge_order], local_dst[edge_order]]),
                edge_ids=local_edges[edge_order],
                edge_owned=(dst_part[local_edges[edge_order]] == p),
                num_interior=int(np.count_nonzero(interior)),
            )
        )

    recv_index = [{int(q): i for i, q in enumerate(sp["recv_parts"])} for sp in staged]
    parts = []
    for p in range(num_parts):
        # What p sends to q is exactly q's halo block received from p, mapped to p's local ids.
        send_parts, send_chunks = [], []
        for q in range(num_parts):
            if q == p:
                continue
            sq = staged[q]
            i = recv_index[q].get(p)
            if i is None:
                continue
            block = sq["halo"][sq["recv_offsets"][i] : sq["recv_offsets"][i + 1]]
            send_parts.append(q)
            send_chunks.append(np.searchsorted(staged[p]["owned"], block))
        send_offsets = np.zeros(len(send_chunks) + 1, dtype=np.int64)
        if send_chunks:
            send_offsets[1:] = np.cumsum([c.size for c in send_chunks])
        sp = staged[p]
        parts.append(
            PartPlan(
                part=p,
                num_parts=num_parts,
                owned_ids=sp["owned"].astype(np.int64),
                halo_ids=sp["halo"].astype(np.int64),
                recv_parts=sp["recv_parts"],
                recv_offsets=sp["recv_offsets"],
                send_parts=np.asarray(send_parts, dtype=np.int64),
                send_offsets=send_offsets,
                send_ids=(np.concatenate(send_chunks) if send_chunks else np.zeros(0, np.int64)).astype(np.int64),
                edge_index=sp["edge_index"],
                edge_ids=sp["edge_ids"],
                edge_owned=sp["edge_owned"],
                num_interior_edges=sp["num_interior"],
                num_nodes_global=num_nodes,
                num_edges_global=num_edges_global,
                num_positive_edges_global=num_pos_global,
            )
        )
    return PartitionPlan(
        method=method,
        num_parts=num_parts,
        graph_hash=graph_hash,
        owner=owner,
        parts=tuple(parts),
        drops_cut_edges=drop_cut_edges,
        num_cut_edges=num_cut,
        num_true_cut_edges=num_true_cut,
        seconds_partition=seconds_partition,
        seconds_plan=time.perf_counter() - t0,
    )
