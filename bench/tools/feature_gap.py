"""The simulation-to-real gap of the features the GNN reads, by pT, and graphs with columns rescaled to test it.

    python -m bench.tools.feature_gap spread --recipe examples/full_event.yaml \\
        --real ../shared/data/trackml/pixel/event000021000 --sim runs/x/full_event/events/val_pixel
    python -m bench.tools.feature_gap scaled --recipe examples/full_event.yaml \\
        --event ../shared/data/trackml/pixel/event000021000 --factor 1.18 \\
        --column node:cell_count --column node:cluster_u --column node:cluster_v --column node:cell_charge --out graphs/

    python -m bench.tools.feature_gap population --checkpoint runs/x/full_event/model.pt \
        --filter runs/x/full_event/filter.pt --data ../shared/data/trackml/pixel --data runs/x/full_event/events/val_pixel

``population`` runs ``evaluate``'s loss diagnosis (:mod:`domainpar.tracks.losses`) on each labelled ``--data`` and
splits the first stage that loses each particle (on >= 3 layers, pT >= 0.1 GeV) by what the particle is: produced
within 1 mm of the beam line or not, its type, its pseudorapidity, charge and layers. ``spread`` prints, per pT bin, for the pixel hits and the true segments of particles produced within 1 mm of the
beam line: the mean cluster features of the hits (real / simulated and their ratio) and the median and 95th
percentile of every edge feature's absolute value (real / simulated). ``scaled`` builds one labelled event's graph
as the recipe's ``graph`` section does and multiplies the named columns (``node:NAME`` a node feature, ``NAME`` an
edge feature) by ``--factor``, for ``domainpar evaluate --data OUT --events ...``: the graph records the recipe's
build, so a checkpoint trained with it accepts it. ``docs/tracks.md`` ("two simulation-to-real mismatches
tested") holds what they showed.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np

from domainpar.data.event_graph import EventGraph, save_graph
from domainpar.data.features import cluster_summary
from domainpar.data.graph import build_event_graph
from domainpar.data.trackml import event_prefixes, load_event
from domainpar.pipeline.recipe import load_recipe

PT_BINS = (0.1, 0.2, 0.3, 0.5, 0.7, 1.0, np.inf)
PIXEL_VOLUMES = {"barrel": (8,), "endcaps": (7, 9)}
#: Produced this close to the beam line (mm): the prompt particles, alike in both.
PROMPT_MM = 1.0


def _bins() -> list[tuple[float, float]]:
    return list(zip(PT_BINS[:-1], PT_BINS[1:]))


def cluster_means(prefix: Path) -> dict[tuple[str, float], np.ndarray]:
    """(region, pT bin low edge) → [hits, mean cells, channels along u, along v, charge] of prompt particles' pixel hits."""
    hits, cells, truth, particles = load_event(prefix, parts=("hits", "cells", "truth", "particles"))
    clusters = cluster_summary(hits["hit_id"].to_numpy(), cells)
    particle = truth.set_index("hit_id").loc[hits["hit_id"], "particle_id"].to_numpy()
    table = particles.set_index("particle_id").reindex(particle)
    pt = np.hypot(table["px"].to_numpy(), table["py"].to_numpy())
    prompt = np.hypot(table["vx"].to_numpy(), table["vy"].to_numpy()) < PROMPT_MM
    volume = hits["volume_id"].to_numpy()
    out = {}
    for region, volumes in PIXEL_VOLUMES.items():
        for low, high in _bins():
            mask = np.isin(volume, volumes) & (particle != 0) & prompt & (pt >= low) & (pt < high)
            out[(region, low)] = np.concatenate([[mask.sum()], clusters[mask][:, [0, 2, 3, 1]].mean(axis=0)])
    return out


def true_edge_rows(graph: EventGraph) -> tuple[np.ndarray, np.ndarray]:
    """(edge features, pT) of the graph's true segments of prompt particles."""
    src = graph.edge_index[0]
    keep = graph.y.astype(bool) & (np.hypot(graph.particle_vertex[src, 0], graph.particle_vertex[src, 1]) < PROMPT_MM)
    return graph.edge_attr[keep], graph.particle_pt[src][keep]


def spread(recipe: Path, real: Path, sim: Path) -> None:
    """Print the cluster and edge-feature tables of the real event against the simulated events of ``sim``."""
    config = load_recipe(recipe).graph
    sims = event_prefixes(sim)
    real_means = cluster_means(real)
    sim_means = [cluster_means(prefix) for prefix in sims]
    print("| region | pT from (GeV) | hits real / sim | cells | channels u | channels v | charge |")
    print("|---|---|---|---|---|---|---|")
    for key, ours in real_means.items():
        counts = np.array([m[key][0] for m in sim_means])
        theirs = np.average([m[key][1:] for m in sim_means], axis=0, weights=np.maximum(counts, 1))
        cells = " | ".join(f"{a:.2f} / {b:.2f} ({b / a:.2f})" for a, b in zip(ours[1:], theirs))
        print(f"| {key[0]} | {key[1]} | {int(ours[0])} / {int(counts.sum())} | {cells} |")
    real_graph, _ = build_event_graph(real, config)
    rows = [true_edge_rows(real_graph)]
    sim_rows = [true_edge_rows(build_event_graph(prefix, config)[0]) for prefix in sims]
    rows.append((np.concatenate([r[0] for r in sim_rows]), np.concatenate([r[1] for r in sim_rows])))
    print("\n| edge feature | " + " | ".join(f"{low}-{high} GeV: median, p95 real / sim" for low, high in _bins()) + " |")
    print("|---" * (len(_bins()) + 1) + "|")
    for column, name in enumerate(real_graph.edge_features):
        cells = []
        for low, high in _bins():
            stats = []
            for attr, pt in rows:
                values = np.abs(attr[(pt >= low) & (pt < high), column])
                stats.append(np.percentile(values[np.isfinite(values)], [50, 95]))
            cells.append(f"{stats[0][0]:.3g} / {stats[1][0]:.3g}, {stats[0][1]:.3g} / {stats[1][1]:.3g}")
        print(f"| {name} | " + " | ".join(cells) + " |")


def scaled(recipe: Path, event: Path, factor: float, columns: list[str], out: Path) -> Path:
    """Write ``event``'s labelled graph, built as ``recipe`` builds, with ``columns`` multiplied by ``factor``."""
    graph, _ = build_event_graph(event, load_recipe(recipe).graph)
    x, edge_attr = graph.x.copy(), graph.edge_attr.copy()
    for column in columns:
        if column.startswith("node:"):
            x[:, list(graph.node_features).index(column[5:])] *= np.float32(factor)
        else:
            edge_attr[:, list(graph.edge_features).index(column)] *= np.float32(factor)
    out.mkdir(parents=True, exist_ok=True)
    return save_graph(replace(graph, x=x, edge_attr=edge_attr), out / f"event{graph.event_id:09d}.npz")


#: (label, selection) of the population table, on a frame of one row per particle.
SPLITS = (
    ("prompt", lambda f: f.vr < PROMPT_MM), ("displaced", lambda f: f.vr >= PROMPT_MM),
    ("prompt pions", lambda f: (f.vr < PROMPT_MM) & (f.type == 211)),
    ("prompt kaons and protons", lambda f: (f.vr < PROMPT_MM) & f.type.isin([321, 2212])),
    ("prompt pions |eta| < 1", lambda f: (f.vr < PROMPT_MM) & (f.type == 211) & (f.eta.abs() < 1)),
    ("prompt pions 1 <= |eta| < 2", lambda f: (f.vr < PROMPT_MM) & (f.type == 211) & (f.eta.abs() >= 1) & (f.eta.abs() < 2)),
    ("prompt pions |eta| >= 2", lambda f: (f.vr < PROMPT_MM) & (f.type == 211) & (f.eta.abs() >= 2)),
    ("prompt pions q > 0", lambda f: (f.vr < PROMPT_MM) & (f.type == 211) & (f.q > 0)),
    ("prompt pions q < 0", lambda f: (f.vr < PROMPT_MM) & (f.type == 211) & (f.q < 0)),
)


def particle_stages(checkpoint: Path, edge_filter: Path | None, data: Path):
    """One row per particle of every event of ``data``: pT, layers, the first stage that lost it (0: perfect),
    matched, and from the particles file its production radius, |type|, pseudorapidity and charge."""
    import pandas as pd

    from domainpar.inference.evaluation import evaluate
    from domainpar.inference.spec import EvaluateConfig

    report = evaluate(EvaluateConfig(checkpoint=checkpoint, edge_filter=edge_filter, data=data, losses=True, progress=False))
    frames = []
    for evaluation in report.evaluations:
        losses = evaluation.losses
        prefix = next(p for p in event_prefixes(data) if p.name == f"event{evaluation.record['event_id']:09d}")
        (particles,) = load_event(prefix, parts=("particles",))
        table = particles.set_index("particle_id").reindex(losses.particle_id)
        frames.append(pd.DataFrame({
            "pt": losses.pt, "nlayers": losses.nlayers, "stage": losses.stage, "matched": losses.matched,
            "vr": np.hypot(table["vx"].to_numpy(), table["vy"].to_numpy()),
            "type": np.abs(table["particle_type"].to_numpy()) if "particle_type" in table else 0,
            "eta": np.arcsinh(table["pz"].to_numpy() / np.hypot(table["px"].to_numpy(), table["py"].to_numpy())),
            "q": table["q"].to_numpy(),
        }))  # fmt: skip
    return pd.concat(frames, ignore_index=True)


def population(checkpoint: Path, edge_filter: Path | None, datasets: list[Path]) -> None:
    """Print, per data set and pT bin below 0.5 GeV, the first-loss stages of each split of :data:`SPLITS`."""
    from domainpar.tracks.losses import STAGES

    names = ("perfect", *STAGES)
    print("| data | pT (GeV) | particles | count | missed | " + " | ".join(names) + " |")
    print("|---" * (5 + len(names)) + "|")
    for data in datasets:
        frame = particle_stages(checkpoint, edge_filter, data)
        frame = frame[(frame.nlayers >= 3) & (frame.pt >= 0.1)]
        for low, high in ((0.1, 0.2), (0.2, 0.3), (0.3, 0.5)):
            in_bin = frame[(frame.pt >= low) & (frame.pt < high)]
            for label, select in SPLITS:
                rows = in_bin[select(in_bin)]
                if len(rows):
                    shares = " | ".join(f"{(rows.stage == code).mean():.3f}" for code in range(len(names)))
                    print(f"| {data.name} | {low}-{high} | {label} | {len(rows)} | {1 - rows.matched.mean():.3f} | {shares} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    first = commands.add_parser("spread", help="cluster and edge-feature spreads by pT, real against simulated")
    first.add_argument("--recipe", type=Path, required=True)
    first.add_argument("--real", type=Path, required=True, help="a labelled real event prefix")
    first.add_argument("--sim", type=Path, required=True, help="a directory of labelled simulated events")
    second = commands.add_parser("scaled", help="a labelled graph with columns rescaled")
    second.add_argument("--recipe", type=Path, required=True)
    second.add_argument("--event", type=Path, required=True)
    second.add_argument("--factor", type=float, required=True)
    second.add_argument("--column", action="append", required=True, help="node:NAME or an edge feature NAME")
    second.add_argument("--out", type=Path, required=True)
    third = commands.add_parser("population", help="the first stage that loses each low-pT particle, by what it is")
    third.add_argument("--checkpoint", type=Path, required=True)
    third.add_argument("--filter", type=Path)
    third.add_argument("--data", type=Path, action="append", required=True, help="labelled raw events (repeat)")
    args = parser.parse_args(argv)
    if args.command == "spread":
        spread(args.recipe, args.real, args.sim)
    elif args.command == "population":
        population(args.checkpoint, args.filter, args.data)
    else:
        print(scaled(args.recipe, args.event, args.factor, args.column, args.out))


if __name__ == "__main__":
    main()
