"""Communication section: halo bytes per message-passing step, METIS vs geometric vs sectors.

The figures come from the partition quality report
(:func:`bench.common.plans.partition_quality`): forward halo bytes per step
summed over the parts at hidden 64 in fp32 (the backward sends as much
again), plus the largest single rank's share, which is what sets the
exchange time. The naive ``sectors`` plan exchanges nothing but drops the cut
edges; the true edges it loses are measured on a labelled graph (the real
full event has no truth).
"""

from __future__ import annotations

import time

from bench.common.plans import graph_at, partition_quality, plan_for
from bench.common.report import Column, Section
from bench.common.workloads import Workload

METHODS = ("metis", "geometric", "sectors")


def _rows(workload: Workload, parts: tuple[int, ...], repeats: int, hidden: int) -> list[dict]:
    graph = graph_at(workload.path)
    rows = []
    for num_parts in parts:
        for method in METHODS:
            record = partition_quality(graph, method, num_parts, repeats, hidden)
            plan = plan_for(workload.path, num_parts, method)
            max_halo = max(p.num_halo for p in plan.parts)
            max_neighbours = max(len(set(p.recv_parts.tolist()) | set(p.send_parts.tolist())) for p in plan.parts)
            rows.append(
                {
                    "graph": workload.name,
                    "num_parts": num_parts,
                    "method": method,
                    "mib_per_step": record["bytes_per_step"] / 2**20,
                    "max_rank_mib_per_step": max_halo * hidden * 4 / 2**20,
                    "max_neighbours": max_neighbours,
                    "halo_fraction": record["halo_fraction"],
                    "edge_cut_fraction": record["edge_cut_fraction"],
                    "imbalance_edges": record["imbalance_edges"],
                    "true_edges_lost": record["true_edges_lost"],
                    "edges_lost": record["edges_lost"],
                    "seconds_partition": record["seconds_partition"],
                    "seconds_plan": record["seconds_plan"],
                    **{k: v for k, v in record.items() if k not in ("method", "num_parts")},
                }
            )
    return rows


def run(full: Workload | None, labelled: Workload, *, parts: tuple[int, ...] = (2, 4, 8, 16), repeats: int = 3, hidden: int = 64) -> Section:
    """The communication section (see the module docstring)."""
    start = time.perf_counter()
    section = Section(
        name="communication",
        title="Communication: halo bytes per message-passing step",
        columns=[
            Column("graph", "graph"),
            Column("num_parts", "parts"),
            Column("method", "method"),
            Column("mib_per_step", "halo MiB/step (all ranks)", "{:.2f}"),
            Column("max_rank_mib_per_step", "largest rank MiB/step", "{:.2f}"),
            Column("max_neighbours", "max neighbours", "{}"),
            Column("edge_cut_fraction", "edges cut", "{:.2%}"),
            Column("imbalance_edges", "edge imbalance", "{:.3f}"),
            Column("true_edges_lost", "true edges lost", "{:.2%}"),
        ],
    )
    if full is not None:
        section.rows += _rows(full, parts, repeats, hidden)
    section.rows += _rows(labelled, parts, repeats, hidden)
    section.notes += [
        f"Forward halo rows × hidden {hidden} × 4 bytes per message-passing step; a training step makes "
        "(iterations + 1) such exchanges forward and as many gradient exchanges backward.",
        "sectors: the naive scheme (independent detector sectors, cut edges dropped) exchanges nothing; "
        "'true edges lost' is the fraction of the graph's true segments it drops (needs truth, so only on labelled graphs).",
        "Edge imbalance: max / mean local edges over ranks (1.0 = perfect).",
    ]
    section.seconds = time.perf_counter() - start
    return section


def section(ctx) -> Section:
    """Entry point (see :mod:`bench.sections`): the real full event and a labelled simulated event."""
    labelled = ctx.simulated(ctx.size(2000, 10000))
    return run(ctx.real_full(), labelled, parts=ctx.size((2, 4, 8, 16), (2, 4, 8, 16, 32, 64)), repeats=ctx.size(1, 3))
