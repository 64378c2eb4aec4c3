"""Propagation: particles along helices in the solenoid field, through the layers, with multiple scattering.

A particle of charge q moves on a circle of radius R[mm] = 1000 · pT[GeV] /
(0.3 · B[T]) (positive particles turn clockwise seen from +z). Every crossing
of a layer's cylinder (barrel) or disc (endcap) before the particle leaves
the tracker, or after ``max_turns`` turns, is a candidate hit. Highland
scattering angles are drawn at every crossing; the displacement they cause
downstream grows linearly with the path length (small angles, straight lever
arm), and the displaced point is put back on the layer's surface.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np
import pandas as pd

from domainpar.sim.config import SimulationConfig

#: Radiation length of silicon in mm.
SILICON_X0_MM = 93.7
#: Charged-pion mass in GeV (beta in Highland's formula of a particle whose table gives no mass).
PION_MASS_GEV = 0.13957


@dataclass(frozen=True)
class Crossings:
    """Crossings of detector layers by the particles' tracks, grouped by particle, in order along each track."""

    part: np.ndarray
    """(C,) row of the crossing's particle in the particles table."""
    layer: np.ndarray
    """(C,) layer index (row of the layer table)."""
    s: np.ndarray
    """(C,) transverse arc length from the particle's vertex, mm."""
    position: np.ndarray
    """(C, 3) crossing point, mm."""
    direction: np.ndarray
    """(C, 3) unit direction of the track there."""
    p: np.ndarray
    """(C,) momentum of the particle, GeV."""
    barrel: np.ndarray
    """(C,) whether the layer is a barrel cylinder (else an endcap disc)."""
    module_row: np.ndarray | None = None
    """(C,) row of the crossed module in the detector table (None until :func:`~domainpar.sim.sensors.land_on_modules`)."""

    def __len__(self) -> int:
        return len(self.part)

    def take(self, index: np.ndarray) -> Crossings:
        """The crossings at ``index`` (integer indices or a boolean mask)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return Crossings(**{name: None if value is None else value[index] for name, value in values.items()})


def layer_crossings(particles: pd.DataFrame, config: SimulationConfig, layers: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All crossings of layer surfaces along each helix before the particle stops.

    Returns:
        (particle_index, layer_index, s): three (C,) arrays, s the transverse arc
        length from the vertex in mm.
    """
    x0, y0, z0 = (particles[c].to_numpy(np.float64) for c in ("vx", "vy", "vz"))
    px, py, pz = (particles[c].to_numpy(np.float64) for c in ("px", "py", "pz"))
    h = particles["q"].to_numpy(np.float64)
    pt = np.hypot(px, py)
    phi0 = np.arctan2(py, px)
    radius = config.helix_radius_mm(pt)
    cot_theta = pz / pt
    xc = x0 + h * radius * np.sin(phi0)
    yc = y0 - h * radius * np.cos(phi0)
    centre_dist = np.hypot(xc, yc)
    centre_angle = np.arctan2(yc, xc)
    beta0 = phi0 + h * np.pi / 2  # angle of the particle seen from the circle centre

    def arc_lengths_to_radius(rho: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The two arc lengths in [0, 2 pi R) where the circle crosses radius rho."""
        cos_arg = (rho**2 - centre_dist**2 - radius**2) / (2.0 * centre_dist * radius)
        ok = np.abs(cos_arg) <= 1.0
        delta = np.arccos(np.clip(cos_arg, -1.0, 1.0))
        s_a = radius * np.mod(h * (beta0 - (centre_angle + delta)), 2 * np.pi)
        s_b = radius * np.mod(h * (beta0 - (centre_angle - delta)), 2 * np.pi)
        return ok, np.minimum(s_a, s_b), np.maximum(s_a, s_b)

    # Where the particle leaves the tracker: first radial exit or |z| exit, capped by max_turns.
    exits_radially, s_radial, _ = arc_lengths_to_radius(config.tracker_radius)
    starts_inside = np.hypot(x0, y0) < config.tracker_radius
    s_radial = np.where(exits_radially & starts_inside, s_radial, np.inf)
    with np.errstate(divide="ignore"):
        s_z = np.where(cot_theta != 0, (np.sign(cot_theta) * config.tracker_half_length - z0) / cot_theta, np.inf)
    s_stop = np.minimum(np.minimum(s_radial, np.maximum(s_z, 0.0)), config.max_turns * 2 * np.pi * radius)

    part_idx, layer_idx, arc = [], [], []
    for row in layers.itertuples(index=False):
        if row.barrel:
            ok, s_out, s_in = arc_lengths_to_radius(row.r)
            candidates = [s_out, s_in]
            for turn in range(1, int(np.ceil(config.max_turns))):
                candidates += [s_out + turn * 2 * np.pi * radius, s_in + turn * 2 * np.pi * radius]
            for s in candidates:
                z = z0 + s * cot_theta
                keep = ok & (s > 1e-6) & (s < s_stop) & (z >= row.z_min) & (z <= row.z_max)
                index = np.flatnonzero(keep)
                part_idx.append(index)
                layer_idx.append(np.full(index.size, row.layer_index))
                arc.append(s[index])
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                s = (row.z - z0) / cot_theta
            valid = np.isfinite(s) & (s > 1e-6) & (s < s_stop)
            s_safe = np.where(valid, s, 0.0)
            phi = phi0 - h * s_safe / radius
            x = xc - h * radius * np.sin(phi)
            y = yc + h * radius * np.cos(phi)
            r = np.hypot(x, y)
            keep = valid & (r >= row.r_min) & (r <= row.r_max)
            index = np.flatnonzero(keep)
            part_idx.append(index)
            layer_idx.append(np.full(index.size, row.layer_index))
            arc.append(s[index])
    return np.concatenate(part_idx), np.concatenate(layer_idx), np.concatenate(arc)


def segment_exclusive_cumsum(values: np.ndarray, starts: np.ndarray, segment_of: np.ndarray) -> np.ndarray:
    """Cumulative sum over the previous rows of the same segment (rows grouped contiguously)."""
    total = np.cumsum(values, axis=0)
    exclusive = total - values
    return exclusive - exclusive[starts][segment_of]


def helix_at(
    particles: pd.DataFrame, part: np.ndarray, s: np.ndarray, config: SimulationConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points of the particles' ideal helices at transverse arc lengths ``s`` from their vertices.

    Args:
        particles: the particles table (vx, vy, vz, px, py, pz, q).
        part: (K,) particle rows.
        s: (K,) transverse arc lengths, mm.
        config: the field.

    Returns:
        ``(position, direction, phi)``: (K, 3) points in mm, (K, 3) unit directions, (K,) azimuth of the direction.
    """
    x0, y0, z0 = (particles[c].to_numpy(np.float64)[part] for c in ("vx", "vy", "vz"))
    px, py, pz = (particles[c].to_numpy(np.float64)[part] for c in ("px", "py", "pz"))
    h = particles["q"].to_numpy(np.float64)[part]
    pt = np.hypot(px, py)
    p = np.hypot(pt, pz)
    radius = config.helix_radius_mm(pt)
    phi0 = np.arctan2(py, px)
    phi = phi0 - h * s / radius
    xc = x0 + h * radius * np.sin(phi0)
    yc = y0 - h * radius * np.cos(phi0)
    position = np.stack([xc - h * radius * np.sin(phi), yc + h * radius * np.cos(phi), z0 + s * pz / pt], axis=1)
    direction = np.stack([np.cos(phi) * pt / p, np.sin(phi) * pt / p, pz / p], axis=1)
    return position, direction, phi


def propagate(
    rng: np.random.Generator, particles: pd.DataFrame, config: SimulationConfig, layers: pd.DataFrame
) -> Crossings:
    """Every layer crossing of the particles' helices (up to where they leave the tracker or turn
    ``max_turns`` times), after multiple scattering. Where a particle ends earlier (an interaction, or the soft
    particles' cut) is for :func:`~domainpar.sim.interactions.transport` to say.

    Args:
        rng: random stream (scattering angles).
        particles: the event's particles (:func:`~domainpar.sim.particles.generate_particles`); a ``mass`` column
            (GeV) sets every particle's velocity in the scattering angle (else the pion's).
        config: field, material, tracker volume.
        layers: the layer table.

    Returns:
        The crossings, on their layers' surfaces (no module assigned yet).
    """
    part, layer, s = layer_crossings(particles, config, layers)
    order = np.lexsort((s, part))
    part, layer, s = part[order], layer[order], s[order]

    position, direction, phi = helix_at(particles, part, s, config)
    pt = np.hypot(particles["px"].to_numpy(np.float64), particles["py"].to_numpy(np.float64))[part]
    p = np.hypot(pt, particles["pz"].to_numpy(np.float64)[part])
    barrel = layers["barrel"].to_numpy()[layer]
    ideal = Crossings(part=part, layer=layer, s=s, position=position, direction=direction, p=p, barrel=barrel)
    if config.multiple_scattering and len(s):
        mass = particles["mass"].to_numpy(np.float64)[part] if "mass" in particles.columns else np.full(len(s), PION_MASS_GEV)
        return _scatter(rng, ideal, phi, pt, mass, config, layers)
    position[~barrel, 2] = layers["z"].to_numpy()[layer][~barrel]
    return ideal


def _scatter(
    rng: np.random.Generator,
    ideal: Crossings,
    phi: np.ndarray,
    pt: np.ndarray,
    mass: np.ndarray,
    config: SimulationConfig,
    layers: pd.DataFrame,
) -> Crossings:
    """The crossings after Highland scattering at every earlier crossing of their track, on the layers' surfaces.

    Args:
        rng: random stream (two angles per crossing).
        ideal: crossings of the ideal helices.
        phi: (C,) azimuth of the ideal direction at every crossing.
        pt: (C,) transverse momentum of the crossing's particle, GeV.
        mass: (C,) mass of the crossing's particle, GeV (its velocity: slow protons scatter most).
        config: ``support_x0`` is used.
        layers: the layer table.
    """
    part, layer, s, p, barrel = ideal.part, ideal.layer, ideal.s, ideal.p, ideal.barrel
    position, direction = ideal.position, ideal.direction
    normal = np.where(
        barrel[:, None],
        np.stack([position[:, 0], position[:, 1], np.zeros(len(s))], axis=1) / np.hypot(position[:, 0], position[:, 1])[:, None],
        np.array([0.0, 0.0, 1.0]),
    )
    cos_incidence = np.maximum(np.abs(np.einsum("ij,ij->i", direction, normal)), 0.05)
    starts = np.flatnonzero(np.r_[True, part[1:] != part[:-1]])
    segment_of = np.cumsum(np.r_[True, part[1:] != part[:-1]]) - 1
    x_over_x0 = (layers["thickness"].to_numpy()[layer] / SILICON_X0_MM + config.support_x0) / cos_incidence
    beta = p / np.hypot(p, mass)
    theta0 = 0.0136 / (beta * p) * np.sqrt(x_over_x0) * (1.0 + 0.038 * np.log(x_over_x0))
    # Two unit vectors orthogonal to the direction: azimuthal, and the one completing the frame.
    u1 = np.stack([-np.sin(phi), np.cos(phi), np.zeros(len(s))], axis=1)
    u2 = np.cross(direction, u1)
    kick = (rng.normal(size=len(s)) * theta0)[:, None] * u1 + (rng.normal(size=len(s)) * theta0)[:, None] * u2
    path = s * p / pt
    # Displacement at hit j: sum over earlier crossings i of kick_i * (L_j - L_i).
    sum_kick = segment_exclusive_cumsum(kick, starts, segment_of)
    sum_kick_path = segment_exclusive_cumsum(kick * path[:, None], starts, segment_of)
    position = position + path[:, None] * sum_kick - sum_kick_path
    direction = direction + sum_kick
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    # Back onto the layer surface (the lever-arm displacement is transverse to the track).
    layer_r = layers["r"].to_numpy()[layer]
    layer_z = layers["z"].to_numpy()[layer]
    r_now = np.hypot(position[:, 0], position[:, 1])
    position[barrel, :2] *= (layer_r[barrel] / r_now[barrel])[:, None]
    position[~barrel, 2] = layer_z[~barrel]
    return replace(ideal, position=position, direction=direction)


__all__ = [
    "PION_MASS_GEV",
    "SILICON_X0_MM",
    "Crossings",
    "helix_at",
    "layer_crossings",
    "propagate",
    "segment_exclusive_cumsum",
]
