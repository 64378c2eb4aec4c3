"""Partition plans shared by the sections of one run (memoised per graph, method, parts) and their quality."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from domainpar.data.event_graph import EventGraph
from domainpar.data.graph_files import load_graph
from domainpar.partition import build_plan, partition_graph
from domainpar.partition.local_graph import LocalGraph
from domainpar.partition.plan import PartitionPlan


@lru_cache(maxsize=4)
def graph_at(path: Path) -> EventGraph:
    """The graph file at ``path``, loaded once per run."""
    return load_graph(path)


@lru_cache(maxsize=64)
def plan_for(path: Path, num_parts: int, method: str) -> PartitionPlan:
    """The plan of the graph at ``path`` (one part: the whole graph, no partitioner)."""
    graph = graph_at(path)
    if num_parts == 1:
        return build_plan(graph.edge_index, np.zeros(graph.num_nodes, np.int64), 1, y=graph.y, graph_hash=graph.content_hash())
    return partition_graph(graph, num_parts, method=method, seed=0)


def part_at(path: Path, num_parts: int, method: str, part: int) -> LocalGraph:
    """Part ``part`` of :func:`plan_for`'s plan as a rank gets it, on the CPU in float32.

    Through the seam every caller uses (:func:`domainpar.parallel.part.load_host_part`
    then :func:`~domainpar.parallel.part.stage`), so a benchmark measures the
    tensors training runs on; no exchange (that needs a group: use ``rank_part``).
    """
    from domainpar.parallel.part import load_host_part, stage

    return stage(load_host_part(graph_at(path), part, plan=plan_for(path, num_parts, method)), "cpu").graph


def largest_part_index(plan: PartitionPlan) -> int:
    """The part with the most local edges (then most local nodes): the rank that sets the peak."""
    best = max(plan.parts, key=lambda p: (p.num_local_edges, p.num_local_nodes, -p.part))
    return best.part


def partition_quality(graph: EventGraph, method: str, num_parts: int, repeats: int, hidden: int) -> dict:
    """Partition ``graph`` ``repeats`` times: the quality report plus median partition and plan seconds.

    Returns:
        edge cut, halo fraction, edge/node imbalance, halo bytes per message-passing step
        (``hidden`` wide, fp32), edges and true edges lost (sectors), and the median
        ``seconds_partition`` / ``seconds_plan``.
    """
    import statistics

    from domainpar.partition.report import partition_report

    part_s, plan_s = [], []
    for _ in range(repeats):
        plan = partition_graph(graph, num_parts, method, seed=0)
        part_s.append(plan.seconds_partition)
        plan_s.append(plan.seconds_plan)
    report = partition_report(plan, hidden=hidden, dtype="float32")
    return {
        "event_id": graph.event_id,
        "method": method,
        "num_parts": num_parts,
        "edge_cut_fraction": report.edge_cut_fraction,
        "halo_fraction": report.halo_fraction,
        "imbalance_edges": report.imbalance_edges,
        "imbalance_nodes": report.imbalance_nodes,
        "bytes_per_step": report.bytes_per_step,
        "seconds_partition": statistics.median(part_s),
        "seconds_plan": statistics.median(plan_s),
        "edges_lost": report.edges_lost,
        "true_edges_lost": report.true_edges_lost,
    }
