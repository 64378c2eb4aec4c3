"""Preprocessing section: simulate, read, build and partition times at full event scale.

* read + build: the real full event 21000 (125k hits) from its CSV files to
  its hit graph with the default cuts;
* simulate + build: one full-scale simulated event (the simulator's default
  particle count) and its labelled graph;
* partition: METIS and geometric plans of the real full event (owner
  assignment and plan building).

Medians over ``repeats`` runs each, one process with torch/numba defaults.
"""

from __future__ import annotations

import statistics
import time

from bench.report import Column, Section
from bench.workloads import Workload, full_event_prefix


def _median_time(fn, repeats: int) -> tuple[float, object]:
    samples, value = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        value = fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), value


def run(full: Workload | None, *, repeats: int = 3, partition_parts: tuple[int, ...] = (4, 8, 16)) -> Section:
    """The preprocessing section (see the module docstring)."""
    from domainpar.data.graph import build_graph
    from domainpar.data.simulate import SimulationConfig, simulate_event
    from domainpar.data.trackml import load_event
    from domainpar.partition import partition_graph

    start = time.perf_counter()
    section = Section(
        name="preprocessing",
        title="Preprocessing at full event scale",
        columns=[
            Column("stage", "stage"),
            Column("input", "input"),
            Column("output", "output"),
            Column("seconds", "seconds (median)", "{:.2f}"),
        ],
    )
    rows = section.rows
    config = SimulationConfig()
    seconds, event = _median_time(lambda: simulate_event(config, 1, 0), repeats)
    rows.append({"stage": "simulate", "input": f"{config.num_particles:,} particles", "output": f"{len(event['hits']):,} hits", "seconds": seconds})
    seconds, (graph, _) = _median_time(lambda: build_graph(event["hits"], event["truth"], event["particles"], event_id=1), repeats)
    rows.append({"stage": "build graph (simulated, labelled)", "input": f"{len(event['hits']):,} hits",
                 "output": f"{graph.num_edges:,} edges", "seconds": seconds})
    del event, graph
    prefix = full_event_prefix()
    if prefix is None or full is None:
        section.notes.append("The real full event was not found: only the simulated event was timed.")
    else:
        seconds, (hits, particles) = _median_time(lambda: load_event(prefix, ("hits", "particles")), repeats)
        rows.append({"stage": "read CSV (real event 21000)", "input": "hits + particles", "output": f"{len(hits):,} hits", "seconds": seconds})
        seconds, (graph, _) = _median_time(lambda: build_graph(hits, None, particles, event_id=21000), repeats)
        rows.append({"stage": "build graph (real event 21000)", "input": f"{len(hits):,} hits", "output": f"{graph.num_edges:,} edges", "seconds": seconds})
        for method in ("metis", "geometric"):
            for num_parts in partition_parts:
                samples_partition, samples_plan = [], []
                for _ in range(repeats):
                    plan = partition_graph(graph, num_parts, method=method, seed=0)
                    samples_partition.append(plan.seconds_partition)
                    samples_plan.append(plan.seconds_plan)
                rows.append({
                    "stage": f"partition {method} (real event 21000)", "input": f"{graph.num_edges:,} edges",
                    "output": f"{num_parts} parts", "seconds": statistics.median(samples_partition) + statistics.median(samples_plan),
                    "seconds_partition": statistics.median(samples_partition), "seconds_plan": statistics.median(samples_plan),
                })
    section.notes.append(f"Median of {repeats} run(s) per stage; build includes labels when truth is present.")
    section.seconds = time.perf_counter() - start
    return section
