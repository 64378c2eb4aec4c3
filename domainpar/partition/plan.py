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

A plan is immutable: its arrays are read-only views, and :meth:`PartPlan.validate`
/ :meth:`PartitionPlan.validate` check every invariant above (every loader calls
them, so a damaged or hostile plan file is refused before a rank uses it).
:attr:`PartitionPlan.plan_hash` names a plan (graph, owners, sectors or not), so
the ranks of a group can check they hold parts of the same one.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, fields

import numpy as np

from domainpar.arrays import unique
from domainpar.errors import DomainparError

#: PartPlan array fields and their dtype (everything int64 but the ownership mask).
PART_ARRAY_DTYPES = {
    "owned_ids": np.int64,
    "halo_ids": np.int64,
    "recv_parts": np.int64,
    "recv_offsets": np.int64,
    "send_parts": np.int64,
    "send_offsets": np.int64,
    "send_ids": np.int64,
    "edge_index": np.int64,
    "edge_ids": np.int64,
    "edge_owned": np.bool_,
}
#: PartPlan integer fields besides ``part`` and ``num_parts``.
PART_SCALARS = ("num_interior_edges", "num_nodes_global", "num_edges_global", "num_positive_edges_global")


def read_only(array: np.ndarray) -> np.ndarray:
    """A read-only view of ``array`` (the caller's own array keeps its flags)."""
    view = array.view()
    view.flags.writeable = False
    return view


def _freeze_arrays(obj: object) -> None:
    for f in fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if isinstance(value, np.ndarray) and value.flags.writeable:
            object.__setattr__(obj, f.name, read_only(value))


def _fail(source: str, what: str, expected: str, found: object) -> DomainparError:
    return DomainparError(f"{source}: {what} must be {expected} (got {found})")


def _strictly_ascending(array: np.ndarray) -> bool:
    return bool(array.size < 2 or np.all(array[1:] > array[:-1]))


def _span(array: np.ndarray) -> str:
    return f"values in [{int(array.min())}, {int(array.max())}]" if array.size else "no values"


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

    def __post_init__(self) -> None:
        _freeze_arrays(self)

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

    def recv_slice(self, i: int) -> slice:
        """Halo rows (relative to num_owned) received from recv_parts[i]."""
        return slice(int(self.recv_offsets[i]), int(self.recv_offsets[i + 1]))

    def send_slice(self, i: int) -> slice:
        """Entries of send_ids that go to send_parts[i]."""
        return slice(int(self.send_offsets[i]), int(self.send_offsets[i + 1]))

    @property
    def nbytes(self) -> int:
        """Bytes held by this part's arrays."""
        return int(sum(getattr(self, name).nbytes for name in PART_ARRAY_DTYPES))

    def validate(self, source: str = "part plan") -> "PartPlan":
        """Check every invariant of the module docstring one part can check on its own, in O(local edges + local
        nodes), and the dtypes and shapes of every array.

        Args:
            source: named in the error (a file, "part 3").

        Returns:
            ``self``, so a loader can write ``return part.validate(path)``.

        Raises:
            DomainparError: one line naming ``source``, the field, what was expected and what was found.
        """
        for name in ("part", "num_parts", *PART_SCALARS):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise _fail(source, name, "an integer", type(value).__name__)
        if self.num_parts < 1 or not 0 <= self.part < self.num_parts:
            raise _fail(source, "part", f"in [0, num_parts={self.num_parts})", self.part)
        for name, dtype in PART_ARRAY_DTYPES.items():
            value = getattr(self, name)
            if not isinstance(value, np.ndarray):
                raise _fail(source, name, "a numpy array", type(value).__name__)
            if value.dtype != dtype:
                raise _fail(source, name, f"of dtype {np.dtype(dtype).name}", value.dtype.name)
            if value.ndim != (2 if name == "edge_index" else 1):
                raise _fail(source, name, f"{2 if name == 'edge_index' else 1}-dimensional", f"shape {value.shape}")
        n_nodes = self.num_nodes_global
        n_owned, n_halo = self.num_owned, self.num_halo
        n_local = n_owned + n_halo
        owned, halo = self.owned_ids, self.halo_ids
        if n_owned < 1:
            raise _fail(source, "owned_ids", "non-empty (every part owns a node)", "none")
        if n_local > n_nodes:
            raise _fail(source, "num_nodes_global", f"at least the {n_local} local nodes", n_nodes)
        if owned[0] < 0 or owned[-1] >= n_nodes or not _strictly_ascending(owned):
            raise _fail(source, "owned_ids", f"strictly ascending within [0, {n_nodes})", _span(owned))
        if n_halo and (halo.min() < 0 or halo.max() >= n_nodes):
            raise _fail(source, "halo_ids", f"within [0, {n_nodes})", _span(halo))
        if n_halo:
            at = np.minimum(np.searchsorted(owned, halo), n_owned - 1)
            if np.any(owned[at] == halo):
                raise _fail(source, "halo_ids", "disjoint from owned_ids", "a node both owned and halo")
        for kind, parts, offsets, total in (
            ("recv", self.recv_parts, self.recv_offsets, n_halo),
            ("send", self.send_parts, self.send_offsets, self.send_ids.shape[0]),
        ):
            if parts.size and (parts.min() < 0 or parts.max() >= self.num_parts or np.any(parts == self.part)):
                raise _fail(source, f"{kind}_parts", f"other parts within [0, {self.num_parts})", _span(parts))
            if not _strictly_ascending(parts):
                raise _fail(source, f"{kind}_parts", "strictly ascending", parts.tolist()[:8])
            if offsets.shape != (parts.shape[0] + 1,):
                raise _fail(source, f"{kind}_offsets", f"of shape ({parts.shape[0] + 1},)", offsets.shape)
            if offsets[0] != 0 or offsets[-1] != total or not _strictly_ascending(offsets):
                raise _fail(source, f"{kind}_offsets", f"strictly ascending from 0 to {total}", offsets.tolist()[:8])
        for i in range(self.recv_parts.shape[0]):
            if not _strictly_ascending(halo[self.recv_slice(i)]):
                raise _fail(source, "halo_ids", "ascending within each owner's block", f"a disorder in the block of part {int(self.recv_parts[i])}")
        if self.send_ids.size and (self.send_ids.min() < 0 or self.send_ids.max() >= n_owned):
            raise _fail(source, "send_ids", f"owned rows within [0, {n_owned})", _span(self.send_ids))
        num_edges = self.edge_ids.shape[0]
        edge_index = self.edge_index
        if edge_index.shape != (2, num_edges) or self.edge_owned.shape != (num_edges,):
            raise _fail(source, "edge_index / edge_owned", f"of shapes (2, {num_edges}) / ({num_edges},) like edge_ids",
                        f"{edge_index.shape} / {self.edge_owned.shape}")
        if num_edges and (edge_index.min() < 0 or edge_index.max() >= n_local):
            raise _fail(source, "edge_index", f"local ids within [0, {n_local})", _span(edge_index))
        if num_edges and self.edge_ids.min() < 0:
            raise _fail(source, "edge_ids", "non-negative", _span(self.edge_ids))
        n_interior = self.num_interior_edges
        if not 0 <= n_interior <= num_edges:
            raise _fail(source, "num_interior_edges", f"within [0, {num_edges}]", n_interior)
        src_owned = edge_index[0] < n_owned
        dst_owned = edge_index[1] < n_owned
        interior = src_owned & dst_owned
        if not (interior[:n_interior].all() and not interior[n_interior:].any()):
            raise _fail(source, "edge_index", f"interior edges (both ends owned) first, exactly {n_interior} of them",
                        f"{int(interior.sum())} interior edges, not all first")
        if not (src_owned | dst_owned).all():
            raise _fail(source, "edge_index", "edges with at least one owned end", "an edge between two halo nodes")
        if not (_strictly_ascending(self.edge_ids[:n_interior]) and _strictly_ascending(self.edge_ids[n_interior:])):
            raise _fail(source, "edge_ids", "ascending within the interior and the boundary edges", "a repeated or unordered id")
        if not np.array_equal(self.edge_owned, dst_owned):
            raise _fail(source, "edge_owned", "true exactly for the edges whose dst is owned", f"{int(np.count_nonzero(self.edge_owned != dst_owned))} edges differing")
        if n_halo:
            touched = np.zeros(n_local, dtype=bool)
            touched[edge_index[0]] = True
            touched[edge_index[1]] = True
            if not touched[n_owned:].all():
                raise _fail(source, "halo_ids", "endpoints of local edges", f"{int(np.count_nonzero(~touched[n_owned:]))} halo nodes on no edge")
        owned_edges = int(np.count_nonzero(self.edge_owned))
        if self.num_edges_global < owned_edges:
            raise _fail(source, "num_edges_global", f"at least the {owned_edges} edges this part owns", self.num_edges_global)
        if not 0 <= self.num_positive_edges_global <= self.num_edges_global:
            raise _fail(source, "num_positive_edges_global", f"within [0, num_edges_global={self.num_edges_global}]", self.num_positive_edges_global)
        return self


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
    plan_hash: str = ""
    """:func:`plan_hash` of (graph_hash, owner, num_parts, drops_cut_edges); "" computes it."""

    def __post_init__(self) -> None:
        _freeze_arrays(self)
        if not self.plan_hash:
            object.__setattr__(
                self, "plan_hash", plan_hash(self.graph_hash, self.owner, self.num_parts, self.drops_cut_edges)
            )

    @property
    def num_nodes(self) -> int:
        return int(self.owner.shape[0])

    def validate(self, source: str = "plan") -> "PartitionPlan":
        """Check every part (:meth:`PartPlan.validate`) and how the parts fit together, in O(E + P·N): owned ids
        exactly the nodes each part owns, every halo block exactly what its owner sends, one set of global counts,
        the plan hash of the owners.

        Returns:
            ``self``.

        Raises:
            DomainparError: one line naming ``source`` and the broken invariant.
        """
        owner = self.owner
        if not isinstance(owner, np.ndarray) or owner.dtype != np.int64 or owner.ndim != 1:
            raise _fail(source, "owner", "a one-dimensional int64 array", getattr(owner, "dtype", type(owner).__name__))
        if self.num_parts < 1 or len(self.parts) != self.num_parts:
            raise _fail(source, "parts", f"num_parts={self.num_parts} part plans", len(self.parts))
        num_nodes = owner.shape[0]
        if num_nodes and (owner.min() < 0 or owner.max() >= self.num_parts):
            raise _fail(source, "owner", f"within [0, {self.num_parts})", _span(owner))
        order = np.argsort(owner, kind="stable")
        bounds = np.searchsorted(owner[order], np.arange(self.num_parts + 1))
        first = self.parts[0] if self.parts else None
        for p, part in enumerate(self.parts):
            where = f"{source}: part {p}"
            if not isinstance(part, PartPlan):
                raise _fail(source, f"parts[{p}]", "a PartPlan", type(part).__name__)
            if part.part != p or part.num_parts != self.num_parts:
                raise _fail(where, "part / num_parts", f"{p} / {self.num_parts}", f"{part.part} / {part.num_parts}")
            part.validate(where)
            counts = (part.num_nodes_global, part.num_edges_global, part.num_positive_edges_global)
            if part.num_nodes_global != num_nodes or counts != (first.num_nodes_global, first.num_edges_global, first.num_positive_edges_global):
                raise _fail(where, "global counts", f"those of part 0 and the owner vector ({num_nodes} nodes)", counts)
            if not np.array_equal(part.owned_ids, order[bounds[p] : bounds[p + 1]]):
                raise _fail(where, "owned_ids", f"exactly the nodes whose owner is {p}", f"{part.num_owned} other ids")
            if self.drops_cut_edges and (part.num_halo or part.send_ids.size):
                raise _fail(where, "halo_ids", "empty in a plan that drops cut edges", f"{part.num_halo} halo nodes")
        for part in self.parts:
            for i, q in enumerate(part.recv_parts):
                block = part.halo_ids[part.recv_slice(i)]
                sender = self.parts[int(q)]
                j = np.flatnonzero(sender.send_parts == part.part)
                sent = sender.owned_ids[sender.send_ids[sender.send_slice(int(j[0]))]] if j.size else None
                if sent is None or not np.array_equal(sent, block):
                    raise _fail(f"{source}: part {part.part}", f"halo block from part {int(q)}",
                                f"exactly the rows part {int(q)} sends", "a different list")
            for q in part.send_parts:
                if part.part not in self.parts[int(q)].recv_parts:
                    raise _fail(f"{source}: part {part.part}", "send_parts", "parts that receive from it", f"part {int(q)} receives nothing")
        expected = plan_hash(self.graph_hash, owner, self.num_parts, self.drops_cut_edges)
        if self.plan_hash != expected:
            raise _fail(source, "plan_hash", f"{expected} (the hash of its owners)", self.plan_hash)
        return self


def _edge_array(edge_index: np.ndarray) -> np.ndarray:
    edge_index = np.asarray(edge_index, dtype=np.int64)
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise DomainparError(f"edge_index must have shape (2, E) (got {edge_index.shape})")
    return edge_index


def _check_node_ids(edge_index: np.ndarray, num_nodes: int) -> None:
    if edge_index.size and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
        raise DomainparError(
            f"edge_index must hold node ids within [0, {num_nodes}) "
            f"(got values in [{int(edge_index.min())}, {int(edge_index.max())}])"
        )


def one_part_plan(
    edge_index: np.ndarray,
    num_nodes: int,
    *,
    y: np.ndarray | None = None,
    method: str = "given",
    graph_hash: str = "",
    drop_cut_edges: bool = False,
) -> PartitionPlan:
    """The one-part plan of a whole graph in O(E) without copying the edges: what ``build_plan`` gives for one part.

    Every node owned (local id = global id), every edge interior and owned, in
    edge order, no halo. Single-process training, inference and the reference
    of the exactness checks run this plan through the same code as a partitioned one.

    Args:
        edge_index: (2, E) int64 global node ids; the part's ``edge_index`` is a read-only view of it.
        num_nodes: N.
        y: (E,) optional labels, to count positive edges.
        method: recorded in the plan.
        graph_hash: recorded in the plan.
        drop_cut_edges: recorded in the plan (a one-part sectors plan cuts nothing either).
    """
    edge_index = _edge_array(edge_index)
    if num_nodes < 1:
        raise DomainparError(f"a plan needs at least one node (got {num_nodes})")
    num_edges = int(edge_index.shape[1])
    _check_node_ids(edge_index, num_nodes)
    positives = 0 if y is None else int(np.count_nonzero(np.asarray(y) > 0.5))
    empty = np.zeros(0, dtype=np.int64)
    zero = np.zeros(1, dtype=np.int64)
    part = PartPlan(
        part=0,
        num_parts=1,
        owned_ids=np.arange(num_nodes, dtype=np.int64),
        halo_ids=empty,
        recv_parts=empty,
        recv_offsets=zero,
        send_parts=empty,
        send_offsets=zero,
        send_ids=empty,
        edge_index=edge_index,
        edge_ids=np.arange(num_edges, dtype=np.int64),
        edge_owned=np.ones(num_edges, dtype=bool),
        num_interior_edges=num_edges,
        num_nodes_global=num_nodes,
        num_edges_global=num_edges,
        num_positive_edges_global=positives,
    )
    return PartitionPlan(
        method=method,
        num_parts=1,
        graph_hash=graph_hash,
        owner=np.zeros(num_nodes, dtype=np.int64),
        parts=(part,),
        drops_cut_edges=drop_cut_edges,
        num_cut_edges=0,
        num_true_cut_edges=0,
    )


def plan_hash(graph_hash: str, owner: np.ndarray, num_parts: int, drops_cut_edges: bool) -> str:
    """16 hex digits naming a plan: the graph it was made from, its owners, its part count and kind.

    The owner vector determines every part given the graph, so two plans with the same
    hash hold the same parts; the partitioner's name is not part of it.
    """
    digest = hashlib.sha256(b"domainpar-plan-1")
    digest.update(str(graph_hash).encode())
    digest.update(np.int64(num_parts).tobytes())
    digest.update(b"\x01" if drops_cut_edges else b"\x00")
    digest.update(np.ascontiguousarray(owner, dtype=np.int64).tobytes())
    return digest.hexdigest()[:16]


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
    t0 = time.perf_counter()
    edge_index = _edge_array(edge_index)
    num_nodes = int(np.asarray(owner).shape[0])
    owner = _check_owner(owner, num_nodes, num_parts)
    if num_parts == 1:
        plan = one_part_plan(
            edge_index, num_nodes, y=y, method=method, graph_hash=graph_hash, drop_cut_edges=drop_cut_edges
        )
        object.__setattr__(plan, "seconds_partition", seconds_partition)
        object.__setattr__(plan, "seconds_plan", time.perf_counter() - t0)
        return plan
    _check_node_ids(edge_index, num_nodes)
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
        recv_parts = unique(halo_owner)
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
