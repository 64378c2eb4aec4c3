"""Plans of a whole dataset: one plan directory of self-sufficient part files per event graph, in parallel.

:func:`partition_files` is what ``domainpar partition`` and the preparation of
a training run call: every graph is read, partitioned and written
(:func:`domainpar.partition.io.save_plan`) in its own worker process, an event
that fails is reported by name while the others finish, and the output does
not depend on the number of workers (same bytes).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Sequence

from domainpar.data.event_graph import require_edges
from domainpar.data.graph_files import load_graph
from domainpar.errors import DomainparError
from domainpar.npzfile import archive_digest
from domainpar.partition.io import save_plan
from domainpar.partition.partitioners import partition_graph
from domainpar.partition.plot import plot_partition
from domainpar.partition.report import partition_report
from domainpar.workers import ItemResult, file_megabytes, pool_size, run_items


#: Seconds one core takes to read, partition (METIS, 4 parts) and write a graph, per MB of its file.
PARTITION_SECONDS_PER_MB = 0.035


def partition_seconds(graph_path: str | os.PathLike) -> float:
    """Estimated seconds of one core to partition the graph file ``graph_path`` (from its size)."""
    return PARTITION_SECONDS_PER_MB * file_megabytes(graph_path)


def partition_workers(graph_paths: Sequence[str | os.PathLike], cores: int) -> int:
    """Processes to partition ``graph_paths`` with when none are asked for: ``cores`` if worth a pool, else 1."""
    return pool_size(cores, (partition_seconds(path) for path in graph_paths))


def partition_file(
    graph_path: str,
    plan_dir: str,
    num_parts: int,
    method: str,
    seed: int,
    compress: bool = False,
    hidden: int = 64,
    dtype: str = "float32",
    plot_path: str | None = None,
    option: str = "--parts",
) -> dict[str, Any]:
    """Partition one graph file into ``plan_dir`` (atomically) and measure the plan (``option`` names the part
    count in messages).

    Returns:
        ``{"event_id", "plan", "report" (PartitionReport), "seconds_load", "seconds_partition",
        "seconds_plan", "seconds_write"}``.

    Raises:
        DomainparError: unreadable graph, a part count the graph cannot take, an unwritable plan.
    """
    start = time.perf_counter()
    graph = load_graph(graph_path)
    require_edges(graph.num_edges, graph_path, "partition")
    loaded = time.perf_counter()
    try:
        plan = partition_graph(graph, num_parts, method, seed=seed, option=option)
    except DomainparError as exc:
        raise DomainparError(f"{graph_path}: {exc}") from None
    planned = time.perf_counter()
    # The digest of the file read: a run given other graphs (a rebuild with other features) refuses this plan.
    save_plan(plan, plan_dir, graph, compress=compress, graph_digest=archive_digest(graph_path))
    written = time.perf_counter()
    if plot_path is not None:
        plot_partition(graph, plan, Path(plot_path))
    return {
        "event_id": graph.event_id,
        "plan": plan_dir,
        "report": partition_report(plan, hidden=hidden, dtype=dtype),
        "seconds_load": loaded - start,
        "seconds_partition": plan.seconds_partition,
        "seconds_plan": plan.seconds_plan,
        "seconds_write": written - planned,
    }


def _partition_item(item: tuple[str, str, str | None], num_parts, method, seed, compress, hidden, dtype) -> dict[str, Any]:
    graph_path, plan_dir, plot_path = item
    return partition_file(graph_path, plan_dir, num_parts, method, seed, compress, hidden, dtype, plot_path)


def partition_files(
    files: Sequence[str | os.PathLike],
    plan_dirs: Sequence[str | os.PathLike],
    num_parts: int,
    method: str = "metis",
    *,
    seed: int = 0,
    compress: bool = False,
    hidden: int = 64,
    dtype: str = "float32",
    plot_paths: Sequence[str | os.PathLike | None] | None = None,
    workers: int = 1,
    progress: bool = True,
    should_stop=None,
    on_result=None,
) -> list[ItemResult]:
    """Partition every graph of ``files`` into the plan directory beside it in ``plan_dirs``.

    Args:
        files: graph files.
        plan_dirs: one plan directory per file (``<out>/event<id:09d>`` in ``domainpar partition`` output).
        num_parts: P.
        method: "metis", "geometric" or "sectors".
        seed: METIS seed.
        compress: deflate the part files.
        hidden, dtype: for the report's bytes per step.
        plot_paths: one PNG per file (or None entries) for a picture of the partition.
        workers: processes (1: in this process).
        progress: progress bar with events/s.
        should_stop, on_result: see :func:`domainpar.workers.run_items`.

    Returns:
        One :class:`ItemResult` per file, in order; ``value`` is :func:`partition_file`'s record.
    """
    plots = list(plot_paths) if plot_paths is not None else [None] * len(files)
    items = [(str(f), str(d), None if p is None else str(p)) for f, d, p in zip(files, plan_dirs, plots)]
    return run_items(
        _partition_item,
        items,
        args=(num_parts, method, seed, compress, hidden, dtype),
        names=[Path(f).name for f in files],
        workers=workers,
        desc="partition",
        progress=progress,
        should_stop=should_stop,
        on_result=on_result,
        temporaries_in=[Path(d).parent for d in plan_dirs] + [Path(p).parent for p in plots if p is not None],
    )
