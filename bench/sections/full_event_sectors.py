"""Halo exchange vs naive sectors on full events: the same recipe trained in sectors mode, same steps and model.

Reuses the graphs and the halo-exchange model of the ``full_event`` section's
run in ``<out>/full_event/`` (run ``python -m bench --only full_event
full_event_sectors --out DIR``, or this section alone with the ``--out`` of an
earlier full_event run): the recipe's GNN is trained again in ``sectors`` mode
with 8 and with 16 φ-wedge sectors (each sector on its own rank, its cut edges
dropped), with the same model, seed and number of optimiser steps, and every
model is judged on the held-out events the same way
(:func:`bench.common.sectors.compare_sectors`): whole events with
partitioned inference, and — the naive pipeline end to end — each sector
alone. Tracking efficiency of particles whose hits cross a sector boundary
and of those that do not, with the gap to halo exchange and its paired
bootstrap standard error.

A machine spawns at most 4 local ranks per core (16 sectors need 4 cores). On
a smaller one, train the 16-sector model first under torchrun, as the section
would (``sectors/8/train/config.yaml`` with ``ranks``/``domain_size`` 16 and
``out`` ``sectors/16/train``: ``torchrun --standalone --nproc-per-node 16 -m
domainpar train --config FILE``); the section reuses a model trained exactly
as it would train it (:func:`bench.common.sectors.compare_sectors`).
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.common.report import Column, Section
from bench.common.timing import load_average
from bench.sections.full_event import RECIPE

#: Devices the section runs for (as the full_event section it reuses).
DEVICES = ("cpu", "cuda")
#: Sector counts compared with halo exchange.
COUNTS = (8, 16)
#: What ``--quick`` compares.
QUICK_COUNTS = (4,)


def _pct(entry: dict | None) -> float | None:
    return None if entry is None else entry.get("efficiency")


def run(run_dir: Path, quick: bool = False, device: str = "cpu", recipe_path: Path = RECIPE, counts=None, overrides=None) -> Section:
    """The comparison (see the module docstring) on the finished full-event run in ``run_dir``."""
    import json

    from domainpar.pipeline.recipe import load_recipe
    from bench.common.sectors import compare_sectors

    start = time.perf_counter()
    name = "full_event_sectors"
    title = "Full events: halo exchange vs naive sectors (same recipe, steps and model)"
    if not (run_dir / "eval.json").is_file():
        return Section(name=name, title=title, skipped=f"no full_event run in {run_dir} (run --only full_event {name} with one --out)")
    recipe = load_recipe(recipe_path, device=device)
    if quick:
        from bench.sections.full_event import QUICK_SCALE

        recipe = recipe.scaled(**QUICK_SCALE)
    if overrides is not None:
        recipe = overrides(recipe)
    recorded = json.loads((run_dir / "eval.json").read_text())["recipe"]
    if recorded != json.loads(json.dumps(recipe.to_dict())):
        return Section(name=name, title=title, skipped=f"the run in {run_dir} is of another recipe or size than {recipe_path.name} ({device})")
    counts = counts or (QUICK_COUNTS if quick else COUNTS)
    load_before = load_average()
    result = compare_sectors(run_dir, recipe, counts, echo=lambda line: print(f"[{name}] {line}", flush=True))
    load_after = load_average()
    rows = []
    halo = result["halo"]
    for count, entry in result["sectors"].items():
        for mode, label in (("whole", "whole events"), ("sector_inference", "each sector alone")):
            figures = entry[mode]
            rows.append({
                "model": f"{count} sectors", "inference": label,
                "efficiency": figures["efficiency"], "purity": figures["purity"], "trackml_score": figures["trackml_score"],
                "tracking_efficiency": figures["tracking_efficiency"],
                "crossing": _pct(figures["crossing"]), "halo_crossing": _pct(figures["crossing"]["halo"]),
                "gap_crossing": figures["crossing"]["gap"]["gap"], "gap_crossing_error": figures["crossing"]["gap"]["error"],
                "not_crossing": _pct(figures["not_crossing"]), "halo_not_crossing": _pct(figures["not_crossing"]["halo"]),
                "gap_not_crossing": figures["not_crossing"]["gap"]["gap"],
                "gap_not_crossing_error": figures["not_crossing"]["gap"]["error"],
                "crossing_particles": figures["crossing"]["particles"],
            })  # fmt: skip
    section = Section(
        name=name,
        title=title,
        columns=[
            Column("model", "naive model"), Column("inference", "inference"),
            Column("efficiency", "edge eff.", "{:.4f}"), Column("purity", "edge purity", "{:.4f}"),
            Column("tracking_efficiency", "tracking eff.", "{:.4f}"), Column("trackml_score", "TrackML score", "{:.4f}"),
            Column("crossing", "crossing: eff.", "{:.4f}"), Column("halo_crossing", "crossing: halo", "{:.4f}"),
            Column("gap_crossing", "gap", "{:+.4f}"), Column("gap_crossing_error", "±", "{:.4f}"),
            Column("not_crossing", "not crossing: eff.", "{:.4f}"), Column("halo_not_crossing", "not crossing: halo", "{:.4f}"),
            Column("gap_not_crossing", "gap", "{:+.4f}"), Column("gap_not_crossing_error", "±", "{:.4f}"),
            Column("crossing_particles", "crossing particles"),
        ],  # fmt: skip
        rows=rows,
    )
    section.notes += [
        f"Halo exchange (the full_event run's model, {recipe.train.parallel.ranks} ranks, domain mode): edge efficiency "
        f"{halo['efficiency']:.4f} at purity {halo['purity']:.4f}, tracking efficiency {halo['tracking_efficiency']:.4f}, "
        f"TrackML score {halo['trackml_score']:.4f} on the held-out events.",
        f"Every naive model: sectors mode, one rank per sector (cut edges dropped), {result['settings']['steps']} steps, the "
        "recipe's model, optimiser and seed. 'whole events': judged exactly like the halo model (partitioned inference "
        "with halo exchange, "
        f"{recipe.evaluation.parts} parts); 'each sector alone': the naive pipeline end to end, cut edges never scored.",
        "Crossing particles: reconstructable particles (pT > 1 GeV, >= 3 layers) whose hits lie in more than one of the "
        "P sectors of their event; efficiencies are double-majority; gap = halo − naive on the same particles, ± the "
        f"standard error of a paired bootstrap ({2000} resamples).",
        f"Time: {result['seconds']:.0f} s wall; load average {load_before} before, {load_after} after.",
    ]
    section.extra = {"result": result, "load_average": {"before": load_before, "after": load_after}}
    section.seconds = time.perf_counter() - start
    return section


def section(ctx) -> Section:
    """Entry point (see :mod:`bench.sections`)."""
    return run(ctx.out / "full_event", quick=ctx.quick, device=ctx.device)
