"""Quality of a partition plan: balance, cut, halo and communication volume.

Definitions (P parts, N nodes, E edges of the graph):

* edge_cut_fraction: edges whose endpoints have different owners / E.
* halo_fraction: sum over parts of halo nodes / N (how many extra node rows
  the domain group holds; 0 for sectors plans).
* imbalance_edges / imbalance_nodes: max / mean over parts of local edges
  (owned and replicated) / local nodes (owned + halo) — the slowest rank's
  work relative to a perfect split, 1.0 is perfect.
* bytes_per_step: bytes of halo rows received per message-passing step in the
  forward pass, summed over parts: sum_p num_halo_p × hidden × itemsize. Every
  halo row is sent once by its owner, so this is also the bytes sent. The
  backward pass sends the same number of gradient rows back (halo → owner), so
  a training step moves 2 × bytes_per_step per message-passing iteration.
* true_edges_lost (sectors only, needs labels): true edges among the dropped
  cut edges / all true edges of the graph; edges_lost is the same over all edges.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from domainpar.errors import DomainparError
from domainpar.partition.plan import PartitionPlan


@dataclass(frozen=True)
class PartQuality:
    """Sizes of one part."""

    part: int
    """Part index."""
    owned_nodes: int
    """Nodes the part owns."""
    halo_nodes: int
    """Halo nodes it receives every step."""
    local_edges: int
    """Edges it computes (owned plus replicated cut edges)."""
    owned_edges: int
    """Edges it owns for the loss."""
    interior_edges: int
    """Local edges with both ends owned (computable before the halo arrives)."""
    boundary_edges: int
    """Local edges with a halo end."""
    neighbour_parts: int
    """Distinct parts it exchanges halo rows with (receives from or sends to)."""


@dataclass(frozen=True)
class PartitionReport:
    """Quality of one plan; :meth:`to_dict` gives the CLI's JSON record."""

    method: str
    """Partitioner name."""
    num_parts: int
    """P."""
    num_nodes: int
    """Nodes of the graph."""
    num_edges: int
    """Edges of the graph (including edges a sectors plan drops)."""
    parts: tuple[PartQuality, ...]
    """Per-part sizes."""
    edge_cut_fraction: float
    """Cut edges / all edges."""
    halo_fraction: float
    """Sum of halo nodes / nodes."""
    imbalance_edges: float
    """max / mean local edges over parts."""
    imbalance_nodes: float
    """max / mean local nodes (owned + halo) over parts."""
    hidden: int
    """Hidden size used for bytes_per_step."""
    dtype: str
    """Floating dtype used for bytes_per_step."""
    bytes_per_step: int
    """Forward halo bytes per message-passing step summed over parts (backward moves as much again)."""
    seconds_partition: float
    """Wall time to assign owners."""
    seconds_plan: float
    """Wall time to build the plan."""
    edges_lost: float | None
    """Sectors plans: dropped edges / all edges; None otherwise."""
    true_edges_lost: float | None
    """Sectors plans on labelled graphs: dropped true edges / all true edges; None otherwise."""

    @property
    def seconds(self) -> float:
        return self.seconds_partition + self.seconds_plan

    def to_dict(self) -> dict[str, object]:
        """The JSON record of ``domainpar partition --json`` (plus per-part detail under "parts")."""
        record: dict[str, object] = {
            "num_parts": self.num_parts,
            "method": self.method,
            "edge_cut_fraction": self.edge_cut_fraction,
            "halo_fraction": self.halo_fraction,
            "imbalance_edges": self.imbalance_edges,
            "imbalance_nodes": self.imbalance_nodes,
            "halo_nodes": [p.halo_nodes for p in self.parts],
            "bytes_per_step": self.bytes_per_step,
            "seconds": self.seconds,
            "seconds_partition": self.seconds_partition,
            "seconds_plan": self.seconds_plan,
            "hidden": self.hidden,
            "dtype": self.dtype,
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "parts": [asdict(p) for p in self.parts],
        }
        if self.method == "sectors" or self.edges_lost is not None:
            record["true_edges_lost"] = self.true_edges_lost
            record["edges_lost"] = self.edges_lost
        return record


def itemsize_of(dtype: str) -> int:
    """Bytes per element of a floating dtype name (float16, bfloat16, float32, float64)."""
    if dtype == "bfloat16":
        return 2
    try:
        kind = np.dtype(dtype)
    except TypeError:
        raise DomainparError(f"dtype must be a floating dtype name such as float32 (got {dtype!r})") from None
    if kind.kind != "f":
        raise DomainparError(f"dtype must be a floating dtype name such as float32 (got {dtype!r})")
    return kind.itemsize


def partition_report(plan: PartitionPlan, *, hidden: int = 64, dtype: str = "float32") -> PartitionReport:
    """Measure ``plan``.

    Args:
        plan: the plan.
        hidden: node feature width exchanged per halo row.
        dtype: dtype of the exchanged rows ("float32", "float16", "bfloat16", "float64").
    """
    if hidden < 1:
        raise DomainparError(f"hidden must be at least 1 (got {hidden})")
    itemsize = itemsize_of(dtype)
    parts = []
    for part in plan.parts:
        neighbours = set(part.recv_parts.tolist()) | set(part.send_parts.tolist())
        parts.append(
            PartQuality(
                part=part.part,
                owned_nodes=part.num_owned,
                halo_nodes=part.num_halo,
                local_edges=part.num_local_edges,
                owned_edges=int(np.count_nonzero(part.edge_owned)),
                interior_edges=part.num_interior_edges,
                boundary_edges=part.num_boundary_edges,
                neighbour_parts=len(neighbours),
            )
        )
    first = plan.parts[0]
    num_edges = first.num_edges_global + (plan.num_cut_edges if plan.drops_cut_edges else 0)
    num_nodes = first.num_nodes_global
    local_edges = np.array([p.local_edges for p in parts], dtype=np.float64)
    local_nodes = np.array([p.owned_nodes + p.halo_nodes for p in parts], dtype=np.float64)
    total_halo = sum(p.halo_nodes for p in parts)

    def ratio(values: np.ndarray) -> float:
        return float(values.max() / values.mean()) if values.mean() > 0 else 1.0

    edges_lost = true_edges_lost = None
    if plan.drops_cut_edges:
        edges_lost = plan.num_cut_edges / num_edges if num_edges else 0.0
        total_true = first.num_positive_edges_global + plan.num_true_cut_edges
        true_edges_lost = plan.num_true_cut_edges / total_true if total_true else None
    return PartitionReport(
        method=plan.method,
        num_parts=plan.num_parts,
        num_nodes=num_nodes,
        num_edges=num_edges,
        parts=tuple(parts),
        edge_cut_fraction=plan.num_cut_edges / num_edges if num_edges else 0.0,
        halo_fraction=total_halo / num_nodes if num_nodes else 0.0,
        imbalance_edges=ratio(local_edges),
        imbalance_nodes=ratio(local_nodes),
        hidden=int(hidden),
        dtype=dtype,
        bytes_per_step=int(total_halo * hidden * itemsize),
        seconds_partition=plan.seconds_partition,
        seconds_plan=plan.seconds_plan,
        edges_lost=edges_lost,
        true_edges_lost=true_edges_lost,
    )


def format_report_table(reports: list[tuple[str, PartitionReport]]) -> str:
    """A plain-text table, one row per (label, report), for the CLI."""
    header = (
        f"{'event':>10} {'method':>9} {'P':>3} {'cut':>7} {'halo':>7} {'imb_E':>6} {'imb_N':>6} "
        f"{'MB/step':>8} {'part_s':>7} {'plan_s':>7} {'lost':>7}"
    )
    lines = [header, "-" * len(header)]
    for label, r in reports:
        lost = "-" if r.true_edges_lost is None and r.edges_lost is None else (
            f"{r.true_edges_lost:.2%}" if r.true_edges_lost is not None else f"{r.edges_lost:.2%}*"
        )
        lines.append(
            f"{label:>10} {r.method:>9} {r.num_parts:>3} {r.edge_cut_fraction:>7.2%} {r.halo_fraction:>7.2%} "
            f"{r.imbalance_edges:>6.3f} {r.imbalance_nodes:>6.3f} {r.bytes_per_step / 1e6:>8.2f} "
            f"{r.seconds_partition:>7.3f} {r.seconds_plan:>7.3f} {lost:>7}"
        )
    return "\n".join(lines)
