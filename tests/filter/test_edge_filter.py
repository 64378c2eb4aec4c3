"""The edge filter: feature selection by name, the held-out threshold, save/load, one-line errors."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from domainpar.data.graph_files import load_graph
from domainpar.errors import DomainparError
from domainpar.filter.edge_filter import FilterConfig, FilterNet, edge_inputs, load_filter, train_filter

GEOMETRY = ("r", "phi", "z")
NODE = GEOMETRY + ("cell_count", "cell_charge", "cluster_u", "cluster_v")
EDGE = ("dr", "dphi", "dz", "dR", "phi_slope", "z0")
FAST = {"hidden": 16, "layers": 2, "steps": 30, "batch_edges": 1024}


@pytest.fixture(scope="module")
def graph_files(tmp_path_factory) -> list:
    """Four simulated events of 150 particles as graphs with geometry and cluster node features."""
    from domainpar.data.dataset import build_dataset
    from domainpar.data.graph import GraphConfig
    from domainpar.sim.config import SimulationConfig
    from domainpar.sim.dataset import simulate_dataset

    root = tmp_path_factory.mktemp("filter")
    simulate_dataset(root / "events", 4, SimulationConfig(num_particles=150), seed=3, progress=False)
    build_dataset(root / "events", root / "graphs", GraphConfig(node_features=NODE, edge_features=EDGE), progress=False)
    return sorted((root / "graphs").glob("*.npz"))


def _scrambled_cells(graph):
    """The graph with its cluster columns replaced by noise (geometry and edges unchanged)."""
    x = graph.x.copy()
    x[:, len(GEOMETRY) :] = np.random.default_rng(0).normal(size=(x.shape[0], x.shape[1] - len(GEOMETRY))) * 50
    return replace(graph, x=x)


def test_a_filter_reads_only_the_features_it_names(graph_files):
    graph = load_graph(graph_files[0])
    geometric = train_filter(graph_files, FilterConfig(node_features=GEOMETRY, **FAST))
    assert geometric.net.mean.numel() == 2 * len(GEOMETRY) + len(EDGE)
    np.testing.assert_array_equal(geometric.logits(graph), geometric.logits(_scrambled_cells(graph)))
    # The same check fails for a filter that reads every column: the selection is what makes it pass.
    everything = train_filter(graph_files, FilterConfig(**FAST))
    assert everything.net.mean.numel() == 2 * len(NODE) + len(EDGE)
    assert not np.array_equal(everything.logits(graph), everything.logits(_scrambled_cells(graph)))


def test_an_edge_feature_selection_narrows_the_edge_inputs(graph_files):
    edge_filter = train_filter(graph_files, FilterConfig(node_features=GEOMETRY, edge_features=("dphi", "z0"), **FAST))
    assert edge_filter.net.mean.numel() == 2 * len(GEOMETRY) + 2
    # logits() makes each chunk's inputs itself: the rows edge_inputs gives, the selected columns only. Its network
    # runs its norms in numba (FilterNet.score_rows): forward's logits to float32 rounding.
    graph = load_graph(graph_files[0])
    inputs = edge_inputs(graph, *edge_filter.columns(graph, "test"))
    assert inputs.shape == (graph.num_edges, 2 * len(GEOMETRY) + 2)
    with torch.no_grad():
        expected = np.concatenate([edge_filter.net(torch.from_numpy(inputs[s : s + 64])).numpy()
                                   for s in range(0, graph.num_edges, 64)])
    np.testing.assert_allclose(edge_filter.logits(graph, chunk=64), expected, rtol=1e-5, atol=1e-5)


def test_score_rows_is_forward_to_float32_rounding():
    # The inference network (products into scratch without their biases, numba norms adding them, SiLU in place,
    # the last layer a dot per row) against torch's forward, on a net whose norms' weights and biases are not the
    # identity and zero (an untrained net's would hide them), on rows far from standardised (a norm's statistics
    # matter). One float32 rounding of a logit of ~1 is ~1e-7.
    torch.manual_seed(0)
    net = FilterNet(7, 16, 3).eval()
    with torch.no_grad():
        for parameter in net.parameters():
            parameter.normal_(0.0, 0.7)
    rows = 3.0 * torch.randn(1000, 7) + 1.0
    out = np.empty(1000, np.float32)
    with torch.no_grad():
        net.score_rows(rows, (torch.empty(1000, 16), torch.empty(1000, 16)), out)
        expected = net.mlp(rows).squeeze(1).numpy()
    assert np.abs(expected).max() > 1.0 and expected.std() > 0.1  # logits that vary: a dropped term would show
    np.testing.assert_allclose(out, expected, rtol=2e-6, atol=2e-6)


def test_the_selection_survives_save_and_load(graph_files, tmp_path):
    edge_filter = train_filter(graph_files, FilterConfig(node_features=GEOMETRY, **FAST))
    loaded = load_filter(edge_filter.save(tmp_path / "filter.pt"))
    assert loaded.config.node_features == GEOMETRY
    graph = load_graph(graph_files[1])
    np.testing.assert_array_equal(loaded.logits(graph), edge_filter.logits(graph))
    kept = loaded.apply(graph)
    assert kept.num_edges == int((edge_filter.logits(graph) >= edge_filter.threshold).sum())


def test_an_unknown_feature_name_is_a_one_line_error(graph_files):
    with pytest.raises(DomainparError, match=r"filter.node_features \['pixel_depth'\] are not node features") as err:
        train_filter(graph_files, FilterConfig(node_features=("r", "pixel_depth"), **FAST))
    assert "\n" not in str(err.value) and "cell_count" in str(err.value)


def test_a_graph_without_the_named_features_is_refused(graph_files, tmp_path):
    from domainpar.data.dataset import build_dataset
    from domainpar.data.graph import GraphConfig

    edge_filter = train_filter(graph_files, FilterConfig(node_features=NODE[:4], **FAST))
    events = graph_files[0].parent.parent / "events"
    build_dataset(events, tmp_path / "plain", GraphConfig(edge_features=EDGE), progress=False)
    plain = load_graph(sorted((tmp_path / "plain").glob("*.npz"))[0])
    with pytest.raises(DomainparError, match="node features must be"):
        edge_filter.apply(plain)


@pytest.mark.parametrize("value", ["r", ["r", "r"], [1, 2]])
def test_a_malformed_selection_is_refused(value):
    with pytest.raises(DomainparError, match="filter.node_features must be a list of distinct feature names"):
        FilterConfig(node_features=value)


def test_fewer_graphs_than_holdout_every_still_hold_one_out(graph_files):
    # Three graphs, every fifth held out: none would be, and the threshold had nothing to be chosen on.
    edge_filter = train_filter(graph_files[:3], FilterConfig(holdout_every=5, **FAST))
    assert (edge_filter.record["train_graphs"], edge_filter.record["holdout_graphs"]) == (2, 1)
    assert np.isfinite(edge_filter.threshold)
    assert edge_filter.record["holdout_efficiency"] >= 0.995 - 1e-9


def test_the_held_out_logits_are_handed_back_and_prune_as_scoring_again_does(graph_files):
    scored: dict = {}
    edge_filter = train_filter(graph_files, FilterConfig(holdout_every=2, **FAST), held_out_logits=scored)
    assert list(scored) == [str(f) for f in graph_files[1::2]]
    for path, logits in scored.items():
        graph = load_graph(path)
        np.testing.assert_array_equal(logits, edge_filter.logits(graph))
        given, again = edge_filter.apply(graph, logits), edge_filter.apply(graph)
        assert 0 < given.num_edges < graph.num_edges
        np.testing.assert_array_equal(given.edge_index, again.edge_index)
        assert given.build_config == again.build_config
    with pytest.raises(DomainparError, match=rf"expected one logit per edge, shape \({graph.num_edges},\) \(got \(3,\)\)"):
        edge_filter.apply(graph, logits[:3])


def test_the_threshold_keeps_the_asked_share_of_held_out_true_edges(graph_files):
    edge_filter = train_filter(graph_files, FilterConfig(efficiency=0.9, efficiency_pt1=0.95, holdout_every=2, **FAST))
    held = [load_graph(f) for f in graph_files[1::2]]
    logits = np.concatenate([edge_filter.logits(g) for g in held])
    truth = np.concatenate([g.y > 0.5 for g in held])
    assert (logits[truth] >= edge_filter.threshold).mean() >= 0.9
    assert edge_filter.record["holdout_efficiency"] == pytest.approx((logits[truth] >= edge_filter.threshold).mean())


def test_a_share_of_the_false_edges_trains_the_filter(graph_files):
    everything = train_filter(graph_files, FilterConfig(node_features=GEOMETRY, holdout_every=2, **FAST))
    quarter = train_filter(graph_files, FilterConfig(node_features=GEOMETRY, holdout_every=2, negative_fraction=0.25, **FAST))
    graphs = [load_graph(f) for f in graph_files[0::2]]  # every second graph is held out
    true_edges = sum(int((g.y > 0.5).sum()) for g in graphs)
    false_edges = sum(int((g.y <= 0.5).sum()) for g in graphs)
    assert everything.record["train_edges"] == true_edges + false_edges
    # Every true edge is kept and about a quarter of the false ones (a seeded draw).
    kept_false = quarter.record["train_edges"] - true_edges
    assert abs(kept_false - 0.25 * false_edges) < 5 * (0.25 * 0.75 * false_edges) ** 0.5
    # The threshold is still chosen on the whole held-out graphs.
    assert quarter.record["holdout_edges"] == everything.record["holdout_edges"]
    assert quarter.record["holdout_efficiency"] >= 0.995 - 1e-9


def test_logits_do_not_depend_on_the_chunk_size(graph_files):
    # The filter scores a full event in cache-sized chunks (speed). Every chunking, a ragged last chunk and one-row
    # chunks included, scores each edge as the whole graph at once does: a row shifted, lost or scored twice at a
    # chunk boundary would be off by far more than float32 rounding. Not to the bit: the BLAS takes other kernels
    # for few rows (one row is a matrix-vector product), whose sums round differently.
    graph = load_graph(graph_files[0])
    edge_filter = train_filter(graph_files, FilterConfig(node_features=GEOMETRY, **FAST))
    whole = edge_filter.logits(graph, chunk=graph.num_edges)
    assert graph.num_edges > 1000
    for chunk in (1, 7, 100, 1000):
        chunked = edge_filter.logits(graph, chunk=chunk)
        np.testing.assert_allclose(chunked, whole, rtol=1e-5, atol=1e-5, err_msg=f"chunk {chunk}")
        assert chunked.shape == whole.shape and not np.isnan(chunked).any()


def test_logits_are_the_same_bits_on_one_and_two_threads(graph_files, monkeypatch):
    # The event chain scores an event's chunks on the process's threads, whole chunks per thread: each chunk is the
    # same rows through the same products on any thread count, so the bytes a command writes do not depend on it.
    from domainpar.kernels import chunks

    graph = load_graph(graph_files[0])
    reps = -(-70_000 // graph.num_edges)  # enough edges for the chunks to be shared out
    tiled = replace(graph, edge_index=np.tile(graph.edge_index, reps), edge_attr=np.tile(graph.edge_attr, (reps, 1)),
                    y=None if graph.y is None else np.tile(graph.y, reps))  # fmt: skip
    edge_filter = train_filter(graph_files, FilterConfig(node_features=GEOMETRY, **FAST))
    spans = []
    run = chunks.run
    monkeypatch.setattr(chunks, "run", lambda task, ranges: spans.append(len(ranges)) or run(task, ranges))
    logits = {}
    for threads in (1, 2):
        with chunks.using_threads(threads):
            logits[threads] = edge_filter.logits(tiled, chunk=7)
    assert spans[-1] >= 2  # two threads really split the chunks
    assert logits[1].tobytes() == logits[2].tobytes()
    assert logits[1].shape == (tiled.num_edges,) and np.isfinite(logits[1]).all()


def test_every_graph_is_read_once(graph_files, monkeypatch):
    # A full event's graph is ~0.2 GB: the held-out ones are read once, after the steps, not also before them.
    from domainpar.filter import edge_filter as module

    reads = []
    load = module.load_graph
    monkeypatch.setattr(module, "load_graph", lambda path: reads.append(path) or load(path))
    train_filter(graph_files, FilterConfig(holdout_every=2, **FAST))
    assert sorted(reads) == sorted(graph_files)


def test_a_held_out_graph_that_cannot_choose_the_threshold_is_refused_before_the_steps(graph_files, tmp_path, monkeypatch):
    from domainpar.data.event_graph import save_graph
    from domainpar.filter import edge_filter as module

    unlabelled = tmp_path / "event000000099.npz"
    save_graph(replace(load_graph(graph_files[1]), y=None), unlabelled)

    def no_rows(*args, **kwargs):
        raise AssertionError("training rows gathered before the held-out graphs were checked")

    monkeypatch.setattr(module, "_training_rows", no_rows)
    with pytest.raises(DomainparError, match=r"event000000099\.npz: the edge filter trains on graphs with truth"):
        train_filter([graph_files[0], unlabelled], FilterConfig(holdout_every=2, **FAST))
    # Another feature set: other columns by name, or as many columns unnamed.
    graph = load_graph(graph_files[1])
    renamed = tmp_path / "event000000098.npz"
    save_graph(replace(graph, edge_features=tuple(f"{name}_other" for name in graph.edge_features)), renamed)
    narrower = tmp_path / "event000000097.npz"
    save_graph(replace(graph, edge_attr=graph.edge_attr[:, :-1].copy(), edge_features=graph.edge_features[:-1]), narrower)
    for other in (renamed, narrower):
        with pytest.raises(DomainparError, match="the edge filter's training graphs must share one feature set"):
            train_filter([graph_files[0], other], FilterConfig(holdout_every=2, **FAST))


def test_standardising_the_rows_once_trains_the_same_bits_as_in_every_step(graph_files):
    # The rows are standardised once before the steps instead of in every step's forward: elementwise the same
    # operations, so the same weights to the bit (and the recipe's filter, its pruned graphs and all after them).
    from domainpar.filter.edge_filter import _columns, _training_rows
    from domainpar.optim import AdamW

    config = FilterConfig(node_features=GEOMETRY, holdout_every=2, **FAST)
    trained = train_filter(graph_files, config)
    training = graph_files[0::2]
    first = load_graph(training[0])
    inputs, labels = _training_rows(training, config, first, _columns(config, first, "first"))
    generator = torch.Generator().manual_seed(config.seed)
    torch.manual_seed(config.seed)
    net = FilterNet(inputs.shape[1], config.hidden, config.layers)
    net.mean.copy_(inputs.mean(dim=0))
    net.scale.copy_(inputs.std(dim=0).clamp_min(1e-6))
    optimiser = AdamW(net.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=config.lr, total_steps=config.steps)
    positive = float(labels.mean())
    pos_weight = torch.tensor((1.0 - positive) / max(positive, 1e-6))
    initial = net.mlp[0].weight.detach().clone()
    for _ in range(config.steps):  # standardised in each step, by FilterNet.forward
        batch = torch.randint(0, inputs.shape[0], (config.batch_edges,), generator=generator)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(net(inputs[batch]), labels[batch], pos_weight=pos_weight)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        schedule.step()
    reference = net.state_dict()
    for name, tensor in trained.net.state_dict().items():
        assert torch.equal(tensor, reference[name]), name
    assert not torch.equal(reference["mlp.0.weight"], initial)  # the steps moved the weights
