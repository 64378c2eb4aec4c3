"""The pixel barrel's clusters against the crossing slope: a real labelled event beside the simulator's cluster model.

For every signal hit of the pixel barrel (volume 8) of a real event with truth, the particle's direction at the hit
(the helix in 2 T through its production vertex: ``../shared``'s pixel truth holds the momentum at the vertex, not
at the hit), its slope along the module's u axis (u over w components of the direction) and along v, and the
cluster it left (channels along u and v, cells). The simulator's cluster model re-digitises the same crossings
(their measured positions, their directions at the hit) with :func:`domainpar.sim.clusters.cluster_cells`, and the
mean cluster per bin of slope is printed for the real event, the current model and, with ``--fit``, the model a
grid search over the Lorentz drift, the collection depths and the spreads fits to the real curves.

``python -m bench.tools.cluster_drift --event ../shared/data/trackml/pixel/event000021000 --fit``
(docs/sim_vs_real.md, "The pixel barrel's Lorentz drift").
"""

from __future__ import annotations

import argparse
import itertools
from dataclasses import replace

import numpy as np
import pandas as pd

from domainpar.data.detector import load_detector
from domainpar.data.features import cluster_summary
from domainpar.sim.calibration import module_rows
from domainpar.sim.clusters import CLUSTER_MODELS, ClusterModel, cluster_cells

#: Slope bin edges along u (signed) and along v (absolute).
U_EDGES = (-0.5, -0.3, -0.15, 0.0, 0.15, 0.3)
V_EDGES = (0.5, 1.0, 2.0, 3.0)
#: Bins with fewer real hits are left out of the comparison and the fit.
MIN_HITS = 30


def barrel_crossings(prefix: str, min_pt: float = 0.1) -> dict:
    """The real event's pixel barrel signal hits: ids, module rows, positions, directions at the hit, cells."""
    hits = pd.read_csv(f"{prefix}-hits.csv.gz")
    truth = pd.read_csv(f"{prefix}-truth.csv.gz")
    particles = pd.read_csv(f"{prefix}-particles.csv.gz")
    h = hits[hits["volume_id"] == 8].merge(truth[["hit_id", "particle_id"]], on="hit_id")
    h = h[h["particle_id"] != 0].merge(particles[["particle_id", "vx", "vy", "px", "py", "pz", "q"]], on="particle_id")
    pt = np.hypot(h["px"], h["py"]).to_numpy()
    h, pt = h[pt > min_pt].reset_index(drop=True), pt[pt > min_pt]
    radius = pt / (0.3 * 2.0) * 1000.0  # mm, in the solenoid's 2 T
    chord = np.hypot((h["x"] - h["vx"]).to_numpy(), (h["y"] - h["vy"]).to_numpy())
    # The transverse direction turns by twice the chord's half angle, against the charge (TrackML's field along
    # +z: the chord of a hit leaves the vertex at phi0 - q asin(chord / 2R), to 0.0007 rad on event 21000).
    phi = np.arctan2(h["py"], h["px"]).to_numpy() - 2.0 * h["q"].to_numpy() * np.arcsin(np.clip(chord / (2 * radius), -1, 1))
    direction = np.stack([pt * np.cos(phi), pt * np.sin(phi), h["pz"].to_numpy()], axis=1)
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    modules = load_detector()
    rows = module_rows(h)
    axes = {a: modules[[f"rot_x{a}", f"rot_y{a}", f"rot_z{a}"]].to_numpy()[rows] for a in "uvw"}
    along_w = np.abs(np.einsum("ij,ij->i", direction, axes["w"]))
    ids = h["hit_id"].to_numpy()
    cells = pd.read_csv(f"{prefix}-cells.csv.gz")
    return {
        "ids": ids, "rows": rows, "position": h[["x", "y", "z"]].to_numpy(np.float64), "direction": direction,
        "modules": modules, "observed": cluster_summary(ids, cells),
        "u_bin": np.digitize(np.einsum("ij,ij->i", direction, axes["u"]) / along_w, U_EDGES),
        "v_bin": np.digitize(np.abs(np.einsum("ij,ij->i", direction, axes["v"])) / along_w, V_EDGES),
    }  # fmt: skip


def curves(crossings: dict, summary: np.ndarray) -> dict[str, np.ndarray]:
    """Mean channels along u and cells per u-slope bin, channels along v per v-slope bin (NaN: too few real hits)."""
    def mean(values: np.ndarray, bins: np.ndarray, count: int) -> np.ndarray:
        return np.array([values[bins == b].mean() if (bins == b).sum() >= MIN_HITS else np.nan for b in range(count)])

    return {
        "u": mean(summary[:, 2], crossings["u_bin"], len(U_EDGES) + 1),
        "cells": mean(summary[:, 0], crossings["u_bin"], len(U_EDGES) + 1),
        "v": mean(summary[:, 3], crossings["v_bin"], len(V_EDGES) + 1),
    }


def simulated(crossings: dict, model: ClusterModel) -> dict[str, np.ndarray]:
    """The curves of the same crossings digitised with ``model`` (common random numbers: seed 0)."""
    cells = cluster_cells(np.random.default_rng(0), crossings["ids"], crossings["rows"], crossings["position"],
                          crossings["direction"], crossings["modules"], {8: model})  # fmt: skip
    return curves(crossings, cluster_summary(crossings["ids"], cells))


def fit(crossings: dict, start: ClusterModel) -> ClusterModel:
    """The grid's model closest to the real curves: drift, depth and spread along u, then depth and spread along v."""
    real = curves(crossings, crossings["observed"])

    def best(candidates, key: str) -> ClusterModel:
        return min(candidates, key=lambda model: float(np.nansum((simulated(crossings, model)[key] - real[key]) ** 2)))

    along_u = best([replace(start, tan_lorentz=float(t), depth_u=d, spread_u=s) for t, d, s in itertools.product(
        np.arange(-0.4, 0.61, 0.05).round(2), (0.6, 0.75, 0.9, 1.05, 1.2), (0.0, 0.15, 0.3, 0.45))], "u")  # fmt: skip
    return best([replace(along_u, depth_v=d, spread_v=s) for d, s in itertools.product(
        (0.6, 0.7, 0.8, 0.9, 0.95, 1.0), (0.0, 0.15, 0.3, 0.47))], "v")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--event", required=True, help="A real event prefix with truth (the pixel event 21000).")
    parser.add_argument("--fit", action="store_true", help="Also fit the model to the real curves (~1 min).")
    options = parser.parse_args(argv)
    crossings = barrel_crossings(options.event)
    rows = [("real", curves(crossings, crossings["observed"])), ("model now", simulated(crossings, CLUSTER_MODELS[8]))]
    if options.fit:
        fitted = fit(crossings, CLUSTER_MODELS[8])
        rows.append(("fitted", simulated(crossings, fitted)))
        print(f"fitted: {fitted}")
    print(f"{len(crossings['ids']):,} pixel barrel signal hits (pT > 0.1 GeV)")
    print("| | channels along u, by slope along u | cells, by slope along u | channels along v, by \\|slope along v\\| |")
    print("|---|---|---|---|")
    for name, values in rows:
        print(f"| {name} | {' / '.join(f'{x:.2f}' for x in values['u'])} | {' / '.join(f'{x:.2f}' for x in values['cells'])} "
              f"| {' / '.join(f'{x:.2f}' for x in values['v'])} |")  # fmt: skip
    print(f"u-slope bins: below {U_EDGES[0]}, " + ", ".join(f"{a} to {b}" for a, b in zip(U_EDGES, U_EDGES[1:])) + f", above {U_EDGES[-1]}; "
          f"|v-slope| bins: below {V_EDGES[0]}, " + ", ".join(f"{a} to {b}" for a, b in zip(V_EDGES, V_EDGES[1:])) + f", above {V_EDGES[-1]}")  # fmt: skip


if __name__ == "__main__":
    main()
