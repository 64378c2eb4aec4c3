"""The module map (domainpar.data.module_map): learned pairs, its build, windows, the record in the graph."""

from __future__ import annotations

import json
from functools import cache

import numpy as np
import pytest

from domainpar.data.detector import layer_index_of
from domainpar.data.graph import GraphConfig, build_graph
from domainpar.data.hit_truth import truth_per_hit
from domainpar.data.module_map import (
    MapLearner,
    load_module_map,
    map_edges,
    module_keys,
    save_module_map,
)
from domainpar.data.true_segments import pair_keys, true_segments
from domainpar.errors import DomainparError


@cache
def _event():
    from domainpar.sim.config import SimulationConfig
    from domainpar.sim.event import simulate_event

    event = simulate_event(SimulationConfig(num_particles=60), 5, 7)
    hits = event["hits"]
    layer = layer_index_of(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy())
    particle_id, _, vertex = truth_per_hit(hits, event["truth"], event["particles"])
    pos = hits[["x", "y", "z"]].to_numpy(np.float64)
    segments = true_segments(particle_id, layer, pos, vertex)
    module = module_keys(layer, hits["module_id"].to_numpy())
    learner = MapLearner()
    learner.add(module, pos, segments, "sim5")
    return event, pos, module, segments, learner.finish(0.0, {"seed": 7}), learner.finish(0.5, {"seed": 7})


def test_learned_map_holds_every_true_module_pair():
    _, _, module, segments, module_map, _ = _event()
    pairs = {tuple(p) for p in module_map.pairs.tolist()}
    assert segments.shape[1] > 50
    assert {(int(a), int(b)) for a, b in zip(module[segments[0]], module[segments[1]])} == pairs
    assert module_map.count.sum() == segments.shape[1] and module_map.provenance["num_events"] == 1


def test_build_keeps_every_true_segment_of_its_training_event_and_windows_cut_outside():
    _, pos, module, segments, module_map, _ = _event()
    edges = map_edges(module_map, module, pos)
    n = pos.shape[0]
    assert np.isin(pair_keys(*segments, n), pair_keys(*edges, n)).all()
    # One true segment's outer hit moved 0.2 rad in phi: outside its pair's windows (zero margin), so that edge goes.
    moved = pos.copy()
    b = segments[1, 0]
    radius, angle = np.hypot(*pos[b, :2]), np.arctan2(pos[b, 1], pos[b, 0]) + 0.2
    moved[b, :2] = radius * np.cos(angle), radius * np.sin(angle)
    after = map_edges(module_map, module, moved)
    assert not np.isin(pair_keys(segments[0, :1], segments[1, :1], n), pair_keys(*after, n)).any()


def test_graph_records_the_map_and_a_build_given_another_map_refuses_it(tmp_path):
    event, _, _, _, module_map, other = _event()
    path = tmp_path / "map.npz"
    save_module_map(module_map, path)
    assert load_module_map(path).content_hash == module_map.content_hash
    config = GraphConfig(construction="module_map", module_map=str(path))
    graph, stats = build_graph(event["hits"], event["truth"], event["particles"], config=config)
    assert stats.efficiency == 1.0
    recorded = GraphConfig.from_dict(json.loads(graph.build_config))
    assert (recorded.construction, recorded.module_map_hash) == ("module_map", module_map.content_hash)
    assert "construction" not in GraphConfig().to_dict()  # graphs of the cuts record what they always did
    save_module_map(other, path)  # another map at the recorded path
    with pytest.raises(DomainparError, match=f"expected the module map of hash {module_map.content_hash}"):
        build_graph(event["hits"], event["truth"], event["particles"], config=recorded)


def test_union_construction_holds_the_cuts_and_the_map_edges_directed_inner_to_outer(tmp_path):
    event, _, _, _, module_map, _ = _event()
    path = tmp_path / "map.npz"
    save_module_map(module_map, path)
    args = (event["hits"], event["truth"], event["particles"])
    cuts, _ = build_graph(*args, config=GraphConfig(phi_slope_max=0.0002))
    mapped, _ = build_graph(*args, config=GraphConfig(phi_slope_max=0.0002, construction="module_map", module_map=str(path)))
    both, stats = build_graph(*args, config=GraphConfig(phi_slope_max=0.0002, construction="cuts+module_map", module_map=str(path)))
    n = both.num_nodes

    def directed(graph):
        return set((graph.edge_index[0] * n + graph.edge_index[1]).tolist())

    assert directed(cuts) - directed(mapped) and directed(mapped) - directed(cuts)  # each adds edges of its own
    assert directed(both) == directed(cuts) | directed(mapped)
    keys = both.edge_index[0] * n + both.edge_index[1]
    assert (np.diff(keys) > 0).all()  # sorted by (src, dst), no edge twice
    # Every edge keeps its own features and label: the ones of the construction that found it.
    at = {k: i for i, k in enumerate((cuts.edge_index[0] * n + cuts.edge_index[1]).tolist())}
    rows = np.array([at.get(k, -1) for k in keys.tolist()])
    assert np.array_equal(both.edge_attr[rows >= 0], cuts.edge_attr[rows[rows >= 0]])
    assert np.array_equal(both.y[rows >= 0], cuts.y[rows[rows >= 0]])
    assert stats.efficiency == 1.0
    recorded = GraphConfig.from_dict(json.loads(both.build_config))
    assert (recorded.construction, recorded.module_map_hash) == ("cuts+module_map", module_map.content_hash)
    with pytest.raises(DomainparError, match="must name the module map .npz for construction 'cuts\\+module_map'"):
        GraphConfig(construction="cuts+module_map")
