"""The default builder at the holes of its tracks, on hand-made events (issue 26).

The hole cut: a track whose helix crosses as many layers of the event without a hit as with one is dropped, a
piece of a longer track or no particle's. A particle that ends (a hadron interacting in the material) crosses
the rest of the detector as holes too, but nothing lies where its helix goes on; a fragment's particle left its
hits there. And a free hit where a kept track's helix crosses a layer without a hit on it joins the track when it
fits, edge or no edge.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from domainpar.data.detector import layer_table
from domainpar.tracks.candidates import TrackConfig, build_candidates, hit_variances
from domainpar.tracks.follow import hole_gates, holed, track_holes

from handmade import HandEvent, helix_at, whole

PIXEL = [7, 8, 9, 10]
STRIPS = [24, 25, 26, 27]
#: A stiff particle through the pixel barrel and on through the strip barrel.
STIFF = dict(pt=3.0, phi0=0.6, charge=1, cot=0.3)


def _event(continuation: str) -> HandEvent:
    """Particle 1 leaves hits on the four pixel layers only. ``continuation``: what lies where its helix crosses the
    strip layers: ``"nothing"`` (it ended: an interaction), or ``"hits"`` of a particle that went on (its outer hits
    on the helix, on no edge of the pixel ones: a fragment). Particle 2, far away, crosses all eight layers, so the
    strip layers are the event's."""
    ev = HandEvent()
    inner = ev.track(1, layers=PIXEL, **STIFF)
    ev.chain([inner[c] for c in PIXEL], 0.95)
    if continuation == "hits":
        outer = [ev.hit(helix_at(radius=r, **STIFF), code, 3) for code, r in ((24, 260.0), (25, 360.0), (26, 500.0), (27, 660.0))]
        ev.chain(outer, 0.95)
    other = ev.track(2, pt=2.0, phi0=-2.5, charge=-1, cot=-0.2, layers=PIXEL + STRIPS)
    ev.chain([other[c] for c in PIXEL + STRIPS], 0.95)
    return ev


def _holes(ev: HandEvent, labels: np.ndarray, config: TrackConfig = TrackConfig()):
    pos, layer, _, _, _ = ev.arrays()
    return track_holes(pos, hit_variances(layer, config.sigma_hit), layer, labels, config)


def test_holes_beyond_the_last_hit_are_evident_only_where_the_event_has_a_hit_near():
    for continuation, expected in (("nothing", 0), ("hits", 4)):
        ev = _event(continuation)
        particle = ev.arrays()[4]
        labels = np.where(particle == 1, 0, -1)  # particle 1's four pixel hits as one track, nothing else
        crossed, holes, evident = _holes(ev, labels)
        assert (crossed[0], holes[0]) == (8, 4), continuation
        assert evident[0] == expected, continuation


def test_a_hit_near_the_helix_counts_within_reach_only():
    ev = _event("hits")
    labels = np.where(ev.arrays()[4] == 1, 0, -1)
    pos = np.array(ev.pos)
    outer = np.flatnonzero(np.array(ev.particle) == 3)
    # Move the continuation 4 mm along z: within a reach of 5 mm, beyond one of 3.
    ev.pos = list(pos + np.where(np.isin(np.arange(len(pos)), outer)[:, None], [0.0, 0.0, 4.0], 0.0))
    assert _holes(ev, labels, replace(TrackConfig(), hole_reach=5.0))[2][0] == 4
    assert _holes(ev, labels, replace(TrackConfig(), hole_reach=3.0))[2][0] == 0


def test_holes_between_the_hits_are_evident_with_nothing_near():
    ev = HandEvent()
    h = ev.track(1, layers=[7, 8, 10, 24], **STIFF)  # no hit on layer 9: crossed between its hits
    ev.track(2, pt=2.0, phi0=-2.5, charge=-1, cot=-0.2, layers=[7, 8, 9, 10, 24])
    labels = np.where(np.array(ev.particle) == 1, 0, -1)
    crossed, holes, evident = _holes(ev, labels)
    assert (crossed[0], holes[0], evident[0]) == (5, 1, 1)
    assert h  # the track's own layers are not holes


@pytest.mark.parametrize("continuation", ["nothing", "hits"])
def test_the_cut_drops_a_fragment_and_keeps_a_particle_that_ended(continuation):
    ev = _event(continuation)
    pos, layer, _, _, particle = ev.arrays()
    labels = np.where(particle == 1, 0, np.arange(len(particle)))
    labels = np.unique(labels, return_inverse=True)[1]
    chi2_ndf = np.zeros(labels.max() + 1)  # the hand-made hits lie on their helices
    dropped = holed(pos, hit_variances(layer, 0.01), layer, labels, chi2_ndf, TrackConfig())
    assert dropped[labels[particle == 1][0]] == (continuation == "hits")
    # Without the exception for ended particles both are dropped (four holes for four hits).
    dropped = holed(pos, hit_variances(layer, 0.01), layer, labels, chi2_ndf, replace(TrackConfig(), ended_hole_ratio=0.0))
    assert dropped[labels[particle == 1][0]]


def test_a_badly_fitted_track_that_ended_is_dropped():
    ev = _event("nothing")
    pos, layer, _, _, particle = ev.arrays()
    labels = np.unique(np.where(particle == 1, 0, np.arange(len(particle))), return_inverse=True)[1]
    chi2_ndf = np.full(labels.max() + 1, TrackConfig().ended_chi2_ndf * 1.5)
    assert holed(pos, hit_variances(layer, 0.01), layer, labels, chi2_ndf, TrackConfig())[labels[particle == 1][0]]


def test_the_default_builder_keeps_a_particle_that_ended_whole():
    ev = _event("nothing")
    pos, layer, edge_index, scores, particle = ev.arrays()
    track_id = build_candidates(pos, layer, edge_index, scores, TrackConfig()).track_id
    assert whole(track_id, particle, 1)
    assert whole(track_id, particle, 2)
    # The cut as it was (every hole counted) left its four hits singletons.
    track_id = build_candidates(pos, layer, edge_index, scores, TrackConfig(ended_hole_ratio=0.0)).track_id
    assert np.unique(track_id[particle == 1]).size == 4


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


#: The long-strip barrel layers (volume 17): a hit's z is its strip's centre, up to 5.4 mm from the crossing.
LONG_STRIPS = [40, 41]
#: How far along z the long-strip hit lies from the helix: beyond the gate, within its resolution's widening.
OFF_ALONG_STRIP = 9.0


def _off_along_its_strip(edge_to_it: bool) -> tuple[HandEvent, dict]:
    """Particle 1 through pixels, short and long strips; its hit on layer 40 lies OFF_ALONG_STRIP mm along z from
    the helix (the strip's centre, and the helix carried 160 mm on from the short strips). ``edge_to_it``: the
    graph joins it to its neighbours (else it has no edge: a module map without that pair)."""
    ev = HandEvent()
    h = ev.track(1, layers=PIXEL + STRIPS + LONG_STRIPS, **STIFF)
    pos = np.array(ev.pos)
    pos[h[40]] += [0.0, 0.0, OFF_ALONG_STRIP]
    ev.pos = list(pos)
    ev.chain([h[c] for c in PIXEL + STRIPS], 0.95)
    if edge_to_it:
        ev.chain([h[27], h[40], h[41]], 0.95)
    else:
        ev.edge(h[27], h[41], 0.95)
    return ev, h


def test_a_long_strip_hit_off_along_its_strip_is_followed():
    # Following alone (no refinement after it): the edge leads to the hit; the gate, widened by the hit's
    # resolution along z (10.8 / sqrt(12) mm), lets the fit judge it.
    ev, h = _off_along_its_strip(edge_to_it=True)
    pos, layer, edge_index, scores, particle = ev.arrays()
    config = TrackConfig(refine=False)
    assert OFF_ALONG_STRIP > config.gate * np.sqrt(1.0 + STIFF["cot"] ** 2)  # a pixel hit this far off is out
    assert whole(build_candidates(pos, layer, edge_index, scores, config).track_id, particle, 1)
    # With the gate of pixel resolution everywhere the track steps over it to layer 41, leaving it a singleton.
    track_id = build_candidates(pos, layer, edge_index, scores, replace(config, gate_sigmas=0.0)).track_id
    assert np.count_nonzero(track_id == track_id[h[40]]) == 1
    assert np.count_nonzero(track_id == track_id[h[7]]) == 9


def test_a_long_strip_hit_off_along_its_strip_with_no_edge_joins_at_the_hole():
    ev, h = _off_along_its_strip(edge_to_it=False)
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
