"""Full events: the full-event recipe trained domain-parallel and judged at the occupancy the engine exists for.

``examples/full_event.yaml`` is run as a user would run it (simulate → build →
edge filter → train in domain mode with halo exchange → evaluate with
partitioned inference, :func:`domainpar.pipeline.physics.run_recipe`) into
``<out>/full_event/``: ``model.pt``, ``filter.pt``, ``eval.json`` and the plots
under ``plots/``. The table holds the held-out simulated full events (whole,
and their pixel detector alone) beside the targets of issue 19, and the real
labelled event 1 as a final check (a subsampled event: its figures are not the
full-occupancy ones). The real full event 21000 has no truth: its truth-free
figures (edges per hit, filter pass fraction, score distribution, tracks,
track-building time) are set beside the simulated events' own.

``--device cuda`` runs the recipe's ``cuda`` profile (the GPU size). ``--quick``
runs it scaled down (a smoke run; figures far below the recipe's).
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.common.report import REPO_ROOT, Column, Section, recipe_extra
from bench.common.timing import load_average
from bench.common.workloads import full_event_prefix

#: Devices the section runs for (the recipe's file is the CPU size, its ``cuda`` profile the GPU size).
DEVICES = ("cpu", "cuda")
#: The recipe this section runs.
RECIPE = REPO_ROOT / "examples" / "full_event.yaml"
#: The real labelled event(s) evaluated after training (a final check).
REAL_EVENTS = REPO_ROOT / "tests" / "data" / "trackml"
#: Figures of the table, their labels, and the targets of issue 19 on held-out simulated full events.
FIGURES = (
    ("auc", "edge ROC AUC", 0.995),
    ("efficiency", "edge efficiency at the working point", 0.95),
    ("purity", "edge purity at the working point", 0.90),
    ("efficiency_at_purity90", "edge efficiency at the best cut of purity ≥ 0.90", 0.95),
    ("efficiency_pt1", "edge efficiency at the working point, particles of pT > 1 GeV", None),
    ("trackml_score", "TrackML score", 0.80),
    ("tracking_efficiency", "tracking efficiency, pT > 1 GeV (double majority)", 0.95),
    ("perfect_efficiency", "tracking efficiency, pT > 1 GeV (perfect match)", None),
    ("fake_rate", "fake rate", None),
    ("duplicate_rate", "duplicate rate", None),
    ("seconds_tracks_max", "track building, s per event (slowest; numba compiling left out)", None),
)
#: Truth-free figures compared between simulated and real full events.
TRUTH_FREE = (
    ("num_nodes", "hits", "{:,.0f}"),
    ("edges_per_hit_built", "edges per hit, built", "{:.2f}"),
    ("filter_pass_fraction", "share of edges the filter keeps", "{:.4f}"),
    ("edges_per_hit", "edges per hit, after the filter", "{:.3f}"),
    ("selected_per_hit", "edges per hit with score > threshold", "{:.3f}"),
    ("score_q50", "median edge score", "{:.4f}"),
    ("score_q90", "90th percentile edge score", "{:.4f}"),
    ("candidates_per_khit", "track candidates (>= 3 hits) per 1000 hits", "{:.2f}"),
    ("hits_per_candidate", "hits per track candidate", "{:.2f}"),
    ("seconds_tracks", "track building, s per event (numba compiling left out)", "{:.2f}"),
)
#: What ``--quick`` shrinks the recipe to.
QUICK_SCALE = {"train_events": 3, "val_events": 1, "epochs": 2, "particles": 2000, "filter_steps": 300}


def _fmt(value, fmt: str) -> str:
    return "–" if value is None else fmt.format(value)


def truth_free_table(result: dict) -> str:
    """Markdown table of the truth-free figures: simulated held-out events vs real events, whole and by region."""
    columns = [("simulated", result["evaluate"].get("simulated", {}).get("truth_free"))]
    columns += [(f"simulated {k[len('simulated_'):]}", v.get("truth_free")) for k, v in result["evaluate"].items() if k.startswith("simulated_")]
    unlabelled = result.get("unlabelled") or {}
    columns += [(label.replace("_", " ") + " (event " + ", ".join(str(e["event_id"]) for e in figures["events"]) + ")", figures)
                for label, figures in unlabelled.items()]  # fmt: skip
    columns = [(label, figures) for label, figures in columns if figures]
    if not columns:
        return ""
    lines = ["| figure | " + " | ".join(label for label, _ in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for key, label, fmt in TRUTH_FREE:
        lines.append(f"| {label} | " + " | ".join(_fmt(figures.get(key), fmt) for _, figures in columns) + " |")
    return "\n".join(lines)


def run(
    out: Path,
    quick: bool = False,
    device: str = "cpu",
    recipe_path: Path = RECIPE,
    real: Path = REAL_EVENTS,
    unlabelled: list[Path] | None = None,
    overrides=None,
) -> Section:
    """The full-event section (see the module docstring).

    Args:
        out: the section's directory (``<report dir>/full_event``).
        quick: run the recipe scaled down (:data:`QUICK_SCALE`).
        device: ``cpu`` (the recipe as written) or ``cuda`` (its ``cuda`` profile).
        recipe_path: the recipe file.
        real: real labelled events evaluated after training (a final check).
        unlabelled: real events without truth compared truth-free (None: the full event 21000 when present).
        overrides: a function turning the loaded recipe into the one run (tests shrink it further).
    """
    from domainpar.pipeline.physics import run_recipe
    from domainpar.pipeline.recipe import load_recipe

    start = time.perf_counter()
    recipe = load_recipe(recipe_path, device=device)
    if quick:
        recipe = recipe.scaled(**QUICK_SCALE)
    if overrides is not None:
        recipe = overrides(recipe)
    if unlabelled is None:
        prefix = full_event_prefix()
        unlabelled = [] if prefix is None else [prefix]
    load_before = load_average()
    result = run_recipe(
        recipe, out, real=real, unlabelled=unlabelled, echo=lambda line: print(f"[full_event] {line}", flush=True)
    )
    load_after = load_average()
    evaluations = result["evaluate"]
    labels = [label for label in evaluations if label != "real"]
    rows = []
    for key, label, target in FIGURES:
        row = {"figure": label, "key": key, "target": target, "real": evaluations.get("real", {}).get(key)}
        row.update({label_: evaluations[label_].get(key) for label_ in labels})
        rows.append(row)
    columns = [Column("figure", "figure")]
    columns += [Column(label, "held-out " + label.replace("_", " "), "{:.4f}") for label in labels]
    columns += [Column("target", "target (simulated)", "{:.3g}"), Column("real", "real event 1 (final check)", "{:.4f}")]
    sim = recipe.simulation
    model = recipe.train.model
    region = f"events cut to volumes {list(recipe.graph.volumes)}" if recipe.graph.volumes else "full events"
    section = Section(
        name=recipe.name,
        title=f"{'Full events' if not recipe.graph.volumes else 'Detector regions'}: the {recipe.name} recipe ({device}), "
              f"trained domain-parallel on simulated {region}",
        columns=columns,
        rows=rows,
    )
    train = result["train"]
    graphs, filtered = result["graphs"], (result.get("filter") or {}).get("graphs", {})
    mean = lambda records, key: sum((r[key] or 0.0) for r in records) / max(len(records), 1)  # noqa: E731
    section.notes += [
        f"Recipe {recipe_path.name} ({device}{', scaled down: ' + str(QUICK_SCALE) if quick else ''}): "
        f"{sim.train_events} training + {sim.val_events} held-out simulated events of {sim.particles} particles (seeds "
        f"{sim.seed}, {sim.val_seed}); model hidden {model.hidden}, {model.num_iterations} iterations, trained in "
        f"{recipe.train.parallel.mode} mode on {recipe.train.parallel.ranks} ranks; {recipe.train.run.epochs} epochs "
        f"({train['steps']} steps); evaluated with {recipe.evaluation.parts} parts per event ({recipe.evaluation.method}, "
        f"halo exchange); tracks: {recipe.tracks.method} at score > {recipe.tracks.threshold}"
        f"{''.join(f', {k} {v}' for k, v in recipe.tracks.settings.items())}.",
        f"Graph stage, held-out simulated events (mean per event): built {mean(graphs['val'], 'num_edges'):,.0f} edges, "
        f"pT > 1 GeV segments kept {mean(graphs['val'], 'efficiency_pt1'):.4f}, all {mean(graphs['val'], 'efficiency'):.4f}"
        + (f"; after the edge filter {mean(filtered['val'], 'num_edges'):,.0f} edges, true edges kept "
           f"{mean(filtered['val'], 'efficiency'):.4f} (pT > 1 GeV {mean(filtered['val'], 'efficiency_pt1'):.4f}), "
           f"purity {mean(filtered['val'], 'purity'):.4f}" if filtered else "")
        + ".",
        f"Time: whole run {result['seconds']:.0f} s wall, {result['cpu_seconds']:.0f} s CPU; by stage (wall / CPU s): "
        + ", ".join(f"{k} {v['seconds']:.0f} / {v['cpu_seconds']:.0f}" for k, v in result["timings"].items())
        + f". Load average {load_before} before, {load_after} after (wall time is inflated when other jobs share the "
        "machine: compare CPU time).",
        f"Outputs: {out / 'model.pt'}, {out / 'filter.pt'}, {out / 'eval.json'}, plots in {out / 'plots'}.",
        "Real event 1 is the subsampled labelled event (5,527 hits): a final check of the same model, never a tuning "
        "target; the real full event 21000 has no truth, so it is compared truth-free below.",
    ]
    section.markdown_extra = truth_free_table(result)
    section.extra = recipe_extra(
        result, out, load_before, load_after,
        filter=None if not result.get("filter") else result["filter"]["record"], unlabelled=result.get("unlabelled"),
    )  # fmt: skip
    section.seconds = time.perf_counter() - start
    return section


def section(ctx) -> Section:
    """Entry point (see :mod:`bench.sections`)."""
    return run(ctx.out / "full_event", quick=ctx.quick, device=ctx.device)
