"""Every core for the graph build: its kernels and per-edge numpy on contiguous chunks, from a small thread pool.

The graph build's numba kernels are compiled ``nogil`` and numpy's element-wise functions and gathers release
the GIL too, so plain threads run them side by side. numba's own ``parallel=True`` is not used: its workqueue
threading layer aborts when two threads of a process call parallel kernels at once, and the build may run
beside other work. Every output element is computed by exactly one chunk, with the arithmetic of the serial
loop, and chunk results are joined in chunk order: what a build returns does not depend on the thread count
(``tests/data/test_graph.py`` compares 1 and 2 threads byte for byte).

How many threads (:func:`build_threads`): the count :func:`using_threads` set, else torch's intra-op count when
torch is loaded (so the event chain's fixed count, :data:`domainpar.inference.arithmetic.CHAIN_THREADS`, and
``--threads`` hold for the build as for the rest of the chain, and a worker process set to one thread stays at
one), else ``OMP_NUM_THREADS`` when set (what :mod:`domainpar.workers` sets in its processes), else the cores
this process may run on; never more than :data:`MAX_THREADS`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from typing import TypeVar

import numpy as np

#: Most threads a build uses (the per-edge work is memory-bound: more threads than this gain nothing).
MAX_THREADS = 8
#: Fewest elements (edges, hits, triplet middle nodes...) worth a chunk of their own: below it a thread costs more
#: than it saves, so small events (and the test fixtures) run in the calling thread.
MIN_CHUNK = 1 << 15

_explicit: int | None = None
T = TypeVar("T")


def build_threads() -> int:
    """Threads the graph build uses now (see the module docstring)."""
    if _explicit is not None:
        return _explicit
    torch = sys.modules.get("torch")  # not imported here: a process that builds graphs need not load torch
    if torch is not None:
        wanted = torch.get_num_threads()
    elif os.environ.get("OMP_NUM_THREADS", "").strip().isdigit():
        wanted = int(os.environ["OMP_NUM_THREADS"])
    else:
        wanted = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(int(wanted), MAX_THREADS))


@contextlib.contextmanager
def using_threads(threads: int) -> Iterator[None]:
    """Build on ``threads`` threads inside the block (tests, benchmarks), whatever :func:`build_threads` says."""
    global _explicit
    if not (isinstance(threads, (int, np.integer)) and threads >= 1):
        raise ValueError(f"threads must be a positive integer (got {threads!r})")
    previous, _explicit = _explicit, int(threads)
    try:
        yield
    finally:
        _explicit = previous


def bounds(total: int, pieces: int | None = None, min_chunk: int = MIN_CHUNK) -> list[tuple[int, int]]:
    """``[(lo, hi), ...]`` consecutive ranges covering ``range(total)``: ``pieces`` of them (default: one per
    thread), fewer where a range would hold under ``min_chunk`` elements."""
    if pieces is None:
        pieces = build_threads()
    pieces = max(1, min(pieces, total // max(1, min_chunk)))
    edges = np.linspace(0, total, pieces + 1).astype(np.int64)
    return [(int(lo), int(hi)) for lo, hi in pairwise(edges)]


def weighted_bounds(cumulative: np.ndarray, pieces: int) -> list[tuple[int, int]]:
    """Consecutive ranges of items of about equal work: ``cumulative`` (n + 1,) is the running sum of the items'
    work (starting at 0); ranges are cut where it crosses multiples of total / pieces (empty ones dropped)."""
    n = cumulative.shape[0] - 1
    if n <= 0:
        return []
    targets = np.linspace(0, cumulative[-1], pieces + 1)[1:-1]
    cuts = np.concatenate([[0], np.searchsorted(cumulative, targets), [n]]).astype(np.int64)
    cuts = np.maximum.accumulate(np.minimum(cuts, n))
    return [(int(lo), int(hi)) for lo, hi in pairwise(cuts) if hi > lo]


def run(task: Callable[[int, int], T], ranges: Sequence[tuple[int, int]]) -> list[T]:
    """``[task(lo, hi) for lo, hi in ranges]``, on :func:`build_threads` threads; results in the order of ``ranges``.

    A pool hands the ranges out as threads free up (more ranges than threads balance uneven work); one thread or
    one range runs in the calling thread.
    """
    threads = min(build_threads(), len(ranges))
    if threads <= 1:
        return [task(lo, hi) for lo, hi in ranges]
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="domainpar-build") as pool:
        return list(pool.map(lambda span: task(*span), ranges))


__all__ = ["MAX_THREADS", "MIN_CHUNK", "bounds", "build_threads", "run", "using_threads", "weighted_bounds"]
