"""build_plan: every contract of a partition plan, on random and hand-made graphs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plan_oracle import assert_plan_invariants

from domainpar.errors import DomainparError
from domainpar.partition.plan import build_plan


@st.composite
def graphs_with_owners(draw):
    num_nodes = draw(st.integers(1, 40))
    num_parts = draw(st.integers(1, min(num_nodes, 6)))
    num_edges = draw(st.integers(0, 120))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    edge_index = rng.integers(0, num_nodes, size=(2, num_edges))
    # Every part gets a node; the rest are random, so some nodes end up isolated.
    owner = np.concatenate([np.arange(num_parts), rng.integers(0, num_parts, num_nodes - num_parts)])
    rng.shuffle(owner)
    y = (rng.random(num_edges) < 0.4).astype(np.float32) if draw(st.booleans()) else None
    return edge_index, owner, num_parts, y


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=graphs_with_owners(), drop=st.booleans())
def test_random_plans_keep_every_invariant(case, drop):
    edge_index, owner, num_parts, y = case
    plan = build_plan(edge_index, owner, num_parts, y=y, drop_cut_edges=drop)
    assert_plan_invariants(plan, edge_index, y)
    if y is not None:
        assert plan.num_true_cut_edges == int(((y > 0.5) & (owner[edge_index[0]] != owner[edge_index[1]])).sum())


def test_one_part_is_the_whole_graph_without_halo():
    rng = np.random.default_rng(3)
    edge_index = rng.integers(0, 50, size=(2, 200))
    plan = build_plan(edge_index, np.zeros(50, dtype=np.int64), 1)
    (part,) = plan.parts
    assert part.num_halo == 0 and part.send_ids.size == 0 and part.recv_parts.size == 0
    assert np.array_equal(part.owned_ids, np.arange(50))
    assert np.array_equal(part.edge_ids, np.arange(200))
    assert np.array_equal(part.edge_index, edge_index)
    assert part.edge_owned.all() and part.num_interior_edges == 200
    assert plan.num_cut_edges == 0


def test_one_node_is_halo_for_three_parts_with_matching_send_lists():
    # Node 0 (part 0) feeds nodes 1, 2, 3 owned by parts 1, 2, 3; node 4 (part 1) also feeds 2.
    edge_index = np.array([[0, 0, 0, 4, 5], [1, 2, 3, 2, 0]])
    owner = np.array([0, 1, 2, 3, 1, 0])
    plan = build_plan(edge_index, owner, 4)
    assert_plan_invariants(plan, edge_index)
    for q in (1, 2, 3):
        assert 0 in plan.parts[q].halo_ids
    assert plan.parts[0].send_parts.tolist() == [1, 2, 3]
    assert plan.parts[0].owned_ids[plan.parts[0].send_ids].tolist() == [0, 0, 0]
    # Part 2 receives node 0 from part 0 then node 4 from part 1: grouped by owner.
    assert plan.parts[2].halo_ids.tolist() == [0, 4]
    assert plan.parts[2].recv_parts.tolist() == [0, 1]
    # Edge 0→2 is held by parts 0 and 2 and owned by 2 (dst's owner) only.
    assert plan.parts[2].edge_owned[plan.parts[2].edge_ids == 1].all()
    assert not plan.parts[0].edge_owned[plan.parts[0].edge_ids == 1].any()


def test_interior_edges_come_first():
    edge_index = np.array([[0, 1, 2, 0, 3], [2, 3, 0, 1, 1]])
    owner = np.array([0, 0, 1, 1])
    plan = build_plan(edge_index, owner, 2)
    part0 = plan.parts[0]
    assert part0.edge_ids.tolist() == [3, 0, 1, 2, 4]
    assert part0.num_interior_edges == 1


@pytest.mark.parametrize(
    ("edge_index", "owner", "num_parts", "match"),
    [
        (np.zeros((2, 0), np.int64), np.zeros(3, np.int64), 0, "num_parts must be at least 1"),
        (np.zeros((2, 0), np.int64), np.array([0, 1, 1]), 3, r"parts \[2\] of 3 are empty"),
        (np.zeros((2, 0), np.int64), np.array([0, 5, 1]), 2, r"owner must be within \[0, 2\)"),
        (np.array([[0], [7]]), np.array([0, 1, 1]), 2, r"edge_index must hold node ids within \[0, 3\)"),
        (np.zeros((3, 1), np.int64), np.array([0, 1, 1]), 2, r"edge_index must have shape \(2, E\)"),
        (np.zeros((2, 0), np.int64), np.array([0.0, 1.0]), 2, "owner must be an integer array"),
    ],
)
def test_bad_inputs_raise_one_clear_error(edge_index, owner, num_parts, match):
    with pytest.raises(DomainparError, match=match):
        build_plan(edge_index, owner, num_parts)


def test_labels_of_wrong_length_are_refused():
    with pytest.raises(DomainparError, match=r"y must have shape \(2,\)"):
        build_plan(np.array([[0, 1], [1, 0]]), np.array([0, 1]), 2, y=np.zeros(3))
