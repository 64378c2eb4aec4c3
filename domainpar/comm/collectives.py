"""Small named collectives of a training run: sums, maxima, broadcasts.

One flat tensor per call on the run's device, so each call is one collective whatever the number of values.
Every function is a no-op when ``group`` is None (a one-process run), so single-process code needs no branches.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch
import torch.distributed as dist


def _active(group: Any) -> bool:
    return group is not None and dist.is_initialized() and dist.get_world_size(group) > 1


def sum_values(values: Iterable[float], group: Any, device: torch.device) -> list[float]:
    """SUM of each value over ``group`` in float64 (one collective for all of them).

    Args:
        values: this rank's partial sums (loss shares, byte counts ...).
        group: process group, or None for a one-process run.
        device: the run's device (NCCL needs CUDA tensors).

    Returns:
        The group's totals, in the order given.
    """
    tensor = torch.tensor(list(values), dtype=torch.float64, device=device)
    if _active(group):
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    return tensor.cpu().tolist()


def max_value(value: float, group: Any, device: torch.device) -> float:
    """MAX of ``value`` over ``group`` (e.g. peak memory of the busiest rank)."""
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    if _active(group):
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group)
    return float(tensor.item())


def sum_in_place(tensor: torch.Tensor, group: Any) -> torch.Tensor:
    """SUM ``tensor`` over ``group`` in place (packed metric counters); returns it."""
    if _active(group):
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    return tensor


def broadcast_tensors(tensors: Iterable[torch.Tensor], group: Any, src: int = 0) -> None:
    """Overwrite every rank's ``tensors`` (in place, same order and shapes everywhere) with global rank ``src``'s."""
    if not _active(group):
        return
    for tensor in tensors:
        dist.broadcast(tensor, src=src, group=group)


def broadcast_object(value: Any, group: Any, src: int = 0) -> Any:
    """Global rank ``src``'s ``value`` (small, picklable: a path, a digest) on every rank of ``group``.

    The pickle travels between the ranks of one job, never from a file: it is as trusted as the job's code.
    """
    if not _active(group):
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=src, group=group)
    return holder[0]


__all__ = ["broadcast_object", "broadcast_tensors", "max_value", "sum_in_place", "sum_values"]
