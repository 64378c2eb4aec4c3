"""Freed memory stays in the process for the next event, so large arrays are not faulted in page by page again.

glibc's ``malloc`` serves every block above its mmap threshold with a mapping of its own and unmaps it when the
block is freed. A full event's chain allocates and frees gigabytes of such blocks, so every event touches fresh
pages again, each first touch a page fault (``docs/performance.md``). :func:`keep_freed_memory` raises glibc's
mmap threshold to 1 GiB and its trim threshold to 2 GiB in this process (``mallopt``), and exports the same
settings (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``) to the processes it starts. The cost is that a
process keeps its peak heap until it exits, which the commands' memory checks already plan for. The commands that
run the event chain call it (``domainpar.cli.main.KEEPS_FREED_MEMORY``); training does not, because its
peak-memory figures are resident-set high-water marks, which memory kept for reuse would raise.

It also stops numpy advising the kernel to back its large arrays with transparent huge pages, in this process
and, through ``NUMPY_MADVISE_HUGEPAGE=0``, in the processes it starts: where the kernel compacts memory to serve
such a fault, a fresh process's first event stalls on it.

Where the C library is not glibc the thresholds do not change. A user's own ``MALLOC_*`` and
``NUMPY_MADVISE_HUGEPAGE`` settings win.
"""

from __future__ import annotations

import ctypes
import os
import sys

#: Blocks up to this size come from the heap, and go back to it when freed (bytes).
MMAP_THRESHOLD = 1 << 30
#: Free memory at the top of the heap is returned to the system only beyond this (bytes; the most mallopt takes).
TRIM_THRESHOLD = 2**31 - 1
#: glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_SETTINGS = {"MALLOC_MMAP_THRESHOLD_": (_M_MMAP_THRESHOLD, MMAP_THRESHOLD), "MALLOC_TRIM_THRESHOLD_": (_M_TRIM_THRESHOLD, TRIM_THRESHOLD)}

#: numpy's switch of its huge-page advice (read when numpy is imported: what the processes started here see).
NUMPY_HUGEPAGE = "NUMPY_MADVISE_HUGEPAGE"

_done: bool | None = None


def _glibc() -> ctypes.CDLL | None:
    """This process's C library when it is glibc (it has ``mallopt`` and ``gnu_get_libc_version``), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)  # the symbols this process has loaded: its C library's among them
        libc.gnu_get_libc_version  # noqa: B018 - musl has mallopt too, as a stub that does nothing, but not this
        libc.mallopt  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def _no_numpy_hugepage_advice() -> None:
    """numpy stops advising huge pages in this process and the ones it starts, unless the environment says."""
    if NUMPY_HUGEPAGE in os.environ:
        return  # the user's choice (numpy read it at import), or a parent's that this process already follows
    import numpy

    core = getattr(numpy, "_core", None) or getattr(numpy, "core", None)  # numpy 2, numpy 1
    switch = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    if switch is not None:
        switch(False)
        os.environ[NUMPY_HUGEPAGE] = "0"


def keep_freed_memory() -> bool:
    """Keep freed blocks up to :data:`MMAP_THRESHOLD` in this process and in the processes it starts, and fault
    fresh ones in without huge-page advice (the module docstring).

    Idempotent. Each setting the environment already holds (the user's, or a parent's) is left as it is, in the
    environment and in this process (glibc and numpy read it at start).

    Returns:
        Whether both glibc thresholds hold in this process (False where the C library is not glibc, or refused one).
    """
    global _done
    if _done is None:
        _no_numpy_hugepage_advice()
        libc = _glibc()
        held = libc is not None
        for name, (parameter, value) in _SETTINGS.items():
            if not held or name in os.environ:
                continue
            held = libc.mallopt(ctypes.c_int(parameter), ctypes.c_int(value)) == 1
            if held:
                os.environ[name] = str(value)
        _done = held
    return _done


__all__ = ["MMAP_THRESHOLD", "NUMPY_HUGEPAGE", "TRIM_THRESHOLD", "keep_freed_memory"]
