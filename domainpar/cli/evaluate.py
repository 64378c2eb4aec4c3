"""``domainpar evaluate``: score a checkpoint on whole events — edges, tracks, TrackML score."""

from __future__ import annotations

import json
from pathlib import Path

import click

from domainpar.atomic import staged_outputs
from domainpar.cli.checks import local_ranks
from domainpar.cli.inputs import all_inputs, sidecar_inputs
from domainpar.cli.pipeline_options import pipeline_fields, pipeline_options
from domainpar.errors import DomainparError
from domainpar.output_paths import check_apart, check_output_dir, check_output_file


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def format_table(summary: dict) -> str:
    """Per-event rows and an overall row of the headline figures."""
    columns = [
        ("event", "event_id"), ("edges", "num_edges"), ("eff", "efficiency"), ("purity", "purity"),
        ("auc", "auc"), ("score", "trackml_score"), ("trk_eff", "tracking_efficiency"),
        ("fake", "fake_rate"), ("dup", "duplicate_rate"),
    ]  # fmt: skip
    rows = [[_fmt(r.get(key)) for _, key in columns] for r in summary["events"]]
    overall = dict(summary, event_id="all", num_edges=sum(r["num_edges"] for r in summary["events"]))
    rows.append([_fmt(overall.get(key)) for _, key in columns])
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, (h, _) in enumerate(columns)]
    lines = ["  ".join(h.rjust(w) for (h, _), w in zip(columns, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)


@click.command("evaluate", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--data", required=True, type=click.Path(path_type=Path),
              help="Raw TrackML events with truth (graphs are built as the model's training graphs were), "
                   "or labelled graph files (.npz, PyG) / a directory of them.")
@pipeline_options
@click.option("--ranks", type=local_ranks(), default=None, help="Local processes; must equal --parts (default: --parts).")
@click.option("--events", "events_dir", type=click.Path(path_type=Path), default=None,
              help="Raw events holding the truth of graph inputs, for the TrackML score (graph files carry no hit weights).")
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None,
              help="Write the overall and per-event figures as JSON.")
@click.option("--plots", "plots_dir", type=click.Path(path_type=Path), default=None,
              help="Write ROC, efficiency/purity vs pT and eta, and event displays (PNG) here.")
@click.option("--submissions", "submissions_dir", type=click.Path(path_type=Path), default=None,
              help="Write one TrackML submission CSV (event_id, hit_id, track_id) per event here.")
@click.option("--write-scores", "scores_dir", type=click.Path(path_type=Path), default=None,
              help="Write every event's graph here, in the format it was read (.npz, or PyG for PyG input), with its "
                   "per-edge scores (edge_score / edge_scores) and a record of the model that produced them.")
@click.option("--losses", is_flag=True,
              help="Also find, per pT bin, the first stage that loses each particle not reconstructed perfectly: graph "
                   "construction, edge filter, GNN score or track builder (JSON losses_vs_pt, docs/tracks.md). Graph "
                   "files the filter pruned already are rebuilt from their raw events (--events) for it.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def evaluate(
    data: Path,
    ranks: int | None,
    events_dir: Path | None,
    json_path: Path | None,
    plots_dir: Path | None,
    submissions_dir: Path | None,
    scores_dir: Path | None,
    losses: bool,
    quiet: bool,
    **pipeline,
) -> None:
    """Evaluate a checkpoint, or an exported model (--model), on whole events: edge efficiency, purity and ROC AUC,
    tracks built from the edge scores, the TrackML score, tracking efficiency
    (pT > 1 GeV, >= 3 layers), fake and duplicate rates — per event and overall.

    With --parts N every event is split into N parts scored by N local
    processes exchanging halo rows, exactly as in domain-parallel training, so
    events too large for one device can be evaluated; the figures equal the
    single-process ones (a model that is not a built-in first proves it on a
    slice of the first event). --model re-validates a deployed model: its file is
    run as ACTS runs it (ONNX Runtime on CPU, or torch.jit.load) with the
    threshold and features its sidecar records. evaluate joins no torchrun/srun
    job: started as a rank of one, every rank refuses.
    """
    # Imported when the command runs: --help stays fast (torch).
    from domainpar.inference.evaluation import evaluate as run_evaluation
    from domainpar.inference.evaluation import write_outputs
    from domainpar.inference.spec import EvaluateConfig

    from domainpar.launch.env import detect as detect_launcher

    launcher = detect_launcher()
    if launcher.joins:
        # Each rank would score every event on its own and write the same outputs: one run, or a refusal on every rank.
        raise DomainparError(
            f"evaluate does not join torchrun/srun jobs (this process is {launcher.describe()}): it runs in one process, "
            "or starts its own --parts local processes; run it once, outside torchrun/srun"
        )
    num_parts = pipeline["num_parts"]
    if ranks is not None and num_parts is not None and ranks != num_parts:
        raise DomainparError(f"--ranks must equal --parts: one process per part (got --ranks {ranks}, --parts {num_parts})")
    parts = num_parts if num_parts is not None else (ranks if ranks is not None else 1)
    config = EvaluateConfig(data=data, events_dir=events_dir, losses=losses, progress=not quiet,
                            **pipeline_fields(pipeline, parts))  # fmt: skip
    written_to = (("--json", json_path, "file"), ("--plots", plots_dir, "dir"),
                  ("--submissions", submissions_dir, "dir"), ("--write-scores", scores_dir, "dir"))  # fmt: skip
    for option, path, kind in written_to:
        if path is not None:
            (check_output_file if kind == "file" else check_output_dir)(path, option)
    # No output may replace what the run reads (--write-scores DIR with --data DIR/event1.npz would rewrite it).
    inputs = all_inputs(("--checkpoint", config.checkpoint), ("--data", data), ("--events", events_dir),
                        ("--filter", config.edge_filter))  # fmt: skip
    inputs += sidecar_inputs("--model", config.model)
    for option, path, kind in written_to:
        if path is not None:
            check_apart(option, path, kind, inputs)
    report = run_evaluation(config)
    # Submissions, plots and the report appear together: a failure while writing them leaves none.
    with staged_outputs() as outputs:
        stages = {}
        for final in (plots_dir, submissions_dir, scores_dir):
            if final is not None and final not in stages:
                stages[final] = outputs.directory(final)
        staged = write_outputs(report, plots_dir=stages.get(plots_dir), submissions_dir=stages.get(submissions_dir),
                               scores_dir=stages.get(scores_dir))  # fmt: skip
        finals = {stage: final for final, stage in stages.items()}
        written = [finals[Path(p).parent] / Path(p).name if Path(p).parent in finals else Path(p) for p in staged]
        if json_path is not None:
            outputs.file(json_path).write_text(json.dumps(report.summary, indent=2) + "\n")
            written.append(json_path)
    s = report.summary
    click.echo(
        f"{s['num_events']} event(s), {s['num_parts']} part(s), threshold {s['threshold']:g}, "
        f"{s['track_method']} tracks, inference {s['seconds_inference']:.2f} s"
    )
    click.echo(format_table(s))
    if "losses_vs_pt" in s:
        from domainpar.tracks.losses import format_losses

        click.echo(f"where particles are lost, fraction of each pT bin's particles (all = missed + not perfect; "
                   f"{s['seconds_losses']:.2f} s):")  # fmt: skip
        click.echo(format_losses(s["losses_vs_pt"]))
    for path in written:
        click.echo(f"wrote {path}")
    if s["num_parts"] > 1 and not any(event.get("num_halo_nodes") for event in s.get("events", [])):
        click.echo(
            f"warning: the {s['num_parts']} parts of every event share no edge (0 halo rows: small or disconnected graphs "
            "get a 0 % METIS cut), so no halo was exchanged; --method geometric, or larger events, exercise the exchange",
            err=True,
        )
