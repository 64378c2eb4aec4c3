"""Selection on hand-made events (:mod:`domainpar.tracks.selection`): the hole cut and the short-track cut (issue 26).

The hole cut: a track whose helix crosses as many layers of the event without a hit as with one is dropped, a
piece of a longer track or no particle's. A particle that ends (a hadron interacting in the material) crosses
the rest of the detector as holes too, but nothing lies where its helix goes on; a fragment's particle left its
hits there.

The short-track cut: a candidate on three layers or fewer has a fit with almost no degrees of freedom, so three
hits of different particles (or noise) that happen to lie on a circle pass it; on the real event 21000 such
chance triplets are most of the fakes. The default builder keeps a short candidate only when the GNN backs it,
its helix is not a tight curl and it fits well; a genuine short particle with well-scored edges stays a track.

Holes: a hole before a track's first hit or between its hits is evident; beyond its last hit only where the event
has a hit near the helix (its particle may have gone on).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from domainpar.kernels.track_fit import hit_columns
from domainpar.tracks.candidates import build_candidates
from domainpar.tracks.config import TrackConfig
from domainpar.tracks.inputs import hit_variances
from domainpar.tracks.selection import holed, track_holes

from handmade import PIXEL, STIFF, HandEvent, ended_or_fragment, helix_at, whole


def _holes(ev: HandEvent, labels: np.ndarray, config: TrackConfig = TrackConfig()):
    pos, layer, _, _, _ = ev.arrays()
    return track_holes(hit_columns(pos, hit_variances(layer, config.sigma_hit)), layer, labels, config)


def test_holes_beyond_the_last_hit_are_evident_only_where_the_event_has_a_hit_near():
    for continuation, expected in (("nothing", 0), ("hits", 4)):
        ev = ended_or_fragment(continuation)
        particle = ev.arrays()[4]
        labels = np.where(particle == 1, 0, -1)  # particle 1's four pixel hits as one track, nothing else
        crossed, holes, evident = _holes(ev, labels)
        assert (crossed[0], holes[0]) == (8, 4), continuation
        assert evident[0] == expected, continuation


def test_a_hit_near_the_helix_counts_within_reach_only():
    ev = ended_or_fragment("hits")
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


def _holed(pos, layer, labels, chi2_ndf, config):
    return holed(hit_columns(pos, hit_variances(layer, config.sigma_hit)), layer, labels, chi2_ndf, config)


@pytest.mark.parametrize("continuation", ["nothing", "hits"])
def test_the_cut_drops_a_fragment_and_keeps_a_particle_that_ended(continuation):
    ev = ended_or_fragment(continuation)
    pos, layer, _, _, particle = ev.arrays()
    labels = np.where(particle == 1, 0, np.arange(len(particle)))
    labels = np.unique(labels, return_inverse=True)[1]
    chi2_ndf = np.zeros(labels.max() + 1)  # the hand-made hits lie on their helices
    dropped = _holed(pos, layer, labels, chi2_ndf, TrackConfig())
    assert dropped[labels[particle == 1][0]] == (continuation == "hits")
    # Without the exception for ended particles both are dropped (four holes for four hits).
    dropped = _holed(pos, layer, labels, chi2_ndf, replace(TrackConfig(), ended_hole_ratio=0.0))
    assert dropped[labels[particle == 1][0]]


def test_a_badly_fitted_track_that_ended_is_dropped():
    ev = ended_or_fragment("nothing")
    pos, layer, _, _, particle = ev.arrays()
    labels = np.unique(np.where(particle == 1, 0, np.arange(len(particle))), return_inverse=True)[1]
    chi2_ndf = np.full(labels.max() + 1, TrackConfig().ended_chi2_ndf * 1.5)
    assert _holed(pos, layer, labels, chi2_ndf, TrackConfig())[labels[particle == 1][0]]


def test_the_default_builder_keeps_a_particle_that_ended_whole():
    ev = ended_or_fragment("nothing")
    pos, layer, edge_index, scores, particle = ev.arrays()
    track_id = build_candidates(pos, layer, edge_index, scores, TrackConfig()).track_id
    assert whole(track_id, particle, 1)
    assert whole(track_id, particle, 2)
    # The cut as it was (every hole counted) left its four hits singletons.
    track_id = build_candidates(pos, layer, edge_index, scores, TrackConfig(ended_hole_ratio=0.0)).track_id
    assert np.unique(track_id[particle == 1]).size == 4


def _chance_event(chance: dict, score: float) -> HandEvent:
    """A particle through the four pixel barrel layers, a short genuine particle on three of them, and three noise
    hits on layers 8-10 lying exactly on the helix ``chance`` (a chance alignment), joined by edges of ``score``."""
    ev = HandEvent()
    long = ev.track(1, pt=2.0, phi0=0.5, charge=1, cot=0.4, layers=PIXEL)
    ev.chain([long[c] for c in PIXEL], 0.95)
    short = ev.track(2, pt=1.5, phi0=-2.0, charge=-1, cot=-0.3, layers=[7, 8, 9])
    ev.chain([short[c] for c in (7, 8, 9)], 0.9)
    radii = {8: 72.0, 9: 116.0, 10: 172.0}
    noise = [ev.hit(helix_at(radius=r, **chance), code, 0) for code, r in radii.items()]
    ev.chain(noise, score)
    return ev


#: The chance triplets, with the settings they are judged by: a tight curl the GNN scores fairly (0.3), and a
#: stiff helix the GNN barely scores (0.06: seeded, above the seeding threshold 0.02, and below the default
#: ``short_min_score`` 0.1).
CHANCE = {
    "a tight curl (pT 0.1 GeV)": (dict(pt=0.1, phi0=2.2, charge=1, cot=0.8), 0.3, {}),
    "weakly scored edges (0.06)": (dict(pt=1.0, phi0=2.2, charge=1, cot=0.8), 0.06, {}),
}


def _build(ev: HandEvent, config: TrackConfig):
    pos, layer, edge_index, scores, particle = ev.arrays()
    return build_candidates(pos, layer, edge_index, scores, config).track_id, particle


def _noise_on_one_candidate(track_id: np.ndarray, particle: np.ndarray) -> bool:
    noise = np.flatnonzero(particle == 0)
    return np.unique(track_id[noise]).size == 1


@pytest.mark.parametrize("case", list(CHANCE))
def test_default_builder_drops_a_chance_triplet(case):
    helix, score, settings = CHANCE[case]
    track_id, particle = _build(_chance_event(helix, score), replace(TrackConfig(), **settings))
    # Each noise hit is a singleton, not a fake candidate of three hits.
    assert not _noise_on_one_candidate(track_id, particle)
    assert whole(track_id, particle, 1) and whole(track_id, particle, 2)


@pytest.mark.parametrize("case", list(CHANCE))
def test_without_the_cut_the_chance_triplet_is_a_track(case):
    # The fit alone accepts it: what the cut is for.
    helix, score, settings = CHANCE[case]
    track_id, particle = _build(_chance_event(helix, score), replace(TrackConfig(), short_layers=0, **settings))
    assert _noise_on_one_candidate(track_id, particle)


def test_a_long_candidate_is_not_judged_by_the_short_cut():
    # The same weakly scored chance helix on four layers: not short, so the cut leaves it to the fit.
    ev = _chance_event(dict(pt=1.0, phi0=2.2, charge=1, cot=0.8), 0.06)
    inner = ev.hit(helix_at(pt=1.0, phi0=2.2, charge=1, cot=0.8, radius=32.0), 7, 0)
    ev.edge(inner, int(np.flatnonzero(np.array(ev.particle) == 0)[0]), 0.06)
    track_id, particle = _build(ev, TrackConfig())
    assert _noise_on_one_candidate(track_id, particle)


def test_a_short_particle_with_double_hits_is_judged_by_its_layer_crossings():
    # Overlapping modules give a particle two hits on a layer, and the graph joins layers only: the step between
    # the two hits has no edge. The GNN backs this particle's every crossing (0.15, above short_min_score 0.1);
    # counting its within-layer steps as 0 (mean 0.075) dropped it, as it dropped true particles of event 21000.
    ev = HandEvent()
    long = ev.track(1, pt=2.0, phi0=0.5, charge=1, cot=0.4, layers=PIXEL)
    ev.chain([long[c] for c in PIXEL], 0.95)
    p = dict(pt=1.5, phi0=-2.0, charge=-1, cot=-0.3)
    short = ev.track(2, layers=[7, 8, 9], **p)
    second = {code: ev.hit(helix_at(radius=radius + 2.0, **p), code, 2) for code, radius in ((8, 72.0), (9, 116.0))}
    layers = [[short[7]], [short[8], second[8]], [short[9], second[9]]]
    for inner, outer in zip(layers[:-1], layers[1:]):
        for a in inner:
            for b in outer:
                ev.edge(a, b, 0.15)
    track_id, particle = _build(ev, TrackConfig())
    assert whole(track_id, particle, 2) and whole(track_id, particle, 1)
    assert np.count_nonzero(track_id == track_id[short[7]]) == 5
