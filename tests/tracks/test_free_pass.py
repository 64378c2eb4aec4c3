"""The free-hit pass (:mod:`domainpar.tracks.free_pass`): a particle made away from the beam line, whose segments the
graph lost, found among the free hits by its helix and its clusters' lengths, and noise left alone."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.optimize import brentq

from domainpar.errors import DomainparError
from domainpar.kernels.track_fit import PT_PER_TESLA_MM
from domainpar.tracks.candidates import build_candidates
from domainpar.tracks.config import TrackConfig
from domainpar.tracks.free_pass import cluster_lengths

from handmade import BARREL, PIXEL, STIFF, HandEvent, whole

#: The pixel barrel's sensors: thickness and pitch along z (mm).
THICKNESS, PITCH = 0.15, 0.05625
#: A particle from a decay 9 mm off the beam line: it leaves a hit on every pixel barrel layer.
DISPLACED = dict(vertex=(8.0, 4.0, 10.0), pt=0.4, phi0=-2.0, charge=-1, cot=2.0)
FREE = TrackConfig(free_pass=True)


def _helix(vertex, pt, phi0, charge, cot, field=2.0):
    """(turning angle -> (3,) point) of a particle from ``vertex``, and its radius (mm)."""
    bend = pt / (PT_PER_TESLA_MM * field)
    vx, vy, vz = vertex
    xc, yc = vx - charge * bend * np.sin(phi0), vy + charge * bend * np.cos(phi0)
    start = np.arctan2(vy - yc, vx - xc)

    def at(turned: float) -> np.ndarray:
        angle = start - charge * turned
        return np.array([xc + bend * np.cos(angle), yc + bend * np.sin(angle), vz + bend * turned * cot])

    return at, bend


def _crossing(at, radius: float) -> float:
    """The first turning angle at which the helix reaches ``radius``."""
    grid = np.linspace(0.0, np.pi, 2001)
    r = np.array([np.hypot(*at(t)[:2]) for t in grid])
    k = int(np.argmax(r >= radius))
    return brentq(lambda t: np.hypot(*at(t)[:2]) - radius, grid[k - 1], grid[k])


def _cluster_length(at, turned: float, cot: float) -> float:
    """Channels along z of the particle's cluster on a barrel sensor there: thickness |dz/ds| / cos(alpha) / pitch."""
    point, ahead = at(turned), at(turned + 1e-6)
    tangent = (ahead - point)[:2] / np.linalg.norm((ahead - point)[:2])
    cos_alpha = abs(tangent @ point[:2]) / np.hypot(*point[:2])
    return float(max(1.0, round(THICKNESS * abs(cot) / cos_alpha / PITCH)))


def _event(double: bool = False, wrong_clusters: bool = False, seed: int = 0, displaced: dict = DISPLACED, layers=PIXEL):
    """Particle 1 from the beam line with its chain of edges (the graph's layer pairs), particle 2 from DISPLACED with
    none (``double``: a second hit on layer 9, 4 mm on along its helix: overlapping sensors), 60 noise hits on the
    same layers with random cluster lengths. Returns the event and every hit's cluster length."""
    ev = HandEvent()
    length = []
    one = ev.track(1, layers=PIXEL, **STIFF)
    ev.chain([one[c] for c in PIXEL], 0.95)
    length += [float(round(THICKNESS * STIFF["cot"] / PITCH))] * len(PIXEL)
    at, bend = _helix(**displaced)
    for code in layers:
        turned = _crossing(at, BARREL[code])
        ev.hit(at(turned), code, 2)
        length.append(1.0 if wrong_clusters else _cluster_length(at, turned, displaced["cot"]))
        if double and code == 9:
            ev.hit(at(turned + 4.0 / bend), code, 2)
            length.append(_cluster_length(at, turned + 4.0 / bend, displaced["cot"]))
    rng = np.random.default_rng(seed)
    for _ in range(60):
        code = int(rng.choice(PIXEL))
        phi = rng.uniform(-np.pi, np.pi)
        ev.hit([BARREL[code] * np.cos(phi), BARREL[code] * np.sin(phi), rng.uniform(-300.0, 300.0)], code, 0)
        length.append(float(rng.integers(1, 9)))
    return ev, np.array(length)


def _tracks(ev: HandEvent, length, config: TrackConfig) -> np.ndarray:
    pos, layer, edge_index, scores, _ = ev.arrays()
    return build_candidates(pos, layer, edge_index, scores, config, length).track_id


def test_the_pass_finds_the_displaced_particle_that_the_graph_lost_and_leaves_noise_alone():
    ev, length = _event()
    particle = np.array(ev.particle)
    without = _tracks(ev, length, TrackConfig())
    assert np.unique(without[particle == 2]).size == 4  # four singletons: no edge joins them
    found = _tracks(ev, length, FREE)
    assert whole(found, particle, 1) and whole(found, particle, 2)
    sizes = np.bincount(found)
    assert (sizes[found[particle == 0]] == 1).all()  # every noise hit stays alone


def test_a_second_hit_on_a_layer_joins_the_chain():
    ev, length = _event(double=True)
    particle = np.array(ev.particle)
    assert (particle == 2).sum() == 5
    assert whole(_tracks(ev, length, FREE), particle, 2)


#: A particle from a decay 40 mm off the beam line: it crosses the three outer pixel barrel layers only.
LATE = dict(vertex=(40.0, 5.0, 20.0), pt=0.6, phi0=0.3, charge=1, cot=1.5)


@pytest.mark.parametrize("double, twins, found", [(True, True, True), (False, True, False), (True, False, False)])
def test_a_triplet_is_kept_when_a_second_hit_on_one_of_its_layers_backs_it(double, twins, found):
    # Three layers make one triplet, which alone cannot be told from chance; a fitting second hit on one of them can.
    ev, length = _event(double=double, displaced=LATE, layers=[8, 9, 10])
    particle = np.array(ev.particle)
    built = _tracks(ev, length, replace(FREE, free_twins=twins))
    assert whole(built, particle, 2) is found
    if not found:
        assert np.unique(built[particle == 2]).size == (particle == 2).sum()
    assert (np.bincount(built)[built[particle == 0]] == 1).all()


def test_clusters_that_disagree_with_the_helix_keep_the_chain_out():
    # A track at dz/ds = 2 crosses 5-6 channels of every barrel sensor; single-channel clusters are not its hits.
    ev, length = _event(wrong_clusters=True)
    particle = np.array(ev.particle)
    found = _tracks(ev, length, FREE)
    assert np.unique(found[particle == 2]).size == 4
    # The same hits with the cluster test made blind (any length within 100 channels) make the chain again.
    assert whole(_tracks(ev, length, replace(FREE, free_cluster_cut=100.0)), particle, 2)


def test_chains_below_the_lowest_pt_are_not_kept():
    ev, length = _event()
    particle = np.array(ev.particle)
    found = _tracks(ev, length, replace(FREE, free_pt_min=0.5))  # the particle's pT is 0.4 GeV
    assert np.unique(found[particle == 2]).size == 4


def test_the_pass_needs_the_hits_cluster_lengths():
    ev, _ = _event()
    with pytest.raises(DomainparError, match=r"tracks\.free_pass: expected every hit's cluster length \(the graph's cluster_v"):
        _tracks(ev, None, FREE)
    with pytest.raises(DomainparError, match=r"cluster_length: expected shape \(68,\)"):
        _tracks(ev, np.ones(3), FREE)


def test_cluster_lengths_come_from_the_graph_s_cluster_v_column_in_channels():
    x = np.array([[0.1, 0.25], [0.2, 0.5]], dtype=np.float32)
    graph = SimpleNamespace(x=x, node_features=("r", "cluster_v"))
    np.testing.assert_allclose(cluster_lengths(graph), [2.0, 4.0])  # the column holds channels / 8
    assert cluster_lengths(SimpleNamespace(x=x, node_features=("r", "z"))) is None


def test_events_with_nothing_for_the_pass_build_as_without_it():
    # No edge at all (no layer pairs), and hits on the strip layers only (no pixel hit takes part).
    ev, length = _event()
    pos, layer, _, _, _ = ev.arrays()
    no_edges = build_candidates(pos, layer, np.zeros((2, 0), dtype=np.int64), np.zeros(0), FREE, length).track_id
    assert np.unique(no_edges).size == len(pos)
    strips = HandEvent()
    one = strips.track(1, layers=[24, 25, 26, 27], **STIFF)
    strips.chain([one[c] for c in [24, 25, 26, 27]], 0.95)
    pos, layer, edge_index, scores, particle = strips.arrays()
    with_pass = build_candidates(pos, layer, edge_index, scores, FREE, np.ones(len(pos))).track_id
    np.testing.assert_array_equal(with_pass, build_candidates(pos, layer, edge_index, scores, TrackConfig()).track_id)
