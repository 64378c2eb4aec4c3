"""Strong scaling on CPU: the real full event on 1 process × 1 thread vs 2 processes × 1 thread.

One command (the figure the README quotes; re-measure it on an idle machine)::

    flock /tmp/domainpar-timing.lock python -m bench --only strong_scaling --out DIR

Two gloo ranks are spawned once (one intra-op thread each). Every round
times both configurations back to back, alternating which goes first:

* ``1x1``: rank 0 runs the whole event (one-part plan, no exchange) while
  rank 1 waits at the barrier (its CPU time during those steps is reported,
  to show it is idle);
* ``2x1``: each rank runs its METIS half with the real halo exchange, and the
  gradients are all-reduced as the trainer does.

A step is forward + backward (+ the gradient all-reduce for 2x1) of the
Interaction Network (hidden 16, 4 iterations unless told otherwise) with a
label-free loss of training's shape (the full event has no truth; values do
not change the work). It starts and ends at a barrier, so its wall time is
the slowest rank's. Wall-clock medians over the rounds, the busiest rank's
CPU seconds beside them, and the load average before and after.
"""

from __future__ import annotations

import statistics
import time

from bench.common.report import Column, Section, ratio
from bench.common.timing import load_average
from bench.common.workloads import Workload, missing_full_event


def _rank_rounds(rank: int, world_size: int, graph_path: str, model_kw: dict, rounds: int, method: str) -> dict:
    """Body of one spawned rank: alternate the 1x1 and 2x1 steps ``rounds`` times (after one warm-up each)."""
    from pathlib import Path

    import torch
    import torch.distributed as dist

    from bench.common.plans import graph_at, plan_for
    from domainpar.comm.reduce import all_reduce_gradients
    from domainpar.model.config import ModelConfig
    from domainpar.model.registry import build_model
    from domainpar.parallel.part import rank_part

    path = Path(graph_path)
    graph = graph_at(path)
    # Parts and exchanges as training gets them: the halves with a halo exchange, the whole graph with none.
    half = rank_part(graph, rank, None, "cpu", plan=plan_for(path, world_size, method))
    part, exchange = half.graph, half.exchange
    whole = rank_part(graph, plan=plan_for(path, 1, method)) if rank == 0 else None
    config = ModelConfig(node_features=int(part.x.shape[1]), edge_features=int(part.edge_attr.shape[1]), **model_kw)
    torch.manual_seed(0)
    model = build_model(config)
    weights = torch.linspace(-1.0, 1.0, graph.num_edges)

    def loss_of(local, ex) -> torch.Tensor:
        # Each global edge counted once (on its owner), normalised by the event's edge count, as in training.
        mask = local.edge_owned.to(torch.float32) * weights[local.edge_ids]
        return (model(local, ex) * mask).sum() / local.num_edges_global

    def step_1x1() -> None:
        if rank == 0:
            loss_of(whole.graph, whole.exchange).backward()
            model.zero_grad(set_to_none=True)

    def step_2x1() -> None:
        loss_of(part, exchange).backward()
        all_reduce_gradients(model, None)
        model.zero_grad(set_to_none=True)

    steps = {"1x1": step_1x1, "2x1": step_2x1}
    walls: dict[str, list[float]] = {name: [] for name in steps}
    cpus: dict[str, list[float]] = {name: [] for name in steps}
    for round_index in range(rounds + 1):  # round 0 warms up (allocator, thread pool, exchange buffers)
        order = ("1x1", "2x1") if round_index % 2 == 0 else ("2x1", "1x1")
        for name in order:
            dist.barrier()
            wall, cpu = time.perf_counter(), time.process_time()
            steps[name]()
            cpu = time.process_time() - cpu
            dist.barrier()  # the step ends when the slowest rank is done
            wall = time.perf_counter() - wall
            if round_index:
                walls[name].append(wall)
                cpus[name].append(cpu)
    return {
        "walls": walls,
        "cpus": cpus,
        "local_edges": part.num_edges,
        "whole_edges": None if whole is None else whole.graph.num_edges,
    }


def run(
    workload: Workload, *, rounds: int = 5, hidden: int = 16, iterations: int = 4, method: str = "metis",
    timeout_s: float = 7200.0,
) -> Section:
    """The strong-scaling section (see the module docstring)."""
    from domainpar.launch.ranks import spawn

    start = time.perf_counter()
    load_before = load_average()
    per_rank = spawn(
        _rank_rounds, 2, (str(workload.path), {"hidden": hidden, "num_iterations": iterations}, rounds, method),
        timeout_s=timeout_s, backend="gloo", num_threads=1,
    )
    load_after = load_average()
    walls = per_rank[0]["walls"]
    busiest_cpu = {
        name: [max(r["cpus"][name][i] for r in per_rank) for i in range(rounds)] for name in ("1x1", "2x1")
    }
    idle_cpu = statistics.median(per_rank[1]["cpus"]["1x1"])
    median = {name: statistics.median(walls[name]) for name in walls}
    median_cpu = {name: statistics.median(values) for name, values in busiest_cpu.items()}
    rows = [
        {"configuration": "1 process × 1 thread (whole event)", "key": "1x1", "local_edges": per_rank[0]["whole_edges"]},
        {"configuration": "2 processes × 1 thread (METIS halves, halo exchange)", "key": "2x1",
         "local_edges": max(r["local_edges"] for r in per_rank)},
    ]
    for row in rows:
        key = row["key"]
        row.update(
            wall_s=median[key], cpu_s=median_cpu[key], wall_samples=walls[key], cpu_samples=busiest_cpu[key],
            speedup=ratio(median["1x1"], median[key]), cpu_speedup=ratio(median_cpu["1x1"], median_cpu[key]),
        )
    section = Section(
        name="strong_scaling",
        title=f"Strong scaling on CPU: {workload.name}, 1 process × 1 thread vs 2 × 1",
        columns=[
            Column("configuration", "configuration"),
            Column("local_edges", "edges of the busiest rank", "{:,}"),
            Column("wall_s", "wall s/step (median)", "{:.2f}"),
            Column("speedup", "wall speed-up", "{:.2f}×"),
            Column("cpu_s", "CPU s/step, busiest rank", "{:.2f}"),
            Column("cpu_speedup", "CPU speed-up", "{:.2f}×"),
        ],
        rows=rows,
    )
    section.extra = {"load_average_before": load_before, "load_average_after": load_after, "idle_rank_cpu_s": idle_cpu}
    section.notes += [
        f"Graph: {workload.name} ({workload.num_nodes:,} nodes, {workload.num_edges:,} edges); Interaction Network "
        f"hidden {hidden}, {iterations} iterations; step = forward + backward (+ gradient all-reduce for 2 × 1), "
        "label-free loss over owned edges.",
        f"{rounds} rounds alternating the two configurations inside the same two spawned gloo processes (one intra-op "
        "thread each), after a warm-up round; wall time from barrier to barrier on rank 0.",
        f"While rank 0 runs 1 × 1, rank 1 waits at the barrier: its median CPU time per such step is {idle_cpu:.3f} s.",
        f"Load average (1/5/15 min) before {load_before}, after {load_after} on {__import__('os').cpu_count()} cores: "
        "other jobs on a shared machine take cores from the 2 × 1 run first; the CPU-time speed-up is what they distort least.",
    ]
    section.seconds = time.perf_counter() - start
    return section


def section(ctx) -> Section:
    """Entry point (see :mod:`bench.sections`): the real full event; skipped with one line without it."""
    full = ctx.real_full()
    if full is None:
        return Section(name="strong_scaling", title="Strong scaling on CPU", skipped=missing_full_event())
    return run(full, rounds=ctx.size(2, 5))
