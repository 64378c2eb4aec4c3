"""Gradient and metric reductions over domain groups and replicas.

The full-graph gradient of one event is the SUM of the ranks' gradients over its domain group (docs/design.md);
replicas are then averaged. Gradients are flattened into buckets: a few collectives, not one per parameter.
"""

from __future__ import annotations

from typing import Iterable

import torch
import torch.distributed as dist

#: Bucket size for flattened gradient reductions (elements of 4 MiB of float32).
DEFAULT_BUCKET_ELEMENTS = 1 << 20


def _buckets(tensors: list[torch.Tensor], max_elements: int) -> Iterable[list[torch.Tensor]]:
    """Consecutive runs of same-dtype/device tensors of at most ``max_elements`` (a larger tensor is its own bucket)."""
    bucket: list[torch.Tensor] = []
    size = 0
    for tensor in tensors:
        same_kind = not bucket or (tensor.dtype == bucket[0].dtype and tensor.device == bucket[0].device)
        if bucket and (not same_kind or size + tensor.numel() > max_elements):
            yield bucket
            bucket, size = [], 0
        bucket.append(tensor)
        size += tensor.numel()
    if bucket:
        yield bucket


def _all_reduce_flat(tensors: list[torch.Tensor], group, op, scale: float | None, max_elements: int) -> None:
    for bucket in _buckets(tensors, max_elements):
        flat = torch.cat([t.reshape(-1) for t in bucket])
        dist.all_reduce(flat, op=op, group=group)
        if scale is not None:
            flat.mul_(scale)
        offset = 0
        for tensor in bucket:
            n = tensor.numel()
            tensor.copy_(flat[offset : offset + n].view_as(tensor))
            offset += n


def all_reduce_gradients(
    module: torch.nn.Module,
    domain_group: dist.ProcessGroup | None,
    replica_group: dist.ProcessGroup | None = None,
    *,
    bucket_elements: int = DEFAULT_BUCKET_ELEMENTS,
) -> None:
    """Make every rank's ``.grad`` the full-graph gradient, averaged over replicas.

    SUM over ``domain_group`` (the parts of one event), then MEAN over ``replica_group``. A parameter without a
    gradient on this rank is treated as zero, so all ranks post the same collectives.

    Args:
        module: the model; its parameters' ``.grad`` are reduced in place.
        domain_group: group of the ranks sharing one event (None: the world).
        replica_group: group across replicas, or None for no data parallelism.
        bucket_elements: maximum elements per flattened collective.
    """
    params = [p for p in module.parameters() if p.requires_grad]
    for param in params:
        if param.grad is None:
            param.grad = torch.zeros_like(param)
    grads = [p.grad for p in params]
    if dist.get_world_size(domain_group) > 1:
        _all_reduce_flat(grads, domain_group, dist.ReduceOp.SUM, None, bucket_elements)
    if replica_group is not None:
        replicas = dist.get_world_size(replica_group)
        if replicas > 1:
            _all_reduce_flat(grads, replica_group, dist.ReduceOp.SUM, 1.0 / replicas, bucket_elements)


def all_reduce_sum(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """SUM of ``tensor`` over ``group``, returned as a new tensor (the input is untouched and may require grad).

    For global metrics and loss values: per-rank partial sums (over owned edges) add up to the event's total.
    """
    result = tensor.detach().clone()
    if dist.is_initialized() and dist.get_world_size(group) > 1:
        dist.all_reduce(result, op=dist.ReduceOp.SUM, group=group)
    return result
