"""Fit the material's nuclear interaction thicknesses (domainpar/sim/material.py) to the real event 21000.

    python -m bench.tools.fit_interactions [--data DIR] [--events 4] [--iterations 4]

The real event's particles file names every secondary of an interaction in the
material (TrackML's particle_id carries its generation) and its production
vertex, so the interactions on every material surface can be counted without
truth: its vertices of generation >= 1, each put on its surface
(:func:`domainpar.sim.material.material_group`). The simulation (particles and
their transport only: the same physics without the detector response, ~10x
faster) is counted the same way, scaled to the real event's number of
collision particles, and every group's thickness is multiplied by real /
simulated, a few times over. Mirror-image groups (the two pixel endcaps, the
two short-strip and the two long-strip endcaps) are fitted together; every
barrel layer on its own. It prints
the fitted SUPPORT_LAMBDA and PASSIVE_SURFACES to put in material.py, and the
counts before and after.
"""

from __future__ import annotations

import argparse
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from bench.common.workloads import DATA_ENV, FULL_EVENT, trackml_dir
from domainpar.data.trackml import load_event
from domainpar.sim import material
from domainpar.sim.config import SimulationConfig
from domainpar.sim.geometry import detector_geometry
from domainpar.sim.interactions import transport
from domainpar.sim.particles import generate_particles, particle_generation

#: Groups fitted together (mirror images of each other).
TIED = (("7", "9"), ("12", "14"), ("16", "18"))


def interaction_vertices(particles: pd.DataFrame) -> pd.Series:
    """Interaction vertices per material group (vertices of the particles of generation >= 1; "" off every surface)."""
    secondary = particle_generation(particles["particle_id"].to_numpy()) > 0
    vertices = particles.loc[secondary, ["vx", "vy", "vz"]].drop_duplicates().to_numpy(np.float64)
    return pd.Series(material.material_group(vertices)).value_counts()


@contextmanager
def thicknesses(support: dict, passive: dict):
    """The simulator run with these material thicknesses (material.py's tables swapped in, then restored)."""
    saved = dict(material.SUPPORT_LAMBDA), dict(material.PASSIVE_SURFACES)
    material.SUPPORT_LAMBDA.update(support)
    material.PASSIVE_SURFACES.update(passive)
    material.material_surfaces.cache_clear()
    try:
        yield
    finally:
        material.SUPPORT_LAMBDA.update(saved[0])
        material.PASSIVE_SURFACES.update(saved[1])
        material.material_surfaces.cache_clear()


def simulated_vertices(config: SimulationConfig, events: int) -> tuple[pd.Series, float]:
    """Mean interaction vertices per group over ``events`` simulated events, and their mean collision particles listed."""
    geometry = detector_geometry()
    counts, listed = [], []
    for event_id in range(1, events + 1):
        rng = np.random.default_rng([0, event_id])
        particles, _ = transport(rng, generate_particles(rng, config), config, geometry)
        counts.append(interaction_vertices(particles))
        listed.append(int((particles["generation"] == 0).sum()))
    return pd.concat(counts, axis=1).fillna(0.0).mean(axis=1), float(np.mean(listed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help=f"TrackML data directory (default: ${DATA_ENV} or <repo>/../shared/data/trackml)")
    parser.add_argument("--events", type=int, default=4, help="simulated events per iteration")
    parser.add_argument("--iterations", type=int, default=4)
    args = parser.parse_args()

    data = Path(args.data) if args.data else trackml_dir()
    (real_particles,) = load_event(data / FULL_EVENT, parts=("particles",))
    real = interaction_vertices(real_particles)
    real_listed = int((particle_generation(real_particles["particle_id"].to_numpy()) == 0).sum())
    config = SimulationConfig()
    layers = material.material_surfaces()
    detector = layers[~layers["passive"].to_numpy()]
    silicon = detector.groupby("name")["interaction_lengths"].mean() - pd.Series(material.SUPPORT_LAMBDA)
    support = dict(material.SUPPORT_LAMBDA)
    passive = dict(material.PASSIVE_SURFACES)
    groups = list(TIED) + [(name,) for name in list(support) + list(passive) if not any(name in tie for tie in TIED)]
    first = None
    for iteration in range(args.iterations + 1):
        with thicknesses(support, passive):
            simulated, listed = simulated_vertices(config, args.events)
        simulated *= real_listed / listed
        table = pd.DataFrame({"real": real, "simulated": simulated}).fillna(0.0)
        first = table if first is None else first
        print(f"iteration {iteration}: real {table['real'].sum():.0f}, simulated {table['simulated'].sum():.0f} vertices")
        if iteration == args.iterations:
            break
        for group in groups:
            ratio = table.loc[list(group), "real"].sum() / max(table.loc[list(group), "simulated"].sum(), 1e-9)
            for name in group:
                if name in passive:
                    barrel, where, low, high, thickness = passive[name]
                    passive[name] = (barrel, where, low, high, round(float(thickness * ratio), 5))
                else:
                    total = support[name] + silicon[name]
                    support[name] = round(float(max(total * ratio - silicon[name], 0.0)), 5)
    print(pd.concat({"before": first, "after": table}, axis=1).round(1).to_string())
    print("SUPPORT_LAMBDA =", support)
    print("PASSIVE_SURFACES =", passive)


if __name__ == "__main__":
    main()
