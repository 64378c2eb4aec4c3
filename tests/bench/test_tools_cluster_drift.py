"""bench.tools.cluster_drift: a hit's direction from the helix through its vertex, and the curves by slope."""

from __future__ import annotations

import numpy as np
import pytest

from bench.tools import cluster_drift
from domainpar.sim.clusters import CLUSTER_MODELS
from domainpar.sim.config import SimulationConfig
from domainpar.sim.dataset import simulate_event_files


@pytest.fixture(scope="module")
def vertex_truth_event(tmp_path_factory):
    """A simulated event whose truth momenta are at the hits, and its copy with the vertex momenta instead (as the
    pixel truth of event 21000 has them)."""
    import pandas as pd

    out = tmp_path_factory.mktemp("drift")
    simulate_event_files(1, out, SimulationConfig(num_particles=300), seed=3, compress=True)
    prefix = str(out / "event000000001")
    truth = pd.read_csv(f"{prefix}-truth.csv.gz")
    particles = pd.read_csv(f"{prefix}-particles.csv.gz").set_index("particle_id")
    at_hit = truth[["hit_id", "tpx", "tpy", "tpz"]].copy()
    signal = truth["particle_id"] != 0
    for column, source in (("tpx", "px"), ("tpy", "py"), ("tpz", "pz")):
        truth.loc[signal, column] = particles.loc[truth.loc[signal, "particle_id"], source].to_numpy()
    truth.to_csv(f"{prefix}-truth.csv.gz", index=False)
    return prefix, at_hit


def test_the_direction_at_the_hit_comes_from_the_helix_through_the_vertex(vertex_truth_event):
    prefix, at_hit = vertex_truth_event
    crossings = cluster_drift.barrel_crossings(prefix)
    true = at_hit.set_index("hit_id").loc[crossings["ids"]].to_numpy(dtype=np.float64, copy=True)
    true /= np.linalg.norm(true, axis=1, keepdims=True)
    angle = np.arccos(np.clip(np.einsum("ij,ij->i", crossings["direction"], true), -1, 1))
    # Scattering and energy loss bend the real path a little off the vertex helix; the vertex direction itself is
    # off by the turn, up to ~0.26 rad for a 0.1 GeV particle at the barrel's last layer.
    assert crossings["ids"].size > 200 and np.median(angle) < 0.005 and np.quantile(angle, 0.9) < 0.03, np.quantile(angle, [0.5, 0.9])


def test_the_model_reproduces_the_clusters_it_made(vertex_truth_event):
    # The simulated event's own clusters, digitised with the model that made them, against the same model's
    # re-digitisation of the same crossings: the curves agree where bins hold enough hits.
    prefix, _ = vertex_truth_event
    crossings = cluster_drift.barrel_crossings(prefix)
    real = cluster_drift.curves(crossings, crossings["observed"])
    again = cluster_drift.simulated(crossings, CLUSTER_MODELS[8])
    filled = ~np.isnan(real["u"])
    assert filled.sum() >= 2
    np.testing.assert_allclose(again["u"][filled], real["u"][filled], rtol=0.25)
