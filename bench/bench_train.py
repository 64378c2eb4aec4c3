"""Training throughput: single process vs domain-parallel (2 ranks) vs sectors on simulated events.

Simulates a few small events with the real detector, builds their graphs (raw
events go straight to ``train``, which builds graphs once), and trains each
mode for the same events and steps with one torch thread per rank (strong
scaling on a 2-core machine). Reports the median seconds per optimiser step
(from ``steps.jsonl``, so start-up is excluded) and ratios to single.

    .venv/bin/python bench/bench_train.py --events 6 --particles 800 --epochs 3 --out /tmp/bench_train
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=6)
    parser.add_argument("--particles", type=int, default=800)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench_train"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    from domainpar.data.simulate import SimulationConfig, simulate_dataset
    from domainpar.train.config import load_config
    from domainpar.train.run import train

    raw = args.out / "raw"
    if not any(raw.glob("event*-hits.csv*")):
        simulate_dataset(raw, args.events, SimulationConfig(num_particles=args.particles), seed=1, progress=True)
    val = args.out / "raw_val"
    if not any(val.glob("event*-hits.csv*")):
        simulate_dataset(val, 2, SimulationConfig(num_particles=args.particles), seed=2, first_event_id=1000, progress=True)

    runs = {
        "single": {"parallel.mode": "single"},
        "domain2": {"parallel.mode": "domain", "parallel.ranks": 2},
        "sectors2": {"parallel.mode": "sectors", "parallel.ranks": 2},
    }
    results = {}
    for name, overrides in runs.items():
        run_dir = args.out / name
        if (run_dir / "checkpoints").is_dir():
            shutil.rmtree(run_dir / "checkpoints")  # keep the built graphs, start training afresh
        config = load_config(
            None,
            {
                "data.train": str(raw),
                "data.val": str(val),
                "run.out": str(args.out / name),
                "model.hidden": args.hidden,
                "model.iterations": args.iterations,
                "run.epochs": args.epochs,
                "optim.batch_events": 2,
                "optim.lr": 3e-3,
                "optim.warmup": 2,
                "optim.pos_weight": 3.0,
                "parallel.threads": 1,
                "run.progress": False,
                **overrides,
            },
        )
        summary = train(config)
        steps = [json.loads(line) for line in (args.out / name / "steps.jsonl").read_text().splitlines()]
        # The first step of a run pays the partitioning of its events and lazy imports; skip epoch 1.
        later = [s["seconds"] for s in steps if s["epoch"] > 1] or [s["seconds"] for s in steps]
        final = summary["final"]
        results[name] = {
            "median_step_seconds": statistics.median(later),
            "steps": summary["steps"],
            "final": {k: final[k] for k in ("train_loss", "val_loss", "efficiency", "purity", "auc", "halo_bytes", "peak_memory_bytes")},
        }
    for name, result in results.items():
        result["speedup_vs_single"] = results["single"]["median_step_seconds"] / result["median_step_seconds"]
    print(f"{'mode':<10} {'s/step':>8} {'speed-up':>8} {'val_loss':>9} {'eff':>6} {'pur':>6} {'auc':>6} {'halo MB/epoch':>13}")
    for name, r in results.items():
        f = r["final"]
        print(
            f"{name:<10} {r['median_step_seconds']:8.4f} {r['speedup_vs_single']:8.2f} {f['val_loss']:9.4f} "
            f"{f['efficiency']:6.3f} {f['purity']:6.3f} {f['auc']:6.3f} {f['halo_bytes'] / 1e6:13.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
