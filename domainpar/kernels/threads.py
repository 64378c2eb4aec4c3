"""numba's parallel kernels beside torch: numba follows torch's intra-op thread count and never changes it.

numba starts its thread pool on the first parallel call. With its OpenMP
threading layer the start calls ``omp_set_num_threads(NUMBA_NUM_THREADS)``
(every core) in the calling thread: the very setting torch's intra-op
parallelism reads. A process set to one torch thread would then run torch on
every core, oversubscribing a multi-rank node and changing how torch splits
its reductions (a resumed run would not be bitwise the run it continued).
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
