"""The embedded default pipeline behind ``domainpar demo`` and ``make run``.

simulate → build (+ edge filter) → partition → domain-parallel training →
evaluation, on events simulated on the real TrackML detector, so that a fresh
clone shows the whole engine working with no external data. Its settings are
the physics recipe's (``examples/physics.yaml``, packaged as
``domainpar/pipeline/recipes/physics.yaml``: graph cuts and features, edge
filter, model, optimiser, tracks), scaled to a few minutes: fewer and smaller
events, fewer epochs. Its closing table sets the figures it reached beside
what a full recipe run reaches (``python -m bench --only physics``, recorded
in ``recipes/physics_reference.json``). Every stage writes what the
corresponding command would, under ``DemoConfig.out``.
"""

from __future__ import annotations

import dataclasses
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
    """What the demo pipeline runs (the recipe's settings, scaled to a few minutes)."""

    out: Path = Path("runs/demo")
    """Output directory for events, graphs, plans, the training run and the evaluation."""
    recipe: Path | None = None
    """Recipe whose settings the demo scales down (default: the packaged physics recipe, examples/physics.yaml)."""
    events: int = 6
    """Simulated training events."""
    val_events: int = 1
    """Simulated validation events."""
    particles: int = 700
    """Charged particles per simulated event (10000 ≈ full pile-up)."""
    ranks: int = 2
    """Local processes of the domain group (parts per event)."""
    method: str = "metis"
    """Partitioner: metis or geometric."""
    epochs: int = 12
    """Training epochs."""
    filter_steps: int = 300
    """Optimiser steps of the edge filter (the recipe's 1500 cost ~330 s CPU: most of the demo's budget)."""
    hidden: int | None = None
    """Hidden width of the Interaction Network (default: the recipe's)."""
    iterations: int | None = None
    """Message-passing iterations (default: the recipe's)."""
    real: Path = Path("tests/data/trackml")
    """Also evaluate on the real labelled TrackML event(s) here, if the directory exists."""
    seed: int | None = None
    """Seed of weights and sampling (default: the recipe's); the events use the recipe's simulation seeds."""
    quiet: bool = False
    """No progress (bars on a terminal, a line every 30 s in a log) while simulating, building, training, evaluating."""

    def __post_init__(self) -> None:
        # Optional options arrive from the command line as text ("none" meaning unset).
        for name in ("hidden", "iterations", "seed"):
            value = getattr(self, name)
            if isinstance(value, str):
                if value.strip().lower() in ("none", "null", ""):
                    object.__setattr__(self, name, None)
                    continue
                try:
                    object.__setattr__(self, name, int(value))
                except ValueError:
                    raise DomainparError(f"--{name} must be an integer (got {value!r})") from None
        if isinstance(self.recipe, str):
            object.__setattr__(self, "recipe", None if self.recipe.strip().lower() in ("none", "") else Path(self.recipe))

    def validate(self) -> None:
        """Raise one :class:`DomainparError` line for the first option out of range (before anything is written)."""
        import os

        from domainpar.train.config import INT_LIMIT, MAX_HIDDEN, MAX_ITERATIONS

        local = 4 * (os.cpu_count() or 1)
        for name, value, low, high in (("--events", self.events, 2, 10**6), ("--val-events", self.val_events, 1, 10**6),
                                       ("--ranks", self.ranks, 1, local), ("--epochs", self.epochs, 1, 10**6),
                                       ("--filter-steps", self.filter_steps, 1, 10**6),
                                       ("--particles", self.particles, 10, 10**6), ("--hidden", self.hidden, 1, MAX_HIDDEN),
                                       ("--iterations", self.iterations, 1, MAX_ITERATIONS), ("--seed", self.seed, 0, INT_LIMIT)):  # fmt: skip
            if value is None:
                continue  # the recipe's value
            if value < low:
                raise DomainparError(f"{name} must be at least {low} (got {value})")
            if value > high:
                raise DomainparError(f"{name} must be at most {high} (got {value})")
        if self.method not in ("metis", "geometric"):
            raise DomainparError(f"--method must be metis or geometric (got {self.method!r})")
        from domainpar.train.config import check_model_size

        from domainpar.pipeline.recipe import load_recipe, packaged_recipe_path

        recipe = load_recipe(self.recipe if self.recipe is not None else packaged_recipe_path("physics"))
        hidden = self.hidden if self.hidden is not None else recipe.train.model.hidden
        iterations = self.iterations if self.iterations is not None else recipe.train.model.num_iterations
        model = dataclasses.replace(recipe.train.model, hidden=hidden, num_iterations=iterations)
        check_model_size(model, options="--hidden/--iterations")
        real = Path(self.real)
        if real.is_dir() and any(real.glob("event*-truth.csv*")):
            from domainpar.data.trackml import event_prefixes, load_event

            # The real events are evaluated last: a damaged one must fail now, not after the training.
            parts = ("hits", "particles", "truth") + (("cells",) if recipe.graph.needs_cells else ())
            for prefix in event_prefixes(real):
                load_event(prefix, parts=parts)


def reference_figures() -> dict | None:
    """What a full run of the packaged physics recipe reached (``recipes/physics_reference.json``), if recorded."""
    from importlib import resources

    path = Path(str(resources.files("domainpar.pipeline") / "recipes" / "physics_reference.json"))
    if not path.is_file():
        return None
    return json.loads(path.read_text())


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
        ``{"train": last metrics record, "evaluate": {dataset: figures}, "recipe": name, "reference": {...}}``.
    """
    from domainpar.atomic import atomic_path
    from domainpar.data.dataset import build_dataset
    from domainpar.data.event_graph import save_graph
    from domainpar.data.graph_files import load_graph
    from domainpar.inference.config import EvaluateConfig
    from domainpar.inference.evaluation import evaluate, write_outputs
    from domainpar.partition import partition_graph
    from domainpar.partition.plot import plot_partition
    from domainpar.partition.report import format_report_table, partition_report
    from domainpar.pipeline.recipe import load_recipe, packaged_recipe_path
    from domainpar.sim.dataset import simulate_dataset
    from domainpar.train.run import train

    config.validate()
    recipe = load_recipe(config.recipe if config.recipe is not None else packaged_recipe_path("physics"))
    recipe = recipe.scaled(
        config.events, config.val_events, epochs=config.epochs, particles=config.particles, filter_steps=config.filter_steps
    )
    out_dir, ranks, method = Path(config.out), config.ranks, config.method
    check_output_dir(out_dir, "--out")
    started = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    sim = recipe.simulation
    hidden = config.hidden if config.hidden is not None else recipe.train.model.hidden
    iterations = config.iterations if config.iterations is not None else recipe.train.model.num_iterations
    seed = config.seed if config.seed is not None else recipe.train.run.seed

    def section(title: str) -> None:
        echo("")
        echo(f"== {title}")

    echo(f"recipe {recipe.name}, scaled down: {sim.train_events} + {sim.val_events} events of {sim.particles} particles, "
         f"{recipe.train.run.epochs} epochs (the full recipe: python -m bench --only physics)")  # fmt: skip
    section(f"1/5 simulate {sim.train_events} + {sim.val_events} events ({sim.particles} particles each)")
    train_events = out_dir / "events" / "train"
    val_events = out_dir / "events" / "val"
    for directory in (train_events, val_events):
        shutil.rmtree(directory, ignore_errors=True)
    progress = not config.quiet
    simulate_dataset(train_events, sim.train_events, recipe.training_simulation(), seed=sim.seed, first_event_id=1,
                     progress=progress)
    simulate_dataset(val_events, sim.val_events, recipe.validation_simulation(), seed=sim.val_seed, first_event_id=1001,
                     progress=progress)

    section("2/5 build hit graphs" + (" and prune them with the recipe's edge filter" if recipe.filter else ""))
    sources = {"train": train_events, "val": val_events}
    real_dir = Path(config.real)
    if real_dir.is_dir() and any(real_dir.glob("event*-truth.csv*")):
        sources["real"] = real_dir
    built = {kind: out_dir / "graphs" / "built" / kind for kind in sources}
    records = []
    for kind, events in sources.items():
        shutil.rmtree(built[kind], ignore_errors=True)
        for stats in build_dataset(events, built[kind], recipe.graph, progress=progress):
            records.append((kind, stats.as_record()))
    echo(f"{'set':>5} {'event':>6} {'nodes':>8} {'edges':>9} {'eff':>6} {'eff_pt1':>8} {'purity':>7} {'s':>6}")
    for kind, r in records:
        echo(
            f"{kind:>5} {r['event_id']:>6} {r['num_nodes']:>8,} {r['num_edges']:>9,} {_fmt(r['efficiency']):>6} "
            f"{_fmt(r['efficiency_pt1']):>8} {_fmt(r['purity']):>7} {r['seconds']:>6.2f}"
        )
    graph_dirs = built
    filter_path = None
    if recipe.filter is not None:
        from domainpar.filter.edge_filter import train_filter

        edge_filter = train_filter(sorted(built["train"].glob("*.npz")), recipe.filter)
        filter_path = edge_filter.save(out_dir / "filter.pt")
        graph_dirs = {kind: out_dir / "graphs" / kind for kind in sources}
        for kind in sources:
            shutil.rmtree(graph_dirs[kind], ignore_errors=True)
            for path in sorted(built[kind].glob("*.npz")):
                save_graph(edge_filter.apply(load_graph(path)), graph_dirs[kind] / path.name)
        r = edge_filter.record
        echo(f"edge filter ({filter_path}): keeps {r['holdout_kept_fraction']:.3f} of the edges and "
             f"{r['holdout_efficiency']:.4f} of the true ones on held-out training events; purity "
             f"{r['holdout_purity_before']:.3f} -> {r['holdout_purity_after']:.3f}")  # fmt: skip

    section(f"3/5 partition the first training event into {ranks} parts ({method})")
    first_graph = load_graph(sorted(graph_dirs["train"].glob("*.npz"))[0])
    plan = partition_graph(first_graph, ranks, method, seed=seed, option="--ranks")
    report = partition_report(plan, hidden=hidden)
    echo(format_report_table([(str(first_graph.event_id), report)]))
    echo(f"picture: {plot_partition(first_graph, plan, out_dir / 'partition.png')}")

    section(f"4/5 train: domain mode, {ranks} ranks, {recipe.train.run.epochs} epochs, hidden {hidden}, {iterations} iterations")
    run_dir = out_dir / "train"
    if run_dir.exists():
        # The trainer refuses to mix a fresh run with old checkpoints; the demo's own run is disposable.
        shutil.rmtree(run_dir)
    train_config = recipe.train.replace(
        **{
            "data.train": str(graph_dirs["train"]),
            "data.val": str(graph_dirs["val"]),
            "data.method": method,
            "model.hidden": hidden,
            "model.num_iterations": iterations,
            "parallel.mode": "domain" if ranks > 1 else "single",
            "parallel.ranks": ranks,
            "parallel.threads": None,
            "run.out": str(run_dir),
            "run.seed": seed,
            "run.progress": progress,
        }
    )
    summary = train(train_config)
    final = summary.get("final") or {}
    for key in ("epoch", "train_loss", "val_loss", "efficiency", "purity", "auc", "seconds", "halo_bytes"):
        echo(f"  {key:<12} {_fmt(final.get(key))}")
    echo(f"curves: {run_dir / 'curves.png'}   metrics: {run_dir / 'metrics.jsonl'}")

    section(f"5/5 evaluate ({ranks} parts, halo exchange) on held-out events")
    evaluations = {}
    for label, kind in (("simulated", "val"), ("real TrackML", "real")):
        if kind not in sources:
            continue
        eval_config = EvaluateConfig(
            checkpoint=Path(summary["model"]), data=graph_dirs[kind], events_dir=sources[kind], num_parts=ranks,
            method=method, seed=seed, threshold=recipe.tracks.threshold, track_method=recipe.tracks.method,
            progress=progress,
        )  # fmt: skip
        eval_report = evaluate(eval_config)
        slug = label.split()[0].lower()
        write_outputs(eval_report, plots_dir=out_dir / "evaluate" / slug, submissions_dir=out_dir / "evaluate" / slug)
        evaluations[label] = eval_report.summary
    reference = reference_figures()
    columns = {label: figures for label, figures in evaluations.items()}
    if reference is not None:
        for label, figures in reference.get("evaluate", {}).items():
            columns[f"full {label}"] = figures
    labels = list(columns)
    echo(f"{'':>20} " + " ".join(f"{label:>16}" for label in labels))
    for key in SUMMARY_KEYS:
        echo(f"{key:>20} " + " ".join(f"{_fmt(columns[label].get(key)):>16}" for label in labels))
    if reference is not None:
        echo(f"('full' columns: the whole recipe, {reference.get('description', 'python -m bench --only physics')})")
    else:
        echo("(a full recipe run: python -m bench --only physics --out DIR)")
    result = {
        "recipe": recipe.name,
        "train": final,
        "evaluate": {k: {kk: v.get(kk) for kk in SUMMARY_KEYS} for k, v in evaluations.items()},
        "reference": None if reference is None else reference.get("evaluate"),
    }
    summary_path = out_dir / "summary.json"
    with atomic_path(summary_path) as tmp:
        tmp.write_text(json.dumps(result, indent=2) + "\n")
    echo(f"\ndone in {time.perf_counter() - started:.0f} s; everything is under {out_dir} (summary: {summary_path})")
    return result
