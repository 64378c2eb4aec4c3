"""Outputs that do not depend on how the job ran: the event chain's arithmetic on a fixed number of threads.

torch and domainpar's numba kernels split their reductions into one piece per intra-op thread, and float32 sums in
another order differ in their last bits, which a score on the threshold or a rounding boundary turns into another
track or another printed digit: rounding the written scores cannot promise the same bytes, only the same arithmetic
can (docs/reconstruct.md, "The same bytes, however the job ran"). So every step of the chain that computes what a
command writes with split reductions (the edge filter, the GNN on one process or on each part of a domain group, the
exported model, the track builder and its helix fits) runs on :data:`CHAIN_THREADS` threads, whatever the process
was given. The graph build splits no reduction (:mod:`domainpar.kernels.chunks`), so it keeps the process's threads.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

#: Intra-op threads of the event chain's arithmetic, on every machine, in every process of every job shape.
CHAIN_THREADS = 1


@contextlib.contextmanager
def chain_threads() -> Iterator[None]:
    """Run the block on :data:`CHAIN_THREADS` torch (and numba) threads, then give the process its count back."""
    previous = torch.get_num_threads()
    if previous != CHAIN_THREADS:
        torch.set_num_threads(CHAIN_THREADS)
    try:
        yield
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)


__all__ = ["CHAIN_THREADS", "chain_threads"]
