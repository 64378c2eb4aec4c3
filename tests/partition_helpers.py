"""Hit graphs for the partition tests that do not need the full graph builder.

``hits_graph`` joins hits of different layers that are close in (eta, phi) with
a KD-tree: a stand-in for the real segment builder with the same topology
(edges inner → outer, local in the detector), so partitioners see a graph that
looks like a real event's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy.spatial import cKDTree

from domainpar.data.detector import layer_index_of
from domainpar.data.event_graph import EventGraph

from fixtures import TRACKML_DIR


def hits_graph(hits_csv: str | Path, *, window: float = 0.04, labels: bool = True, event_id: int = 0) -> EventGraph:
    """EventGraph of a TrackML hits file with (eta, phi)-window edges between layers."""
    hits = pd.read_csv(hits_csv)
    pos = hits[["x", "y", "z"]].to_numpy(np.float32)
    r = np.hypot(pos[:, 0], pos[:, 1])
    phi = np.arctan2(pos[:, 1], pos[:, 0])
    eta = np.arcsinh(pos[:, 2] / np.maximum(r, 1e-3))
    dist = np.sqrt(r.astype(np.float64) ** 2 + pos[:, 2].astype(np.float64) ** 2)
    layer = layer_index_of(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy())
    tree = cKDTree(np.stack([eta / 2.0, phi], axis=1))
    pairs = tree.query_pairs(window, output_type="ndarray")
    a, b = pairs[:, 0], pairs[:, 1]
    keep = (layer[a] != layer[b]) & (np.abs(dist[a] - dist[b]) < 250.0)
    a, b = a[keep], b[keep]
    swap = dist[a] > dist[b]
    src = np.where(swap, b, a).astype(np.int64)
    dst = np.where(swap, a, b).astype(np.int64)
    order = np.lexsort((dst, src))
    edge_index = np.stack([src[order], dst[order]])
    x = np.stack([r / 1000.0, phi / np.pi, pos[:, 2] / 1000.0], axis=1).astype(np.float32)
    edge_attr = (x[edge_index[1]] - x[edge_index[0]])
    edge_attr = np.concatenate([edge_attr, np.linalg.norm(edge_attr, axis=1, keepdims=True)], axis=1).astype(np.float32)
    y = None
    particle_id = None
    truth_csv = Path(str(hits_csv).replace("-hits.", "-truth."))
    if labels and truth_csv.exists():
        truth = pd.read_csv(truth_csv)
        particle_id = truth["particle_id"].to_numpy(np.int64)
        same = (particle_id[edge_index[0]] == particle_id[edge_index[1]]) & (particle_id[edge_index[0]] != 0)
        y = same.astype(np.float32)
    return EventGraph(
        event_id=event_id,
        x=x,
        pos=pos,
        hit_id=hits["hit_id"].to_numpy(np.int64),
        layer=layer.astype(np.int64),
        edge_index=edge_index,
        edge_attr=edge_attr,
        y=y,
        particle_id=particle_id,
    )


def random_graph(num_nodes: int, num_edges: int, seed: int = 0, *, labels: bool = True) -> EventGraph:
    """EventGraph with uniformly random edges (self-loops and duplicates allowed) and random positions."""
    rng = np.random.default_rng(seed)
    edge_index = rng.integers(0, max(num_nodes, 1), size=(2, num_edges), dtype=np.int64) if num_nodes else np.zeros((2, 0), np.int64)
    pos = (rng.normal(size=(num_nodes, 3)) * [300.0, 300.0, 1000.0]).astype(np.float32)
    return EventGraph(
        event_id=seed,
        x=rng.normal(size=(num_nodes, 3)).astype(np.float32),
        pos=pos,
        hit_id=np.arange(1, num_nodes + 1, dtype=np.int64),
        layer=rng.integers(0, 48, size=num_nodes, dtype=np.int64),
        edge_index=edge_index,
        edge_attr=rng.normal(size=(num_edges, 4)).astype(np.float32),
        y=(rng.random(num_edges) < 0.3).astype(np.float32) if labels else None,
    )


def assert_plan_invariants(plan, edge_index: np.ndarray, y: np.ndarray | None = None) -> None:
    """Check every contract of a PartitionPlan against its graph's edges (independently of build_plan)."""
    edge_index = np.asarray(edge_index)
    num_nodes = plan.num_nodes
    num_edges = edge_index.shape[1]
    owner = plan.owner
    src, dst = edge_index
    is_cut = owner[src] != owner[dst]
    assert plan.num_cut_edges == int(is_cut.sum())
    assert len(plan.parts) == plan.num_parts
    # Owned sets partition the nodes exactly once, each ascending, matching owner.
    owned_all = np.concatenate([p.owned_ids for p in plan.parts])
    assert np.array_equal(np.sort(owned_all), np.arange(num_nodes))
    owned_count = np.zeros(plan.num_parts, dtype=np.int64)
    for p in plan.parts:
        assert p.num_owned > 0
        assert np.all(np.diff(p.owned_ids) > 0)
        assert np.all(owner[p.owned_ids] == p.part)
        owned_count[p.part] = p.num_owned
    # Every kept global edge owned exactly once (by dst's owner); dropped edges nowhere.
    owned_times = np.zeros(num_edges, dtype=np.int64)
    held_times = np.zeros(num_edges, dtype=np.int64)
    for p in plan.parts:
        owned_times[p.edge_ids[p.edge_owned]] += 1
        held_times[p.edge_ids] += 1
    kept = ~is_cut if plan.drops_cut_edges else np.ones(num_edges, dtype=bool)
    assert np.array_equal(owned_times, kept.astype(np.int64))
    expected_held = np.where(kept, np.where(is_cut, 2, 1), 0)
    assert np.array_equal(held_times, expected_held)
    positives = 0 if y is None else int(((y > 0.5) & kept).sum())
    for p in plan.parts:
        assert p.num_parts == plan.num_parts
        assert p.num_nodes_global == num_nodes
        assert p.num_edges_global == int(kept.sum())
        assert p.num_positive_edges_global == positives
        local_to_global = p.local_to_global
        assert local_to_global.size == np.unique(local_to_global).size
        # Local edges map back to their global edges; endpoints owned or halo here.
        assert p.edge_index.shape == (2, p.num_local_edges)
        if p.num_local_edges:
            assert p.edge_index.min() >= 0 and p.edge_index.max() < p.num_local_nodes
        assert np.array_equal(local_to_global[p.edge_index[0]], src[p.edge_ids])
        assert np.array_equal(local_to_global[p.edge_index[1]], dst[p.edge_ids])
        # Every edge with an owned endpoint is here (none dropped unless sectors).
        touches = (owner[src] == p.part) | (owner[dst] == p.part)
        assert np.array_equal(np.sort(p.edge_ids), np.flatnonzero(touches & kept))
        # edge_owned = this part owns dst.
        assert np.array_equal(p.edge_owned, owner[dst[p.edge_ids]] == p.part)
        # Interior first, then boundary; interior + boundary = local.
        both_owned = (p.edge_index[0] < p.num_owned) & (p.edge_index[1] < p.num_owned)
        assert np.all(both_owned[: p.num_interior_edges])
        assert not np.any(both_owned[p.num_interior_edges :])
        assert p.num_interior_edges + p.num_boundary_edges == p.num_local_edges
        # Halo: exactly the non-owned endpoints, grouped by owner ascending, ascending within.
        endpoints = np.concatenate([src[p.edge_ids], dst[p.edge_ids]])
        expected_halo = np.unique(endpoints[owner[endpoints] != p.part])
        assert np.array_equal(np.sort(p.halo_ids), expected_halo)
        halo_owner = owner[p.halo_ids]
        assert np.all(np.diff(halo_owner) >= 0)
        for q in np.unique(halo_owner):
            assert np.all(np.diff(p.halo_ids[halo_owner == q]) > 0)
        if plan.drops_cut_edges:
            assert p.num_halo == 0 and p.num_boundary_edges == 0
        assert np.array_equal(p.recv_parts, np.unique(halo_owner))
        assert p.recv_offsets.shape == (p.recv_parts.size + 1,)
        assert p.recv_offsets[0] == 0 and p.recv_offsets[-1] == p.num_halo
    # p's halo block from q == q's send list to p (as global ids), same order; nothing else sent.
    for p in plan.parts:
        for i, q in enumerate(p.recv_parts):
            block = p.halo_ids[p.recv_slice(i)]
            assert np.all(owner[block] == q)
            sender = plan.parts[int(q)]
            j = int(np.flatnonzero(sender.send_parts == p.part)[0])
            assert np.array_equal(sender.owned_ids[sender.send_ids[sender.send_slice(j)]], block)
        for j, q in enumerate(p.send_parts):
            assert p.part in plan.parts[int(q)].recv_parts
        assert p.send_offsets.shape == (p.send_parts.size + 1,)
        assert p.send_offsets[-1] == p.send_ids.size
        if p.send_ids.size:
            assert p.send_ids.max() < p.num_owned
