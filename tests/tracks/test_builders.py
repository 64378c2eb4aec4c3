"""The track builders on hand-made events with what real events have.

Each event holds one difficulty of real full-occupancy events — double hits
on overlapping modules, a missing layer, two crossing tracks, a low-pT
curler, a noise hit and a shared hit — with edge scores of the kind a GNN
gives there. Each test shows that today's walk-through (``walk``) does not
build the particle whole, and that the default builder does.
"""

from __future__ import annotations

import numpy as np
import pytest

from domainpar.kernels.track_fit import fit_candidates
from domainpar.tracks.candidates import build_candidates
from domainpar.tracks.config import TrackConfig
from domainpar.tracks.inputs import hit_variances
from domainpar.tracks.methods import DEFAULT_METHOD, METHODS

from handmade import HandEvent, helix_at, noise_and_shared_hit, whole


def _tracks(event: HandEvent, method: str) -> tuple[np.ndarray, np.ndarray]:
    pos, layer, edge_index, scores, particle = event.arrays()
    candidates = build_candidates(pos, layer, edge_index, scores, TrackConfig(method=method, threshold=0.5))
    return candidates.track_id, particle


def double_hits() -> HandEvent:
    """A particle with two hits on each of two consecutive layers (overlapping modules): of the four segments
    between the pairs the GNN trusts one per pair, and the second hits are joined to the rest only weakly."""
    ev = HandEvent()
    p = dict(pt=2.0, phi0=0.8, charge=1, cot=0.6)
    h = ev.track(1, layers=[7, 8, 9, 10, 24, 25], **p)
    # The overlapping module sits 2 mm further out: the particle's second hit on the layer.
    b2 = ev.hit(helix_at(radius=118.0, **p), 9, 1)
    c2 = ev.hit(helix_at(radius=174.0, **p), 10, 1)
    ev.chain([h[7], h[8], h[9], h[10], h[24], h[25]], 0.9)
    ev.edge(h[8], b2, 0.3)
    ev.edge(b2, c2, 0.8)
    ev.edge(h[9], c2, 0.2)
    ev.edge(b2, h[10], 0.2)
    ev.edge(c2, h[24], 0.3)
    return ev


def missing_layer() -> HandEvent:
    """A particle that left no hit on one layer: the segment jumping the gap is scored below the threshold."""
    ev = HandEvent()
    h = ev.track(1, pt=1.5, phi0=-1.2, charge=-1, cot=-0.4, layers=[7, 8, 10, 24, 25, 26])
    ev.chain([h[7], h[8]], 0.9)
    ev.edge(h[8], h[10], 0.35)
    ev.chain([h[10], h[24], h[25], h[26]], 0.9)
    return ev


def crossing_tracks() -> HandEvent:
    """Two particles whose paths cross between two layers: the GNN scores each wrong continuation higher."""
    ev = HandEvent()
    layers = [7, 8, 9, 10, 24, 25]
    a = ev.track(1, pt=0.5, phi0=0.3, charge=1, cot=0.5, layers=layers)
    b = ev.track(2, pt=2.0, phi0=0.237, charge=1, cot=0.5, layers=layers)  # crosses a at r ~ 140 mm
    for t in (a, b):
        ev.chain([t[7], t[8], t[9]], 0.9)
        ev.chain([t[10], t[24], t[25]], 0.9)
    ev.edge(a[9], a[10], 0.8)
    ev.edge(b[9], b[10], 0.8)
    ev.edge(a[9], b[10], 0.95)
    ev.edge(b[9], a[10], 0.95)
    return ev


def curler() -> HandEvent:
    """A 80 MeV particle that turns back inside the detector: out through five layers and back through them.

    The graph's edges point outwards, so the way back is a chain of its own, tied to the way out at the turn."""
    ev = HandEvent()
    p = dict(pt=0.08, phi0=0.4, charge=1, cot=0.3)
    layers = [7, 8, 9, 10, 24]
    out = [ev.hit(helix_at(radius=r, **p), code, 1) for code, r in zip(layers, (32.0, 72.0, 116.0, 172.0, 260.0))]
    back = [ev.hit(helix_at(radius=r, second=True, **p), code, 1) for code, r in zip(layers, (32.0, 72.0, 116.0, 172.0, 260.0))]
    ev.chain(out, 0.9)
    ev.chain(back, 0.9)  # inner → outer along the way back, as the graph orients them
    ev.edge(out[3], back[4], 0.6)
    ev.edge(back[3], out[4], 0.3)
    return ev


CASES = {
    "double hits on overlapping modules": (double_hits, [1]),
    "a missing layer": (missing_layer, [1]),
    "two crossing tracks": (crossing_tracks, [1, 2]),
    "a low-pT curler": (curler, [1]),
    "a noise hit and a shared hit": (noise_and_shared_hit, [1, 2]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_walk_breaks_the_particle(case):
    make, particles = CASES[case]
    track_id, particle = _tracks(make(), "walk")
    assert not all(whole(track_id, particle, p) for p in particles)


@pytest.mark.parametrize("case", list(CASES))
def test_default_builder_makes_it_whole(case):
    make, particles = CASES[case]
    track_id, particle = _tracks(make(), DEFAULT_METHOD)
    for p in particles:
        assert whole(track_id, particle, p), f"particle {p} of '{case}' not built whole"


def test_the_hand_made_hits_lie_on_their_helices():
    # The cases are only as good as their geometry: every particle's hits fit one helix (chi2/ndf ~ 0).
    for case, (make, _) in CASES.items():
        pos, layer, _, _, particle = make().arrays()
        for p in np.unique(particle[particle > 0]):
            mine = np.flatnonzero(particle == p)
            truth = build_candidates(pos[mine], layer[mine], np.zeros((2, 0), np.int64), np.zeros(0))
            assert truth.num_candidates == mine.size  # no edges: singletons, fitted as one below
            order = np.argsort(np.linalg.norm(pos[mine], axis=1)) if case != "a low-pT curler" else np.array(
                [0, 1, 2, 3, 4, 9, 8, 7, 6, 5]
            )
            chi2, _ = fit_candidates(pos[mine], hit_variances(layer[mine], 0.01), np.array([0, mine.size]), order, 2.0, 0.03)
            assert chi2[0] < 1e-3, case


@pytest.mark.parametrize("method", METHODS)
def test_every_method_keeps_every_hit_once(method):
    for make, _ in CASES.values():
        pos, layer, edge_index, scores, particle = make().arrays()
        candidates = build_candidates(pos, layer, edge_index, scores, TrackConfig(method=method))
        assert np.sort(candidates.hits).tolist() == list(range(len(pos)))
