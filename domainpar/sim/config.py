"""The simulator's parameters: one frozen :class:`SimulationConfig` (physics and detector response)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from domainpar.errors import DomainparError

#: Peak memory of simulating one event: a base and a cost per particle (secondaries included), rounded up from
#: measurements (166 MB at 2,000 particles, 1.29 GB at 40,000: 29.5 kB per particle).
EVENT_BASE_BYTES = 160 * 2**20
#: See :data:`EVENT_BASE_BYTES`.
PARTICLE_BYTES = 32 * 2**10

#: Measurement models of :attr:`SimulationConfig.resolution`.
RESOLUTION_MODELS = ("measured", "pitch")


@dataclass(frozen=True)
class SimulationConfig:
    """Physics and detector-response parameters of :func:`~domainpar.sim.event.simulate_event`.

    Defaults reproduce the real full event 21000 (see ``docs/figures/sim_vs_real.png``).
    """

    num_particles: int = 10_000
    """Charged particles from the collisions: the pile-up vertices' primaries and the charged daughters of their
    K0S and Lambda decays. Secondaries of interactions come on top; decay daughters below ``pt_min`` are not listed."""
    multiplicity_spread: float = 0.0
    """Occupancy mix: every event's ``num_particles`` (and ``num_vertices``) is scaled by a factor drawn
    uniformly in [1 - s, 1 + s] from the event's own random stream (0: every event the same size)."""
    pt_min: float = 0.1
    """Lowest transverse momentum listed, GeV (the TrackML particles file starts at 0.1 GeV)."""
    pt_temperature: float = 0.162
    """Tsallis T of the primary spectrum dN/dpT ∝ pT (1 + pT/(n T))^-n, GeV (fitted to event 21000)."""
    pt_power: float = 7.17
    """Tsallis n of the primary spectrum (fitted to event 21000)."""
    hit_pt_min: float = 0.15
    """A particle below this pT ends at the first material surface it reaches, with at most one hit (there, if that
    surface is a layer), as in the challenge's files: a primary ends in the beam pipe without a hit."""
    eta_max: float = 4.0
    """Particles are generated flat in pseudorapidity for |eta| < eta_max."""
    num_vertices: int = 165
    """Collision vertices that produce listed charged particles, sharing them by :attr:`vertex_multiplicity_shape`."""
    vertex_multiplicity_shape: float = 1.4
    """Shape k of the Gamma distribution of the vertices' shares of the particles: per-vertex counts vary by
    about 1/sqrt(k) of their mean; large k shares them evenly."""
    vertex_sigma_z: float = 55.0
    """Gaussian spread of the collision vertices along the beam, mm."""
    vertex_sigma_xy: float = 0.015
    """Gaussian transverse spread of the collision vertices, mm."""
    k0s_fraction: float = 0.037
    """K0S → π+π− decays per collision particle (with ``lambda_fraction``, fitted to event 21000's decay daughters)."""
    lambda_fraction: float = 0.016
    """Λ → pπ− decays (half of them the charge conjugate) per collision particle (see ``k0s_fraction``)."""
    interaction_scale: float = 1.0
    """Scale of the material's nuclear interaction thicknesses (:mod:`domainpar.sim.material`): a crossing of a
    surface ends its particle in a hadronic interaction with probability 1 − exp(−scale · thickness / |cos
    incidence|). 0: no interactions, every particle crosses the whole tracker."""
    secondary_multiplicity: float = 1.90
    """Mean listed secondaries (pT above ``pt_min``) per interaction, at least one: 1 + Poisson(m − 1)."""
    secondary_p_median: float = 0.23
    """Median momentum of the secondaries as produced (log-normal), GeV."""
    secondary_p_sigma: float = 0.55
    """Log-normal width of the secondaries' momenta."""
    secondary_forward: float = 0.20
    """Forward bias b of the secondaries' directions: dN/dcos ∝ 1 + b cos, cos to the interacting particle's
    direction."""
    secondary_proton_fraction: float = 0.46
    """Share of protons among the secondaries, the rest pions of either charge."""
    max_generations: int = 3
    """Generations of secondaries followed (secondaries of secondaries, ...)."""
    positive_fraction: float = 0.50
    """Fraction of positively charged primaries."""
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
    real event 1 (:func:`bench.tools.calibration.layer_response`)."""
    noise_fraction: float = 0.142
    """Noise hits as a fraction of all hits."""
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
    real files; 1 or more lets loopers re-cross barrel layers on their way in (and on later turns)."""
    tracker_radius: float = 1100.0
    """Particles stop when they leave this radius, mm (calorimeter/solenoid)."""
    tracker_half_length: float = 3100.0
    """Particles stop when they leave |z| beyond this, mm."""

    def __post_init__(self) -> None:
        checks = {
            "num_particles": self.num_particles >= 0,
            "multiplicity_spread": 0.0 <= self.multiplicity_spread < 1.0,
            "hit_pt_min": self.hit_pt_min >= 0,
            "pt_min": self.pt_min > 0,
            "pt_temperature": self.pt_temperature > 0,
            "pt_power": self.pt_power > 3,
            "eta_max": self.eta_max > 0,
            "num_vertices": 1 <= self.num_vertices < 4096,
            "vertex_multiplicity_shape": self.vertex_multiplicity_shape > 0,
            "vertex_sigma_z": self.vertex_sigma_z >= 0,
            "vertex_sigma_xy": self.vertex_sigma_xy >= 0,
            "k0s_fraction": 0.0 <= self.k0s_fraction,
            "lambda_fraction": 0.0 <= self.lambda_fraction and 2 * (self.k0s_fraction + self.lambda_fraction) <= 1.0,
            "interaction_scale": self.interaction_scale >= 0,
            "secondary_multiplicity": self.secondary_multiplicity >= 1.0,
            "secondary_p_median": self.secondary_p_median > 0,
            "secondary_p_sigma": self.secondary_p_sigma >= 0,
            "secondary_forward": -1.0 <= self.secondary_forward <= 1.0,
            "secondary_proton_fraction": 0.0 <= self.secondary_proton_fraction <= 1.0,
            "max_generations": isinstance(self.max_generations, int) and 0 <= self.max_generations < 4096,
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

    def event_peak_bytes(self) -> int:
        """About the most memory simulating one event takes (its largest, with ``multiplicity_spread``)."""
        return EVENT_BASE_BYTES + PARTICLE_BYTES * int(np.ceil(self.num_particles * (1.0 + self.multiplicity_spread)))


__all__ = ["EVENT_BASE_BYTES", "PARTICLE_BYTES", "RESOLUTION_MODELS", "SimulationConfig"]
