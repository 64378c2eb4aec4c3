"""Simulated datasets: events written as the challenge's files, deterministic for (seed, event id)."""

from __future__ import annotations

import hashlib
import itertools
import os
from dataclasses import dataclass
from pathlib import Path

from domainpar.data.trackml import write_event
from domainpar.errors import DomainparError
from domainpar.progress import progress as progress_display
from domainpar.sim.config import SimulationConfig
from domainpar.sim.event import simulate_event
from domainpar.workers import FailureTally, available_cores, memory_bytes, pool_size, process_memory_limit, run_items


@dataclass(frozen=True)
class Simulated:
    """What :func:`simulate_events` wrote: ``count`` events, ``first`` .. ``last`` (their prefixes)."""

    count: int
    first: Path
    last: Path


def simulate_events(
    out_dir: str | os.PathLike,
    num_events: int,
    config: SimulationConfig | None = None,
    seed: int = 0,
    first_event_id: int = 1,
    progress: bool = True,
    compress: bool = True,
    workers: int = 1,
) -> Simulated:
    """Simulate ``num_events`` events and write them as ``event{id:09d}-{part}.csv.gz``, in memory that does not
    grow with ``num_events`` (the events are handed to the workers as they free up, the results are tallied).

    Args:
        out_dir: output directory (created if needed).
        num_events: number of events (at least 1).
        config: simulation parameters (default :class:`~domainpar.sim.config.SimulationConfig`).
        seed: base seed; event ``i`` uses the stream (seed, event_id).
        first_event_id: event number of the first event; the others follow consecutively.
        progress: show progress on stderr (a bar on a terminal, a line every 30 s in a log).
        compress: gzip the CSV files (``.csv.gz``); False writes plain ``.csv``.
        workers: events simulated in parallel processes (1: in this process). Each event draws from its own
            stream, so the files do not depend on it (same bytes).

    Raises:
        DomainparError: a bad argument, or an event that could not be simulated (after every other was written).
        MachineFault: a worker ran out of memory or disk space, or was killed.
    """
    if num_events < 1:
        raise DomainparError(f"num_events must be at least 1 (got {num_events})")
    if first_event_id < 0:
        raise DomainparError(f"first_event_id must be non-negative (got {first_event_id})")
    if workers < 1:
        raise DomainparError(f"workers must be at least 1 (got {workers})")
    config = SimulationConfig() if config is None else config
    events = range(first_event_id, first_event_id + num_events)  # a range: nothing made per event up front
    if workers == 1 or num_events <= 1:
        for event_id in progress_display(events, desc="simulate", unit="event", enabled=progress):
            simulate_event_files(event_id, out_dir, config, seed, compress)
    else:
        tally = FailureTally()
        run_items(
            simulate_event_files,
            events,
            args=(str(out_dir), config, seed, compress),
            names=lambda index: f"event{events[index]:09d}",
            workers=min(workers, num_events),
            desc="simulate",
            progress=progress,
            on_result=tally.add,
            temporaries_in=[out_dir],
            keep=False,
        )
        summary = tally.summary()
        if summary is not None:
            raise DomainparError(summary)
    return Simulated(num_events, event_prefix(out_dir, events[0]), event_prefix(out_dir, events[-1]))


def simulate_dataset(
    out_dir: str | os.PathLike,
    num_events: int,
    config: SimulationConfig | None = None,
    seed: int = 0,
    first_event_id: int = 1,
    progress: bool = True,
    compress: bool = True,
    workers: int = 1,
) -> list[Path]:
    """:func:`simulate_events` (raising what it raises), returning the prefixes of the events written, in event order
    (none for 0 events)."""
    if num_events < 0:
        raise DomainparError(f"num_events must be non-negative (got {num_events})")
    if num_events == 0:
        return []
    simulate_events(out_dir, num_events, config, seed, first_event_id, progress, compress, workers)
    return [event_prefix(out_dir, event_id) for event_id in range(first_event_id, first_event_id + num_events)]


def event_prefix(out_dir: str | os.PathLike, event_id: int) -> Path:
    """The prefix of event ``event_id``'s files in ``out_dir`` (what :func:`~domainpar.data.trackml.write_event`
    returns)."""
    return Path(out_dir) / f"event{event_id:09d}"


def _gib(size: int) -> str:
    return f"{size / 2**30:.3g} GiB"


def check_event_memory(per_event: int, particles: str) -> None:
    """Refuse a simulation one event of which this machine (or one process, ``ulimit -v``) cannot hold.

    Args:
        per_event: the most memory one event takes while it is simulated
            (:meth:`~domainpar.sim.config.SimulationConfig.event_peak_bytes`).
        particles: the option that sets its size as the message names it (``"--particles 1000000"``).

    Raises:
        DomainparError: naming the option, the memory needed and the limit.
    """
    limits = [memory_bytes(), (process_memory_limit(), "this process's ulimit -v")]
    for limit, whose in (limit for limit in limits if limit is not None and limit[0]):
        if per_event > limit:
            raise DomainparError(
                f"{particles}: an event needs about {_gib(per_event)} of memory while it is simulated, more than "
                f"{whose} {_gib(limit)}; simulate fewer particles per event"
            )


#: Seconds one core takes to simulate and write an event, per particle from the collisions (2 events of 2,000
#: particles: 1.6 s each; of 8,000: 4.5 s each).
SIMULATION_SECONDS_PER_PARTICLE = 0.6e-3


def simulation_seconds(config: SimulationConfig) -> float:
    """Estimated seconds of one core to simulate one event of ``config``."""
    return SIMULATION_SECONDS_PER_PARTICLE * config.num_particles


def simulation_workers(
    per_event: int, particles: str, workers: int | None, num_events: int, default: int | None = None, *, seconds_each: float
) -> int:
    """The processes to simulate with: ``workers`` as given, else ``default`` (the cores available) where the events
    are worth a pool (:func:`domainpar.workers.pool_size`), as many as this machine's memory holds events at a time.

    Args:
        per_event: the most memory one event takes while it is simulated.
        particles: the option that sets an event's size as messages name it.
        workers: ``--workers`` as given (None: the default).
        num_events: events to simulate (no more workers than events are started).
        default: the workers when none are given (None: the cores available).
        seconds_each: one event's estimated seconds (:func:`simulation_seconds`).

    Raises:
        DomainparError: one event does not fit (:func:`check_event_memory`), or ``workers`` events at a time do not.
    """
    check_event_memory(per_event, particles)
    total = memory_bytes()
    fit = max(1, total[0] // per_event) if total else None
    if workers is None:
        wanted = pool_size(default if default is not None else available_cores(), itertools.repeat(seconds_each, num_events))
        return max(1, min(wanted, fit or wanted))
    at_once = min(workers, num_events)
    if fit is not None and at_once > fit:
        raise DomainparError(
            f"--workers {workers} with {particles}: {at_once} events at a time need about {_gib(at_once * per_event)} "
            f"of memory, more than {total[1]} {_gib(total[0])}; at most {fit} fit"
        )
    return workers


def simulate_event_files(event_id: int, out_dir: str | os.PathLike, config: SimulationConfig, seed: int, compress: bool) -> Path:
    """Simulate one event and write its four files (a worker's item in :func:`simulate_dataset`); its prefix."""
    return write_event(out_dir, event_id, simulate_event(config, event_id, seed), compress=compress)


def simulator_digest(root: str | os.PathLike | None = None) -> str:
    """sha256 of every file of the simulator's package (:mod:`domainpar.sim`: sources and resources, with their
    paths), so that a cache of simulated events is keyed on the simulator that made them.

    Args:
        root: the package directory (default: this package's).
    """
    root = Path(__file__).resolve().parent if root is None else Path(root)
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


__all__ = ["Simulated", "check_event_memory", "event_prefix", "simulation_workers", "simulate_dataset", "simulate_events", "simulation_seconds", "simulator_digest"]
