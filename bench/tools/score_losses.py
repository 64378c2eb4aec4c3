"""Where a submission loses its TrackML score: by pT, by where the particle was produced, and by stage.

    python -m bench.tools.score_losses --truth ../shared/data/trackml/pixel/event000021000 \\
        --submission runs/eval/subs/event000021000-submission.csv \\
        [--scores runs/eval/scores/event000021000.npz --checkpoint model.pt --filter filter.pt] [--json out.json]

``domainpar evaluate --losses`` counts particles (:mod:`domainpar.tracks.losses`); the score weighs hits. This
splits ``1 - score`` among the particles that carry it: every particle's truth weight (its hits' summed
weights, the event's total weight being one) less the weight the score gave it (its hits in its good track,
:mod:`domainpar.tracks.score`). A particle is *displaced* when produced more than 1 mm from the beam line
(secondaries of interactions and decays in the material, conversions), else *prompt*.

With ``--scores`` (an ``evaluate --write-scores`` graph: the edges the GNN scored and their scores) and the
pipeline that made it, each particle's lost weight also goes to the first stage that broke its chain, as
``evaluate --losses`` defines the stages (graph, filter, GNN at or below the builder's cut, GNN below the working
point, else the builder). Works on any submission that covers the truth's hits (a whole-event one is restricted to
them, as ``bench.tools.peers`` judges the challenge's trackers): the first table compares trackers, the second
needs our graph.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from domainpar.data.trackml import load_event
from domainpar.errors import DomainparError
from domainpar.tracks.losses import loss_bin_index, loss_bins
from domainpar.tracks.score import analyze_tracks

#: A particle produced further than this from the beam line (mm) is displaced.
DISPLACED_MM = 1.0
ORIGINS = ("prompt", "displaced")
STAGE_NAMES = ("graph", "filter", "gnn", "weak", "builder")


def particle_weights(truth: pd.DataFrame, particles: pd.DataFrame, submission: pd.DataFrame, source: str) -> pd.DataFrame:
    """Per particle of non-zero weight: ``weight`` (its hits'), ``scored`` (what the score gave it), ``pt``, ``origin``.

    Raises:
        DomainparError: a submission that does not cover the truth's hits once each (named ``source``).
    """
    # A whole-event submission judged on a part's truth (a peer's, on the pixel truth) keeps that part's hits.
    table = analyze_tracks(truth, submission, source, truth_hits_only=True)
    total = float(truth["weight"].sum())
    good = table.good & (table.major_particle_id != 0)
    scored = pd.Series(table.major_weight[good], index=table.major_particle_id[good]).groupby(level=0).sum()
    real = truth[truth["particle_id"] != 0]
    weight = real.groupby("particle_id")["weight"].sum() / total
    weight = weight[weight > 0]
    info = particles.set_index("particle_id").reindex(weight.index)
    frame = pd.DataFrame({
        "weight": weight,
        "scored": scored.reindex(weight.index).fillna(0.0),
        "pt": np.hypot(info["px"], info["py"]).to_numpy(),
        "origin": np.where(np.hypot(info["vx"], info["vy"]).to_numpy() > DISPLACED_MM, "displaced", "prompt"),
    })  # fmt: skip
    frame["lost"] = frame["weight"] - frame["scored"]
    return frame


def pt_bin_names(pt: np.ndarray) -> np.ndarray:
    """The losses table's pT bin of every particle (``evaluate --losses``); below its first edge: ``<0.1``."""
    edges, names = loss_bins(1.0)
    at = loss_bin_index(pt, edges)
    return np.where(at < 0, f"<{edges[0]:g}", np.array(names, dtype=object)[np.maximum(at, 0)])


def chain_stages(weights: pd.DataFrame, scores: Path, checkpoint: Path, edge_filter: Path | None, events: Path) -> pd.Series:
    """Every particle's first broken stage (:data:`STAGE_NAMES`), from the scored graph and the pipeline's build."""
    from domainpar.data.graph_files import load_graph
    from domainpar.inference.events import prepare_event
    from domainpar.inference.pipeline import load_pipeline
    from domainpar.inference.sources import list_sources
    from domainpar.inference.spec import EvaluateConfig
    from domainpar.tracks.losses import FILTER, GNN, GRAPH, WEAK, particle_losses
    from domainpar.tracks.efficiency import tracking_metrics

    scored = load_graph(scores)
    with np.load(scores, allow_pickle=False) as archive:
        if "edge_score" not in archive.files:
            raise DomainparError(f"--scores {scores}: expected a graph written by evaluate --write-scores (no edge_score)")
        edge_score = archive["edge_score"].astype(np.float64)
    config = EvaluateConfig(checkpoint=checkpoint, edge_filter=edge_filter, data=events, progress=False)
    pipeline = load_pipeline(config)
    source = next((s for s in list_sources(events, truth=True) if s.name == f"event{scored.event_id:09d}"), None)
    if source is None:
        raise DomainparError(f"--events {events}: expected the raw event {scored.event_id} of --scores {scores}")
    event = prepare_event(source, pipeline.graphs, pipeline.graphs.prune(), truth=True, segments=True)
    if not np.array_equal(event.graph.edge_index, scored.edge_index):
        raise DomainparError(f"--scores {scores}: expected the graph this pipeline builds from event {scored.event_id}")
    truth = event.truth
    # Only the particles are wanted from the track figures: every hit a track of its own.
    tracking = tracking_metrics(np.arange(truth.particle_id.size), truth.particle_id, truth.layer, truth.particles)
    losses = particle_losses(event.segments, event.graph.particle_id, event.graph.edge_index, edge_score,
                             truth.particle_id, tracking, pipeline.tracks.follow_threshold, pipeline.threshold)  # fmt: skip
    names = {GRAPH: "graph", FILTER: "filter", GNN: "gnn", WEAK: "weak"}
    stage = [names.get(int(code), "builder") for code in losses.chain_lost]
    return pd.Series(stage, index=losses.particle_id).reindex(weights.index).fillna("graph")


def tables(weights: pd.DataFrame) -> dict:
    """The JSON figures: total lost weight, and weight / lost per origin × pT bin (and per origin × stage)."""
    bins = pt_bin_names(weights["pt"].to_numpy())
    out: dict = {"lost": float(weights["lost"].sum()), "score": float(weights["scored"].sum()), "by_pt": {}}
    for origin in ORIGINS:
        mine = weights["origin"].to_numpy() == origin
        out["by_pt"][origin] = {
            name: {"particles": int((mine & (bins == name)).sum()),
                   "weight": float(weights["weight"][mine & (bins == name)].sum()),
                   "lost": float(weights["lost"][mine & (bins == name)].sum())}
            for name in sorted(set(bins[mine]), key=lambda n: float(n.lstrip("<>").split("-")[0]))
        }  # fmt: skip
    if "stage" in weights:
        out["by_stage"] = {origin: {stage: float(weights["lost"][(weights["origin"] == origin) & (weights["stage"] == stage)].sum())
                                    for stage in STAGE_NAMES} for origin in ORIGINS}  # fmt: skip
    return out


def markdown(result: dict) -> str:
    lines = [f"TrackML score {result['score']:.4f}, lost {result['lost']:.4f}", "",
             "| origin | pT (GeV) | particles | weight | weight lost | share of the loss |", "|---|---|---|---|---|---|"]  # fmt: skip
    for origin, rows in result["by_pt"].items():
        for name, row in rows.items():
            share = row["lost"] / result["lost"] if result["lost"] else 0.0
            lines.append(f"| {origin} | {name} | {row['particles']} | {row['weight']:.4f} | {row['lost']:.4f} | {share:.3f} |")
    if "by_stage" in result:
        lines += ["", "| origin | " + " | ".join(STAGE_NAMES) + " |", "|---" * (1 + len(STAGE_NAMES)) + "|"]
        for origin, row in result["by_stage"].items():
            lines.append(f"| {origin} | " + " | ".join(f"{row[s]:.4f}" for s in STAGE_NAMES) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tools.score_losses", description=__doc__.splitlines()[0])
    parser.add_argument("--truth", required=True, type=Path, help="event prefix with truth and particles")
    parser.add_argument("--submission", required=True, type=Path, help="a submission CSV on the truth's hits")
    parser.add_argument("--scores", type=Path, help="evaluate --write-scores graph of the event (adds the stages)")
    parser.add_argument("--checkpoint", type=Path, help="with --scores: the pipeline that made it")
    parser.add_argument("--filter", type=Path, default=None, help="with --scores: the checkpoint's edge filter")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        if (args.scores is None) != (args.checkpoint is None):
            raise DomainparError("--scores and --checkpoint: give both (the stages) or neither")
        _, truth, particles = load_event(args.truth, parts=("hits", "truth", "particles"))
        submission = pd.read_csv(args.submission)
        weights = particle_weights(truth, particles, submission, str(args.submission))
        if args.scores is not None:
            weights["stage"] = chain_stages(weights, args.scores, args.checkpoint, args.filter, args.truth.parent)
        result = tables(weights)
    except (DomainparError, OSError, pd.errors.ParserError) as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    print(markdown(result), end="")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
