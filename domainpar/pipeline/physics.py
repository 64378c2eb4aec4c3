"""Run a recipe end to end: simulate → build → filter → train → evaluate on simulated and real events.

What ``python -m bench --only physics`` runs (the full recipe) and what the
``make run`` demo runs (the recipe scaled down). Everything lands under one
output directory:

=============================  ==================================================
``events/{train,val}/``        the simulated events (TrackML CSV)
``graphs/{train,val,real}/``   hit graphs built with the recipe's cuts/features
``filter.pt``                  the trained edge filter (with a filter)
``filtered/{train,val,real}/`` the graphs the GNN sees (with a filter)
``train/``                     the GNN training run (metrics, curves, checkpoints)
``model.pt``                   the trained model
``eval.json``                  every figure: graphs, filter, training, evaluation
``plots/{simulated,real}/``    ROC, efficiency and purity vs pT and η, event displays
=============================  ==================================================

The model never sees a real event before its evaluation: the real events are
built and filtered with the recipe's settings and scored once, at the end.
"""

from __future__ import annotations

import json
import resource
import shutil
import time
from pathlib import Path
from typing import Callable

from domainpar.errors import DomainparError
from domainpar.pipeline.recipe import Recipe

#: Figures of the closing table, per evaluated dataset.
TABLE_KEYS = (
    "auc", "efficiency", "purity", "trackml_score", "tracking_efficiency", "perfect_efficiency", "fake_rate",
    "duplicate_rate",
)  # fmt: skip


def _cpu_seconds() -> float:
    """User + system CPU time of this process and of its finished children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def format_table(evaluations: dict[str, dict], keys: tuple[str, ...] = TABLE_KEYS) -> list[str]:
    """Lines of a plain-text table: one row per figure, one column per dataset."""
    labels = list(evaluations)
    lines = [f"{'':>20} " + " ".join(f"{label:>14}" for label in labels)]
    for key in keys:
        lines.append(f"{key:>20} " + " ".join(f"{_fmt(evaluations[label].get(key)):>14}" for label in labels))
    return lines


def _graph_record(stats) -> dict:
    return {k: v for k, v in stats.as_record().items() if k != "seconds"}


def run_recipe(
    recipe: Recipe,
    out: str | Path,
    real: str | Path | None = None,
    echo: Callable[[str], None] = print,
    progress: bool = False,
    num_parts: int = 1,
    events_cache: str | Path | None = None,
) -> dict:
    """Run ``recipe`` under ``out`` and return (and write) ``eval.json``'s content.

    Args:
        recipe: the recipe (scaled or not).
        out: output directory (created; a previous run there is replaced).
        real: directory of real labelled TrackML events to evaluate on after
            training (None or missing: simulated events only).
        echo: where progress lines and the closing table go.
        progress: show progress bars.
        num_parts: evaluate with this many parts per event (halo exchange).
        events_cache: keep the simulated events here, keyed by the simulation settings and the simulator's
            source, and reuse them in later runs (None: simulate under ``out``).

    Returns:
        ``{"recipe", "graphs", "filter", "train", "evaluate": {"simulated": ..., "real": ...}, "seconds", ...}``.
    """
    from domainpar.atomic import atomic_path
    from domainpar.data.dataset import build_dataset
    from domainpar.data.event_graph import save_graph
    from domainpar.data.graph_files import load_graph
    from domainpar.inference.config import EvaluateConfig
    from domainpar.inference.evaluation import evaluate, write_outputs
    from domainpar.sim.dataset import simulate_dataset
    from domainpar.train.run import train

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DomainparError(f"{out}: output must be a directory (found a file)")
    out.mkdir(parents=True, exist_ok=True)
    started, cpu_started = time.perf_counter(), _cpu_seconds()
    sim = recipe.simulation
    result: dict = {"recipe": recipe.to_dict(), "timings": {}}

    def stage(name: str, begin: float, cpu_begin: float) -> None:
        result["timings"][name] = {"seconds": time.perf_counter() - begin, "cpu_seconds": _cpu_seconds() - cpu_begin}

    # 1. Simulated events (reused from events_cache when the same simulation was run before).
    begin, cpu_begin = time.perf_counter(), _cpu_seconds()
    echo(f"== simulate {sim.train_events} + {sim.val_events} events of {sim.particles} particles")
    root = out / "events" if events_cache is None else Path(events_cache) / _simulation_key(recipe)
    events = {"train": root / "train", "val": root / "val"}
    if not (root / "complete").is_file():
        for directory in events.values():
            shutil.rmtree(directory, ignore_errors=True)
        simulate_dataset(
            events["train"], sim.train_events, recipe.training_simulation(), seed=sim.seed, first_event_id=1, progress=progress
        )
        simulate_dataset(
            events["val"], sim.val_events, recipe.validation_simulation(), seed=sim.val_seed, first_event_id=100_001,
            progress=progress,
        )  # fmt: skip
        if events_cache is not None:
            (root / "complete").write_text("")
    stage("simulate", begin, cpu_begin)

    # 2. Graphs (the real events too: built now with the same settings, scored only at the end).
    begin, cpu_begin = time.perf_counter(), _cpu_seconds()
    sources = dict(events)
    real_dir = None if real is None else Path(real)
    if real_dir is not None and real_dir.is_dir() and any(real_dir.glob("event*-truth.csv*")):
        sources["real"] = real_dir
    graphs = {kind: out / "graphs" / kind for kind in sources}
    result["graphs"] = {}
    for kind, source in sources.items():
        shutil.rmtree(graphs[kind], ignore_errors=True)
        stats = build_dataset(source, graphs[kind], recipe.graph, progress=progress)
        result["graphs"][kind] = [_graph_record(s) for s in stats]
        mean = lambda key: sum(r[key] or 0.0 for r in result["graphs"][kind]) / len(stats)  # noqa: E731
        echo(
            f"   {kind:>5}: {len(stats)} events, {mean('num_edges'):,.0f} edges/event, efficiency {mean('efficiency'):.4f}, "
            f"pT>1 {mean('efficiency_pt1'):.4f}, purity {mean('purity'):.4f}"
        )
    stage("build", begin, cpu_begin)

    # 3. Edge filter: trained on the training graphs, applied to every graph.
    gnn_graphs = graphs
    result["filter"] = None
    if recipe.filter is not None:
        from domainpar.filter.edge_filter import train_filter

        begin, cpu_begin = time.perf_counter(), _cpu_seconds()
        if recipe.train.parallel.threads is not None:
            import torch

            torch.set_num_threads(recipe.train.parallel.threads)  # the recipe's CPU share, for the filter too
        echo(f"== edge filter ({recipe.filter.steps} steps, keep {recipe.filter.efficiency:.3f} of true edges)")
        train_files = sorted(graphs["train"].glob("*.npz"))
        edge_filter = train_filter(train_files, recipe.filter, progress=progress)
        edge_filter.save(out / "filter.pt")
        gnn_graphs = {kind: out / "filtered" / kind for kind in graphs}
        filtered_records = {}
        for kind in graphs:
            shutil.rmtree(gnn_graphs[kind], ignore_errors=True)
            records = []
            for path in sorted(graphs[kind].glob("*.npz")):
                graph = load_graph(path)
                kept = edge_filter.apply(graph)
                save_graph(kept, gnn_graphs[kind] / path.name)
                records.append(_filtered_record(graph, kept))
            filtered_records[kind] = records
            mean = lambda key: sum(r[key] or 0.0 for r in records) / len(records)  # noqa: E731
            echo(
                f"   {kind:>5}: {mean('num_edges'):,.0f} edges/event kept of {mean('num_edges_before'):,.0f}, "
                f"efficiency {mean('efficiency'):.4f}, pT>1 {mean('efficiency_pt1'):.4f}, purity {mean('purity'):.4f}"
            )
        result["filter"] = {"record": edge_filter.record, "threshold": edge_filter.threshold, "graphs": filtered_records}
        stage("filter", begin, cpu_begin)

    # 4. The GNN.
    begin, cpu_begin = time.perf_counter(), _cpu_seconds()
    run_dir = out / "train"
    shutil.rmtree(run_dir, ignore_errors=True)
    config = recipe.train.replace(
        **{
            "data.train": str(gnn_graphs["train"]),
            "data.val": str(gnn_graphs["val"]),
            "run.out": str(run_dir),
            "run.progress": progress,
        }
    )
    p = config.parallel
    echo(f"== train: {p.mode} mode, {p.ranks} rank(s), {config.run.epochs} epochs, hidden {config.model.hidden}, "
         f"{config.model.num_iterations} iterations")  # fmt: skip
    summary = train(config)
    stage("train", begin, cpu_begin)
    model_path = out / "model.pt"
    shutil.copyfile(summary["model"], model_path)
    final = summary.get("final") or {}
    result["train"] = {
        "steps": summary.get("steps"),
        "epochs": summary.get("epochs"),
        "final": final,
        "seconds": result["timings"]["train"]["seconds"],
        "cpu_seconds": result["timings"]["train"]["cpu_seconds"],
    }
    echo(f"   {summary.get('steps')} steps in {result['train']['seconds']:.0f} s "
         f"({result['train']['cpu_seconds']:.0f} CPU s); validation AUC {_fmt(final.get('auc'))}")  # fmt: skip

    # 5. Evaluation: held-out simulated events, then the real ones.
    begin, cpu_begin = time.perf_counter(), _cpu_seconds()
    evaluations = {}
    for label, kind in (("simulated", "val"), ("real", "real")):
        if kind not in gnn_graphs:
            continue
        eval_config = EvaluateConfig(
            checkpoint=model_path,
            data=gnn_graphs[kind],
            events_dir=sources[kind],
            num_parts=num_parts,
            method="geometric",
            threshold=recipe.tracks.threshold,
            track_method=recipe.tracks.method,
            progress=progress,
        )
        report = evaluate(eval_config)
        write_outputs(report, plots_dir=out / "plots" / label)
        evaluations[label] = {k: v for k, v in report.summary.items() if k != "events"}
        evaluations[label]["events"] = report.summary["events"]
    stage("evaluate", begin, cpu_begin)
    result["evaluate"] = evaluations
    result["seconds"] = time.perf_counter() - started
    result["cpu_seconds"] = _cpu_seconds() - cpu_started
    result["model"] = str(model_path)
    with atomic_path(out / "eval.json") as tmp:
        tmp.write_text(json.dumps(result, indent=1, default=_json_default) + "\n")
    echo("")
    for line in format_table(evaluations):
        echo(line)
    echo(f"done in {result['seconds']:.0f} s ({result['cpu_seconds']:.0f} CPU s); model {model_path}, figures {out / 'eval.json'}")
    return result


def _simulation_key(recipe: Recipe) -> str:
    """Name of a cached event set: the simulation settings and every file of the simulator's package, hashed."""
    import hashlib
    from dataclasses import asdict

    from domainpar.sim.dataset import simulator_digest

    digest = hashlib.sha256(json.dumps(asdict(recipe.simulation), sort_keys=True).encode())
    digest.update(simulator_digest().encode())
    return f"events-{digest.hexdigest()[:16]}"


def _json_default(value):
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _filtered_record(before, after) -> dict:
    """Edges kept, share of the graph's true edges kept (all, and of particles above 1 GeV), purity after filtering."""
    import numpy as np

    true_before = int(np.count_nonzero(before.y > 0.5))
    true_after = int(np.count_nonzero(after.y > 0.5))
    high_before = (before.y > 0.5) & (before.particle_pt[before.edge_index[0]] > 1.0)
    high_after = (after.y > 0.5) & (after.particle_pt[after.edge_index[0]] > 1.0)
    return {
        "event_id": after.event_id,
        "num_edges_before": before.num_edges,
        "num_edges": after.num_edges,
        "efficiency": true_after / true_before if true_before else None,
        "efficiency_pt1": int(high_after.sum()) / int(high_before.sum()) if high_before.any() else None,
        "purity": true_after / after.num_edges if after.num_edges else None,
    }


__all__ = ["TABLE_KEYS", "format_table", "run_recipe"]
