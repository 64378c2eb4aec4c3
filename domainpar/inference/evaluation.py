"""Evaluate a trained tracker on whole labelled events: edges, tracks, TrackML score.

Every event goes through the chain ``domainpar reconstruct`` runs (:func:`~domainpar.inference.events.prepare_event`,
then :class:`~domainpar.inference.runner.EventRunner`), in one process or split into ``num_parts`` parts with the
same halo exchange as training (exact: every global edge is owned by one part, so the figures do not depend on
``num_parts``); truth only adds figures (:mod:`domainpar.inference.scoring`).

Inputs: raw TrackML events with truth, or labelled graph files (``domainpar build`` output). Graph files carry no hit
weights: the TrackML score of a graph input needs its raw event (``events_dir``), else it is None, and particle eta
is then estimated from the hits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from domainpar.atomic import atomic_path
from domainpar.errors import DomainparError
from domainpar.inference.events import prepare_event
from domainpar.inference.pipeline import load_pipeline
from domainpar.inference.products import submission_bytes
from domainpar.inference.runner import EventRunner, Scorer, open_scorer
from domainpar.inference.scores import write_scored_graph
from domainpar.inference.scoring import EventEvaluation, judge, summarise
from domainpar.inference.sources import list_sources
from domainpar.inference.spec import EvaluateConfig
from domainpar.progress import progress
from domainpar.tracks.plots import EdgeSample, ParticleSample, plot_event_display, plot_performance, plot_roc, plot_track_examples


@dataclass
class EvaluationReport:
    """The result of :func:`evaluate`."""

    summary: dict
    """JSON-ready overall figures and settings, with per-event records under ``events``."""
    evaluations: list[EventEvaluation] = field(default_factory=list)
    """Per-event arrays (logits, scores, tracks), for tests and plots."""
    producer: dict = field(default_factory=dict)
    """What produced the scores (model or checkpoint with its checksum, threshold, partitioning), recorded with them."""


def evaluate(config: EvaluateConfig, scorer: Scorer | None = None) -> EvaluationReport:
    """Run every event of ``config.data`` through the pipeline and judge its edges and tracks.

    Args:
        config: what to evaluate.
        scorer: where the logits come from (None: the pipeline's, :func:`~domainpar.inference.runner.open_scorer`,
            closed at the end); the sector baseline scores its cut events with its own, a recipe run shares one
            between its evaluated sets. A scorer given here is its caller's to close.

    Returns:
        The report; ``summary`` has the keys ``efficiency``, ``purity``,
        ``auc``, ``trackml_score``, ``tracking_efficiency``, ``fake_rate``,
        ``duplicate_rate`` (overall), the settings, and ``events`` (one record
        per event with the same figures and counts).
    """
    pipeline = load_pipeline(config)
    sources = list_sources(config.data, truth=True)
    if config.events_dir is not None and not Path(config.events_dir).is_dir():
        raise DomainparError(f"--events {config.events_dir}: expected a directory of raw TrackML events (found none)")
    if sources[0].kind == "raw":
        pipeline.graphs.check_raw(str(sources[0].path), truth=True)
    prune = pipeline.graphs.prune()
    evaluations: list[EventEvaluation] = []
    first_source: dict[int, str] = {}
    seconds_inference = 0.0
    with EventRunner(pipeline, scorer or open_scorer(pipeline), close_scorer=scorer is None) as runner:
        for source in progress(sources, desc="evaluating", unit="event", enabled=config.progress):
            event = prepare_event(source, pipeline.graphs, prune, truth=True, events_dir=config.events_dir,
                                  segments=config.losses)  # fmt: skip
            if event.event_id in first_source:
                # Per-event records, submissions and plots are keyed by event id; a repeat would count the event twice.
                raise DomainparError(
                    f"--data {config.data}: expected one graph file per event (found event {event.event_id} in both "
                    f"{first_source[event.event_id]} and {source.path.name})"
                )
            first_source[event.event_id] = source.path.name
            result = runner.run(event)
            seconds_inference += result.seconds["inference"]
            evaluations.append(judge(result, config, pipeline.tracks))
    summary = summarise(evaluations, pt_min=config.pt_min, min_layers=config.min_layers, tracks=pipeline.tracks)
    partitioned = {"num_parts": config.num_parts, "method": config.method if config.num_parts > 1 else None}
    summary = {
        "checkpoint": None if config.checkpoint is None else str(config.checkpoint),
        "model": None if config.model is None else str(config.model),
        "model_format": None if pipeline.exported is None else pipeline.exported.format,
        "checkpoint_step": pipeline.step,
        "data": str(config.data),
        **partitioned,
        "threshold": pipeline.threshold,
        "track_method": pipeline.tracks.method,
        **summary,
        "trackml_score": summary[f"trackml_score_{pipeline.tracks.method}"],
        "seconds_inference": seconds_inference,
        "events": [e.record for e in evaluations],
    }
    producer = pipeline.producer("domainpar evaluate", **partitioned)
    return EvaluationReport(summary=summary, evaluations=evaluations, producer=producer)


def write_outputs(
    report: EvaluationReport,
    plots_dir: Path | None = None,
    submissions_dir: Path | None = None,
    pt_min: float = 1.0,
    min_layers: int = 3,
    scores_dir: Path | None = None,
) -> list[Path]:
    """Write submissions (``event<id>-submission.csv``), plots (PNG) and scored graphs of an evaluation.

    Args:
        report: from :func:`evaluate`.
        plots_dir: directory for ``roc.png``, ``efficiency_purity_vs_pt.png``,
            ``efficiency_purity_vs_eta.png``, ``event_display_<id>.png`` and
            ``track_examples_<id>.png`` (tracks whole, broken and fake; for the first three events).
        submissions_dir: directory for the submission CSVs.
        scores_dir: directory for every event's graph with its edge scores (:mod:`domainpar.inference.scores`).
    """
    written = []
    if scores_dir is not None:
        written += [write_scored_graph(e, scores_dir, report.producer) for e in report.evaluations]
    if submissions_dir is not None:
        for evaluation in report.evaluations:
            path = Path(submissions_dir) / f"event{evaluation.event_id:09d}-submission.csv"
            with atomic_path(path) as tmp:
                tmp.write_bytes(submission_bytes(evaluation.submission))
            written.append(path)
    if plots_dir is not None:
        events = [e.graph for e in report.evaluations]
        threshold = report.summary["threshold"]
        scores = np.concatenate([e.scores for e in report.evaluations])
        labels = np.concatenate([g.y for g in events])
        written.append(plot_roc(scores, labels, Path(plots_dir) / "roc.png", threshold, report.summary["auc"]))
        edges = EdgeSample.concatenate(
            [
                EdgeSample.from_graph(g.pos, g.particle_pt, g.edge_index, g.y, e.scores > threshold)
                for g, e in zip(events, report.evaluations)
            ]
        )
        particles = ParticleSample.from_metrics([e.tracking for e in report.evaluations])
        written += plot_performance(particles, edges, plots_dir, pt_min=pt_min, min_layers=min_layers)
        for graph, evaluation in list(zip(events, report.evaluations))[:3]:
            written.append(
                plot_event_display(
                    graph.pos, evaluation.track_id, graph.edge_index, evaluation.edge_mask,
                    Path(plots_dir) / f"event_display_{graph.event_id}.png",
                    title=f"event {graph.event_id}: {report.summary['track_method']} tracks, score > {threshold:g}",
                )  # fmt: skip
            )
            if graph.particle_id is not None:
                c = evaluation.candidates
                written.append(
                    plot_track_examples(
                        graph.pos, c.offsets, c.hits, c.track_id, graph.particle_id, graph.particle_pt,
                        Path(plots_dir) / f"track_examples_{graph.event_id}.png", pt_min=pt_min,
                        title=f"event {graph.event_id}: {report.summary['track_method']} tracks whole, broken and fake",
                    )  # fmt: skip
                )
    return written
