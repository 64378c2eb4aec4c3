"""Training throughput end to end: single process vs domain-parallel (2 ranks) vs sectors (2 ranks).

A few simulated events on the real detector (raw CSVs: ``domainpar train``
builds their graphs once) are trained in each mode for the same events and
epochs with one torch thread per rank, through the same ``train`` entry point
the CLI calls: optimiser, gradient reduction, validation and logging
included. The figure is the median seconds per optimiser step from the run's
``steps.jsonl`` (the first epoch, which pays for graph building,
partitioning and lazy imports, is left out), with its ratio to single and the
final validation metrics beside it.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from pathlib import Path

from bench.common.report import Column, Section, ratio

MODES = {
    "single": {"parallel.mode": "single"},
    "domain, 2 ranks": {"parallel.mode": "domain", "parallel.ranks": 2},
    "sectors, 2 ranks": {"parallel.mode": "sectors", "parallel.ranks": 2},
}


def run(work: Path, *, events: int = 6, particles: int = 800, epochs: int = 3, hidden: int = 32, iterations: int = 4) -> Section:
    """The training section (see the module docstring); ``work`` keeps the simulated events and run directories."""
    from domainpar.sim.config import SimulationConfig
    from domainpar.sim.dataset import simulate_dataset
    from domainpar.train.config import load_config
    from domainpar.train.run import train

    start = time.perf_counter()
    raw, val = work / f"raw-{events}x{particles}", work / f"val-{particles}"
    if not any(raw.glob("event*-hits.csv*")):
        simulate_dataset(raw, events, SimulationConfig(num_particles=particles), seed=1, progress=False)
    if not any(val.glob("event*-hits.csv*")):
        simulate_dataset(val, 2, SimulationConfig(num_particles=particles), seed=2, first_event_id=1000, progress=False)
    rows = []
    for name, overrides in MODES.items():
        out = work / "runs" / name.replace(",", "").replace(" ", "-")
        shutil.rmtree(out, ignore_errors=True)
        config = load_config(None, {
            "data.train": str(raw), "data.val": str(val), "run.out": str(out), "model.hidden": hidden,
            "model.num_iterations": iterations, "run.epochs": epochs, "optim.batch_events": 2, "optim.lr": 3e-3,
            "optim.warmup": 2, "optim.pos_weight": 3.0, "parallel.threads": 1, "run.progress": False, **overrides,
        })
        summary = train(config)
        steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
        later = [s["seconds"] for s in steps if s["epoch"] > 1] or [s["seconds"] for s in steps]
        final = summary["final"]
        rows.append({
            "mode": name, "step_s": statistics.median(later), "steps": summary["steps"], "val_loss": final["val_loss"],
            "efficiency": final["efficiency"], "purity": final["purity"], "auc": final["auc"], "step_samples": later,
        })
    for row in rows:
        row["speedup"] = ratio(rows[0]["step_s"], row["step_s"])
    section = Section(
        name="training",
        title="Training throughput: single vs domain-parallel vs sectors",
        columns=[
            Column("mode", "mode"),
            Column("step_s", "s/step (median)", "{:.4f}"),
            Column("speedup", "speed-up vs single", "{:.2f}×"),
            Column("val_loss", "val loss", "{:.4f}"),
            Column("efficiency", "edge efficiency", "{:.3f}"),
            Column("purity", "edge purity", "{:.3f}"),
            Column("auc", "AUC", "{:.3f}"),
        ],
        rows=rows,
    )
    section.notes += [
        f"{events} simulated training events of {particles} particles (+ 2 validation events), {epochs} epochs, 2 events "
        f"per optimiser step; Interaction Network hidden {hidden}, {iterations} iterations; one torch thread per rank.",
        "Step time from steps.jsonl, epochs after the first; the whole training step (forward, backward, gradient "
        "reduction, optimiser). Domain mode is exact, so its validation figures equal single's.",
    ]
    section.seconds = time.perf_counter() - start
    return section


def section(ctx) -> Section:
    """Entry point (see :mod:`bench.sections`)."""
    return run(ctx.cache / "training", events=ctx.size(4, 6), particles=ctx.size(400, 800), epochs=ctx.size(2, 3))
