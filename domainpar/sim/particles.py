"""The particles of an event: a pile-up of collision vertices plus displaced secondaries."""

from __future__ import annotations

import numpy as np
import pandas as pd

from domainpar.sim.config import SimulationConfig

#: Particle species drawn for ``particle_type`` (PDG code without sign) and their shares in event 21000.
SPECIES = ((211, 0.79), (321, 0.07), (2212, 0.14))


def sample_tsallis_pt(rng: np.random.Generator, size: int, config: SimulationConfig) -> np.ndarray:
    """Inverse-CDF sampling of dN/dpT ∝ pT (1 + pT/(nT))^-n above pt_min."""
    n, t = config.pt_power, config.pt_temperature
    grid = np.geomspace(config.pt_min, max(200.0, 50 * config.pt_min), 20_000)
    density = grid * (1.0 + grid / (n * t)) ** (-n)
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (density[1:] + density[:-1]) * np.diff(grid))])
    cdf /= cdf[-1]
    return np.interp(rng.random(size), cdf, grid)


def generate_particles(rng: np.random.Generator, config: SimulationConfig) -> pd.DataFrame:
    """The event's charged particles: momenta, charges, species and production vertices.

    Primaries follow the Tsallis spectrum flat in eta, shared at random among
    ``num_vertices`` pile-up vertices; a ``secondary_fraction`` of them is
    produced at displaced vertices with a softer spectrum.

    Returns:
        One row per particle: particle_id (1..N), particle_type, vx, vy, vz, px, py, pz, q
        and ``secondary`` (bool, not written to the particles file).
    """
    num = config.num_particles
    num_secondary = int(round(config.secondary_fraction * num))
    secondary = np.zeros(num, dtype=bool)
    secondary[rng.permutation(num)[:num_secondary]] = True

    pt = sample_tsallis_pt(rng, num, config)
    pt[secondary] = config.pt_min + rng.exponential(config.secondary_pt_mean, num_secondary)
    eta = rng.uniform(-config.eta_max, config.eta_max, num)
    # Secondaries come mostly from the central barrel's material: a share is drawn within |eta| < 1.
    central = secondary & (rng.random(num) < config.secondary_central_fraction)
    eta[central] = rng.uniform(-1.0, 1.0, int(central.sum()))
    phi = rng.uniform(-np.pi, np.pi, num)

    vertex_xy = rng.normal(0.0, config.vertex_sigma_xy, (config.num_vertices, 2))
    vertex_z = rng.normal(0.0, config.vertex_sigma_z, config.num_vertices)
    which = rng.integers(0, config.num_vertices, num)
    vx, vy, vz = vertex_xy[which, 0], vertex_xy[which, 1], vertex_z[which]

    # Secondaries: produced at a log-uniform flight distance along a parent's direction,
    # which is their own direction smeared by a few tenths of a radian.
    flight_r = np.exp(rng.uniform(np.log(config.secondary_r_min), np.log(config.secondary_r_max), num_secondary))
    parent_phi = phi[secondary] + rng.normal(0.0, 0.3, num_secondary)
    parent_eta = eta[secondary] + rng.normal(0.0, 0.3, num_secondary)
    vx[secondary] += flight_r * np.cos(parent_phi)
    vy[secondary] += flight_r * np.sin(parent_phi)
    vz[secondary] += flight_r * np.sinh(parent_eta)

    charge = np.where(rng.random(num) < config.positive_fraction, 1, -1)
    species_codes = np.array([code for code, _ in SPECIES])
    species_shares = np.array([share for _, share in SPECIES])
    species = species_codes[rng.choice(len(SPECIES), num, p=species_shares / species_shares.sum())]
    return pd.DataFrame(
        {
            "particle_id": np.arange(1, num + 1, dtype=np.int64),
            "particle_type": (species * charge).astype(np.int32),
            "vx": vx, "vy": vy, "vz": vz,
            "px": pt * np.cos(phi), "py": pt * np.sin(phi), "pz": pt * np.sinh(eta),
            "q": charge.astype(np.int32),
            "secondary": secondary,
        }
    )  # fmt: skip


__all__ = ["SPECIES", "generate_particles", "sample_tsallis_pt"]
