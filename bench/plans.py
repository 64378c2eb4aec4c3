"""Partition plans shared by the benchmark sections of one run (memoised per graph, method, parts)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from domainpar.data.event_graph import EventGraph, load_graph
from domainpar.partition import build_plan, partition_graph
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


def largest_part_index(plan: PartitionPlan) -> int:
    """The part with the most local edges (then most local nodes): the rank that sets the peak."""
    best = max(plan.parts, key=lambda p: (p.num_local_edges, p.num_local_nodes, -p.part))
    return best.part
