"""Evaluate a trained edge classifier on whole events: edges, tracks, TrackML score.

For every event: the model scores every edge of the event graph — in one
process, or split into ``num_parts`` parts run by as many local processes
with the same halo exchange as training, so an event too large for one
device can be scored — then tracks are built from the edge scores
(:mod:`domainpar.tracks.build`) and judged against the truth
(:mod:`domainpar.tracks.score`, :mod:`domainpar.tracks.efficiency`).

Partitioned inference is exact: every global edge is *owned* by one part,
which computes it with complete halo inputs, so its logit equals the
single-process one up to float summation order; the scores, tracks and
figures do not depend on ``num_parts`` (``tests/inference/test_evaluate.py``).

Inputs: raw TrackML event directories (graphs are built with the default
:class:`~domainpar.data.graph.GraphConfig`, the truth gives the TrackML
weights and the particles file the particle pT/eta), or graph files with
labels (``domainpar build`` output). Graph files carry no hit weights: the
TrackML score of a graph input needs its raw event (``events_dir``), else it
is reported as None, and particle eta is then estimated from the hits.

How events are judged and summed is :mod:`domainpar.inference.scoring`'s job.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from domainpar import __version__
from domainpar.atomic import atomic_path
from domainpar.errors import DomainparError
from domainpar.inference.config import EvaluateConfig
from domainpar.inference.events import load_events
from domainpar.inference.infer import infer_partitioned, infer_single
from domainpar.inference.pipeline import event_logits, load_pipeline
from domainpar.inference.scores import write_scored_graph
from domainpar.inference.scoring import EventEvaluation, score_event_graph, summarise
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


def evaluate(config: EvaluateConfig) -> EvaluationReport:
    """Run inference on every event of ``config.data`` and judge edges and tracks.

    Returns:
        The report; ``summary`` has the keys ``efficiency``, ``purity``,
        ``auc``, ``trackml_score``, ``tracking_efficiency``, ``fake_rate``,
        ``duplicate_rate`` (overall), the settings, and ``events`` (one record
        per event with the same figures and counts).
    """
    # The pipeline reconstruct runs (domainpar.inference.pipeline): the same graphs, scores and track builder.
    pipeline = load_pipeline(config.checkpoint, config.model, config.edge_filter, config.threshold, config.track_method)
    exported, loaded, threshold, step = pipeline.exported, pipeline.loaded, pipeline.threshold, pipeline.step
    events = load_events(config, pipeline.node_features, pipeline.graph_meta, exported=exported)
    if not events:
        raise DomainparError(f"{config.data}: found no events to evaluate")
    graphs = [e.graph for e in events]
    start = time.perf_counter()
    partition_records: list[dict] = [{} for _ in graphs]
    if exported is not None or config.num_parts == 1:
        bar = progress(events, desc="inference", unit="event", enabled=config.progress)
        # event_logits' two cases (infer_single is called from here so that it can be replaced in one place by tests).
        logits = [event_logits(pipeline, e.graph, e.source) if exported is not None else infer_single(loaded, e.graph) for e in bar]
    else:
        logits, partition_records = infer_partitioned(
            Path(config.checkpoint), graphs, config.num_parts, config.method, config.seed, config.timeout_s
        )
    seconds_inference = time.perf_counter() - start
    evaluations = []
    for event, logits_of_event, part_record in progress(
        list(zip(events, logits, partition_records)), desc="scoring", unit="event", enabled=config.progress
    ):
        evaluation = score_event_graph(event, logits_of_event, config, threshold, pipeline.tracks)
        evaluation.record.update(part_record)
        evaluations.append(evaluation)
    summary = summarise(evaluations, [g.y for g in graphs], pt_min=config.pt_min, min_layers=config.min_layers)
    producer = {"producer": "domainpar evaluate", "domainpar": __version__, "threshold": threshold,
                "num_parts": config.num_parts, "method": config.method if config.num_parts > 1 else None}  # fmt: skip
    if exported is not None:
        producer.update(model=str(config.model), model_sha256=exported.sidecar["model"]["sha256"],
                        model_format=exported.format, checkpoint=exported.sidecar.get("source", {}).get("checkpoint"),
                        checkpoint_sha256=exported.sidecar.get("source", {}).get("sha256"), checkpoint_step=step)  # fmt: skip
    else:
        producer.update(checkpoint=str(config.checkpoint), checkpoint_sha256=loaded.sha256, checkpoint_step=step,
                        model_name=loaded.model_config.name)  # fmt: skip
    summary = {
        "checkpoint": None if config.checkpoint is None else str(config.checkpoint),
        "model": None if exported is None else str(config.model),
        "model_format": None if exported is None else exported.format,
        "checkpoint_step": step,
        "data": str(config.data),
        "num_parts": config.num_parts,
        "method": config.method if config.num_parts > 1 else None,
        "threshold": threshold,
        "track_method": config.track_method,
        **summary,
        "trackml_score": summary[f"trackml_score_{config.track_method}"],
        "seconds_inference": seconds_inference,
        "events": [e.record for e in evaluations],
    }
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
                evaluation.submission.to_csv(tmp, index=False)
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
            if evaluation.candidates is not None and graph.particle_id is not None:
                c = evaluation.candidates
                written.append(
                    plot_track_examples(
                        graph.pos, c.offsets, c.hits, c.track_id, graph.particle_id, graph.particle_pt,
                        Path(plots_dir) / f"track_examples_{graph.event_id}.png", pt_min=pt_min,
                        title=f"event {graph.event_id}: {report.summary['track_method']} tracks whole, broken and fake",
                    )  # fmt: skip
                )
    return written
