"""Event sampling: size-bucketed, seeded, identical on every rank, resumable.

Every rank builds the same sequence of optimiser steps from ``(seed, epoch)``
and the event sizes alone, so the schedule does not depend on the process
layout: a run resumed with another number of ranks (same ``batch_events``)
sees the same events in the same steps. Within a step, events have similar
sizes (they are neighbours in the size order), so the data-parallel replicas
that split the step get similar work and wait little at the gradient
all-reduce.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from domainpar.errors import DomainparError


class BucketSampler:
    """Deterministic size-bucketed batches of event indices.

    Args:
        sizes: (num_events,) work estimate of every event (e.g. number of edges).
        batch_events: events per optimiser step over the whole world.
        seed: run seed; epoch e uses the stream ``(seed, e)``.
    """

    def __init__(self, sizes: Sequence[int], batch_events: int, seed: int) -> None:
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.batch_events = int(batch_events)
        self.seed = int(seed)
        if self.sizes.shape[0] < self.batch_events:
            raise DomainparError(
                f"--batch-events {self.batch_events} needs at least that many training events (got {self.sizes.shape[0]})"
            )

    @property
    def num_events(self) -> int:
        return int(self.sizes.shape[0])

    @property
    def steps_per_epoch(self) -> int:
        """Full steps per epoch; the ``num_events % batch_events`` left-over events (random each epoch) are skipped."""
        return self.num_events // self.batch_events

    def epoch_batches(self, epoch: int) -> np.ndarray:
        """(steps_per_epoch, batch_events) event indices of every step of ``epoch``."""
        rng = np.random.default_rng([self.seed, int(epoch)])
        used = rng.permutation(self.num_events)[: self.steps_per_epoch * self.batch_events]
        # Stable sort of a random permutation: equal sizes stay in random order.
        by_size = used[np.argsort(self.sizes[used], kind="stable")]
        batches = by_size.reshape(self.steps_per_epoch, self.batch_events)
        return batches[rng.permutation(self.steps_per_epoch)]

    def replica_events(self, epoch: int, step_in_epoch: int, replica: int, num_replicas: int) -> list[int]:
        """Events of one step handled by ``replica`` (a contiguous slice of the step's batch)."""
        per_replica = self.batch_events // num_replicas
        batch = self.epoch_batches(epoch)[step_in_epoch]
        return [int(i) for i in batch[replica * per_replica : (replica + 1) * per_replica]]


def assign_round_robin(sizes: Sequence[int], num_replicas: int) -> list[list[int]]:
    """Split events over replicas for evaluation: largest first, dealt round-robin (similar work, every event once)."""
    order = np.argsort(-np.asarray(sizes, dtype=np.int64), kind="stable")
    return [[int(i) for i in order[r::num_replicas]] for r in range(num_replicas)]
