"""numba's parallel kernels beside torch: numba follows torch's intra-op thread count and never changes it.

numba starts its thread pool on the first parallel call (or ``numba.set_num_threads``).
With its OpenMP threading layer, which it picks wherever the OpenMP runtime torch
uses is loaded, the start calls ``omp_set_num_threads(NUMBA_NUM_THREADS)`` (every
core) in the calling thread: the very setting torch's intra-op parallelism reads.
A process that had run ``torch.set_num_threads(1)`` (``--threads 1``; one thread
per spawned rank) then ran torch on every core from its first kernel call on.
That oversubscribes the cores of a multi-rank node, and it changes how torch
splits its reductions, so a result depended on whether the process had called
a numba kernel before (a resumed run was not bitwise the run it continued).
:func:`follow_torch_threads` puts torch's count back wherever numba moved it.
"""

from __future__ import annotations

import numba
import torch


def follow_torch_threads() -> int:
    """Give numba's next parallel kernels torch's intra-op thread count (within numba's pool).

    Call it before every parallel numba kernel (it costs two calls to
    ``torch.get_num_threads``). Starting numba's pool here, the first call, may
    reset the OpenMP thread count torch reads; it is set back at once.

    Returns:
        The thread count numba's kernels will use.
    """
    wanted = torch.get_num_threads()
    threads = max(1, min(wanted, numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(threads)
    if torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)
    return threads


__all__ = ["follow_torch_threads"]
