"""The track-candidate contract (build_candidates → TrackCandidates) and the helix fit under it."""

from __future__ import annotations

import numpy as np
import pytest

from domainpar.errors import DomainparError
from domainpar.kernels.track_fit import PT_PER_TESLA_MM, fit_candidates, helix_fit
from domainpar.tracks.build import build_tracks
from domainpar.tracks.candidates import TrackConfig, build_candidates
from domainpar.tracks.methods import METHODS

#: Barrel radii of the hand-made detector (mm).
RADII = (32.0, 72.0, 116.0, 172.0, 260.0, 360.0)


def helix_points(pt: float, phi0: float, charge: int, cot: float, radii=RADII, z0: float = 5.0, field: float = 2.0) -> np.ndarray:
    """Where a particle from (0, 0, z0) crosses the cylinders ``radii`` (mm): (K, 3), innermost first."""
    radius = pt / (PT_PER_TESLA_MM * field)
    xc, yc = -charge * radius * np.sin(phi0), charge * radius * np.cos(phi0)
    start = np.arctan2(-yc, -xc)
    points = []
    for r in radii:
        if r >= 2 * radius:
            break
        turned = 2 * np.arcsin(r / (2 * radius))
        angle = start - charge * turned
        points.append((xc + radius * np.cos(angle), yc + radius * np.sin(angle), z0 + radius * turned * cot))
    return np.array(points)


def _fit(points: np.ndarray, sigma: float, order=None):
    """helix_fit of the points in order, the same resolution in every direction, no scattering term."""
    order = np.arange(len(points)) if order is None else np.asarray(order)
    var = np.full(len(points), sigma**2)
    return helix_fit(points[:, 0], points[:, 1], points[:, 2], var, var, var, np.ones(len(points)), order, len(order), 2.0, 0.0)


@pytest.mark.parametrize("pt", [0.2, 1.0, 10.0, 1e4])
@pytest.mark.parametrize("charge", [1, -1])
def test_helix_fit_recovers_pt_and_slope_exactly(pt, charge):
    points = helix_points(pt, 0.7, charge, 2.13)
    chi2, ndf, fit_pt, curvature, _, _, _, slope = _fit(points, 0.05)
    assert ndf == 2 * len(points) - 5
    assert chi2 < 1e-9
    assert fit_pt == pytest.approx(pt, rel=1e-5)
    assert np.sign(curvature) == -charge  # the sign of the curvature is the charge's (opposite, in this frame)
    assert slope == pytest.approx(2.13, rel=1e-6)


def test_helix_fit_chi2_per_ndf_is_one_for_the_stated_resolution():
    rng = np.random.default_rng(0)
    values = []
    for _ in range(2000):
        points = helix_points(rng.uniform(0.5, 5), rng.uniform(-3, 3), rng.choice([-1, 1]), np.sinh(rng.uniform(-2, 2)))
        points = points + rng.normal(0, 0.05, points.shape)
        chi2, ndf, *_ = _fit(points, 0.05)
        values.append(chi2 / ndf)
    # Isotropic 0.05 mm errors: chi2/ndf averages 1 (both views measure distances perpendicular to the helix).
    assert np.mean(values) == pytest.approx(1.0, abs=0.1)
    # A wrong hit is seen: one hit moved by 2 mm.
    points = helix_points(1.0, 0.3, 1, 0.5)
    points[3, :2] += 2.0
    chi2, ndf, *_ = _fit(points, 0.05)
    assert chi2 / ndf > 100


def test_fit_candidates_nan_below_three_hits():
    points = helix_points(1.0, 0.3, 1, 0.5)
    chi2, pt = fit_candidates(points, np.concatenate([np.full((6, 3), 0.05**2), np.ones((6, 1))], axis=1), np.array([0, 2, 6]), np.arange(6), 2.0, 0.0)
    assert np.isnan(chi2[0]) and np.isnan(pt[0])
    assert chi2[1] < 1e-9 and pt[1] == pytest.approx(1.0, rel=1e-5)


def _two_tracks():
    """Two particles on the six barrel layers (hits interleaved in index order), a noise hit, and their graph."""
    a = helix_points(1.0, 0.3, 1, 0.5)
    b = helix_points(2.0, 1.9, -1, -0.3)
    noise = np.array([[50.0, -60.0, 100.0]])
    # Node order: b's hits reversed, then a's, then the noise hit (the order of hits in an event is arbitrary).
    pos = np.concatenate([b[::-1], a, noise])
    layer = np.array([5, 4, 3, 2, 1, 0, 0, 1, 2, 3, 4, 5, 2])
    a_ids, b_ids = np.arange(6, 12), np.arange(5, -1, -1)
    src = np.concatenate([a_ids[:-1], b_ids[:-1], [7]])
    dst = np.concatenate([a_ids[1:], b_ids[1:], [12]])
    scores = np.concatenate([np.full(5, 0.9), np.full(5, 0.8), [0.3]])
    return pos, layer, np.stack([src, dst]), scores, a_ids, b_ids


@pytest.mark.parametrize("method", METHODS)
def test_candidates_honour_the_contract(method):
    pos, layer, edge_index, scores, a_ids, b_ids = _two_tracks()
    cands = build_candidates(pos, layer, edge_index, scores, TrackConfig(method=method, threshold=0.5))
    n = pos.shape[0]
    assert cands.track_id.dtype == np.int64 and cands.track_id.shape == (n,)
    # Numbered by each candidate's lowest hit index: b (hits 0..5) is 0, a is 1, the noise hit 2.
    assert cands.track_id.tolist() == [0] * 6 + [1] * 6 + [2]
    assert cands.offsets.tolist() == [0, 6, 12, 13]
    assert sorted(cands.hits.tolist()) == list(range(n))
    for t in range(cands.num_candidates):
        assert (cands.track_id[cands.hits[cands.offsets[t] : cands.offsets[t + 1]]] == t).all()
    # Ordered from the innermost hit outwards.
    assert cands.hits[:6].tolist() == b_ids.tolist() and cands.hits[6:12].tolist() == a_ids.tolist()
    expected = np.array([np.nan] + [0.8] * 5 + [np.nan] + [0.9] * 5 + [np.nan], dtype=np.float32)
    np.testing.assert_array_equal(cands.edge_score, expected)
    assert cands.edge_score.dtype == np.float32
    assert cands.fit_pt[:2] == pytest.approx([2.0, 1.0], rel=1e-5)
    assert (cands.fit_chi2_ndf[:2] < 1e-6).all() and np.isnan(cands.fit_chi2_ndf[2]) and np.isnan(cands.fit_pt[2])
    assert cands.edge_mask.tolist() == [True] * 10 + [False]
    assert cands.seconds > 0


@pytest.mark.parametrize("method", ["components", "walk"])
def test_edge_methods_give_the_tracks_of_build_tracks(method):
    rng = np.random.default_rng(1)
    n = 300
    pos = rng.normal(0, 100, (n, 3))
    layer = rng.integers(0, 8, n)
    edge_index = rng.integers(0, n, (2, 600))
    scores = rng.random(600)
    cands = build_candidates(pos, layer, edge_index, scores, TrackConfig(method=method, threshold=0.6))
    assert cands.track_id.tolist() == build_tracks(n, edge_index, scores, 0.6, method=method).tolist()


def test_empty_event():
    cands = build_candidates(np.zeros((0, 3)), np.zeros(0, np.int64), np.zeros((2, 0), np.int64), np.zeros(0))
    assert cands.track_id.size == 0 and cands.offsets.tolist() == [0] and cands.fit_pt.size == 0


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("method", "best", "tracks.method: expected one of"),
        ("threshold", 1.0, "tracks.threshold: expected a number in"),
        ("threshold", float("nan"), "tracks.threshold"),
        ("sigma_hit", 0.0, "tracks.sigma_hit: expected a number > 0"),
        ("ms", -1.0, "tracks.ms: expected a number >= 0"),
        ("field", True, "tracks.field"),
    ],
)
def test_track_config_names_the_bad_field(field, value, message):
    with pytest.raises(DomainparError, match=message):
        TrackConfig(**{field: value})


def test_build_candidates_rejects_bad_input():
    pos, layer, edge_index, scores, _, _ = _two_tracks()
    with pytest.raises(DomainparError, match=r"pos: expected shape \(N, 3\)"):
        build_candidates(pos[:, :2], layer, edge_index, scores)
    with pytest.raises(DomainparError, match="layer: expected shape"):
        build_candidates(pos, layer[:-1], edge_index, scores)
    with pytest.raises(DomainparError, match="edge_index: expected node ids"):
        build_candidates(pos, layer, edge_index + 100, scores)
    with pytest.raises(DomainparError, match="scores: expected shape"):
        build_candidates(pos, layer, edge_index, scores[:-1])
    with pytest.raises(DomainparError, match="scores: expected no NaN"):
        build_candidates(pos, layer, edge_index, np.full(scores.shape, np.nan))
