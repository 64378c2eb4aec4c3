"""An independent oracle of a PartitionPlan's contract, written from the design, not from build_plan.

``PartitionPlan.validate`` is the library's own check; this one is deliberately
a second implementation (sets and counts instead of the library's vectorised
bookkeeping), so a bug shared by the planner and its validator still fails here.
"""

from __future__ import annotations

import numpy as np


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
        local_to_global = np.concatenate([p.owned_ids, p.halo_ids])
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
