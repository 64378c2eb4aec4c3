"""The simulator's parameters: one frozen :class:`SimulationConfig` (physics and detector response)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from domainpar.errors import DomainparError

#: Measurement models of :attr:`SimulationConfig.resolution`.
RESOLUTION_MODELS = ("measured", "pitch")


@dataclass(frozen=True)
class SimulationConfig:
    """Physics and detector-response parameters of :func:`~domainpar.sim.event.simulate_event`.

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
    real event 1 (:func:`domainpar.sim.calibration.layer_response`: 15 missed of 1,277 crossings between hits,
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


__all__ = ["RESOLUTION_MODELS", "SimulationConfig"]
