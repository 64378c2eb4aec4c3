"""METIS, geometric and sectors partitioners: valid plans on real and random graphs, edge cases."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from fixtures import TRACKML_DIR, hits_graph, random_graph
from plan_oracle import assert_plan_invariants

from domainpar.data.event_graph import EventGraph
from domainpar.errors import DomainparError
from domainpar.partition import METHODS, partition_graph
from domainpar.partition.geometric import default_factorisation, geometric_owners
from domainpar.partition.metis import metis_owners
from domainpar.partition.owners import fill_empty_parts
from domainpar.partition.report import partition_report


@pytest.fixture(scope="module")
def real_graph() -> EventGraph:
    """The small labelled real event with (eta, phi)-window edges: ~5.5k hits, ~12k edges."""
    return hits_graph(TRACKML_DIR / "event000000001-hits.csv.gz", window=0.08, event_id=1)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("num_parts", [1, 2, 4, 7])
def test_every_method_gives_a_valid_plan_on_the_real_event(real_graph, method, num_parts):
    plan = partition_graph(real_graph, num_parts, method, seed=1)
    assert plan.method == method and plan.num_parts == num_parts
    assert plan.graph_hash == real_graph.content_hash()
    assert_plan_invariants(plan, real_graph.edge_index, real_graph.y)
    assert plan.drops_cut_edges == (method == "sectors")
    if num_parts == 1:
        assert plan.parts[0].num_halo == 0 and plan.num_cut_edges == 0
    elif method != "metis":
        # The subsampled event falls apart into ~2k components, which METIS may cut nowhere.
        assert plan.num_cut_edges > 0


from fixtures import SHARED_TRACKML

FULL_EVENT = SHARED_TRACKML / "event000021000-hits.csv.gz"


@pytest.mark.skipif(not FULL_EVENT.exists(), reason="full real event not available")
def test_every_method_on_the_full_real_event():
    graph = hits_graph(FULL_EVENT, window=0.03, labels=False, event_id=21000)
    for method in METHODS:
        plan = partition_graph(graph, 8, method, seed=0)
        assert_plan_invariants(plan, graph.edge_index, None)
        report = partition_report(plan)
        assert report.edge_cut_fraction < 0.1 and report.imbalance_edges < 1.15
        if method != "sectors":
            assert report.halo_fraction > 0 and report.bytes_per_step > 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_nodes=st.integers(1, 60),
    edges_per_node=st.integers(0, 4),
    num_parts=st.integers(1, 8),
    method=st.sampled_from(METHODS),
    labels=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_every_method_on_random_graphs(num_nodes, edges_per_node, num_parts, method, labels, seed):
    graph = random_graph(num_nodes, num_nodes * edges_per_node, seed=seed, labels=labels)
    if num_parts > num_nodes:
        with pytest.raises(DomainparError, match="num_parts must be at most the number of nodes"):
            partition_graph(graph, num_parts, method, seed=seed)
        return
    plan = partition_graph(graph, num_parts, method, seed=seed)
    assert_plan_invariants(plan, graph.edge_index, graph.y)


def test_metis_is_deterministic_for_a_seed(real_graph):
    first = partition_graph(real_graph, 4, "metis", seed=7)
    again = partition_graph(real_graph, 4, "metis", seed=7)
    assert np.array_equal(first.owner, again.owner)
    for a, b in zip(first.parts, again.parts):
        assert np.array_equal(a.edge_index, b.edge_index) and np.array_equal(a.send_ids, b.send_ids)


def test_metis_edge_balance_beats_plain_node_balance_on_edges(real_graph):
    def edge_imbalance(balance):
        from domainpar.partition.plan import build_plan

        owner = metis_owners(real_graph.edge_index, real_graph.num_nodes, 4, seed=0, balance=balance)

        return partition_report(build_plan(real_graph.edge_index, owner, 4)).imbalance_edges

    assert edge_imbalance("edges") < edge_imbalance("nodes")


def test_metis_cuts_far_fewer_edges_than_random_owners(real_graph):
    plan = partition_graph(real_graph, 4, "metis")
    random_cut = 1 - 1 / 4  # expected cut fraction of uniformly random owners
    assert plan.num_cut_edges / real_graph.num_edges < 0.2 * random_cut


def test_metis_fills_parts_left_empty_on_tiny_graphs():
    graph = random_graph(5, 0, seed=0)  # 5 isolated nodes, 5 parts
    plan = partition_graph(graph, 5, "metis")
    assert sorted(p.num_owned for p in plan.parts) == [1, 1, 1, 1, 1]


def test_fill_empty_parts_moves_the_last_node_of_the_largest_part():
    owner = np.array([0, 0, 0, 2, 2])
    assert fill_empty_parts(owner, 3).tolist() == [0, 0, 1, 2, 2]
    assert fill_empty_parts(owner, 4).tolist() == [0, 3, 1, 2, 2]  # ties: lowest part donates
    same = np.array([0, 1])
    assert fill_empty_parts(same, 2) is same


def test_default_factorisation_is_wedges_then_eta_slices():
    assert [default_factorisation(p) for p in (1, 2, 4, 7, 16, 32, 48, 64, 17)] == [
        (1, 1), (2, 1), (4, 1), (7, 1), (16, 1), (16, 2), (16, 3), (16, 4), (17, 1)
    ]


def test_geometric_sectors_are_phi_wedges_times_eta_slices(real_graph):
    owner = geometric_owners(real_graph.pos, real_graph.edge_index, 8, num_phi=4, num_eta=2, boundaries="uniform")
    pos = real_graph.pos.astype(np.float64)
    phi = np.arctan2(pos[:, 1], pos[:, 0])
    eta = np.arcsinh(pos[:, 2] / np.hypot(pos[:, 0], pos[:, 1]))
    wedge, eta_slice = owner % 4, owner // 4
    for w in range(3):  # wedge boundaries are at equal angles
        assert phi[wedge == w].max() <= phi[wedge == w + 1].min()
    assert eta[eta_slice == 0].max() <= eta[eta_slice == 1].min()


def test_quantile_sectors_balance_edges_better_than_equal_widths(real_graph):
    from domainpar.partition.plan import build_plan

    def imbalance(boundaries):
        owner = geometric_owners(real_graph.pos, real_graph.edge_index, 8, boundaries=boundaries)
        return partition_report(build_plan(real_graph.edge_index, owner, 8)).imbalance_edges

    assert imbalance("quantile") < imbalance("uniform")
    assert imbalance("quantile") < 1.15


def test_z_slices_are_available(real_graph):
    plan = partition_graph(real_graph, 4, "geometric", num_phi=1, num_eta=4, coordinate="z")
    assert_plan_invariants(plan, real_graph.edge_index, real_graph.y)
    z = real_graph.pos[:, 2]
    assert z[plan.owner == 0].max() <= z[plan.owner == 1].min()


def test_sectors_report_the_true_edges_they_lose(real_graph):
    plan = partition_graph(real_graph, 4, "sectors")
    owner = plan.owner
    src, dst = real_graph.edge_index
    cut = owner[src] != owner[dst]
    true = real_graph.y > 0.5
    report = partition_report(plan)
    assert report.true_edges_lost == pytest.approx((cut & true).sum() / true.sum())
    assert report.edges_lost == pytest.approx(cut.mean())
    assert report.halo_fraction == 0.0 and report.bytes_per_step == 0
    assert 0 < report.true_edges_lost < 0.5
    # Same owners as geometric: sectors differ only by dropping the cut edges.
    assert np.array_equal(owner, partition_graph(real_graph, 4, "geometric").owner)


def test_graph_without_labels(real_graph):
    unlabelled = random_graph(200, 800, seed=4, labels=False)
    for method in METHODS:
        plan = partition_graph(unlabelled, 3, method)
        assert_plan_invariants(plan, unlabelled.edge_index, None)
        assert plan.parts[0].num_positive_edges_global == 0
    report = partition_report(partition_graph(unlabelled, 3, "sectors"))
    assert report.true_edges_lost is None and report.edges_lost > 0


@pytest.mark.parametrize(
    ("num_parts", "method", "options", "match"),
    [
        (0, "metis", {}, "num_parts must be at least 1"),
        (-2, "geometric", {}, "num_parts must be at least 1"),
        (10**6, "metis", {}, r"num_parts must be at most the number of nodes \(5527\)"),
        (4, "kmeans", {}, "method must be one of metis, geometric, sectors"),
        (4, "metis", {"balanse": "edges"}, "options for method 'metis' must be among"),
        (4, "metis", {"balance": "memory"}, "balance must be one of edges, nodes, both"),
        (4, "geometric", {"num_phi": 3, "num_eta": 2}, r"num_phi x num_eta must equal num_parts=4"),
        (4, "geometric", {"coordinate": "r"}, "coordinate must be one of eta, z"),
        (2.5, "metis", {}, "num_parts must be an integer"),
    ],
)
def test_bad_partition_requests_raise_one_clear_error(real_graph, num_parts, method, options, match):
    with pytest.raises(DomainparError, match=match):
        partition_graph(real_graph, num_parts, method, **options)


@pytest.fixture(scope="module")
def built_graph() -> EventGraph:
    """The small labelled event through the project's own graph builder."""
    graph_module = pytest.importorskip("domainpar.data.graph")
    from domainpar.data.trackml import load_event

    hits, truth, particles = load_event(TRACKML_DIR / "event000000001", ("hits", "truth", "particles"))
    graph, _ = graph_module.build_graph(hits, truth=truth, particles=particles, event_id=1)
    return graph


@pytest.mark.parametrize("method", METHODS)
def test_every_method_on_the_built_real_graph(built_graph, method):
    for num_parts in (1, 3, 8):
        plan = partition_graph(built_graph, num_parts, method, seed=0)
        assert_plan_invariants(plan, built_graph.edge_index, built_graph.y)
        report = partition_report(plan)
        if method == "sectors" and num_parts > 1:
            assert 0 < report.true_edges_lost < 0.2
