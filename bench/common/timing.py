"""Timing: the one way the benchmarks time things.

* :func:`median_seconds` — median wall (and process CPU) seconds of repeated
  calls after warm-up calls;
* :func:`alternate` — several configurations timed in alternating rounds, so
  that slow phases of a shared machine hit all of them alike (ratios taken
  from one such run are what the report compares);
* :func:`load_average` — the 1/5/15-minute load averages, recorded with every
  timed comparison.

On CUDA, :func:`median_seconds` synchronises the device around each call, so
the figure is the device's time, not the launch time.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class Timing:
    """Repeated timings of one callable."""

    seconds: float
    """Median wall seconds."""
    cpu_seconds: float
    """Median process CPU seconds (user + system of this process; what a busy shared machine distorts least)."""
    samples: list[float] = field(default_factory=list)
    """Every timed wall-clock sample, in order."""
    cpu_samples: list[float] = field(default_factory=list)
    """Every timed CPU sample, in order."""
    result: Any = None
    """What the last timed call returned."""


def _sync(device: Any) -> None:
    if device is not None and str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def median_seconds(fn: Callable[[], Any], repeats: int, warmup: int = 1, device: Any = None) -> Timing:
    """Median wall and CPU time of ``fn()`` over ``repeats`` calls after ``warmup`` untimed calls.

    Args:
        fn: the work; called ``warmup + repeats`` times.
        repeats: timed calls (at least 1).
        warmup: untimed calls first (thread pools, allocator caches, numba/JIT compilation).
        device: a CUDA device to synchronise before and after every timed call (None: CPU).
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1 (got {repeats})")
    for _ in range(warmup):
        fn()
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        _sync(device)
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        _sync(device)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return Timing(statistics.median(walls), statistics.median(cpus), walls, cpus, result)


def alternate(fns: dict[str, Callable[[], Any]], rounds: int, warmup: int = 1, device: Any = None) -> dict[str, Timing]:
    """Time every configuration once per round, the rounds one after another (A B C A B C ...).

    Args:
        fns: configuration name → one timed unit of work (a training step).
        rounds: timed calls per configuration.
        warmup: untimed calls of each configuration before the first round.
        device: CUDA device to synchronise around each call (None: CPU).

    Returns:
        name → :class:`Timing` over its ``rounds`` samples.
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    walls: dict[str, list[float]] = {name: [] for name in fns}
    cpus: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            _sync(device)
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            _sync(device)
            walls[name].append(time.perf_counter() - wall)
            cpus[name].append(time.process_time() - cpu)
    return {
        name: Timing(statistics.median(walls[name]), statistics.median(cpus[name]), walls[name], cpus[name])
        for name in fns
    }


def load_average() -> list[float]:
    """The 1, 5 and 15-minute load averages now (what ``uptime`` prints), rounded to 0.01."""
    return [round(v, 2) for v in os.getloadavg()]
