"""Halo exchange vs naive sectors, same budget: what partition-and-exchange buys, measured in tracks.

The practice for events too large for one device is to cut the detector into sectors and train on each alone,
losing every segment that crosses a boundary. This module trains the recipe that way (``sectors`` mode: each of P
φ-wedge sectors on its own rank, its cut edges dropped) on the same filtered graphs, with the same model, seed and
optimiser steps as the recipe's halo-exchange run, and judges every model on the held-out events two ways:

* **whole events** (the comparison): scored whole with the recipe's partitioned inference (exact), so the models
  differ only in how they were trained;
* **sector inference** (the naive pipeline end to end): each sector scored alone, its cut edges never scored.

Particles are split by whether their hits lie in more than one of the event's P sectors; for each split, the
tracking efficiency (pT > 1 GeV, >= 3 layers, double majority) with its binomial error, and the gap to halo exchange
with the standard error of a paired bootstrap over those particles.
"""

from __future__ import annotations

import json
import shutil
import time
from contextlib import closing
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from domainpar.atomic import atomic_path
from domainpar.data.event_graph import EventGraph
from domainpar.errors import DomainparError
from domainpar.inference.evaluation import EvaluationReport, evaluate
from domainpar.inference.model_io import load_model
from domainpar.inference.spec import EvaluateConfig
from domainpar.parallel.part import rank_part
from domainpar.partition import partition_graph
from domainpar.pipeline.recipe import Recipe
from domainpar.train.run import train

#: Resamples of the paired bootstrap of the efficiency gap.
BOOTSTRAP_RESAMPLES = 2000
#: Figures of every evaluation kept in the comparison.
FIGURES = ("auc", "efficiency", "purity", "trackml_score", "tracking_efficiency", "fake_rate", "duplicate_rate")


def crossing(graph: EventGraph, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which particles leave hits in more than one part.

    Args:
        graph: the event graph (``particle_id`` per node).
        owner: (N,) part of every node.

    Returns:
        ``(particle_id, crosses)``: (P,) ascending ids of the non-noise particles with hits in the graph, and
        (P,) bool, True where a particle's hits have more than one owner.
    """
    if graph.particle_id is None:
        raise DomainparError(f"event {graph.event_id}: telling particles that cross a sector needs truth (the graph has none)")
    real = graph.particle_id != 0
    pid, owners = graph.particle_id[real], np.asarray(owner)[real]
    pairs = np.unique(np.stack([pid, owners]), axis=1)
    ids, count = np.unique(pairs[0], return_counts=True)
    return ids, count > 1


class SectorScorer:
    """The naive pipeline's inference, as a scorer of the one event chain: every sector of an event scored alone
    (its cut edges never scored: -inf logits, score 0), so the edge and track figures count them as lost."""

    #: Each sector runs in this process with the identity exchange (a sectors plan has no halo): nothing to prove
    #: about the model's locality.
    num_parts = 1

    def __init__(self, model_path: Path, num_sectors: int) -> None:
        self.loaded, self.num_sectors = load_model(model_path), num_sectors

    def logits(self, graph: EventGraph) -> tuple[np.ndarray, dict]:
        """(E,) logits of the naive pipeline, and no partition figures."""
        loaded = self.loaded
        plan = partition_graph(graph, self.num_sectors, method="sectors")
        logits = torch.full((graph.num_edges,), float("-inf"), dtype=torch.float64)
        with torch.no_grad():
            for part in range(self.num_sectors):
                rp = rank_part(graph, part, None, "cpu", loaded.dtype, plan=plan, check=False)
                ids, values = rp.owned_edges(loaded.model(rp.graph, rp.exchange))
                logits[ids] = values.double()
        return logits.numpy(), {}

    def close(self) -> None:
        pass


def _tracking_split(report: EvaluationReport, crossers: dict[int, tuple[np.ndarray, np.ndarray]], pt_min: float) -> dict:
    """Per reconstructable particle of every event: (matched, crosses), concatenated over events."""
    matched, crosses = [], []
    for evaluation in report.evaluations:
        tracking = evaluation.tracking
        ids, flags = crossers[evaluation.event_id]
        keep = tracking.reconstructable(pt_min, 3)
        position = np.searchsorted(ids, tracking.particle_id[keep])
        found = (position < ids.size) & (ids[np.minimum(position, ids.size - 1)] == tracking.particle_id[keep])
        flag = np.zeros(int(keep.sum()), dtype=bool)
        flag[found] = flags[position[found]]
        matched.append(tracking.particle_matched[keep])
        crosses.append(flag)
    return {"matched": np.concatenate(matched), "crosses": np.concatenate(crosses)}


def _efficiency(matched: np.ndarray) -> dict:
    n = int(matched.size)
    value = float(matched.mean()) if n else None
    error = float(np.sqrt(value * (1 - value) / n)) if n else None
    return {"efficiency": value, "error": error, "particles": n}


def _crossing_line(crossing: dict) -> str:
    """One progress line's words on the crossing particles (an event may have none: small events, one sector hit)."""
    if not crossing["particles"]:
        return "no particle crosses a sector boundary"
    gap = crossing["gap"]
    return (
        f"tracking efficiency of crossing particles {crossing['efficiency']:.4f} "
        f"(halo {crossing['halo']['efficiency']:.4f}; gap {gap['gap']:+.4f} ± {gap['error']:.4f}, "
        f"{crossing['particles']} particles)"
    )


def gap_with_error(halo: np.ndarray, naive: np.ndarray, seed: int = 0) -> dict:
    """Efficiency gap halo − naive on the same particles, with a paired bootstrap standard error.

    Args:
        halo, naive: (K,) bool, whether each particle was found by each model (same particles, same order).
    """
    if halo.size == 0:
        return {"gap": None, "error": None}
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, halo.size, size=(BOOTSTRAP_RESAMPLES, halo.size))
    differences = halo[draws].mean(axis=1) - naive[draws].mean(axis=1)
    return {"gap": float(halo.mean() - naive.mean()), "error": float(differences.std(ddof=1))}


def _evaluate_whole(recipe: Recipe, model_path: Path, graphs: Path, events: Path, progress: bool) -> EvaluationReport:
    config = EvaluateConfig(checkpoint=model_path, data=graphs, events_dir=events, num_parts=recipe.evaluation.parts,
                            method=recipe.evaluation.method, progress=progress)  # fmt: skip
    return evaluate(config)


def _evaluate_sectors(model_path: Path, graphs: Path, events: Path, num_parts: int) -> EvaluationReport:
    """The naive pipeline end to end: sector inference, then the same chain and figures as :func:`evaluate`."""
    config = EvaluateConfig(checkpoint=model_path, data=graphs, events_dir=events, progress=False)
    with closing(SectorScorer(model_path, num_parts)) as scorer:
        return evaluate(config, scorer=scorer)


def _trained_as(model_path: Path, config) -> bool:
    """Whether ``model_path`` is a finished run of ``config``: same data, model, optimiser, seed, mode, sectors
    and steps (the ranks' launcher, threads and progress may differ)."""
    if not model_path.is_file():
        return False
    try:
        state = torch.load(model_path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - an unreadable file is no finished run: train again
        return False
    ran, wanted = state.get("config") or {}, config.to_dict()
    same = all(ran.get(section) == wanted[section] for section in ("data", "model", "optim"))
    parallel = ran.get("parallel") or {}
    return (
        same and state.get("step") == wanted["run"]["max_steps"] and (ran.get("run") or {}).get("seed") == wanted["run"]["seed"]
        and parallel.get("mode") == "sectors" and parallel.get("domain_size") == wanted["parallel"]["domain_size"]
    )  # fmt: skip


def compare_sectors(
    run_dir: str | Path,
    recipe: Recipe,
    counts: tuple[int, ...] = (8, 16),
    echo: Callable[[str], None] = print,
    progress: bool = False,
) -> dict:
    """Train ``recipe`` in sectors mode for every count of ``counts`` and compare with the run's halo-exchange model.

    Args:
        run_dir: a finished :func:`~domainpar.pipeline.physics.run_recipe` run of ``recipe`` (its ``model.pt``,
            ``filtered/`` or ``graphs/``, ``eval.json``); the sector models go to ``<run_dir>/sectors/<P>/``.
        recipe: the recipe of that run (model, optimiser, steps and seed are reused as they are).
        counts: sector counts to train.

    Returns:
        (and ``<run_dir>/sectors.json``) ``{"halo": {...}, "sectors": {P: {"whole": {...}, "sector_inference": {...},
        "train": {...}}}, "settings": {...}}``; every evaluation holds the overall figures and the tracking efficiency
        of particles that cross a boundary of the P sectors and of those that do not, and the gaps to halo exchange.
    """
    run_dir = Path(run_dir)
    record_path = run_dir / "eval.json"
    if not record_path.is_file():
        raise DomainparError(f"{run_dir}: expected a finished recipe run (eval.json not found)")
    record = json.loads(record_path.read_text())
    if record.get("recipe", {}).get("name") != recipe.name:
        raise DomainparError(f"{run_dir}: the run is of recipe {record.get('recipe', {}).get('name')!r}, not {recipe.name!r}")
    graphs = run_dir / ("filtered" if recipe.filter is not None else "graphs")
    events = Path(record["events"]["val"])
    model = run_dir / "model.pt"
    steps = record["train"]["steps"]
    pt_min = 1.0
    started = time.perf_counter()
    echo(f"== halo exchange: {model} on the held-out events ({recipe.evaluation.parts} parts, {recipe.evaluation.method})")
    halo = _evaluate_whole(recipe, model, graphs / "val", events, progress)
    result: dict = {
        "settings": {"counts": list(counts), "steps": steps, "model": recipe.train.model.to_dict(), "pt_min": pt_min},
        "halo": {k: halo.summary.get(k) for k in FIGURES},
        "sectors": {},
    }
    for count in counts:
        crossers = {}
        for evaluation in halo.evaluations:
            plan = partition_graph(evaluation.graph, count, method="sectors")
            crossers[evaluation.event_id] = crossing(evaluation.graph, plan.owner)
        halo_split = _tracking_split(halo, crossers, pt_min)
        out = run_dir / "sectors" / str(count)
        config = recipe.train.replace(
            **{
                "data.train": str(graphs / "train"), "data.val": str(graphs / "val"), "run.out": str(out / "train"),
                "run.progress": progress, "parallel.mode": "sectors", "parallel.ranks": count, "parallel.domain_size": count,
                "parallel.threads": 1, "run.max_steps": steps,
            }
        )  # fmt: skip
        if _trained_as(out / "train" / "model.pt", config):
            # More sectors than this machine may spawn ranks for: trained before under torchrun (docs/full_event.md).
            echo(f"== naive sectors: {count} sectors, {steps} steps: the model trained before in {out / 'train'} is reused")
            shutil.copyfile(out / "train" / "model.pt", out / "model.pt")
            entry = {"train": {"steps": steps, "seconds": None, "reused": str(out / "train")}}
        else:
            shutil.rmtree(out, ignore_errors=True)
            echo(f"== naive sectors: {count} sectors on {count} ranks, {steps} steps, the recipe's model and seed")
            begin = time.perf_counter()
            summary = train(config)
            shutil.copyfile(summary["model"], out / "model.pt")
            entry = {"train": {"steps": summary.get("steps"), "seconds": time.perf_counter() - begin}}
        for mode, report in (
            ("whole", _evaluate_whole(recipe, out / "model.pt", graphs / "val", events, progress)),
            ("sector_inference", _evaluate_sectors(out / "model.pt", graphs / "val", events, count)),
        ):
            split = _tracking_split(report, crossers, pt_min)
            figures = {k: report.summary.get(k) for k in FIGURES}
            for name, mask in (("crossing", split["crosses"]), ("not_crossing", ~split["crosses"])):
                figures[name] = _efficiency(split["matched"][mask])
                figures[name]["halo"] = _efficiency(halo_split["matched"][mask])
                figures[name]["gap"] = gap_with_error(halo_split["matched"][mask], split["matched"][mask])
            entry[mode] = figures
            echo(f"   {count} sectors, {mode}: {_crossing_line(figures['crossing'])}; TrackML score {figures['trackml_score']}")
        result["sectors"][str(count)] = entry
    result["seconds"] = time.perf_counter() - started
    with atomic_path(run_dir / "sectors.json") as tmp:
        tmp.write_text(json.dumps(result, indent=1) + "\n")
    return result
