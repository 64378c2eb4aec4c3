"""Truth-free figures of real events without truth, beside the same figures of the held-out simulated events.

The real full event 21000 has no truth, but everything that does not need truth can be compared with the simulated
events (hits per event, edges per hit, the edge filter's pass fraction, the score distribution, the edges and tracks
selected, the track-building time): a real event whose figures sit far from the simulated ones shows where the
simulation (or a cut tuned on it) does not carry over. These comparisons are calibration, never a tuning target.

The real events, and each detector region of the recipe's ``evaluation.subsets``, go through the one event chain
``domainpar reconstruct`` runs (:class:`~domainpar.inference.runner.EventRunner`), with the build, filter and builder
the model's checkpoint records.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from domainpar.data.subset import subset_event
from domainpar.inference.events import prepare_event
from domainpar.inference.pipeline import load_pipeline
from domainpar.inference.runner import EventRunner, open_scorer
from domainpar.inference.sources import EventSource
from domainpar.inference.spec import PipelineSpec
from domainpar.pipeline.recipe import Recipe

#: Quantiles of the edge score reported.
SCORE_QUANTILES = (0.1, 0.5, 0.9, 0.99)


def truth_free_figures(
    num_nodes: int, num_edges_built: int, scores: np.ndarray, threshold: float, track_id: np.ndarray, seconds_tracks: float
) -> dict:
    """What one event's graph, filter, scores and tracks look like, without truth.

    Args:
        num_nodes: hits in the graph.
        num_edges_built: edges of the graph as built, before the edge filter.
        scores: (E,) GNN scores (sigmoid) of the edges the GNN saw.
        track_id: (N,) track of every hit.
    """
    sizes = np.bincount(track_id)
    candidates = sizes[sizes >= 3]
    quantiles = np.quantile(scores, SCORE_QUANTILES) if scores.size else [None] * len(SCORE_QUANTILES)
    return {
        "num_nodes": int(num_nodes),
        "edges_per_hit_built": num_edges_built / max(num_nodes, 1),
        "filter_pass_fraction": scores.size / max(num_edges_built, 1),
        "edges_per_hit": scores.size / max(num_nodes, 1),
        "selected_per_hit": float(np.count_nonzero(scores > threshold)) / max(num_nodes, 1),
        **{f"score_q{int(100 * q)}": None if v is None else float(v) for q, v in zip(SCORE_QUANTILES, quantiles)},
        "candidates_per_khit": 1000.0 * candidates.size / max(num_nodes, 1),
        "hits_per_candidate": float(candidates.mean()) if candidates.size else None,
        "seconds_tracks": seconds_tracks,
    }


def mean_figures(records: list[dict]) -> dict:
    """Mean of every figure over events (None where an event lacks it)."""
    keys = records[0].keys() if records else ()
    return {k: (float(np.mean([r[k] for r in records])) if all(r[k] is not None for r in records) else None) for k in keys}


def compare_unlabelled(
    recipe: Recipe, model_path: Path, out: Path, prefixes: list[Path], num_parts: int, echo: Callable[[str], None] = print
) -> dict:
    """Run the events at ``prefixes`` (and their detector regions) through the event chain, without truth.

    Args:
        recipe: the recipe (its partitioner and detector regions; whether it has an edge filter).
        model_path: the trained model (its checkpoint records the graph build, the filter, threshold and builder).
        out: the run directory (``filter.pt`` when the recipe has a filter).
        prefixes: real TrackML events (hits, and cells when the graph needs them; truth not read).

    Returns:
        ``{"real": {"events": [figures per event], **mean figures}, "real_<subset>": {...}}``.
    """
    spec = PipelineSpec(checkpoint=model_path, edge_filter=out / "filter.pt" if recipe.filter is not None else None,
                        num_parts=num_parts, method=recipe.evaluation.method)  # fmt: skip
    pipeline = load_pipeline(spec)
    prune = pipeline.graphs.prune()
    result = {}
    with tempfile.TemporaryDirectory(prefix="domainpar-unlabelled-") as tmp, EventRunner(pipeline, open_scorer(pipeline)) as runner:
        region = recipe.graph.volumes  # judged on the region the graphs hold, as the held-out events are
        sets = {"real": [subset_event(p, Path(tmp) / "volumes", region) if region else Path(p) for p in prefixes]}
        for name, volumes in recipe.evaluation.subsets.items():
            sets[f"real_{name}"] = [subset_event(prefix, Path(tmp) / name, volumes) for prefix in prefixes]
        for label, events in sets.items():
            records = []
            for prefix in events:
                event = prepare_event(EventSource(prefix.name, prefix, "raw"), pipeline.graphs, prune)
                ran = runner.run(event)
                graph, candidates = event.graph, ran.candidates
                figures = truth_free_figures(graph.num_nodes, event.num_edges_built, ran.scores, pipeline.threshold,
                                             candidates.track_id, candidates.seconds)  # fmt: skip
                records.append({"event_id": graph.event_id, **figures})
                echo(
                    f"   {label} event {graph.event_id}: {graph.num_nodes:,} hits, {event.num_edges_built:,} edges built, "
                    f"{graph.num_edges:,} after the filter, {figures['selected_per_hit']:.3f} selected per hit, tracks in "
                    f"{candidates.seconds:.2f} s"
                )
            result[label] = {**mean_figures([{k: v for k, v in r.items() if k != "event_id"} for r in records]), "events": records}
    return result
