"""Which cut of the graph construction breaks the chains of the particles it loses, by pT (``docs/tracks.md``).

    python -m bench.tools.graph_losses --checkpoint runs/x/model.pt --filter runs/x/filter.pt \\
        --data ../shared/data/trackml/pixel [--json graph_losses.json]

``domainpar evaluate --losses`` says how many particles the graph construction loses first
(:mod:`domainpar.tracks.losses`); this says why. Every raw event of ``--data`` is built as the checkpoint records
(:func:`~domainpar.inference.events.prepare_event`, its true segments flagged built or not). For every particle on
at least 3 layers whose true segments the construction built do not join its hits
(:func:`~domainpar.tracks.losses.chain_joined`), the first of its segments along its path that was not built is
put down to the first of these that it fails:

* ``loops back``: its outer hit (later along the path) lies at a smaller radius: the particle is past its
  turning point, where edges pointing outwards from the beam line do not follow it;
* ``no layer pair``: its two layers are not among the traced layer pairs (:mod:`domainpar.data.layer_pairs`);
* ``jumps a layer``: its layers are not adjacent (the particle left no hit between), and the tighter cuts of
  layer-jumping edges (``skip_phi_slope_max``, ``skip_z0_max``, no hit bridging it) apply;
* ``phi slope``: ``|dphi| > phi_slope_max * |dr| + dphi_margin`` (the cut of adjacent layers; a layer-jumping
  edge's is tighter), split into ``prompt`` and ``displaced`` (production vertex more than 1 mm from the beam line);
* ``z0``: the (r, z) line through its hits meets the beam line further than ``z0_max`` from the origin;
* ``eta window``: two discs whose hits differ by more than ``deta_max`` in pseudorapidity;
* ``other``: a layer crossed between its hits.

The three geometric tests restate the cuts of :mod:`domainpar.data.graph` in their simplest form to name the one
that fails; they are a diagnosis, not the construction.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from domainpar.data.detector import layer_table
from domainpar.data.layer_pairs import layer_pairs
from domainpar.errors import DomainparError
from domainpar.inference.events import prepare_event
from domainpar.inference.pipeline import load_pipeline
from domainpar.inference.sources import list_sources
from domainpar.inference.spec import EvaluateConfig
from domainpar.tracks.losses import chain_joined, loss_bin_index, loss_bins

CAUSES = ("loops back", "no layer pair", "jumps a layer", "phi slope, prompt", "phi slope, displaced", "z0", "eta window",
          "other")  # fmt: skip


def graph_particles(graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(row (N,), pt (P,), layers (P,))``: every node's particle row (-1: noise), each particle's pT and layers."""
    pid = graph.particle_id
    ids = np.unique(pid[pid != 0])
    row = np.where(pid != 0, np.searchsorted(ids, pid), -1)
    real = row >= 0
    layers = np.bincount(np.unique(np.stack([row[real], graph.layer[real]]), axis=1)[0], minlength=ids.size)
    pt = np.zeros(ids.size)
    pt[row[real]] = graph.particle_pt[real]
    return row, pt, layers


def _causes(graph, segments, config) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Every particle whose built chain is broken: ``(its row (K,), its pT (K,), the cause of its first unbuilt
    segment)``, particles on >= 3 layers only."""
    row, pt, layers = graph_particles(graph)
    joined = chain_joined(row.size, segments.segments, segments.built, row, pt.size)
    # Segments come grouped by particle, in order along its path: the first unbuilt one of each particle.
    unbuilt = np.flatnonzero(~segments.built)
    owner, first = np.unique(row[segments.segments[0, unbuilt]], return_index=True)
    broken = ~joined[owner] & (layers[owner] >= 3)
    owner, first = owner[broken], unbuilt[first[broken]]
    pos = graph.pos.astype(np.float64)
    r, phi, z = np.hypot(pos[:, 0], pos[:, 1]), np.arctan2(pos[:, 1], pos[:, 0]), pos[:, 2]
    pairs = {tuple(p) for p in layer_pairs(config.layer_pair_config(max_skip=1 if config.skip_missing else 0)).tolist()}
    adjacent = {tuple(p) for p in layer_pairs(config.layer_pair_config(max_skip=0)).tolist()}
    barrel = layer_table()["barrel"].to_numpy(bool)
    eta = np.arcsinh(z / np.maximum(r, 1e-9))
    vertex = graph.particle_vertex if graph.particle_vertex is not None else np.zeros((row.size, 3))
    causes = []
    for i, j in segments.segments[:, first].T:
        dr = r[j] - r[i]
        dphi = abs((phi[j] - phi[i] + np.pi) % (2 * np.pi) - np.pi)
        z0 = z[i] - r[i] * (z[j] - z[i]) / dr if abs(dr) > 1e-6 else np.inf
        if dr < -1.0:
            causes.append("loops back")
        elif (graph.layer[i], graph.layer[j]) not in pairs and (graph.layer[j], graph.layer[i]) not in pairs:
            causes.append("no layer pair")
        elif (graph.layer[i], graph.layer[j]) not in adjacent and (graph.layer[j], graph.layer[i]) not in adjacent:
            causes.append("jumps a layer")
        elif dphi > config.phi_slope_max * abs(dr) + config.dphi_margin:
            causes.append("phi slope, " + ("displaced" if np.hypot(*vertex[i, :2]) > 1.0 else "prompt"))
        elif abs(z0) > config.z0_max:
            causes.append("z0")
        elif not barrel[graph.layer[i]] and not barrel[graph.layer[j]] and abs(eta[j] - eta[i]) > config.deta_max:
            causes.append("eta window")
        else:
            causes.append("other")
    return owner, pt[owner], causes


def study(config: EvaluateConfig) -> dict:
    """Per pT bin of :func:`~domainpar.tracks.losses.loss_bins`: particles on >= 3 layers, those whose chain the
    construction breaks, and the cause of each (the module docstring)."""
    pipeline = load_pipeline(config)
    prune = pipeline.graphs.prune()
    edges, names = loss_bins(config.pt_min)

    particles = np.zeros(len(names), dtype=np.int64)
    causes = [Counter() for _ in names]
    for source in list_sources(config.data, truth=True):
        event = prepare_event(source, pipeline.graphs, prune, truth=True, segments=True)
        _, pt, layers = graph_particles(event.graph)
        where = loss_bin_index(pt[layers >= 3], edges)
        particles += np.bincount(where[where >= 0], minlength=len(names))
        _, pt, cause = _causes(event.graph, event.segments, pipeline.graphs.graph_config)
        for b, c in zip(loss_bin_index(pt, edges), cause):
            if b >= 0:
                causes[b][c] += 1
    return {"bins": names, "particles": particles.tolist(), "broken": [sum(c.values()) for c in causes],
            "causes": {name: [c[name] for c in causes] for name in CAUSES}}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tools.graph_losses", description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, type=Path)
    parser.add_argument("--filter", type=Path, default=None, help="the checkpoint's edge filter (when it records one)")
    parser.add_argument("--data", required=True, type=Path, help="raw TrackML events with truth")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        config = EvaluateConfig(checkpoint=args.checkpoint, edge_filter=args.filter, data=args.data, progress=False)
        result = study(config)
    except DomainparError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("| pT (GeV) | particles | chain broken by the graph | " + " | ".join(CAUSES) + " |")
    print("|" + "---|" * (3 + len(CAUSES)))
    for b, name in enumerate(result["bins"]):
        n, broken = result["particles"][b], result["broken"][b]
        share = [f"{result['causes'][c][b] / broken:.2f}" if broken else "-" for c in CAUSES]
        print(f"| {name} | {n} | {broken / n if n else 0:.3f} | " + " | ".join(share) + " |")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
