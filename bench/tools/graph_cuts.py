"""Variants of a checkpoint's graph cuts side by side: edges built, and the chains they break, by pT and by origin.

    python -m bench.tools.graph_cuts --checkpoint runs/x/model.pt --data ../shared/data/trackml/pixel \\
        --variant 'skip 0.02={"skip_dphi_margin": 0.02}' --variant 'slope 0.003={"phi_slope_max": 0.003}'

Every raw event of ``--data`` (with truth) is built with the checkpoint's recorded build, or a recipe's ``graph:``
section with ``--recipe examples/full_event.yaml`` (the row ``recorded``), and
with every ``--variant NAME=JSON`` (the recorded :class:`~domainpar.data.graph.GraphConfig` with the JSON's settings
replaced). For each: edges per event, the fraction of true segments built, and for the particles on >= 3 layers
the fraction whose chain the graph breaks (:func:`~domainpar.tracks.losses.chain_joined`) per pT bin of
``evaluate --losses``; then the truth weight of the particles whose chain is broken, prompt and displaced
(:mod:`bench.tools.score_losses`): what the graph puts beyond the reach of the TrackML score before any network
sees the event (a builder may still bridge a broken chain). Build seconds are those of this process (the first
build of a variant compiles nothing; the first of the run loads the kernels).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.tools.graph_losses import graph_particles
from bench.tools.score_losses import DISPLACED_MM
from domainpar.data.graph import GraphConfig, build_graph
from domainpar.errors import DomainparError
from domainpar.inference.events import read_raw_event
from domainpar.inference.sources import list_sources
from domainpar.tracks.losses import chain_joined, event_segments, loss_bin_index, loss_bins


def recorded_build(checkpoint: Path) -> GraphConfig:
    """The graph build a checkpoint records (its edge filter's entry aside)."""
    from domainpar.inference.pipeline import load_pipeline
    from domainpar.inference.spec import EvaluateConfig

    config = load_pipeline(EvaluateConfig(checkpoint=checkpoint, data=checkpoint, progress=False)).graphs.graph_config
    if config is None:
        raise DomainparError(f"--checkpoint {checkpoint}: expected a checkpoint that records its graph build (none recorded)")
    return config


def recipe_build(recipe: Path) -> GraphConfig:
    """The graph build of a recipe file's ``graph:`` section."""
    import yaml

    try:
        section = yaml.safe_load(recipe.read_text()).get("graph")
    except (OSError, AttributeError, yaml.YAMLError) as exc:
        raise DomainparError(f"--recipe {recipe}: expected a recipe YAML file with a graph section ({exc})") from None
    return GraphConfig.from_dict(section if section is not None else {}, f"--recipe {recipe}: graph")


def parse_variant(text: str) -> tuple[str, dict]:
    """``NAME=JSON`` → (name, settings).

    Raises:
        DomainparError: not a name and a JSON object.
    """
    name, sep, settings = text.partition("=")
    try:
        changes = json.loads(settings) if sep else None
    except json.JSONDecodeError as exc:
        raise DomainparError(f"--variant {text}: expected NAME=JSON, the JSON unreadable ({exc.msg})") from None
    if not name or not isinstance(changes, dict):
        raise DomainparError(f"--variant {text}: expected NAME=JSON with a JSON object of graph settings")
    return name, changes


def measure(config: GraphConfig, events: list) -> dict:
    """One variant over the events (raw events with truth and particles)."""
    edges, names = loss_bins(1.0)
    particles = np.zeros(len(names))
    broken = np.zeros(len(names))
    lost = {"prompt": 0.0, "displaced": 0.0}
    num_edges = kept = segments = 0
    seconds = 0.0
    for raw in events:
        started = time.perf_counter()
        graph, _ = build_graph(raw.hits, raw.truth, raw.particles, raw.cells, config=config)
        seconds += time.perf_counter() - started
        found = event_segments(graph.particle_id, graph.layer, graph.pos, graph.particle_vertex, graph.edge_index)
        num_edges += graph.num_edges
        kept += int(found.built.sum())
        segments += found.built.size
        row, pt, layers = graph_particles(graph)
        ids = np.unique(graph.particle_id[graph.particle_id != 0])
        real = row >= 0
        vertex_r = np.zeros(ids.size)
        vertex_r[row[real]] = np.hypot(graph.particle_vertex[real, 0], graph.particle_vertex[real, 1])
        joined = chain_joined(row.size, found.segments, found.built, row, ids.size)
        at = loss_bin_index(pt, edges)
        counted = (layers >= 3) & (at >= 0)
        particles += np.bincount(at[counted], minlength=len(names))
        broken += np.bincount(at[counted & ~joined], minlength=len(names))
        weight = raw.truth.groupby("particle_id")["weight"].sum() / raw.truth["weight"].sum()
        weight = weight.reindex(ids).fillna(0.0).to_numpy()
        displaced = vertex_r > DISPLACED_MM
        lost["prompt"] += float(weight[~joined & ~displaced].sum()) / len(events)
        lost["displaced"] += float(weight[~joined & displaced].sum()) / len(events)
    return {
        "edges_per_event": num_edges / len(events),
        "true_segments_built": kept / segments if segments else None,
        "seconds_per_event": seconds / len(events),
        "bins": names,
        "broken_by_pt": [float(b / p) if p else None for b, p in zip(broken, particles)],
        "broken_weight": lost,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tools.graph_cuts", description=__doc__.splitlines()[0])
    start = parser.add_mutually_exclusive_group(required=True)
    start.add_argument("--checkpoint", type=Path, help="the build to start from (recorded in it)")
    start.add_argument("--recipe", type=Path, help="or a recipe file, whose graph section is the build to start from")
    parser.add_argument("--data", required=True, type=Path, help="raw TrackML events with truth and particles")
    parser.add_argument("--variant", action="append", default=[], help='NAME=JSON settings replaced, e.g. skip={"skip_dphi_margin": 0.02}')
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        changes = dict(parse_variant(text) for text in args.variant)
        base = recorded_build(args.checkpoint) if args.checkpoint is not None else recipe_build(args.recipe)
        variants = {"recorded": base}
        variants.update({name: GraphConfig.from_dict({**base.to_dict(), **settings}, f"--variant {name}")
                         for name, settings in changes.items()})  # fmt: skip
        events = [read_raw_event(source, base.needs_cells, True) for source in list_sources(args.data, truth=True)]
        if not events:
            raise DomainparError(f"--data {args.data}: expected raw events with truth (found none)")
        results = {}
        for name, config in variants.items():
            results[name] = measure(config, events)
            r = results[name]
            print(f"{name}: {r['edges_per_event'] / 1e6:.3f}M edges per event, true segments built {r['true_segments_built']:.4f}, "
                  f"chains broken by pT {' '.join(f'{b:.3f}' for b in r['broken_by_pt'])}, weight of broken chains "
                  f"prompt {r['broken_weight']['prompt']:.4f} displaced {r['broken_weight']['displaced']:.4f}, "
                  f"build {r['seconds_per_event']:.2f} s", flush=True)  # fmt: skip
    except DomainparError as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    if args.json is not None:
        args.json.write_text(json.dumps({"data": str(args.data), "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
