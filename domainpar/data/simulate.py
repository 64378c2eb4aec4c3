"""A fast TrackML-format event simulator on the real TrackML detector.

Charged particles from a pile-up of collision vertices (plus displaced
secondaries) follow helices in a uniform solenoid field along +z. Every crossing
of a detector layer within the tracker volume becomes a hit, after multiple
scattering, hit inefficiency and measurement smearing; noise hits are added at
the real event's rate. The output is the challenge's four tables (hits, cells,
particles, truth) with its columns and dtypes, so everything downstream reads
simulated and real events alike.

Approximations (documented, and held against the real event 21000 by
``tests/data/test_simulate.py``):

* Geometry: barrel layers are cylinders at the mean module radius, endcap layers
  discs at the mean module z, with extents from :func:`~domainpar.data.detector.layer_table`.
  A hit carries the real volume_id/layer_id and the module_id of the nearest
  module centre in its layer; gaps between modules are ignored (the hit
  efficiency accounts for them).
* Field: uniform B along +z. A particle of charge q moves on a circle of radius
  R[mm] = 1000 · pT[GeV] / (0.3 · B[T]); ``F = q v × B`` makes positive particles
  turn clockwise seen from +z (the azimuth of the direction decreases along the
  track), as in the real TrackML truth.
* Material: each layer is silicon of the module thickness plus a support
  fraction of a radiation length; Highland scattering angles are applied at
  every crossing and the displacement they cause downstream grows linearly with
  the path length (small-angle, straight lever arm). No energy loss, no
  interactions: a particle stops when it leaves the tracker volume or after
  ``max_turns`` turns of its helix. The default of half a turn stops loopers at
  their apex, as the real files do; ``max_turns >= 1`` lets them re-cross barrel
  layers on the way in.
* Module planes: each crossing of a layer's cylinder or disc is moved along the
  track onto the plane of the nearest module (``module_planes``), so barrel
  hits spread in radius and disc hits in z by the modules' tilt and stagger,
  as in the real files (the true segments' Δr per layer pair then match the
  real event's; ``tests/data/test_calibration.py``).
* Module overlaps: a crossing in a ring whose neighbouring modules overlap also
  leaves a hit in the neighbour, with the ring's geometric overlap fraction as
  probability (on the neighbour's own plane).
* Measurement: the measured position is displaced from the true crossing along
  the module's local u (azimuthal) and v (z on barrels, radius on endcaps) axes
  by residuals drawn from the real event 1's per-volume residual distributions
  (``resolution="measured"``, default: pixel-barrel hits carry the real
  uncorrected Lorentz shift of 0.18 pitch along u with a 4 µm core, binary
  strips are flat over a pitch along v), or by a Gaussian of sigma
  pitch / sqrt(12) (``resolution="pitch"``).
* Hit efficiency: 98.3 % per crossing (fitted to the real event 1, see
  :attr:`SimulationConfig.hit_efficiency`).
* Secondaries: a fraction of particles starts at displaced vertices along a
  line of flight from the beam line, with a softer pT spectrum.
* Truth weights: the challenge's rule (particle weight 0.2 below pT 0.5 GeV
  rising linearly to 1 at 3 GeV, split over the particle's hits by order along
  the track, first and last hits weighted most; zero for noise, for particles
  with fewer than 4 hits and for secondaries), normalised to sum to 1 per event.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.spatial import cKDTree

from domainpar.data.detector import BARREL_VOLUMES, layer_table, load_detector
from domainpar.data.trackml import write_event
from domainpar.errors import DomainparError
from domainpar.progress import progress as progress_display

#: Radiation length of silicon in mm.
SILICON_X0_MM = 93.7
#: Charged-pion mass in GeV (every particle is given this mass for beta in Highland's formula).
PION_MASS_GEV = 0.13957
#: Hit-order weights of the TrackML score for a 9-hit track; other lengths interpolate it.
ORDER_WEIGHT_REFERENCE = np.array([10.0, 8.0, 6.0, 5.0, 3.0, 3.0, 3.0, 5.0, 6.0])
#: Share of noise hits per volume, measured on the real labelled event 1 (829 noise hits).
NOISE_VOLUME_FRACTIONS = {7: 0.0446, 8: 0.0989, 9: 0.0398, 12: 0.0651, 13: 0.2967, 14: 0.0591, 16: 0.0290, 17: 0.3209, 18: 0.0458}
#: Per volume: distance in mm between the two hits of a crossing through overlapping modules
#: (radial stagger on barrels, disc faces on endcaps); median of the real labelled event 1.
OVERLAP_OFFSET_MM = {7: 4.5, 8: 1.9, 9: 4.0, 12: 3.0, 13: 5.8, 14: 3.0, 16: 5.0, 17: 5.4, 18: 5.0}
#: Particle species drawn for ``particle_type`` (PDG code without sign) and their shares in event 21000.
SPECIES = ((211, 0.79), (321, 0.07), (2212, 0.14))
#: Module centres tried per crossing when finding the modules it passes through.
_MODULE_CANDIDATES = 4
#: Longest move (mm) of a crossing from its layer's cylinder or disc onto its module's plane, and the
#: largest sagitta (mm) of the helix over that move for the straight step to stand for it (beyond it the
#: straight step is no better than the layer surface, whose error is the modules' few-mm stagger).
_MAX_PLANE_STEP_MM = 100.0
_MAX_TANGENT_SAGITTA_MM = 1.0
#: Measurement models of :attr:`SimulationConfig.resolution`.
RESOLUTION_MODELS = ("measured", "pitch")


@dataclass(frozen=True)
class SimulationConfig:
    """Physics and detector-response parameters of :func:`simulate_event`.

    Defaults reproduce the real full event 21000 (see ``docs/figures/sim_vs_real.png``).
    """

    num_particles: int = 10_000
    """Charged particles per event (primaries plus secondaries)."""
    secondary_fraction: float = 0.29
    """Fraction of particles produced at displaced vertices (0.29 of the particles in event 21000 start at r > 1 mm)."""
    pt_min: float = 0.1
    """Lowest transverse momentum generated, GeV (the TrackML particles file starts at 0.1 GeV)."""
    pt_temperature: float = 0.162
    """Tsallis T of the primary spectrum dN/dpT ∝ pT (1 + pT/(n T))^-n, GeV (fitted to event 21000)."""
    pt_power: float = 7.17
    """Tsallis n of the primary spectrum (fitted to event 21000)."""
    hit_pt_min: float = 0.15
    """Particles below this pT leave no hits, as in the challenge's files (event 21000: 99% of primaries and 67% of secondaries under 0.15 GeV have none)."""
    secondary_pt_mean: float = 0.18
    """Mean of the exponential pT excess over ``pt_min`` of secondaries, GeV."""
    eta_max: float = 4.0
    """Particles are generated flat in pseudorapidity for |eta| < eta_max."""
    num_vertices: int = 200
    """Pile-up collision vertices per event; primaries are shared among them at random."""
    vertex_sigma_z: float = 55.0
    """Gaussian spread of the collision vertices along the beam, mm."""
    vertex_sigma_xy: float = 0.015
    """Gaussian transverse spread of the collision vertices, mm."""
    secondary_central_fraction: float = 0.6
    """Share of secondaries drawn within |eta| < 1 (the rest flat to eta_max): 69% of event 21000's secondaries are central."""
    secondary_r_min: float = 20.0
    """Displaced vertices are log-uniform in transverse distance between r_min ..., mm."""
    secondary_r_max: float = 1000.0
    """... and r_max, mm, along the line of flight of a parent from the beam line."""
    positive_fraction: float = 0.55
    """Fraction of positively charged particles (0.55 in event 21000)."""
    field_tesla: float = 2.0
    """Solenoid field along +z, tesla."""
    multiple_scattering: bool = True
    """Apply Highland multiple scattering at every layer crossing."""
    support_x0: float = 0.01
    """Material per layer beyond the silicon, in radiation lengths (supports, services, cooling)."""
    smear: bool = True
    """Displace measured positions from the true crossing (truth keeps the unsmeared crossing); see ``resolution``."""
    resolution: str = "measured"
    """Measurement model: "measured" draws the residual along the module's u and v axes from the real event 1's
    per-volume residual distribution (``resources/measurement_model.json``: its shape, bias and width); "pitch"
    is a Gaussian of sigma pitch / sqrt(12)."""
    layer_conditions: tuple[tuple[int, int, float, float], ...] = ()
    """Per-layer overrides ``(volume_id, layer_id, hit_efficiency, resolution_scale)``: a dead, inefficient or
    misaligned layer (the resolution scale multiplies that layer's measurement errors)."""
    hit_efficiency: float = 0.983
    """Probability that a layer crossing produces a hit (effective: includes gaps between modules). Fitted to
    real event 1 (:func:`domainpar.data.calibration.layer_response`: 15 missed of 1,277 crossings between hits,
    1.2 ± 0.3 %; the same estimator reads 0.70 × the crossing inefficiency on simulated events)."""
    noise_fraction: float = 0.142
    """Noise hits as a fraction of all hits (0.142 in event 21000: hits minus the particles' nhits)."""
    module_overlaps: bool = True
    """Add the second hit of crossings through overlapping modules (probability: the ring's geometric overlap fraction)."""
    cluster_variation: float = 0.0
    """Domain randomisation of the clusters: per event, every volume's cluster lengths (collection depths, spreads,
    Lorentz drift) and pixel threshold are scaled by factors drawn uniformly in [1 - v, 1 + v], so that training
    events span the cluster calibration's uncertainty (0: the calibrated model exactly)."""
    module_planes: bool = True
    """Put every hit on its module's plane (the detector's flat, tilted, staggered modules) rather than on the
    ideal cylinder or disc of its layer, so hit radii on barrels and z on discs spread as in the real events."""
    max_turns: float = 0.5
    """Helix turns followed (fractional allowed). 0.5 stops a looper at its apex, which matches the
    real files (event 21000: primaries of 0.15-0.3 GeV at |eta| < 1 have 9.3 hits on average; 0.5
    gives 9.5, following them back in gives 14). 1 or more lets loopers re-cross barrel layers
    on their way in (and cross them again on later turns)."""
    tracker_radius: float = 1100.0
    """Particles stop when they leave this radius, mm (calorimeter/solenoid)."""
    tracker_half_length: float = 3100.0
    """Particles stop when they leave |z| beyond this, mm."""

    def __post_init__(self) -> None:
        checks = {
            "num_particles": self.num_particles >= 0,
            "secondary_fraction": 0.0 <= self.secondary_fraction <= 1.0,
            "secondary_central_fraction": 0.0 <= self.secondary_central_fraction <= 1.0,
            "hit_pt_min": self.hit_pt_min >= 0,
            "pt_min": self.pt_min > 0,
            "pt_temperature": self.pt_temperature > 0,
            "pt_power": self.pt_power > 3,
            "secondary_pt_mean": self.secondary_pt_mean > 0,
            "eta_max": self.eta_max > 0,
            "num_vertices": self.num_vertices >= 1,
            "vertex_sigma_z": self.vertex_sigma_z >= 0,
            "vertex_sigma_xy": self.vertex_sigma_xy >= 0,
            "secondary_r_min": 0 < self.secondary_r_min < self.secondary_r_max,
            "positive_fraction": 0.0 <= self.positive_fraction <= 1.0,
            "field_tesla": self.field_tesla > 0,
            "support_x0": self.support_x0 >= 0,
            "hit_efficiency": 0.0 <= self.hit_efficiency <= 1.0,
            "resolution": self.resolution in RESOLUTION_MODELS,
            "cluster_variation": 0.0 <= self.cluster_variation < 1.0,
            "noise_fraction": 0.0 <= self.noise_fraction < 1.0,
            "max_turns": self.max_turns > 0,
            "tracker_radius": self.tracker_radius > 0,
            "tracker_half_length": self.tracker_half_length > 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise DomainparError(f"SimulationConfig.{name} is out of range (got {getattr(self, name)!r})")
        for entry in self.layer_conditions:
            if not (
                isinstance(entry, tuple) and len(entry) == 4 and 0.0 <= entry[2] <= 1.0 and entry[3] >= 0
            ):
                raise DomainparError(
                    "SimulationConfig.layer_conditions must hold (volume_id, layer_id, efficiency in [0, 1], "
                    f"resolution scale >= 0) tuples (got {entry!r})"
                )

    def helix_radius_mm(self, pt_gev: np.ndarray | float) -> np.ndarray | float:
        """Transverse radius of curvature in mm: R[m] = pT[GeV] / (0.3 B[T])."""
        return 1000.0 * np.asarray(pt_gev) / (0.3 * self.field_tesla)


@dataclass(frozen=True)
class _Geometry:
    """Layer surfaces and per-layer module lookup, built once per process."""

    layers: pd.DataFrame
    modules: pd.DataFrame
    module_rows: tuple  # per layer: row indices into ``modules``
    trees: tuple  # per layer: cKDTree of module centres
    overlap_probability: np.ndarray  # per module: geometric overlap fraction of its ring
    overlap_offset: np.ndarray  # per module: distance to the overlapping neighbour, mm


@lru_cache(maxsize=1)
def _geometry() -> _Geometry:
    layers = layer_table()
    modules = load_detector()
    keys = modules["volume_id"].to_numpy(np.int64) * 1000 + modules["layer_id"].to_numpy(np.int64)
    centres = modules[["cx", "cy", "cz"]].to_numpy(np.float64)
    rows, trees = [], []
    for volume_id, layer_id in zip(layers["volume_id"], layers["layer_id"]):
        layer_rows = np.flatnonzero(keys == volume_id * 1000 + layer_id)
        rows.append(layer_rows)
        trees.append(cKDTree(centres[layer_rows]))
    probability, offset = _module_overlaps(modules)
    return _Geometry(
        layers=layers,
        modules=modules,
        module_rows=tuple(rows),
        trees=tuple(trees),
        overlap_probability=probability,
        overlap_offset=offset,
    )


def _module_overlaps(modules: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per module: the fraction of its ring covered twice, and the distance between the two layers of modules.

    A ring is the modules of one layer at one radius (endcaps) or one z position
    (barrels). Its azimuthal overlap fraction is total module width over the
    circumference minus one; barrel layers add the overlap along z.
    """
    r = np.hypot(modules["cx"].to_numpy(), modules["cy"].to_numpy())
    barrel = modules["volume_id"].isin(BARREL_VOLUMES).to_numpy()
    width = modules["module_minhu"].to_numpy() + modules["module_maxhu"].to_numpy()
    ring_key = np.where(barrel, np.round(modules["cz"].to_numpy()), np.round(r))
    frame = modules[["volume_id", "layer_id"]].assign(ring=ring_key, r=r, width=width, hv=modules["module_hv"].to_numpy())
    ring = frame.groupby(["volume_id", "layer_id", "ring"])
    phi_overlap = (ring["width"].transform("sum") / (2 * np.pi * ring["r"].transform("mean")) - 1.0).clip(0.0, 1.0)
    layer = frame.groupby(["volume_id", "layer_id"])
    num_z = layer["ring"].transform("nunique")
    z_length = layer["ring"].transform("max") - layer["ring"].transform("min") + 2 * layer["hv"].transform("mean")
    z_overlap = (num_z * 2 * frame["hv"] / z_length - 1.0).clip(0.0, 1.0)
    probability = np.where(barrel, 1.0 - (1.0 - phi_overlap) * (1.0 - z_overlap), phi_overlap)
    offsets = modules["volume_id"].map(OVERLAP_OFFSET_MM).to_numpy(np.float64)
    return probability.astype(np.float64), offsets


def _sample_tsallis_pt(rng: np.random.Generator, size: int, config: SimulationConfig) -> np.ndarray:
    """Inverse-CDF sampling of dN/dpT ∝ pT (1 + pT/(nT))^-n above pt_min."""
    n, t = config.pt_power, config.pt_temperature
    grid = np.geomspace(config.pt_min, max(200.0, 50 * config.pt_min), 20_000)
    density = grid * (1.0 + grid / (n * t)) ** (-n)
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (density[1:] + density[:-1]) * np.diff(grid))])
    cdf /= cdf[-1]
    return np.interp(rng.random(size), cdf, grid)


def _generate_particles(rng: np.random.Generator, config: SimulationConfig) -> pd.DataFrame:
    num = config.num_particles
    num_secondary = int(round(config.secondary_fraction * num))
    secondary = np.zeros(num, dtype=bool)
    secondary[rng.permutation(num)[:num_secondary]] = True

    pt = _sample_tsallis_pt(rng, num, config)
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


def _layer_crossings(particles: pd.DataFrame, config: SimulationConfig, layers: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def _segment_exclusive_cumsum(values: np.ndarray, starts: np.ndarray, segment_of: np.ndarray) -> np.ndarray:
    """Cumulative sum over the previous rows of the same segment (rows grouped contiguously)."""
    total = np.cumsum(values, axis=0)
    exclusive = total - values
    return exclusive - exclusive[starts][segment_of]


def _order_weights(num_hits: np.ndarray, order: np.ndarray) -> np.ndarray:
    """TrackML hit-order weight of the hit at position ``order`` on a track of ``num_hits`` hits."""
    position = np.where(num_hits > 1, order * (len(ORDER_WEIGHT_REFERENCE) - 1) / np.maximum(num_hits - 1, 1), 0.0)
    return np.interp(position, np.arange(len(ORDER_WEIGHT_REFERENCE)), ORDER_WEIGHT_REFERENCE)


def pt_weight(pt: np.ndarray) -> np.ndarray:
    """TrackML particle weight: 0.2 below 0.5 GeV, linear up to 1 at 3 GeV, 1 above."""
    return np.clip(0.2 + 0.8 * (np.asarray(pt) - 0.5) / 2.5, 0.2, 1.0)


def simulate_event(config: SimulationConfig, event_id: int, seed: int) -> dict[str, pd.DataFrame]:
    """Simulate one event.

    Args:
        config: physics and detector response.
        event_id: the event number (only mixed into the random stream).
        seed: base seed; the same (seed, event_id, config) gives identical tables.

    Returns:
        ``{"hits", "cells", "particles", "truth"}`` DataFrames in the TrackML
        layout and dtypes; hits are ordered by volume, layer, module and
        numbered from 1; particles include ``particle_type``.
    """
    if event_id < 0 or seed < 0:
        raise DomainparError(f"event_id and seed must be non-negative (got event_id={event_id}, seed={seed})")
    rng = np.random.default_rng([seed, event_id])
    geometry = _geometry()
    layers = geometry.layers
    particles = _generate_particles(rng, config)

    part, layer, s = _layer_crossings(particles, config, layers)
    pt_of_particle = np.hypot(particles["px"].to_numpy(), particles["py"].to_numpy())
    recorded = pt_of_particle >= config.hit_pt_min
    part, layer, s = part[recorded[part]], layer[recorded[part]], s[recorded[part]]
    order = np.lexsort((s, part))
    part, layer, s = part[order], layer[order], s[order]

    # Ideal helix position and unit direction at every crossing.
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
    barrel = layers["barrel"].to_numpy()[layer]
    normal = np.where(
        barrel[:, None],
        np.stack([position[:, 0], position[:, 1], np.zeros(len(s))], axis=1) / np.hypot(position[:, 0], position[:, 1])[:, None],
        np.array([0.0, 0.0, 1.0]),
    )
    cos_incidence = np.maximum(np.abs(np.einsum("ij,ij->i", direction, normal)), 0.05)

    if config.multiple_scattering and len(s):
        starts = np.flatnonzero(np.r_[True, part[1:] != part[:-1]])
        segment_of = np.cumsum(np.r_[True, part[1:] != part[:-1]]) - 1
        x_over_x0 = (layers["thickness"].to_numpy()[layer] / SILICON_X0_MM + config.support_x0) / cos_incidence
        beta = p / np.hypot(p, PION_MASS_GEV)
        theta0 = 0.0136 / (beta * p) * np.sqrt(x_over_x0) * (1.0 + 0.038 * np.log(x_over_x0))
        # Two unit vectors orthogonal to the direction: azimuthal, and the one completing the frame.
        u1 = np.stack([-np.sin(phi), np.cos(phi), np.zeros(len(s))], axis=1)
        u2 = np.cross(direction, u1)
        kick = (rng.normal(size=len(s)) * theta0)[:, None] * u1 + (rng.normal(size=len(s)) * theta0)[:, None] * u2
        path = s * p / pt
        # Displacement at hit j: sum over earlier crossings i of kick_i * (L_j - L_i).
        sum_kick = _segment_exclusive_cumsum(kick, starts, segment_of)
        sum_kick_path = _segment_exclusive_cumsum(kick * path[:, None], starts, segment_of)
        position = position + path[:, None] * sum_kick - sum_kick_path
        direction = direction + sum_kick
        direction /= np.linalg.norm(direction, axis=1, keepdims=True)
        # Back onto the layer surface (the lever-arm displacement is transverse to the track).
        layer_r = layers["r"].to_numpy()[layer]
        layer_z = layers["z"].to_numpy()[layer]
        r_now = np.hypot(position[:, 0], position[:, 1])
        position[barrel, :2] *= (layer_r[barrel] / r_now[barrel])[:, None]
        position[~barrel, 2] = layer_z[~barrel]
    else:
        position[~barrel, 2] = layers["z"].to_numpy()[layer][~barrel]

    if config.module_planes:
        # The modules the crossing passes through: of the few nearest module centres, those whose
        # plane the track meets inside the module. The first is its hit; a second one (an overlap of
        # neighbouring modules, by the detector's own geometry) leaves a second hit on the layer.
        candidates = np.empty((len(s), _MODULE_CANDIDATES), dtype=np.int64)
        for layer_index in np.unique(layer):
            mask = layer == layer_index
            k = min(_MODULE_CANDIDATES, geometry.module_rows[layer_index].size)
            _, nearest = geometry.trees[layer_index].query(position[mask], k=k)
            nearest = nearest.reshape(int(mask.sum()), k)
            if k < _MODULE_CANDIDATES:
                nearest = np.concatenate([nearest, np.repeat(nearest[:, :1], _MODULE_CANDIDATES - k, axis=1)], axis=1)
            candidates[mask] = geometry.module_rows[layer_index][nearest]
        first, second, landing, passes_second = _modules_crossed(position, direction, candidates, geometry.modules)
        radius = config.helix_radius_mm(p * np.hypot(direction[:, 0], direction[:, 1]))
        # The move follows the straight tangent; where the helix would leave that tangent by more than
        # 1 mm over it (a looper grazing a layer at its apex) — as far as the modules' stagger the move
        # corrects — the crossing keeps its layer-surface point and nearest module.
        moved = landing - position[:, None, :]
        transverse = np.hypot(moved[..., 0], moved[..., 1])
        straight = (transverse**2 / (2.0 * np.maximum(radius, 1e-9))[:, None] <= _MAX_TANGENT_SAGITTA_MM) & (
            np.linalg.norm(moved, axis=2) <= _MAX_PLANE_STEP_MM
        )
        rows = np.arange(len(s))
        use_first = straight[rows, first]
        primary_position = np.where(use_first[:, None], landing[rows, first], position)
        primary_row = np.where(use_first, candidates[rows, first], candidates[:, 0])
        overlap = np.flatnonzero(passes_second & straight[rows, second] & use_first) if config.module_overlaps else np.zeros(0, np.int64)
        step_of = lambda choice: np.einsum("ij,ij->i", landing[rows, choice] - position, direction)  # noqa: E731
        s_first = s + np.where(use_first, step_of(first), 0.0) * np.hypot(direction[:, 0], direction[:, 1])
        s_second = s + step_of(second) * np.hypot(direction[:, 0], direction[:, 1])
        module_row = np.concatenate([primary_row, candidates[overlap, second[overlap]]])
        s = np.concatenate([s_first, s_second[overlap] + np.where(s_second[overlap] == s_first[overlap], 1e-6, 0.0)])
        position = np.concatenate([primary_position, landing[overlap, second[overlap]]])
        direction = np.concatenate([direction, direction[overlap]])
    else:
        # Nearest module centre of every crossing's layer (and the runner-up, its overlapping neighbour).
        nearest_row = np.empty((len(s), 2), dtype=np.int64)
        for layer_index in np.unique(layer):
            mask = layer == layer_index
            _, nearest = geometry.trees[layer_index].query(position[mask], k=2)
            nearest_row[mask] = geometry.module_rows[layer_index][nearest]
        # Module overlaps: where neighbouring modules of a ring overlap, the crossing also passes
        # through the neighbour a few mm further on (radial stagger on barrels, the other disc face
        # on endcaps). The probability is the geometric overlap fraction of the module's ring.
        if config.module_overlaps:
            overlap_probability = geometry.overlap_probability[nearest_row[:, 0]]
        else:
            overlap_probability = np.zeros(len(s))
        overlap = np.flatnonzero(rng.random(len(s)) < overlap_probability)
        module_row = np.concatenate([nearest_row[:, 0], nearest_row[overlap, 1]])
        offset = geometry.overlap_offset[nearest_row[overlap, 0]]
        step = _step_to_staggered_surface(position[overlap], direction[overlap], barrel[overlap], offset)[:, None] * direction[overlap]
        position = np.concatenate([position, position[overlap] + step])
        direction = np.concatenate([direction, direction[overlap]])
        s = np.concatenate([s, s[overlap] + np.hypot(step[:, 0], step[:, 1]) + 1e-6])
    part, layer, p, barrel = (np.concatenate([a, a[overlap]]) for a in (part, layer, p, barrel))
    order = np.lexsort((s, part))
    part, layer, p, barrel, s, position, direction, module_row = (
        a[order] for a in (part, layer, p, barrel, s, position, direction, module_row)
    )

    r_now = np.hypot(position[:, 0], position[:, 1])
    inside = np.where(
        barrel,
        (position[:, 2] >= layers["z_min"].to_numpy()[layer]) & (position[:, 2] <= layers["z_max"].to_numpy()[layer]),
        (r_now >= layers["r_min"].to_numpy()[layer]) & (r_now <= layers["r_max"].to_numpy()[layer]),
    )
    efficiency = np.full(len(s), config.hit_efficiency)
    for condition_volume, condition_layer, layer_efficiency, _ in config.layer_conditions:
        efficiency[layer == _layer_position(layers, condition_volume, condition_layer)] = layer_efficiency
    detected = inside & (rng.random(len(s)) < efficiency)
    part, layer, position, direction, p = part[detected], layer[detected], position[detected], direction[detected], p[detected]
    module_row = module_row[detected]
    modules = geometry.modules
    axis_u = modules[["rot_xu", "rot_yu", "rot_zu"]].to_numpy()
    axis_v = modules[["rot_xv", "rot_yv", "rot_zv"]].to_numpy()
    pitch_u = modules["pitch_u"].to_numpy()
    pitch_v = modules["pitch_v"].to_numpy()

    # Noise: per-volume shares of the real labelled event, uniform over the volume's modules.
    num_signal = len(part)
    num_noise = int(round(config.noise_fraction / (1.0 - config.noise_fraction) * num_signal))
    noise_rows, noise_position = _noise_hits(rng, num_noise, modules)

    all_rows = np.concatenate([module_row, noise_rows])
    particle_id = np.concatenate([particles["particle_id"].to_numpy()[part], np.zeros(num_noise, dtype=np.int64)])
    true_position = np.concatenate([position, noise_position])
    true_momentum = np.concatenate([direction * p[:, None], np.zeros((num_noise, 3))])
    # Order along the track among detected hits (the order weight counts measured hits).
    hit_order = np.concatenate([_rank_within(part), np.zeros(num_noise, dtype=np.int64)])

    nhits = np.bincount(part, minlength=config.num_particles)
    pt_particle = np.hypot(particles["px"].to_numpy(), particles["py"].to_numpy())
    particle_weight = pt_weight(pt_particle) * (nhits >= 4) * ~particles["secondary"].to_numpy()
    order_weight = _order_weights(nhits[part], hit_order[:num_signal])
    order_sum = np.bincount(part, weights=order_weight, minlength=config.num_particles)
    signal_weight = particle_weight[part] * order_weight / np.maximum(order_sum[part], 1e-12)
    weight = np.concatenate([signal_weight, np.zeros(num_noise)])
    if weight.sum() > 0:
        weight /= weight.sum()

    # Hits are numbered in detector order like the challenge's files; ties broken at random.
    volume_id = modules["volume_id"].to_numpy()[all_rows]
    layer_id = modules["layer_id"].to_numpy()[all_rows]
    module_id = modules["module_id"].to_numpy()[all_rows]
    hit_order_in_file = np.lexsort((rng.random(len(all_rows)), module_id, layer_id, volume_id))
    hit_id = np.arange(1, len(all_rows) + 1, dtype=np.int32)
    sel = hit_order_in_file

    # Clusters first (from the true crossing), then the measured position, whose error depends on the
    # cluster's size: a noise hit is measured where it is.
    noise_normal = modules[["rot_xw", "rot_yw", "rot_zw"]].to_numpy()[noise_rows]
    true_direction = np.concatenate([direction, noise_normal])
    cluster_models = _varied_cluster_models(rng, config.cluster_variation) if config.cluster_variation > 0 else None
    cells = _cells(rng, hit_id, all_rows[sel], true_position[sel], true_direction[sel], modules, cluster_models)
    all_measured = true_position[sel].copy()
    if config.smear:
        rows = all_rows[sel]
        signal_rows = particle_id[sel] != 0
        if config.resolution == "pitch":
            offset_u = rng.normal(size=len(rows)) * pitch_u[rows] / np.sqrt(12.0)
            offset_v = rng.normal(size=len(rows)) * pitch_v[rows] / np.sqrt(12.0)
        else:
            channels = _channels_per_hit(cells, len(rows))
            offset_u, offset_v = _measured_residuals(rng, modules["volume_id"].to_numpy()[rows], channels[:, 0], channels[:, 1])
            offset_u *= pitch_u[rows]
            offset_v *= pitch_v[rows]
        offset = offset_u[:, None] * axis_u[rows] + offset_v[:, None] * axis_v[rows]
        for condition_volume, condition_layer, _, scale in config.layer_conditions:
            on_layer = (modules["volume_id"].to_numpy()[rows] == condition_volume) & (
                modules["layer_id"].to_numpy()[rows] == condition_layer
            )
            offset[on_layer] *= scale
        all_measured += np.where(signal_rows[:, None], offset, 0.0)
    all_measured = all_measured[np.argsort(sel)]  # back to creation order; every table below indexes with sel

    hits = pd.DataFrame(
        {
            "hit_id": hit_id,
            "x": all_measured[sel, 0].astype(np.float32),
            "y": all_measured[sel, 1].astype(np.float32),
            "z": all_measured[sel, 2].astype(np.float32),
            "volume_id": volume_id[sel].astype(np.int32),
            "layer_id": layer_id[sel].astype(np.int32),
            "module_id": module_id[sel].astype(np.int32),
        }
    )
    truth = pd.DataFrame(
        {
            "hit_id": hit_id,
            "particle_id": particle_id[sel],
            "tx": true_position[sel, 0].astype(np.float32),
            "ty": true_position[sel, 1].astype(np.float32),
            "tz": true_position[sel, 2].astype(np.float32),
            "tpx": true_momentum[sel, 0].astype(np.float32),
            "tpy": true_momentum[sel, 1].astype(np.float32),
            "tpz": true_momentum[sel, 2].astype(np.float32),
            "weight": weight[sel].astype(np.float32),
        }
    )
    particles_out = particles.drop(columns="secondary").assign(nhits=nhits.astype(np.int32))
    particles_out = particles_out.astype(
        {"vx": np.float32, "vy": np.float32, "vz": np.float32, "px": np.float32, "py": np.float32, "pz": np.float32}
    )
    return {"hits": hits, "cells": cells, "particles": particles_out, "truth": truth}


@lru_cache(maxsize=1)
def measurement_model() -> dict:
    """The per-volume residual quantiles (pitch units) of ``resources/measurement_model.json``."""
    import json
    from importlib import resources

    text = (resources.files("domainpar.data") / "resources" / "measurement_model.json").read_text()
    return json.loads(text)


def _channels_per_hit(cells: pd.DataFrame, num_hits: int) -> np.ndarray:
    """(num_hits, 2) distinct channels along u and v of hits 1..num_hits (hit_id - 1 indexes the rows)."""
    result = np.zeros((num_hits, 2), dtype=np.int64)
    hit = cells["hit_id"].to_numpy(np.int64) - 1
    for column, channel in enumerate(("ch0", "ch1")):
        pairs = np.unique(np.stack([hit, cells[channel].to_numpy(np.int64)]), axis=1)
        result[:, column] = np.bincount(pairs[0], minlength=num_hits)
    return result


def _measured_residuals(
    rng: np.random.Generator, volume_id: np.ndarray, channels_u: np.ndarray, channels_v: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(K,), (K,) residuals along u and v in pitch units, drawn from the measured distribution of each hit's
    volume and cluster size along that axis (1, 2 or 3+ channels; the volume's whole distribution where a
    size class had too few real hits).

    Inverse-CDF sampling with linear interpolation between the stored quantiles.
    """
    model = measurement_model()
    probabilities = np.asarray(model["probabilities"])
    offsets = {"u": np.zeros(volume_id.size), "v": np.zeros(volume_id.size)}
    draws = rng.random((2, volume_id.size))
    for key, per_axis in model["volumes"].items():
        in_volume = volume_id == int(key)
        for row, (axis, channels) in enumerate((("u", channels_u), ("v", channels_v))):
            size_class = np.clip(channels, 1, 3).astype(str)
            for name, quantiles in per_axis[axis].items():
                mask = in_volume & (size_class == name) if name != "all" else in_volume & ~np.isin(size_class, list(per_axis[axis]))
                offsets[axis][mask] = np.interp(draws[row, mask], probabilities, quantiles)
    return offsets["u"], offsets["v"]


def _modules_crossed(
    position: np.ndarray, direction: np.ndarray, candidates: np.ndarray, modules: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Which candidate modules a straight track through ``position`` crosses, and where.

    Args:
        position: (K, 3) crossings of a layer's ideal surface, mm.
        direction: (K, 3) unit directions there.
        candidates: (K, C) module rows to try, nearest centre first.
        modules: the detector table.

    Returns:
        ``(first, second, landing, passes_second)``: per crossing the column of
        the candidate it hits (the nearest one that contains the point where
        the track meets its plane, else the one it misses by least), the next
        such column, the (K, C, 3) points on every candidate's plane, and
        whether the second one contains its point too (an overlap).
    """
    centre = modules[["cx", "cy", "cz"]].to_numpy()[candidates]
    normal = modules[["rot_xw", "rot_yw", "rot_zw"]].to_numpy()[candidates]
    axis_u = modules[["rot_xu", "rot_yu", "rot_zu"]].to_numpy()[candidates]
    axis_v = modules[["rot_xv", "rot_yv", "rot_zv"]].to_numpy()[candidates]
    min_u = modules["module_minhu"].to_numpy()[candidates]
    max_u = modules["module_maxhu"].to_numpy()[candidates]
    half_v = modules["module_hv"].to_numpy()[candidates]
    along = np.einsum("kj,kcj->kc", direction, normal)
    distance = np.einsum("kcj,kcj->kc", centre - position[:, None, :], normal)
    safe = np.where(np.abs(along) < 1e-3, np.where(along < 0, -1e-3, 1e-3), along)
    landing = position[:, None, :] + (distance / safe)[..., None] * direction[:, None, :]
    local = landing - centre
    v = np.einsum("kcj,kcj->kc", local, axis_v)
    # Trapezoids (endcaps): the half-width grows from module_minhu at v = -hv to module_maxhu at v = +hv.
    half_u = min_u + (max_u - min_u) * np.clip((v / np.maximum(half_v, 1e-9) + 1.0) / 2.0, 0.0, 1.0)
    excess = np.maximum(np.abs(np.einsum("kcj,kcj->kc", local, axis_u)) - half_u, np.abs(v) - half_v)
    inside = excess <= 0
    rank = np.arange(candidates.shape[1])[None, :]
    # Inside beats outside; among the inside ones the nearest centre, among the outside ones the least miss.
    score = np.where(inside, rank, 1e3 + excess)
    # Repeated candidates (a layer with few modules) must not count twice.
    duplicate = np.zeros_like(inside)
    for c in range(1, candidates.shape[1]):
        duplicate[:, c] = (candidates[:, :c] == candidates[:, c : c + 1]).any(axis=1)
    score = np.where(duplicate, np.inf, score)
    order = np.argsort(score, axis=1, kind="stable")
    first, second = order[:, 0], order[:, 1]
    rows = np.arange(candidates.shape[0])
    passes_second = inside[rows, second] & ~duplicate[rows, second]
    return first, second, landing, passes_second


def _step_to_staggered_surface(position: np.ndarray, direction: np.ndarray, barrel: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """Straight-line distance from a crossing to the surface ``offset`` mm further on along the track.

    Barrels: the cylinder of radius r ± offset (outward or inward as the track
    moves); endcaps: the plane |z| + offset.

    Args:
        position: (K, 3) crossing points on the layer surface.
        direction: (K, 3) unit directions.
        barrel: (K,) whether the layer is a barrel cylinder.
        offset: (K,) stagger in mm.

    Returns:
        (K,) step lengths in mm.
    """
    radius = np.hypot(position[:, 0], position[:, 1])
    d_xy_sq = np.maximum(direction[:, 0] ** 2 + direction[:, 1] ** 2, 1e-12)
    radial = position[:, 0] * direction[:, 0] + position[:, 1] * direction[:, 1]
    target = radius + np.where(radial >= 0, offset, -offset)
    disc = np.maximum(radial**2 - d_xy_sq * (radius**2 - target**2), 0.0)
    barrel_step = np.where(radial >= 0, -radial + np.sqrt(disc), -radial - np.sqrt(disc)) / d_xy_sq
    endcap_step = offset / np.maximum(np.abs(direction[:, 2]), 1e-6)
    return np.where(barrel, barrel_step, endcap_step)


def _layer_position(layers: pd.DataFrame, volume_id: int, layer_id: int) -> int:
    """Row of (volume_id, layer_id) in the layer table; a layer the detector lacks is an error."""
    match = np.flatnonzero((layers["volume_id"].to_numpy() == volume_id) & (layers["layer_id"].to_numpy() == layer_id))
    if match.size == 0:
        raise DomainparError(f"SimulationConfig.layer_conditions: no layer {volume_id}:{layer_id} in the TrackML detector")
    return int(match[0])


def _rank_within(group: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... within each run of equal consecutive values of ``group``."""
    if len(group) == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    run_of = np.cumsum(np.r_[True, group[1:] != group[:-1]]) - 1
    return np.arange(len(group)) - starts[run_of]


def _noise_hits(rng: np.random.Generator, num_noise: int, modules: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Noise hits: a volume by the real per-volume shares, a module uniformly, a point uniformly on it."""
    volumes = np.array(list(NOISE_VOLUME_FRACTIONS))
    shares = np.array(list(NOISE_VOLUME_FRACTIONS.values()))
    volume_of = rng.choice(volumes, num_noise, p=shares / shares.sum())
    module_volume = modules["volume_id"].to_numpy()
    rows = np.empty(num_noise, dtype=np.int64)
    for volume in volumes:
        mask = volume_of == volume
        candidates = np.flatnonzero(module_volume == volume)
        rows[mask] = candidates[rng.integers(0, candidates.size, int(mask.sum()))]
    centre = modules[["cx", "cy", "cz"]].to_numpy()[rows]
    u = rng.uniform(-1.0, 1.0, num_noise) * modules["module_minhu"].to_numpy()[rows]
    v = rng.uniform(-1.0, 1.0, num_noise) * modules["module_hv"].to_numpy()[rows]
    position = centre + u[:, None] * modules[["rot_xu", "rot_yu", "rot_zu"]].to_numpy()[rows]
    position += v[:, None] * modules[["rot_xv", "rot_yv", "rot_zv"]].to_numpy()[rows]
    return rows, position


@dataclass(frozen=True)
class ClusterModel:
    """How one volume's sensors turn a crossing into cells (see :func:`_cells`)."""

    tan_lorentz: float = 0.0
    """Tangent of the Lorentz angle: drift along u per unit depth (barrels, whose field lies in the sensor plane)."""
    depth_u: float = 1.0
    """Charge-collection depth seen along u, in units of the module thickness."""
    depth_v: float = 1.0
    """Charge-collection depth seen along v, in units of the module thickness."""
    spread_u: float = 0.0
    """Extra width of the charge line along u (diffusion, capacitive sharing), in pitches."""
    spread_v: float = 0.0
    """Extra width of the charge line along v, in pitches."""
    threshold: float = 0.0
    """Pixel threshold as a fraction of a full-depth pixel's charge (strips are binary: 0)."""
    charge: float = 1.0
    """Charge of a full-depth perpendicular crossing (pixels; strips read 1 per channel)."""


#: Per volume cluster models, fitted to the real event 21000's clusters (per volume and bin of track angle:
#: mean cells, channels along u and v, median summed charge; :func:`domainpar.data.calibration.fit_cluster_models`).
CLUSTER_MODELS = {
    # Pixel endcaps (7 fitted; 9 is its mirror image), pixel barrel.
    7: ClusterModel(tan_lorentz=0.0, depth_u=4.0, depth_v=3.27, spread_u=0.09, spread_v=0.0, threshold=0.0, charge=0.301),
    8: ClusterModel(tan_lorentz=0.504, depth_u=0.977, depth_v=0.949, spread_u=0.0, spread_v=0.470, threshold=0.033, charge=0.150),
    9: ClusterModel(tan_lorentz=0.0, depth_u=4.0, depth_v=3.27, spread_u=0.09, spread_v=0.0, threshold=0.0, charge=0.301),
    # Short-strip endcaps (12 and 14 averaged) and barrel.
    12: ClusterModel(tan_lorentz=0.0, depth_u=2.97, depth_v=1.0, spread_u=0.0, spread_v=0.0, threshold=0.0, charge=1.0),
    13: ClusterModel(tan_lorentz=0.430, depth_u=0.749, depth_v=1.0, spread_u=0.051, spread_v=0.0, threshold=0.0, charge=1.0),
    14: ClusterModel(tan_lorentz=0.0, depth_u=2.97, depth_v=1.0, spread_u=0.0, spread_v=0.0, threshold=0.0, charge=1.0),
    # Long-strip endcaps (16 and 18 averaged) and barrel.
    16: ClusterModel(tan_lorentz=0.0, depth_u=2.17, depth_v=1.0, spread_u=0.01, spread_v=0.0, threshold=0.0, charge=1.0),
    17: ClusterModel(tan_lorentz=0.6, depth_u=0.731, depth_v=1.0, spread_u=0.0, spread_v=0.0, threshold=0.0, charge=1.0),
    18: ClusterModel(tan_lorentz=0.0, depth_u=2.17, depth_v=1.0, spread_u=0.01, spread_v=0.0, threshold=0.0, charge=1.0),
}
#: Charge samples per pitch of the charge line (resolution of the path-in-cell integration).
_SAMPLES_PER_PITCH = 6


def _varied_cluster_models(rng: np.random.Generator, variation: float) -> dict[int, ClusterModel]:
    """:data:`CLUSTER_MODELS` with every length and the threshold scaled by a factor in [1 - v, 1 + v] (per volume)."""
    varied = {}
    for volume_id, model in CLUSTER_MODELS.items():
        factor = lambda: float(rng.uniform(1.0 - variation, 1.0 + variation))  # noqa: E731
        varied[volume_id] = replace(
            model,
            tan_lorentz=model.tan_lorentz * factor(),
            depth_u=model.depth_u * factor(),
            depth_v=model.depth_v * factor(),
            spread_u=model.spread_u * factor(),
            spread_v=model.spread_v * factor(),
            threshold=model.threshold * factor(),
        )
    return varied


def _cells(
    rng: np.random.Generator,
    hit_id: np.ndarray,
    module_row: np.ndarray,
    position: np.ndarray,
    direction: np.ndarray,
    modules: pd.DataFrame,
    models: dict[int, ClusterModel] | None = None,
) -> pd.DataFrame:
    """A cluster of cells per hit: the channels under the charge the particle left in the sensor.

    The particle deposits charge uniformly along its straight path through the
    sensor; in barrel sensors the charge drifts along u by the Lorentz angle.
    Projected on the readout plane this is a line centred on the crossing point,
    of extent ``depth · (d_u / |d_w| + tan θ_L)`` along u and
    ``depth · d_v / |d_w|`` along v (thickness × the volume's collection
    depths), lengthened by the volume's spread (diffusion and sharing between
    neighbouring channels). Every channel (pixel, or strip segment) the line
    crosses collects the charge of the part of the line above it; pixel cells
    below the threshold are not read out (a hit's largest cell always is).
    Pixels record the charge (full-depth perpendicular crossing: the volume's
    charge, with a 25 % log-normal spread, proportional to the path length);
    strips are binary (value 1). A noise hit is a crossing along the sensor
    normal. The result is line clusters (cells ≈ channels along u + along v − 1),
    as in the real files, not rectangles.

    Args:
        rng: random stream.
        hit_id: (K,) hit ids.
        module_row: (K,) row of every hit's module in ``modules``.
        position: (K, 3) true crossing points, mm.
        direction: (K, 3) unit directions of the particles (the module normal for noise).
        modules: the detector table.
        models: cluster model per volume (default :data:`CLUSTER_MODELS`).

    Returns:
        The cells table (hit_id, ch0, ch1, value), grouped by hit.
    """
    models = CLUSTER_MODELS if models is None else models
    m = modules.iloc[module_row]
    axis_u = m[["rot_xu", "rot_yu", "rot_zu"]].to_numpy()
    axis_v = m[["rot_xv", "rot_yv", "rot_zv"]].to_numpy()
    axis_w = m[["rot_xw", "rot_yw", "rot_zw"]].to_numpy()
    pitch_u, pitch_v = m["pitch_u"].to_numpy(), m["pitch_v"].to_numpy()
    half_u, half_v = m["module_maxhu"].to_numpy(), m["module_hv"].to_numpy()
    volume = m["volume_id"].to_numpy()
    names = ("tan_lorentz", "depth_u", "depth_v", "spread_u", "spread_v", "threshold", "charge")
    columns = {name: np.zeros(volume.size) for name in names}
    for volume_id in np.unique(volume):
        model = models.get(int(volume_id), ClusterModel())
        mask = volume == volume_id
        for name in names:
            columns[name][mask] = getattr(model, name)
    thickness = m["module_t"].to_numpy()
    local = position - m[["cx", "cy", "cz"]].to_numpy()
    u = np.einsum("ij,ij->i", local, axis_u)
    v = np.einsum("ij,ij->i", local, axis_v)
    num_u_channels = np.maximum(np.round(2 * half_u / pitch_u), 1).astype(np.int64)
    num_v_channels = np.maximum(np.round(2 * half_v / pitch_v), 1).astype(np.int64)

    d_w = np.maximum(np.abs(np.einsum("ij,ij->i", direction, axis_w)), 0.02)
    slope_u = np.einsum("ij,ij->i", direction, axis_u) / d_w
    slope_v = np.einsum("ij,ij->i", direction, axis_v) / d_w
    span_u = thickness * columns["depth_u"] * (slope_u + columns["tan_lorentz"])
    span_v = thickness * columns["depth_v"] * slope_v
    # Diffusion lengthens the line along its own direction (a perpendicular crossing spreads either way).
    sign_u = np.where(span_u != 0, np.sign(span_u), np.where(rng.random(u.size) < 0.5, -1.0, 1.0))
    sign_v = np.where(span_v != 0, np.sign(span_v), np.where(rng.random(u.size) < 0.5, -1.0, 1.0))
    span_u = span_u + sign_u * columns["spread_u"] * pitch_u
    span_v = span_v + sign_v * columns["spread_v"] * pitch_v
    strip = pitch_v > 0.5
    reach = np.maximum(np.abs(span_u) / pitch_u, np.abs(span_v) / pitch_v)
    num_samples = np.minimum(2 + np.ceil(reach * _SAMPLES_PER_PITCH), 400).astype(np.int64)
    owner = np.repeat(np.arange(u.size), num_samples)
    step = np.arange(num_samples.sum()) - np.repeat(np.cumsum(num_samples) - num_samples, num_samples)
    fraction = (step + 0.5) / num_samples[owner] - 0.5
    sample_u = u[owner] + fraction * span_u[owner]
    sample_v = v[owner] + fraction * span_v[owner]
    cell_u = np.clip(np.floor((sample_u + half_u[owner]) / pitch_u[owner]), 0, num_u_channels[owner] - 1).astype(np.int64)
    cell_v = np.clip(np.floor((sample_v + half_v[owner]) / pitch_v[owner]), 0, num_v_channels[owner] - 1).astype(np.int64)
    key = (owner * (1 << 21) + cell_u) * (1 << 21) + cell_v
    _, first, count = np.unique(key, return_index=True, return_counts=True)
    hit_of = owner[first]
    share = count / num_samples[hit_of]
    path_length = np.sqrt(1.0 + slope_u**2 + slope_v**2)  # in units of the thickness
    hit_charge = columns["charge"] * path_length * np.exp(rng.normal(0.0, 0.25, u.size))
    value = np.where(strip[hit_of], 1.0, hit_charge[hit_of] * share)
    largest = np.zeros(u.size)
    np.maximum.at(largest, hit_of, value)
    keep = strip[hit_of] | (value >= columns["threshold"][hit_of] * columns["charge"][hit_of]) | (value >= largest[hit_of])
    return pd.DataFrame(
        {
            "hit_id": hit_id[hit_of[keep]].astype(np.int32),
            "ch0": cell_u[first[keep]].astype(np.int32),
            "ch1": cell_v[first[keep]].astype(np.int32),
            "value": value[keep].astype(np.float32),
        }
    )


def simulate_dataset(
    out_dir: str | os.PathLike,
    num_events: int,
    config: SimulationConfig | None = None,
    seed: int = 0,
    first_event_id: int = 1,
    progress: bool = True,
    compress: bool = True,
) -> list[Path]:
    """Simulate ``num_events`` events and write them as ``event{id:09d}-{part}.csv.gz``.

    Args:
        out_dir: output directory (created if needed).
        num_events: number of events.
        config: simulation parameters (default :class:`SimulationConfig`).
        seed: base seed; event ``i`` uses the stream (seed, event_id).
        first_event_id: event number of the first event; the others follow consecutively.
        progress: show progress on stderr (a bar on a terminal, a line every 30 s in a log).
        compress: gzip the CSV files (``.csv.gz``); False writes plain ``.csv``.

    Returns:
        The event prefixes written, in event order.
    """
    if num_events < 0:
        raise DomainparError(f"num_events must be non-negative (got {num_events})")
    if first_event_id < 0:
        raise DomainparError(f"first_event_id must be non-negative (got {first_event_id})")
    config = SimulationConfig() if config is None else config
    prefixes = []
    events = range(first_event_id, first_event_id + num_events)
    for event_id in progress_display(events, desc="simulate", unit="event", enabled=progress):
        frames = simulate_event(config, event_id, seed)
        prefixes.append(write_event(out_dir, event_id, frames, compress=compress))
    return prefixes

