"""One rank's part of one event: its plan and its slice of the event's arrays (host memory, numpy).

A :class:`PartData` is everything a rank of a domain group needs to run its
part. It is what a part file holds (:func:`domainpar.partition.io.load_part`),
so a rank reads O(E/P) bytes and never the whole event; :func:`cut_part` makes
one from a whole graph and a plan; :func:`whole_graph_part` is the one-part case.

Shapes: n_o owned nodes, E_l local edges, F node features, F_e edge features.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from domainpar.data.event_graph import EventGraph
from domainpar.errors import DomainparError
from domainpar.partition.plan import PartitionPlan, PartPlan, _freeze_arrays, one_part_plan

#: Hash fields are 16 lowercase hex digits.
_HEX = set("0123456789abcdef")


@dataclass(frozen=True, eq=False)
class PartData:
    """One part of one event, ready to be turned into tensors (arrays are read-only)."""

    plan: PartPlan
    """The part's plan: owned/halo ids, send and receive lists, local edges, ownership, global counts."""
    event_id: int
    """TrackML event number of the event."""
    graph_hash: str
    """``EventGraph.content_hash()`` of the whole event graph."""
    plan_hash: str
    """``PartitionPlan.plan_hash`` of the plan this part belongs to; every part of one plan has the same."""
    method: str
    """Partitioner that made the plan ("metis", "geometric", "sectors", "given")."""
    drops_cut_edges: bool
    """True for a sectors plan: cut edges dropped, no halo."""
    num_edges_graph: int
    """Edges E of the whole event graph (the length of an event-wide per-edge array)."""
    x: np.ndarray
    """(n_o, F) float32 features of the owned nodes."""
    edge_attr: np.ndarray
    """(E_l, F_e) float32 features of the local edges."""
    y: np.ndarray | None
    """(E_l,) float32 labels of the local edges, or None for an event without truth."""
    hit_id: np.ndarray
    """(n_o,) int64 TrackML hit ids of the owned nodes."""
    dropped_y: np.ndarray | None
    """(k,) float32 labels of the cut edges a sectors plan drops whose dst this part owns (each dropped edge
    belongs to one part); None for a plan that keeps every edge or an event without truth."""
    source: str = ""
    """Where it came from (a part file's path, or "event <id> part <p>"), for messages."""
    particle_pt: np.ndarray | None = None
    """(n_o,) float32 pT (GeV) of the owned nodes' particles, for the loss's target selection; None without truth."""
    particle_nhits: np.ndarray | None = None
    """(n_o,) int64 hits of the owned nodes' particles in the event; None when the graph does not record them."""
    particle_vertex: np.ndarray | None = None
    """(n_o, 3) float32 production vertices (mm) of the owned nodes' particles; None when the graph does not record them."""

    def __post_init__(self) -> None:
        _freeze_arrays(self)

    @property
    def part(self) -> int:
        return self.plan.part

    @property
    def num_parts(self) -> int:
        return self.plan.num_parts

    @property
    def nbytes(self) -> int:
        """Host bytes held by this part (plan and feature arrays)."""
        arrays = (self.x, self.edge_attr, self.y, self.hit_id, self.dropped_y, self.particle_pt, self.particle_nhits,
                  self.particle_vertex)  # fmt: skip
        return self.plan.nbytes + int(sum(a.nbytes for a in arrays if a is not None))

    def validate(self) -> "PartData":
        """Check the plan (:meth:`PartPlan.validate`) and every array against it.

        Returns:
            ``self``.

        Raises:
            DomainparError: one line naming :attr:`source`, the field, what was expected and what was found.
        """
        source = self.source or f"event {self.event_id} part {self.plan.part}"
        self.plan.validate(source)
        n_o, n_l = self.plan.num_owned, self.plan.num_local_edges
        for name in ("graph_hash", "plan_hash"):
            value = getattr(self, name)
            if not isinstance(value, str) or len(value) != 16 or not set(value) <= _HEX:
                raise DomainparError(f"{source}: {name} must be 16 hex digits (got {value!r:.40})")
        if isinstance(self.event_id, bool) or not isinstance(self.event_id, (int, np.integer)) or self.event_id < 0:
            raise DomainparError(f"{source}: event_id must be a non-negative integer (got {self.event_id!r:.40})")
        specs = {
            "x": (np.float32, 2, n_o),
            "edge_attr": (np.float32, 2, n_l),
            "y": (np.float32, 1, n_l),
            "hit_id": (np.int64, 1, n_o),
            "dropped_y": (np.float32, 1, None),
            "particle_pt": (np.float32, 1, n_o),
            "particle_nhits": (np.int64, 1, n_o),
            "particle_vertex": (np.float32, 2, n_o),
        }
        for name, (dtype, ndim, rows) in specs.items():
            value = getattr(self, name)
            if value is None:
                if name in ("x", "edge_attr", "hit_id"):
                    raise DomainparError(f"{source}: {name} must be an array (got None)")
                continue
            if not isinstance(value, np.ndarray) or value.dtype != dtype or value.ndim != ndim:
                found = f"{value.dtype.name} of {value.ndim} dims" if isinstance(value, np.ndarray) else type(value).__name__
                raise DomainparError(f"{source}: {name} must be a {ndim}-dimensional {np.dtype(dtype).name} array (got {found})")
            if rows is not None and value.shape[0] != rows:
                raise DomainparError(f"{source}: {name} must have {rows} rows, one per {'owned node' if rows == n_o else 'local edge'} (got {value.shape[0]})")
        if self.particle_vertex is not None and self.particle_vertex.shape[1:] != (3,):
            raise DomainparError(f"{source}: particle_vertex must have 3 columns (got shape {self.particle_vertex.shape})")
        for name in ("x", "edge_attr", "particle_pt", "particle_vertex"):
            value = getattr(self, name)
            if value is not None and value.size and not np.isfinite(value).all():
                raise DomainparError(f"{source}: {name} must be finite (got {int(np.count_nonzero(~np.isfinite(value)))} NaN/inf values)")
        for name in ("y", "dropped_y"):
            value = getattr(self, name)
            if value is not None and value.size and not ((value >= 0) & (value <= 1)).all():
                raise DomainparError(f"{source}: {name} must hold labels in [0, 1] (got values outside)")
        if self.dropped_y is not None and not self.drops_cut_edges:
            raise DomainparError(f"{source}: dropped_y must be absent in a plan that keeps cut edges (got {self.dropped_y.shape[0]} labels)")
        if self.num_edges_graph < self.plan.num_edges_global:
            raise DomainparError(
                f"{source}: num_edges_graph must be at least num_edges_global={self.plan.num_edges_global} (got {self.num_edges_graph})"
            )
        if n_l and self.plan.edge_ids.max() >= self.num_edges_graph:
            raise DomainparError(f"{source}: edge_ids must be within [0, {self.num_edges_graph}) (got up to {int(self.plan.edge_ids.max())})")
        return self


def _dropped_labels(graph: EventGraph, plan: PartitionPlan, part: int) -> np.ndarray | None:
    if not plan.drops_cut_edges or graph.y is None:
        return None
    src, dst = graph.edge_index
    owner = plan.owner
    dropped = (owner[dst] == part) & (owner[src] != part)
    return np.ascontiguousarray(graph.y[dropped])


#: Per-node truth of the owned nodes a part carries for the loss (target-particle selection).
PARTICLE_ARRAYS = ("particle_pt", "particle_nhits", "particle_vertex")


def _owned_rows(array: np.ndarray | None, owned_ids: np.ndarray, whole: bool) -> np.ndarray | None:
    if array is None:
        return None
    return array if whole else array[owned_ids]


def cut_part(graph: EventGraph, plan: PartitionPlan, part: int, *, graph_hash: str | None = None) -> PartData:
    """Part ``part`` of ``plan`` with its slice of ``graph``'s arrays (O(E_l + n_o) copies, plus O(E) for a sectors plan).

    Args:
        graph: the whole event graph the plan was made from.
        plan: its plan.
        part: 0 .. plan.num_parts-1.
        graph_hash: ``graph.content_hash()`` if the caller has it already (it costs O(E)).

    Raises:
        DomainparError: the plan was made from another graph, or ``part`` is out of range.
    """
    graph_hash = graph_hash or graph.content_hash()
    if plan.graph_hash and plan.graph_hash != graph_hash:
        raise DomainparError(
            f"event {graph.event_id}: plan was made from graph {plan.graph_hash}, not this graph ({graph_hash})"
        )
    if plan.num_nodes != graph.num_nodes:
        raise DomainparError(f"event {graph.event_id}: plan covers {plan.num_nodes} nodes, the graph has {graph.num_nodes}")
    if not 0 <= part < plan.num_parts:
        raise DomainparError(f"part must be within [0, {plan.num_parts}) (got {part})")
    p = plan.parts[part]
    whole = plan.num_parts == 1
    # The one-part plan keeps every row in order: hand the graph's own arrays over, no copy.
    edge_ids = p.edge_ids
    return PartData(
        plan=p,
        event_id=int(graph.event_id),
        graph_hash=graph_hash,
        plan_hash=plan.plan_hash,
        method=plan.method,
        drops_cut_edges=plan.drops_cut_edges,
        num_edges_graph=graph.num_edges,
        x=graph.x if whole else graph.x[p.owned_ids],
        edge_attr=graph.edge_attr if whole else graph.edge_attr[edge_ids],
        y=None if graph.y is None else (graph.y if whole else graph.y[edge_ids]),
        hit_id=graph.hit_id if whole else graph.hit_id[p.owned_ids],
        dropped_y=_dropped_labels(graph, plan, part),
        source=f"event {graph.event_id} part {part}",
        **{name: _owned_rows(getattr(graph, name), p.owned_ids, whole) for name in PARTICLE_ARRAYS},
    )


def whole_graph_part(graph: EventGraph) -> PartData:
    """The whole event as the one part of a one-part plan (no halo, every edge owned), without copying arrays."""
    graph_hash = graph.content_hash()
    plan = one_part_plan(graph.edge_index, graph.num_nodes, y=graph.y, graph_hash=graph_hash)
    return cut_part(graph, plan, 0, graph_hash=graph_hash)
