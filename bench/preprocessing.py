"""Preprocessing section: simulate, read, build and partition times at full event scale.

* simulate + build, read + build: ``bench/bench_preprocess.py``'s ``run`` — a
  full-scale simulated event (the simulator's default particle count) and its
  labelled graph, the real full event 21000 (125k hits) from its CSV files
  to its graph, the real small labelled event; wall and process CPU seconds
  side by side (CPU time is what a busy shared machine distorts least);
* partition: METIS and geometric plans of the real full event (owner
  assignment + plan building), through ``bench/bench_partition.py``'s ``measure``.

Medians over ``repeats`` runs each.
"""

from __future__ import annotations

import time

from bench.report import Column, Section
from bench.workloads import SHARED_TRACKML, FULL_EVENT, Workload


def run(full: Workload | None, *, repeats: int = 3, partition_parts: tuple[int, ...] = (4, 8, 16)) -> Section:
    """The preprocessing section (see the module docstring)."""
    from bench import bench_preprocess
    from bench.bench_partition import measure
    from bench.plans import graph_at
    from domainpar.data.graph import GraphConfig

    start = time.perf_counter()
    section = Section(
        name="preprocessing",
        title="Preprocessing at full event scale",
        columns=[
            Column("stage", "stage"),
            Column("num_nodes", "nodes / hits", "{:,}"),
            Column("num_edges", "edges", "{:,}"),
            Column("wall_seconds", "wall s (median)", "{:.2f}"),
            Column("cpu_seconds", "CPU s (median)", "{:.2f}"),
            Column("efficiency_pt1", "true segments kept, pT > 1 GeV", "{:.4f}"),
        ],
    )
    section.rows += bench_preprocess.run(repeats, SHARED_TRACKML / FULL_EVENT, GraphConfig())
    if full is None:
        section.notes.append("The real full event was not found: its read, build and partition rows are missing.")
    else:
        graph = graph_at(full.path)
        for method in ("metis", "geometric"):
            for num_parts in partition_parts:
                record = measure(graph, method, num_parts, repeats, 64)
                section.rows.append({
                    "stage": f"partition real event 21000: {method}, {num_parts} parts",
                    "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
                    "wall_seconds": record["seconds_partition"] + record["seconds_plan"], "cpu_seconds": None,
                    **{k: record[k] for k in ("seconds_partition", "seconds_plan")},
                })
    section.notes += [
        f"Median of {repeats} run(s) per stage (builds after one warm-up call, so numba compilation is excluded); "
        "partition = owner assignment + halo plan.",
        "Rows from bench/bench_preprocess.py (simulate, read, build) and bench/bench_partition.py (partition).",
    ]
    section.seconds = time.perf_counter() - start
    return section
