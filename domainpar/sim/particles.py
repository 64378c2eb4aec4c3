"""The particles of the collisions: a pile-up of vertices on the beam line, their primaries, and K0S and Λ decays.

Particle ids follow TrackML's layout (event 21000's particles file): the
collision vertex in bits 52-63, the particle's number at that vertex in bits
36-51, and for secondaries of interactions in the material
(:mod:`domainpar.sim.interactions`) the generation in bits 24-35 and a number
in bits 0-23. Decay daughters are generation 0, as in the challenge's files:
only their displaced production vertex tells them from primaries.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from domainpar.errors import DomainparError
from domainpar.sim.config import SimulationConfig

#: Species of the beam-line primaries (PDG code without sign) and their shares in event 21000 (its few leptons
#: counted as pions).
SPECIES = ((211, 0.85), (321, 0.10), (2212, 0.05))
#: Masses of the species, GeV.
MASSES = {211: 0.13957, 321: 0.49368, 2212: 0.93827}
#: K0S and Λ: mass (GeV) and c·tau (mm).
K0S_MASS, K0S_CTAU_MM = 0.497611, 26.844
LAMBDA_MASS, LAMBDA_CTAU_MM = 1.115683, 78.9
#: Bit positions of TrackML's particle id.
VERTEX_SHIFT, PARTICLE_SHIFT, GENERATION_SHIFT = 52, 36, 24
#: Columns of the particles table that are not written to the particles file.
INTERNAL_COLUMNS = ("mass", "displaced", "generation")


def sample_tsallis_pt(rng: np.random.Generator, size: int, config: SimulationConfig) -> np.ndarray:
    """Inverse-CDF sampling of dN/dpT ∝ pT (1 + pT/(nT))^-n above pt_min."""
    n, t = config.pt_power, config.pt_temperature
    grid = np.geomspace(config.pt_min, max(200.0, 50 * config.pt_min), 20_000)
    density = grid * (1.0 + grid / (n * t)) ** (-n)
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (density[1:] + density[:-1]) * np.diff(grid))])
    cdf /= cdf[-1]
    return np.interp(rng.random(size), cdf, grid)


def event_size(rng: np.random.Generator, config: SimulationConfig) -> tuple[int, int]:
    """This event's collision particles and vertices: the configured ones, scaled by the occupancy mix."""
    factor = rng.uniform(1.0 - config.multiplicity_spread, 1.0 + config.multiplicity_spread) if config.multiplicity_spread else 1.0
    return int(round(config.num_particles * factor)), max(1, int(round(config.num_vertices * factor)))


def particle_generation(particle_id: np.ndarray) -> np.ndarray:
    """Generation of every particle from its TrackML id: 0 for the collisions' particles, 1 for the secondaries of
    their interactions in the material, 2 for those of the secondaries', ..."""
    return (np.asarray(particle_id, dtype=np.int64) >> GENERATION_SHIFT) & 0xFFF


def generate_particles(rng: np.random.Generator, config: SimulationConfig) -> pd.DataFrame:
    """The collisions' charged particles: momenta, charges, species and production vertices.

    Primaries follow the Tsallis spectrum flat in eta from the beam-line
    vertices; K0S and Λ (same spectrum and eta) fly from their vertex by an
    exponential decay length before decaying in two; of their daughters those
    above ``pt_min`` are listed, as in the challenge's files.

    Returns:
        One row per particle: particle_id (TrackML's layout), particle_type, vx, vy, vz, px, py, pz, q, and the
        internal columns mass (GeV), displaced (not from the beam line) and generation (0).

    Raises:
        DomainparError: more particles at one vertex than TrackML's particle id can number (65,535).
    """
    num, num_vertices = event_size(rng, config)
    num_k0s = int(round(config.k0s_fraction * num))
    num_lambda = int(round(config.lambda_fraction * num))
    num_primary = num - 2 * (num_k0s + num_lambda)

    vertex_xy = rng.normal(0.0, config.vertex_sigma_xy, (num_vertices, 2))
    vertex_z = rng.normal(0.0, config.vertex_sigma_z, num_vertices)
    share = rng.gamma(config.vertex_multiplicity_shape, 1.0, num_vertices)
    share /= share.sum()

    # Primaries.
    pt = sample_tsallis_pt(rng, num_primary, config)
    eta = rng.uniform(-config.eta_max, config.eta_max, num_primary)
    phi = rng.uniform(-np.pi, np.pi, num_primary)
    charge = np.where(rng.random(num_primary) < config.positive_fraction, 1, -1)
    codes = np.array([code for code, _ in SPECIES])
    shares = np.array([s for _, s in SPECIES])
    species = codes[rng.choice(len(SPECIES), num_primary, p=shares / shares.sum())]
    which = rng.choice(num_vertices, num_primary, p=share)
    momentum = np.stack([pt * np.cos(phi), pt * np.sin(phi), pt * np.sinh(eta)], axis=1)
    primaries = {
        "vertex": which,
        "position": np.column_stack([vertex_xy[which], vertex_z[which]]),
        "momentum": momentum,
        "code": species * charge,
        "q": charge,
        "mass": np.select([species == c for c in codes], [MASSES[int(c)] for c in codes]),
    }
    daughters = _decays(rng, config, num_k0s, num_lambda, num_vertices, share, vertex_xy, vertex_z)

    both = {key: np.concatenate([primaries[key], daughters[key]]) for key in primaries}
    listed = np.hypot(both["momentum"][:, 0], both["momentum"][:, 1]) >= config.pt_min
    listed[:num_primary] = True
    keep = np.flatnonzero(listed)
    displaced = keep >= num_primary
    columns = ("vertex", "position", "momentum", "code", "q", "mass")
    vertex, position, momentum, code, q, mass = (both[key][keep] for key in columns)
    # TrackML ids: the vertex (1-based) and the particle's number at it (1-based, in generation order).
    order = np.argsort(vertex, kind="stable")
    number = np.empty(len(vertex), dtype=np.int64)
    starts = np.searchsorted(vertex[order], vertex[order])
    number[order] = np.arange(len(vertex)) - starts + 1
    if len(number) and number.max() >= 1 << (VERTEX_SHIFT - PARTICLE_SHIFT):
        raise DomainparError(
            f"SimulationConfig: {int(number.max())} particles at one vertex exceed TrackML's particle ids (65,535): "
            "raise num_vertices"
        )
    particle_id = ((vertex.astype(np.int64) + 1) << VERTEX_SHIFT) | (number << PARTICLE_SHIFT)
    return pd.DataFrame(
        {
            "particle_id": particle_id,
            "particle_type": code.astype(np.int32),
            "vx": position[:, 0], "vy": position[:, 1], "vz": position[:, 2],
            "px": momentum[:, 0], "py": momentum[:, 1], "pz": momentum[:, 2],
            "q": q.astype(np.int32),
            "mass": mass,
            "displaced": displaced,
            "generation": np.zeros(len(vertex), dtype=np.int64),
        }
    )  # fmt: skip


def _decays(
    rng: np.random.Generator,
    config: SimulationConfig,
    num_k0s: int,
    num_lambda: int,
    num_vertices: int,
    share: np.ndarray,
    vertex_xy: np.ndarray,
    vertex_z: np.ndarray,
) -> dict[str, np.ndarray]:
    """The two daughters of every K0S → π+π− and Λ → pπ− (half of them the charge conjugate) decay, at their
    decay vertex: a flight of (p / m) · c·tau · Exp(1) from a beam-line vertex along the neutral parent's direction."""
    num = num_k0s + num_lambda
    kaon = np.arange(num) < num_k0s
    parent_mass = np.where(kaon, K0S_MASS, LAMBDA_MASS)
    ctau = np.where(kaon, K0S_CTAU_MM, LAMBDA_CTAU_MM)
    pt = sample_tsallis_pt(rng, num, config)
    eta = rng.uniform(-config.eta_max, config.eta_max, num)
    phi = rng.uniform(-np.pi, np.pi, num)
    parent = np.stack([pt * np.cos(phi), pt * np.sin(phi), pt * np.sinh(eta)], axis=1)
    p = np.linalg.norm(parent, axis=1)
    which = rng.choice(num_vertices, num, p=share)
    flight = (p / parent_mass * ctau * rng.exponential(1.0, num))[:, None] * parent / np.maximum(p, 1e-12)[:, None]
    position = np.column_stack([vertex_xy[which], vertex_z[which]]) + flight
    # Daughters: first the positive one (π+, or the proton of a Λ), then the negative one; antiparticles swap.
    anti = ~kaon & (rng.random(num) < 0.5)
    mass_1 = np.where(kaon, MASSES[211], MASSES[2212])
    mass_2 = np.full(num, MASSES[211])
    first, second = _two_body(rng, parent, parent_mass, mass_1, mass_2)
    code_1 = np.where(kaon, 211, np.where(anti, -2212, 2212))
    code_2 = np.where(kaon, -211, np.where(anti, 211, -211))
    return {
        "vertex": np.concatenate([which, which]),
        "position": np.concatenate([position, position]),
        "momentum": np.concatenate([first, second]),
        "code": np.concatenate([code_1, code_2]),
        "q": np.sign(np.concatenate([code_1, code_2])),
        "mass": np.concatenate([mass_1, mass_2]),
    }


def _two_body(
    rng: np.random.Generator, parent: np.ndarray, parent_mass: np.ndarray, mass_1: np.ndarray, mass_2: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Lab momenta (K, 3) of the two daughters of decays isotropic in the parent's rest frame.

    Args:
        parent: (K, 3) parent momenta, GeV.
        parent_mass, mass_1, mass_2: (K,) masses, GeV.
    """
    num = len(parent)
    p_star = np.sqrt(
        np.maximum((parent_mass**2 - (mass_1 + mass_2) ** 2) * (parent_mass**2 - (mass_1 - mass_2) ** 2), 0.0)
    ) / (2.0 * parent_mass)
    cos = rng.uniform(-1.0, 1.0, num)
    azimuth = rng.uniform(-np.pi, np.pi, num)
    sin = np.sqrt(1.0 - cos**2)
    rest = p_star[:, None] * np.stack([sin * np.cos(azimuth), sin * np.sin(azimuth), cos], axis=1)
    energy = np.sqrt(np.sum(parent**2, axis=1) + parent_mass**2)
    beta = parent / energy[:, None]
    gamma = energy / parent_mass
    beta_sq = np.maximum(np.sum(beta**2, axis=1), 1e-300)

    def boost(momentum: np.ndarray, mass: np.ndarray) -> np.ndarray:
        e_star = np.sqrt(np.sum(momentum**2, axis=1) + mass**2)
        along = np.sum(momentum * beta, axis=1)
        return momentum + (((gamma - 1.0) * along / beta_sq + gamma * e_star)[:, None]) * beta

    return boost(rest, mass_1), boost(-rest, mass_2)


__all__ = [
    "GENERATION_SHIFT",
    "INTERNAL_COLUMNS",
    "K0S_CTAU_MM",
    "K0S_MASS",
    "LAMBDA_CTAU_MM",
    "LAMBDA_MASS",
    "MASSES",
    "PARTICLE_SHIFT",
    "SPECIES",
    "VERTEX_SHIFT",
    "event_size",
    "generate_particles",
    "particle_generation",
    "sample_tsallis_pt",
]
