"""The seam ``domainpar.parallel.part``: whole graph as one part, parts read from files equal parts cut in memory,
partitioned logits scattered back equal the one-process logits, and a group holding parts of different plans is refused.

One spawned 3-rank gloo job runs every distributed check (float64, tolerance 1e-10).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from fixtures import random_graph

from domainpar.errors import DomainparError
from domainpar.launch.ranks import spawn
from domainpar.model.exchange import IdentityExchange
from domainpar.model.config import ModelConfig
from domainpar.model.registry import build_model
from domainpar.parallel.part import RankPart, load_host_part, rank_part
from domainpar.partition import partition_graph
from domainpar.partition.io import part_file_name, save_plan

WORLD = 3


def _graph():
    return random_graph(240, 1100, seed=31)


def _model(graph) -> torch.nn.Module:
    torch.manual_seed(3)
    config = ModelConfig(node_features=graph.x.shape[1], edge_features=graph.edge_attr.shape[1], hidden=8, num_iterations=2)
    return build_model(config).to(torch.float64)


def test_the_whole_graph_runs_as_one_part_with_the_identity_exchange():
    graph = _graph()
    rp = rank_part(graph, dtype=torch.float64)
    assert isinstance(rp, RankPart) and isinstance(rp.exchange, IdentityExchange)
    assert rp.graph.x.dtype == torch.float64 and torch.equal(rp.graph.edge_index, torch.from_numpy(graph.edge_index))
    assert rp.graph.num_edges_global == graph.num_edges and bool(rp.graph.edge_owned.all())
    logits = _model(graph)(rp.graph, rp.exchange)
    # One part: the scatter is the identity on edge order.
    assert torch.equal(rp.scatter_edges(logits), logits)
    ids, values = rp.owned_edges(logits)
    assert torch.equal(ids, torch.arange(graph.num_edges)) and torch.equal(values, logits)


def test_a_graph_is_part_zero_of_its_one_part_plan_only():
    with pytest.raises(DomainparError, match="the whole graph is part 0 of a one-part plan"):
        load_host_part(_graph(), 1)


def _job(rank: int, world_size: int, root: str) -> dict:
    """Each rank: its part from its file and cut in memory; logits scattered and summed; a mismatched group refused."""
    graph = _graph()
    plan = partition_graph(graph, world_size, "metis", seed=1)
    group = dist.group.WORLD
    plans = Path(root)
    from_file = rank_part(plans / "a" / part_file_name(rank), rank, group, dtype=torch.float64, expect={"num_parts": world_size})
    in_memory = rank_part(graph, rank, group, dtype=torch.float64, plan=plan)
    same = all(
        torch.equal(getattr(from_file.graph, name), getattr(in_memory.graph, name))
        for name in ("x", "edge_index", "edge_attr", "edge_owned", "edge_ids", "y")
    )
    model = _model(graph)
    logits = model(from_file.graph, from_file.exchange)
    event = from_file.scatter_edges(logits.detach())
    dist.all_reduce(event)
    # Rank 1 reads its part from another plan of the same event (another METIS seed).
    mine = plans / ("b" if rank == 1 else "a") / part_file_name(rank)
    try:
        rank_part(mine, rank, group, dtype=torch.float64)
        mismatch = None
    except DomainparError as exc:
        mismatch = str(exc)
    return {"same": same, "event": event.numpy(), "mismatch": mismatch, "file": str(mine), "halo": from_file.graph.num_halo}


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("seam")
    graph = _graph()
    save_plan(partition_graph(graph, WORLD, "metis", seed=1), root / "a", graph)
    save_plan(partition_graph(graph, WORLD, "metis", seed=2), root / "b", graph)
    return spawn(_job, WORLD, args=(str(root),), timeout_s=120, num_threads=1)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_parts_read_from_files_equal_parts_cut_in_memory(job):
    assert [r["same"] for r in job] == [True] * WORLD
    assert sum(r["halo"] for r in job) > 0  # the plan really cuts


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_scattered_partitioned_logits_equal_the_one_process_logits(job):
    graph = _graph()
    rp = rank_part(graph, dtype=torch.float64)
    reference = _model(graph)(rp.graph, rp.exchange).detach().numpy()
    for result in job:
        np.testing.assert_allclose(result["event"], reference, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_a_group_holding_parts_of_two_plans_is_refused_before_the_first_exchange(job):
    for rank, result in enumerate(job):
        message = result["mismatch"]
        assert message is not None and "\n" not in message
        assert message.startswith(f"{result['file']}: holds part {rank} of event 31, plan ")
        assert "all ranks of a group must read the parts of one plan" in message
