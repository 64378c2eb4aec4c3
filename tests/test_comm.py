"""Halo exchange and gradient reductions on spawned gloo ranks (one spawn of four for all checks)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist

from domainpar.comm.halo import HaloExchange
from domainpar.comm.reduce import all_reduce_gradients, all_reduce_sum
from domainpar.errors import DomainparError
from domainpar.partition import build_plan
from domainpar.train.launch import spawn
from partition_helpers import random_graph

pytestmark = pytest.mark.distributed

WORLD = 4
NUM_NODES = 90


def _plan(seed: int):
    graph = random_graph(NUM_NODES, 300, seed=seed)
    owner = np.random.default_rng(seed).integers(0, WORLD, NUM_NODES)
    owner[:WORLD] = np.arange(WORLD)
    return build_plan(graph.edge_index, owner, WORLD)


def _exchange_checks(rank: int) -> dict:
    """Forward delivers the owners' rows; backward adds every copy's gradient into the owner's row."""
    plan = _plan(1)
    part = plan.parts[rank]
    features = torch.randn(NUM_NODES, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    upstream = torch.randn(NUM_NODES, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    exchange = HaloExchange(part)
    local_ids = torch.as_tensor(part.local_to_global)
    owned_ids = torch.as_tensor(part.owned_ids)
    # Copies of every node over all parts (owned once + once per part holding it as halo).
    copies = np.ones(NUM_NODES)
    for other in plan.parts:
        np.add.at(copies, other.halo_ids, 1)
    expected_grad = upstream[owned_ids] * torch.as_tensor(copies[part.owned_ids]).unsqueeze(1)
    checks = {}
    for mode in ("sync", "async", "sync-again"):  # the third call reuses the buffers
        x = features[owned_ids].clone().requires_grad_(True)
        out = exchange(x) if mode != "async" else exchange.start(x).wait()
        checks[f"{mode}-forward"] = bool(torch.equal(out.detach(), features[local_ids]))
        (out * upstream[local_ids]).sum().backward()
        checks[f"{mode}-backward"] = bool(torch.allclose(x.grad, expected_grad, rtol=1e-14, atol=0))
    checks["float32"] = bool(torch.equal(exchange(features[owned_ids].float()), features[local_ids].float()))
    checks["bytes"] = exchange.bytes_per_exchange(5, torch.float64) == part.send_ids.size * 5 * 8
    checks["buffers"] = len(exchange._buffers)  # send + grad for float64, send for float32
    return checks


def _reduce_checks(rank: int) -> dict:
    """Domain groups {0,1}, {2,3}; replica groups {0,2}, {1,3}: SUM over domain, MEAN over replicas."""
    domain = [dist.new_group([0, 1]), dist.new_group([2, 3])][rank // 2]
    replica = [dist.new_group([0, 2]), dist.new_group([1, 3])][rank % 2]
    module = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    module[1].bias.requires_grad_(True)
    for index, param in enumerate(module.parameters()):
        param.grad = torch.full_like(param, float((rank + 1) * (index + 1)))
    module[1].bias.grad = None  # unused on every rank: becomes zeros, collectives stay matched
    all_reduce_gradients(module, domain, replica, bucket_elements=7)  # several buckets
    # domain sums: ranks 0+1 -> 3, ranks 2+3 -> 7; mean over replicas -> 5, times (index + 1)
    grads = [p.grad for p in module.parameters()]
    ok = all(torch.equal(g, torch.full_like(g, 5.0 * (i + 1))) for i, g in enumerate(grads[:3]))
    total = all_reduce_sum(torch.tensor([float(rank)], requires_grad=True))
    return {
        "reduce": ok,
        "unused-zero": bool(torch.equal(grads[3], torch.zeros_like(grads[3]))),
        "sum": float(total) == 6.0 and not total.requires_grad,
    }


def _error_checks(rank: int) -> dict:
    errors = {}
    plan = _plan(1)
    try:
        HaloExchange(plan.parts[(rank + 1) % WORLD])
    except DomainparError as exc:
        errors["wrong-part"] = str(exc)
    other = _plan(2)
    mixed = other.parts[0] if rank == 0 else plan.parts[rank]  # rank 0 uses a different plan
    try:
        HaloExchange(mixed)
    except DomainparError as exc:
        errors["mismatch"] = str(exc)
    try:
        HaloExchange(plan.parts[rank])(torch.zeros(3, 2))
    except DomainparError as exc:
        errors["shape"] = str(exc)
    return errors


def comm_worker(rank: int, world_size: int) -> dict:
    return {"exchange": _exchange_checks(rank), "reduce": _reduce_checks(rank), "errors": _error_checks(rank)}


_RESULTS: list = []


def _results() -> list[dict]:
    if not _RESULTS:
        _RESULTS.extend(spawn(comm_worker, WORLD, timeout_s=180, num_threads=1))
    return _RESULTS


@pytest.mark.timeout(200)
def test_halo_exchange_forward_backward_and_buffers():
    for result in _results():
        checks = result["exchange"]
        assert all(checks[f"{m}-{d}"] for m in ("sync", "async", "sync-again") for d in ("forward", "backward")), checks
        assert checks["float32"] and checks["bytes"]
        assert checks["buffers"] == 3  # reused across steps, one per (kind, width, dtype)


@pytest.mark.timeout(200)
def test_gradient_reduction_sum_over_domain_mean_over_replicas():
    for result in _results():
        assert result["reduce"] == {"reduce": True, "unused-zero": True, "sum": True}


@pytest.mark.timeout(200)
def test_exchange_errors_are_one_line_and_name_the_problem():
    for rank, result in enumerate(_results()):
        errors = result["errors"]
        assert errors["wrong-part"] == f"rank {rank} of the domain group must be given part {rank} (got part {(rank + 1) % WORLD})"
        assert errors["mismatch"].startswith("halo plan mismatch: part ")
        assert "x_owned must have shape" in errors["shape"]
        assert all("\n" not in message for message in errors.values())
