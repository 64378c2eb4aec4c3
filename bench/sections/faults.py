"""Faults: how soon a killed rank is named by every launcher, and what the watchdog costs a training step.

* **kill**: a small domain-parallel ``domainpar train`` on 2 ranks (CPU, gloo),
  started by each launcher (``--ranks`` spawn, ``torchrun``, srun-like: one
  process per task with Slurm's variables and an env:// rendezvous that rank
  0 serves); after 3 logged steps rank 1, or rank 0, is SIGKILLed. Measured:
  seconds from the kill until every process of the job has exited, the
  launcher's exit status, the ``error:`` lines printed and whether they name
  the killed rank, and the lines of output in all.
* **check cost**: the CPU time of one round of a rank's watchdog (heartbeat,
  failure channel, 3 same-host peers by pid, the ring successor's heartbeat)
  on a FileStore (``--ranks``) and a TCPStore (torchrun, srun); it runs once
  a second beside the training, never on the step's own path.
* **overhead**: the same 2-rank training through the spawn API with and
  without the per-rank watchdog, in alternating runs; the median seconds per
  step from ``steps.jsonl`` (first epoch left out) and their ratio. On a
  shared machine this wall-clock ratio carries the load's noise; the check
  cost above is the figure that does not.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import time
from pathlib import Path

from bench.common.report import Column, Section, ratio
from bench.common.timing import load_average
from bench.common.jobs import LAUNCHERS, error_lines, running, start


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


def check_cost(work: Path, rounds: int = 2000) -> dict:
    """Median wall and CPU microseconds of one watchdog round on a FileStore and on a TCPStore (4 ranks)."""
    import torch.distributed as dist

    from domainpar.comm.failure import STORE_PREFIX
    from domainpar.comm.watchdog import Watchdog, WatchdogConfig, process_identity

    work.mkdir(parents=True, exist_ok=True)
    stores = {
        "FileStore": dist.FileStore(str(work / f"store-{time.monotonic_ns()}"), -1),
        "TCPStore": dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False),
    }
    result = {}
    for name, store in stores.items():
        prefixed = dist.PrefixStore(STORE_PREFIX, store)
        for peer in (1, 2, 3):
            prefixed.set(f"proc/{peer}", json.dumps(process_identity()))
            prefixed.set(f"hb/{peer}", "0")
        watchdog = Watchdog(store, 0, 4, WatchdogConfig(interval_s=3600.0)).start()  # its own thread stays idle
        walls, cpus = [], []
        try:
            for beat in range(rounds):
                wall, cpu = time.perf_counter(), time.process_time()
                watchdog._check(beat)
                walls.append(time.perf_counter() - wall)
                cpus.append(time.process_time() - cpu)
        finally:
            watchdog.stop(done=False)
        result[name] = {"wall_us": statistics.median(walls) * 1e6, "cpu_us": statistics.median(cpus) * 1e6}
    return result


def _steps(out: Path) -> list[float]:
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    return [s["seconds"] for s in steps if s["epoch"] > 1]


def overhead(work: Path, rounds: int, epochs: int) -> dict:
    """Median s/step with and without the watchdog (alternating ``rounds`` times)."""
    from domainpar.comm.watchdog import WatchdogConfig
    from domainpar.launch.ranks import spawn
    from domainpar.train.config import load_config
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
    checks = check_cost(work, rounds=ctx.size(500, 2000))
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
        extra={"overhead": cost, "check_cost": checks, "load_average_start": start_load, "load_average_end": load_average()},
    )
    result.notes += [
        "2 ranks, CPU/gloo, a 4-event synthetic training (hidden 8, 1 iteration); SIGKILL after 3 logged steps. "
        "torchrun's output includes its own summary (a traceback of torchrun itself and a 'Root Cause' block); "
        "srun-like output of rank 0's death includes one c10d warning about the lost store connection.",
        "Watchdog cost: one round (once a second, in its own thread) takes "
        + ", ".join(f"{v['cpu_us']:.0f} µs CPU on a {k}" for k, v in checks.items())
        + f", i.e. under {max(v['cpu_us'] for v in checks.values()) / 1e4:.3f} % of a core. Training step with it "
        f"{cost['with_s'] * 1e3:.2f} ms, without {cost['without_s'] * 1e3:.2f} ms (median; {cost['ratio']:.3f}×; "
        f"{cost['steps']['with']} and {cost['steps']['without']} steps in alternating runs; wall clock, so the "
        "machine's load is in this ratio).",
        f"Load average (1/5/15 min) at start {start_load}, at end {load_average()}.",
    ]
    result.seconds = time.perf_counter() - started
    return result
