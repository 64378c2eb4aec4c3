"""Run a recipe end to end: simulate → build → filter → train → evaluate on simulated and real events.

What ``python -m bench --only physics`` runs (the full recipe) and what the
``make run`` demo runs (the recipe scaled down). Everything lands under one
output directory:

=============================  ==================================================
``events/{train,val}/``        the simulated events (TrackML CSV)
``graphs/{train,val,real}/``   hit graphs built with the recipe's cuts/features (with a filter, ``train`` only)
``filter.pt``                  the trained edge filter (with a filter)
``filtered/{train,val,real}/`` the graphs the GNN sees (with a filter)
``train/``                     the GNN training run (metrics, curves, checkpoints)
``model.pt``                   the trained model
``eval.json``                  every figure: graphs, filter, training, evaluation
``plots/{simulated,real}/``    ROC, efficiency and purity vs pT and η, event displays
``submissions/``               the tracks as TrackML submissions, per set as in ``plots/``
=============================  ==================================================

The model never sees a real event before its evaluation: the real events are
built and filtered with the recipe's settings and scored once, at the end.
"""

from __future__ import annotations

import json
import resource
import shutil
import time
from contextlib import closing
from pathlib import Path
from typing import Callable

import numpy as np

from domainpar.atomic import atomic_path
from domainpar.data.dataset import build_dataset, build_seconds, build_workers, event_inputs
from domainpar.data.subset import volume_subset_dir
from domainpar.errors import DomainparError
from domainpar.filter.edge_filter import EdgeFilter, load_filter, train_filter
from domainpar.inference.evaluation import evaluate, write_outputs
from domainpar.inference.pipeline import load_pipeline
from domainpar.inference.runner import Scorer, open_scorer
from domainpar.inference.spec import EvaluateConfig
from domainpar.pipeline.pruning import (EVENT_GRAPH_MB_PER_BUILD_SECOND, PRUNE_SECONDS_PER_MB, SELECT_SECONDS_PER_MB,
                                        graph_record, pruned_graph)
from domainpar.pipeline.recipe import Recipe
from domainpar.pipeline.unlabelled import compare_unlabelled, mean_figures, truth_free_figures
from domainpar.sim.dataset import simulate_dataset, simulation_seconds, simulation_workers, simulator_digest
from domainpar.train.run import train
from domainpar.workers import available_cores, failure_summary, file_megabytes, pool_size, run_items

#: Figures of the closing table, per evaluated dataset.
TABLE_KEYS = (
    "auc", "efficiency", "purity", "efficiency_pt1", "efficiency_at_purity90", "trackml_score", "tracking_efficiency",
    "perfect_efficiency", "fake_rate", "duplicate_rate",
)  # fmt: skip


def _cpu_seconds() -> float:
    """User + system CPU time of this process and of its finished children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _timed(begin: float, cpu_begin: float) -> dict:
    """A stage's wall and CPU seconds since ``begin`` / ``cpu_begin``."""
    return {"seconds": time.perf_counter() - begin, "cpu_seconds": _cpu_seconds() - cpu_begin}


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def format_table(evaluations: dict[str, dict], keys: tuple[str, ...] = TABLE_KEYS) -> list[str]:
    """Lines of a plain-text table: one row per figure, one column per dataset."""
    labels = list(evaluations)
    lines = [f"{'':>22} " + " ".join(f"{label:>14}" for label in labels)]
    for key in keys:
        lines.append(f"{key:>22} " + " ".join(f"{_fmt(evaluations[label].get(key)):>14}" for label in labels))
    return lines


def run_recipe(
    recipe: Recipe,
    out: str | Path,
    real: str | Path | None = None,
    echo: Callable[[str], None] = print,
    progress: bool = False,
    events_cache: str | Path | None = None,
    unlabelled: list[str | Path] | None = None,
    edge_filter: str | Path | None = None,
) -> dict:
    """Run ``recipe`` under ``out`` and return (and write) ``eval.json``'s content.

    Args:
        out: output directory (created; a previous run there is replaced).
        real: directory of real labelled TrackML events to evaluate on after
            training (None or missing: simulated events only).
        echo: where progress lines and the closing table go.
        events_cache: keep the simulated events here, keyed by the simulation settings and the simulator's
            source, and reuse them in later runs (None: simulate under ``out``).
        unlabelled: prefixes of real events without truth (the full event 21000): after training they are built,
            filtered and scored like the held-out events, and their truth-free figures (edges per hit, filter
            pass fraction, score distribution, tracks, track-building time) are set beside the simulated ones'
            (:mod:`domainpar.pipeline.unlabelled`). None: none.
        edge_filter: a trained edge filter (``filter.pt`` of an earlier run of this recipe) to prune with instead
            of training one: a larger model judged on the very graphs an earlier run's model was (the filter's
            training settings must equal the recipe's ``filter`` section). None: train the filter.

    Returns:
        ``{"recipe", "graphs", "filter", "train", "evaluate": {"simulated": ..., "simulated_<subset>": ...,
        "real": ...}, "unlabelled", "timings", "seconds", ...}``.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DomainparError(f"{out}: output must be a directory (found a file)")
    out.mkdir(parents=True, exist_ok=True)
    num_parts = recipe.evaluation.parts
    started, cpu_started = time.perf_counter(), _cpu_seconds()
    result: dict = {"recipe": recipe.to_dict(), "timings": {}}
    sources, gnn_graphs, prepared = prepare_graphs(recipe, out, real, echo, progress, events_cache, edge_filter)
    result.update(prepared)

    begin, cpu_begin = time.perf_counter(), _cpu_seconds()
    model_path, result["train"] = _train(recipe, gnn_graphs, out, echo, progress)
    result["timings"]["train"] = _timed(begin, cpu_begin)
    result["train"].update(result["timings"]["train"])
    final = result["train"]["final"]
    echo(f"   {result['train']['steps']} steps in {result['train']['seconds']:.0f} s "
         f"({result['train']['cpu_seconds']:.0f} CPU s); validation AUC {_fmt(final.get('auc'))}")  # fmt: skip

    # Evaluation: held-out simulated events (and their detector regions), then the real ones.
    begin, cpu_begin = time.perf_counter(), _cpu_seconds()
    evaluations = {}
    # The threshold and the track builder are the checkpoint's (the recipe's tracks section, recorded by training).
    configs = {
        "real" if kind == "real" else "simulated" + kind[len("val"):]: (kind, EvaluateConfig(
            checkpoint=model_path, data=gnn_graphs[kind], events_dir=sources[kind], num_parts=num_parts,
            method=recipe.evaluation.method, progress=progress))
        for kind in gnn_graphs if kind != "train"
    }  # fmt: skip
    # One scorer for every set: with several parts, one group of processes started once, not once a set.
    with closing(open_scorer(load_pipeline(next(iter(configs.values()))[1]))) as scorer:
        for label, (kind, config) in configs.items():
            filtered = None if result["filter"] is None else result["filter"]["graphs"][kind]
            evaluations[label] = _evaluate(config, scorer, out / "plots" / label, out / "submissions" / label, filtered)
            echo(f"   {label}: AUC {_fmt(evaluations[label]['auc'])}, tracking efficiency {_fmt(evaluations[label]['tracking_efficiency'])}, "
                 f"TrackML score {_fmt(evaluations[label]['trackml_score'])}")  # fmt: skip
    result["timings"]["evaluate"] = _timed(begin, cpu_begin)
    result["evaluate"] = evaluations
    result["unlabelled"] = None
    if unlabelled:
        begin, cpu_begin = time.perf_counter(), _cpu_seconds()
        echo(f"== truth-free comparison with {len(unlabelled)} real event(s) without truth")
        result["unlabelled"] = compare_unlabelled(recipe, model_path, out, [Path(p) for p in unlabelled], num_parts, echo)
        result["timings"]["unlabelled"] = _timed(begin, cpu_begin)
    result["seconds"] = time.perf_counter() - started
    result["cpu_seconds"] = _cpu_seconds() - cpu_started
    result["model"] = str(model_path)
    result["events"] = {kind: str(path) for kind, path in sources.items()}
    with atomic_path(out / "eval.json") as tmp:
        tmp.write_text(json.dumps(result, indent=1, default=_json_default) + "\n")
    echo("")
    for line in format_table(evaluations):
        echo(line)
    echo(f"done in {result['seconds']:.0f} s ({result['cpu_seconds']:.0f} CPU s); model {model_path}, figures {out / 'eval.json'}")
    return result


def _simulate(recipe: Recipe, out: Path, events_cache, echo, progress) -> dict[str, Path]:
    """The simulated events (reused from ``events_cache`` when the same simulation was run before), and their
    detector-region copies: ``{"train", "val", "val_<subset>"...}`` → event directories."""
    sim = recipe.simulation
    echo(f"== simulate {sim.train_events} + {sim.val_events} events of {sim.particles} particles")
    root = out / "events" if events_cache is None else Path(events_cache) / _simulation_key(recipe)
    events = {"train": root / "train", "val": root / "val"}
    if not (root / "complete").is_file():
        for directory in events.values():
            shutil.rmtree(directory, ignore_errors=True)
        # As many processes as build the graphs: the events do not depend on it (one stream per event).
        workers = _workers(recipe, available_cores())
        for simulation, count in ((recipe.training_simulation(), sim.train_events), (recipe.validation_simulation(), sim.val_events)):
            # No more at a time than this machine's memory holds (and none that it cannot hold at all).
            workers = simulation_workers(simulation.event_peak_bytes(), f"particles {sim.particles}", None, count, workers,
                                         seconds_each=simulation_seconds(simulation))
        simulate_dataset(
            events["train"], sim.train_events, recipe.training_simulation(), seed=sim.seed, first_event_id=1,
            progress=progress, workers=workers,
        )
        simulate_dataset(
            events["val"], sim.val_events, recipe.validation_simulation(), seed=sim.val_seed, first_event_id=100_001,
            progress=progress, workers=workers,
        )  # fmt: skip
        if events_cache is not None:
            (root / "complete").write_text("")
    if recipe.graph.volumes:
        # A graph of a detector region is judged on that region's truth: the events themselves are cut to it (the
        # cache holds the whole events simulated).
        for kind in ("train", "val"):
            events[kind] = volume_subset_dir(events[kind], out / "events" / f"{kind}_volumes", recipe.graph.volumes)
        echo(f"   every event restricted to the graph's volumes {list(recipe.graph.volumes)}")
    for name, volumes in recipe.evaluation.subsets.items():
        events[f"val_{name}"] = volume_subset_dir(events["val"], out / "events" / f"val_{name}", volumes)
        echo(f"   held-out events restricted to {name} (volumes {list(volumes)}): {events[f'val_{name}']}")
    return events


def _build(recipe: Recipe, sources: dict[str, Path], out: Path, echo, progress) -> tuple[dict[str, Path], dict]:
    """Graphs of the event sets ``sources`` written whole under ``out/graphs`` (with no filter, every set: the real
    events too, built now with the same settings and scored only at the end). Those an edge filter will read back
    and prune are stored uncompressed: no zlib on either side, for files ~40 % larger."""
    graphs = {kind: out / "graphs" / kind for kind in sources}
    records = {}
    for kind, source in sources.items():
        shutil.rmtree(graphs[kind], ignore_errors=True)
        workers = build_workers(event_inputs(source), _workers(recipe, available_cores()))
        stats = build_dataset(source, graphs[kind], recipe.graph, progress=progress, workers=workers,
                              compress=recipe.filter is None)  # fmt: skip
        records[kind] = [graph_record(s) for s in stats]
        _echo_built(echo, kind, records[kind])
    return graphs, records


def _echo_built(echo, kind: str, records: list[dict]) -> None:
    mean = lambda key: sum(r[key] or 0.0 for r in records) / len(records)  # noqa: E731
    echo(
        f"   {kind:>5}: {len(records)} events, {mean('num_edges'):,.0f} edges/event, efficiency {mean('efficiency'):.4f}, "
        f"pT>1 {mean('efficiency_pt1'):.4f}, purity {mean('purity'):.4f}"
    )


def _workers(recipe: Recipe, cores: int) -> int:
    """Processes that simulate events and build graphs: the cores the recipe's ranks use (never more than this machine has)."""
    threads = recipe.train.parallel.threads or 1
    return max(1, min(cores, recipe.train.parallel.ranks * threads))


def prepare_graphs(
    recipe: Recipe,
    out: str | Path,
    real: str | Path | None = None,
    echo: Callable[[str], None] = print,
    progress: bool = False,
    events_cache: str | Path | None = None,
    edge_filter: str | Path | None = None,
) -> tuple[dict[str, Path], dict[str, Path], dict]:
    """The recipe's data stages under ``out``: simulate (or reuse the cache), build graphs, filter them.

    The arguments are :func:`run_recipe`'s. A GNN trained elsewhere on the same data can be judged on what this
    returns (``python -m bench.tools.physics_levers`` trains its larger models on it).

    Returns:
        ``(sources, graphs, record)``: event directories and the GNN's graph directories by set (``train``, ``val``,
        ``val_<subset>``, ``real``), and ``{"graphs": build records, "filter": the filter's record or None,
        "timings": {stage: {"seconds", "cpu_seconds"}}}``. The stages: ``simulate``; ``build`` (every set with no
        filter, else the training set alone); ``filter`` (training it); ``build_and_prune`` (the training graphs
        pruned, every other set built and pruned; with a trained filter, every set built and pruned).
    """
    # A filter the recipe would not train is refused before the minutes of simulating and building.
    trained = None if edge_filter is None else reused_filter(edge_filter, recipe)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    record: dict = {"timings": {}}
    begin, cpu_begin = time.perf_counter(), _cpu_seconds()
    sources = _simulate(recipe, out, events_cache, echo, progress)
    real_dir = None if real is None else Path(real)
    if real_dir is not None and real_dir.is_dir() and any(real_dir.glob("event*-truth.csv*")):
        volumes = recipe.graph.volumes
        sources["real"] = real_dir if not volumes else volume_subset_dir(real_dir, out / "events" / "real_volumes", volumes)
    record["timings"]["simulate"] = _timed(begin, cpu_begin)

    if recipe.filter is None:
        begin, cpu_begin = time.perf_counter(), _cpu_seconds()
        graphs, record["graphs"] = _build(recipe, sources, out, echo, progress)
        record["timings"]["build"] = _timed(begin, cpu_begin)
        record["filter"] = None
        return sources, graphs, record
    record["graphs"] = {}
    if trained is None:
        # Only the graphs the filter trains on are written whole; every other set is built and pruned in one pass
        # once the filter is trained (a full event's graph is ~0.2 GB to write and read back).
        begin, cpu_begin = time.perf_counter(), _cpu_seconds()
        graphs, record["graphs"] = _build(recipe, {"train": sources["train"]}, out, echo, progress)
        record["timings"]["build"] = _timed(begin, cpu_begin)
        begin, cpu_begin = time.perf_counter(), _cpu_seconds()
        edge_filter, scored = _train_filter(recipe, graphs["train"], echo, progress)
        record["timings"]["filter"] = _timed(begin, cpu_begin)
    else:
        echo(f"== edge filter: a trained one (hash {trained.content_hash}), not trained again")
        graphs, edge_filter, scored = {}, trained, {}
    for kind in sources:
        if kind not in graphs:  # a set written whole by an earlier run is not this run's
            shutil.rmtree(out / "graphs" / kind, ignore_errors=True)
    begin, cpu_begin = time.perf_counter(), _cpu_seconds()
    gnn_graphs, built, filtered = _prune(recipe, sources, graphs, edge_filter, scored, out, echo, progress)
    record["graphs"].update(built)
    record["graphs"] = {kind: record["graphs"][kind] for kind in sources}
    record["filter"] = {"record": edge_filter.record, "threshold": edge_filter.threshold, "graphs": filtered}
    record["timings"]["build_and_prune"] = _timed(begin, cpu_begin)
    return sources, gnn_graphs, record


def reused_filter(path: str | Path, recipe: Recipe) -> EdgeFilter:
    """The trained edge filter at ``path``, checked to be one this recipe's ``filter`` section trains.

    Raises:
        DomainparError: the file is not an edge filter, or it was trained with other settings (one line naming
            the first setting that differs).
    """
    edge_filter = load_filter(path)
    if recipe.filter is None:
        raise DomainparError(f"{path}: the recipe has no filter section, so it prunes with no edge filter (got one)")
    for name in recipe.filter.__dataclass_fields__:
        wanted, found = getattr(recipe.filter, name), getattr(edge_filter.config, name)
        if wanted != found:
            raise DomainparError(
                f"{path}: the edge filter must be trained with the recipe's filter.{name} = {wanted!r} (it was trained with {found!r})"
            )
    return edge_filter


def _train_filter(recipe: Recipe, train_graphs: Path, echo, progress) -> tuple[EdgeFilter, dict[str, np.ndarray]]:
    """The edge filter trained on the training graphs ``train_graphs`` (on the recipe's threads), and the logits of
    the held-out ones that chose its threshold, by file (:func:`train_filter`'s ``held_out_logits``)."""
    if recipe.train.parallel.threads is not None:
        import torch

        torch.set_num_threads(recipe.train.parallel.threads)  # the recipe's CPU share, for the filter too
    echo(f"== edge filter ({recipe.filter.steps} steps, keep {recipe.filter.efficiency:.3f} of true edges, "
         f"{recipe.filter.efficiency_pt1:.3f} above 1 GeV)")  # fmt: skip
    scored: dict[str, np.ndarray] = {}
    edge_filter = train_filter(sorted(train_graphs.glob("*.npz")), recipe.filter, progress=progress, held_out_logits=scored)
    return edge_filter, scored


def _prune(
    recipe: Recipe,
    sources: dict[str, Path],
    graphs: dict[str, Path],
    edge_filter: EdgeFilter,
    scored: dict[str, np.ndarray],
    out: Path,
    echo,
    progress,
) -> tuple[dict[str, Path], dict, dict]:
    """Every set's graphs pruned with ``edge_filter`` into ``out/filtered``: those written whole (``graphs``) read
    back, the others built and pruned in one pass; one process pool for all of them. A graph whose logits are in
    ``scored`` (by file: the held-out training graphs that chose the threshold) is not scored again.

    Returns:
        ``(gnn_graphs, built, filtered)``: the pruned graphs' directories by set, the build records of the sets
        built here, and every set's filter records.
    """
    filter_path = edge_filter.save(out / "filter.pt")
    gnn_graphs = {kind: out / "filtered" / kind for kind in sources}
    items, costs = [], []
    for kind in sources:
        shutil.rmtree(gnn_graphs[kind], ignore_errors=True)
        gnn_graphs[kind].mkdir(parents=True)
        if kind in graphs:
            for path in sorted(graphs[kind].glob("*.npz")):
                logits = scored.get(str(path))
                items.append((kind, str(path), False, logits))
                costs.append((PRUNE_SECONDS_PER_MB if logits is None else SELECT_SECONDS_PER_MB) * file_megabytes(path))
        else:
            for prefix in event_inputs(sources[kind]):
                items.append((kind, str(prefix), True, None))
                seconds = build_seconds(prefix)  # a stat of its hits file
                costs.append(seconds * (1.0 + PRUNE_SECONDS_PER_MB * EVENT_GRAPH_MB_PER_BUILD_SECOND))
    # The longest first, so that no worker is left with a full event while the others are done.
    order = sorted(range(len(items)), key=lambda i: -costs[i])
    workers = pool_size(_workers(recipe, available_cores()), (costs[i] for i in order))
    results = run_items(
        pruned_graph, [items[i] for i in order], args=(str(filter_path), str(out / "filtered"), recipe.graph),
        names=[f"{items[i][0]}/{Path(items[i][1]).name}" for i in order], workers=workers, desc="filtering",
        progress=progress, temporaries_in=list(gnn_graphs.values()),
    )  # fmt: skip
    failed = failure_summary(results, "graphs")
    if failed is not None:
        raise DomainparError(f"building and pruning the graphs: {failed}")
    by_item = {order[k]: result.value for k, result in enumerate(results)}
    built: dict[str, list] = {}
    filtered: dict[str, list] = {}
    for index, (kind, _, build, _) in enumerate(items):  # each set's records in event order, as the sets were listed
        if build:
            built.setdefault(kind, []).append(by_item[index]["built"])
        filtered.setdefault(kind, []).append(by_item[index]["filtered"])
    for kind in sources:
        if kind in built:
            _echo_built(echo, kind, built[kind])
        records = filtered[kind]
        mean = lambda key: sum(r[key] or 0.0 for r in records) / len(records)  # noqa: E731
        echo(
            f"   {kind:>5}: {mean('num_edges'):,.0f} edges/event kept of {mean('num_edges_before'):,.0f}, "
            f"efficiency {mean('efficiency'):.4f}, pT>1 {mean('efficiency_pt1'):.4f}, purity {mean('purity'):.4f}"
        )
    return gnn_graphs, built, filtered


def _train(recipe: Recipe, gnn_graphs: dict[str, Path], out: Path, echo, progress) -> tuple[Path, dict]:
    """Train the GNN on the (filtered) training graphs; ``model.pt`` and the training record."""
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
    model_path = out / "model.pt"
    shutil.copyfile(summary["model"], model_path)
    return model_path, {"steps": summary.get("steps"), "epochs": summary.get("epochs"), "final": summary.get("final") or {}}


def _evaluate(eval_config: EvaluateConfig, scorer: Scorer, plots: Path, submissions: Path, filtered: list[dict] | None) -> dict:
    """Judge the model on one set of graphs (their raw events give the truth weights) with the run's scorer; write
    its plots and submissions.

    ``filtered``: the edge filter's records of these graphs (edges before the filter), for the truth-free figures.
    """
    report = evaluate(eval_config, scorer)
    write_outputs(report, plots_dir=plots, submissions_dir=submissions)
    figures = {k: v for k, v in report.summary.items() if k != "events"}
    figures["events"] = report.summary["events"]
    built = {r["event_id"]: r["num_edges_before"] for r in filtered} if filtered else {}
    figures["truth_free"] = mean_figures(
        [
            truth_free_figures(
                e.graph.num_nodes, built.get(e.event_id, e.graph.num_edges), e.scores, report.summary["threshold"], e.track_id,
                e.record["seconds_tracks"],
            )
            for e in report.evaluations
        ]
    )
    return figures


def _simulation_key(recipe: Recipe) -> str:
    """Name of a cached event set: the simulation settings and every file of the simulator's package, hashed."""
    import hashlib
    from dataclasses import asdict

    digest = hashlib.sha256(json.dumps(asdict(recipe.simulation), sort_keys=True).encode())
    digest.update(simulator_digest().encode())
    return f"events-{digest.hexdigest()[:16]}"


def _json_default(value):
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


__all__ = ["TABLE_KEYS", "format_table", "run_recipe"]
