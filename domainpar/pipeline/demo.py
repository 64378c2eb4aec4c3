"""The embedded default pipeline behind ``domainpar demo`` and ``make run``.

simulate → build → partition → domain-parallel training → evaluation, on
events simulated on the real TrackML detector, so that a fresh clone shows the
whole engine working with no external data. Every stage writes what the
corresponding command would, under ``DemoConfig.out``.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from domainpar.errors import DomainparError
from domainpar.output_paths import check_output_dir

#: Figures of the closing table, per evaluated dataset.
SUMMARY_KEYS = ("efficiency", "purity", "auc", "trackml_score", "tracking_efficiency", "fake_rate", "duplicate_rate")


@dataclass(frozen=True)
class DemoConfig:
    """What the demo pipeline runs."""

    out: Path = Path("runs/demo")
    """Output directory for events, graphs, plans, the training run and the evaluation."""
    events: int = 4
    """Simulated training events."""
    val_events: int = 1
    """Simulated validation events."""
    particles: int = 2000
    """Charged particles per simulated event (10000 ≈ full pile-up)."""
    ranks: int = 2
    """Local processes of the domain group (parts per event)."""
    method: str = "metis"
    """Partitioner: metis or geometric."""
    epochs: int = 15
    """Training epochs."""
    hidden: int = 32
    """Hidden width of the Interaction Network."""
    iterations: int = 4
    """Message-passing iterations."""
    real: Path = Path("tests/data/trackml")
    """Also evaluate on the real labelled TrackML event(s) here, if the directory exists."""
    seed: int = 0
    """Seed of simulation, weights and sampling."""

    def validate(self) -> None:
        """Raise one :class:`DomainparError` line for the first option out of range (before anything is written)."""
        import os

        from domainpar.train.config import INT_LIMIT, MAX_HIDDEN, MAX_ITERATIONS

        local = 4 * (os.cpu_count() or 1)
        for name, value, low, high in (("--events", self.events, 1, 10**6), ("--val-events", self.val_events, 1, 10**6),
                                       ("--ranks", self.ranks, 1, local), ("--epochs", self.epochs, 1, 10**6),
                                       ("--particles", self.particles, 10, 10**6), ("--hidden", self.hidden, 1, MAX_HIDDEN),
                                       ("--iterations", self.iterations, 1, MAX_ITERATIONS), ("--seed", self.seed, 0, INT_LIMIT)):  # fmt: skip
            if value < low:
                raise DomainparError(f"{name} must be at least {low} (got {value})")
            if value > high:
                raise DomainparError(f"{name} must be at most {high} (got {value})")
        if self.method not in ("metis", "geometric"):
            raise DomainparError(f"--method must be metis or geometric (got {self.method!r})")
        from domainpar.model.interaction_network import ModelConfig
        from domainpar.train.config import check_model_size

        check_model_size(ModelConfig(hidden=self.hidden, num_iterations=self.iterations), options="--hidden/--iterations")
        real = Path(self.real)
        if real.is_dir() and any(real.glob("event*-truth.csv*")):
            from domainpar.data.trackml import event_prefixes, load_event

            # The real events are evaluated last: a damaged one must fail now, not after the training.
            for prefix in event_prefixes(real):
                load_event(prefix, parts=("hits", "particles", "truth"))


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def run_demo(config: DemoConfig, echo: Callable[[str], None] = print) -> dict:
    """Run the whole engine on simulated events and return ``summary.json``'s content.

    Args:
        config: the pipeline's settings (validated first).
        echo: where progress lines and tables go (the CLI passes ``click.echo``).

    Returns:
        ``{"train": last metrics record, "evaluate": {dataset: figures}}``.
    """
    from domainpar.atomic import atomic_path
    from domainpar.data.event_graph import load_graph
    from domainpar.data.graph import build_dataset
    from domainpar.data.simulate import SimulationConfig, simulate_dataset
    from domainpar.inference.config import EvaluateConfig
    from domainpar.inference.evaluation import evaluate, write_outputs
    from domainpar.partition import partition_graph
    from domainpar.partition.plot import plot_partition
    from domainpar.partition.report import format_report_table, partition_report
    from domainpar.train.config import config_from_dict
    from domainpar.train.run import train

    config.validate()
    out_dir, ranks, method, seed = Path(config.out), config.ranks, config.method, config.seed
    check_output_dir(out_dir, "--out")
    started = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    sim_config = SimulationConfig(num_particles=config.particles)

    def section(title: str) -> None:
        echo("")
        echo(f"== {title}")

    section(f"1/5 simulate {config.events} + {config.val_events} events ({config.particles} particles each)")
    train_events = out_dir / "events" / "train"
    val_events = out_dir / "events" / "val"
    simulate_dataset(train_events, config.events, sim_config, seed=seed, first_event_id=1)
    simulate_dataset(val_events, config.val_events, sim_config, seed=seed + 10_000, first_event_id=1001)

    section("2/5 build hit graphs")
    graph_dirs = {"train": out_dir / "graphs" / "train", "val": out_dir / "graphs" / "val"}
    records = []
    for kind, events in (("train", train_events), ("val", val_events)):
        for stats in build_dataset(events, graph_dirs[kind]):
            records.append((kind, stats.as_record()))
    echo(f"{'set':>5} {'event':>6} {'nodes':>8} {'edges':>9} {'eff':>6} {'eff_pt1':>8} {'purity':>7} {'s':>6}")
    for kind, r in records:
        echo(
            f"{kind:>5} {r['event_id']:>6} {r['num_nodes']:>8,} {r['num_edges']:>9,} {_fmt(r['efficiency']):>6} "
            f"{_fmt(r['efficiency_pt1']):>8} {_fmt(r['purity']):>7} {r['seconds']:>6.2f}"
        )

    section(f"3/5 partition the first training event into {ranks} parts ({method})")
    first_graph = load_graph(sorted(graph_dirs["train"].glob("*.npz"))[0])
    plan = partition_graph(first_graph, ranks, method, seed=seed, option="--ranks")
    report = partition_report(plan, hidden=config.hidden)
    echo(format_report_table([(str(first_graph.event_id), report)]))
    echo(f"picture: {plot_partition(first_graph, plan, out_dir / 'partition.png')}")

    section(f"4/5 train: domain mode, {ranks} ranks, {config.epochs} epochs")
    run_dir = out_dir / "train"
    if run_dir.exists():
        # The trainer refuses to mix a fresh run with old checkpoints; the demo's own run is disposable.
        shutil.rmtree(run_dir)
    train_config = config_from_dict(
        {
            "data": {"train": str(graph_dirs["train"]), "val": str(graph_dirs["val"]), "method": method},
            "model": {"hidden": config.hidden, "num_iterations": config.iterations},
            "optim": {"lr": 3e-3, "warmup": 2, "pos_weight": 3.0},
            "parallel": {"mode": "domain" if ranks > 1 else "single", "ranks": ranks},
            "run": {"out": str(run_dir), "epochs": config.epochs, "seed": seed},
        },
        source="demo",
    )
    summary = train(train_config)
    final = summary.get("final") or {}
    for key in ("epoch", "train_loss", "val_loss", "efficiency", "purity", "auc", "seconds", "halo_bytes"):
        echo(f"  {key:<12} {_fmt(final.get(key))}")
    echo(f"curves: {run_dir / 'curves.png'}   metrics: {run_dir / 'metrics.jsonl'}")

    section(f"5/5 evaluate ({ranks} parts, halo exchange) on held-out events")
    evaluations = {}
    targets = [("simulated", val_events)]
    real_dir = Path(config.real)
    if real_dir.is_dir() and any(real_dir.glob("event*-truth.csv*")):
        targets.append(("real TrackML", real_dir))
    for label, data in targets:
        eval_config = EvaluateConfig(checkpoint=Path(summary["model"]), data=data, num_parts=ranks, method=method, seed=seed)
        eval_report = evaluate(eval_config)
        slug = label.split()[0].lower()
        write_outputs(eval_report, plots_dir=out_dir / "evaluate" / slug, submissions_dir=out_dir / "evaluate" / slug)
        evaluations[label] = eval_report.summary
    labels = list(evaluations)
    echo(f"{'':>20} " + " ".join(f"{label:>14}" for label in labels))
    for key in SUMMARY_KEYS:
        echo(f"{key:>20} " + " ".join(f"{_fmt(evaluations[label].get(key)):>14}" for label in labels))
    result = {"train": final, "evaluate": {k: {kk: v.get(kk) for kk in SUMMARY_KEYS} for k, v in evaluations.items()}}
    summary_path = out_dir / "summary.json"
    with atomic_path(summary_path) as tmp:
        tmp.write_text(json.dumps(result, indent=2) + "\n")
    echo(f"\ndone in {time.perf_counter() - started:.0f} s; everything is under {out_dir} (summary: {summary_path})")
    return result
