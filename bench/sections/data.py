"""Data path: what a rank pays to get its part of a fresh event, how long training waits for it, dataset throughput.

Three tables, each with the before/after comparison taken in the same run:

1. **Per-rank preparation of a fresh real full event** (event 21000's graph,
   no truth; built once, partitioned with METIS into P = 1, 2, 4, 8 parts and
   written as part files, all untimed). Timed, per rank and part: reading
   its self-sufficient part file and making its local graph tensors
   (:func:`domainpar.parallel.part.load_host_part` + ``stage``) — against the
   two ways a rank got the same tensors before part files: reading the
   whole graph and partitioning it itself ("on the fly"), and reading the
   whole graph plus the whole plan ("whole plan from disk"). Medians over
   parts and repeats, the slowest part beside them; files come from the page
   cache (what a node's local disk or a warm parallel file system gives).
   Host memory: the RSS high-water mark of a fresh process that reads one
   part (the largest) and makes its tensors, above the process's RSS before,
   and its ratio to the same figure for the whole event (P = 1).
2. **Data wait of a 2-rank domain training** on ``≥ 8`` full-scale simulated
   events (plans made once by the run, caching off, so every step reads a
   fresh part), at a model size whose step takes longer than reading a part:
   the fraction of step time the step waited for its input, over the steps
   after the first of each epoch (prefetch warm), with ``data.prefetch`` 2
   and 0 (synchronous reads) in the same run.
3. **Build + partition throughput** of a raw dataset with ``domainpar build``
   and ``domainpar partition --parts 4`` (the real commands, in a subprocess),
   ``--workers 1`` against ``--workers 2`` on the same events, and
   ``--workers 2`` on the whole dataset (full run: 100 full-scale events).
   The raw events are simulated once into the cache, or taken from
   ``$DOMAINPAR_BENCH_EVENTS`` (a directory of TrackML events kept outside
   the repository, e.g. simulated once with ``domainpar simulate --events 100``).

Wall time and CPU time (user + system of every process involved) are given
side by side: on a shared machine CPU time is what other jobs distort least.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common.report import REPO_ROOT, Column, Section, ratio
from bench.common.timing import median_seconds

#: Directory of raw TrackML events for the throughput table (else simulated into the cache).
EVENTS_ENV = "DOMAINPAR_BENCH_EVENTS"

_PART_PROBE = r"""
import json, sys, time
from domainpar.parallel.part import load_host_part, stage
from bench.common.memory import current_rss_bytes, peak_rss_bytes, reset_peak_rss
import numpy as np  # noqa: F401 - imports done before the baseline
import torch  # noqa: F401
path, part = sys.argv[1], int(sys.argv[2])
baseline = current_rss_bytes()
reset_peak_rss()
start = time.perf_counter()
data = load_host_part(path, part)
graph = stage(data, "cpu").graph
seconds = time.perf_counter() - start
print(json.dumps({"peak_bytes": peak_rss_bytes() - baseline, "held_bytes": current_rss_bytes() - baseline,
                  "part_bytes": data.nbytes, "seconds": seconds, "edges": graph.num_edges}))
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _probe_part(path: Path, part: int) -> dict:
    """Host memory of one rank reading one part, in a fresh process (so nothing else is resident)."""
    done = subprocess.run([sys.executable, "-c", _PART_PROBE, str(path), str(part)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=REPO_ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"part probe failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def preparation_rows(graph_path: Path, work: Path, parts: tuple[int, ...], repeats: int) -> list[dict]:
    """Table 1 (see the module docstring)."""
    from domainpar.data.graph_files import load_graph
    from domainpar.parallel.part import load_host_part, stage
    from domainpar.partition import partition_graph
    from domainpar.partition.io import load_plan, part_file_name, save_plan
    from domainpar.partition.local_graph import local_graph

    graph = load_graph(graph_path)
    rows = []
    whole_peak = None
    for num_parts in parts:
        plan_dir = work / f"plans-event{graph.event_id:09d}-metis-{num_parts}"
        if not (plan_dir / "manifest.json").is_file():
            save_plan(partition_graph(graph, num_parts, "metis", seed=0), plan_dir, graph)
        files = [plan_dir / part_file_name(p) for p in range(num_parts)]

        def from_part_file(p: int):
            return stage(load_host_part(files[p], p), "cpu").graph

        per_part = [median_seconds(lambda p=p: from_part_file(p), repeats) for p in range(num_parts)]
        wall = statistics.median(t for timing in per_part for t in timing.samples)
        cpu = statistics.median(t for timing in per_part for t in timing.cpu_samples)
        slowest = max(timing.seconds for timing in per_part)
        part0 = 0

        def on_the_fly():
            whole = load_graph(graph_path)
            return local_graph(whole, partition_graph(whole, num_parts, "metis", seed=0).parts[part0])

        def whole_plan():
            whole = load_graph(graph_path)
            return local_graph(whole, load_plan(plan_dir, whole).parts[part0])

        fly = median_seconds(on_the_fly, max(1, repeats // 2), warmup=0)
        disk = median_seconds(whole_plan, max(1, repeats // 2), warmup=0)
        largest = max(range(num_parts), key=lambda p: files[p].stat().st_size)
        memory = _probe_part(files[largest], largest)
        if num_parts == 1:
            whole_peak = memory["peak_bytes"]
        rows.append({
            "num_parts": num_parts,
            "part_file_s": wall,
            "part_file_cpu_s": cpu,
            "slowest_part_s": slowest,
            "on_the_fly_s": fly.seconds,
            "whole_plan_s": disk.seconds,
            "speedup_vs_fly": ratio(fly.seconds, wall),
            "part_file_mb": files[largest].stat().st_size / 1e6,
            "peak_rss_mb": memory["peak_bytes"] / 1e6,
            "part_bytes_mb": memory["part_bytes"] / 1e6,
            "memory_ratio": ratio(memory["peak_bytes"], whole_peak),
            "memory_ratio_times_p": None if whole_peak is None else memory["peak_bytes"] / whole_peak * num_parts,
            "samples": [timing.samples for timing in per_part],
        })
    return rows


def _simulate(directory: Path, events: int, particles: int, seed: int, first: int) -> Path:
    from domainpar.sim.config import SimulationConfig
    from domainpar.sim.dataset import simulate_dataset

    if len(list(directory.glob("event*-hits.csv*"))) < events:
        shutil.rmtree(directory, ignore_errors=True)
        simulate_dataset(directory, events, SimulationConfig(num_particles=particles), seed=seed, first_event_id=first, progress=False)
    return directory


def wait_rows(work: Path, *, events: int, particles: int, hidden: int, iterations: int, epochs: int) -> list[dict]:
    """Table 2 (see the module docstring)."""
    from domainpar.train.config import load_config
    from domainpar.train.run import train

    from domainpar.data.dataset import build_graph_files
    from domainpar.data.trackml import event_prefixes

    graphs = {}
    for kind, count, seed, first in (("train", events, 11, 5000), ("val", 1, 12, 6000)):
        raw = _simulate(work / f"{kind}-{count}x{particles}", count, particles, seed=seed, first=first)
        graphs[kind] = work / f"{kind}-{count}x{particles}-graphs"
        build_graph_files(event_prefixes(raw), graphs[kind], workers=2, progress=False, skip_existing=True)
    rows = []
    for prefetch in (2, 0):
        out = work / f"train-prefetch{prefetch}"
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
        for name in ("metrics.jsonl", "steps.jsonl", "model.pt", "config.yaml"):
            (out / name).unlink(missing_ok=True)
        config = load_config(None, {
            "data.train": str(graphs["train"]), "data.val": str(graphs["val"]), "run.out": str(out), "parallel.mode": "domain",
            "parallel.ranks": 2, "parallel.threads": 1, "model.hidden": hidden, "model.num_iterations": iterations,
            "run.epochs": epochs, "optim.batch_events": 1, "data.cache_gb": 0, "data.prefetch": prefetch,
            "run.progress": False, "run.curves": False,
        })
        summary = train(config)  # plans are made by the run (untimed here) and kept in `out` for the next bench run
        steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
        first_of_epoch = {min(s["step"] for s in steps if s["epoch"] == e) for e in {s["epoch"] for s in steps}}
        warm = [s for s in steps if s["step"] not in first_of_epoch]
        cold = [s for s in steps if s["step"] in first_of_epoch]
        step_s = sum(s["seconds"] for s in warm)
        wait_s = sum(s["data_wait_seconds"] for s in warm)
        rows.append({
            "prefetch": prefetch,
            "steps": summary["steps"],
            "step_s": statistics.median(s["seconds"] for s in warm),
            "wait_s": statistics.median(s["data_wait_seconds"] for s in warm),
            "wait_fraction": wait_s / step_s if step_s else None,
            "first_step_wait_s": statistics.median(s["data_wait_seconds"] for s in cold),
            "samples": [(s["seconds"], s["data_wait_seconds"]) for s in steps],
        })
    return rows


def _command(args: list[str], timeout: float = 7200) -> tuple[float, float]:
    """Wall and CPU seconds (every process of the command) of ``python -m domainpar <args>``."""
    cpu = _children_cpu()
    start = time.perf_counter()
    quiet = ["--quiet"] if args[0] == "build" else []
    done = subprocess.run([sys.executable, "-m", "domainpar", *args, *quiet], capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"domainpar {args[0]} failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
    return wall, _children_cpu() - cpu


def throughput_rows(work: Path, raw: Path, *, subset: int, parts: int = 4) -> list[dict]:
    """Table 3 (see the module docstring)."""
    from domainpar.data.trackml import event_prefixes

    prefixes = event_prefixes(raw)
    small = work / f"subset-{subset}"
    shutil.rmtree(small, ignore_errors=True)
    small.mkdir(parents=True)
    for prefix in prefixes[:subset]:
        for part in prefix.parent.glob(prefix.name + "-*"):
            (small / part.name).symlink_to(part.resolve())
    runs = [("subset", small, 1), ("subset", small, 2)]
    if len(prefixes) > subset:
        runs.append(("all", raw, 2))
    rows = []
    for label, source, workers in runs:
        count = len(event_prefixes(source))
        graphs, plans = work / f"graphs-{label}-w{workers}", work / f"plans-{label}-w{workers}"
        shutil.rmtree(graphs, ignore_errors=True)
        shutil.rmtree(plans, ignore_errors=True)
        build_wall, build_cpu = _command(["build", "--input", str(source), "--out", str(graphs), "--workers", str(workers)])
        part_wall, part_cpu = _command(["partition", "--graph", str(graphs), "--parts", str(parts), "--out", str(plans),
                                        "--workers", str(workers)])
        wall = build_wall + part_wall
        rows.append({
            "events": count, "workers": workers, "build_s": build_wall, "partition_s": part_wall, "total_s": wall,
            "cpu_s": build_cpu + part_cpu, "events_per_s": count / wall, "seconds_per_100": 100 * wall / count,
        })
        shutil.rmtree(graphs, ignore_errors=True)
        shutil.rmtree(plans, ignore_errors=True)
    one = next(r for r in rows if r["workers"] == 1)
    for row in rows:
        row["speedup"] = ratio(one["seconds_per_100"], row["seconds_per_100"])
    return rows


def section(ctx) -> Section:
    """Entry point (see :mod:`bench.sections`)."""
    from bench.common.timing import load_average

    start = time.perf_counter()
    work = ctx.cache / "data-section"
    work.mkdir(parents=True, exist_ok=True)
    full = ctx.real_full()
    notes, markdown = [], []
    section = Section(name="data", title="Data path: a rank's part of a fresh event, data wait, dataset throughput")

    if full is None:
        notes.append("The real full event was not found: the per-rank preparation table is missing.")
        prep = []
    else:
        prep = preparation_rows(full.path, work, ctx.size((1, 4), (1, 2, 4, 8)), ctx.size(3, 7))
    section.columns = [
        Column("num_parts", "P"),
        Column("part_file_s", "part file → tensors, s (median)", "{:.3f}"),
        Column("part_file_cpu_s", "CPU s", "{:.3f}"),
        Column("slowest_part_s", "slowest part, s", "{:.3f}"),
        Column("on_the_fly_s", "before: whole graph + partition, s", "{:.2f}"),
        Column("whole_plan_s", "before: whole graph + whole plan, s", "{:.2f}"),
        Column("speedup_vs_fly", "speed-up", "{:.1f}×"),
        Column("part_file_mb", "largest part file, MB", "{:.1f}"),
        Column("peak_rss_mb", "host memory, MB (peak RSS)", "{:.1f}"),
        Column("memory_ratio_times_p", "memory / whole event × P", "{:.2f}"),
    ]
    section.rows = prep
    if full is not None:
        notes.append(
            f"Real full event 21000 ({full.num_nodes:,} hits, {full.num_edges:,} edges), METIS plans written as part files "
            "before timing; a rank's preparation = read its part file (CRC and every field validated) + its local graph "
            "tensors on the CPU. 'before' reproduces with today's code what a rank did without part files. Host memory: "
            "RSS high-water mark of a fresh process reading the largest part, above its RSS before; "
            "'× P' ≤ 1.3 means a rank holds at most 1.3/P of the whole event."
        )

    waits = wait_rows(
        work, events=ctx.size(8, 8), particles=ctx.size(3000, 10000), hidden=ctx.size(16, 32), iterations=ctx.size(2, 4),
        epochs=2,
    )
    markdown.append("\n**Data wait of a 2-rank domain training (cache off)**\n")
    markdown.append("| data.prefetch | steps | s/step (median, warm) | data wait s/step (median, warm) | data wait / step time (warm) | data wait of each epoch's first step, s |")
    markdown.append("|---|---|---|---|---|---|")
    for row in waits:
        markdown.append(f"| {row['prefetch']} | {row['steps']} | {row['step_s']:.3f} | {row['wait_s']:.4f} | "
                        f"{row['wait_fraction']:.2%} | {row['first_step_wait_s']:.3f} |")
    notes.append(
        f"Data wait: {ctx.size(8, 8)} simulated events of {ctx.size(3000, 10000):,} particles (+1 validation event), "
        f"domain mode on 2 ranks (one torch thread each), hidden {ctx.size(16, 32)}, {ctx.size(2, 4)} iterations, "
        "1 event per step, 2 epochs, data.cache_gb 0; from steps.jsonl (data_wait_seconds is the largest wait of the "
        "ranks); 'warm' = every step but the first of each epoch. Plans are made once by the run (untimed here)."
    )

    raw_env = os.environ.get(EVENTS_ENV)
    if raw_env:
        raw = Path(raw_env)
    else:
        raw = _simulate(work / f"dataset-{ctx.size(6, 100)}", ctx.size(6, 100), 10000, seed=21, first=7000)
    through = throughput_rows(work, raw, subset=ctx.size(4, 20))
    markdown.append("\n**Build + partition (P = 4) of a dataset of full-scale events**\n")
    markdown.append("| events | --workers | build s | partition s | total s | CPU s | events/s | s per 100 events | speed-up |")
    markdown.append("|---|---|---|---|---|---|---|---|---|")
    for row in through:
        markdown.append(f"| {row['events']} | {row['workers']} | {row['build_s']:.1f} | {row['partition_s']:.1f} | "
                        f"{row['total_s']:.1f} | {row['cpu_s']:.1f} | {row['events_per_s']:.2f} | "
                        f"{row['seconds_per_100']:.0f} | {row['speedup']:.2f}× |")
    notes.append(
        f"Throughput: `domainpar build` then `domainpar partition --parts 4 --method metis` on raw events "
        f"({'from $' + EVENTS_ENV if raw_env else 'simulated into the cache'}: {raw}); the real commands in a subprocess; "
        "CPU s = user + system of every process (workers included)."
    )
    section.notes = notes
    section.markdown_extra = "\n".join(markdown)
    section.extra = {"waits": waits, "throughput": through, "load_average_end": load_average()}
    section.seconds = time.perf_counter() - start
    return section
