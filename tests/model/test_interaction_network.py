"""The Interaction Network, its loss and the PyG interop on one process (no halo)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from domainpar.errors import DomainparError
from domainpar.model.exchange import Exchange, IdentityExchange
from domainpar.model.interaction_network import InteractionNetwork, PairMLP
from domainpar.model.config import ModelConfig
from domainpar.model.loss import edge_loss
from domainpar.partition import build_plan
from domainpar.partition.local_graph import local_graph
from fixtures import random_graph


def _whole(graph, dtype=torch.float64):
    plan = build_plan(graph.edge_index, np.zeros(graph.num_nodes, np.int64), 1, y=graph.y)
    return local_graph(graph, plan.parts[0]).to("cpu", dtype)


def _run(config, graph, seed=0):
    torch.manual_seed(seed)
    model = InteractionNetwork(config).double()
    logits = model(graph)
    loss = edge_loss(logits, graph, pos_weight=2.0)
    loss.backward()
    return logits.detach(), loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def test_logits_shape_and_gradients_everywhere():
    graph = _whole(random_graph(50, 150, seed=1))
    logits, loss, grads = _run(ModelConfig(hidden=8, num_iterations=3), graph)
    assert logits.shape == (150,) and torch.isfinite(logits).all() and torch.isfinite(loss)
    assert all(torch.isfinite(g).all() for g in grads.values())
    assert sum(int(g.abs().sum() > 0) for g in grads.values()) == len(grads)  # every parameter is used


@pytest.mark.parametrize("checkpointing, overlap", [(True, False), (False, True), (True, True)])
def test_checkpointing_and_overlap_change_nothing_on_one_process(checkpointing, overlap):
    graph = _whole(random_graph(60, 200, seed=2))
    base = _run(ModelConfig(hidden=8, num_iterations=3), graph)
    other = _run(ModelConfig(hidden=8, num_iterations=3, checkpointing=checkpointing, overlap=overlap), graph)
    assert torch.equal(base[0], other[0]) and torch.equal(base[1], other[1])
    for name, grad in base[2].items():
        assert torch.allclose(grad, other[2][name], rtol=0, atol=1e-14), name


def _pair_edges(pair, proj_src, proj_dst, e, src, dst):
    """PairMLP's output for edges (src, dst) with features e, its node projections gathered by plain indexing."""
    first = pair.mlp.first
    return pair.mlp.tail(proj_src[src] + proj_dst[dst] + F.linear(e, first.weight[:, 2 * pair.hidden :], first.bias))


def test_project_then_gather_equals_concatenated_mlp():
    torch.manual_seed(0)
    pair = PairMLP(hidden=6, depth=2, activation="silu", layer_norm=True).double()
    x = torch.randn(10, 6, dtype=torch.float64)
    e = torch.randn(25, 6, dtype=torch.float64)
    src, dst = torch.randint(0, 10, (2, 25))
    proj_src, proj_dst = pair.project(x)
    fast = _pair_edges(pair, proj_src, proj_dst, e, src, dst)
    naive = pair.mlp(torch.cat([x[src], x[dst], e], dim=1))
    assert torch.allclose(fast, naive, rtol=0, atol=1e-12)


def test_per_part_losses_add_up_to_full_loss():
    graph = random_graph(80, 300, seed=3)
    whole = _whole(graph)
    torch.manual_seed(0)
    logits = torch.randn(graph.num_edges, dtype=torch.float64)
    full = edge_loss(logits, whole, pos_weight=3.0)
    reference = torch.nn.functional.binary_cross_entropy_with_logits(
        logits, whole.y.double(), pos_weight=torch.tensor(3.0, dtype=torch.float64)
    )
    assert torch.allclose(full, reference, rtol=1e-14)
    owner = np.random.default_rng(0).integers(0, 3, graph.num_nodes)
    owner[:3] = [0, 1, 2]
    plan = build_plan(graph.edge_index, owner, 3, y=graph.y)
    parts = [local_graph(graph, part).to("cpu", torch.float64) for part in plan.parts]
    total = sum(edge_loss(logits[p.edge_ids], p, pos_weight=3.0) for p in parts)
    assert torch.allclose(total, full, rtol=1e-13)


def test_non_recurrent_has_networks_per_iteration():
    shared = InteractionNetwork(ModelConfig(hidden=8, num_iterations=4))
    separate = InteractionNetwork(ModelConfig(hidden=8, num_iterations=4, recurrent=False))
    assert len(separate.edge_networks) == 4 and len(shared.edge_networks) == 1


def test_zero_iterations_still_classifies():
    graph = _whole(random_graph(20, 40, seed=4))
    logits, _, _ = _run(ModelConfig(hidden=4, num_iterations=0), graph)
    assert logits.shape == (40,)


def test_identity_exchange_satisfies_protocol():
    exchange = IdentityExchange()
    assert isinstance(exchange, Exchange) and exchange.num_halo == 0
    x = torch.randn(3, 2)
    assert exchange(x) is x and exchange.start(x).wait() is x


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"hidden": 0}, "hidden must be a positive integer"),
        ({"activation": "softplus2"}, "activation must be one of"),
        ({"num_iterations": -1}, "num_iterations must be a non-negative integer"),
    ],
)
def test_config_errors(changes, message):
    with pytest.raises(DomainparError, match=message):
        ModelConfig(**changes)


def test_config_round_trip_and_unknown_key():
    config = ModelConfig(hidden=32, overlap=True)
    assert ModelConfig.from_dict(config.to_dict()) == config
    with pytest.raises(DomainparError, match="unknown keys \\['hiden'\\]"):
        ModelConfig.from_dict({"hiden": 3})


def test_forward_input_errors():
    graph = _whole(random_graph(20, 40, seed=5))
    model = InteractionNetwork(ModelConfig(hidden=4, node_features=5)).double()
    with pytest.raises(DomainparError, match="graph.x must have shape \\(n_owned, 5\\)"):
        model(graph)

    class TwoHalo(IdentityExchange):
        num_halo = 2

    with pytest.raises(DomainparError, match="exchange delivers 2 halo rows but the local graph has 0"):
        InteractionNetwork(ModelConfig(hidden=4)).double()(graph, TwoHalo())


def test_loss_errors():
    graph = random_graph(10, 20, seed=6, labels=False)
    whole = _whole(graph)
    with pytest.raises(DomainparError, match="truth labels"):
        edge_loss(torch.zeros(20, dtype=torch.float64), whole)
    labelled = _whole(random_graph(10, 20, seed=6))
    with pytest.raises(DomainparError, match="logits must have shape \\(20,\\)"):
        edge_loss(torch.zeros(19, dtype=torch.float64), labelled)
    with pytest.raises(DomainparError, match="pos_weight must be positive"):
        edge_loss(torch.zeros(20, dtype=torch.float64), labelled, pos_weight=0.0)


# ---- PyG interop ---------------------------------------------------------------------------


def test_pyg_round_trip():
    from domainpar.model.pyg import from_pyg, to_pyg

    graph = random_graph(30, 70, seed=7)
    data = to_pyg(graph)
    assert data.num_nodes == 30 and data.edge_index.shape == (2, 70) and data.event_id == graph.event_id
    back = from_pyg(data)
    assert back.content_hash() == graph.content_hash()
    for name in ("x", "pos", "edge_attr", "y", "layer"):
        np.testing.assert_array_equal(getattr(back, name), getattr(graph, name))
    del data.layer
    with pytest.raises(DomainparError, match="missing \\['layer'\\]"):
        from_pyg(data)


def test_domain_parallel_conv_is_the_layer_on_one_process():
    from torch_geometric.nn import GATConv

    from domainpar.model.pyg import DomainParallelConv

    graph = _whole(random_graph(40, 120, seed=8))
    torch.manual_seed(0)
    layer = GATConv(3, 4, heads=2, edge_dim=4).double()
    wrapped = DomainParallelConv(layer)
    expected = layer(graph.x, graph.edge_index, edge_attr=graph.edge_attr)
    assert torch.equal(wrapped(graph.x, graph, edge_attr=graph.edge_attr), expected)


def test_domain_parallel_conv_rejects_reversed_flow():
    from torch_geometric.nn import GraphConv

    from domainpar.model.pyg import DomainParallelConv

    with pytest.raises(DomainparError, match="flow must be 'source_to_target'"):
        DomainParallelConv(GraphConv(3, 3, flow="target_to_source"))


def _plain_forward(model, graph):
    """The Interaction Network written with plain PyTorch ops (indexing, index_add): the formulation the kernels replace."""
    src, dst = graph.edge_index
    n = graph.num_owned
    x = model.node_encoder(graph.x)
    e = model.edge_encoder(graph.edge_attr)
    for step in range(model.config.num_iterations):
        edge_net, node_net = model._networks(step)
        proj_src, proj_dst = edge_net.project(x)
        e = e + _pair_edges(edge_net, proj_src, proj_dst, e, src, dst)
        sum_in = torch.zeros_like(x).index_add(0, dst, e)
        sum_out = torch.zeros_like(x).index_add(0, src, e)
        x = x + node_net(torch.cat([x, sum_in, sum_out], dim=1))
    proj_src, proj_dst = model.head.project(x)
    return model.head_output(_pair_edges(model.head, proj_src, proj_dst, e, src, dst)).squeeze(-1)


@pytest.mark.parametrize("activation", ["relu", "silu"])  # relu: fused row kernels on CPU; silu: PyTorch's
@pytest.mark.parametrize("checkpointing, overlap", [(False, False), (True, False), (False, True), (True, True)])
def test_segment_and_row_kernels_equal_the_plain_formulation(activation, checkpointing, overlap):
    graph = _whole(random_graph(70, 260, seed=5))
    config = ModelConfig(hidden=8, num_iterations=3, mlp_layers=3, activation=activation, checkpointing=checkpointing, overlap=overlap)
    torch.manual_seed(0)
    model = InteractionNetwork(config).double()
    weights = torch.linspace(-1, 1, graph.num_edges, dtype=torch.float64)
    params = list(model.parameters())
    want_logits = _plain_forward(model, graph)
    want = torch.autograd.grad((want_logits * weights).sum(), params)
    logits = model(graph)
    got = torch.autograd.grad((logits * weights).sum(), params)
    assert torch.allclose(logits, want_logits, rtol=0, atol=1e-12)
    for (name, _), g, w in zip(model.named_parameters(), got, want):
        assert torch.allclose(g, w, rtol=1e-10, atol=1e-12), name


def test_training_step_is_bitwise_repeatable():
    graph = _whole(random_graph(60, 220, seed=6), dtype=torch.float32)
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = InteractionNetwork(ModelConfig(hidden=8, num_iterations=2, activation="relu", checkpointing=True))
        loss = model(graph).square().sum()
        loss.backward()
        runs.append([p.grad for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*runs))


@pytest.mark.parametrize("overlap", [False, True])
def test_the_model_keeps_no_graph_alive(overlap):
    """A graph's grouping is cached while the graph lives and never keeps it alive: training reads a new graph every
    step once the events outgrow the part cache, and a grouping that held its graph grew a full-event run by ~70 MB
    a step (10 GB after 10 epochs of 16 events, then the kernel killed a rank)."""
    import gc
    import weakref

    model = InteractionNetwork(ModelConfig(hidden=8, num_iterations=2, overlap=overlap)).double()
    alive = []
    for seed in range(12):
        graph = _whole(random_graph(40, 120, seed=seed))
        model(graph).sum().backward()
        alive.append(weakref.ref(graph.edge_index))
        del graph
    gc.collect()
    assert [ref() is None for ref in alive] == [True] * 12
    assert len(model._structures) == 0


def test_a_whole_graph_groups_each_edge_end_once(monkeypatch):
    """Without halo rows the owned rows are the local rows: their groupings are one sort each, not two."""
    from domainpar.model import interaction_network as module

    sorted_ends = []
    real = module.build_segments
    monkeypatch.setattr(module, "build_segments", lambda index, *a, **k: sorted_ends.append(index.numel()) or real(index, *a, **k))
    model = InteractionNetwork(ModelConfig(hidden=8, num_iterations=2)).double()
    whole = _whole(random_graph(40, 120, seed=3))
    model(whole)
    structure = model._structure(whole)
    assert sorted_ends == [120, 120]
    assert structure.src_owned is structure.src_local and structure.dst_owned is structure.dst_local
    # A part with halo rows keeps separate owned groupings (the halo rows' edges belong to no owned segment).
    graph = random_graph(40, 120, seed=3)
    plan = build_plan(graph.edge_index, np.arange(40) % 2, 2, y=graph.y)
    part = local_graph(graph, plan.parts[0]).to("cpu", torch.float64)
    assert part.num_halo > 0
    sorted_ends.clear()
    structure = model._structure(part)
    assert len(sorted_ends) == 4 and structure.src_owned is not structure.src_local
