"""Memory, halo traffic and step time of the domain-parallel Interaction Network on a real full event.

Usage (from the repository root)::

    .venv/bin/python bench/bench_model.py                       # event000021000 from ../shared
    .venv/bin/python bench/bench_model.py --graph g.npz --parts 1 2 4 --steps 5

Three measurements, printed as Markdown tables:

1. Activation memory per rank: the bytes of every tensor autograd saves for
   backward (``torch.autograd.graph.saved_tensors_hooks``; parameters and the
   graph's own input tensors excluded; shared storages counted once), for the
   full model configuration, each part of a METIS plan of 1, 2 and 4 parts,
   with and without checkpointing. The forward runs on the ``meta`` device with
   a shape-only exchange (halo rows of the right shape): byte counts are exact
   (checked against a CPU run on the small event at start-up) but need no RAM,
   so a 1.9M-edge event at H=64, 8 iterations can be measured on a laptop.
   Without checkpointing the peak is what is saved at the end of the forward;
   with checkpointing it is that plus the largest segment recomputed during
   backward (measured as the saved bytes of the largest segment of a
   non-checkpointed run).
2. Halo traffic: rows each rank sends per exchange, and bytes per training
   step (forward + backward, (iterations + 1) exchanges each way, float32).
3. Step time: forward + backward of the real model on CPU, 1 process × 1
   thread on the whole graph versus 2 processes × 1 thread (METIS halves, gloo
   halo exchange), median over steps of the slowest rank, and peak RSS per rank.
   The full event has no truth; labels are all zero (the loss value does not
   change the cost).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
DEFAULT_EVENT = REPO.parent / "shared" / "data" / "trackml" / "event000021000"
SMALL_EVENT = REPO / "tests" / "data" / "trackml" / "event000000001"


class ShapeOnlyExchange:
    """Returns owned rows followed by halo rows of the right shape (zeros): for memory accounting."""

    def __init__(self, num_halo: int) -> None:
        self.num_halo = num_halo

    def __call__(self, x_owned: torch.Tensor) -> torch.Tensor:
        return torch.cat([x_owned, x_owned.new_zeros(self.num_halo, x_owned.shape[1])])

    def start(self, x_owned: torch.Tensor):
        value = self(x_owned)

        class _Done:
            def wait(self_inner):
                return value

        return _Done()


def saved_bytes(model, graph, exchange, *, segment_peak: bool = False) -> tuple[int, int]:
    """(bytes saved for backward at the end of the forward, bytes of the largest segment).

    Parameters and the graph's input tensors are not activations and are excluded.
    """
    excluded = {p.untyped_storage()._cdata for p in model.parameters()}
    for tensor in (graph.x, graph.edge_index, graph.edge_attr, graph.edge_owned, graph.edge_ids):
        excluded.add(tensor.untyped_storage()._cdata)
    seen: dict[int, int] = {}

    def pack(tensor):
        key = tensor.untyped_storage()._cdata
        if key not in excluded:
            seen[key] = tensor.untyped_storage().nbytes()
        return tensor

    largest = 0
    original_run = model._run

    def measured_run(fn, *args):
        nonlocal largest
        before = sum(seen.values())
        out = original_run(fn, *args)
        largest = max(largest, sum(seen.values()) - before)
        return out

    if segment_peak:
        model._run = measured_run
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logits = model(graph, exchange)
            logits.sum()
    finally:
        model._run = original_run
    return sum(seen.values()), largest


def memory_table(graph, config, parts_list, seed: int) -> list[dict]:
    from domainpar.model.interaction_network import InteractionNetwork
    from domainpar.partition import partition_graph
    from domainpar.partition.local_graph import local_graph

    rows = []
    for num_parts in parts_list:
        plan = partition_graph(graph, num_parts, "metis", seed=seed)
        for checkpointing in (False, True):
            per_part = []
            for part in plan.parts:
                local = local_graph(graph, part).to("meta")
                model = InteractionNetwork(replace(config, checkpointing=checkpointing)).to("meta")
                exchange = ShapeOnlyExchange(part.num_halo)
                forward_bytes, _ = saved_bytes(model, local, exchange)
                if checkpointing:
                    plain = InteractionNetwork(replace(config, checkpointing=False)).to("meta")
                    _, segment = saved_bytes(plain, local, exchange, segment_peak=True)
                    per_part.append(forward_bytes + segment)
                else:
                    per_part.append(forward_bytes)
            rows.append(
                dict(
                    parts=num_parts,
                    checkpointing=checkpointing,
                    max_local_edges=max(p.num_local_edges for p in plan.parts),
                    peak_max=max(per_part),
                    peak_mean=float(np.mean(per_part)),
                )
            )
    return rows


def halo_table(graph, config, parts_list, seed: int) -> list[dict]:
    from domainpar.partition import partition_graph

    rows = []
    for num_parts in parts_list:
        if num_parts == 1:
            continue
        for method in ("metis", "geometric"):
            plan = partition_graph(graph, num_parts, method, seed=seed)
            send_rows = [int(p.send_ids.size) for p in plan.parts]
            per_step = [2 * (config.num_iterations + 1) * rows * config.hidden * 4 for rows in send_rows]
            rows.append(
                dict(
                    parts=num_parts,
                    method=method,
                    halo_rows=sum(p.num_halo for p in plan.parts),
                    send_rows_max=max(send_rows),
                    bytes_per_step_max=max(per_step),
                    bytes_per_step_total=sum(per_step),
                    cut_edges=plan.num_cut_edges,
                )
            )
    return rows


def _time_worker(rank: int, world_size: int, graph, owner, config, steps: int) -> dict:
    from domainpar.comm.halo import HaloExchange
    from domainpar.model.interaction_network import InteractionNetwork
    from domainpar.model.loss import edge_loss
    from domainpar.partition import build_plan
    from domainpar.partition.local_graph import local_graph

    import torch.distributed as dist

    torch.set_num_threads(1)
    plan = build_plan(graph.edge_index, owner, world_size, y=graph.y)
    part = plan.parts[rank]
    local = local_graph(graph, part)
    exchange = HaloExchange(part)
    torch.manual_seed(0)
    model = InteractionNetwork(config)
    times, cpu_times = [], []
    for step in range(steps + 1):
        dist.barrier()
        start, cpu_start = time.perf_counter(), time.process_time()
        model.zero_grad(set_to_none=True)
        loss = edge_loss(model(local, exchange), local)
        loss.backward()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        if step:  # the first step warms up allocator and caches
            times.append(elapsed)
            cpu_times.append(cpu)
    dist.barrier()
    return {
        "times": times,
        "cpu_times": cpu_times,
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }


def timing_table(graph, config, steps: int, seed: int) -> dict:
    from domainpar.partition import partition_graph
    from domainpar.train.launch import spawn

    results = {}
    for label, num_parts, overlap in (("1 × 1", 1, False), ("2 × 1", 2, False), ("2 × 1, overlap", 2, True)):
        owner = partition_graph(graph, num_parts, "metis", seed=seed).owner
        run_config = replace(config, overlap=overlap)
        per_rank = spawn(_time_worker, num_parts, args=(graph, owner, run_config, steps), timeout_s=3600, num_threads=1)
        slowest = [max(rank["times"][i] for rank in per_rank) for i in range(steps)]
        busiest_cpu = [max(rank["cpu_times"][i] for rank in per_rank) for i in range(steps)]
        results[label] = dict(
            median_s=statistics.median(slowest),
            median_cpu_s=statistics.median(busiest_cpu),
            all_s=slowest,
            max_rss_mb=max(rank["max_rss_mb"] for rank in per_rank),
        )
    return results


def check_meta_accounting() -> None:
    """The meta-device byte count equals a real CPU run's (small event, two parts, both modes)."""
    from domainpar.data.graph import build_event_graph
    from domainpar.model.interaction_network import InteractionNetwork, ModelConfig
    from domainpar.partition import partition_graph
    from domainpar.partition.local_graph import local_graph

    graph, _ = build_event_graph(SMALL_EVENT)
    plan = partition_graph(graph, 2, "geometric")
    for checkpointing in (False, True):
        config = ModelConfig(hidden=16, num_iterations=2, checkpointing=checkpointing)
        part = plan.parts[0]
        counts = []
        for device in ("cpu", "meta"):
            local = local_graph(graph, part).to(device)
            counts.append(saved_bytes(InteractionNetwork(config).to(device), local, ShapeOnlyExchange(part.num_halo)))
        if counts[0] != counts[1]:
            raise SystemExit(f"meta accounting differs from CPU: {counts}")


def _mb(value: float) -> str:
    return f"{value / 2**20:,.1f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", type=Path, default=None, help="graph .npz (default: build event000021000)")
    parser.add_argument("--event", type=Path, default=DEFAULT_EVENT, help="TrackML event prefix to build the graph from")
    parser.add_argument("--parts", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--hidden", type=int, default=64, help="hidden size of the memory/halo measurement")
    parser.add_argument("--iterations", type=int, default=8, help="iterations of the memory/halo measurement")
    parser.add_argument("--time-hidden", type=int, default=16, help="hidden size of the timing runs (CPU RAM bound)")
    parser.add_argument("--time-iterations", type=int, default=2, help="iterations of the timing runs")
    parser.add_argument("--steps", type=int, default=5, help="timed steps (after one warm-up)")
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--only-timing", action="store_true", help="skip the memory and halo tables")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from domainpar.data.event_graph import EventGraph, load_graph
    from domainpar.data.graph import build_event_graph
    from domainpar.model.interaction_network import ModelConfig
    if not args.only_timing:
        check_meta_accounting()
    start = time.perf_counter()
    if args.graph is not None:
        graph = load_graph(args.graph)
    else:
        if not Path(str(args.event) + "-hits.csv.gz").exists():
            raise SystemExit(f"{args.event}-hits.csv.gz not found; pass --graph or --event")
        graph, _ = build_event_graph(args.event)
    if graph.y is None:
        fields = {name: getattr(graph, name) for name in ("event_id", "x", "pos", "hit_id", "layer", "edge_index", "edge_attr")}
        graph = EventGraph(**fields, y=np.zeros(graph.num_edges, np.float32))
    print(f"graph: event {graph.event_id}, {graph.num_nodes:,} nodes, {graph.num_edges:,} edges "
          f"(built/loaded in {time.perf_counter() - start:.1f} s); torch {torch.__version__}\n")

    config = ModelConfig(hidden=args.hidden, num_iterations=args.iterations)
    if not args.only_timing:
        print_memory_and_halo(graph, config, args)
    if not args.skip_timing:
        print_timing(graph, args)


def print_memory_and_halo(graph, config, args) -> None:
    print(f"## Activation memory per rank (saved tensors, float32, H={args.hidden}, "
          f"{args.iterations} iterations, METIS)\n")
    print("| parts | checkpointing | max local edges | peak per rank, max (MiB) | mean over ranks (MiB) | vs 1 part |")
    print("|---|---|---|---|---|---|")
    memory = memory_table(graph, config, args.parts, args.seed)
    base = {row["checkpointing"]: row["peak_max"] for row in memory if row["parts"] == 1}
    for row in memory:
        ratio = row["peak_max"] / base[row["checkpointing"]] if row["checkpointing"] in base else float("nan")
        print(f"| {row['parts']} | {'yes' if row['checkpointing'] else 'no'} | {row['max_local_edges']:,} | "
              f"{_mb(row['peak_max'])} | {_mb(row['peak_mean'])} | {ratio:.2f} |")

    print(f"\n## Halo traffic (float32, H={args.hidden}, {args.iterations + 1} exchanges forward + as many backward)\n")
    print("| parts | method | cut edges | halo rows (all ranks) | max rows sent per exchange | "
          "max MiB per rank per step | total MiB per step |")
    print("|---|---|---|---|---|---|---|")
    for row in halo_table(graph, config, args.parts, args.seed):
        print(f"| {row['parts']} | {row['method']} | {row['cut_edges']:,} | {row['halo_rows']:,} | {row['send_rows_max']:,} | "
              f"{_mb(row['bytes_per_step_max'])} | {_mb(row['bytes_per_step_total'])} |")


def print_timing(graph, args) -> None:
    from domainpar.model.interaction_network import ModelConfig

    time_config = ModelConfig(hidden=args.time_hidden, num_iterations=args.time_iterations)
    timing = timing_table(graph, time_config, args.steps, args.seed)
    print(f"\n## Step time (forward + backward, CPU, H={args.time_hidden}, {args.time_iterations} iterations, "
          f"{args.steps} steps after a warm-up, median of the slowest rank)\n")
    print("| processes × threads | median wall step (s) | steps (s) | median CPU s of the busiest rank | "
          "peak RSS per rank (MiB) |")
    print("|---|---|---|---|---|")
    for label, row in timing.items():
        steps = ", ".join(f"{t:.2f}" for t in row["all_s"])
        print(f"| {label} | {row['median_s']:.2f} | {steps} | {row['median_cpu_s']:.2f} | {row['max_rss_mb']:,.0f} |")
    base, base_cpu = timing["1 × 1"]["median_s"], timing["1 × 1"]["median_cpu_s"]
    print(f"\nwall-clock speed-up of 2 processes vs 1: {base / timing['2 × 1']['median_s']:.2f}× "
          f"(with overlap: {base / timing['2 × 1, overlap']['median_s']:.2f}×); "
          f"CPU-time speed-up (work of the busiest rank, insensitive to other jobs): "
          f"{base_cpu / timing['2 × 1']['median_cpu_s']:.2f}×; "
          f"load average after the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    sys.exit(main())
