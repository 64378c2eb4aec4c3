"""Peak memory of one rank: the figure ``metrics.jsonl`` reports as ``peak_memory_bytes``.

On CUDA it is the caching allocator's high-water mark; on CPU the kernel's
resident-set high-water mark of this process (``VmHWM``), per address space,
so a spawned rank does not report its parent's peak as ``ru_maxrss`` would.
Both can be reset, so every epoch has its own window. The benchmarks use the
RSS primitives here too (``bench/common/memory.py``).
"""

from __future__ import annotations

import re
import resource
from pathlib import Path

import torch


def _proc_status_kib(key: str) -> int | None:
    """A ``kB`` line of /proc/self/status (None off Linux or where the line is missing)."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    match = re.search(rf"^{key}:\s+(\d+) kB", text, re.MULTILINE)
    return None if match is None else int(match.group(1))


def current_rss_bytes() -> int:
    """Resident set size of this process now (0 where the kernel does not say)."""
    kib = _proc_status_kib("VmRSS")
    return 0 if kib is None else kib * 1024


def peak_rss_bytes() -> int:
    """High-water mark of the resident set since start or the last :func:`reset_peak_rss`.

    Falls back to ``ru_maxrss`` (whole-life peak) where /proc is missing.
    """
    kib = _proc_status_kib("VmHWM")
    if kib is None:
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    return kib * 1024


def reset_peak_rss() -> bool:
    """Reset the kernel's RSS high-water mark to the current RSS (Linux ≥ 4.0); False if refused."""
    try:
        # "5" in clear_refs resets VmHWM to the current RSS.
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak-memory window for ``device`` (the trainer does it per epoch)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        reset_peak_rss()


def peak_memory_bytes(device: torch.device) -> int:
    """Peak CUDA allocation on ``device``, or on CPU the peak resident set, since the last reset."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return peak_rss_bytes()


__all__ = ["current_rss_bytes", "peak_memory_bytes", "peak_rss_bytes", "reset_peak_memory", "reset_peak_rss"]
