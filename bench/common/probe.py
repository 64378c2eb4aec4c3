"""One part's forward+backward in a fresh process: peak memory, saved bytes and step time.

Run by the memory, speed and reference benchmarks as
``python -m bench.common.probe --graph G.npz --parts P --method M [--checkpointing] ...``;
it prints one JSON record on stdout.

A part of a P-way plan is run alone: its halo rows come from
:class:`~bench.common.exchanges.StandInExchange`, a fixed leaf tensor of the
right shape standing in for the neighbours (values do not change the memory
or the work; the backward still computes the halo gradients a real exchange
would send back). So the
per-rank cost of a P-way run is measured without P processes, which is what
lets a 2-core machine measure 8 parts. The part measured is the one with the
most local edges: the rank that sets the peak.

Memory is the kernel's RSS high-water mark during the step minus the RSS just
before it (``/proc/self/clear_refs`` resets the mark), after a warm-up step so
thread pools and allocator caches exist already. glibc is told to serve every
large block by mmap (``MALLOC_MMAP_THRESHOLD_``), so freed activations go back
to the kernel and each repeat measures afresh.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from bench.common.exchanges import StandInExchange
from bench.common.report import REPO_ROOT
from bench.common.memory import PROBE_ENV, SavedTensors, current_rss_bytes, peak_rss_bytes, reset_peak_rss


def run_probe(args: argparse.Namespace) -> dict:
    from pathlib import Path

    from bench.common.plans import graph_at, largest_part_index, part_at, plan_for
    from bench.common.models import build as build_kind
    from domainpar.model.config import ModelConfig

    torch.set_num_threads(args.threads)
    path = Path(args.graph)
    plan = plan_for(path, args.parts, args.method)
    part_index = largest_part_index(plan) if args.part < 0 else args.part
    part = part_at(path, args.parts, args.method, part_index)
    graph_at.cache_clear()
    plan_for.cache_clear()
    del plan
    config = ModelConfig(
        node_features=int(part.x.shape[1]),
        edge_features=int(part.edge_attr.shape[1]),
        hidden=args.hidden,
        num_iterations=args.iterations,
        mlp_layers=args.mlp_layers,
        activation=args.activation,
        checkpointing=args.checkpointing,
        chunk_rows=args.chunk_rows,
    )
    model = build_kind(args.model, config)
    exchange = StandInExchange(part.num_halo, args.hidden)
    step_model = lambda: model(part, exchange)  # noqa: E731
    # A label-free loss of the same shape as training's: the work is the same, labels are not needed.
    weights = torch.linspace(-1.0, 1.0, part.num_edges)

    def step() -> None:
        logits = step_model()
        (logits * weights).sum().div(max(part.num_edges_global, 1)).backward()

    def clear() -> None:
        for parameter in model.parameters():
            parameter.grad = None

    step()  # warm-up: thread pools, allocator, lazy init
    clear()
    peaks, seconds = [], []
    for _ in range(args.repeats):
        baseline = current_rss_bytes()
        reset_ok = reset_peak_rss()
        t0 = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - t0)
        peaks.append(peak_rss_bytes() - baseline if reset_ok else None)
        clear()
    # What autograd holds when the forward returns (with checkpointing: the regions' inputs only).
    with SavedTensors(exclude=[*model.parameters(), part.x, part.edge_attr]) as counter:
        logits = step_model()
    saved = counter.total
    del logits
    valid_peaks = [p for p in peaks if p is not None]
    return {
        "model": args.model,
        "num_parts": args.parts,
        "method": args.method if args.parts > 1 else "none",
        "part": part_index,
        "checkpointing": args.checkpointing,
        "hidden": args.hidden,
        "iterations": args.iterations,
        "threads": args.threads,
        "local_edges": part.num_edges,
        "local_nodes": part.num_local_nodes,
        "owned_nodes": part.num_owned,
        "halo_nodes": part.num_halo,
        "peak_bytes": statistics.median(valid_peaks) if valid_peaks else None,
        "peak_bytes_samples": peaks,
        "saved_bytes": saved,
        "step_seconds": statistics.median(seconds),
        "step_seconds_samples": seconds,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Measure one part's forward+backward (memory, time).")
    parser.add_argument("--graph", required=True, help="graph file (.npz)")
    parser.add_argument("--parts", type=int, default=1, help="number of parts of the plan")
    parser.add_argument("--method", default="metis", choices=["metis", "geometric"], help="partitioner")
    parser.add_argument("--part", type=int, default=-1, help="part to run (default: the one with most local edges)")
    parser.add_argument("--model", default="ours", choices=["ours", "field"], help="our model or the field's InteractionGNN (bench/common/models.py)")
    parser.add_argument("--checkpointing", action="store_true", help="activation checkpointing per iteration")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--mlp-layers", type=int, default=2)
    parser.add_argument("--activation", default="silu", help="hidden activation of our model")
    parser.add_argument("--chunk-rows", type=int, default=0, help="edge rows recomputed at a time under checkpointing (0: automatic)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=3, help="measured steps (after one warm-up)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    record = run_probe(parse_args())
    json.dump(record, sys.stdout)
    sys.stdout.write("\n")


def probe_subprocess(graph: str | Path, *, timeout_s: float = 1800.0, **options) -> dict:
    """Run this module in a fresh interpreter and return its JSON record.

    Args:
        graph: graph file.
        timeout_s: kill the probe after this long.
        **options: command-line options by their Python name (``parts=4``,
            ``checkpointing=True``, ``model="field"``).
    """
    import os
    import subprocess

    argv = [sys.executable, "-m", "bench.common.probe", "--graph", str(graph)]
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            if value:
                argv.append(flag)
        else:
            argv += [flag, str(value)]
    env = {**os.environ, **PROBE_ENV}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=REPO_ROOT)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"probe {' '.join(argv[3:])} failed with exit code {done.returncode}:\n{tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])
