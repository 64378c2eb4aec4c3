"""Process groups: domain groups × data-parallel replicas.

The world of W ranks is cut into W / G domain groups of G consecutive ranks (ranks ``r*G .. r*G+G-1`` form
replica ``r``, rank ``r*G + p`` holding part ``p``); the replica group of part ``p`` links the ranks holding part
``p`` in every domain group. Gradients are summed over the domain group and averaged over the replica group.
Consecutive ranks usually share a node, so the chatty halo traffic stays on the fast intra-node links.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch.distributed as dist


@dataclass(frozen=True)
class Layout:
    """Where this rank sits in the domain × replica layout."""

    rank: int
    world_size: int
    """Number of ranks W."""
    domain_size: int
    """Ranks per domain group G (parts per event)."""
    replica: int
    """Index of this rank's domain group, 0 .. num_replicas-1."""
    part: int
    """This rank's part index (rank within its domain group), 0 .. G-1."""
    domain_group: Any = None
    """Process group of this rank's domain group (None when W == 1)."""
    replica_group: Any = None
    """Process group across replicas holding the same part (None when there is one replica)."""
    world_group: Any = None
    """All ranks, with this run's timeout (the default group may have another); None when W == 1."""

    @property
    def num_replicas(self) -> int:
        return self.world_size // self.domain_size

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def domain_ranks(replica: int, domain_size: int) -> list[int]:
    """Global ranks of domain group ``replica``."""
    return list(range(replica * domain_size, (replica + 1) * domain_size))


def replica_ranks(part: int, domain_size: int, world_size: int) -> list[int]:
    """Global ranks holding part ``part`` in every domain group."""
    return list(range(part, world_size, domain_size))


def make_layout(rank: int, world_size: int, domain_size: int, timeout_s: float) -> Layout:
    """Create the process groups (collective: every rank calls it with the same arguments).

    Args:
        rank: this rank.
        world_size: W (the default process group must exist when W > 1).
        domain_size: G, dividing W.
        timeout_s: timeout of every new group.
    """
    if world_size % domain_size:
        raise ValueError(f"world size {world_size} is not divisible by domain size {domain_size}")
    replica, part = divmod(rank, domain_size)
    if world_size == 1:
        return Layout(rank=0, world_size=1, domain_size=1, replica=0, part=0)
    timeout = timedelta(seconds=timeout_s)
    num_replicas = world_size // domain_size
    domain_group = replica_group = None
    # Every rank must create every group, in the same order. The world gets its own group so that
    # every collective of the run has the run's timeout, whatever the default group was created with.
    world_group = dist.new_group(list(range(world_size)), timeout=timeout)
    if domain_size == world_size:
        domain_group = world_group
    else:
        for r in range(num_replicas):
            group = dist.new_group(domain_ranks(r, domain_size), timeout=timeout)
            if r == replica:
                domain_group = group
    if num_replicas > 1:
        if domain_size == 1:
            replica_group = world_group
        else:
            for p in range(domain_size):
                group = dist.new_group(replica_ranks(p, domain_size, world_size), timeout=timeout)
                if p == part:
                    replica_group = group
    return Layout(
        rank=rank,
        world_size=world_size,
        domain_size=domain_size,
        replica=replica,
        part=part,
        domain_group=domain_group,
        replica_group=replica_group,
        world_group=world_group,
    )
