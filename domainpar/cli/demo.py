"""``domainpar demo``: the embedded default pipeline, end to end.

simulate → build → partition → domain-parallel training → evaluation, on
events simulated on the real TrackML detector, so that a fresh clone shows the
whole engine working with no external data. Every stage writes what the
corresponding command would, under ``--out``.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import click

from domainpar.errors import DomainparError
from domainpar.output_paths import check_output_dir


def _section(title: str) -> None:
    click.echo("")
    click.secho(f"== {title}", bold=True)


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


@click.command("demo", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("runs/demo"), show_default=True,
              help="Output directory for events, graphs, plans, the training run and the evaluation.")
@click.option("--events", "num_events", type=int, default=4, show_default=True, help="Simulated training events.")
@click.option("--val-events", "num_val_events", type=int, default=1, show_default=True, help="Simulated validation events.")
@click.option("--particles", "num_particles", type=int, default=2000, show_default=True,
              help="Charged particles per simulated event (10000 ≈ full pile-up).")
@click.option("--ranks", type=int, default=2, show_default=True, help="Local processes of the domain group (parts per event).")
@click.option("--method", type=click.Choice(["metis", "geometric"]), default="metis", show_default=True, help="Partitioner.")
@click.option("--epochs", type=int, default=15, show_default=True, help="Training epochs.")
@click.option("--hidden", type=int, default=32, show_default=True, help="Hidden width of the Interaction Network.")
@click.option("--iterations", type=int, default=4, show_default=True, help="Message-passing iterations.")
@click.option("--real", "real_dir", type=click.Path(path_type=Path), default=Path("tests/data/trackml"), show_default=True,
              help="Also evaluate on the real labelled TrackML event(s) here, if the directory exists.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of simulation, weights and sampling.")
def demo(
    out_dir: Path,
    num_events: int,
    num_val_events: int,
    num_particles: int,
    ranks: int,
    method: str,
    epochs: int,
    hidden: int,
    iterations: int,
    real_dir: Path,
    seed: int,
) -> None:
    """Run the whole engine on simulated events: simulate, build, partition,
    train domain-parallel on --ranks local processes, evaluate (edges, tracks,
    TrackML score) on held-out simulated events and on the real labelled event."""
    from domainpar.data.event_graph import load_graph
    from domainpar.data.graph import build_dataset
    from domainpar.data.simulate import SimulationConfig, simulate_dataset
    from domainpar.partition import partition_graph
    from domainpar.partition.plot import plot_partition
    from domainpar.partition.report import format_report_table, partition_report
    from domainpar.train.config import config_from_dict
    from domainpar.train.evaluate import EvaluateConfig, evaluate, write_outputs
    from domainpar.train.run import train

    for name, value, low in (("--events", num_events, 1), ("--val-events", num_val_events, 1), ("--ranks", ranks, 1),
                             ("--epochs", epochs, 1), ("--particles", num_particles, 10)):
        if value < low:
            raise DomainparError(f"{name} must be at least {low} (got {value})")
    check_output_dir(out_dir, "--out")
    started = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    sim_config = SimulationConfig(num_particles=num_particles)

    _section(f"1/5 simulate {num_events} + {num_val_events} events ({num_particles} particles each)")
    train_events = out_dir / "events" / "train"
    val_events = out_dir / "events" / "val"
    simulate_dataset(train_events, num_events, sim_config, seed=seed, first_event_id=1)
    simulate_dataset(val_events, num_val_events, sim_config, seed=seed + 10_000, first_event_id=1001)

    _section("2/5 build hit graphs")
    graph_dirs = {"train": out_dir / "graphs" / "train", "val": out_dir / "graphs" / "val"}
    records = []
    for kind, events in (("train", train_events), ("val", val_events)):
        for stats in build_dataset(events, graph_dirs[kind]):
            records.append((kind, stats.as_record()))
    click.echo(f"{'set':>5} {'event':>6} {'nodes':>8} {'edges':>9} {'eff':>6} {'eff_pt1':>8} {'purity':>7} {'s':>6}")
    for kind, r in records:
        click.echo(
            f"{kind:>5} {r['event_id']:>6} {r['num_nodes']:>8,} {r['num_edges']:>9,} {_fmt(r['efficiency']):>6} "
            f"{_fmt(r['efficiency_pt1']):>8} {_fmt(r['purity']):>7} {r['seconds']:>6.2f}"
        )

    _section(f"3/5 partition the first training event into {ranks} parts ({method})")
    first_graph = load_graph(sorted(graph_dirs["train"].glob("*.npz"))[0])
    plan = partition_graph(first_graph, ranks, method, seed=seed)
    report = partition_report(plan, hidden=hidden)
    click.echo(format_report_table([(str(first_graph.event_id), report)]))
    plot_path = plot_partition(first_graph, plan, out_dir / "partition.png")
    click.echo(f"picture: {plot_path}")

    _section(f"4/5 train: domain mode, {ranks} ranks, {epochs} epochs")
    run_dir = out_dir / "train"
    if run_dir.exists():
        # The trainer refuses to mix a fresh run with old checkpoints; the demo's own run is disposable.
        shutil.rmtree(run_dir)
    config = config_from_dict(
        {
            "data": {"train": str(graph_dirs["train"]), "val": str(graph_dirs["val"]), "method": method},
            "model": {"hidden": hidden, "iterations": iterations},
            "optim": {"lr": 3e-3, "warmup": 2, "pos_weight": 3.0},
            "parallel": {"mode": "domain" if ranks > 1 else "single", "ranks": ranks},
            "run": {"out": str(run_dir), "epochs": epochs, "seed": seed},
        },
        source="demo",
    )
    summary = train(config)
    final = summary.get("final") or {}
    for key in ("epoch", "train_loss", "val_loss", "efficiency", "purity", "auc", "seconds", "halo_bytes"):
        click.echo(f"  {key:<12} {_fmt(final.get(key))}")
    click.echo(f"curves: {run_dir / 'curves.png'}   metrics: {run_dir / 'metrics.jsonl'}")

    _section(f"5/5 evaluate ({ranks} parts, halo exchange) on held-out events")
    evaluations = {}
    targets = [("simulated", val_events)]
    if real_dir.is_dir() and any(real_dir.glob("event*-truth.csv*")):
        targets.append(("real TrackML", real_dir))
    for label, data in targets:
        eval_config = EvaluateConfig(checkpoint=Path(summary["model"]), data=data, num_parts=ranks, method=method, seed=seed)
        eval_report = evaluate(eval_config)
        slug = label.split()[0].lower()
        write_outputs(eval_report, plots_dir=out_dir / "evaluate" / slug, submissions_dir=out_dir / "evaluate" / slug)
        evaluations[label] = eval_report.summary
    keys = ("efficiency", "purity", "auc", "trackml_score", "tracking_efficiency", "fake_rate", "duplicate_rate")
    labels = list(evaluations)
    click.echo(f"{'':>20} " + " ".join(f"{label:>14}" for label in labels))
    for key in keys:
        click.echo(f"{key:>20} " + " ".join(f"{_fmt(evaluations[label].get(key)):>14}" for label in labels))
    summary_path = out_dir / "summary.json"
    from domainpar.atomic import atomic_path

    with atomic_path(summary_path) as tmp:
        tmp.write_text(json.dumps({"train": final, "evaluate": {k: {kk: v.get(kk) for kk in keys} for k, v in evaluations.items()}},
                                  indent=2) + "\n")
    click.echo(f"\ndone in {time.perf_counter() - started:.0f} s; everything is under {out_dir} (summary: {summary_path})")
