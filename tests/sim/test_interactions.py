"""Decays, interactions in the material and the soft particles' cut, held against the real event 21000.

The real event's figures (tests/sim/occupancy_event000021000.json, written by
``python -m bench.tools.sim_vs_real --reference``) come from its particles file
alone: TrackML's particle_id carries every particle's generation, so decay
daughters (displaced, generation 0), secondaries of interactions (generation
>= 1) and the interactions' vertices are counted without truth, the same way on
simulated events (:mod:`bench.tools.occupancy`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from domainpar.errors import DomainparError
from domainpar.pipeline.recipe import load_recipe, recipe_from_dict
from domainpar.sim.config import SimulationConfig
from domainpar.sim.event import simulate_event
from domainpar.sim.geometry import detector_geometry
from domainpar.sim.interactions import transport
from domainpar.sim.material import material_group, material_surfaces, surface_groups
from bench.tools.occupancy import add_counts, event_counts, occupancy_summary
from domainpar.sim.particles import (
    GENERATION_SHIFT,
    K0S_MASS,
    LAMBDA_MASS,
    MASSES,
    PARTICLE_SHIFT,
    VERTEX_SHIFT,
    generate_particles,
    particle_generation,
)

REPO = Path(__file__).resolve().parents[2]
REFERENCE = json.loads((Path(__file__).parent / "occupancy_event000021000.json").read_text())
REAL = REFERENCE["whole"]["summary"]
#: Simulated events of the particles' physics alone (no detector response: ~10x faster), default configuration.
NUM_EVENTS = 3
#: Material groups summed into regions, so that each holds enough real vertices to compare (>= 80).
REGIONS = {
    "pixel barrel": ("8:2", "8:4", "8:6", "8:8"),
    "pixel endcaps": ("7", "9"),
    "strip barrels": ("13:2", "13:4", "13:6", "13:8", "17:2", "17:4"),
    "strip endcaps": ("12", "14", "16", "18"),
    "beam pipe": ("beam_pipe",),
    "pixel support tube": ("pixel_support_tube",),
    "pixel barrel end plates": ("pixel_barrel_end_plate",),
}


def _particles(config: SimulationConfig, events: int = NUM_EVENTS) -> list[pd.DataFrame]:
    geometry = detector_geometry()
    tables = []
    for event_id in range(1, events + 1):
        rng = np.random.default_rng([7, event_id])
        particles, _ = transport(rng, generate_particles(rng, config), config, geometry)
        tables.append(particles.assign(nhits=0))
    return tables


def _summary(tables: list[pd.DataFrame]) -> dict:
    """Occupancy summary of particles tables alone (one fake hit, so that the counts have an event)."""
    hits = pd.DataFrame({"hit_id": [1], "x": [32.0], "y": [0.0], "z": [0.0], "volume_id": [8], "layer_id": [2], "module_id": [1]})
    counts = None
    for table in tables:
        one = event_counts(hits, table.drop(columns=["mass", "displaced", "generation"]))
        counts = one if counts is None else add_counts(counts, one)
    return occupancy_summary(counts)


@pytest.fixture(scope="module")
def default_particles() -> list[pd.DataFrame]:
    return _particles(SimulationConfig())


@pytest.fixture(scope="module")
def default_summary(default_particles) -> dict:
    return _summary(default_particles)


def _within(simulated: float, real: float, relative: float) -> bool:
    """Within ``relative`` of the real figure, or within three sigmas of the two counts' Poisson errors (the real
    event's own, and that of the mean over NUM_EVENTS simulated events): small counts."""
    return abs(simulated - real) <= max(relative * real, 3.0 * np.sqrt(real * (1.0 + 1.0 / NUM_EVENTS)))


def test_interactions_per_region_match_the_real_event(default_summary):
    simulated = default_summary["interaction_vertices_per_group"]
    real = REAL["interaction_vertices_per_group"]
    for region, groups in REGIONS.items():
        s = sum(simulated.get(g, 0.0) for g in groups)
        r = sum(real.get(g, 0.0) for g in groups)
        assert _within(s, r, 0.15), (region, s, r)
    assert _within(default_summary["interaction_vertices"], REAL["interaction_vertices"], 0.08)


def test_secondaries_match_the_real_event(default_summary):
    assert _within(default_summary["secondaries"], REAL["secondaries"], 0.10)
    assert default_summary["secondaries_per_vertex"] == pytest.approx(REAL["secondaries_per_vertex"], abs=0.1)
    assert default_summary["secondary_p_median"] == pytest.approx(REAL["secondary_p_median"], rel=0.08)
    assert default_summary["secondary_proton_share"] == pytest.approx(REAL["secondary_proton_share"], abs=0.04)


def test_decays_match_the_real_event(default_summary):
    assert _within(default_summary["decay_daughters"], REAL["decay_daughters"], 0.10)
    assert default_summary["decay_proton_share"] == pytest.approx(REAL["decay_proton_share"], abs=0.04)
    assert _within(default_summary["particles_listed"], REAL["particles_listed"], 0.04)


def test_without_interactions_or_decays_the_comparison_fails():
    """The checks above can fail: a simulator without interactions or without decays does not pass them."""
    no_interactions = _summary(_particles(replace(SimulationConfig(), interaction_scale=0.0), events=1))
    assert no_interactions["interaction_vertices"] == 0 and no_interactions["secondaries"] == 0
    assert not _within(no_interactions["particles_listed"], REAL["particles_listed"], 0.04)
    no_decays = _summary(_particles(replace(SimulationConfig(), k0s_fraction=0.0, lambda_fraction=0.0), events=1))
    assert no_decays["decay_daughters"] == 0


def test_decay_daughters_are_pairs_at_the_parents_mass(default_particles):
    particles = default_particles[0]
    daughters = particles[particles["displaced"] & (particles["generation"] == 0)]
    pairs = daughters.groupby(["vx", "vy", "vz"]).filter(lambda g: len(g) == 2)
    assert len(pairs) > 300
    masses, charges = [], []
    for _, pair in pairs.groupby(["vx", "vy", "vz"]):
        momentum = pair[["px", "py", "pz"]].to_numpy()
        energy = np.sqrt(np.sum(momentum**2, axis=1) + pair["mass"].to_numpy() ** 2)
        masses.append(np.sqrt(energy.sum() ** 2 - np.sum(momentum.sum(axis=0) ** 2)))
        charges.append(pair["q"].sum())
    masses = np.array(masses)
    kaon, lambda_ = np.abs(masses - K0S_MASS) < 1e-6, np.abs(masses - LAMBDA_MASS) < 1e-6
    assert (kaon | lambda_).all() and kaon.sum() > 150 and lambda_.sum() > 20
    assert set(charges) == {0}
    # Flight: along the neutral parent's direction from a beam-line vertex.
    radius = np.hypot(daughters["vx"], daughters["vy"])
    assert np.median(radius) == pytest.approx(20.0, rel=0.35)


def test_an_interacting_particle_ends_at_its_vertex():
    """The interacting particle's crossings stop at the surface it interacts on; its secondaries start there."""
    config = SimulationConfig(num_particles=3000)
    rng = np.random.default_rng([3, 1])
    particles, crossings = transport(rng, generate_particles(rng, config), config, detector_geometry())
    ids = particles["particle_id"].to_numpy()
    generation = particles["generation"].to_numpy()
    first_generation = np.flatnonzero(generation == 1)
    assert first_generation.size > 200
    # The parent of a first-generation secondary: the collision particle with the same vertex and number.
    parent_of = pd.Series(np.flatnonzero(generation == 0), index=ids[generation == 0] >> PARTICLE_SHIFT)
    parents = parent_of.reindex(ids[first_generation] >> PARTICLE_SHIFT).to_numpy()
    vertex = particles[["vx", "vy", "vz"]].to_numpy()[first_generation]
    origin = particles[["vx", "vy", "vz"]].to_numpy()[parents]
    last = pd.Series(np.linalg.norm(crossings.position - particles[["vx", "vy", "vz"]].to_numpy()[crossings.part], axis=1))
    farthest = last.groupby(crossings.part).max().reindex(parents).to_numpy()
    to_vertex = np.linalg.norm(vertex - origin, axis=1)
    reached = ~np.isnan(farthest)
    assert reached.mean() > 0.6
    # (Straight distance along a helix: the last crossing is at most the vertex's distance, up to rounding.)
    assert (farthest[reached] <= to_vertex[reached] + 1e-6).all()
    # Without interactions the same particles cross far beyond.
    config = replace(config, interaction_scale=0.0)
    rng = np.random.default_rng([3, 1])
    free, free_crossings = transport(rng, generate_particles(rng, config), config, detector_geometry())
    free_last = pd.Series(np.linalg.norm(free_crossings.position - free[["vx", "vy", "vz"]].to_numpy()[free_crossings.part], axis=1))
    free_farthest = free_last.groupby(free_crossings.part).max().reindex(parents).to_numpy()
    assert (free_farthest[reached] > to_vertex[reached] + 50.0).mean() > 0.5


def test_soft_particles_leave_at_most_one_hit():
    event = simulate_event(SimulationConfig(num_particles=3000), event_id=2, seed=4)
    particles = event["particles"]
    pt = np.hypot(particles["px"], particles["py"]).to_numpy()
    nhits = particles["nhits"].to_numpy()
    soft = pt < SimulationConfig().hit_pt_min
    beam_line = np.hypot(particles["vx"], particles["vy"]).to_numpy() < 1.0
    assert (soft & beam_line).sum() > 150 and (soft & ~beam_line).sum() > 50
    # Real event 21000: 1 % of its soft primaries have a hit (none more than one), 30 % of its soft secondaries one.
    assert (nhits[soft] <= 2).all() and (nhits[soft & beam_line] > 0).mean() < 0.02
    assert 0.1 < (nhits[soft & ~beam_line] > 0).mean() < 0.8
    assert np.median(nhits[~soft & beam_line]) >= 8


def test_particle_ids_follow_trackml(default_particles):
    particles = default_particles[0]
    ids = particles["particle_id"].to_numpy()
    assert np.unique(ids).size == ids.size and (ids > 0).all()
    np.testing.assert_array_equal(particle_generation(ids), particles["generation"].to_numpy())
    vertex = ids >> VERTEX_SHIFT
    assert vertex.min() >= 1 and vertex.max() <= SimulationConfig().num_vertices
    # The real file's layout: a secondary's id keeps its ancestor's vertex and number.
    real_like = (5 << VERTEX_SHIFT) | (17 << PARTICLE_SHIFT) | (2 << GENERATION_SHIFT) | 3
    assert particle_generation(np.array([real_like, 5 << VERTEX_SHIFT]))[0] == 2
    secondary = particles["generation"].to_numpy() > 0
    ancestors = set(ids[~secondary] >> PARTICLE_SHIFT)
    assert set(ids[secondary] >> PARTICLE_SHIFT) <= ancestors


def test_vertex_multiplicity_spreads_as_in_the_real_event(default_particles):
    particles = default_particles[0]
    primaries = particles[~particles["displaced"].to_numpy()]
    per_vertex = pd.Series(primaries["particle_id"].to_numpy() >> VERTEX_SHIFT).value_counts()
    # Event 21000: 163 vertices with beam-line primaries, their counts spread by 0.84 of the mean.
    assert 140 <= len(per_vertex) <= 180
    assert 0.65 < per_vertex.std() / per_vertex.mean() < 1.0
    even = generate_particles(np.random.default_rng(0), replace(SimulationConfig(), vertex_multiplicity_shape=1e6))
    counts = pd.Series(even["particle_id"].to_numpy() >> VERTEX_SHIFT).value_counts()
    assert counts.std() / counts.mean() < 0.25


def test_occupancy_mix():
    config = replace(SimulationConfig(num_particles=2000), multiplicity_spread=0.3)
    sizes = [len(generate_particles(np.random.default_rng([1, e]), config)) for e in range(12)]
    again = [len(generate_particles(np.random.default_rng([1, e]), config)) for e in range(12)]
    assert sizes == again
    # Listed: all primaries, the decay daughters above pt_min (~98 % of the particles drawn).
    assert 0.69 * 2000 * 0.95 < min(sizes) and max(sizes) < 1.31 * 2000
    assert (max(sizes) - min(sizes)) / np.mean(sizes) > 0.3
    fixed = [len(generate_particles(np.random.default_rng([1, e]), SimulationConfig(num_particles=2000))) for e in range(4)]
    assert max(fixed) - min(fixed) < 40
    with pytest.raises(DomainparError, match="multiplicity_spread"):
        SimulationConfig(multiplicity_spread=1.0)


def test_the_full_event_recipe_trains_on_an_occupancy_mix():
    """Its training events span occupancies around the real event's; its held-out events are all at the nominal one."""
    recipe = load_recipe(REPO / "examples" / "full_event.yaml")
    assert recipe.training_simulation().multiplicity_spread == pytest.approx(0.15)
    assert recipe.validation_simulation().multiplicity_spread == 0.0
    assert recipe.validation_simulation().num_particles == recipe.training_simulation().num_particles == 10_000
    nested = recipe.to_dict()
    nested["simulation"]["particles_spread"] = 1.5
    with pytest.raises(DomainparError, match=r"simulation.particles_spread must be a number in \[0, 1\) \(got 1.5\)"):
        recipe_from_dict(nested)


def test_secondaries_weigh_nothing_decay_daughters_do():
    """As in the challenge's truth (event 1): interaction secondaries weigh zero, decay daughters their pT weight."""
    event = simulate_event(SimulationConfig(num_particles=3000), event_id=5, seed=9)
    weights = event["truth"].groupby("particle_id")["weight"].sum()
    particles = event["particles"].set_index("particle_id")
    generation = particle_generation(particles.index.to_numpy())
    displaced = np.hypot(particles["vx"], particles["vy"]).to_numpy() > 1.0
    enough = particles["nhits"].to_numpy() >= 4
    weight = weights.reindex(particles.index, fill_value=0.0).to_numpy()
    assert (weight[(generation > 0) & enough] == 0).all() and ((generation > 0) & enough).sum() > 50
    assert (weight[(generation == 0) & displaced & enough] > 0).all() and ((generation == 0) & displaced & enough).sum() > 20


def test_material_groups_and_surfaces():
    surfaces = material_surfaces()
    assert set(surfaces["name"]) == set(surface_groups())
    assert (surfaces["interaction_lengths"] >= 0).all() and (surfaces["interaction_lengths"] < 0.05).all()
    points = np.array([[19.0, 0.0, 100.0], [0.0, 200.0, -2000.0], [50.0, 50.0, 571.0], [32.0, 0.0, 0.0], [0.0, 72.5, 10.0],
                       [100.0, 0.0, 1300.0], [400.0, 0.0, 1500.0], [0.0, 300.0, 0.0]])  # fmt: skip
    assert material_group(points).tolist() == ["beam_pipe", "pixel_support_tube", "pixel_barrel_end_plate", "8:2", "8:4", "9", "14", ""]
    assert MASSES[2212] > MASSES[211]
