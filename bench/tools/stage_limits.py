"""Each stage of the event chain beside the machine's limits: the work it does, its time, the fraction of peak.

For one raw event (the full event 21000 by default), in one warm process:

* the machine: float32 matrix-multiply FLOP/s (``torch.mm``, 2048², the best a dense kernel reaches here) and
  memory bandwidth (a 512 MiB ``copy_``: bytes read + written per second), on 1 thread and on every core;
* per stage, with the chain's own functions (:func:`bench.tools.measure.stages_alone`'s calls):

  - **build** (numba kernels): hits in, edges out, bytes written (edge index and features);
  - **filter** and **GNN inference** (torch): FLOPs of every matrix product (``torch.utils.flop_counter``)
    and the bytes every aten op reads and writes (views excluded, in-place and ``out=`` ops counting each tensor
    they touch once; as if no operand stayed in cache, an upper bound of the memory traffic), plus the filter's
    numba row kernels by their rows (:func:`filter_kernel_bytes`);
  - **tracks** (numba kernels): edges and hits in;

  the stage's median time (``--repeats`` timed passes after one untimed pass), and from them achieved GFLOP/s,
  GB/s and their fraction of the machine's peak on the threads the stage ran with.

``python -m bench.tools.stage_limits --checkpoint model.pt --filter filter.pt --event ../shared/data/trackml/event000021000 --json limits.json``

The markdown table it prints is what docs/performance.md shows. Run it on an idle machine: the load average is
recorded before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from domainpar.heap import keep_freed_memory


class ByteCounter(TorchDispatchMode):
    """Bytes read and written by every aten op that is not a view (inputs + outputs, each counted once per op)."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0
        self.matmul_bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func._schema.is_mutable and any(r.alias_info is not None for r in func._schema.returns):
            return out  # a view: no data moved beyond what the producing op counted
        # Every tensor the op touches, once: an in-place or out= op returns the tensor it was given.
        tensors = {}
        for value in (*args, *(kwargs or {}).values(), *(out if isinstance(out, (tuple, list)) else (out,))):
            for tensor in (value if isinstance(value, (tuple, list)) else (value,)):
                if isinstance(tensor, torch.Tensor):
                    tensors[(tensor.data_ptr(), tensor.numel(), tensor.dtype)] = tensor
        moved = sum(t.numel() * t.element_size() for t in tensors.values())
        self.bytes += moved
        if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm, torch.ops.aten.linear):
            self.matmul_bytes += moved
        return out


def filter_kernel_bytes(edge_filter, graph) -> int:
    """Bytes the edge filter's numba kernels read and write on ``graph`` (dispatch modes see torch's ops only).

    Per edge: its two ends' indices and node rows and its edge columns read, its standardised row written
    (``standardised_rows``); each hidden layer's norm reads and writes the row (``layer_norm_rows``); the last
    layer reads it and writes the logit (``logit_rows``).
    """
    node_columns, edge_columns = edge_filter.columns(graph, "stage_limits")
    f_node = graph.x.shape[1] if node_columns is None else node_columns.size
    f_edge = graph.edge_attr.shape[1] if edge_columns is None else edge_columns.size
    hidden, layers = edge_filter.config.hidden, edge_filter.config.layers
    per_edge = 2 * 8 + 2 * f_node * 4 + f_edge * 4 + (2 * f_node + f_edge) * 4 + layers * 2 * hidden * 4 + hidden * 4 + 4
    return graph.num_edges * per_edge


def machine_peaks(threads: int) -> dict:
    """Best float32 GEMM FLOP/s and copy bandwidth on ``threads`` intra-op threads (medians of 5)."""
    torch.set_num_threads(threads)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    torch.mm(a, b)
    flops = []
    for _ in range(5):
        t0 = time.perf_counter()
        torch.mm(a, b)
        flops.append(2 * 2048**3 / (time.perf_counter() - t0))
    src, dst = torch.ones(2**27), torch.empty(2**27)  # 512 MiB each
    dst.copy_(src)
    bandwidth = []
    for _ in range(5):
        t0 = time.perf_counter()
        dst.copy_(src)
        bandwidth.append(2 * src.numel() * 4 / (time.perf_counter() - t0))
    return {"threads": threads, "gflops": statistics.median(flops) / 1e9, "gbytes_per_s": statistics.median(bandwidth) / 1e9}


def _counted(fn, *args):
    from domainpar.kernels.chunks import using_threads

    flops, moved = FlopCounterMode(display=False), ByteCounter()
    # One thread: dispatch modes see the ops of their own thread only, and the filter's and the GNN's chunks would
    # otherwise run on a pool's threads, uncounted.
    with using_threads(1), flops, moved:
        out = fn(*args)
    return out, flops.get_total_flops(), moved.bytes


def measure(checkpoint: Path | None, model: Path | None, edge_filter: Path | None, prefix: Path, repeats: int,
            threads: int) -> dict:  # fmt: skip
    """Work and median seconds of build, filter, inference and tracks on one event (one process, ``threads``)."""
    from bench.tools.measure import chain_pass, chain_stages
    from domainpar.inference.runner import EventRunner, open_scorer
    from domainpar.inference.sources import EventSource, read_raw_event

    torch.set_num_threads(threads)
    pipeline, prune, build = chain_stages(checkpoint, model, edge_filter)
    source = EventSource(prefix.name, prefix, "raw")
    times: dict[str, list[float]] = {"build": [], "filter": [], "inference": [], "tracks": []}
    work: dict = {}
    with EventRunner(pipeline, open_scorer(pipeline)) as runner:
        raw = read_raw_event(source, build.needs_cells)
        for attempt in range(repeats + 1):
            seconds, g, graph, _ = chain_pass(runner, build, prune, source, raw)
            if attempt == 0:
                # Untimed: the counting modes slow every op; the counts are of the same calls.
                edge_bytes = g.edge_index.nbytes + g.edge_attr.nbytes
                _, filter_flops, filter_bytes = _counted(prune, g) if prune is not None else (None, 0, 0)
                if pipeline.graphs.edge_filter is not None:
                    filter_bytes += filter_kernel_bytes(pipeline.graphs.edge_filter, g)
                _, gnn_flops, gnn_bytes = _counted(runner.scorer.logits, graph)
                work = {
                    "hits": int(raw.hits.shape[0]),
                    "edges_built": int(g.num_edges),
                    "edge_features": int(g.edge_attr.shape[1]),
                    "node_features": int(g.x.shape[1]),
                    "build_bytes_written": int(edge_bytes + g.x.nbytes),
                    "filter_flops": int(filter_flops),
                    "filter_bytes": int(filter_bytes),
                    "edges_kept": int(graph.num_edges),
                    "gnn_flops": int(gnn_flops),
                    "gnn_bytes": int(gnn_bytes),
                }
                continue
            for name in times:
                times[name].append(seconds[name])
    return {"work": work, "seconds": {k: statistics.median(v) for k, v in times.items()}, "all": times}


def table(result: dict) -> str:
    """docs/performance.md's table: per stage the work, the time and the fraction of the machine reached."""
    w, s = result["work"], result["seconds"]
    peak = result["peaks"][str(result["threads"])]
    rows = [
        ("build", f"{w['hits']:,} hits → {w['edges_built']:,} edges × {w['edge_features']} features; "
                  f"{w['build_bytes_written'] / 1e6:,.0f} MB written", None, w["build_bytes_written"]),
        ("filter", f"{w['edges_built']:,} edges scored, {w['edges_kept']:,} kept; {w['filter_flops'] / 1e9:,.1f} GFLOP, "
                   f"{w['filter_bytes'] / 1e9:,.2f} GB moved", w["filter_flops"], w["filter_bytes"]),
        ("GNN inference", f"{w['edges_kept']:,} edges; {w['gnn_flops'] / 1e9:,.1f} GFLOP, {w['gnn_bytes'] / 1e9:,.2f} GB moved",
         w["gnn_flops"], w["gnn_bytes"]),
        ("tracks", f"{w['edges_kept']:,} scored edges, {w['hits']:,} hits", None, None),
    ]  # fmt: skip
    lines = [f"| stage | work | s | GFLOP/s (of {peak['gflops']:.0f}) | GB/s (of {peak['gbytes_per_s']:.1f}) |",
             "|---|---|---|---|---|"]  # fmt: skip
    for (name, text, flops, moved), key in zip(rows, ("build", "filter", "inference", "tracks")):
        seconds = s[key]
        rate = f"{flops / seconds / 1e9:.1f} ({flops / seconds / 1e9 / peak['gflops']:.0%})" if flops else "–"
        band = f"{moved / seconds / 1e9:.2f} ({moved / seconds / 1e9 / peak['gbytes_per_s']:.0%})" if moved else "–"
        lines.append(f"| {name} | {text} | {seconds:.2f} | {rate} | {band} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tools.stage_limits", description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--model", type=Path)
    parser.add_argument("--filter", type=Path)
    parser.add_argument("--event", type=Path, required=True, help="a raw event prefix (hits and cells)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="intra-op threads of the stages")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    keep_freed_memory()  # as the event-chain commands do: the chain measured as it runs
    load_before = os.getloadavg()
    cores = len(os.sched_getaffinity(0))
    peaks = {str(t): machine_peaks(t) for t in sorted({1, cores, args.threads})}
    result = measure(args.checkpoint, args.model, args.filter, args.event, args.repeats, args.threads)
    result.update(peaks=peaks, threads=args.threads, cores=cores, event=str(args.event),
                  load_average={"before": load_before, "after": os.getloadavg()})  # fmt: skip
    print(table(result), end="")
    print(f"peaks: {peaks}; load average before {load_before}, after {os.getloadavg()}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
