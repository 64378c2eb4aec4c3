"""Track builders side by side on scored events: the measurements behind ``docs/tracks.md``.

Reads graphs written by ``domainpar evaluate --write-scores`` (each with its ``edge_score``) and the raw events that
hold their truth, builds tracks with every method (or settings) asked for, and judges them as ``evaluate`` does
(:mod:`domainpar.tracks.efficiency`, :mod:`domainpar.tracks.score`), with the builder's seconds per event. Tuning
builder settings on saved scores costs no inference::

    python -m bench.tools.compare_builders --scores runs/scores/real --events data/trackml/pixel \\
        --methods components,walk,ckf,ambiguity --json compare.json
    python -m bench.tools.compare_builders --scores runs/scores/sim --events runs/events/val \\
        --methods ambiguity --set hit_chi2=9 --set window=6
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from domainpar.data.detector import layer_index_of
from domainpar.data.event_graph import EventGraph, load_npz_graph
from domainpar.data.trackml import event_id_of, event_prefixes, load_event
from domainpar.errors import DomainparError
from domainpar.tracks.candidates import build_candidates
from domainpar.tracks.free_pass import cluster_lengths
from domainpar.tracks.layout import TrackCandidates
from domainpar.tracks.config import TrackConfig
from domainpar.tracks.efficiency import ParticleTable, TrackingMetrics, tracking_metrics
from domainpar.tracks.methods import METHODS
from domainpar.tracks.score import score_arrays
from domainpar.tracks.submission import complete_tracks

#: The entry of a scored graph file that holds the edge scores (``domainpar.inference.scores.NPZ_SCORES``).
SCORES_ENTRY = "edge_score"


@dataclass
class ScoredEvent:
    """One scored event with its truth."""

    graph: EventGraph
    """The scored graph (after the edge filter)."""
    scores: np.ndarray
    """(E,) edge scores."""
    hit_id: np.ndarray
    """(M,) every hit of the raw event."""
    particle_id: np.ndarray
    """(M,) truth particle of every raw hit."""
    weight: np.ndarray
    """(M,) TrackML weight of every raw hit."""
    layer: np.ndarray
    """(M,) layer code of every raw hit."""
    particles: ParticleTable


def load_scored(scores_dir: Path, events_dir: Path) -> list[ScoredEvent]:
    """Every scored graph of ``scores_dir`` (``*.npz``) with the truth of its raw event in ``events_dir``."""
    prefixes = {event_id_of(p): p for p in event_prefixes(events_dir)}
    events = []
    for path in sorted(Path(scores_dir).glob("*.npz")):
        graph = load_npz_graph(path)
        with np.load(path, allow_pickle=False) as npz:
            if SCORES_ENTRY not in npz.files:
                raise DomainparError(f"{path}: expected a graph written by evaluate --write-scores, got no {SCORES_ENTRY}")
            scores = npz[SCORES_ENTRY].astype(np.float64)
        if graph.event_id not in prefixes:
            raise DomainparError(f"{events_dir}: expected the raw event {graph.event_id} of {path.name}, got none")
        hits, particles, truth = load_event(prefixes[graph.event_id], parts=("hits", "particles", "truth"))
        truth = truth.sort_values("hit_id").reset_index(drop=True)
        hits = hits.set_index("hit_id").loc[truth["hit_id"].to_numpy()]
        events.append(
            ScoredEvent(
                graph=graph,
                scores=scores,
                hit_id=truth["hit_id"].to_numpy(np.int64),
                particle_id=truth["particle_id"].to_numpy(np.int64),
                weight=truth["weight"].to_numpy(np.float64),
                layer=layer_index_of(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy()),
                particles=ParticleTable.from_momenta(particles["particle_id"], particles["px"], particles["py"], particles["pz"]),
            )
        )
    if not events:
        raise DomainparError(f"{scores_dir}: expected scored graph files (*.npz), got none")
    return events


def judge(event: ScoredEvent, candidates: TrackCandidates) -> tuple[TrackingMetrics, float]:
    """Tracking figures and TrackML score of one event's candidates."""
    full = complete_tracks(event.hit_id, event.graph.hit_id, candidates.track_id)
    metrics = tracking_metrics(full, event.particle_id, event.layer, event.particles)
    return metrics, score_arrays(full, event.particle_id, event.weight).score


def compare(events: list[ScoredEvent], configs: dict[str, TrackConfig]) -> dict[str, dict]:
    """Figures of every configuration over the events: counts summed, the TrackML score averaged per event."""
    out = {}
    for name, config in configs.items():
        totals = dict.fromkeys(("num_reconstructable", "num_matched", "num_perfect", "num_candidates", "num_fakes", "num_duplicates"), 0)
        scores, seconds = [], []
        for event in events:
            g = event.graph
            candidates = build_candidates(g.pos, g.layer, g.edge_index, event.scores, config, cluster_lengths(g))
            metrics, score = judge(event, candidates)
            for key in totals:
                totals[key] += getattr(metrics, key)
            scores.append(score)
            seconds.append(candidates.seconds)
        ratio = lambda a, b: totals[a] / totals[b] if totals[b] else None  # noqa: E731
        out[name] = {
            "tracking_efficiency": ratio("num_matched", "num_reconstructable"),
            "perfect_efficiency": ratio("num_perfect", "num_reconstructable"),
            "fake_rate": ratio("num_fakes", "num_candidates"),
            "duplicate_rate": ratio("num_duplicates", "num_candidates"),
            "trackml_score": float(np.mean(scores)),
            "seconds_per_event": float(np.median(seconds)),
            "seconds_max": float(np.max(seconds)),
            **totals,
        }
    return out


def _parse_setting(text: str) -> tuple[str, object]:
    key, _, value = text.partition("=")
    names = {f.name: f.type for f in fields(TrackConfig)}
    if key not in names or not value:
        raise DomainparError(f"--set {text}: expected FIELD=VALUE with FIELD one of {', '.join(names)}")
    parsed = json.loads(value) if value not in ("true", "false") else value == "true"
    return key, parsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tools.compare_builders", description=__doc__.splitlines()[0])
    parser.add_argument("--scores", required=True, type=Path, help="graphs written by evaluate --write-scores")
    parser.add_argument("--events", required=True, type=Path, help="the raw events with their truth")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated methods")
    parser.add_argument("--threshold", type=float, default=0.5, help="edge score cut")
    parser.add_argument("--set", action="append", default=[], help="FIELD=VALUE of TrackConfig (repeatable)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)
    try:
        settings = dict(_parse_setting(s) for s in args.set)
        configs = {m: replace(TrackConfig(method=m, threshold=args.threshold), **settings) for m in args.methods.split(",")}
        events = load_scored(args.scores, args.events)
        # Compile the kernels outside the timings.
        first = events[0].graph
        build_candidates(first.pos, first.layer, first.edge_index, events[0].scores, configs[next(iter(configs))], cluster_lengths(first))
        result = compare(events, configs)
    except DomainparError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(events)} event(s), settings {settings or 'default'}")
    print(f"{'method':>12} {'trk_eff':>8} {'perfect':>8} {'fake':>7} {'dup':>7} {'score':>7} {'s/event':>8}")
    for name, r in result.items():
        print(f"{name:>12} {r['tracking_efficiency']:8.4f} {r['perfect_efficiency']:8.4f} {r['fake_rate']:7.4f} "
              f"{r['duplicate_rate']:7.4f} {r['trackml_score']:7.4f} {r['seconds_per_event']:8.3f}")  # fmt: skip
    if args.json is not None:
        args.json.write_text(json.dumps({"settings": settings, "events": len(events), "methods": result}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
