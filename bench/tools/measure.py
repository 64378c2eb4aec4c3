"""How fast a reconstruction is, stage by stage: every stage alone, then the whole chain, on one real event.

``python -m bench.tools.measure --checkpoint model.pt --filter filter.pt --event DIR/event000021000 --out DIR``

1. *Stages alone*: in one warm process (one untimed pass first: imports, the model, numba's caches), the
   event's stages one after the other, each timed on its own, ``--repeats`` times (medians): read (hits and cells,
   bytes hashed and parsed), build (graph and features), filter (edge filter), inference (the GNN: one process,
   or ``--parts`` processes with halo exchange started once beforehand), tracks (candidates and fits), write
   (submission, tracks file, record).
2. *The chain*: ``domainpar reconstruct`` as a user runs it, a fresh process on a directory holding the event
   alone, timed from outside (process start-up included), ``--repeats`` times; the ratio chain / sum of the
   stages alone is the figure of issue 27 (target ≤ 1.3).
3. *Throughput*: ``domainpar reconstruct`` over ``--copies`` copies of the event (linked under other event
   numbers): events per hour, start-up included, and in steady state (from the run's own per-event times).

``python -m bench.tools.measure --startup --event tests/data/trackml/event000000001`` measures instead a
process's start-up to its first event (imports, graph, one model step forward and backward, tracks; wall and CPU
seconds, and the numba kernels it compiled), in a first and then in a second process sharing a fresh numba cache.

The load average is recorded before and after: on a shared machine compare runs made together.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from domainpar.heap import keep_freed_memory

#: Stages in the order of the chain.
STAGES = ("read", "build", "filter", "inference", "tracks", "write")


def _event_files(prefix: Path) -> list[Path]:
    return sorted(prefix.parent.glob(f"{prefix.name}-*.csv*"))


def _link_event(prefix: Path, directory: Path, event_id: int) -> None:
    """The event's hits and cells under ``directory`` as event ``event_id`` (symbolic links: no copy of the data)."""
    directory.mkdir(parents=True, exist_ok=True)
    for path in _event_files(prefix):
        part = path.name.split("-", 1)[1]
        if part.startswith(("hits", "cells")):
            (directory / f"event{event_id:09d}-{part}").symlink_to(path.resolve())


def chain_stages(checkpoint: Path | None, model: Path | None, edge_filter: Path | None, parts: int = 1,
                 method: str = "metis") -> tuple[Any, Any, Any]:  # fmt: skip
    """The pipeline as the chain restores it, its pruning function, and its graph stage without the filter: the build
    timed apart from the filter, the filter applied after it."""
    from domainpar.inference.pipeline import load_pipeline
    from domainpar.inference.spec import PipelineSpec

    pipeline = load_pipeline(PipelineSpec(checkpoint=checkpoint, model=model, edge_filter=edge_filter, num_parts=parts,
                                          method=method))  # fmt: skip
    return pipeline, pipeline.graphs.prune(), replace(pipeline.graphs, filter_hash=None, edge_filter=None, exported_model=None)


def chain_pass(runner: Any, build: Any, prune: Any, source: Any, raw: Any) -> tuple[dict[str, float], Any, Any, Any]:
    """One pass of a read event through build, filter, GNN and tracks, each timed around the chain's own call.

    Returns:
        (seconds by stage, the graph before the filter, the graph after it, the tracks result).
    """
    from domainpar.inference.events import PreparedEvent

    t0 = time.perf_counter()
    built = build.from_raw(None, raw.hits, raw.cells, raw.event_id, str(source.path))
    t1 = time.perf_counter()
    graph = prune(built.graph) if prune is not None else built.graph
    t2 = time.perf_counter()
    logits, partition = runner.scorer.logits(graph)
    t3 = time.perf_counter()
    event = PreparedEvent(source, raw.event_id, graph, np.sort(raw.hits["hit_id"].to_numpy(np.int64)), raw.inputs,
                          built.num_edges_built)  # fmt: skip
    result = runner.tracks(event, logits, partition)
    t4 = time.perf_counter()
    return {"build": t1 - t0, "filter": t2 - t1, "inference": t3 - t2, "tracks": t4 - t3}, built.graph, graph, result


def stages_alone(checkpoint: Path | None, model: Path | None, edge_filter: Path | None, prefix: Path, parts: int,
                 method: str, repeats: int, threads: int) -> dict:  # fmt: skip
    """Median seconds of every stage run alone in a warm process (see the module docstring): the event chain's own
    functions, each timed around its call."""
    import torch

    from domainpar.inference import products
    from domainpar.inference.runner import EventRunner, open_scorer
    from domainpar.inference.sources import EventSource, read_raw_event

    torch.set_num_threads(threads)
    pipeline, prune, build = chain_stages(checkpoint, model, edge_filter, parts, method)
    source = EventSource(prefix.name, prefix, "raw")
    times: dict[str, list[float]] = {s: [] for s in STAGES}
    counts: dict = {}
    out = Path(tempfile.mkdtemp(prefix="domainpar-measure-"))
    try:
        with EventRunner(pipeline, open_scorer(pipeline)) as runner:
            for attempt in range(repeats + 1):
                started = time.perf_counter()
                raw = read_raw_event(source, build.needs_cells)
                seconds = {"read": time.perf_counter() - started}
                passed, built, graph, result = chain_pass(runner, build, prune, source, raw)
                started = time.perf_counter()
                products.write_event(out, products.event_outputs(result, "measure", pipeline.threshold, "csv"), "csv")
                seconds.update(passed, write=time.perf_counter() - started)
                if attempt == 0:
                    counts = {"hits": int(raw.hits.shape[0]), "edges_built": int(built.num_edges),
                              "edges": int(graph.num_edges),
                              "candidates_3plus": int((result.candidates.sizes() >= 3).sum())}  # fmt: skip
                    continue  # warm-up: imports, caches, the first call of every kernel
                for name in STAGES:
                    times[name].append(seconds[name])
    finally:
        shutil.rmtree(out, ignore_errors=True)
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {"median": medians, "all": times, "sum": sum(medians.values()), "counts": counts}


def chain(args: list[str], data: Path, out: Path) -> tuple[float, dict]:
    """Wall seconds of one ``domainpar reconstruct`` process (start-up included) and its summary."""
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "domainpar", "reconstruct", "--data", str(data), "--out", str(out),
                           "--quiet", *args], capture_output=True, text=True)  # fmt: skip
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"domainpar reconstruct failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return wall, json.loads((out / "summary.json").read_text())


#: A fresh process's way to its first event (run by :func:`startup`).
STARTUP_PROBE = r"""
import time
t0, c0 = time.perf_counter(), time.process_time()
import json, sys
import torch
from numba.core import event
torch.set_num_threads(1)
from domainpar.data.graph import build_graph
from domainpar.data.trackml import load_event
from domainpar.model.config import ModelConfig
from domainpar.model.registry import build_model
from domainpar.parallel.part import rank_part
from domainpar.tracks.candidates import build_candidates
from domainpar.tracks.config import TrackConfig
t1 = time.perf_counter()
with event.install_recorder("numba:compile") as recorder:
    (hits,) = load_event(sys.argv[1], parts=("hits",))
    graph, _ = build_graph(hits, event_id=1)
    t2 = time.perf_counter()
    model = build_model(ModelConfig(hidden=32, num_iterations=4, activation=sys.argv[2], layer_norm=True, checkpointing=True))
    rp = rank_part(graph)
    logits = model(rp.graph, rp.exchange)
    logits.sum().backward()
    t3 = time.perf_counter()
    build_candidates(graph.pos, graph.layer, graph.edge_index, torch.sigmoid(logits.detach()).double().numpy(), TrackConfig())
    t4 = time.perf_counter()
names = sorted({f"{d.data['dispatcher'].py_func.__module__}.{d.data['dispatcher'].py_func.__qualname__}" for _, d in recorder.buffer})
print(json.dumps({"imports": t1 - t0, "build": t2 - t1, "model_step": t3 - t2, "tracks": t4 - t3, "total": t4 - t0,
                  "cpu": time.process_time() - c0, "compiled": [n for n in names if n.startswith("domainpar.")]}))
"""


def startup(prefix: Path, activation: str, processes: int = 3) -> list[dict]:
    """Start-up figures of ``processes`` fresh processes in a row sharing a fresh numba cache (the first fills it)."""
    cache = Path(tempfile.mkdtemp(prefix="domainpar-numba-"))
    try:
        runs = []
        for _ in range(processes):
            done = subprocess.run([sys.executable, "-c", STARTUP_PROBE, str(prefix), activation], capture_output=True, text=True,
                                  env={**os.environ, "NUMBA_CACHE_DIR": str(cache)}, check=True)  # fmt: skip
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        return runs
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--model", type=Path)
    parser.add_argument("--filter", type=Path)
    parser.add_argument("--event", type=Path, required=True, help="A raw event prefix (hits and cells; truth not read).")
    parser.add_argument("--parts", type=int, default=1)
    parser.add_argument("--method", default="geometric")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--copies", type=int, default=4, help="Events of the throughput run (0: none).")
    parser.add_argument("--out", type=Path, help="Where the measurement's JSON and work files go.")
    parser.add_argument("--startup", action="store_true", help="Measure a process's start-up to its first event instead.")
    parser.add_argument("--activation", default="relu", help="The model's activation for --startup (relu uses the row kernels).")
    options = parser.parse_args(argv)
    keep_freed_memory()  # as the event-chain commands do: the chain measured as it runs
    if options.startup:
        for index, run in enumerate(startup(options.event, options.activation)):
            figures = ", ".join(f"{k} {v:.2f} s" for k, v in run.items() if k != "compiled")
            print(f"process {index + 1}: {figures}; compiled: {', '.join(run['compiled']) or 'nothing'}")
        print(f"load average {list(os.getloadavg())}")
        return
    if options.out is None:
        parser.error("--out is required")
    options.out.mkdir(parents=True, exist_ok=True)
    cores = len(os.sched_getaffinity(0))
    load_before = os.getloadavg()
    pipeline_args = (["--checkpoint", str(options.checkpoint)] if options.checkpoint else ["--model", str(options.model)]) + (
        ["--filter", str(options.filter)] if options.filter else []
    ) + ["--parts", str(options.parts), "--method", options.method]
    single = options.out / "single"
    shutil.rmtree(single, ignore_errors=True)
    _link_event(options.event, single, int(options.event.name[len("event"):]))
    # A first chained run primes numba's on-disk cache (a machine's first run compiles; later ones must not).
    chain(pipeline_args, single, options.out / "chain-prime")
    threads = max(1, cores if options.parts == 1 else 1)
    alone = stages_alone(options.checkpoint, options.model, options.filter, options.event, options.parts, options.method,
                         options.repeats, threads)  # fmt: skip
    walls, summaries = [], []
    for _ in range(options.repeats):
        wall, summary = chain(pipeline_args, single, options.out / "chain")
        walls.append(wall)
        summaries.append(summary)
    in_run = {s: statistics.median(x["per_event"][0].get(s, 0.0) for x in summaries) for s in (*STAGES, "wait")}
    result = {
        "event": str(options.event),
        "cores": cores,
        "parts": options.parts,
        "alone": alone,
        "chain_wall": walls,
        "chain_wall_median": statistics.median(walls),
        "ratio": statistics.median(walls) / alone["sum"],
        "chain_stages_in_run": in_run,
    }
    if options.copies:
        many = options.out / "many"
        shutil.rmtree(many, ignore_errors=True)
        first = int(options.event.name[len("event"):])
        for index in range(options.copies):
            _link_event(options.event, many, first + index)
        wall, summary = chain(pipeline_args, many, options.out / "throughput")
        per_event = [sum(e.get(s, 0.0) for s in STAGES) for e in summary["per_event"]]
        result["throughput"] = {
            "events": options.copies, "wall": wall, "events_per_hour": 3600.0 * options.copies / wall,
            "summary_events_per_hour": summary["events_per_hour"], "per_event_stage_sum": per_event,
            "stage_seconds_mean": summary["stage_seconds_mean"],
        }  # fmt: skip
    result["load_average"] = {"before": list(load_before), "after": list(os.getloadavg())}
    (options.out / "measure.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["| stage | alone (median s) | in the chained run (s) |", "|---|---|---|"]
    for name in STAGES:
        lines.append(f"| {name} | {alone['median'][name]:.2f} | {in_run[name]:.2f} |")
    lines.append(f"| sum | {alone['sum']:.2f} | chain wall {result['chain_wall_median']:.2f} (ratio {result['ratio']:.2f}) |")
    print("\n".join(lines))
    if "throughput" in result:
        t = result["throughput"]
        print(f"throughput: {t['events']} events in {t['wall']:.1f} s: {t['events_per_hour']:.0f} events/hour on {cores} cores")
    print(f"load average {result['load_average']}")


if __name__ == "__main__":
    main()
