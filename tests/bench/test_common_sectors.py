"""Halo exchange vs naive sectors: which particles cross a sector, the gap's error bar, sector inference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from domainpar.data.event_graph import EventGraph
from domainpar.data.graph import build_event_graph
from domainpar.errors import DomainparError
from domainpar.inference.model_io import load_model
from domainpar.inference.runner import whole_graph_logits
from domainpar.parallel.part import rank_part
from domainpar.partition import partition_graph
from bench.common.sectors import SectorScorer, crossing, gap_with_error

from fixtures import EVENT1, trained_event1_checkpoint


def _graph(particle_id) -> EventGraph:
    n = len(particle_id)
    return EventGraph(
        event_id=1, x=np.zeros((n, 3), np.float32), pos=np.zeros((n, 3), np.float32), hit_id=np.arange(n, dtype=np.int64),
        layer=np.zeros(n, np.int64), edge_index=np.zeros((2, 0), np.int64), edge_attr=np.zeros((0, 4), np.float32),
        y=np.zeros(0, np.float32), particle_id=np.asarray(particle_id, np.int64), particle_pt=np.ones(n, np.float32),
    )  # fmt: skip


def test_a_particle_crosses_when_its_hits_have_two_owners():
    graph = _graph([5, 5, 5, 7, 7, 0, 0, 9])
    ids, crosses = crossing(graph, np.array([0, 0, 1, 1, 1, 0, 1, 0]))
    assert ids.tolist() == [5, 7, 9]  # noise (0) is no particle, even when its hits have two owners
    assert crosses.tolist() == [True, False, False]


def test_crossing_needs_truth():
    graph = _graph([1, 2])
    graph = EventGraph(**{**{f: getattr(graph, f) for f in ("event_id", "x", "pos", "hit_id", "layer", "edge_index", "edge_attr")}})
    with pytest.raises(DomainparError, match="needs truth"):
        crossing(graph, np.zeros(2, np.int64))


def test_gap_and_its_paired_bootstrap_error():
    same = np.array([True, False, True, True])
    assert gap_with_error(same, same) == {"gap": 0.0, "error": 0.0}  # paired: identical outcomes have no spread
    rng = np.random.default_rng(1)
    halo = rng.random(4000) < 0.95
    naive = halo & (rng.random(4000) < 0.9)
    result = gap_with_error(halo, naive)
    assert result["gap"] == pytest.approx(halo.mean() - naive.mean())
    # Paired differences: the error is that of the share of particles lost, sqrt(p (1 - p) / n).
    lost = (halo & ~naive).mean()
    assert result["error"] == pytest.approx(np.sqrt(lost * (1 - lost) / 4000), rel=0.1)
    assert gap_with_error(np.zeros(0, bool), np.zeros(0, bool)) == {"gap": None, "error": None}


def test_sector_inference_scores_each_sector_alone_and_never_a_cut_edge(tmp_path):
    torch.set_num_threads(1)
    checkpoint = trained_event1_checkpoint(tmp_path)
    graph, _ = build_event_graph(EVENT1)
    logits, record = SectorScorer(checkpoint, 4).logits(graph)
    assert record == {}
    plan = partition_graph(graph, 4, method="sectors")
    cut = plan.owner[graph.edge_index[0]] != plan.owner[graph.edge_index[1]]
    assert cut.any() and np.isneginf(logits[cut]).all() and np.isfinite(logits[~cut]).all()
    # Each sector's edges are the model run on that sector's subgraph alone.
    loaded = load_model(checkpoint)
    rp = rank_part(graph, 2, None, "cpu", loaded.dtype, plan=plan, check=False)
    with torch.no_grad():
        ids, values = rp.owned_edges(loaded.model(rp.graph, rp.exchange))
    np.testing.assert_allclose(logits[ids.numpy()], values.double().numpy(), rtol=1e-6, atol=1e-6)
    # ... which is not the whole event's inference near the boundaries: the sectors lack their neighbours.
    whole = whole_graph_logits(loaded, graph)
    assert np.abs(whole[~cut] - logits[~cut]).max() > 1e-4


def test_a_sectors_model_is_reused_only_when_trained_as_asked(tmp_path):
    """More sectors than a machine may spawn ranks for are trained under torchrun first; the comparison reuses that
    model only when it is the run it would have made (data, model, optimiser, seed, sectors, steps)."""
    from bench.common.sectors import _trained_as
    from domainpar.train.config import load_config

    config = load_config(None, {"data.train": "g", "parallel.mode": "sectors", "parallel.ranks": 4,
                                "parallel.domain_size": 4, "run.max_steps": 10})  # fmt: skip
    path = tmp_path / "model.pt"
    assert not _trained_as(path, config)
    torch.save({"step": 10, "config": config.replace(**{"parallel.threads": 2}).to_dict()}, path)
    assert _trained_as(path, config)  # the launcher's share of the machine may differ
    changes = ({"run.seed": 1}, {"model.hidden": 8}, {"parallel.domain_size": 2, "parallel.ranks": 2}, {"data.train": "h"},
               {"parallel.mode": "domain"})  # fmt: skip
    for change in changes:
        torch.save({"step": 10, "config": config.replace(**change).to_dict()}, path)
        assert not _trained_as(path, config), change
    torch.save({"step": 9, "config": config.to_dict()}, path)
    assert not _trained_as(path, config)
