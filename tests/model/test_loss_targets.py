"""The loss as config: target particles (pT, hits, primary) and acorn's weighting, exact under partitioning; the
default loss unchanged; selections the graph files cannot support refused before training, naming key and file."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from domainpar.data.event_graph import save_graph
from domainpar.data.graph import build_event_graph
from domainpar.errors import DomainparError
from domainpar.model.loss import LossConfig, edge_loss, part_weights, target_mask
from domainpar.parallel.part import rank_part
from domainpar.partition import partition_graph
from domainpar.partition.local_graph import local_graph_of, tensor_of
from domainpar.partition.part_data import cut_part
from domainpar.train.config import load_config
from fixtures import EVENT1

TARGETS = LossConfig(weighting="targets", target_min_pt=0.5, target_min_hits=6, target_primary=True, target_weight=3.0,
                     non_target_weight=0.25, fake_weight=1.0)  # fmt: skip


@pytest.fixture(scope="module")
def graph():
    return build_event_graph(EVENT1)[0]


def test_the_default_loss_is_todays_bitwise(graph):
    whole = rank_part(graph, dtype=torch.float64)
    logits = torch.linspace(-3, 3, graph.num_edges, dtype=torch.float64)
    y = torch.from_numpy(graph.y).double()
    expected = F.binary_cross_entropy_with_logits(logits, y, pos_weight=torch.tensor(2.0, dtype=torch.float64), reduction="sum")
    assert torch.equal(edge_loss(logits, whole.graph, 2.0), expected / graph.num_edges)
    assert LossConfig().needs == [] and load_config(None).loss == LossConfig()


def test_graphs_record_what_the_selection_reads(graph):
    assert graph.particle_nhits is not None and graph.particle_vertex.shape == (graph.num_nodes, 3)
    # A particle's hit count is the number of its hits in the event.
    ids, counts = np.unique(graph.particle_id[graph.particle_id != 0], return_counts=True)
    assert (graph.particle_nhits[graph.particle_id == ids[3]] == counts[3]).all()
    assert (graph.particle_nhits[graph.particle_id == 0] == 0).all()


def test_target_selection(graph):
    src, dst = graph.edge_index
    truth = graph.particle_pt[dst], graph.particle_nhits[dst], graph.particle_vertex[dst]
    mask = target_mask(TARGETS, graph.y, *truth)
    true = graph.y > 0.5
    assert mask.sum() > 0 and (mask <= true).all() and mask.sum() < true.sum()
    assert (truth[0][mask] >= 0.5).all() and (truth[1][mask] >= 6).all()
    assert (np.hypot(truth[2][mask, 0], truth[2][mask, 1]) <= 1.0).all()
    # Each criterion removes true edges on this event.
    for change in ({"target_min_pt": 0.0}, {"target_min_hits": 0}, {"target_primary": False}):
        assert target_mask(dataclasses.replace(TARGETS, **change), graph.y, *truth).sum() > mask.sum(), change


@pytest.mark.parametrize("method", ["metis", "geometric"])
def test_part_shares_add_up_to_the_event_loss_only_with_the_global_weight_sum(graph, method):
    """The parts' losses, each divided by the event's weight sum (what the step reduces over the domain group), add
    up to the whole graph's; divided by their own weight sums they do not."""
    logits = torch.from_numpy(np.random.default_rng(0).normal(size=graph.num_edges))
    whole = rank_part(graph, dtype=torch.float64)
    weights = part_weights(TARGETS, whole.data)
    total = float(weights.sum())
    reference = edge_loss(logits, whole.graph, weights=torch.from_numpy(weights), weight_sum=total)
    plan = partition_graph(graph, 3, method, seed=0)
    global_sum = local_sum = 0.0
    shares = []
    for p in range(3):
        data = cut_part(graph, plan, p)
        w = part_weights(TARGETS, data)
        shares.append((data, w))
        global_sum += float(w.sum())
    assert global_sum == pytest.approx(total, rel=1e-12)
    for data, w in shares:
        local = local_graph_of(data).to("cpu", torch.float64)
        part_logits = logits[tensor_of(data.plan.edge_ids)]
        global_share = edge_loss(part_logits, local, weights=torch.from_numpy(w), weight_sum=global_sum)
        local_share = edge_loss(part_logits, local, weights=torch.from_numpy(w), weight_sum=float(w.sum()))
        reference = reference - global_share
        local_sum += float(local_share)
    assert abs(float(reference)) <= 1e-12
    assert abs(local_sum - float(edge_loss(logits, whole.graph, weights=torch.from_numpy(weights), weight_sum=total))) > 1e-3


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"loss.target_min_pt": 1.0}, r"^command line: --target-min-pt applies to weighting targets only"),
        ({"loss.weighting": "acorn"}, r"^command line: --weighting must be one of pos_weight, targets"),
        ({"loss.weighting": "targets", "loss.fake_weight": -1}, r"^command line: --fake-weight must be a non-negative number"),
        ({"loss.weighting": "targets", "loss.target_weight": 0, "loss.fake_weight": 0},
         r"--target-weight and non_target_weight and fake_weight are all 0"),
    ],
)
def test_loss_config_errors_name_the_key(overrides, message):
    with pytest.raises(DomainparError, match=message):
        load_config(None, overrides)


def test_a_selection_the_graph_files_cannot_support_is_refused_before_training(graph, tmp_path):
    from domainpar.train.run import train

    old = dataclasses.replace(graph, particle_nhits=None, particle_vertex=None)  # as graphs written before this change
    save_graph(old, tmp_path / "graphs" / "event000000001.npz")
    config = load_config(None, {"data.train": str(tmp_path / "graphs"), "run.out": str(tmp_path / "run"),
                                "parallel.mode": "single", "loss.weighting": "targets", "loss.target_min_hits": 5,
                                "model.hidden": 4, "model.num_iterations": 1, "run.progress": False})  # fmt: skip
    with pytest.raises(DomainparError, match=r"event000000001.npz: loss.target_min_hits needs the graphs' particle_nhits, "
                                             r"which this file does not record"):
        train(config)
    assert not (tmp_path / "run" / "config.yaml").exists()
    # pT is recorded by every labelled graph: a pT-only selection trains on them, and the loss is the weighted one.
    summary = train(config.replace(**{"loss.target_min_hits": 0, "loss.target_min_pt": 0.5}))
    assert summary["steps"] == 1 and np.isfinite(summary["step_losses"][0])
