"""Hit graphs of a whole dataset: one ``event<id>.npz`` per raw event, in parallel, any shard.

Every event is built in its own worker process (:func:`domainpar.workers.run_items`), written atomically with
reproducible bytes, and an event that fails is reported by name while the others finish.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from domainpar.data.features import build_description
from domainpar.data.graph import GraphConfig, GraphStats, build_event_graph
from domainpar.data.graph_files import GRAPH_FORMATS, save_event_graph
from domainpar.errors import DomainparError
from domainpar.workers import POOL_MIN_SECONDS, ItemResult, failure_summary, file_megabytes, pool_size, run_items


def event_inputs(input_path: str | os.PathLike) -> list[Path]:
    """Event prefixes of ``input_path``: every event of a directory (sorted by event number), or one prefix.

    Raises:
        DomainparError: neither a directory of TrackML events nor an event prefix.
    """
    from domainpar.data.trackml import event_prefixes  # pandas loads where events are read, not in every rank

    input_path = Path(input_path)
    if input_path.is_dir():
        prefixes = event_prefixes(input_path)
        if not prefixes:
            raise DomainparError(f"{input_path}: expected TrackML event files event<digits>-<part>.csv[.gz] (found none)")
        return prefixes
    if input_path.parent.is_dir() and any(input_path.parent.glob(input_path.name + "-hits.csv*")):
        return [input_path]
    raise DomainparError(f"{input_path}: expected a directory of TrackML events or an event prefix (found neither)")


def graph_target(prefix: str | os.PathLike, out_dir: str | os.PathLike, fmt: str = "npz") -> Path:
    """Where the graph of raw event ``prefix`` goes: ``<out_dir>/event<id:09d>.<fmt>``."""
    from domainpar.data.trackml import event_id_of

    return Path(out_dir) / f"event{event_id_of(prefix):09d}.{fmt}"


#: Seconds one core takes to build an event's graph, per MB of its hits file as plain CSV (real event 21000: 4.8 MB,
#: 3.3-4 s); a gzipped file holds about three times its size (21000: 1.6 MB).
BUILD_SECONDS_PER_MB = 0.8
#: What a pool worker that writes PyG files imports on top (torch and torch_geometric: ~8 s of one core), in
#: seconds of work that a pool must be worth (:func:`domainpar.workers.pool_size`).
PYG_POOL_MIN_SECONDS = 16.0


def build_seconds(prefix: str | os.PathLike) -> float:
    """Estimated seconds of one core to build the graph of raw event ``prefix`` (from its hits file's size)."""
    plain = file_megabytes(f"{prefix}-hits.csv")
    packed = file_megabytes(f"{prefix}-hits.csv.gz")
    return BUILD_SECONDS_PER_MB * (plain + 3.0 * packed)


def build_workers(prefixes: Sequence[str | os.PathLike], cores: int, fmt: str = "npz") -> int:
    """Processes to build ``prefixes`` with when none are asked for: ``cores`` if the events are worth a pool, else 1."""
    enough = PYG_POOL_MIN_SECONDS if fmt == "pyg" else POOL_MIN_SECONDS
    return pool_size(cores, (build_seconds(prefix) for prefix in prefixes), enough)


def build_graph_file(
    prefix: str | os.PathLike,
    out_dir: str | os.PathLike,
    config: GraphConfig,
    skip_existing: bool = False,
    fmt: str = "npz",
    compress: bool = True,
) -> GraphStats | None:
    """Build and save the graph of one event (atomically, with the description of its features and cuts);
    None when ``skip_existing`` and it is there already.

    Args:
        prefix: the raw event.
        out_dir: output directory.
        config: the cuts.
        skip_existing: keep a graph already written (a resumed preparation).
        fmt: "npz" (domainpar's graph file) or "pyg" (a PyG Data file, :mod:`domainpar.data.pyg_files`).
        compress: deflate an ``.npz``'s members that shrink (False: all stored, for a file read back soon).
    """
    target = graph_target(prefix, out_dir, fmt)
    if skip_existing and target.is_file():
        return None
    graph, stats = build_event_graph(prefix, config)
    save_event_graph(graph, prefix, target, build_description(config), fmt, compress)
    return stats


def build_graph_files(
    prefixes: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    config: GraphConfig = GraphConfig(),
    *,
    workers: int = 1,
    progress: bool = True,
    skip_existing: bool = False,
    fmt: str = "npz",
    compress: bool = True,
) -> list[ItemResult]:
    """Build the graph of every event of ``prefixes`` into ``out_dir``, ``workers`` events at a time.

    Args:
        prefixes: raw event prefixes (e.g. a shard of :func:`event_inputs`).
        out_dir: output directory (created with the first graph).
        config: the cuts.
        workers: processes (1: in this process).
        progress: progress bar with events/s.
        skip_existing: keep graphs already in ``out_dir`` (resumed preparation).
        fmt: "npz" or "pyg".
        compress: as :func:`build_graph_file`'s.

    Returns:
        One :class:`ItemResult` per event, in order; ``value`` is its :class:`GraphStats`
        (None if skipped), ``error`` the one-line reason it failed.
    """
    return run_items(
        build_graph_file,
        [str(p) for p in prefixes],
        args=(str(out_dir), config, skip_existing, fmt, compress),
        names=[Path(p).name for p in prefixes],
        workers=workers,
        desc="build",
        progress=progress,
        temporaries_in=[out_dir],
    )


def build_dataset(
    input_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    config: GraphConfig = GraphConfig(),
    progress: bool = True,
    fmt: str = "npz",
    workers: int = 1,
    compress: bool = True,
) -> list[GraphStats]:
    """Build and save the graph of every event under ``input_path`` (a directory of TrackML events, or one event
    prefix); the other arguments as for :func:`build_graph_files`.

    Returns:
        One :class:`GraphStats` per event, in event order.

    Raises:
        DomainparError: no events; or, after every other event was built, one line naming the events that failed.
    """
    prefixes = event_inputs(input_path)
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise DomainparError(f"{out_dir}: output must be a directory (found a file)")
    # No mkdir here: save_graph creates the directory with the first graph, so an event that fails leaves nothing.
    if fmt not in GRAPH_FORMATS:
        raise DomainparError(f"--format must be one of {', '.join(GRAPH_FORMATS)} (got {fmt!r})")
    results = build_graph_files(prefixes, out_dir, config, workers=workers, progress=progress, fmt=fmt, compress=compress)
    summary = failure_summary(results)
    if summary is not None:
        if len(results) == 1:
            raise DomainparError(results[0].error)
        raise DomainparError(summary)
    return [r.value for r in results]
