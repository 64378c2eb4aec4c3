"""Preprocessing section: simulate, read, build and partition times at full event scale.

* simulate + build, read + build: a full-scale simulated event (the
  simulator's default particle count) and its labelled graph, the real full
  event 21000 (125k hits) from its CSV files to its graph, the real small
  labelled event; wall and process CPU seconds side by side (CPU time is what
  a busy shared machine distorts least);
* partition: METIS and geometric plans of the real full event (owner
  assignment + plan building, :func:`bench.common.plans.partition_quality`).

Medians over ``repeats`` runs each (builds after one warm-up call, so numba
compilation is excluded).
"""

from __future__ import annotations

import time

from bench.common.report import Column, Section
from bench.common.timing import median_seconds
from bench.common.workloads import SMALL_EVENT, SMALL_EVENT_DIR, Workload, full_event_prefix


def _graph_row(stage: str, wall: float, cpu: float, stats) -> dict:
    return {
        "stage": stage,
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "num_nodes": stats.num_nodes,
        "num_edges": stats.num_edges,
        "efficiency": stats.efficiency,
        "efficiency_pt1": stats.efficiency_pt1,
        "purity": stats.purity,
    }


def build_rows(repeats: int, full_event, config) -> list[dict]:
    """Simulate and build a full-scale event, read and build the real full event (when present) and the small one."""
    from domainpar.data.graph import build_graph
    from domainpar.data.trackml import load_event
    from domainpar.sim.config import SimulationConfig
    from domainpar.sim.event import simulate_event

    rows = []
    sim_config = SimulationConfig()
    t = median_seconds(lambda: simulate_event(sim_config, 1, 0), repeats, warmup=0)
    event = t.result
    rows.append({"stage": f"simulate ({sim_config.num_particles:,} particles)", "wall_seconds": t.seconds,
                 "cpu_seconds": t.cpu_seconds, "num_nodes": len(event["hits"])})
    t = median_seconds(lambda: build_graph(event["hits"], event["truth"], event["particles"], config=config, event_id=1), repeats)
    rows.append(_graph_row("build simulated event (labelled)", t.seconds, t.cpu_seconds, t.result[1]))
    if full_event is not None:
        t = median_seconds(lambda: load_event(full_event, parts=("hits",)), repeats, warmup=0)
        (hits,) = t.result
        rows.append({"stage": "read real event 21000 hits (CSV)", "wall_seconds": t.seconds, "cpu_seconds": t.cpu_seconds,
                     "num_nodes": len(hits)})
        t = median_seconds(lambda: build_graph(hits, config=config, event_id=21000), repeats)
        rows.append(_graph_row("build real event 21000 (no truth)", t.seconds, t.cpu_seconds, t.result[1]))
    hits, truth, particles = load_event(SMALL_EVENT_DIR / SMALL_EVENT, parts=("hits", "truth", "particles"))
    t = median_seconds(lambda: build_graph(hits, truth, particles, config=config, event_id=1), repeats)
    rows.append(_graph_row("build real small event 1 (labelled)", t.seconds, t.cpu_seconds, t.result[1]))
    return rows


def run(full: Workload | None, *, repeats: int = 3, partition_parts: tuple[int, ...] = (4, 8, 16)) -> Section:
    """The preprocessing section (see the module docstring)."""
    from bench.common.plans import graph_at, partition_quality
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
    section.rows += build_rows(repeats, full_event_prefix(), GraphConfig())
    if full is None:
        section.notes.append("The real full event was not found: its read, build and partition rows are missing.")
    else:
        graph = graph_at(full.path)
        for method in ("metis", "geometric"):
            for num_parts in partition_parts:
                record = partition_quality(graph, method, num_parts, repeats, 64)
                section.rows.append({
                    "stage": f"partition real event 21000: {method}, {num_parts} parts",
                    "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
                    "wall_seconds": record["seconds_partition"] + record["seconds_plan"], "cpu_seconds": None,
                    **{k: record[k] for k in ("seconds_partition", "seconds_plan")},
                })
    section.notes += [
        f"Median of {repeats} run(s) per stage (builds after one warm-up call, so numba compilation is excluded); "
        "partition = owner assignment + halo plan.",
    ]
    section.seconds = time.perf_counter() - start
    return section


def section(ctx) -> Section:
    """Entry point (see :mod:`bench.sections`)."""
    return run(ctx.real_full(), repeats=ctx.size(1, 3))
