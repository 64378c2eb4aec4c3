"""Seconds numba spends compiling inside a block: what a stage's timing leaves out to be a warm figure.

A kernel is compiled once per machine and type signature, then read from numba's on-disk cache, so the first event
a fresh installation runs compiles inside its stages. :func:`compile_clock` measures that compilation so the timing
can leave it out and say so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class CompileClock:
    """Compilation seen by one :func:`compile_clock` block (final when the block ends)."""

    seconds: float = 0.0
    """Wall time of the outermost compilations (a kernel's callees compile inside it and are not added again)."""
    kernels: int = 0
    """Outermost compilations."""


@contextlib.contextmanager
def compile_clock() -> Iterator[CompileClock]:
    """Measure numba's compilation inside the block (any thread's: the build compiles on its pool's threads)."""
    from numba.core import event

    clock = CompileClock()
    with event.install_recorder("numba:compile") as recorder:
        yield clock
    depth, started = 0, 0.0
    for timestamp, record in recorder.buffer:
        if record.is_start:
            if depth == 0:
                started = timestamp
            depth += 1
        elif record.is_end and depth > 0:
            depth -= 1
            if depth == 0:
                clock.seconds += timestamp - started
                clock.kernels += 1


__all__ = ["CompileClock", "compile_clock"]
