"""Hadronic interactions in the material: where particles end, and the secondaries they make there.

A particle crossing a material surface (:mod:`domainpar.sim.material`: the
detector's layers, the beam pipe, the pixel support tube and the pixel
barrel's end plates) interacts there with probability
1 − exp(−scale · thickness / |cos incidence|). It ends at the first surface it
interacts in: it keeps its hit on that layer and leaves none beyond, as in the
real files. At the vertex 1 + Poisson(m − 1) secondaries (m: ``secondary_multiplicity``)
start, protons and pions of log-normal momentum, in directions spread almost
isotropically around the interacting particle's; they are followed, and
interact, in turn, for ``max_generations`` generations. Only secondaries above
``pt_min`` are made (a softer one is drawn again), as the challenge's files
list only those.
"""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import pandas as pd

from domainpar.errors import DomainparError
from domainpar.sim.config import SimulationConfig
from domainpar.sim.geometry import DetectorGeometry
from domainpar.sim.material import material_surfaces
from domainpar.sim.particles import GENERATION_SHIFT, MASSES, PARTICLE_SHIFT
from domainpar.sim.propagation import Crossings, helix_at, layer_crossings, propagate

#: A crossing closer than this to its particle's production vertex (transverse arc length, mm) is the surface the
#: particle was made on, which it leaves rather than crosses.
VERTEX_CLEARANCE_MM = 0.5
#: Smallest |cos incidence| in the path length through a surface (a grazing crossing sees at most 20 thicknesses).
_MIN_COS_INCIDENCE = 0.05
#: Draws of a secondary's momentum and direction before one that is too soft to be listed is given up.
_MAX_DRAWS = 50


def transport(
    rng: np.random.Generator, particles: pd.DataFrame, config: SimulationConfig, geometry: DetectorGeometry
) -> tuple[pd.DataFrame, Crossings]:
    """The particles' crossings of the layers, ended by their interactions, and the secondaries of those.

    Args:
        rng: random stream.
        particles: the collisions' particles (:func:`~domainpar.sim.particles.generate_particles`).
        config: physics, material scale and the secondaries' model.
        geometry: the detector.

    Returns:
        ``(particles, crossings)``: the collisions' particles followed by every generation of secondaries (internal
        columns as in :func:`~domainpar.sim.particles.generate_particles`), and every layer crossing, grouped by
        particle (``part``: row in that table) in order along each track, on the layers' surfaces.
    """
    surfaces = material_surfaces()
    passive = surfaces[surfaces["passive"].to_numpy()].reset_index(drop=True)
    layer_lambda = surfaces.loc[~surfaces["passive"].to_numpy(), "interaction_lengths"].to_numpy(np.float64)
    tables, pieces = [particles], []
    current, offset, next_number = particles, 0, 1
    for generation in range(config.max_generations + 1):
        crossings = propagate(rng, current, config, geometry.layers)
        crossings = crossings.take(crossings.s > VERTEX_CLEARANCE_MM)
        crossings, vertices = _ends(rng, current, crossings, config, passive, layer_lambda)
        pieces.append(replace(crossings, part=crossings.part + offset))
        if generation == config.max_generations or not len(vertices[0]):
            break
        secondaries = _secondaries(rng, current, *vertices, config, generation + 1, next_number)
        next_number += len(secondaries)
        offset += len(current)
        tables.append(secondaries)
        current = secondaries
    return pd.concat(tables, ignore_index=True), _concatenated(pieces)


def _concatenated(pieces: list[Crossings]) -> Crossings:
    return Crossings(**{f.name: np.concatenate([getattr(c, f.name) for c in pieces]) for f in fields(Crossings) if f.name != "module_row"})


def _ends(
    rng: np.random.Generator,
    particles: pd.DataFrame,
    crossings: Crossings,
    config: SimulationConfig,
    passive: pd.DataFrame,
    layer_lambda: np.ndarray,
) -> tuple[Crossings, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Where each particle ends before leaving the tracker: at its first hadronic interaction, or, below
    ``hit_pt_min``, at the first material surface it reaches (the soft particles' cut); and its crossings up to there.

    Returns:
        The crossings that remain (up to and including the surface where the particle ends: a layer keeps its
        hit), and the interactions: ``(part, position, direction)``, (V,) particle rows, (V, 3) vertices in mm and
        (V, 3) unit directions of the interacting particles there.
    """
    p_part, p_index, p_s = layer_crossings(particles, config, passive)
    keep = p_s > VERTEX_CLEARANCE_MM
    p_part, p_row, p_s = p_part[keep], -p_index[keep] - 1, p_s[keep]
    p_position, p_direction, _ = helix_at(particles, p_part, p_s, config)

    # Every candidate surface: the layers crossed (their crossings' points), then the passive surfaces.
    part = np.concatenate([crossings.part, p_part])
    s = np.concatenate([crossings.s, p_s])
    position = np.concatenate([crossings.position, p_position])
    direction = np.concatenate([crossings.direction, p_direction])
    barrel = np.concatenate([crossings.barrel, passive["barrel"].to_numpy(bool)[p_row]])
    thickness = np.concatenate([layer_lambda[crossings.layer], passive["interaction_lengths"].to_numpy(np.float64)[p_row]])
    radial = position[:, :2] / np.maximum(np.hypot(position[:, 0], position[:, 1]), 1e-9)[:, None]
    cos = np.where(barrel, np.abs(np.sum(direction[:, :2] * radial, axis=1)), np.abs(direction[:, 2]))
    probability = -np.expm1(-config.interaction_scale * thickness / np.maximum(cos, _MIN_COS_INCIDENCE))
    soft = np.hypot(particles["px"].to_numpy(), particles["py"].to_numpy()) < config.hit_pt_min
    interacts = (rng.random(len(s)) < probability) & ~soft[part]

    end = np.full(len(particles), np.inf)
    np.minimum.at(end, part[interacts | soft[part]], s[interacts | soft[part]])
    chosen = np.flatnonzero(interacts & (s == end[part]))
    chosen = chosen[np.unique(part[chosen], return_index=True)[1]]
    remaining = crossings.take(crossings.s <= end[crossings.part])
    return remaining, (part[chosen], position[chosen], direction[chosen])


def _secondaries(
    rng: np.random.Generator,
    parents: pd.DataFrame,
    vertex_part: np.ndarray,
    position: np.ndarray,
    direction: np.ndarray,
    config: SimulationConfig,
    generation: int,
    first_number: int,
) -> pd.DataFrame:
    """The secondaries of the interactions, above ``pt_min``, as particles-table rows.

    Args:
        parents: the interacting particles' table.
        vertex_part: (V,) row of every interaction's particle.
        position, direction: (V, 3) the interactions' vertices (mm) and the interacting particles' directions.
        generation: the secondaries' generation (1 for those of the collisions' particles).
        first_number: number (bits 0-23 of the particle id) of the first secondary; the others follow.
    """
    count = 1 + rng.poisson(config.secondary_multiplicity - 1.0, len(vertex_part))
    which = np.repeat(np.arange(len(vertex_part)), count)
    num = which.size
    proton = rng.random(num) < config.secondary_proton_fraction
    charge = np.where(proton, 1, np.where(rng.random(num) < 0.5, 1, -1))
    mass = np.where(proton, MASSES[2212], MASSES[211])
    axis = direction[which]
    # A frame around each interacting particle's direction.
    helper = np.where((np.abs(axis[:, 2]) < 0.9)[:, None], np.array([0.0, 0.0, 1.0]), np.array([1.0, 0.0, 0.0]))
    u1 = np.cross(axis, helper)
    u1 /= np.linalg.norm(u1, axis=1, keepdims=True)
    u2 = np.cross(axis, u1)
    momentum = np.zeros((num, 3))
    todo = np.arange(num)
    for _ in range(_MAX_DRAWS):
        p = config.secondary_p_median * np.exp(config.secondary_p_sigma * rng.normal(size=todo.size))
        cos = _forward_cosines(rng, todo.size, config.secondary_forward)
        azimuth = rng.uniform(-np.pi, np.pi, todo.size)
        sin = np.sqrt(np.maximum(1.0 - cos**2, 0.0))
        unit = cos[:, None] * axis[todo] + (sin * np.cos(azimuth))[:, None] * u1[todo] + (sin * np.sin(azimuth))[:, None] * u2[todo]
        drawn = p[:, None] * unit
        listed = np.hypot(drawn[:, 0], drawn[:, 1]) >= config.pt_min
        momentum[todo[listed]] = drawn[listed]
        todo = todo[~listed]
        if not todo.size:
            break
    # (A secondary still unlisted after every draw, of an interaction along the beam, is not made.)
    made = np.ones(num, dtype=bool)
    made[todo] = False
    which, charge, mass, momentum, proton = which[made], charge[made], mass[made], momentum[made], proton[made]
    number = first_number + np.arange(which.size, dtype=np.int64)
    if which.size and number[-1] >= 1 << GENERATION_SHIFT:
        raise DomainparError(f"SimulationConfig: {int(number[-1])} secondaries exceed TrackML's particle ids (16,777,215)")
    ancestor = (parents["particle_id"].to_numpy(np.int64)[vertex_part[which]] >> PARTICLE_SHIFT) << PARTICLE_SHIFT
    return pd.DataFrame(
        {
            "particle_id": ancestor | (np.int64(generation) << GENERATION_SHIFT) | number,
            "particle_type": (np.where(proton, 2212, 211) * charge).astype(np.int32),
            "vx": position[which, 0], "vy": position[which, 1], "vz": position[which, 2],
            "px": momentum[:, 0], "py": momentum[:, 1], "pz": momentum[:, 2],
            "q": charge.astype(np.int32),
            "mass": mass,
            "displaced": np.ones(which.size, dtype=bool),
            "generation": np.full(which.size, generation, dtype=np.int64),
        }
    )  # fmt: skip


def _forward_cosines(rng: np.random.Generator, size: int, bias: float) -> np.ndarray:
    """Cosines drawn from dN/dcos ∝ 1 + bias · cos on [-1, 1] (inverse CDF)."""
    u = rng.random(size)
    if abs(bias) < 1e-9:
        return 2.0 * u - 1.0
    # CDF: ((c + 1) + bias (c² − 1) / 2) / 2 = u.
    return (-1.0 + np.sqrt(np.maximum(1.0 - 2.0 * bias * (1.0 - bias / 2.0 - 2.0 * u), 0.0))) / bias


__all__ = ["VERTEX_CLEARANCE_MM", "transport"]
