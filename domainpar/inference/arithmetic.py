"""Outputs that do not depend on how the job ran: the event chain's arithmetic on a fixed number of threads.

torch splits its reductions (sums, means, matrix products) and domainpar's numba kernels split theirs (they follow
torch's count: :func:`domainpar.kernels.threads.follow_torch_threads`) into one piece per intra-op thread, and
float32 sums in another order differ in their last bits. A score differing in its last bit is printed with another
last digit, and a score on the threshold or a rounding boundary flips a track or a printed digit, however few
digits are written: rounding the written scores cannot promise the same bytes, only the same arithmetic can. So
every step of the chain that computes what a command writes with split reductions (the edge filter, the GNN on one
process or on each part of a domain group, the exported model, the track builder and its helix fits) runs on
:data:`CHAIN_THREADS` threads, whatever ``--threads``, ``--prefetch``, ``--workers``, the cores of the machine or
the events left to do gave the process: a requeued job writes the bytes of the run it continues. The graph build
is the exception: it splits no reduction (every element is computed by one chunk, :mod:`domainpar.kernels.chunks`),
so it runs on the threads the process was given and writes the same bytes on any number.

The cores of a machine go to replicas (``--workers``), each an event at a time, and to the preparing process.
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
