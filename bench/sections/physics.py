"""The physics recipe end to end: the tracker it trains, judged on simulated and on real events.

``examples/physics.yaml`` is run as a user would run it (simulate → build →
edge filter → train → evaluate, :func:`domainpar.pipeline.physics.run_recipe`)
into ``<out>/physics/``: the trained model is ``model.pt``, every figure is in
``eval.json``, the efficiency-vs-pT and -η plots are under ``plots/``. The
table holds the held-out simulated events and the real labelled TrackML
event 1 (trained on simulation only): edge AUC, efficiency and purity at the
working point, TrackML score, tracking efficiency (pT > 1 GeV, double
majority), fake and duplicate rates, beside the targets of issue 13.

``--quick`` runs the same recipe scaled down (a smoke run: minutes, figures
far below the recipe's); the full run is the recipe as written (≈ 20 minutes
of training on an idle 2-core machine).
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.common.report import REPO_ROOT, Column, Section, recipe_extra

#: The recipe this section runs.
RECIPE = REPO_ROOT / "examples" / "physics.yaml"
#: The real labelled event(s) evaluated after training.
REAL_EVENTS = REPO_ROOT / "tests" / "data" / "trackml"
#: Figures of the table, their labels, and the targets of issue 13 (simulated, real).
FIGURES = (
    ("auc", "edge ROC AUC", 0.995, None),
    ("efficiency", "edge efficiency at the working point", 0.97, None),
    ("purity", "edge purity at the working point", 0.95, None),
    ("trackml_score", "TrackML score", 0.85, 0.80),
    ("tracking_efficiency", "tracking efficiency, pT > 1 GeV (double majority)", None, 0.93),
    ("perfect_efficiency", "tracking efficiency, pT > 1 GeV (perfect match)", None, None),
    ("fake_rate", "fake rate", None, None),
    ("duplicate_rate", "duplicate rate", None, None),
)
#: What ``--quick`` shrinks the recipe to.
QUICK_SCALE = {"train_events": 4, "val_events": 1, "epochs": 2, "particles": 400}


def run(out: Path, quick: bool = False, recipe_path: Path = RECIPE, real: Path = REAL_EVENTS, overrides=None) -> Section:
    """The physics section (see the module docstring).

    Args:
        out: the section's directory (``<report dir>/physics``).
        quick: run the recipe scaled down (:data:`QUICK_SCALE`).
        recipe_path: the recipe file.
        real: real labelled events evaluated after training.
        overrides: a function turning the loaded recipe into the one run (tests shrink it further).
    """
    from domainpar.pipeline.physics import run_recipe
    from domainpar.pipeline.recipe import load_recipe

    from bench.common.timing import load_average

    start = time.perf_counter()
    recipe = load_recipe(recipe_path)
    if quick:
        recipe = recipe.scaled(**QUICK_SCALE)
    if overrides is not None:
        recipe = overrides(recipe)
    load_before = load_average()
    result = run_recipe(recipe, out, real=real, echo=lambda line: print(f"[physics] {line}", flush=True))
    load_after = load_average()
    evaluations = result["evaluate"]
    rows = []
    for key, label, target_sim, target_real in FIGURES:
        rows.append({
            "figure": label,
            "key": key,
            "simulated": evaluations.get("simulated", {}).get(key),
            "target_simulated": target_sim,
            "real": evaluations.get("real", {}).get(key),
            "target_real": target_real,
        })  # fmt: skip
    sim = recipe.simulation
    graphs = result["graphs"]
    mean = lambda kind, key: sum((r[key] or 0.0) for r in graphs[kind]) / max(len(graphs[kind]), 1)  # noqa: E731
    section = Section(
        name="physics",
        title=f"Physics: the {recipe.name} recipe, trained on simulation, on held-out simulated and on real events",
        columns=[
            Column("figure", "figure"),
            Column("simulated", "held-out simulated", "{:.4f}"),
            Column("target_simulated", "target", "≥ {:.3g}"),
            Column("real", "real event 1", "{:.4f}"),
            Column("target_real", "target", "≥ {:.3g}"),
        ],
        rows=rows,
    )
    train = result["train"]
    section.notes += [
        f"Recipe {recipe_path.name}{' scaled down (--quick: ' + str(QUICK_SCALE) + ')' if quick else ''}: "
        f"{sim.train_events} training + {sim.val_events} held-out simulated events of {sim.particles} particles "
        f"(seeds {sim.seed}, {sim.val_seed}); model hidden {recipe.train.model.hidden}, "
        f"{recipe.train.model.num_iterations} iterations; {recipe.train.run.epochs} epochs ({train['steps']} steps); "
        f"tracks: {recipe.tracks.method} at score > {recipe.tracks.threshold}.",
        f"Graphs (mean per event): simulated {mean('val', 'num_edges'):,.0f} edges, efficiency {mean('val', 'efficiency'):.4f} "
        f"(pT > 1 GeV {mean('val', 'efficiency_pt1'):.4f}), purity {mean('val', 'purity'):.4f}"
        + (f"; real {mean('real', 'num_edges'):,.0f} edges, efficiency {mean('real', 'efficiency'):.4f} "
           f"(pT > 1 GeV {mean('real', 'efficiency_pt1'):.4f}), purity {mean('real', 'purity'):.4f}" if "real" in graphs else "")
        + ".",
        f"Training: {train['seconds']:.0f} s wall, {train['cpu_seconds']:.0f} s CPU (user + system, all processes); "
        f"whole run {result['seconds']:.0f} s wall, {result['cpu_seconds']:.0f} s CPU; load average "
        f"{load_before} before, {load_after} after (wall time is inflated when other jobs share the machine: "
        "compare CPU time).",
        f"Outputs: {out / 'model.pt'}, {out / 'eval.json'}, plots in {out / 'plots'} (efficiency and purity vs pT and η, ROC).",
    ]
    if result.get("filter"):
        record = result["filter"]["record"]
        section.notes.append(
            f"Edge filter: keeps {record['holdout_kept_fraction']:.3f} of the edges of held-out training events, "
            f"{record['holdout_efficiency']:.4f} of their true edges, purity {record['holdout_purity_before']:.3f} → "
            f"{record['holdout_purity_after']:.3f}; trained in {record['cpu_seconds']:.0f} s CPU."
        )
    section.extra = recipe_extra(result, out, load_before, load_after)
    section.seconds = time.perf_counter() - start
    return section


def section(ctx) -> Section:
    """Entry point (see :mod:`bench.sections`)."""
    return run(ctx.out / "physics", quick=ctx.quick)
