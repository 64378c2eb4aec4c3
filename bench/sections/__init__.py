"""The report's sections and what each one is given.

Every module ``bench/sections/<name>.py`` listed in :data:`ORDER` is one
section of the report. Its entry point is

    def section(ctx: Context) -> Section

which measures, and returns a :class:`~bench.common.report.Section`: a table
(rows of plain numbers and the columns to print), notes saying what was
measured on what, and ``skipped`` with one line when its inputs are absent.
A module may also set ``DEVICES`` (default ``("cpu",)``): the ``--device``
values it runs for. The runner (``python -m bench``) catches a section's
exception and reports it as failed, so one section never costs the others.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from bench.common import workloads
from bench.common.workloads import Workload

#: Sections in report order (``python -m bench --only NAME ...`` picks some).
ORDER = (
    "exactness",
    "memory",
    "speed",
    "strong_scaling",
    "communication",
    "reference",
    "preprocessing",
    "data",
    "inference",
    "export",
    "training",
    "faults",
    "scaling_inputs",
    "scaling",
    "gpu",
    "physics",
    "full_event",
    "full_event_sectors",
    "pixel_event",
)

T = TypeVar("T")


@dataclass
class Context:
    """What a section is given: the run's mode, device, places, and the shared graphs."""

    quick: bool
    """``--quick``: shrink graphs, repeats and part counts so the whole report takes minutes."""
    device: str
    """``--device``: ``"cpu"`` or ``"cuda"`` (sections run only for devices they list in ``DEVICES``)."""
    cache: Path
    """Directory of the graphs built during this run (kept with ``--cache``)."""
    out: Path
    """Directory of the report; a section may write figures here (named with :attr:`stem`)."""
    stem: str
    """File stem of this run's report (``<host>-<date>[-quick]``)."""
    shared: dict[str, Any] = field(default_factory=dict)
    """Figures one section measures and a later one reuses (memoised by name)."""
    graph: Path | None = None
    """``--graph``: the event graph of sections that measure one event (scaling) instead of the real full event."""
    hidden: int | None = None
    """``--hidden``: the model width of sections that take one (scaling); None: the section's default."""
    iterations: int | None = None
    """``--iterations``: message-passing iterations of sections that take them (scaling)."""

    def size(self, quick: T, full: T) -> T:
        """The quick or full value of a setting."""
        return quick if self.quick else full

    def real_full(self) -> Workload | None:
        """The real full event 21000's graph (built once per run), or None when the event is absent."""
        return self._memo("real_full", lambda: workloads.real_full(self.cache))

    def real_small(self) -> Workload:
        """The real labelled, subsampled event 1 shipped with the tests."""
        return self._memo("real_small", lambda: workloads.real_small(self.cache))

    def simulated(self, num_particles: int) -> Workload:
        """A labelled simulated event of ``num_particles`` particles on the real detector."""
        return self._memo(f"simulated-{num_particles}", lambda: workloads.simulated(self.cache, num_particles))

    def random(self, num_nodes: int, num_edges: int) -> Workload:
        """A random graph of the given size (hit-graph feature widths; see :func:`bench.common.workloads.random_graph`)."""
        return self._memo(f"random-{num_nodes}-{num_edges}", lambda: workloads.random_graph(self.cache, num_nodes, num_edges))

    def small(self) -> Workload:
        """The simulated graph the timing sections share (300 particles quick, 1000 full)."""
        return self.simulated(self.size(300, 1000))

    def _memo(self, key: str, build):
        if key not in self.shared:
            self.shared[key] = build()
        return self.shared[key]


def load(name: str) -> ModuleType:
    """The module of section ``name``."""
    if name not in ORDER:
        raise KeyError(f"unknown bench section {name!r} (expected one of {', '.join(ORDER)})")
    return importlib.import_module(f"bench.sections.{name}")


def devices(name: str) -> tuple[str, ...]:
    """The ``--device`` values section ``name`` runs for."""
    return tuple(getattr(load(name), "DEVICES", ("cpu",)))
