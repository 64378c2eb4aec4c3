"""The embedded default pipeline behind ``domainpar demo`` and ``make run``: the physics recipe, scaled down.

The recipe (the packaged ``examples/physics.yaml``, or ``--recipe``) is scaled to a few minutes, set to train
domain-parallel on ``--ranks`` local processes and to evaluate with as many parts per event, and run by the recipe's
own runner (:func:`~domainpar.pipeline.physics.run_recipe`), the chain ``python -m bench --only physics`` runs at full
size: a fresh clone shows the whole engine working with no external data, on the recipe's code path.

Under ``DemoConfig.out`` lie the runner's outputs, a picture of how the first training event is split between the
ranks (``partition.png``), and ``summary.json``: the closing table, beside the figures of a full recipe run
(``recipes/physics_reference.json``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable

from domainpar.atomic import atomic_path
from domainpar.data.graph_files import load_graph
from domainpar.data.trackml import event_prefixes, load_event
from domainpar.errors import DomainparError
from domainpar.output_paths import check_output_dir
from domainpar.partition import partition_graph
from domainpar.partition.plot import plot_partition
from domainpar.partition.report import format_report_table, partition_report
from domainpar.pipeline.physics import TABLE_KEYS, format_table, run_recipe
from domainpar.pipeline.recipe import Recipe, load_recipe, packaged_recipe_path
from domainpar.sim.config import SimulationConfig
from domainpar.sim.dataset import check_event_memory
from domainpar.train.config import INT_LIMIT, MAX_HIDDEN, MAX_ITERATIONS, check_model_size


@dataclass(frozen=True)
class DemoConfig:
    """What the demo pipeline runs (the recipe's settings, scaled to a few minutes)."""

    out: Path = Path("runs/demo")
    """Output directory: a recipe run (events, graphs, filter, train/, eval.json, plots, submissions) and the summary."""
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
        # Local processes, and the evaluation's parts per event (a recipe's evaluation.parts is at most 64).
        local = min(4 * (os.cpu_count() or 1), 64)
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
        if self.particles is not None:
            # Before anything is written: an event the machine cannot hold ends in its out-of-memory killer.
            check_event_memory(SimulationConfig(num_particles=self.particles).event_peak_bytes(), f"--particles {self.particles}")


def demo_recipe(config: DemoConfig) -> Recipe:
    """The recipe the demo runs: ``config.recipe`` (default the packaged physics recipe) scaled to the demo's
    sizes, training in domain mode on ``config.ranks`` local processes (one: a single process) partitioned by
    ``config.method``, and evaluated with as many parts per event; ``--hidden``, ``--iterations`` and ``--seed``
    replace the recipe's when given.

    Raises:
        DomainparError: an unreadable recipe, an option out of range, a model too large to train (one line).
    """
    config.validate()
    recipe = load_recipe(config.recipe if config.recipe is not None else packaged_recipe_path("physics"))
    recipe = recipe.scaled(
        config.events, config.val_events, epochs=config.epochs, particles=config.particles, filter_steps=config.filter_steps
    )
    train = {
        "data.method": config.method,
        "parallel.mode": "domain" if config.ranks > 1 else "single",
        "parallel.ranks": config.ranks,
        # The ranks share this machine's cores: each takes its share (the recipe's threads are per process).
        "parallel.threads": None,
    }
    for key, value in (("model.hidden", config.hidden), ("model.num_iterations", config.iterations), ("run.seed", config.seed)):
        if value is not None:
            train[key] = value
    recipe = dataclasses.replace(
        recipe,
        train=recipe.train.replace(**train),
        evaluation=dataclasses.replace(recipe.evaluation, parts=config.ranks, method=config.method),
    )
    check_model_size(recipe.train.model, options="--hidden/--iterations")
    return recipe


def reference_figures() -> dict | None:
    """What a full run of the packaged physics recipe reached (``recipes/physics_reference.json``), if recorded."""
    path = Path(str(resources.files("domainpar.pipeline") / "recipes" / "physics_reference.json"))
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def _real_events(real: Path, recipe: Recipe) -> Path | None:
    """``real`` if it holds labelled events, each read now: a damaged one must fail before the training, not after."""
    if not (real.is_dir() and any(real.glob("event*-truth.csv*"))):
        return None
    parts = ("hits", "particles", "truth") + (("cells",) if recipe.graph.needs_cells else ())
    for prefix in event_prefixes(real):
        load_event(prefix, parts=parts)
    return real


def _show_partition(recipe: Recipe, out: Path, echo: Callable[[str], None]) -> None:
    """How the first training graph the GNN saw splits between the ranks: report table and ``partition.png``."""
    # run_recipe's layout (domainpar.pipeline.physics): the GNN trains on filtered/ when the recipe has a filter.
    graphs = out / ("filtered" if recipe.filter is not None else "graphs") / "train"
    graph = load_graph(sorted(graphs.glob("*.npz"))[0])
    ranks, method = recipe.train.parallel.ranks, recipe.train.data.method
    echo(f"== partition of training event {graph.event_id} into {ranks} parts ({method})")
    plan = partition_graph(graph, ranks, method, seed=recipe.train.run.seed, option="--ranks")
    echo(format_report_table([(str(graph.event_id), partition_report(plan, hidden=recipe.train.model.hidden))]))
    echo(f"picture: {plot_partition(graph, plan, out / 'partition.png')}")


def run_demo(config: DemoConfig, echo: Callable[[str], None] = print) -> dict:
    """Run the recipe scaled down (:func:`demo_recipe`) through :func:`run_recipe` and return its result.

    ``echo``: where progress lines and tables go (the CLI passes ``click.echo``).

    Returns:
        ``eval.json``'s content (:func:`~domainpar.pipeline.physics.run_recipe`), whose ``recipe`` is the one run.
    """
    recipe = demo_recipe(config)
    out = check_output_dir(config.out, "--out")
    real = _real_events(Path(config.real), recipe)
    started = time.perf_counter()
    sim, train = recipe.simulation, recipe.train
    echo(f"recipe {recipe.name}, scaled down: {sim.train_events} + {sim.val_events} events of {sim.particles} particles, "
         f"{train.run.epochs} epochs, {train.parallel.ranks} rank(s); evaluated in {recipe.evaluation.parts} part(s) "
         "(the full recipe: python -m bench --only physics)")  # fmt: skip
    result = run_recipe(recipe, out, real=real, echo=echo, progress=not config.quiet)
    _show_partition(recipe, out, echo)

    reference = reference_figures()
    columns = dict(result["evaluate"])
    for label, figures in (reference or {}).get("evaluate", {}).items():
        columns[f"full {label}"] = figures
    echo("")
    for line in format_table(columns):
        echo(line)
    if reference is not None:
        echo(f"('full' columns: the whole recipe, {reference.get('description', 'python -m bench --only physics')})")
    else:
        echo("(a full recipe run: python -m bench --only physics --out DIR)")
    summary = {
        "recipe": recipe.name,
        "eval": str(out / "eval.json"),
        "train": result["train"]["final"],
        "evaluate": {label: {key: figures.get(key) for key in TABLE_KEYS} for label, figures in result["evaluate"].items()},
        "reference": None if reference is None else reference.get("evaluate"),
    }
    summary_path = out / "summary.json"
    with atomic_path(summary_path) as tmp:
        tmp.write_text(json.dumps(summary, indent=2) + "\n")
    echo(f"\ndone in {time.perf_counter() - started:.0f} s; everything is under {out} (summary: {summary_path})")
    return result
