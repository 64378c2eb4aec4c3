"""Speed section: training-step time on this machine, as ratios taken in one run.

* strong scaling: one process × one thread vs two processes × one thread
  (two domain ranks, METIS halves, real halo exchange over gloo);
* overlap: two processes with the halo exchange overlapped with interior
  edges vs not;
* checkpointing: one process with activation checkpointing vs without.

Every configuration runs in freshly spawned processes (``domainpar.launch.ranks.spawn``,
gloo, one intra-op thread each) and times forward + backward + the gradient
all-reduce of the domain group — the work of a training step without the
optimiser. The configurations are run in alternating rounds so that slow
phases of a shared machine hit all of them; each figure is the median over
all timed steps.
"""

from __future__ import annotations

import statistics
import time

from bench.common.report import Column, Section, ratio
from bench.common.workloads import Workload


def _rank_step_times(rank: int, world_size: int, graph_path: str, method: str, model_kw: dict, steps: int) -> list[float]:
    """Body of one spawned rank: time ``steps`` training steps (after one warm-up)."""
    from pathlib import Path

    import torch
    import torch.distributed as dist

    from bench.common.plans import graph_at, plan_for
    from domainpar.comm.reduce import all_reduce_gradients
    from domainpar.model.config import ModelConfig
    from domainpar.model.registry import build_model
    from domainpar.model.loss import edge_loss
    from domainpar.parallel.part import rank_part

    path = Path(graph_path)
    # The part and exchange as training gets them (identity exchange for one part).
    rp = rank_part(graph_at(path), rank, None, "cpu", plan=plan_for(path, world_size, method))
    part, exchange = rp.graph, rp.exchange
    config = ModelConfig(node_features=int(part.x.shape[1]), edge_features=int(part.edge_attr.shape[1]), **model_kw)
    torch.manual_seed(0)
    model = build_model(config)
    params = [p for p in model.parameters()]

    def step() -> None:
        loss = edge_loss(model(part, exchange), part)
        loss.backward()
        if world_size > 1:
            all_reduce_gradients(model, None)  # as the trainer does: bucketed SUM over the domain group
        for p in params:
            p.grad = None

    step()
    times = []
    for _ in range(steps):
        dist.barrier()
        t0 = time.perf_counter()
        step()
        dist.barrier()  # the step ends when the slowest rank is done
        times.append(time.perf_counter() - t0)
    return times


def step_times(workload: Workload, num_procs: int, method: str, steps: int, timeout_s: float, **model_kw) -> list[float]:
    """Per-step seconds of ``num_procs`` spawned gloo ranks, one thread each (rank 0's clock)."""
    from domainpar.launch.ranks import spawn

    results = spawn(
        _rank_step_times,
        num_procs,
        (str(workload.path), method, model_kw, steps),
        timeout_s=timeout_s,
        backend="gloo",
        num_threads=1,
    )
    return results[0]


CONFIGS = {
    "1x1": dict(num_procs=1, overlap=False, checkpointing=False),
    "1x1 checkpointing": dict(num_procs=1, overlap=False, checkpointing=True),
    "2x1": dict(num_procs=2, overlap=False, checkpointing=False),
    "2x1 overlap": dict(num_procs=2, overlap=True, checkpointing=False),
}


def run(workload: Workload, *, rounds: int = 2, steps: int = 3, method: str = "metis", hidden: int = 64, iterations: int = 8, timeout_s: float = 1800.0) -> Section:
    """The speed section (see the module docstring)."""
    start = time.perf_counter()
    samples: dict[str, list[float]] = {name: [] for name in CONFIGS}
    for _ in range(rounds):
        for name, c in CONFIGS.items():
            samples[name] += step_times(
                workload, c["num_procs"], method, steps, timeout_s,
                hidden=hidden, num_iterations=iterations, overlap=c["overlap"], checkpointing=c["checkpointing"],
            )
    median = {name: statistics.median(values) for name, values in samples.items()}
    rows = [
        {"comparison": "strong scaling: 1 process × 1 thread → 2 processes × 1 thread", "baseline": "1x1", "variant": "2x1",
         "label": "speed-up"},
        {"comparison": "halo overlap (2 processes): off → on", "baseline": "2x1", "variant": "2x1 overlap", "label": "speed-up"},
        {"comparison": "activation checkpointing (1 process): off → on", "baseline": "1x1", "variant": "1x1 checkpointing",
         "label": "slow-down"},
    ]
    for row in rows:
        base, variant = median[row["baseline"]], median[row["variant"]]
        row["baseline_s"] = base
        row["variant_s"] = variant
        row["ratio"] = ratio(base, variant) if row["label"] == "speed-up" else ratio(variant, base)
        row["baseline_samples"] = samples[row["baseline"]]
        row["variant_samples"] = samples[row["variant"]]
    section = Section(
        name="speed",
        title="Speed: training-step time on this machine",
        columns=[
            Column("comparison", "comparison"),
            Column("baseline_s", "before (s/step)", "{:.3f}"),
            Column("variant_s", "after (s/step)", "{:.3f}"),
            Column("ratio", "ratio", "{:.2f}×"),
            Column("label", "ratio is"),
        ],
        rows=rows,
    )
    section.notes += [
        f"Graph: {workload.name} ({workload.num_nodes:,} nodes, {workload.num_edges:,} edges); hidden {hidden}, "
        f"{iterations} iterations; step = forward + backward + gradient all-reduce (no optimiser).",
        f"Spawned gloo processes with one intra-op thread each; medians over {rounds} alternating rounds × {steps} "
        "timed steps per configuration (after a warm-up step).",
        "Speed-up = before / after; slow-down = after / before. On a 2-core machine two ranks can at best halve the time; "
        "on a small graph the 18 halo exchanges and the gradient all-reduce of every step (gloo, ~0.1–1 ms each) "
        "weigh against the halved compute, and other processes on the machine compete for the two cores "
        "(see the load averages in the JSON report).",
    ]
    section.seconds = time.perf_counter() - start
    return section


def section(ctx) -> Section:
    """Entry point (see :mod:`bench.sections`): the small simulated graph."""
    return run(ctx.small(), rounds=ctx.size(1, 3), steps=ctx.size(2, 3))
