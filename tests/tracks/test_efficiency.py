"""Edge metrics and tracking efficiency on hand-made cases and the real event (:mod:`domainpar.tracks.efficiency`)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from domainpar.errors import DomainparError
from domainpar.tracks.efficiency import (
    average_ranks,
    ParticleTable,
    binned_efficiencies,
    binned_fraction,
    edge_metrics,
    efficiency_at_purity,
    roc_auc,
    roc_curve,
    tracking_metrics,
)

from fixtures import EVENT1 as EVENT


def test_roc_auc_is_exact_with_ties():
    rng = np.random.default_rng(11)
    scores = rng.integers(0, 5, 300).astype(float)  # many ties
    labels = rng.random(300) < 0.3 + 0.1 * scores
    pos, neg = scores[labels], scores[~labels]
    brute = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (pos.size * neg.size)
    assert roc_auc(scores, labels) == pytest.approx(brute, abs=1e-12)
    fpr, tpr, thresholds = roc_curve(scores, labels)
    assert np.trapezoid(tpr, fpr) == pytest.approx(brute, abs=1e-12)
    assert fpr[-1] == tpr[-1] == 1.0 and thresholds[0] == np.inf
    assert roc_auc([0.1, 0.9], [0, 1]) == 1.0 and roc_auc([0.9, 0.1], [0, 1]) == 0.0
    assert math.isnan(roc_auc([0.1, 0.2], [1, 1]))
    assert roc_curve(np.zeros(0), np.zeros(0))[0].tolist() == [0.0]


def test_edge_metrics_at_threshold():
    scores = np.array([0.9, 0.8, 0.4, 0.6, 0.2, 0.5])
    labels = np.array([1, 1, 1, 0, 0, 0])
    m = edge_metrics(scores, labels, threshold=0.5)
    assert (m.num_true, m.num_predicted, m.num_true_positive) == (3, 3, 2)
    assert m.efficiency == pytest.approx(2 / 3) and m.purity == pytest.approx(2 / 3)
    assert m.auc == pytest.approx(7 / 9)  # 0.9, 0.8 beat all three negatives, 0.4 beats one
    with pytest.raises(DomainparError, match="equal length"):
        edge_metrics(scores, labels[:2])


def _best_cut_by_brute_force(scores: np.ndarray, labels: np.ndarray, floor: float) -> float:
    """Every distinct cut tried: the highest efficiency with purity >= floor (nan if none)."""
    best = math.nan
    for cut in np.unique(scores):
        kept = scores >= cut
        if labels[kept].sum() >= floor * kept.sum() and not labels[kept].sum() / labels.sum() <= best:
            best = labels[kept].sum() / labels.sum()
    return best


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_efficiency_at_purity_is_the_best_cut_of_the_required_purity(seed):
    rng = np.random.default_rng(seed)
    labels = rng.random(2000) < 0.3
    scores = np.round(np.clip(0.45 * labels + 0.7 * rng.random(2000), 0, 1), 2)  # coarse: many ties, cut together
    for floor in (0.6, 0.9):
        efficiency, purity, cut = efficiency_at_purity(scores, labels, floor)
        assert efficiency == pytest.approx(_best_cut_by_brute_force(scores, labels.astype(np.float64), floor), abs=1e-12)
        kept = scores >= cut
        assert purity == pytest.approx(labels[kept].sum() / kept.sum(), abs=1e-12) and purity >= floor


def test_efficiency_at_purity_when_no_cut_reaches_it():
    assert all(math.isnan(v) for v in efficiency_at_purity(np.array([0.9, 0.9, 0.2]), np.array([1, 0, 1]), 0.9))
    assert all(math.isnan(v) for v in efficiency_at_purity(np.array([0.5]), np.array([0]), 0.9))
    assert all(math.isnan(v) for v in efficiency_at_purity(np.zeros(0), np.zeros(0), 0.9))
    assert efficiency_at_purity(np.array([0.8, 0.3]), np.array([1, 0]), 0.9) == (1.0, 1.0, 0.8)
    with pytest.raises(DomainparError, match=r"floor must be in \(0, 1\] \(got 0\)"):
        efficiency_at_purity(np.array([0.8]), np.array([1]), 0)


def test_tracking_metrics_on_a_hand_made_event():
    # Particles: 1 (4 hits, 4 layers, pT 2), 2 (4 hits, pT 3), 3 (3 hits, pT 0.5), 4 (2 layers only, pT 5); noise.
    particle_id = np.array([1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 4, 4, 4, 0, 0, 0])
    layer = np.array([0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 0, 1, 1, 5, 6, 7])
    # Track 10: particle 1 exactly (perfect). Particle 2 split 2+2 into tracks 20/21 with noise -> no DM match.
    # Track 30: particle 3 + one hit of 4 (3/4 pure, DM). Track 40: rest of 4 (2 hits, not a candidate).
    # Track 50: 3 noise hits (fake candidate).
    track_id = np.array([10, 10, 10, 10, 20, 20, 21, 21, 30, 30, 30, 30, 40, 40, 50, 50, 50])
    track_id[4:8] = [20, 20, 21, 21]
    particles = ParticleTable(np.array([1, 2, 3, 4]), np.array([2.0, 3.0, 0.5, 5.0]), np.array([0.1, -1.0, 2.0, 0.3]))
    m = tracking_metrics(track_id, particle_id, layer, particles)
    # Reconstructable (pT > 1, >= 3 layers): particles 1 and 2 (4 has 2 layers, 3 is soft).
    assert m.num_reconstructable == 2
    assert m.num_matched == 1 and m.tracking_efficiency == 0.5
    assert m.num_perfect == 1 and m.perfect_efficiency == 0.5
    # Candidates (>= 3 hits): 10, 30, 50. Tracks 20/21 have 2 hits. Fakes: 50.
    assert m.num_candidates == 3 and m.num_fakes == 1 and m.fake_rate == pytest.approx(1 / 3)
    assert m.num_duplicates == 0
    assert m.particle_id.tolist() == [1, 2, 3, 4]
    assert m.particle_nlayers.tolist() == [4, 4, 3, 2]
    # Particle 4 is matched by its 2-hit track 40 (2 of 2 hits from 4, 2 of its 3 hits) but is not reconstructable.
    assert m.particle_matched.tolist() == [True, False, True, True]


def test_duplicates_count_extra_pure_tracks_of_one_particle():
    # Particle 1 has 9 hits split 3/3/3 into three pure tracks: one match, two duplicates, no DM match.
    particle_id = np.array([1] * 9 + [2] * 3)
    layer = np.arange(12)
    track_id = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3])
    particles = ParticleTable(np.array([1, 2]), np.array([2.0, 2.0]), np.array([0.0, 0.0]))
    m = tracking_metrics(track_id, particle_id, layer, particles)
    assert m.num_candidates == 4 and m.num_duplicates == 2 and m.duplicate_rate == 0.5
    assert m.num_fakes == 3 and m.tracking_efficiency == 0.5
    with pytest.raises(DomainparError, match="every particle with hits must be listed"):
        tracking_metrics(track_id, particle_id, layer, ParticleTable(np.array([1]), np.array([1.0]), np.array([0.0])))


def test_truth_tracks_on_the_real_event_are_fully_efficient():
    truth = pd.read_csv(f"{EVENT}-truth.csv.gz")
    hits = pd.read_csv(f"{EVENT}-hits.csv.gz")
    parts = pd.read_csv(f"{EVENT}-particles.csv.gz")
    table = ParticleTable.from_momenta(parts["particle_id"], parts["px"], parts["py"], parts["pz"])
    layer = (hits["volume_id"] * 100 + hits["layer_id"]).to_numpy()
    pid = truth["particle_id"].to_numpy()
    m = tracking_metrics(pid, pid, layer, table)
    assert m.num_reconstructable > 40
    assert m.tracking_efficiency == 1.0 and m.perfect_efficiency == 1.0
    assert m.num_duplicates == 0 and m.num_fakes == 1  # the one all-noise track
    # eta from hits approximates eta from momenta for the stiff particles.
    hit_pt = np.zeros(pid.size)
    hit_pt[pid != 0] = table.lookup(pid[pid != 0])[0]
    approx = ParticleTable.from_hits(pid, hit_pt, hits[["x", "y", "z"]].to_numpy())
    stiff = m.particle_id[m.particle_pt > 1.0]
    eta_true, eta_hits = table.lookup(stiff)[1], approx.lookup(stiff)[1]
    assert np.median(np.abs(eta_true - eta_hits)) < 0.05


def test_binned_fraction():
    fraction, error, count = binned_fraction(np.array([0.5, 1.5, 1.6, 2.5]), np.array([1, 0, 1, 0], bool), np.array([0, 1, 2, 3, 4]))
    assert count.tolist() == [1, 2, 1, 0]
    assert fraction[:3].tolist() == [1.0, 0.5, 0.0] and math.isnan(fraction[3])
    assert error[1] == pytest.approx(math.sqrt(0.25 / 2))


def test_binned_efficiencies_pool_events_and_follow_the_definitions():
    # Event A: particles 1 (pT 0.15, matched, perfect), 2 (pT 2, matched, not perfect: a noise hit on its track),
    # 3 (pT 2, 2 layers: never counted). Event B: particle 1 (pT 0.25, not matched).
    particles_a = ParticleTable(np.array([1, 2, 3]), np.array([0.15, 2.0, 2.0]), np.array([0.2, 1.2, 1.2]))
    a = tracking_metrics(
        np.array([0, 0, 0, 1, 1, 1, 1, 2, 2]), np.array([1, 1, 1, 2, 2, 2, 0, 3, 3]),
        np.array([0, 1, 2, 0, 1, 2, 3, 0, 1]), particles_a,
    )  # fmt: skip
    particles_b = ParticleTable(np.array([1]), np.array([0.25]), np.array([-2.1]))
    b = tracking_metrics(np.array([0, 1, 2]), np.array([1, 1, 1]), np.array([0, 1, 2]), particles_b)
    table = binned_efficiencies([a, b])
    pt = table["efficiency_vs_pt"]
    assert pt["bins"][:3] == [0.1, 0.2, 0.3]
    # 0.1-0.2: particle A1 (matched, perfect); 0.2-0.3: B1 (neither); 1.5-2: none; 2-3: A2 (matched, not perfect).
    assert pt["count"][:2] == [1, 1] and pt["count"][7] == 1 and sum(pt["count"]) == 3
    assert pt["tracking_efficiency"][:2] == [1.0, 0.0] and pt["perfect_efficiency"][:2] == [1.0, 0.0]
    assert pt["tracking_efficiency"][7] == 1.0 and pt["perfect_efficiency"][7] == 0.0
    assert pt["tracking_efficiency"][3] is None and pt["tracking_efficiency_error"][3] is None
    # eta: only reconstructable particles (pT > 1, >= 3 layers): A2 at eta 1.2.
    eta = table["efficiency_vs_eta"]
    assert sum(eta["count"]) == 1 and eta["count"][10] == 1 and eta["tracking_efficiency"][10] == 1.0
    assert len(eta["bins"]) == len(eta["count"]) + 1 == 17
    json.dumps(table)  # JSON-ready


def test_average_ranks_are_scipys_rankdata():
    # The AUC's ranks without importing scipy.stats (2 CPU-s of an evaluating process's start-up).
    from scipy.stats import rankdata

    rng = np.random.default_rng(3)
    cases = [np.zeros(0), np.array([0.5]), np.full(7, 0.25), np.array([3.0, -1.0, 3.0, np.inf, -np.inf, 0.0, 3.0]),
             rng.random(2_000), np.round(rng.random(5_000), 2), rng.integers(0, 4, 999).astype(np.float32)]
    for values in cases:
        expected = rankdata(values, method="average")
        got = average_ranks(values)
        assert got.dtype == np.float64 and got.shape == values.shape
        assert np.array_equal(got, expected), values
    scores, labels = np.round(rng.random(3_000), 1), rng.random(3_000) < 0.3
    expected = (rankdata(scores)[labels].sum() - labels.sum() * (labels.sum() + 1) / 2) / (labels.sum() * (~labels).sum())
    assert roc_auc(scores, labels) == expected
