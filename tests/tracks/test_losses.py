"""Where each particle is lost, on a hand-made event whose every particle is broken at a known stage
(:mod:`domainpar.tracks.losses`)."""

from __future__ import annotations

import numpy as np
import pytest

from domainpar.data.true_segments import pair_keys, true_segments
from domainpar.tracks.efficiency import ParticleTable, tracking_metrics
from domainpar.tracks.losses import (
    BUILDER,
    FILTER,
    GNN,
    GRAPH,
    WEAK,
    event_segments,
    format_losses,
    losses_vs_pt,
    particle_losses,
)

#: particle -> (pT in GeV, layers of its hits in order; a layer twice is a double hit).
PARTICLES = {
    1: (1.5, [0, 1, 2, 3, 4]),  # perfect
    2: (0.15, [0, 1, 2, 3, 4]),  # segment 2-3 never built: graph
    3: (0.25, [0, 1, 2, 3, 4]),  # segment 1-2 dropped by the filter
    4: (0.4, [0, 1, 2, 3, 4]),  # segment 3-4 scored below the builder's cut
    5: (0.6, [0, 1, 2, 3, 4]),  # segment 0-1 scored between the cut and the threshold
    6: (0.8, [0, 1, 2, 3, 4]),  # every segment well scored; the builder adds a noise hit
    7: (2.0, [0, 1, 1, 2, 3]),  # double hit on layer 1, one of its four segments missing: the chain holds
    8: (3.0, [0, 1, 2, 3, 4]),  # segment 1-2 never built, yet built perfectly: bridged
    9: (0.12, [0, 1, 2, 3, 4]),  # its last hit is not a node of the graph: graph
}
FOLLOW, THRESHOLD = 0.02, 0.5


def _event():
    """Event hits (particle, layer, pos), the graph's nodes (all hits but particle 9's last), and its edges."""
    pid, layer, pos = [], [], []
    for p, (_, layers) in PARTICLES.items():
        phi = 0.3 * p
        for i, lay in enumerate(layers):
            r = 50.0 * (lay + 1) + i  # a double hit lies a little further out along the track
            pid.append(p), layer.append(lay), pos.append((r * np.cos(phi), r * np.sin(phi), 0.0))
    pid, layer, pos = np.array(pid), np.array(layer), np.array(pos)
    # One noise hit, near particle 6's last.
    pid, layer, pos = np.append(pid, 0), np.append(layer, 4), np.vstack([pos, pos[pid == 6][-1] + 1.0])
    nodes = np.flatnonzero(~((pid == 9) & (layer == 4)))
    return pid, layer, pos, nodes


def _segment(segs, node_pid, node_layer, p, a, b):
    """Column of the segment of particle p between its hits on layers a and b (the first such)."""
    first, second = segs
    hit = lambda i, lay: (node_pid[i] == p) & (node_layer[i] == lay)  # noqa: E731
    return int(np.flatnonzero((hit(first, a) & hit(second, b)) | (hit(first, b) & hit(second, a)))[0])


@pytest.fixture(scope="module")
def judged():
    pid, layer, pos, nodes = _event()
    node_pid, node_layer, node_pos = pid[nodes], layer[nodes], pos[nodes]
    segs = true_segments(node_pid, node_layer, node_pos)
    find = lambda p, a, b: _segment(segs, node_pid, node_layer, p, a, b)  # noqa: E731
    not_built = [find(2, 2, 3), find(7, 0, 1), find(8, 1, 2)]
    built = np.delete(segs, not_built, axis=1)
    fake = np.array([[0], [7]])  # one false edge, which no stage needs
    built = np.hstack([built, fake])
    dropped = pair_keys(*segs[:, [find(3, 1, 2)]], nodes.size)  # the edge filter drops particle 3's segment 1-2
    filtered = built[:, pair_keys(*built, nodes.size) != dropped]
    scores = np.full(filtered.shape[1], 0.9)
    keys = pair_keys(*filtered, nodes.size)
    for (p, a, b), s in {(4, 3, 4): FOLLOW, (5, 0, 1): 0.3}.items():
        scores[keys == pair_keys(*segs[:, [find(p, a, b)]], nodes.size)] = s
    # Tracks over every hit of the event: a particle's hits one track, except where the builder failed.
    track = pid.copy()
    track[pid == 0] = 6  # the noise hit joins particle 6's track
    track[(pid == 2) & (layer >= 3)] = 100  # particle 2 split: 3 of 5 hits found (double majority, not perfect)
    track[pid == 3] = 200 + np.arange(5)  # particle 3 all singletons: missed
    track[(pid == 4) & (layer == 4)] = 300  # particle 4 loses its last hit: found, not perfect
    track[(pid == 5) & (layer <= 2)] = 400 + np.arange(3)  # particle 5 missed
    track[(pid == 7) & (layer == 3)] = 500  # particle 7 loses a hit
    track[(pid == 9) & (layer == 4)] = 600
    ids = np.array(sorted(PARTICLES))
    pts = np.array([PARTICLES[p][0] for p in ids])
    particles = ParticleTable.from_momenta(ids, pts, np.zeros(ids.size), np.zeros(ids.size))
    tracking = tracking_metrics(track, pid, layer, particles)
    segments = event_segments(node_pid, node_layer, node_pos, None, built)
    losses = particle_losses(segments, node_pid, filtered, scores, pid, tracking, FOLLOW, THRESHOLD)
    return tracking, losses


def test_every_particle_is_lost_at_its_first_broken_stage(judged):
    _, losses = judged
    stage = dict(zip(losses.particle_id.tolist(), losses.stage.tolist()))
    # A score equal to the builder's cut is below it: the builder follows edges strictly above.
    assert stage == {1: 0, 2: GRAPH, 3: FILTER, 4: GNN, 5: WEAK, 6: BUILDER, 7: BUILDER, 8: 0, 9: GRAPH}
    # Particle 8's chain is broken at the graph, yet it was built whole: perfect, bridged.
    assert dict(zip(losses.particle_id.tolist(), losses.chain_lost.tolist()))[8] == GRAPH


def test_the_table_splits_missed_from_not_perfect_and_agrees_with_the_efficiencies(judged):
    tracking, losses = judged
    table = losses_vs_pt([losses], FOLLOW, THRESHOLD)
    assert table["bins"] == ["0.1-0.2", "0.2-0.3", "0.3-0.5", "0.5-0.7", "0.7-1", ">1"]
    assert table["count"] == [2, 1, 1, 1, 1, 3]
    # The last bin is the reconstructable particles of tracking_efficiency and perfect_efficiency.
    assert table["count"][-1] == tracking.num_reconstructable
    assert table["tracking_efficiency"][-1] == pytest.approx(tracking.tracking_efficiency)
    assert table["perfect_efficiency"][-1] == pytest.approx(tracking.perfect_efficiency)
    assert table["missed"]["filter"] == [0, 1, 0, 0, 0, 0] and table["missed"]["weak"] == [0, 0, 0, 1, 0, 0]
    assert table["not_perfect"]["graph"] == [2, 0, 0, 0, 0, 0]  # particle 9 keeps 4 of its 5 hits on one track
    assert table["not_perfect"]["gnn"] == [0, 0, 1, 0, 0, 0]
    assert table["not_perfect"]["builder"] == [0, 0, 0, 0, 1, 1]
    assert table["perfect_broken"]["graph"] == [0, 0, 0, 0, 0, 1] and not any(table["perfect_broken"]["builder"])
    # Every particle of a bin is perfect or lost at exactly one stage.
    lost = np.sum([np.add(table["missed"][s], table["not_perfect"][s]) for s in table["stages"]], axis=0)
    assert (lost + np.round(np.multiply(table["perfect_efficiency"], table["count"])) == table["count"]).all()
    text = format_losses(table)
    assert "| 0.1-0.2 | 2 |" in text and "GNN 0.02-0.5" in text and "1.000 = 0.000 + 1.000" in text
    assert text.splitlines()[-1].endswith("| 0.333 |")  # particle 8 of the three above 1 GeV
