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


def test_track_examples_pick_whole_broken_and_fake_tracks(tmp_path):
    from domainpar.tracks.plots import pick_track_examples, plot_track_examples

    # Particle 1: 5 hits, one candidate (whole). Particle 2: 6 hits split 3 + 3 (broken). Candidate 3: two hits of
    # particle 3 and two of 4 (fake). Particle 5: pT 0.5, whole but below the pT cut. Noise hit alone.
    particle_id = np.array([1] * 5 + [2] * 6 + [3, 3, 4, 4] + [5] * 3 + [0])
    track_id = np.array([0] * 5 + [1] * 3 + [2] * 3 + [3] * 4 + [4] * 3 + [5])
    pt = np.where(particle_id == 5, 0.5, 2.0)
    examples = pick_track_examples(track_id, particle_id, pt, count=2)
    assert examples.whole == [(0, 1)]
    assert examples.broken == [(1, 2)]
    # Fakes, longest first: candidate 3, then a half of particle 2 (3 of its 6 hits: not more than half).
    assert examples.fake == [(3, 3), (1, 2)]
    rng = np.random.default_rng(0)
    pos = rng.normal(0, 100, (particle_id.size, 3))
    order = np.argsort(track_id, kind="stable")
    offsets = np.concatenate([[0], np.cumsum(np.bincount(track_id))])
    path = plot_track_examples(pos, offsets, order, track_id, particle_id, pt, tmp_path / "examples.png", title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # No track of any kind (every hit alone): still a figure, each panel saying so.
    alone = np.arange(particle_id.size)
    path = plot_track_examples(pos, np.arange(particle_id.size + 1), alone, alone, particle_id, pt, tmp_path / "none.png")
    assert path.exists()
