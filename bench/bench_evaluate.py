"""Evaluation at full event scale: inference (1 process vs N parts), track building, scoring.

    python bench/bench_evaluate.py [--particles 10000] [--parts 2] [--repeats 3] [--hidden 64] [--iterations 8]

Simulates one labelled event (the simulator's full pile-up scale by default),
builds its graph, and times with a freshly initialised Interaction Network:
single-process inference, partitioned inference (spawn, partition, halo
exchange, gather — everything ``domainpar evaluate --parts N`` does), track
building (components, walk) and the TrackML score. Prints medians over
``--repeats`` and the ratios, all from one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _median_seconds(fn, repeats: int) -> tuple[float, object]:
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--particles", type=int, default=10000)
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=8)
    args = parser.parse_args()

    from domainpar.data.graph import build_graph
    from domainpar.data.simulate import SimulationConfig, simulate_event
    from domainpar.model.interaction_network import InteractionNetwork, ModelConfig
    from domainpar.tracks.build import build_tracks
    from domainpar.tracks.score import score_arrays
    from domainpar.train.checkpoint import CHECKPOINT_FORMAT_VERSION, write_checkpoint
    from domainpar.inference import infer_partitioned, infer_single, load_model

    event = simulate_event(SimulationConfig(num_particles=args.particles), event_id=1, seed=0)
    hits, particles, truth = event["hits"], event["particles"], event["truth"]
    graph, _ = build_graph(hits, truth, particles, event_id=1)
    print(f"event: {graph.num_nodes} hits, {graph.num_edges} edges ({graph.num_positive_edges} true)")
    torch.manual_seed(0)
    config = ModelConfig(hidden=args.hidden, num_iterations=args.iterations)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = Path(tmp) / "model.pt"
        write_checkpoint(
            {"format_version": CHECKPOINT_FORMAT_VERSION, "step": 0, "model": InteractionNetwork(config).state_dict(),
             "model_config": config.to_dict(), "config": {}},
            checkpoint,
        )  # fmt: skip
        loaded = load_model(checkpoint)
        t_single, logits = _median_seconds(lambda: infer_single(loaded, graph), args.repeats)
        t_parts, (parts_logits, _) = _median_seconds(
            lambda: infer_partitioned(checkpoint, [graph], args.parts, "metis"), args.repeats
        )
    diff = float(np.max(np.abs(parts_logits[0] - logits)))
    scores = 1.0 / (1.0 + np.exp(-logits))
    threshold = float(np.quantile(scores, 1.0 - graph.num_positive_edges / graph.num_edges))
    weight = truth.set_index("hit_id").loc[graph.hit_id, "weight"].to_numpy(np.float64)
    rows = [("inference, 1 process", t_single), (f"inference, {args.parts} parts (spawn + halo)", t_parts)]
    for method in ("components", "walk"):
        t, tracks = _median_seconds(lambda: build_tracks(graph.num_nodes, graph.edge_index, scores, threshold, method), args.repeats)
        rows.append((f"track building, {method}", t))
    t_score, _ = _median_seconds(lambda: score_arrays(tracks, graph.particle_id, weight).score, args.repeats)
    rows.append(("TrackML score", t_score))
    for name, seconds in rows:
        print(f"{name:40s} {seconds:8.3f} s")
    print(f"partitioned / single inference time: {t_parts / t_single:.2f}; max |logit difference| {diff:.2e}")


if __name__ == "__main__":
    main()
