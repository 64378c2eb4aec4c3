"""Occupancy of an event, counted the same way on real and simulated events: what makes an event busy.

:func:`event_counts` reads one event's tables (hits, particles, and where the
event has them truth and cells) and counts, in additive form so that several
events add up (:func:`add_counts`) and :func:`occupancy_summary` turns the sums
into figures:

* hits and noise hits per volume and per layer (noise per volume needs truth,
  the event's total noise does not: hits minus the particles' ``nhits``);
* particles with hits in the event's region, their pT, η and production-vertex
  radius (displaced: more than :data:`BEAM_LINE_RADIUS_MM` from the beam
  line), hits per particle; with truth also the particles per layer;
* decays and interactions, from the particles file alone (TrackML's
  particle_id carries the generation): displaced particles of generation 0
  (decay daughters), particles of generation >= 1 (secondaries of
  interactions in the material) and their vertices per material group
  (:func:`~domainpar.sim.material.material_group`);
* curlers and stops: among central primaries (|η| < 1, vertex on the beam
  line) of 0.3–3 GeV, the share with fewer hits than a straight track leaves
  (:data:`STOPPED_BELOW`: a track that ends early, as one does that interacts
  in the material); hits of low-pT (0.15–0.3 GeV) central primaries; with
  truth, the share of particles with more hits than layers (overlaps,
  re-crossings) and of loopers (two hits on one layer more than
  :data:`LOOP_DISTANCE_MM` apart);
* clusters (needs cells): per volume, cells per hit, summed charge and the
  channels the cluster spans along u and v; with truth also those of the
  noise hits alone;
* graph edges per hit after a hit-graph builder's cuts (``graph``).

Everything but the truth columns is what a real event without truth has, so
the real full event is counted like a simulated one.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from domainpar.arrays import unique
from domainpar.data.detector import layer_index_of, layer_table
from domainpar.data.features import cluster_summary
from domainpar.errors import DomainparError
from domainpar.sim.material import material_group
from domainpar.sim.particles import particle_generation

#: Volumes of the pixel detector.
PIXEL_VOLUMES = (7, 8, 9)
#: A production vertex farther than this from the beam line (mm) is displaced (a decay or a material interaction).
BEAM_LINE_RADIUS_MM = 1.0
#: Two hits of one particle on one layer farther apart than this (mm) are a re-crossing (a looper), not a module overlap.
LOOP_DISTANCE_MM = 20.0
#: A central primary of 0.3-3 GeV with fewer hits than this (over the whole detector) ended early; with the pixel
#: volumes only, fewer than :data:`STOPPED_BELOW_PIXEL`.
STOPPED_BELOW = 8
STOPPED_BELOW_PIXEL = 4
#: Histogram bins: particle pT (GeV), pseudorapidity, production-vertex radius (mm), hits per particle.
PT_BINS = np.geomspace(0.1, 100.0, 31)
ETA_BINS = np.linspace(-4.0, 4.0, 33)
VERTEX_R_BINS = np.concatenate([[0.0], np.geomspace(1.0, 1200.0, 31)])
NHITS_BINS = np.arange(0, 31)
#: Momentum bins of the secondaries of interactions, GeV.
SECONDARY_P_BINS = np.geomspace(0.1, 10.0, 25)
#: Volumes whose clusters are summarised.
VOLUMES = (7, 8, 9, 12, 13, 14, 16, 17, 18)


def _histogram(values: np.ndarray, bins: np.ndarray) -> list[int]:
    return np.histogram(np.clip(values, bins[0], bins[-1] - 1e-9 * abs(bins[-1])), bins=bins)[0].astype(int).tolist()


def event_counts(
    hits: pd.DataFrame,
    particles: pd.DataFrame,
    truth: pd.DataFrame | None = None,
    cells: pd.DataFrame | None = None,
    graph=None,
) -> dict:
    """The additive occupancy counts of one event (or of its region: the hits given).

    Args:
        hits: TrackML hits (hit_id, x, y, z, volume_id, layer_id, module_id); the region counted is these hits.
        particles: TrackML particles (particle_id, vx, vy, vz, px, py, pz, nhits). Without truth, ``nhits``
            counts every particle's hits in ``hits``.
        truth: TrackML truth (hit_id, particle_id), or None: then hits per particle come from ``nhits`` and the
            figures that need to know which hit is whose are left out.
        cells: TrackML cells, or None (no cluster figures).
        graph: a :class:`~domainpar.data.graph.GraphConfig` whose cuts count the edges per hit, or None.

    Returns:
        A JSON-safe dict of counts and fixed-bin histograms (:func:`add_counts` adds two of them).

    Raises:
        DomainparError: a missing column or a hit on no layer of the TrackML detector.
    """
    for name, frame, columns in (
        ("hits", hits, ("hit_id", "x", "y", "z", "volume_id", "layer_id")),
        ("particles", particles, ("particle_id", "vx", "vy", "vz", "px", "py", "pz", "nhits")),
        ("truth", truth, ("hit_id", "particle_id")),
    ):
        if frame is not None and (missing := [c for c in columns if c not in frame.columns]):
            raise DomainparError(f"{name} must have columns {missing} (got {list(frame.columns)})")
    volume = hits["volume_id"].to_numpy()
    layer_id = hits["layer_id"].to_numpy()
    layer = layer_index_of(volume, layer_id)
    if (layer < 0).any():
        raise DomainparError("hits: every (volume_id, layer_id) must be a layer of the TrackML detector")
    table = layer_table()
    layer_keys = [f"{int(v)}:{int(l)}" for v, l in zip(table["volume_id"], table["layer_id"])]
    counts: dict = {"events": 1, "hits": int(len(hits)), "truth": truth is not None}
    counts["hits_per_volume"] = {str(v): int(n) for v, n in zip(*np.unique(volume, return_counts=True))}
    per_layer = np.bincount(layer, minlength=len(table))
    counts["hits_per_layer"] = {layer_keys[i]: int(n) for i, n in enumerate(per_layer) if n}

    # Hits per particle in the region, and which hit is whose where truth says so.
    particle_ids = particles["particle_id"].to_numpy(np.int64)
    if truth is not None:
        indexed = truth.drop_duplicates("hit_id").set_index("hit_id")["particle_id"]
        hit_particle = indexed.reindex(hits["hit_id"].to_numpy()).to_numpy()
        if np.isnan(hit_particle.astype(np.float64)).any():
            raise DomainparError("truth must have a row for every hit")
        hit_particle = hit_particle.astype(np.int64)
        noise = hit_particle == 0
        known, count = np.unique(hit_particle[~noise], return_counts=True)
        nhits = pd.Series(count, index=known).reindex(particle_ids, fill_value=0).to_numpy()
        counts["noise"] = int(noise.sum())
        counts["noise_per_volume"] = {str(v): int(noise[volume == v].sum()) for v in unique(volume)}
        particles_per_layer = pd.DataFrame({"p": hit_particle[~noise], "l": layer[~noise]}).drop_duplicates()
        counts["particles_per_layer"] = {layer_keys[i]: int(n) for i, n in particles_per_layer["l"].value_counts().items()}
    else:
        nhits = particles["nhits"].to_numpy(np.int64)
        counts["noise"] = int(len(hits) - nhits.sum())

    pt = np.hypot(particles["px"].to_numpy(np.float64), particles["py"].to_numpy(np.float64))
    eta = np.arcsinh(particles["pz"].to_numpy(np.float64) / np.maximum(pt, 1e-12))
    vertex_r = np.hypot(particles["vx"].to_numpy(np.float64), particles["vy"].to_numpy(np.float64))
    with_hits = nhits > 0
    displaced = vertex_r > BEAM_LINE_RADIUS_MM
    counts["particles_listed"] = int(len(particles))
    counts["particles_with_hits"] = int(with_hits.sum())
    counts["displaced_with_hits"] = int((with_hits & displaced).sum())
    counts["hits_of_displaced"] = int(nhits[displaced].sum())
    counts["particle_hits"] = int(nhits.sum())
    counts["pt_above_1_with_hits"] = int((with_hits & (pt > 1.0)).sum())
    generation = particle_generation(particle_ids)
    counts["decay_daughters"] = int((displaced & (generation == 0)).sum())
    counts["secondaries"] = int((generation > 0).sum())
    counts["secondaries_with_hits"] = int((with_hits & (generation > 0)).sum())
    species = np.abs(particles["particle_type"].to_numpy()) if "particle_type" in particles.columns else np.zeros(len(particles))
    counts["decay_protons"] = int((displaced & (generation == 0) & (species == 2212)).sum())
    counts["secondary_protons"] = int(((generation > 0) & (species == 2212)).sum())
    momentum = np.hypot(pt, particles["pz"].to_numpy(np.float64))
    counts["secondary_p_histogram"] = _histogram(momentum[generation > 0], SECONDARY_P_BINS)
    secondary_vertices = particles.loc[generation > 0, ["vx", "vy", "vz"]]
    per_vertex = secondary_vertices.value_counts().to_numpy()
    counts["secondaries_per_vertex_histogram"] = np.bincount(np.minimum(per_vertex, 10), minlength=11).astype(int).tolist()
    vertices = secondary_vertices.drop_duplicates().to_numpy(np.float64)
    groups, group_counts = np.unique(material_group(vertices), return_counts=True)
    counts["interaction_vertices"] = {g if g else "elsewhere": int(n) for g, n in zip(groups, group_counts)}
    counts["pt_histogram"] = _histogram(pt[with_hits], PT_BINS)
    counts["eta_histogram"] = _histogram(eta[with_hits], ETA_BINS)
    counts["vertex_r_histogram"] = _histogram(vertex_r[with_hits], VERTEX_R_BINS)
    counts["nhits_histogram"] = _histogram(nhits[with_hits], NHITS_BINS)

    # Stops and curlers: central beam-line primaries.
    pixel_only = set(unique(volume).tolist()) <= set(PIXEL_VOLUMES)
    central = with_hits & ~displaced & (np.abs(eta) < 1.0)
    straight = central & (pt > 0.3) & (pt < 3.0)
    stopped_below = STOPPED_BELOW_PIXEL if pixel_only else STOPPED_BELOW
    counts["central_primaries"] = int(straight.sum())
    counts["central_primaries_stopped"] = int((straight & (nhits < stopped_below)).sum())
    low = central & (pt >= 0.15) & (pt < 0.3)
    counts["low_pt_central"] = int(low.sum())
    counts["low_pt_central_hits"] = int(nhits[low].sum())
    if truth is not None:
        counts.update(_curlers(hits, hit_particle, layer))

    if cells is not None:
        counts["clusters"] = _cluster_counts(hits, cells, volume)
        if truth is not None:
            counts["noise_clusters"] = _cluster_counts(hits[noise], cells, volume[noise])
    if graph is not None:
        counts["edges"] = _edge_count(hits, graph)
    return counts


def _curlers(hits: pd.DataFrame, hit_particle: np.ndarray, layer: np.ndarray) -> dict:
    """Particles with more hits than layers, and loopers (two hits on a layer more than LOOP_DISTANCE_MM apart)."""
    signal = hit_particle != 0
    frame = pd.DataFrame(
        {"p": hit_particle[signal], "l": layer[signal], "x": hits["x"].to_numpy()[signal], "y": hits["y"].to_numpy()[signal]}
    )
    per_particle = frame.groupby("p").agg(hits=("l", "size"), layers=("l", "nunique"))
    span = frame.groupby(["p", "l"]).agg(x0=("x", "min"), x1=("x", "max"), y0=("y", "min"), y1=("y", "max"))
    spread = np.hypot(span["x1"] - span["x0"], span["y1"] - span["y0"])
    loopers = spread[spread > LOOP_DISTANCE_MM].index.get_level_values(0).unique()
    return {
        "more_hits_than_layers": int((per_particle["hits"] > per_particle["layers"]).sum()),
        "particle_layers": int(len(span)),
        "double_layers": int((frame.groupby(["p", "l"]).size() > 1).sum()),
        "loopers": int(len(loopers)),
    }


def _cluster_counts(hits: pd.DataFrame, cells: pd.DataFrame, volume: np.ndarray) -> dict:
    """Per volume: hits, and the sums of cells, charge, channels along u and along v over its hits."""
    summary = cluster_summary(hits["hit_id"].to_numpy(), cells)
    result = {}
    for v in unique(volume):
        chosen = volume == v
        sums = summary[chosen].sum(axis=0)
        result[str(int(v))] = {"hits": int(chosen.sum())} | {
            name: float(value) for name, value in zip(("cells", "charge", "channels_u", "channels_v"), sums)
        }
    return result


def _edge_count(hits: pd.DataFrame, graph) -> int:
    """Edges of the event's hit graph under ``graph``'s cuts (features are irrelevant to the count: the cheapest)."""
    from domainpar.data.graph import build_graph

    cuts = replace(graph, node_features=("r", "phi", "z"), edge_features=("dr", "dphi", "dz"), cell_features=False, min_pt=0.0)
    built, _ = build_graph(hits, config=cuts)
    return int(built.edge_index.shape[1])


def add_counts(first: dict, second: dict) -> dict:
    """Two events' counts added: numbers add, histograms add bin by bin, dicts key by key."""
    if first["truth"] != second["truth"]:
        raise DomainparError("occupancy counts with and without truth cannot be added")
    return _add(first, second)


def _add(a, b):
    if isinstance(a, bool):
        return a
    if isinstance(a, dict):
        return {key: _add(a[key], b[key]) if key in a and key in b else a.get(key, b.get(key)) for key in {**a, **b}}
    if isinstance(a, list):
        return [x + y for x, y in zip(a, b)]
    return a + b


def occupancy_summary(counts: dict) -> dict:
    """The figures of (summed) counts: per-event means and fractions, keyed by name (see the module docstring)."""
    events = counts["events"]
    per_event = lambda value: value / events  # noqa: E731
    summary = {
        "events": events,
        "hits": per_event(counts["hits"]),
        "noise_fraction": _ratio(counts["noise"], counts["hits"]),
        "particles_with_hits": per_event(counts["particles_with_hits"]),
        "hits_per_particle": _ratio(counts["particle_hits"], counts["particles_with_hits"]),
        "displaced_share": _ratio(counts["displaced_with_hits"], counts["particles_with_hits"]),
        "hits_of_displaced_share": _ratio(counts["hits_of_displaced"], counts["particle_hits"]),
        "pt_above_1_share": _ratio(counts["pt_above_1_with_hits"], counts["particles_with_hits"]),
        "central_stopped_share": _ratio(counts["central_primaries_stopped"], counts["central_primaries"]),
        "low_pt_central_hits": _ratio(counts["low_pt_central_hits"], counts["low_pt_central"]),
        "hits_per_volume": {v: per_event(n) for v, n in counts["hits_per_volume"].items()},
        "hits_per_layer": {k: per_event(n) for k, n in counts["hits_per_layer"].items()},
        "pt_median": _histogram_quantile(counts["pt_histogram"], PT_BINS, 0.5, log=True),
        "particles_listed": per_event(counts["particles_listed"]),
        "decay_daughters": per_event(counts["decay_daughters"]),
        "secondaries": per_event(counts["secondaries"]),
        "secondaries_with_hits_share": _ratio(counts["secondaries_with_hits"], counts["secondaries"]),
        "interaction_vertices": per_event(sum(counts["interaction_vertices"].values())),
        "interaction_vertices_per_group": {g: per_event(n) for g, n in counts["interaction_vertices"].items()},
        "secondaries_per_vertex": _ratio(
            sum(k * n for k, n in enumerate(counts["secondaries_per_vertex_histogram"])),
            sum(counts["secondaries_per_vertex_histogram"]),
        ),
        "secondary_p_median": _histogram_quantile(counts["secondary_p_histogram"], SECONDARY_P_BINS, 0.5, log=True),
        "secondary_proton_share": _ratio(counts["secondary_protons"], counts["secondaries"]),
        "decay_proton_share": _ratio(counts["decay_protons"], counts["decay_daughters"]),
    }
    if counts["truth"]:
        summary["noise_per_volume"] = {
            v: _ratio(n, counts["hits_per_volume"][v]) for v, n in counts["noise_per_volume"].items()
        }
        summary["particles_per_layer"] = {k: per_event(n) for k, n in counts["particles_per_layer"].items()}
        summary["more_hits_than_layers_share"] = _ratio(counts["more_hits_than_layers"], counts["particles_with_hits"])
        summary["double_layer_share"] = _ratio(counts["double_layers"], counts["particle_layers"])
        summary["looper_share"] = _ratio(counts["loopers"], counts["particles_with_hits"])
    for key in ("clusters", "noise_clusters"):
        if key in counts:
            summary[key] = {
                v: {name: _ratio(c[name], c["hits"]) for name in ("cells", "charge", "channels_u", "channels_v")}
                for v, c in counts[key].items()
            }
    if "edges" in counts:
        summary["edges"] = per_event(counts["edges"])
        summary["edges_per_hit"] = _ratio(counts["edges"], counts["hits"])
    return summary


def _ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator, None where there is nothing to divide by (a figure the events do not have)."""
    return numerator / denominator if denominator else None


def _histogram_quantile(histogram: list[int], bins: np.ndarray, q: float, log: bool = False) -> float | None:
    """The q-quantile of a histogram, interpolated inside its bin (in log space for log bins); None if it is empty."""
    cumulative = np.concatenate([[0.0], np.cumsum(histogram)])
    if cumulative[-1] == 0:
        return None
    edges = np.log(bins) if log else bins
    return float(np.exp(np.interp(q * cumulative[-1], cumulative, edges)) if log else np.interp(q * cumulative[-1], cumulative, edges))


def region(frames: dict[str, pd.DataFrame], volumes: tuple[int, ...]) -> dict[str, pd.DataFrame]:
    """An event's tables restricted to the hits of ``volumes`` (cells and truth follow the hits; the particles
    keep those with a hit there, ``nhits`` recounted), as the real pixel event's files are cut from the full event.

    Args:
        frames: ``{"hits", "particles"[, "truth", "cells"]}``; without truth the particles cannot follow and the
            region's noise is unknown, so truth is required.
    """
    if "truth" not in frames:
        raise DomainparError("a region of an event needs its truth (which hit is whose)")
    hits = frames["hits"][frames["hits"]["volume_id"].isin(volumes)].reset_index(drop=True)
    kept = hits["hit_id"].to_numpy()
    truth = frames["truth"][frames["truth"]["hit_id"].isin(kept)].reset_index(drop=True)
    count = truth.loc[truth["particle_id"] != 0, "particle_id"].value_counts()
    particles = frames["particles"][frames["particles"]["particle_id"].isin(count.index)].copy()
    particles["nhits"] = count.reindex(particles["particle_id"].to_numpy()).to_numpy().astype(np.int32)
    result = {"hits": hits, "truth": truth, "particles": particles.reset_index(drop=True)}
    if "cells" in frames:
        result["cells"] = frames["cells"][frames["cells"]["hit_id"].isin(kept)].reset_index(drop=True)
    return result


__all__ = [
    "BEAM_LINE_RADIUS_MM",
    "ETA_BINS",
    "LOOP_DISTANCE_MM",
    "NHITS_BINS",
    "PIXEL_VOLUMES",
    "PT_BINS",
    "SECONDARY_P_BINS",
    "STOPPED_BELOW",
    "STOPPED_BELOW_PIXEL",
    "VERTEX_R_BINS",
    "VOLUMES",
    "add_counts",
    "event_counts",
    "occupancy_summary",
    "region",
]
