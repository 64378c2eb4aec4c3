"""Performance plots of track building: they render for every edge case an evaluation can produce."""

from __future__ import annotations

import numpy as np

from domainpar.tracks.plots import EdgeSample, ParticleSample, plot_performance


def test_performance_plots_with_no_selected_edge(tmp_path):
    """An untrained model selects no edge: the log-pT purity panel is empty and used to crash savefig."""

    rng = np.random.default_rng(1)
    n = 40
    edges = EdgeSample(pt=rng.uniform(0.2, 5, n), eta=rng.uniform(-3, 3, n), label=rng.random(n) < 0.5, predicted=np.zeros(n, bool))
    particles = ParticleSample(
        pt=rng.uniform(0.2, 5, n), eta=rng.uniform(-3, 3, n), nlayers=np.full(n, 5),
        matched=np.zeros(n, bool), perfect=np.zeros(n, bool),
    )  # fmt: skip
    paths = plot_performance(particles, edges, tmp_path)
    assert [p.name for p in paths] == ["efficiency_purity_vs_pt.png", "efficiency_purity_vs_eta.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)
