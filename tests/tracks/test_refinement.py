"""Refinement on hand-made events (:mod:`domainpar.tracks.refinement`): fragments merged, free hits attached, by
their edges and at the holes of the tracks kept.

A free hit where a kept track's helix crosses a layer without a hit on it joins the track when it fits, edge or no
edge.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from domainpar.data.detector import layer_table
from domainpar.kernels.track_fit import hit_columns
from domainpar.tracks.candidates import build_candidates
from domainpar.tracks.config import TrackConfig
from domainpar.tracks.inputs import hit_variances, neighbours
from domainpar.tracks.refinement import hole_gates, refine

from handmade import PIXEL, STIFF, STRIPS, HandEvent, helix_at, off_along_its_strip, whole


def _refine(ev: HandEvent, labels, config: TrackConfig = TrackConfig()) -> np.ndarray:
    pos, layer, edge_index, scores, _ = ev.arrays()
    columns = hit_columns(pos, hit_variances(layer, config.sigma_hit))
    nbrs = neighbours(len(pos), edge_index, scores, config.extend_threshold)
    return refine(columns, layer, edge_index, scores, nbrs, np.array(labels, dtype=np.int64), config)


def test_fragments_of_one_particle_merge_and_another_particle_s_do_not():
    # Particle 1's pixel hits (track 0) and strip hits (track 2), and particle 2's strip hits (track 1): the last
    # pixel hit of particle 1 has an edge to the first strip hit of both.
    ev = HandEvent()
    one = ev.track(1, layers=PIXEL + STRIPS, **STIFF)
    two = ev.track(2, pt=0.8, phi0=0.45, charge=-1, cot=0.3, layers=STRIPS)
    ev.chain([one[c] for c in PIXEL + STRIPS], 0.9)
    ev.chain([two[c] for c in STRIPS], 0.9)
    ev.edge(one[10], two[24], 0.9)
    particle = np.array(ev.particle)
    labels = np.where(particle == 2, 1, np.where(np.isin(ev.layer, PIXEL), 0, 2))
    refined = _refine(ev, labels)
    assert whole(refined, particle, 1) and whole(refined, particle, 2)
    assert refined[one[7]] == 0 and refined[two[24]] == 1  # a merged pair keeps its root's label


def test_a_free_hit_joins_its_neighbour_s_track_when_it_fits_and_short_tracks_dissolve():
    ev = HandEvent()
    one = ev.track(1, layers=PIXEL + STRIPS, **STIFF)
    ev.chain([one[c] for c in PIXEL + STRIPS], 0.9)
    away = ev.hit(helix_at(radius=360.0, **STIFF) + [0.0, 0.0, 3.0], 25, 0)  # 3 mm off the helix along z
    ev.edge(one[24], away, 0.95)
    two = ev.track(2, pt=2.0, phi0=-2.5, charge=-1, cot=-0.2, layers=[7, 8])
    labels = np.zeros(len(ev.pos), dtype=np.int64)
    labels[[one[9], away]] = -1  # a hit of the track and a noise hit beside it, free
    labels[[two[7], two[8]]] = 1  # a track of two hits (below min_hits)
    refined = _refine(ev, labels)
    assert refined[one[9]] == 0 and refined[away] == -1
    assert refined[two[7]] == refined[two[8]] == -1
    # Without its edge a free hit is not tried (attaching at the holes finds it later).
    ev.edges = [e for e in ev.edges if one[9] not in e[:2]]
    assert _refine(ev, labels)[one[9]] == -1


def test_a_hit_with_no_edge_to_its_track_joins_it_at_the_hole():
    # The graph holds no edge from the particle's innermost hit (a module map without that pair); the rest is a
    # well-scored chain. The helix through the rest crosses layer 7 at the hit.
    ev = HandEvent()
    h = ev.track(1, layers=PIXEL + STRIPS, **STIFF)
    ev.chain([h[c] for c in PIXEL[1:] + STRIPS], 0.95)
    decoy = ev.hit(helix_at(radius=32.0, **{**STIFF, "phi0": STIFF["phi0"] + 0.3}), 7, 0)  # a free hit elsewhere on layer 7
    pos, layer, edge_index, scores, particle = ev.arrays()
    track_id = build_candidates(pos, layer, edge_index, scores, TrackConfig()).track_id
    assert whole(track_id, particle, 1)
    assert np.count_nonzero(track_id == track_id[decoy]) == 1
    # Without refinement (no attaching of any kind) the inner hit stays a singleton.
    track_id = build_candidates(pos, layer, edge_index, scores, TrackConfig(refine=False)).track_id
    assert not whole(track_id, particle, 1)


def test_a_hit_off_the_helix_is_not_attached_at_the_hole():
    ev = HandEvent()
    h = ev.track(1, layers=PIXEL + STRIPS, **STIFF)
    ev.chain([h[c] for c in PIXEL[1:] + STRIPS], 0.95)
    pos = np.array(ev.pos)
    pos[h[7]] += [0.0, 0.0, TrackConfig().gate + 1.0]  # the inner hit moved beyond the gate along z
    ev.pos = list(pos)
    pos, layer, edge_index, scores, particle = ev.arrays()
    track_id = build_candidates(pos, layer, edge_index, scores, TrackConfig()).track_id
    assert np.count_nonzero(track_id == track_id[h[7]]) == 1
    assert np.count_nonzero(track_id == track_id[h[8]]) == 7


def test_a_long_strip_hit_off_along_its_strip_with_no_edge_joins_at_the_hole():
    ev, h = off_along_its_strip(edge_to_it=False)
    pos, layer, edge_index, scores, particle = ev.arrays()
    assert whole(build_candidates(pos, layer, edge_index, scores, TrackConfig()).track_id, particle, 1)
    track_id = build_candidates(pos, layer, edge_index, scores, TrackConfig(gate_sigmas=0.0)).track_id
    assert np.count_nonzero(track_id == track_id[h[40]]) == 1
    assert np.count_nonzero(track_id == track_id[h[7]]) == 9


def test_hole_gates_widen_by_the_coarse_coordinate_of_each_layer():
    config = TrackConfig()
    gates = hole_gates(config)
    assert gates.shape == (len(layer_table()),)
    assert gates[7] == pytest.approx(config.gate, abs=0.2)  # pixel: 0.056 mm pitches
    assert gates[24] == pytest.approx(config.gate + config.gate_sigmas * np.hypot(1.2 / np.sqrt(12), config.sigma_hit))
    assert gates[40] == pytest.approx(config.gate + config.gate_sigmas * np.hypot(10.8 / np.sqrt(12), config.sigma_hit))
    assert np.all(hole_gates(replace(config, gate_sigmas=0.0)) == config.gate)
