"""The exactness check: partitioned run versus one process, logits, loss and every gradient.

:func:`verify_worker` runs inside every rank of a domain group. For each :class:`VerifyCase` it gets its part
(:func:`domainpar.parallel.part.rank_part`), runs forward + backward of the case's model, sums the gradients over
the group, gathers every rank's logits (every copy of a replicated cut edge) to rank 0, and compares them with the
plain single-process run of the same weights on rank 0 (no exchange, checkpointing or overlap). Rank 0 broadcasts
the verdicts, so every rank returns the same list of :class:`VerifyResult` (whose fields define the three error
measures); a case passes when all three are at most the dtype's :data:`TOLERANCES`.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.distributed as dist

from domainpar.comm.reduce import all_reduce_gradients, all_reduce_sum
from domainpar.errors import DomainparError
from domainpar.model.exchange import Exchange
from domainpar.model.loss import edge_loss, part_weights
from domainpar.model.registry import build_model
from domainpar.parallel.part import rank_part
from domainpar.partition.local_graph import LocalGraph
from domainpar.partition.plan import build_plan
from domainpar.verification.cases import DTYPES as _DTYPES
from domainpar.verification.cases import TOLERANCES, VerifyCase, VerifyJob, VerifyResult, max_rel
from domainpar.verification.faults import FaultyExchange


def _reference(case: VerifyCase, device: torch.device) -> tuple[torch.Tensor, float, dict[str, torch.Tensor]]:
    """Logits (global edge order), loss and gradients of the plain single-process run."""
    dtype = _DTYPES[case.dtype]
    whole = rank_part(case.graph, device=device, dtype=dtype)  # the one-part plan: identity exchange
    config = replace(case.config, checkpointing=False, overlap=False)
    torch.manual_seed(case.seed)
    model = build_model(config).to(device=device, dtype=dtype)
    logits = model(whole.graph, whole.exchange)
    loss = _loss(case, logits, whole, None, reduce=False)
    loss.backward()
    full_logits = whole.scatter_edges(logits.detach())
    grads = {
        name: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().clone()
        for name, p in model.named_parameters()
    }
    return full_logits, float(loss.detach()), grads


def _loss(case: VerifyCase, logits: torch.Tensor, part, group, reduce: bool = True) -> torch.Tensor:
    """This rank's loss share: pos_weight, or the case's target weighting normalised by the event's weight sum
    (summed over ``group`` when ``reduce``, as training does; the one-process reference sums its own)."""
    if case.loss is None or case.loss.weighting == "pos_weight":
        return edge_loss(logits, part.graph, case.pos_weight)
    weights = part_weights(case.loss, part.data)
    total = torch.tensor([float(weights.sum())], dtype=torch.float64, device=logits.device)
    if reduce:
        dist.all_reduce(total, group=group)
    weights_t = torch.as_tensor(weights, dtype=logits.dtype, device=logits.device)
    return edge_loss(logits, part.graph, weights=weights_t, weight_sum=float(total))


def _reference_key(case: VerifyCase, device: torch.device) -> tuple:
    """What the reference run depends on: the graph object (alive while its cases are), the plain model, dtype,
    seed, loss and device; not the partition."""
    config = replace(case.config, checkpointing=False, overlap=False)
    return (id(case.graph), config.key(), case.dtype, case.seed, case.pos_weight, repr(case.loss), str(device))


def partitioned_step(
    case: VerifyCase, rank: int, world_size: int, device: torch.device, group=None
) -> tuple[LocalGraph, torch.nn.Module, torch.Tensor, torch.Tensor, Exchange]:
    """Forward + backward of this rank's part; gradients summed over ``group``.

    Returns:
        (local graph, model, logits (E_local,), this rank's loss, exchange).
    """
    dtype = _DTYPES[case.dtype]
    plan = build_plan(case.graph.edge_index, case.owner, world_size, y=case.graph.y)
    rp = rank_part(case.graph, rank, group, device, dtype, plan=plan)
    graph, exchange = rp.graph, rp.exchange
    if case.fault is not None:
        exchange = FaultyExchange(exchange, case.fault)
    torch.manual_seed(case.seed)
    model = build_model(case.config).to(device=device, dtype=dtype)
    logits = model(graph, exchange)
    loss = _loss(case, logits, rp, group)
    loss.backward()
    all_reduce_gradients(model, group)
    return graph, model, logits.detach(), loss.detach(), exchange


def _compare(
    name: str,
    dtype: str,
    world_size: int,
    gathered: list,
    reference: tuple,
    model: torch.nn.Module,
    loss_parts: float,
    device: torch.device,
) -> VerifyResult:
    """Rank 0: errors of gathered (ids, values, num_halo) and the summed gradients against the reference."""
    full_values, loss_full, full_grads = reference
    err_values = 0.0
    for ids, values, _ in gathered:
        if ids.numel():
            diff = values.to(device) - full_values[ids.to(device)]
            err_values = max(err_values, float(diff.abs().max()))
    worst_name, err_grad = "", 0.0
    for param_name, param in model.named_parameters():
        grad = param.grad if param.grad is not None else torch.zeros_like(param)
        err = max_rel(grad - full_grads[param_name], full_grads[param_name])
        if err > err_grad or not worst_name:
            worst_name, err_grad = param_name, max(err, err_grad)
    tiny = torch.finfo(_DTYPES[dtype]).tiny
    err_loss = abs(loss_parts - loss_full) / max(abs(loss_full), tiny)
    tolerance = TOLERANCES[dtype]
    return VerifyResult(
        name=name,
        num_parts=world_size,
        dtype=dtype,
        max_abs_err_logits=err_values,
        rel_err_loss=err_loss,
        max_rel_err_grad=err_grad,
        worst_parameter=worst_name,
        loss_full=loss_full,
        loss_parts=loss_parts,
        tolerance=tolerance,
        num_halo=tuple(int(g[2]) for g in gathered),
        passed=bool(err_values <= tolerance and err_loss <= tolerance and err_grad <= tolerance),
    )


def _root(group) -> int:
    return dist.get_global_rank(group, 0) if group is not None else 0


def verify_worker(
    rank: int,
    world_size: int,
    cases: list[VerifyCase],
    device: torch.device | str | None = None,
    group=None,
    references: dict[tuple, tuple] | None = None,
) -> list[VerifyResult]:
    """Run every case on this rank and return the verdicts (identical on every rank).

    Must be called by every rank of ``group`` (default: the world) with the same cases. ``rank`` is the rank within
    ``group``, ``world_size`` its size. ``references``: the single-process runs already made in this process, by
    case (see :func:`verify_jobs_worker`); filled with the ones made here.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    references = {} if references is None else references
    results: list[VerifyResult] = []
    for case in cases:  # dtype and labels are checked where cases are made (run.check_before_start)
        graph, model, logits, loss, _ = partitioned_step(case, rank, world_size, device, group)
        payload = (graph.edge_ids.cpu(), logits.cpu(), graph.num_halo)
        key = _reference_key(case, device)
        loss_parts = float(all_reduce_sum(loss, group))
        gathered = [None] * world_size if rank == 0 else None
        dist.gather_object(payload, gathered, dst=_root(group), group=group)
        verdict = [None]
        if rank == 0:
            if key not in references:
                references[key] = _reference(case, device)
            verdict = [_compare(case.name, case.dtype, world_size, gathered, references[key], model, loss_parts, device)]
        dist.broadcast_object_list(verdict, src=_root(group), group=group)
        results.append(verdict[0])
    return results


def verify_jobs_worker(rank: int, world_size: int, jobs: list[VerifyJob]) -> dict[int, list[VerifyResult]]:
    """Run several domain groups' verifications in one job (many world sizes, one process start-up).

    Every rank creates every group (``new_group`` is collective over the world), then runs, in list order, the
    jobs it belongs to; jobs on disjoint ranks run concurrently, and the fixed order cannot deadlock. A rank that
    leads several jobs makes the single-process reference of a case once for all of them.

    Returns:
        {job index: results} for the jobs whose first rank is this rank.
    """
    groups = []
    for job in jobs:
        if not job.ranks or max(job.ranks) >= world_size or len(set(job.ranks)) != len(job.ranks):
            raise DomainparError(f"job ranks must be distinct ranks below {world_size} (got {list(job.ranks)})")
        groups.append(dist.new_group(list(job.ranks)))
    led: dict[int, list[VerifyResult]] = {}
    references: dict[tuple, tuple] = {}
    for index, (job, group) in enumerate(zip(jobs, groups)):
        if rank not in job.ranks:
            continue
        results = verify_worker(job.ranks.index(rank), len(job.ranks), list(job.cases), None, group, references)
        if rank == job.ranks[0]:
            led[index] = results
    return led
