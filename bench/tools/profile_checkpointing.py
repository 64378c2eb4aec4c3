"""Where checkpointing's extra step time goes: torch.profiler, ours with vs without checkpointing.

    python -m bench.tools.profile_checkpointing [--nodes 20000] [--edges 200000] [--threads 2] [--steps 2] [--top 25]
                                                [--chunk-rows 0] [--trace DIR]

Builds the random graph of the reference section (issue 14: N = 20,000,
E = 200,000, hit-graph feature widths), our model sized like
:data:`bench.sections.reference.MODEL` (3-layer MLPs, LayerNorm, ReLU, H=64,
8 iterations), and profiles ``--steps`` forward+backward steps of each
configuration after a warm-up step. Prints, per configuration, the step time
and the operators by self CPU time; then the operators whose self CPU time
grew most with checkpointing (the overhead to remove). ``--trace DIR`` also
writes Chrome traces. A diagnostic, not a figure of the report: the
reference section (``python -m bench --only reference``) gives the ratios.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile


def _rows(prof) -> dict[str, tuple[float, int]]:
    """Operator name → (self CPU seconds over the profiled steps, calls)."""
    return {e.key: (e.self_cpu_time_total / 1e6, e.count) for e in prof.key_averages()}


def main(argv: list[str] | None = None) -> int:
    from bench.common.plans import part_at
    from bench.common.workloads import random_graph
    from bench.sections.reference import build

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20_000, help="nodes of the random graph")
    parser.add_argument("--edges", type=int, default=200_000, help="edges of the random graph")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--steps", type=int, default=2, help="profiled steps per configuration (after one warm-up)")
    parser.add_argument("--top", type=int, default=25, help="operators listed per table")
    parser.add_argument("--chunk-rows", type=int, default=0, help="model chunk_rows under checkpointing (0: automatic)")
    parser.add_argument("--trace", type=Path, default=None, help="write Chrome traces here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as cache:
        workload = random_graph(Path(cache), args.nodes, args.edges)
        part = part_at(workload.path, 1, "metis", 0)
    weights = torch.linspace(-1.0, 1.0, part.num_edges)
    tables, seconds = {}, {}
    for name, ckpt in (("checkpointing", True), ("no checkpointing", False)):
        model = build("ours", ckpt, part)
        if ckpt and args.chunk_rows:
            from dataclasses import replace

            model.config = replace(model.config, chunk_rows=args.chunk_rows)

        def step() -> None:
            (model(part) * weights).sum().div(part.num_edges).backward()
            model.zero_grad(set_to_none=True)

        step()  # warm-up: groupings, numba compilation, allocator
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.process_time()
            for _ in range(args.steps):
                step()
            seconds[name] = (time.process_time() - start) / args.steps
        tables[name] = _rows(prof)
        if args.trace is not None:
            args.trace.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(args.trace / f"{name.replace(' ', '_')}.json"))
        print(f"\n== {name}: {seconds[name]:.3f} CPU s/step ({args.threads} threads)")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))
    ckpt, plain = tables["checkpointing"], tables["no checkpointing"]
    ratio = seconds["checkpointing"] / seconds["no checkpointing"]
    print(f"\n== CPU time per step: checkpointing {seconds['checkpointing']:.3f} s, "
          f"without {seconds['no checkpointing']:.3f} s: {ratio:.2f}x")
    print("== self CPU seconds per step that grew with checkpointing (checkpointing - without):")
    growth = sorted(((ckpt.get(k, (0, 0))[0] - plain.get(k, (0, 0))[0]) / args.steps, k) for k in set(ckpt) | set(plain))
    for delta, key in reversed(growth[-args.top:]):
        c, p = ckpt.get(key, (0.0, 0)), plain.get(key, (0.0, 0))
        print(f"  {delta:+8.3f} s  {key:<45} calls {c[1] // args.steps:>6} vs {p[1] // args.steps:>6}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
