"""Faults: how soon a killed rank is named by every launcher, and what the watchdog costs a training step.

* **kill**: a small domain-parallel ``domainpar train`` on 2 ranks (CPU, gloo),
  started by each launcher (``--ranks`` spawn, ``torchrun``, srun-like: one
  process per task with Slurm's variables and an env:// rendezvous that rank
  0 serves); after 3 logged steps rank 1, or rank 0, is SIGKILLed. Measured:
  seconds from the kill until every process of the job has exited, the
  launcher's exit status, the ``error:`` lines printed and whether they name
  the killed rank, and the lines of output in all.
* **overhead**: the same 2-rank training through the spawn API with and
  without the per-rank watchdog (heartbeat thread), in alternating runs; the
  median seconds per step from ``steps.jsonl`` (first epoch left out) and
  their ratio.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import time
from pathlib import Path

from bench.common.jobs import LAUNCHERS, error_lines, running, start
from bench.common.report import Column, Section, ratio
from bench.common.timing import load_average


def _graphs(directory: Path) -> Path:
    """Four small random event graphs (hit-graph feature widths; sizes 80-110 nodes, 300-420 edges)."""
    import dataclasses

    from bench.common.workloads import random_event_graph
    from domainpar.data.event_graph import save_graph

    directory.mkdir(parents=True, exist_ok=True)
    for index in range(4):
        path = directory / f"event{index:09d}.npz"
        if not path.exists():
            graph = random_event_graph(80 + 10 * index, 300 + 40 * index, seed=index)
            save_graph(dataclasses.replace(graph, event_id=index), path)
    return directory


def _kill_once(work: Path, launcher: str, victim: int, data: Path) -> dict:
    out = work / f"{launcher}-{victim}-{time.monotonic_ns()}"
    job = start(launcher, 2, data, out)
    try:
        job.wait_for_ranks(2, timeout=120)
        job.wait_for_steps(3, timeout=180)
        ranks = job.ranks()
        os.kill(ranks[victim], signal.SIGKILL)
        killed = time.monotonic()
        outputs = job.finish(120)
        seconds = time.monotonic() - killed
        survivors = sum(running(pid) for pid in ranks.values())
    finally:
        job.kill_all()
    lines = [line for output in outputs for line in error_lines(output)]
    named = bool(lines) and all(f"rank {victim} " in line for line in lines)
    return {"seconds": seconds, "status": job.processes[0].returncode if launcher != "srun" else
            [p.returncode for p in job.processes], "error_lines": lines, "named": named,
            "output_lines": sum(len(o.strip().splitlines()) for o in outputs), "survivors": survivors}


def kills(work: Path, repeats: int) -> list[dict]:
    """One row per (launcher, killed rank): medians over ``repeats`` kills."""
    data = _graphs(work / "graphs")
    rows = []
    for launcher in LAUNCHERS:
        for victim in (1, 0):
            samples = [_kill_once(work, launcher, victim, data) for _ in range(repeats)]
            rows.append({
                "launcher": launcher, "killed": victim, "seconds": statistics.median(s["seconds"] for s in samples),
                "worst_seconds": max(s["seconds"] for s in samples), "named": sum(s["named"] for s in samples),
                "repeats": repeats, "output_lines": statistics.median(s["output_lines"] for s in samples),
                "error_line": samples[0]["error_lines"][0] if samples[0]["error_lines"] else "",
                "survivors": sum(s["survivors"] for s in samples), "samples": samples,
            })
    return rows


def _steps(out: Path) -> list[float]:
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    return [s["seconds"] for s in steps if s["epoch"] > 1]


def overhead(work: Path, rounds: int, epochs: int) -> dict:
    """Median s/step with and without the watchdog (alternating ``rounds`` times)."""
    from domainpar.comm.watchdog import WatchdogConfig
    from domainpar.train.config import load_config
    from domainpar.train.launch import spawn
    from domainpar.train.run import prepare_payload
    from domainpar.train.trainer import run_rank

    data = _graphs(work / "graphs")
    samples: dict[str, list[float]] = {"with": [], "without": []}
    for index in range(rounds):
        for name, watchdog in (("with", WatchdogConfig()), ("without", None)):
            out = work / f"overhead-{name}-{index}"
            config = load_config(None, {
                "data.train": str(data), "run.out": str(out), "parallel.mode": "domain", "parallel.ranks": 2,
                "run.epochs": epochs, "model.hidden": 8, "model.num_iterations": 1, "model.mlp_layers": 1,
                "parallel.threads": 1, "run.progress": False, "run.curves": False, "run.checkpoint_every_epochs": epochs,
            })
            spawn(run_rank, 2, args=(prepare_payload(config, 2),), timeout_s=1800, num_threads=1, watchdog=watchdog)
            samples[name] += _steps(out)
    return {
        "with_s": statistics.median(samples["with"]), "without_s": statistics.median(samples["without"]),
        "ratio": ratio(statistics.median(samples["with"]), statistics.median(samples["without"])),
        "steps": {k: len(v) for k, v in samples.items()},
    }


def section(ctx) -> Section:
    """Entry point (see :mod:`bench.sections`)."""
    work = ctx.cache / "faults"
    start_load = load_average()
    started = time.perf_counter()
    rows = kills(work, repeats=ctx.size(1, 3))
    cost = overhead(work, rounds=ctx.size(1, 3), epochs=ctx.size(5, 10))
    result = Section(
        name="faults",
        title="Faults: a killed rank named by every launcher; the watchdog's cost per step",
        columns=[
            Column("launcher", "launcher"),
            Column("killed", "killed rank"),
            Column("seconds", "kill → job ended, s (median)", "{:.1f}"),
            Column("worst_seconds", "worst, s", "{:.1f}"),
            Column("named", "runs naming it"),
            Column("repeats", "runs"),
            Column("output_lines", "output lines (median)", "{:.0f}"),
            Column("error_line", "what the user reads"),
        ],
        rows=rows,
        extra={"overhead": cost, "load_average_start": start_load, "load_average_end": load_average()},
    )
    result.notes += [
        "2 ranks, CPU/gloo, a 4-event synthetic training (hidden 8, 1 iteration); SIGKILL after 3 logged steps. "
        "torchrun's output includes its own summary (a traceback of torchrun itself and a 'Root Cause' block); "
        "srun-like output of rank 0's death includes one c10d warning about the lost store connection.",
        f"Watchdog cost: median {cost['with_s'] * 1e3:.2f} ms/step with it, {cost['without_s'] * 1e3:.2f} ms/step "
        f"without ({cost['ratio']:.3f}×; {cost['steps']['with']} and {cost['steps']['without']} steps, alternating runs).",
        f"Load average (1/5/15 min) at start {start_load}, at end {load_average()}.",
    ]
    result.seconds = time.perf_counter() - started
    return result
